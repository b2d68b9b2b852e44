"""The admin API's endpoints for the console (`weirmq.admin.operations`) and its token
(`weirmq.admin.token`), through aiohttp's test client on a real `Broker` over tmp_path.

Each endpoint is driven through HTTP and its effect checked on the broker itself (the log,
the committed offsets, the log start), with every refusal a client can cause: bad numbers
(400), unknown topics, partitions and groups (404), a group with members (409), a publish
held back (429), and a change without the token (401).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import os
import socket
import struct
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_support import make_broker
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from weirmq.admin import AdminService, create_app, history, operations, views
from weirmq.admin.history import History, Totals
from weirmq.admin.http import listens_on_loopback
from weirmq.admin.requests import TOKEN
from weirmq.admin.token import TOKEN_FILE, load_or_create
from weirmq.broker.core import Broker
from weirmq.broker.group_service import CommitRequest, MemberView
from weirmq.broker.messages import key_partition
from weirmq.broker.partition import Durability
from weirmq.broker.shares import SessionPartition
from weirmq.flow.watermarks import Watermarks
from weirmq.records.batch import Record, encode_batch
from weirmq.records.checksum import crc32c
from weirmq.settings import Settings
from weirmq.testing import Broker as RunningBroker
from weirmq.testing import ManualClock, ManualTimers

TIMEOUT_S = 30.0
Client = TestClient[web.Request, web.Application]
Scenario = Callable[[Client, dict[str, str]], Awaitable[None]]
ACCEPT, REJECT = 1, 3


def run(broker: Broker, scenario: Scenario, app: web.Application | None = None) -> None:
    """Serve `broker`'s admin application; run `scenario(client, auth)`, where the client
    sends no token by default and `auth` is the header that carries it."""

    async def main() -> None:
        served = app if app is not None else create_app(broker)
        auth = {"Authorization": f"Bearer {served[TOKEN].value}"}
        async with TestClient(TestServer(served, host="127.0.0.1")) as client:
            await scenario(client, auth)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


async def ok(response: Any, status: int = 200) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def refused(response: Any, status: int, code: str) -> str:
    body = await response.json()
    assert response.status == status, body
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    return message


def append(broker: Broker, topic: str, records: list[Record], partition: int = 0) -> None:
    found = broker.partition(topic, partition)
    assert found is not None
    found.publish(encode_batch(records), Durability.WRITTEN)


def gzipped(records: list[Record]) -> bytes:
    """A gzip batch of `records`, as a producer with compression.type=gzip sends it."""
    plain = encode_batch(records)
    payload = gzip.compress(plain[61:])
    batch = bytearray(plain[:61]) + payload
    struct.pack_into(">i", batch, 8, 61 - 12 + len(payload))  # batch length
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 1)  # gzip
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


# --- overview, connections, history ---------------------------------------------------------


def test_the_overview_counts_things_and_keeps_a_history(broker: Broker, clock: ManualClock) -> None:
    broker.create_topic("orders", 3)
    app = create_app(broker)
    broker.stats.connections_open_by_protocol.update({"kafka": 2, "amqp": 1})
    for _ in range(3):
        clock.advance(2_000)
        append(broker, "orders", [Record(b"x" * 100, timestamp_ms=clock())])
        app[operations.HISTORY].sample(*operations.read_totals(broker))

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = await ok(await client.get("/api/v1/overview"))
        assert body["status"] == "ok" and body["topics"] == 1 and body["partitions"] == 3
        assert body["groups"] == 0
        assert body["connections"] == {"kafka": 2, "amqp": 1, "sqs": 0, "total": 3}
        samples = body["history"]["samples"]
        assert body["history"]["interval_ms"] == history.HISTORY_INTERVAL_MS
        assert len(samples) == 3
        assert all(s["messages_in_per_s"] == 0.5 for s in samples)  # a record per 2 s
        assert all(s["bytes_in_per_s"] > 50 for s in samples)
        assert [s["at_ms"] for s in samples] == sorted(s["at_ms"] for s in samples)

    run(broker, scenario, app)


def test_connections_per_protocol_include_a_gauge_of_another_server(broker: Broker) -> None:
    broker.stats.connections_open_by_protocol["kafka"] = 4
    broker.stats.connection_gauges["sqs"] = lambda: 5

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = await ok(await client.get("/api/v1/connections"))
        assert body == {"connections": {"kafka": 4, "amqp": 0, "sqs": 5, "total": 9}}

    run(broker, scenario)


def test_the_history_is_a_bounded_ring_of_rates() -> None:
    ring = History(interval_ms=1_000, samples_max=3)
    assert ring.sample(0, Totals(0, 0, 0, 0, 1)) is None  # the first is only a base
    for second in range(1, 6):
        n = second * 10
        ring.sample(second * 1000, Totals(n * 100, n * 50, n, n // 2, 1))
    samples = ring.samples()
    assert [s.at_ms for s in samples] == [3000, 4000, 5000]
    assert samples[-1].bytes_in_per_s == 1000.0 and samples[-1].messages_in_per_s == 10.0
    assert samples[-1].bytes_out_per_s == 500.0 and samples[-1].messages_out_per_s == 5.0
    assert ring.sample(5000, Totals(0, 0, 0, 0, 0)) is None  # no time passed: no rate
    restarted = ring.sample(6000, Totals(7, 0, 0, 0, 0))  # a topic deleted took its counts
    assert restarted is not None and restarted.bytes_in_per_s == 7.0


def test_the_service_samples_the_history_and_stops_the_sampler(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "HISTORY_INTERVAL_MS", 10)
    monkeypatch.setattr(History.__init__, "__defaults__", (10, history.HISTORY_SAMPLES_MAX))
    service = AdminService(Settings(data_dir=tmp_path / "data", admin_listen="127.0.0.1:0"))

    async def scenario() -> None:
        await service.start(broker)
        sampler = service._sampler
        assert sampler is not None and sampler.running
        await asyncio.sleep(0.2)
        await service.stop()
        assert not sampler.running

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


# --- browsing -------------------------------------------------------------------------------


def test_browsing_shows_the_newest_records_by_default_and_pages_forward(
    broker: Broker,
) -> None:
    broker.create_topic("orders", 2)
    for n in range(30):
        headers = (("trace", b"t%d" % n), ("bin", b"\xff"), ("none", None))
        append(broker, "orders", [Record(b"v%d" % n, b"k%d" % n, headers, 1_000 + n)])

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = await ok(await client.get("/api/v1/topics/orders/messages"))
        assert (body["log_start_offset"], body["log_end_offset"]) == (0, 30)
        assert [m["offset"] for m in body["messages"]] == list(range(10, 30))
        assert body["next_offset"] == 30
        last = body["messages"][-1]
        assert last["timestamp_ms"] == 1_029
        assert last["key"] == {"base64": "azI5", "text": "k29"}
        assert last["value"]["text"] == "v29"
        assert last["headers"] == [
            {"key": "trace", "value": {"base64": "dDI5", "text": "t29"}},
            {"key": "bin", "value": {"base64": "/w==", "text": None}},
            {"key": "none", "value": None},
        ]
        page = await ok(await client.get("/api/v1/topics/orders/messages?offset=3&limit=5"))
        assert [m["offset"] for m in page["messages"]] == [3, 4, 5, 6, 7]
        assert page["next_offset"] == 8
        timed = await ok(await client.get("/api/v1/topics/orders/messages?timestamp=1025"))
        assert [m["offset"] for m in timed["messages"]] == [25, 26, 27, 28, 29]
        later = await ok(await client.get("/api/v1/topics/orders/messages?timestamp=9999"))
        assert later["messages"] == [] and later["next_offset"] == 30
        past = await ok(await client.get("/api/v1/topics/orders/messages?offset=99"))
        assert past["messages"] == [] and past["next_offset"] == 30
        empty = await ok(await client.get("/api/v1/topics/orders/messages?partition=1"))
        assert empty["messages"] == [] and empty["log_end_offset"] == 0

    run(broker, scenario)


def test_browsing_decodes_compressed_batches_and_skips_below_the_log_start(
    broker: Broker,
) -> None:
    broker.create_topic("zipped", 1)
    partition = broker.partition("zipped", 0)
    assert partition is not None
    records = [Record(b"value %d" % n, None, (), 5_000) for n in range(10)]
    partition.publish(gzipped(records), Durability.WRITTEN)
    broker.delete_records("zipped", 0, 4)  # inside the batch: it is still read whole

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = await ok(await client.get("/api/v1/topics/zipped/messages?offset=0"))
        assert body["log_start_offset"] == 4
        assert [m["offset"] for m in body["messages"]] == [4, 5, 6, 7, 8, 9]
        assert body["messages"][0]["value"]["text"] == "value 4"
        assert body["messages"][0]["key"] is None

    run(broker, scenario)


def test_browsing_is_bounded_in_bytes_answered(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "BROWSE_PAYLOAD_BYTES_MAX", 2_500)
    broker.create_topic("big", 1)
    for _ in range(5):
        append(broker, "big", [Record(b"x" * 1_000)])

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = await ok(await client.get("/api/v1/topics/big/messages?offset=0"))
        assert [m["offset"] for m in body["messages"]] == [0, 1]
        assert body["next_offset"] == 2

    run(broker, scenario)


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("?limit=0", 400, "INVALID_REQUEST"),
        ("?limit=101", 400, "INVALID_REQUEST"),
        ("?limit=x", 400, "INVALID_REQUEST"),
        ("?offset=-1", 400, "INVALID_REQUEST"),
        ("?offset=%D9%A3", 400, "INVALID_REQUEST"),  # an Arabic-Indic three
        ("?offset=" + "9" * 30, 400, "INVALID_REQUEST"),
        ("?offset=1&timestamp=1", 400, "INVALID_REQUEST"),
        ("?partition=2", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("?partition=-1", 400, "INVALID_REQUEST"),
    ],
)
def test_browsing_refuses_bad_parameters(
    broker: Broker, query: str, status: int, code: str
) -> None:
    broker.create_topic("orders", 2)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        await refused(await client.get("/api/v1/topics/orders/messages" + query), status, code)

    run(broker, scenario)


def test_browsing_an_unknown_topic_is_404(broker: Broker) -> None:
    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.get("/api/v1/topics/nope/messages")
        await refused(response, 404, "UNKNOWN_TOPIC_OR_PARTITION")

    run(broker, scenario)


# --- producing ------------------------------------------------------------------------------


def test_a_produced_message_is_appended_fsynced_where_kafka_would_put_it(
    broker: Broker,
) -> None:
    broker.create_topic("orders", 4)
    path = "/api/v1/topics/orders/messages"

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        body = {"value": "héllo", "key": "customer-7", "headers": {"source": "console"}}
        made = await ok(await client.post(path, json=body), 201)
        expected = key_partition(b"customer-7", 4)
        assert made == {"topic": "orders", "partition": expected, "offset": 0}
        partition = broker.partition("orders", expected)
        assert partition is not None and partition.log.flushed_offset >= 1  # fsynced
        page = await ok(await client.get(f"{path}?partition={expected}"))
        (message,) = page["messages"]
        assert message["value"]["text"] == "héllo" and message["key"]["text"] == "customer-7"
        assert message["headers"] == [
            {"key": "source", "value": {"base64": "Y29uc29sZQ==", "text": "console"}}
        ]
        other = (expected + 1) % 4
        chosen = await ok(await client.post(path, json={"value": "v", "partition": other}), 201)
        assert (chosen["partition"], chosen["offset"]) == (other, 0)
        spread = {
            (await ok(await client.post(path, json={"value": "v"}), 201))["partition"]
            for _ in range(4)
        }
        assert spread == {0, 1, 2, 3}  # keyless: round robin

    run(broker, scenario)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "INVALID_REQUEST"),
        ({"value": 5}, 400, "INVALID_REQUEST"),
        ({"value": "v", "key": 5}, 400, "INVALID_REQUEST"),
        ({"value": "v", "headers": {"a": 1}}, 400, "INVALID_REQUEST"),
        ({"value": "v", "headers": None}, 400, "INVALID_REQUEST"),
        ({"value": "v", "partition": None}, 400, "INVALID_REQUEST"),
        ({"value": "v", "partition": True}, 400, "INVALID_REQUEST"),
        ({"value": "v", "partition": 9}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ({"value": "\ud800"}, 400, "INVALID_REQUEST"),
        ({"value": "v", "extra": 1}, 400, "INVALID_REQUEST"),
    ],
)
def test_producing_refuses_bad_bodies(
    broker: Broker, body: dict[str, Any], status: int, code: str
) -> None:
    broker.create_topic("orders", 2)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.post("/api/v1/topics/orders/messages", json=body)
        await refused(response, status, code)

    run(broker, scenario)


def test_producing_to_an_internal_topic_or_an_unknown_one_is_refused(broker: Broker) -> None:
    broker.create_topic("orders", 1)
    broker.groups.commit_offsets(
        CommitRequest("g", "", -1, None, [("orders", 0, 0, -1, None)]), broker.clock()
    )  # makes __consumer_offsets

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.post(
            "/api/v1/topics/__consumer_offsets/messages", json={"value": "v"}
        )
        await refused(response, 400, "INVALID_TOPIC_EXCEPTION")
        response = await client.post("/api/v1/topics/nope/messages", json={"value": "v"})
        await refused(response, 404, "UNKNOWN_TOPIC_OR_PARTITION")

    run(broker, scenario)


def test_a_publish_the_flow_controller_holds_back_is_429_and_a_full_disk_503(
    broker: Broker,
) -> None:
    broker.create_topic("orders", 1)
    path = "/api/v1/topics/orders/messages"

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        broker.flow.guard("backlog:orders", Watermarks(10, 20))
        broker.flow.update("backlog:orders", 25)
        response = await client.post(path, json={"value": "v"})
        message = await refused(response, 429, "THROTTLED")
        assert "backlog:orders" in message and response.headers["Retry-After"] == "1"
        broker.flow.unguard("backlog:orders")
        broker.logs.publish_refusal = "free disk space is below disk_free_min_bytes"
        await refused(await client.post(path, json={"value": "v"}), 503, "THROTTLED")
        broker.logs.publish_refusal = None
        await ok(await client.post(path, json={"value": "v"}), 201)
        partition = broker.partition("orders", 0)
        assert partition is not None and partition.log_end_offset == 1  # refusals wrote none

    run(broker, scenario)


# --- offsets reset --------------------------------------------------------------------------


def commit(broker: Broker, group: str, offsets: dict[tuple[str, int], int]) -> None:
    request = CommitRequest(
        group, "", -1, None, [(t, p, o, -1, None) for (t, p), o in offsets.items()]
    )
    assert all(code.value == 0 for code in broker.groups.commit_offsets(request, broker.clock()))


@pytest.fixture
def committed(broker: Broker) -> Iterator[Broker]:
    """Topic "orders" (2 partitions, 10 records each, timestamps 1000 + offset) and
    group "billing" with offsets 4 and 6 committed, no members."""
    broker.create_topic("orders", 2)
    for partition in (0, 1):
        for n in range(10):
            append(broker, "orders", [Record(b"v", None, (), 1_000 + n)], partition)
    commit(broker, "billing", {("orders", 0): 4, ("orders", 1): 6})
    yield broker


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"to": "earliest"}, [0, 0]),
        ({"to": "latest"}, [10, 10]),
        ({"to": "offset", "value": 7}, [7, 7]),
        ({"to": "offset", "value": 70}, [10, 10]),  # clamped to the log end
        ({"to": "shift", "value": -5}, [0, 1]),  # clamped to the log start
        ({"to": "shift", "value": 2}, [6, 8]),
        ({"to": "timestamp", "value": 1_003}, [3, 3]),
        ({"to": "timestamp", "value": 99_999}, [10, 10]),
        ({"to": "earliest", "partitions": [1]}, [4, 0]),
        ({"to": "earliest", "topic": "orders", "partitions": [0]}, [0, 6]),
    ],
)
def test_an_offsets_reset_commits_clamped_offsets(
    committed: Broker, body: dict[str, Any], expected: list[int]
) -> None:
    broker = committed

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/groups/billing/offsets"
        preview = await ok(await client.post(path, json={**body, "dry_run": True}))
        assert broker.groups.committed("billing") == {("orders", 0): 4, ("orders", 1): 6}
        answer = await ok(await client.post(path, json=body, headers=auth))
        assert answer["dry_run"] is False and preview["dry_run"] is True
        assert answer["partitions"] == preview["partitions"]
        changed = {(p["topic"], p["partition"]): p["new"] for p in answer["partitions"]}
        now = broker.groups.committed("billing")
        assert [now[("orders", 0)], now[("orders", 1)]] == expected
        for tp, new in changed.items():
            assert now[tp] == new
        assert {p["current"] for p in answer["partitions"]} <= {4, 6}

    run(broker, scenario)


def test_an_offsets_reset_needs_the_token_but_a_dry_run_does_not(committed: Broker) -> None:
    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/groups/billing/offsets"
        response = await client.post(path, json={"to": "earliest"})
        message = await refused(response, 401, "UNAUTHORIZED")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN_FILE in message  # where the operator finds it
        wrong = {"Authorization": "Bearer " + "x" * 43}
        await refused(
            await client.post(path, json={"to": "earliest"}, headers=wrong), 401, "UNAUTHORIZED"
        )
        await ok(await client.post(path, json={"to": "earliest", "dry_run": True}))
        assert committed.groups.committed("billing")[("orders", 0)] == 4

    run(committed, scenario)


def test_an_offsets_reset_of_a_new_group_on_a_topic_commits_every_partition(
    committed: Broker,
) -> None:
    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/groups/fresh/offsets"
        body = {"to": "latest", "topic": "orders"}
        answer = await ok(await client.post(path, json=body, headers=auth))
        assert answer["partitions"] == [
            {"topic": "orders", "partition": 0, "current": None, "new": 10},
            {"topic": "orders", "partition": 1, "current": None, "new": 10},
        ]
        assert committed.groups.committed("fresh") == {("orders", 0): 10, ("orders", 1): 10}

    run(committed, scenario)


@pytest.mark.parametrize(
    ("group", "body", "status", "code"),
    [
        ("nope", {"to": "earliest"}, 404, "GROUP_ID_NOT_FOUND"),
        ("billing", {"to": "sideways"}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "offset"}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "offset", "value": -1}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "shift", "value": 1.5}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "earliest", "topic": "nope"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("billing", {"to": "earliest", "topic": None}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "earliest", "topic": "orders", "partitions": [5]}, 404,
         "UNKNOWN_TOPIC_OR_PARTITION"),
        ("billing", {"to": "earliest", "partitions": [-1]}, 400, "INVALID_REQUEST"),
        ("billing", {"to": "earliest", "dry_run": "yes"}, 400, "INVALID_REQUEST"),
    ],
)  # fmt: skip
def test_an_offsets_reset_refuses_what_it_cannot_do(
    committed: Broker, group: str, body: dict[str, Any], status: int, code: str
) -> None:
    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.post(f"/api/v1/groups/{group}/offsets", json=body, headers=auth)
        await refused(response, status, code)

    run(committed, scenario)


def test_an_offsets_reset_of_a_group_with_members_is_409(
    committed: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = committed.group_view("billing")
    assert real is not None
    member = MemberView("m-1", None, "console-test", "/127.0.0.1", (("orders", 0),))
    busy = dataclasses.replace(real, members=(member,))
    monkeypatch.setattr(committed, "group_view", lambda group_id: busy, raising=False)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/groups/billing/offsets"
        message = await refused(
            await client.post(path, json={"to": "earliest"}, headers=auth), 409, "NON_EMPTY_GROUP"
        )
        assert "active member" in message
        assert committed.groups.committed("billing")[("orders", 0)] == 4

    run(committed, scenario)


# --- trim and redrive -----------------------------------------------------------------------


def test_trimming_moves_the_log_start_as_delete_records_does(committed: Broker) -> None:
    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/topics/orders/trim"
        await refused(await client.post(path, json={"before_offset": 3}), 401, "UNAUTHORIZED")
        one = await ok(
            await client.post(path, json={"partition": 1, "before_offset": 3}, headers=auth)
        )
        assert one["partitions"] == [{"partition": 1, "log_start_offset": 3}]
        every = await ok(await client.post(path, json={"before_offset": -1}, headers=auth))
        assert every["partitions"] == [
            {"partition": 0, "log_start_offset": 10},
            {"partition": 1, "log_start_offset": 10},
        ]
        again = await ok(await client.post(path, json={"before_offset": 2}, headers=auth))
        assert {p["log_start_offset"] for p in again["partitions"]} == {10}  # never back
        await refused(
            await client.post(path, json={"before_offset": 11}, headers=auth),
            400,
            "OFFSET_OUT_OF_RANGE",
        )
        await refused(
            await client.post(path, json={"before_offset": -2}, headers=auth),
            400,
            "INVALID_REQUEST",
        )
        await refused(
            await client.post(path, json={"partition": 7, "before_offset": 1}, headers=auth),
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        )
        await refused(
            await client.post("/api/v1/topics/nope/trim", json={"before_offset": 1}, headers=auth),
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
        )

    run(committed, scenario)


def test_a_redrive_copies_fsynced_then_deletes_and_says_what_remains(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("orders", 2)
    broker.create_topic("orders.dlq", 1)
    for n in range(5):
        append(broker, "orders.dlq", [Record(b"dead %d" % n, b"k%d" % n, (("why", b"x"),), 7)])
    monkeypatch.setattr(operations, "REDRIVE_RECORDS_MAX", 3)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        path = "/api/v1/topics/orders.dlq/redrive"
        await refused(await client.post(path, json={"to": "orders"}), 401, "UNAUTHORIZED")
        dry = await ok(
            await client.post(path, json={"to": "orders", "dry_run": True}, headers=auth)
        )
        assert (dry["moved"], dry["remaining"], dry["dry_run"]) == (3, 2, True)
        first = await ok(await client.post(path, json={"to": "orders"}, headers=auth))
        assert first == {
            "moved": 3, "from": "orders.dlq", "to": "orders", "remaining": 2, "dry_run": False
        }  # fmt: skip
        second = await ok(await client.post(path, json={"to": "orders"}, headers=auth))
        assert (second["moved"], second["remaining"]) == (2, 0)
        dlq = broker.partition("orders.dlq", 0)
        assert dlq is not None and dlq.log_start_offset == dlq.log_end_offset == 5
        moved = []
        for index in (0, 1):
            page = await ok(await client.get(f"/api/v1/topics/orders/messages?partition={index}"))
            for message in page["messages"]:
                key = message["key"]["text"]
                assert index == key_partition(key.encode(), 2)  # where Kafka would put it
                assert message["headers"][0]["key"] == "why" and message["timestamp_ms"] == 7
                moved.append(message["value"]["text"])
            target = broker.partition("orders", index)
            assert target is not None and target.log.flushed_offset == target.log_end_offset
        assert sorted(moved) == [f"dead {n}" for n in range(5)]

    run(broker, scenario)


@pytest.mark.parametrize(
    ("source", "body", "status", "code"),
    [
        ("orders.dlq", {"to": "nope"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("nope", {"to": "orders"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ("orders.dlq", {"to": "orders.dlq"}, 400, "INVALID_REQUEST"),
        ("orders.dlq", {}, 400, "INVALID_REQUEST"),
        ("orders.dlq", {"to": "orders", "dry_run": 1}, 400, "INVALID_REQUEST"),
    ],
)
def test_a_redrive_refuses_what_it_cannot_do(
    broker: Broker, source: str, body: dict[str, Any], status: int, code: str
) -> None:
    broker.create_topic("orders", 1)
    broker.create_topic("orders.dlq", 1)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.post(f"/api/v1/topics/{source}/redrive", json=body, headers=auth)
        await refused(response, status, code)

    run(broker, scenario)


# --- queues ---------------------------------------------------------------------------------


def test_queues_list_share_partitions_with_their_dead_letter_topic(tmp_path: Path) -> None:
    timers = ManualTimers(ManualClock())
    broker = Broker(Settings(data_dir=tmp_path / "data"), clock=timers.clock, timers=timers)
    try:
        topic_id = broker.create_topic("jobs", 1).topic_id
        configs = {
            "share.auto.offset.reset": "earliest",
            "errors.deadletterqueue.topic.name": "jobs.dlq",
        }
        broker.group_configs.alter(
            "workers", [(name, 0, value) for name, value in configs.items()], validate_only=False
        )
        append(broker, "jobs", [Record(b"job %d" % n) for n in range(4)])
        where = [SessionPartition(topic_id, 0)]
        session = broker.shares.session("workers", "m1", 0, where, [], timers.clock())
        _got, errors = broker.shares.acquire(session, 3, 1 << 20, timers.clock())
        assert errors == {}
        broker.shares.acknowledge("workers", "m1", topic_id, 0, [(0, 0, [ACCEPT])], timers.clock())
        broker.shares.acknowledge("workers", "m1", topic_id, 0, [(1, 1, [REJECT])], timers.clock())
        timers.advance(500)

        async def scenario(client: Client, auth: dict[str, str]) -> None:
            body = await ok(await client.get("/api/v1/queues"))
            assert body == {
                "queues": [
                    {
                        "group": "workers",
                        "topic": "jobs",
                        "partition": 0,
                        "available": 1,
                        "in_flight": 1,
                        "oldest_unacknowledged_age_ms": body["queues"][0][
                            "oldest_unacknowledged_age_ms"
                        ],
                        "delivered": 3,
                        "dead_lettered": 1,
                        "dead_letter_topic": "jobs.dlq",
                    }
                ]
            }
            assert body["queues"][0]["oldest_unacknowledged_age_ms"] is not None
            dlq = await ok(await client.get("/api/v1/topics/jobs.dlq/messages"))
            assert len(dlq["messages"]) == 1  # what a redrive would move back

        run(broker, scenario)
    finally:
        broker.close()


# --- the token ------------------------------------------------------------------------------


def test_the_token_is_made_once_owner_only_and_reused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = load_or_create(settings)
    path = tmp_path / "data" / TOKEN_FILE
    assert first.source == str(path) and len(first.value) >= 40
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_or_create(settings) == first  # a restart keeps it: bookmarks keep working
    assert first.value not in repr(first)
    given = load_or_create(Settings(data_dir=tmp_path / "data", admin_token="s" * 20))
    assert (given.value, given.source) == ("s" * 20, "the admin_token setting")
    path.write_text("")
    with pytest.raises(ValueError, match="does not hold an admin token"):
        load_or_create(settings)


def test_the_token_setting_is_secret(tmp_path: Path) -> None:
    secret = "c" * 32
    settings = Settings(data_dir=tmp_path / "data", admin_token=secret)
    assert secret not in repr(settings)
    assert views.settings_document(settings)["admin_token"] == "(set)"
    assert views.settings_document(Settings(data_dir=tmp_path))["admin_token"] is None
    with pytest.raises(ValueError, match="not shown") as refused_short:
        Settings(data_dir=tmp_path, admin_token="short-secret")
    assert "short-secret" not in str(refused_short.value)


def test_deletes_need_the_token(broker: Broker) -> None:
    broker.create_topic("orders", 1)

    async def scenario(client: Client, auth: dict[str, str]) -> None:
        response = await client.delete("/api/v1/topics/orders")
        message = await refused(response, 401, "UNAUTHORIZED")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "DELETE /api/v1/topics/orders" in message
        for wrong in ("Bearer nope", "Basic " + auth["Authorization"].split()[1], ""):
            response = await client.delete(
                "/api/v1/topics/orders", headers={"Authorization": wrong}
            )
            await refused(response, 401, "UNAUTHORIZED")
        assert broker.topics.get("orders") is not None
        assert (await client.delete("/api/v1/topics/orders", headers=auth)).status == 204
        # Reads and other changes on loopback need no token.
        await ok(await client.get("/api/v1/topics"))
        await ok(await client.post("/api/v1/topics", json={"name": "again"}), 201)

    run(broker, scenario)


def test_beyond_loopback_every_api_request_needs_the_token(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "data", admin_listen="0.0.0.0:0")
    try:

        async def scenario(client: Client, auth: dict[str, str]) -> None:
            assert (await client.get("/api/v1/health")).status == 200  # load balancers
            for path in ("/api/v1/topics", "/metrics", "/openapi.json", "/api/v1/overview"):
                response = await client.get(path)
                await refused(response, 401, "UNAUTHORIZED")
                assert (await client.get(path, headers=auth)).status == 200
            # The console's static files are not the API's to guard.
            assert (await client.get("/console/nothing-here.txt")).status != 401

        run(broker, scenario)
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:9644", True),
        ("127.0.0.2:1", True),
        ("[::1]:9644", True),
        ("localhost:9644", True),
        ("0.0.0.0:9644", False),
        ("[::]:9644", False),
        ("10.0.0.5:9644", False),
        ("admin.example.com:9644", False),
        (None, True),
    ],
)
def test_what_counts_as_loopback(listen: str | None, loopback: bool) -> None:
    assert listens_on_loopback(listen) is loopback


def test_the_token_file_is_not_readable_by_others_even_with_a_loose_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create(Settings(data_dir=tmp_path / "data"))
    finally:
        os.umask(old)
    assert (tmp_path / "data" / TOKEN_FILE).stat().st_mode & 0o077 == 0


def test_connections_are_counted_per_protocol_by_a_running_broker() -> None:
    """Kafka and AMQP connections are counted by the connection pump per adapter, SQS ones
    by the SQS API's own server; a bare TCP connection counts from its accept."""

    def counts(running: RunningBroker) -> dict[str, int]:
        url = running.admin_url + "/api/v1/connections"
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            found: dict[str, int] = json.loads(response.read())["connections"]
            return found

    def wait_for(running: RunningBroker, expected: dict[str, int]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while counts(running) != expected:
            assert time.monotonic() < deadline, counts(running)
            time.sleep(0.05)

    with RunningBroker(admin=True, amqp=True, sqs=True) as running:
        wait_for(running, {"kafka": 0, "amqp": 0, "sqs": 0, "total": 0})
        kafka_host, kafka_port = running.bootstrap_servers.rsplit(":", 1)
        amqp_host, amqp_port = running.amqp_address.rsplit(":", 1)
        assert running.sqs_endpoint is not None
        sqs_host, sqs_port = running.sqs_endpoint.removeprefix("http://").rsplit(":", 1)
        opened = [
            socket.create_connection((kafka_host, int(kafka_port)), TIMEOUT_S),
            socket.create_connection((kafka_host, int(kafka_port)), TIMEOUT_S),
            socket.create_connection((amqp_host, int(amqp_port)), TIMEOUT_S),
            socket.create_connection((sqs_host, int(sqs_port)), TIMEOUT_S),
        ]
        try:
            wait_for(running, {"kafka": 2, "amqp": 1, "sqs": 1, "total": 4})
        finally:
            for sock in opened:
                sock.close()
        wait_for(running, {"kafka": 0, "amqp": 0, "sqs": 0, "total": 0})
