"""Who may ask the admin API: the Host, Origin and Content-Type checks and CORS preflights.

The API has no authentication and listens on loopback, where every web page the operator's
browser opens can reach it. These tests send what such a page makes a browser send (a form
or text/plain POST, a request under a rebound DNS name, a preflight from another origin)
and check that it is refused with the API's error shape and changes nothing, while what
curl, the CLI and Prometheus send still works. The first tests check the pure functions
behind the middleware; the rest serve `create_app` on a loopback port (aiohttp's test
server), as test_http.py does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admin_support import bearer, make_broker
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from weirmq.admin import create_app
from weirmq.admin.http import Authority, allowed_hosts, host_allowed, parse_authority, same_origin
from weirmq.broker.core import Broker
from weirmq.settings import Settings, SettingsError, load_settings

TIMEOUT_S = 30.0
Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
EVIL = "http://evil.example"


def run(broker: Broker, scenario: Callable[[Client, int], Awaitable[None]]) -> None:
    """Serve `broker`'s admin application on 127.0.0.1 and run `scenario(client, port)`."""

    async def main() -> None:
        app = create_app(broker)
        # The token goes with every request: what is checked here is the rest.
        server = TestServer(app, host="127.0.0.1")
        async with TestClient(server, headers=bearer(app)) as client:
            assert client.port is not None
            await scenario(client, client.port)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


