"""The admin API of a real ``weirmq serve`` process against what a hostile web page makes
the operator's browser send, over plain ``http.client``: each such request is refused and
changes nothing, while the requests of curl, Prometheus and the ``weirmq`` CLI still work.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from test_cli import ok_json, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

TIMEOUT_S = 10.0
EVIL = "http://evil.example"


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {name.lower(): value for name, value in response.getheaders()}
        self.body = response.read()

    def json(self) -> Any:
        return json.loads(self.body)

    def error_code(self) -> str:
        assert self.headers["content-type"].startswith("application/json")
        error = self.json()["error"]
        assert set(error) == {"code", "message"} and error["message"]
        return str(error["code"])

    def cors_headers(self) -> list[str]:
        return [name for name in self.headers if name.startswith("access-control-")]


def request(
    broker: BrokerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    host: str | None = None,
) -> Answer:
    """One request on a fresh connection; `host` replaces the Host header http.client
    would send (the address of the URL)."""
    assert broker.admin_url is not None
    address = urlsplit(broker.admin_url)
    assert address.hostname is not None and address.port is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=TIMEOUT_S)
    try:
        connection.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            connection.putheader("Host", host)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        return Answer(connection.getresponse())
    finally:
        connection.close()


def post_json(broker: BrokerProcess, path: str, document: object) -> Answer:
    """As curl -H 'Content-Type: application/json' -d ... sends it."""
    body = json.dumps(document).encode()
    return request(broker, "POST", path, body, {"Content-Type": "application/json"})


def topic_names(broker: BrokerProcess) -> list[str]:
    answer = request(broker, "GET", "/api/v1/topics")
    assert answer.status == 200
    return [topic["name"] for topic in answer.json()["topics"]]


def test_what_a_hostile_page_sends_is_refused_and_changes_nothing(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    assert broker.admin_url is not None
    port = urlsplit(broker.admin_url).port
    assert post_json(broker, "/api/v1/topics", {"name": "orders"}).status == 201

    # CSRF: a form or a fetch() with text/plain; the body is JSON all the same.
    planted = b'{"name": "planted"}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        answer = request(broker, "POST", "/api/v1/topics", planted, {"Content-Type": content_type})
        assert (answer.status, answer.error_code()) == (415, "UNSUPPORTED_MEDIA_TYPE")
    answer = request(broker, "POST", "/api/v1/topics", planted)  # no Content-Type at all
    assert (answer.status, answer.error_code()) == (415, "UNSUPPORTED_MEDIA_TYPE")

    # DNS rebinding: the page's own name, pointed at 127.0.0.1, in the Host header.
    evil_host = f"evil.example:{port}"
    for method, path in (("DELETE", "/api/v1/topics/orders"), ("GET", "/api/v1/topics")):
        answer = request(broker, method, path, host=evil_host)
        assert (answer.status, answer.error_code()) == (421, "HOST_NOT_ALLOWED")
    answer = request(broker, "GET", "/metrics", host=evil_host)
    assert answer.status == 421

    # A foreign Origin, with everything else as a program would send it.
    json_body = {"Content-Type": "application/json"}
    answer = request(broker, "POST", "/api/v1/topics", planted, {**json_body, "Origin": EVIL})
    assert (answer.status, answer.error_code()) == (403, "ORIGIN_NOT_ALLOWED")
    answer = request(broker, "DELETE", "/api/v1/topics/orders", headers={"Origin": EVIL})
    assert (answer.status, answer.error_code()) == (403, "ORIGIN_NOT_ALLOWED")

    # The preflight a page's JSON fetch() needs first: no CORS allowance.
    preflight = {"Origin": EVIL, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}  # fmt: skip
    answer = request(broker, "OPTIONS", "/api/v1/topics", headers=preflight)
    assert (answer.status, answer.error_code()) == (403, "ORIGIN_NOT_ALLOWED")
    assert answer.cors_headers() == []
    answer = request(broker, "GET", "/api/v1/topics", headers={"Origin": EVIL})
    assert answer.status == 200 and answer.cors_headers() == []

    assert topic_names(broker) == ["orders"]  # nothing planted, nothing deleted
    assert broker.stop() == 0


def test_curl_prometheus_and_the_cli_still_work(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0", admin_allowed_hosts="weirmq.internal")
    assert broker.admin_url is not None
    address = urlsplit(broker.admin_url)
    port = address.port
    assert address.hostname is not None and port is not None

    assert post_json(broker, "/api/v1/topics", {"name": "orders"}).status == 201
    assert post_json(broker, "/api/v1/exchanges", {"name": "events", "type": "topic"}).status == 201
    answer = post_json(broker, "/api/v1/exchanges/events/bindings", {"destination": "orders"})
    assert answer.status == 201
    patch = b'{"set": {"retention.ms": "3600000"}}'
    answer = request(broker, "PATCH", "/api/v1/topics/orders/configs", patch,
                     {"Content-Type": "application/json; charset=utf-8"})  # fmt: skip
    assert answer.status == 200, answer.body

    # Prometheus sends the target as Host; curl localhost:PORT sends localhost:PORT.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "weirmq.internal:9644"):
        answer = request(broker, "GET", "/metrics", host=host)
        assert answer.status == 200, (host, answer.body)
        assert b"weirmq_topics" in answer.body
    answer = request(broker, "GET", "/api/v1/health", host="other.internal")
    assert answer.status == 421
    # An HTTP/1.0 tool may send no Host at all: no browser does, so it passes.
    with socket.create_connection((address.hostname, port), timeout=TIMEOUT_S) as raw:
        raw.sendall(b"GET /api/v1/health HTTP/1.0\r\n\r\n")
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.0 200 "), reply[:200]

    # The CLI (urllib against --admin-url, every request labelled JSON): a replay (POST)
    # and the groups listing, which reads share groups from the API (GET).
    admin = ["--admin-url", broker.admin_url]
    done = ok_json(weirmq(None, "exchanges", "replay", "events", "orders", *admin, "--json"))
    assert done["records_read"] == 0
    listed = ok_json(weirmq(broker, "groups", "list", *admin, "--json"))
    assert listed is not None

    # The API's own origin (a page it served) may change things.
    own = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"}
    answer = request(broker, "POST", "/api/v1/topics", b'{"name": "more"}', own)
    assert answer.status == 201, answer.body
    refused = request(broker, "DELETE", "/api/v1/topics/more", headers=own)
    assert (refused.status, refused.error_code()) == (401, "UNAUTHORIZED")  # deletes: token
    token = (broker.data_dir / "admin-token").read_text().strip()
    with_token = {**own, "Authorization": f"Bearer {token}"}
    assert request(broker, "DELETE", "/api/v1/topics/more", headers=with_token).status == 204
    assert "more" not in topic_names(broker)
    assert broker.stop() == 0
