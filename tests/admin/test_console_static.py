"""The web console's files as the admin listener serves them (`weirmq.admin.console`): the
page at ``/``, its assets under ``/console/`` with their types and headers, and nothing
else: no other file, however its name is spelt, and no address outside the listener
referenced by any asset (the console must work with no internet).

Most tests serve only the console's routes (an aiohttp application of their own, on a
loopback port through aiohttp's test server), so they test this module alone; the last one
checks that the admin application itself serves the console.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from html.parser import HTMLParser

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from weirmq.admin import console
from weirmq.broker.core import Broker

TIMEOUT_S = 30.0
Client = TestClient[web.Request, web.Application]

EXPECTED_TYPES = {
    "/": "text/html",
    "/console/index.html": "text/html",
    "/console/console.js": "text/javascript",
    "/console/console.css": "text/css",
    "/console/icon.svg": "image/svg+xml",
}
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
"""A name, not an address: SVG documents and createElementNS need it, and no browser
fetches it."""
MARKUP_OR_CODE = re.compile(r"\.(?:inner|outer)HTML\s*=|insertAdjacentHTML|document\.write|eval\(")
URL_PATTERN = re.compile(rb"(?i)\b(?:https?|wss?|ftp):/{2}[^\s\"'`)<>]*")


def run(scenario: Callable[[Client], Awaitable[None]], app: web.Application | None = None) -> None:
    async def main() -> None:
        served = app
        if served is None:
            served = web.Application()
            served.add_routes(console.routes())
        async with TestClient(TestServer(served)) as client:
            await scenario(client)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


def test_the_page_is_served_at_the_root_with_its_headers() -> None:
    async def scenario(client: Client) -> None:
        response = await client.get("/")
        assert response.status == 200
        assert response.content_type == "text/html" and response.charset == "utf-8"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        body = await response.text()
        assert body == (console.ASSETS / "index.html").read_text()
        assert '<script type="module" src="/console/console.js">' in body

    run(scenario)


@pytest.mark.parametrize(("path", "content_type"), sorted(EXPECTED_TYPES.items()))
def test_every_asset_has_its_type(path: str, content_type: str) -> None:
    async def scenario(client: Client) -> None:
        response = await client.get(path)
        assert response.status == 200
        assert response.content_type == content_type
        assert response.headers["Cache-Control"] == "no-cache"
        assert "Content-Security-Policy" in response.headers
        head = await client.head(path)
        assert head.status == 200 and head.content_type == content_type

    run(scenario)


def test_every_shipped_file_is_served() -> None:
    """A file added to the directory with a suffix the console does not know would be
    a 404 in the browser; this keeps the list of types and the directory in step."""
    shipped = {path.name for path in console.ASSETS.iterdir()}
    assert shipped == console.asset_names()
    assert {"index.html", "console.js", "console.css"} <= shipped


@pytest.mark.parametrize(
    "raw_path",
    [
        "/console/nothing.js",
        "/console/",
        "/console/console.js/",
        "/console/../console.py",
        "/console/..%2Fconsole.py",
        "/console/%2e%2e%2fconsole.py",
        "/console/%2E%2E/http.py",
        "/console/..%5Chttp.py",
        "/console/.%2Findex.html",
        "/console/%2Fetc%2Fpasswd",
        "/console/index.html%00.js",
        "/console/INDEX.HTML",
        "/console//etc/passwd",
        "/console/console",
        "/console.py",
        "/../console.py",
        "/index.html",
    ],
)
def test_anything_else_is_not_found(raw_path: str) -> None:
    async def scenario(client: Client) -> None:
        url = client.make_url("").join(URL(raw_path, encoded=True))
        response = await client.session.get(url, allow_redirects=False)
        body = await response.read()
        assert response.status == 404, (raw_path, response.status)
        assert b"from __future__" not in body and b"root:" not in body

    run(scenario)


def test_no_asset_references_another_site() -> None:
    for path in sorted(console.ASSETS.iterdir()):
        found = {m.decode() for m in URL_PATTERN.findall(path.read_bytes())}
        assert found <= {SVG_NAMESPACE}, f"{path.name} references {sorted(found)}"


class _Page(HTMLParser):
    """What index.html loads, and whether it holds anything inline the policy refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and not named.get("src"):
            self.inline.append("a script without src")
        if tag == "style" or "style" in named:
            self.inline.append(f"a style in <{tag}>")
        self.inline.extend(f"{name} on <{tag}>" for name in named if name.startswith("on"))
        for name in ("src", "href"):
            value = named.get(name)
            if value and value.startswith("/"):
                self.loaded.append(value)


def test_the_page_loads_only_shipped_files_and_holds_nothing_inline() -> None:
    page = _Page()
    page.feed((console.ASSETS / "index.html").read_text())
    assert page.inline == []
    assert page.loaded, "index.html loads nothing?"
    for path in page.loaded:
        assert path.startswith("/console/") and path.removeprefix("/console/") in (
            console.asset_names()
        ), path
    script = (console.ASSETS / "console.js").read_text()
    # Data from the broker enters the page as text only, never parsed as markup or code.
    assert MARKUP_OR_CODE.search(script) is None


def test_the_admin_application_serves_the_console(broker: Broker) -> None:
    from weirmq.admin import create_app

    async def scenario(client: Client) -> None:
        response = await client.get("/")
        assert response.status == 200 and response.content_type == "text/html"
        script = await client.get("/console/console.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        missing = await client.get("/console/nothing.css")
        assert missing.status == 404 and missing.content_type == "application/json"
        assert (await missing.json())["error"]["code"] == "NOT_FOUND"

    run(scenario, create_app(broker))
