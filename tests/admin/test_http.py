"""Every endpoint of the admin API, its answers and its refusals, over HTTP.

The application (`create_app`) wraps a real `Broker` on a temporary data directory and is
served by aiohttp's test server on a loopback port; the test talks to it with aiohttp's
client. The last tests run `AdminService` as `weirmq serve` does, on a port of its own.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admin_support import bearer, broker_with_an_offline_partition, produce
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from weirmq.admin import AdminService, create_app, openapi, views
from weirmq.broker.core import PARTITIONS_MAX, Broker
from weirmq.errors import ErrorCode, KafkaError
from weirmq.settings import Settings
from weirmq.testing import ManualClock

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}


def run(broker: Broker, scenario: Callable[[Client], Awaitable[None]]) -> None:
    """Serve `broker`'s admin application and run `scenario` against it."""

    async def main() -> None:
        app = create_app(broker)
        # Every request carries the token: DELETEs need it (test_console_api.py tests that).
        async with TestClient(TestServer(app), headers=bearer(app)) as client:
            await scenario(client)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


async def refused(response: aiohttp.ClientResponse, status: int, code: str) -> str:
    """Check the error shape, status and code; return the message."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    return message


# --- health and broker ----------------------------------------------------------------------


def test_health_of_a_healthy_broker(broker: Broker, clock: ManualClock) -> None:
    clock.advance(1500)

    async def scenario(client: Client) -> None:
        assert await get_json(client, "/api/v1/health") == {
            "status": "ok",
            "node_id": 0,
            "cluster_id": broker.cluster_id,
            "version": "0.1.0",
            "uptime_ms": 1500,
            "offline_partitions": 0,
        }

    run(broker, scenario)


def test_health_is_503_while_a_partition_is_offline(tmp_path: Path) -> None:
    damaged = broker_with_an_offline_partition(tmp_path)

    async def scenario(client: Client) -> None:
        health = await get_json(client, "/api/v1/health", status=503)
        assert (health["status"], health["offline_partitions"]) == ("degraded", 1)
        partition = await get_json(client, "/api/v1/topics/damaged/partitions/0")
        assert "gap" in partition["offline_reason"]

    try:
        run(damaged, scenario)
    finally:
        damaged.close()


def test_health_is_503_while_stopping(broker: Broker) -> None:
    broker.closing = True  # what serve() sets first when a stop begins

    async def scenario(client: Client) -> None:
        health = await get_json(client, "/api/v1/health", status=503)
        assert health["status"] == "stopping"

    run(broker, scenario)


def test_the_broker_document(broker: Broker, clock: ManualClock) -> None:
    broker.create_topic("a", 3)
    broker.create_topic("b", 1)
    broker.advertised = ("::1", 9093)
    broker.stats.connections_open, broker.stats.connections_total = 2, 7
    broker.stats.connections_closed_for_errors = 1
    clock.advance(42)

    async def scenario(client: Client) -> None:
        document = await get_json(client, "/api/v1/broker")
        settings = document.pop("settings")
        flow = document.pop("flow")
        assert document == {
            "node_id": 0,
            "cluster_id": broker.cluster_id,
            "version": "0.1.0",
            "advertised_address": "[::1]:9093",
            "data_dir": str(Path(broker.settings.data_dir).absolute()),
            "uptime_ms": 42,
            "connections": {"open": 2, "accepted_total": 7, "closed_for_errors_total": 1},
            "topics": 2,
            "partitions": 4,
        }
        assert list(settings) == [field.name for field in fields(Settings)]
        assert settings["data_dir"] == str(broker.settings.data_dir)
        assert settings["default_partitions"] == 2
        assert settings["admin_listen"] == "127.0.0.1:9644"
        assert settings["advertise"] is None
        # Back-pressure: request memory is always guarded; nothing throttled yet.
        assert [r["name"] for r in flow["resources"]] == ["memory"]
        assert flow["resources"][0]["state"] == "free"
        assert flow["resources"][0]["high"] == broker.settings.queued_max_request_bytes
        assert (flow["throttled_requests_total"], flow["refused_publishes_total"]) == (0, 0)

    run(broker, scenario)


# --- topics ---------------------------------------------------------------------------------


def test_the_topic_list_with_sizes(broker: Broker) -> None:
    broker.create_topic("zeta", 1)
    broker.create_topic("alpha", 2)
    appended = produce(broker, "alpha", 0, batches=2, records=3)
    appended += produce(broker, "alpha", 1, batches=1, records=5)

    async def scenario(client: Client) -> None:
        topics = (await get_json(client, "/api/v1/topics"))["topics"]
        assert [t["name"] for t in topics] == ["alpha", "zeta"]
        alpha = topics[0]
        assert alpha == {
            "name": "alpha",
            "topic_id": str(broker.topics.get("alpha").topic_id),  # type: ignore[union-attr]
            "partition_count": 2,
            "size_bytes": appended,
            "records": 11,
            "configs": {},
        }
        assert (topics[1]["size_bytes"], topics[1]["records"]) == (0, 0)

    run(broker, scenario)


def test_creating_a_topic(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        body = {"name": "orders", "partitions": 3, "configs": {"retention.ms": "86400000"}}
        response = await client.post("/api/v1/topics", json=body)
        assert response.status == 201, await response.text()
        assert response.headers["Location"] == "/api/v1/topics/orders"
        created = await response.json()
        uuid.UUID(created["topic_id"])
        assert created["name"] == "orders"
        assert created["partition_count"] == 3
        assert created["configs"] == {"retention.ms": "86400000"}
        assert [p["partition"] for p in created["partitions"]] == [0, 1, 2]
        assert await get_json(client, response.headers["Location"]) == created
        # Without a count: the broker's default_partitions (2 in these tests).
        response = await client.post("/api/v1/topics", json={"name": "defaulted"})
        assert response.status == 201
        assert (await response.json())["partition_count"] == 2

    run(broker, scenario)
    topic = broker.topics.get("orders")
    assert topic is not None and topic.partitions == 3
    assert all(broker.partition_log("orders", p) is not None for p in range(3))


def test_creating_a_topic_that_exists_is_a_conflict(broker: Broker) -> None:
    broker.create_topic("orders", 1)

    async def scenario(client: Client) -> None:
        response = await client.post("/api/v1/topics", json={"name": "orders", "partitions": 4})
        await refused(response, 409, "TOPIC_ALREADY_EXISTS")

    run(broker, scenario)
    assert broker.topics.get("orders").partitions == 1  # type: ignore[union-attr]


BAD_CREATE_BODIES: list[tuple[bytes | dict[str, Any], str]] = [
    (b"", "MALFORMED_JSON"),
    (b"   ", "MALFORMED_JSON"),
    (b"{bad json", "MALFORMED_JSON"),
    (b'{"name": "x"', "MALFORMED_JSON"),
    (b"\xff\xfe\xfd", "MALFORMED_JSON"),
    (b"[" * 100_000, "MALFORMED_JSON"),
    (b"[]", "INVALID_REQUEST"),
    (b'"x"', "INVALID_REQUEST"),
    (b"null", "INVALID_REQUEST"),
    ({"partitions": 1}, "INVALID_REQUEST"),
    ({"name": 5}, "INVALID_REQUEST"),
    ({"name": None}, "INVALID_REQUEST"),
    ({"name": "x", "partitions": "3"}, "INVALID_REQUEST"),
    ({"name": "x", "partitions": True}, "INVALID_REQUEST"),
    ({"name": "x", "partitions": 1.5}, "INVALID_REQUEST"),
    ({"name": "x", "partitions": None}, "INVALID_REQUEST"),
    ({"name": "x", "partitions": 0}, "INVALID_PARTITIONS"),
    ({"name": "x", "partitions": -1}, "INVALID_PARTITIONS"),
    ({"name": "x", "partitions": PARTITIONS_MAX + 1}, "INVALID_PARTITIONS"),
    ({"name": "x", "partitions": 2**31}, "INVALID_PARTITIONS"),
    ({"name": "x", "partitions": 10**400}, "INVALID_PARTITIONS"),
    ({"name": "x", "configs": {"retention.ms": 5}}, "INVALID_REQUEST"),
    ({"name": "x", "configs": ["retention.ms"]}, "INVALID_REQUEST"),
    ({"name": "x", "partition": 3}, "INVALID_REQUEST"),  # misspelt: refused, not ignored
    ({"name": "bad name!"}, "INVALID_TOPIC_EXCEPTION"),
    ({"name": ""}, "INVALID_TOPIC_EXCEPTION"),
    ({"name": ".."}, "INVALID_TOPIC_EXCEPTION"),
    ({"name": "x" * 250}, "INVALID_TOPIC_EXCEPTION"),
    ({"name": "x", "configs": {"no.such.config": "1"}}, "INVALID_CONFIG"),
    ({"name": "x", "configs": {"retention.ms": "soon"}}, "INVALID_CONFIG"),
]


@pytest.mark.parametrize(("body", "code"), BAD_CREATE_BODIES)
def test_refused_topic_creations(broker: Broker, body: bytes | dict[str, Any], code: str) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def scenario(client: Client) -> None:
        response = await client.post(
            "/api/v1/topics", data=data, headers={"Content-Type": "application/json"}
        )
        await refused(response, 400, code)

    run(broker, scenario)
    assert len(broker.topics) == 0  # nothing half-created


def test_a_body_over_one_mebibyte_is_refused(broker: Broker) -> None:
    broker.create_topic("orders", 1)
    huge = json.dumps({"name": "x", "configs": {"k": "v" * (1 << 20)}}).encode()

    async def scenario(client: Client) -> None:
        response = await client.post("/api/v1/topics", data=io.BytesIO(huge), headers=JSON)
        await refused(response, 413, "PAYLOAD_TOO_LARGE")
        response = await client.patch(
            "/api/v1/topics/orders/configs", data=io.BytesIO(huge), headers=JSON
        )
        await refused(response, 413, "PAYLOAD_TOO_LARGE")
        assert (await client.get("/api/v1/health")).status == 200  # and it carries on

    run(broker, scenario)
    assert [t.name for t in broker.topics] == ["orders"]


def test_a_topic_and_its_partitions(broker: Broker) -> None:
    broker.create_topic("orders", 2)
    appended = produce(broker, "orders", 1, batches=2, records=4)

    async def scenario(client: Client) -> None:
        topic = await get_json(client, "/api/v1/topics/orders")
        partitions = topic.pop("partitions")
        assert topic["size_bytes"] == appended and topic["records"] == 8
        assert partitions == [
            {
                "topic": "orders",
                "partition": 0,
                "log_start_offset": 0,
                "log_end_offset": 0,
                "size_bytes": 0,
                "segments": 1,
                "offline_reason": None,
            },
            {
                "topic": "orders",
                "partition": 1,
                "log_start_offset": 0,
                "log_end_offset": 8,
                "size_bytes": appended,
                "segments": 1,
                "offline_reason": None,
            },
        ]
        listed = await get_json(client, "/api/v1/topics/orders/partitions")
        assert listed == {"topic": "orders", "partitions": partitions}
        assert await get_json(client, "/api/v1/topics/orders/partitions/1") == partitions[1]

    run(broker, scenario)


def test_unknown_topics_and_partitions(broker: Broker) -> None:
    broker.create_topic("orders", 2)
    unknown_topic = [
        "/api/v1/topics/nope",
        "/api/v1/topics/nope/partitions",
        "/api/v1/topics/nope/partitions/0",
        "/api/v1/topics/nope/configs",
        "/api/v1/topics/a%2Fb",  # a name with a slash: no topic has one
        "/api/v1/topics/a%00b",
    ]

    async def scenario(client: Client) -> None:
        for path in unknown_topic:
            await refused(await client.get(path), 404, "UNKNOWN_TOPIC_OR_PARTITION")
        # Dot segments are resolved before routing ("/api/v1/topics/.." is "/api/v1/").
        await refused(await client.get("/api/v1/topics/%2E%2E"), 404, "NOT_FOUND")
        for partition in ("2", "4294967296", "99999999999999999999"):
            response = await client.get(f"/api/v1/topics/orders/partitions/{partition}")
            await refused(response, 404, "UNKNOWN_TOPIC_OR_PARTITION")
        for partition in ("x", "-1", "1.0", "%D9%A3", "0x1", "+1"):  # %D9%A3: Arabic 3
            response = await client.get(f"/api/v1/topics/orders/partitions/{partition}")
            await refused(response, 400, "INVALID_REQUEST")

    run(broker, scenario)


def test_deleting_a_topic(broker: Broker) -> None:
    broker.create_topic("doomed", 2)
    broker.create_topic("kept", 1)
    produce(broker, "doomed", 0, batches=1)

    async def scenario(client: Client) -> None:
        response = await client.delete("/api/v1/topics/doomed")
        assert response.status == 204
        assert await response.read() == b""
        await refused(await client.get("/api/v1/topics/doomed"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
        names = [t["name"] for t in (await get_json(client, "/api/v1/topics"))["topics"]]
        assert names == ["kept"]
        response = await client.delete("/api/v1/topics/doomed")
        await refused(response, 404, "UNKNOWN_TOPIC_OR_PARTITION")
        metrics = await (await client.get("/metrics")).text()
        assert 'topic="doomed"' not in metrics  # its series went with it

    run(broker, scenario)
    assert broker.partition_log("doomed", 0) is None


def test_a_topic_with_the_longest_legal_name_can_be_created_and_deleted(broker: Broker) -> None:
    # Found by the fuzz test: the partition directory is 251 characters, and a rename that
    # adds a suffix to it for the deletion must still fit the file system's 255.
    name = "0" * 249

    async def scenario(client: Client) -> None:
        response = await client.post("/api/v1/topics", json={"name": name, "partitions": 1})
        assert response.status == 201, await response.text()
        response = await client.delete(f"/api/v1/topics/{name}")
        assert response.status == 204, await response.text()
        await refused(await client.get(f"/api/v1/topics/{name}"), 404, "UNKNOWN_TOPIC_OR_PARTITION")

    run(broker, scenario)


# --- configs --------------------------------------------------------------------------------


def test_describing_topic_configs(broker: Broker) -> None:
    broker.create_topic("orders", 1, {"retention.ms": "3600000"})

    async def scenario(client: Client) -> None:
        document = await get_json(client, "/api/v1/topics/orders/configs")
        assert document["topic"] == "orders"
        by_name = {entry["name"]: entry for entry in document["configs"]}
        retention = by_name["retention.ms"]
        assert retention["value"] == "3600000"
        assert retention["source"] == "dynamic_topic_config"
        assert (retention["read_only"], retention["sensitive"]) == (False, False)
        assert retention["type"] == "LONG"
        assert retention["documentation"]
        segment = by_name["segment.bytes"]
        assert segment["source"] != "dynamic_topic_config"  # not overridden
        assert segment["value"] == str(broker.settings.segment_bytes)
        for entry in document["configs"]:
            assert entry["source"] in views.CONFIG_SOURCES.values()

    run(broker, scenario)


def test_altering_topic_configs(broker: Broker) -> None:
    broker.create_topic("orders", 1, {"segment.bytes": "1048576"})

    async def scenario(client: Client) -> None:
        change = {"set": {"retention.ms": "60000"}, "delete": ["segment.bytes"]}
        response = await client.patch("/api/v1/topics/orders/configs", json=change)
        assert response.status == 200, await response.text()
        document = await response.json()
        by_name = {entry["name"]: entry for entry in document["configs"]}
        assert by_name["retention.ms"]["value"] == "60000"
        assert by_name["retention.ms"]["source"] == "dynamic_topic_config"
        assert by_name["segment.bytes"]["source"] != "dynamic_topic_config"
        assert document == await get_json(client, "/api/v1/topics/orders/configs")
        # An empty change changes nothing.
        response = await client.patch("/api/v1/topics/orders/configs", json={})
        assert response.status == 200 and await response.json() == document

    run(broker, scenario)
    assert dict(broker.topics.get("orders").configs) == {"retention.ms": "60000"}  # type: ignore[union-attr]


BAD_ALTER_BODIES: list[tuple[bytes | dict[str, Any], str]] = [
    (b"", "MALFORMED_JSON"),
    (b"{", "MALFORMED_JSON"),
    (b"[]", "INVALID_REQUEST"),
    ({"set": {"retention.ms": 60000}}, "INVALID_REQUEST"),
    ({"set": ["retention.ms"]}, "INVALID_REQUEST"),
    ({"delete": "retention.ms"}, "INVALID_REQUEST"),
    ({"delete": [1]}, "INVALID_REQUEST"),
    ({"sett": {"retention.ms": "1"}}, "INVALID_REQUEST"),
    ({"set": {"no.such.config": "1"}}, "INVALID_CONFIG"),
    # All or nothing: the good half of a refused change is not applied either.
    ({"set": {"retention.ms": "1", "segment.bytes": "many"}}, "INVALID_CONFIG"),
]


@pytest.mark.parametrize(("body", "code"), BAD_ALTER_BODIES)
def test_refused_config_changes(broker: Broker, body: bytes | dict[str, Any], code: str) -> None:
    broker.create_topic("orders", 1, {"retention.ms": "3600000"})
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def scenario(client: Client) -> None:
        before = await get_json(client, "/api/v1/topics/orders/configs")
        response = await client.patch("/api/v1/topics/orders/configs", data=data, headers=JSON)
        await refused(response, 400, code)
        assert await get_json(client, "/api/v1/topics/orders/configs") == before

    run(broker, scenario)


def test_altering_configs_of_an_unknown_topic(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        change = {"set": {"retention.ms": "60000"}}
        response = await client.patch("/api/v1/topics/nope/configs", json=change)
        await refused(response, 404, "UNKNOWN_TOPIC_OR_PARTITION")

    run(broker, scenario)


# --- groups (test_groups_http.py makes real ones, with real consumers) ----------------------


def test_a_broker_without_groups(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        assert await get_json(client, "/api/v1/groups") == {"groups": []}
        message = await refused(await client.get("/api/v1/groups/nope"), 404, "GROUP_ID_NOT_FOUND")
        assert "'nope'" in message
        await refused(await client.delete("/api/v1/groups/nope"), 404, "GROUP_ID_NOT_FOUND")
        response = await client.post("/api/v1/groups", json={})
        await refused(response, 405, "METHOD_NOT_ALLOWED")
        assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD"}

    run(broker, scenario)


# --- routing, the document, metrics ---------------------------------------------------------


def test_unknown_routes_and_wrong_methods(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        for path in ("/api", "/api/v2/health", "/api/v1/topics/", "/api/v1/groups/"):
            await refused(await client.get(path), 404, "NOT_FOUND")
        response = await client.put("/api/v1/topics")
        await refused(response, 405, "METHOD_NOT_ALLOWED")
        assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}
        response = await client.post("/api/v1/health", json={})
        await refused(response, 405, "METHOD_NOT_ALLOWED")
        response = await client.delete("/metrics")
        await refused(response, 405, "METHOD_NOT_ALLOWED")

    run(broker, scenario)


def test_the_openapi_document_is_served(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        assert await get_json(client, "/openapi.json") == openapi.document()

    run(broker, scenario)


def test_metrics_are_served_and_follow_activity(broker: Broker) -> None:
    broker.create_topic("orders", 1)

    def records_in(text: str) -> float:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "weirmq_topic_records_in_total":
                    return sample.value
        return 0.0

    async def scenario(client: Client) -> None:
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert records_in(await response.text()) == 0
        produce(broker, "orders", 0, batches=2, records=5)
        assert records_in(await (await client.get("/metrics")).text()) == 10
        response = await client.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await response.text()).endswith("# EOF\n")

    run(broker, scenario)


# --- failures that are the broker's ---------------------------------------------------------


def test_an_unexpected_failure_is_a_logged_500_and_the_api_carries_on(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_broker: Broker) -> dict[str, object]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "broker_document", broken)

    async def scenario(client: Client) -> None:
        await refused(await client.get("/api/v1/broker"), 500, "INTERNAL_ERROR")
        assert (await client.get("/api/v1/health")).status == 200

    with caplog.at_level(logging.ERROR, logger="weirmq.admin.http"):
        run(broker, scenario)
    assert any("GET /api/v1/broker failed" in r.getMessage() for r in caplog.records)
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)


class DiskTrouble(KafkaError):
    code = ErrorCode.kafka_storage_error


def test_a_broker_error_that_is_not_the_requests_fault_is_a_5xx(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("orders", 1)

    def delete_topic(name: str) -> None:
        raise DiskTrouble(f"cannot delete {name}: read-only file system")

    monkeypatch.setattr(broker, "delete_topic", delete_topic, raising=False)

    async def scenario(client: Client) -> None:
        message = await refused(
            await client.delete("/api/v1/topics/orders"), 503, "KAFKA_STORAGE_ERROR"
        )  # the disk's trouble: 503, as a write the broker cannot store now
        assert "read-only file system" in message

    run(broker, scenario)


# --- the service ----------------------------------------------------------------------------


def admin_settings(tmp_path: Path, admin_listen: str | None) -> Settings:
    return Settings(data_dir=tmp_path / "data", admin_listen=admin_listen)


def test_the_service_binds_announces_serves_and_stops(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = AdminService(admin_settings(tmp_path, "127.0.0.1:0"))
    with pytest.raises(RuntimeError):
        service.address  # noqa: B018 (not bound yet)

    async def scenario() -> None:
        line = await service.start(broker)
        host, port = service.address
        assert host == "127.0.0.1" and port > 0
        assert line.startswith(
            f"weirmq: admin API, metrics and console on http://127.0.0.1:{port} "
        )
        assert line.endswith("admin-token)")
        async with aiohttp.ClientSession() as session:
            for _ in range(3):  # as a scraper would, every few seconds
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/api/v1/health") as response:
                assert (await response.json())["status"] == "ok"
        await service.stop()
        await service.stop()  # idempotent
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as session:
                await session.get(f"http://127.0.0.1:{port}/api/v1/health")

    with caplog.at_level(logging.DEBUG, logger="aiohttp"):
        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    # No access log: a scrape every few seconds would drown the broker's own log.
    assert [r for r in caplog.records if r.name == "aiohttp.access"] == []


def test_an_address_in_use_fails_the_start_and_stop_still_works(
    broker: Broker, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = AdminService(admin_settings(tmp_path, f"127.0.0.1:{port}"))

        async def scenario() -> None:
            with pytest.raises(OSError):
                await service.start(broker)
            await service.stop()  # what serve() does after a failed start

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def test_a_service_that_is_off_refuses_to_start(broker: Broker, tmp_path: Path) -> None:
    service = AdminService(admin_settings(tmp_path, None))
    with pytest.raises(ValueError, match="off"):
        asyncio.run(service.start(broker))


def test_ipv6_addresses_are_bracketed() -> None:
    assert views.format_address("::1", 9644) == "[::1]:9644"
    assert views.format_address("127.0.0.1", 9644) == "127.0.0.1:9644"
