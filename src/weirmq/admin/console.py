"""The web console: a person's view of the broker, served by the admin listener at ``/``.

Theory of operation
-------------------
The console is three static files shipped in the package (``weirmq/admin/console/``):
``index.html``, ``console.js`` and ``console.css``. There is no build step and nothing is
fetched from anywhere but this listener: the page draws its own charts (SVG) and reads the
broker through the admin API's JSON endpoints, as any other client does, so the console
can show nothing that the API does not, and the API's checks (Host, Origin, JSON bodies,
the token) cover the console too. The page routes by the URL's fragment (``#/topics/x``),
so every page is a link and the server needs exactly two routes:

    GET /                    index.html
    GET /console/{file}      one of the files in the directory, by exact name

A file is served only if its name is one of the directory's own entries with a known
suffix; a name with a slash, a dot-dot or anything else is simply not among them (404),
so no path built from the request ever reaches the file system. Every answer carries
``Cache-Control: no-cache`` (a browser revalidates, so an upgraded broker never runs an
old script against a new API) and a Content-Security-Policy that allows scripts, styles
and requests of this origin only, and no inline script: should the page ever show
something a client wrote (a record's key, a topic's config) as markup by mistake, the
browser still refuses to run it.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

ASSETS = Path(__file__).with_name("console")
"""The directory of the console's files (flat: no subdirectories)."""

CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}
"""The suffixes served, and their types; a file with another suffix is never served."""

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

HEADERS: dict[str, str] = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""Sent with every file of the console."""

INDEX = "index.html"


def routes() -> list[web.RouteDef]:
    """The console's routes, added to the admin application."""
    return [
        web.get("/", get_index),
        web.get("/console/{file}", get_asset),
    ]


def asset_names() -> frozenset[str]:
    """The names that may be served: the directory's files with a known suffix."""
    return frozenset(
        path.name
        for path in ASSETS.iterdir()
        if path.is_file() and path.suffix in CONTENT_TYPES and not path.name.startswith(".")
    )


async def get_index(request: web.Request) -> web.Response:
    return _file(INDEX)


async def get_asset(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if name not in asset_names():
        raise web.HTTPNotFound()
    return _file(name)


def _file(name: str) -> web.Response:
    path = ASSETS / name
    assert path.parent == ASSETS, name  # only names listed by asset_names() get here
    return web.Response(
        body=path.read_bytes(),
        headers={**HEADERS, "Content-Type": CONTENT_TYPES[path.suffix]},
    )