async def refused(response: aiohttp.ClientResponse, status: int, code: str) -> str:
    """The API's error shape with this status and code, and no CORS allowance; returns
    the message."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code, body
    assert not cors_headers(response)
    return str(body["error"]["message"])


def cors_headers(response: aiohttp.ClientResponse) -> list[str]:
    return [name for name in response.headers if name.lower().startswith("access-control-")]


# --- the rules, without a server ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9644", Authority("127.0.0.1", 9644)),
        ("LocalHost", Authority("localhost", None)),
        ("[::1]:9644", Authority("::1", 9644)),
        ("[::1]", Authority("::1", None)),
        ("admin.example.com:443", Authority("admin.example.com", 443)),
    ],
)
def test_authorities_are_parsed(text: str, expected: Authority) -> None:
    assert parse_authority(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "a b", "user@host", "::1", "[::1", "host:99999", "host:", "host:x", "host/path", "a..b"],
)
def test_what_is_no_authority(text: str) -> None:
    assert parse_authority(text) is None


def allowed(host: str, local: str | None, named: tuple[str, ...] = ()) -> bool:
    authority = parse_authority(host)
    assert authority is not None
    return host_allowed(authority, local, allowed_hosts(named))


def test_the_address_a_connection_arrived_on_is_a_name_of_the_api() -> None:
    assert allowed("10.0.0.5:9644", "10.0.0.5")
    assert allowed("10.0.0.5:19644", "10.0.0.5")  # a port mapping changes the port
    assert allowed("[fd00::5]:9644", "fd00::5")
    assert not allowed("10.0.0.6:9644", "10.0.0.5")
    assert not allowed("evil.example:9644", "10.0.0.5")


def test_loopback_names_only_for_a_connection_on_loopback() -> None:
    for host in ("localhost:9644", "127.0.0.1:9644", "[::1]:9644", "localhost"):
        assert allowed(host, "127.0.0.1"), host
        assert allowed(host, "::1"), host
        assert not allowed(host, "10.0.0.5"), host
    # A DNS-rebinding page's name points at 127.0.0.1 too, but is not ours.
    assert not allowed("evil.example:9644", "127.0.0.1")
    assert not allowed("localhost.evil.example:9644", "127.0.0.1")
    assert not allowed("localhost:9644", None)  # no local address known: only named hosts


def test_named_hosts_with_and_without_a_port() -> None:
    named = ("weirmq.internal", "proxy.example:8080", "[fd00::9]")
    assert allowed("weirmq.internal", "10.0.0.5", named)
    assert allowed("WEIRMQ.internal:1234", "10.0.0.5", named)
    assert allowed("proxy.example:8080", "10.0.0.5", named)
    assert not allowed("proxy.example:9090", "10.0.0.5", named)
    assert not allowed("proxy.example", "10.0.0.5", named)
    assert allowed("[fd00::9]:9644", None, named)
    assert not allowed("other.internal", "10.0.0.5", named)


def test_same_origin_is_the_host_the_request_names() -> None:
    host = Authority("127.0.0.1", 9644)
    assert same_origin("http://127.0.0.1:9644", host)
    assert not same_origin("http://127.0.0.1:9645", host)
    assert not same_origin("http://localhost:9644", host)  # another origin, to a browser
    assert not same_origin(EVIL, host)
    assert not same_origin("null", host)  # a sandboxed frame or a file:// page
    assert not same_origin("http://127.0.0.1:9644/path", host)
    proxied = Authority("admin.example.com", None)  # behind a TLS proxy keeping the Host
    assert same_origin("https://admin.example.com", proxied)
    assert same_origin("https://admin.example.com:443", proxied)
    assert not same_origin("http://admin.example.com:8080", proxied)
    assert same_origin("http://admin.example.com", Authority("admin.example.com", 80))


def test_the_allowed_hosts_setting(tmp_path: Path) -> None:
    assert Settings().admin_allowed_hosts == ()
    environ = {"WEIRMQ_ADMIN_ALLOWED_HOSTS": " Admin.Example.com, 10.0.0.5:19644,[::1] ,"}
    assert load_settings(environ=environ).admin_allowed_hosts == (
        "admin.example.com",
        "10.0.0.5:19644",
        "[::1]",
    )
    toml = tmp_path / "broker.toml"
    toml.write_text('admin_allowed_hosts = ["a.example", "b.example:8080"]\n')
    assert load_settings(toml, environ={}).admin_allowed_hosts == ("a.example", "b.example:8080")
    as_list: Any = ["x.example"]  # what a test or a TOML file may hand over
    assert Settings(admin_allowed_hosts=as_list).admin_allowed_hosts == ("x.example",)
    for bad in ("http://a.example", "a.example/admin", "::1", "a.example:70000", "*"):
        with pytest.raises(SettingsError, match="admin_allowed_hosts"):
            load_settings(environ={"WEIRMQ_ADMIN_ALLOWED_HOSTS": bad})
    with pytest.raises(SettingsError, match="admin_allowed_hosts"):
        Settings(admin_allowed_hosts=3)  # type: ignore[arg-type]


# --- served ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_foreign_host_is_refused_for_reads_changes_and_metrics(broker: Broker) -> None:
    broker.create_topic("orders", 1)

    async def scenario(client: Client, port: int) -> None:
        evil = {"Host": f"evil.example:{port}"}
        for path in ("/api/v1/topics", "/api/v1/broker", "/metrics", "/openapi.json", "/nope"):
            message = await refused(await client.get(path, headers=evil), 421, "HOST_NOT_ALLOWED")
            assert "evil.example" in message and "admin_allowed_hosts" in message
        response = await client.delete("/api/v1/topics/orders", headers=evil)
        await refused(response, 421, "HOST_NOT_ALLOWED")
        response = await client.post("/api/v1/topics", json={"name": "planted"}, headers=evil)
        await refused(response, 421, "HOST_NOT_ALLOWED")
        await refused(await client.get("/", headers={"Host": "a b"}), 421, "HOST_NOT_ALLOWED")

    run(broker, scenario)
    assert [t.name for t in broker.topics] == ["orders"]  # neither deleted nor created


@pytest.mark.integration
def test_loopback_names_and_no_host_at_all_are_served(broker: Broker) -> None:
    async def scenario(client: Client, port: int) -> None:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            response = await client.get("/api/v1/health", headers={"Host": host})
            assert response.status == 200, (host, await response.text())
        response = await client.get("/metrics", headers={"Host": f"127.0.0.1:{port}"})
        assert response.status == 200  # what Prometheus sends: the target address
        # An HTTP/1.0 tool may send no Host: no browser does, so it is no rebinding.
        response = await client.get("/api/v1/health", skip_auto_headers=["Host"])
        assert response.status == 200

    run(broker, scenario)


@pytest.mark.integration
def test_named_hosts_are_served(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "data", admin_allowed_hosts=("weirmq.internal",))
    try:

        async def scenario(client: Client, port: int) -> None:
            named = {"Host": "weirmq.internal:19644"}
            assert (await client.get("/api/v1/topics", headers=named)).status == 200
            response = await client.post(
                "/api/v1/topics",
                json={"name": "orders"},
                headers={**named, "Origin": "http://weirmq.internal:19644"},
            )
            assert response.status == 201, await response.text()
            response = await client.get("/api/v1/topics", headers={"Host": "other.internal"})
            await refused(response, 421, "HOST_NOT_ALLOWED")

        run(broker, scenario)
        assert [t.name for t in broker.topics] == ["orders"]
    finally:
        broker.close()


NOT_JSON: list[tuple[str, dict[str, str]]] = [
    # What a page may send anywhere without a preflight: a form, or fetch() with text.
    ("text/plain", {"Content-Type": "text/plain"}),
    ("a form", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("multipart", {"Content-Type": "multipart/form-data; boundary=x"}),
    ("bytes", {"Content-Type": "application/octet-stream"}),
    ("JSON-ish", {"Content-Type": "text/json"}),
]


@pytest.mark.integration
@pytest.mark.parametrize(("what", "headers"), NOT_JSON, ids=[what for what, _ in NOT_JSON])
def test_a_body_not_sent_as_json_changes_nothing(
    broker: Broker, what: str, headers: dict[str, str]
) -> None:
    broker.create_topic("orders", 1)
    body = b'{"name": "planted", "partitions": 1}'  # valid JSON, whatever it is labelled

    async def scenario(client: Client, port: int) -> None:
        response = await client.post("/api/v1/topics", data=body, headers=headers)
        message = await refused(response, 415, "UNSUPPORTED_MEDIA_TYPE")
        assert "application/json" in message
        change = b'{"set": {"retention.ms": "1"}}'
        response = await client.patch("/api/v1/topics/orders/configs", data=change, headers=headers)
        await refused(response, 415, "UNSUPPORTED_MEDIA_TYPE")
        response = await client.post("/api/v1/exchanges", data=body, headers=headers)
        await refused(response, 415, "UNSUPPORTED_MEDIA_TYPE")

    run(broker, scenario)
    assert [t.name for t in broker.topics] == ["orders"]
    assert broker.topics.get("orders").configs == {}  # type: ignore[union-attr]


@pytest.mark.integration
def test_a_body_with_no_content_type_is_refused(broker: Broker) -> None:
    async def scenario(client: Client, port: int) -> None:
        response = await client.post(
            "/api/v1/topics", data=b'{"name": "planted"}', skip_auto_headers=["Content-Type"]
        )
        await refused(response, 415, "UNSUPPORTED_MEDIA_TYPE")
        # JSON with parameters is JSON; a DELETE has no body and needs no type.
        response = await client.post(
            "/api/v1/topics",
            data=b'{"name": "orders"}',
            headers={"Content-Type": "Application/JSON; charset=utf-8"},
        )
        assert response.status == 201, await response.text()
        response = await client.delete("/api/v1/topics/orders", skip_auto_headers=["Content-Type"])
        assert response.status == 204

    run(broker, scenario)
    assert len(broker.topics) == 0


@pytest.mark.integration
def test_a_foreign_origin_may_not_change_anything(broker: Broker) -> None:
    broker.create_topic("orders", 1)

    async def scenario(client: Client, port: int) -> None:
        for origin in (EVIL, "null", f"http://localhost:{port}", f"http://127.0.0.1:{port + 1}"):
            page = {"Origin": origin}
            response = await client.post("/api/v1/topics", json={"name": "planted"}, headers=page)
            message = await refused(response, 403, "ORIGIN_NOT_ALLOWED")
            assert origin in message
            response = await client.delete("/api/v1/topics/orders", headers=page)
            await refused(response, 403, "ORIGIN_NOT_ALLOWED")
            change = {"set": {"retention.ms": "1"}}
            response = await client.patch(
                "/api/v1/topics/orders/configs", json=change, headers=page
            )
            await refused(response, 403, "ORIGIN_NOT_ALLOWED")
        # Reading with a foreign Origin is answered, but the browser is not allowed to show
        # the page the answer: no Access-Control-Allow-Origin.
        response = await client.get("/api/v1/topics", headers={"Origin": EVIL})
        assert response.status == 200 and not cors_headers(response)

    run(broker, scenario)
    assert [t.name for t in broker.topics] == ["orders"]
    assert broker.topics.get("orders").configs == {}  # type: ignore[union-attr]


@pytest.mark.integration
def test_the_api_s_own_origin_may_change_things(broker: Broker) -> None:
    async def scenario(client: Client, port: int) -> None:
        own = {"Origin": f"http://127.0.0.1:{port}"}
        response = await client.post("/api/v1/topics", json={"name": "orders"}, headers=own)
        assert response.status == 201, await response.text()
        assert not cors_headers(response)
        response = await client.delete("/api/v1/topics/orders", headers=own)
        assert response.status == 204

    run(broker, scenario)
    assert len(broker.topics) == 0


@pytest.mark.integration
def test_cors_preflights(broker: Broker) -> None:
    async def scenario(client: Client, port: int) -> None:
        preflight = {
            "Origin": EVIL,
            "Access-Control-Request-Method": "DELETE",
            "Access-Control-Request-Headers": "content-type",
        }
        for path in ("/api/v1/topics", "/api/v1/topics/orders", "/nope"):
            response = await client.options(path, headers=preflight)
            await refused(response, 403, "ORIGIN_NOT_ALLOWED")
        # No Origin, or the API's own: OPTIONS is no method of the API (405, with Allow).
        for headers in ({}, {"Origin": f"http://127.0.0.1:{port}"}):
            response = await client.options("/api/v1/topics", headers=headers)
            await refused(response, 405, "METHOD_NOT_ALLOWED")
            assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}

    run(broker, scenario)


@pytest.mark.integration
def test_what_curl_and_the_cli_send_still_works(broker: Broker) -> None:
    async def scenario(client: Client, port: int) -> None:
        # The CLI labels every request as JSON, even one without a body.
        cli: dict[str, Any] = {"headers": JSON}
        response = await client.post("/api/v1/topics", json={"name": "orders"}, **cli)
        assert response.status == 201
        assert (await client.get("/api/v1/topics/orders", **cli)).status == 200
        response = await client.post(
            "/api/v1/exchanges", json={"name": "events", "type": "topic"}, **cli
        )
        assert response.status == 201
        response = await client.post(
            "/api/v1/exchanges/events/bindings", json={"destination": "orders"}
        )
        assert response.status == 201
        response = await client.post(
            "/api/v1/exchanges/events/replay", json={"destination": "orders"}, **cli
        )
        assert response.status == 200, await response.text()
        assert (await client.delete("/api/v1/exchanges/events")).status == 204
        assert (await client.delete("/api/v1/groups/nope")).status == 404

    run(broker, scenario)
