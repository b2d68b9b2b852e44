"""The group APIs through the dispatcher, and the coordinator's log on disk.

Real clients drive groups in tests/integration/test_groups_*.py; here the broker is
spoken to in request frames, so every version and the log's recovery and compaction can
be checked exactly. Joins that wait are driven inside one event loop, as the server does.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (  # noqa: F401 (fixture)
    Client,
    OpenClient,
    decode_reply,
    open_client,
    reopen,
    request_frame,
)

from weirmq.broker import group_service
from weirmq.broker.group_service import OFFSETS_TOPIC
from weirmq.groups.protocol import encode_assignment
from weirmq.testing.records import make_batch
from weirmq.transactions.state import PendingOffset, TxnMetadata, TxnState
from weirmq.types import TopicPartition

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
PRODUCE, METADATA, DELETE_TOPICS = 0, 3, 20
QUIET = {"flush_interval_ms": 3_600_000, "group_initial_rebalance_delay_ms": 0}


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    client = open_client(default_partitions=4, **QUIET)
    client.call(METADATA, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True})
    return client


async def call_async(client: Client, api_key: int, data: dict[str, Any], version: int) -> Any:
    outcome = client.dispatcher.handle(request_frame(api_key, version, data))
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return decode_reply(api_key, version, outcome)


def commit_request(group: str, offsets: dict[int, int], **member: Any) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id": member.get("generation", -1),
        "generation_id_or_member_epoch": member.get("generation", -1),
        "member_id": member.get("member_id", ""),
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": o,
                        "committed_leader_epoch": -1,
                        "committed_metadata": f"m{o}",
                    }
                    for p, o in offsets.items()
                ],
            }
        ],
    }


def fetch_offsets(client: Client, group: str, version: int = 9) -> dict[int, int]:
    if version >= 8:
        data: dict[str, Any] = {
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False,
        }
        response = client.call(OFFSET_FETCH, data, version)
        (entry,) = response.groups
        assert entry.error_code is ErrorCode.none
        topics = entry.topics
    else:
        data = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1, 2, 3]}]}
        response = client.call(OFFSET_FETCH, data, version)
        assert getattr(response, "error_code", ErrorCode.none) is ErrorCode.none  # v2+
        topics = response.topics
    return {
        int(p.partition_index): int(p.committed_offset)
        for t in topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_names_this_broker(client: Client, version: int) -> None:
    client.broker.advertised = ("127.0.0.1", 19092)
    data = {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]}
    response = client.call(FIND_COORDINATOR, data, version)
    if version < 4:
        assert (response.error_code, response.node_id, response.port) == (ErrorCode.none, 0, 19092)
    else:
        assert [c.key for c in response.coordinators] == ["g", "h"]
        assert {(c.node_id, c.host, c.port) for c in response.coordinators} == {
            (0, "127.0.0.1", 19092)
        }


def test_find_coordinator_for_transactions_names_this_broker(client: Client) -> None:
    response = client.call(FIND_COORDINATOR, {"key": "tx", "key_type": 1}, 3)
    assert (response.error_code, response.node_id) == (ErrorCode.none, client.broker.node_id)
    response = client.call(FIND_COORDINATOR, {"key": "tx", "key_type": 3}, 3)
    assert response.error_code is ErrorCode.invalid_request


@pytest.mark.parametrize("version", [7, 8, 9])
def test_require_stable_waits_for_offsets_a_transaction_holds(client: Client, version: int) -> None:
    """KIP-447: while a transaction holds offsets for a partition of the group, OffsetFetch
    with require_stable answers it UNSTABLE_OFFSET_COMMIT (the client retries); without
    it, the committed offset."""
    client.call(OFFSET_COMMIT, commit_request("g", {0: 5, 1: 6}), 9)
    client.broker.txns.coordinator.apply(
        TxnMetadata(
            "tx",
            producer_id=3,
            producer_epoch=0,
            last_producer_id=-1,
            last_producer_epoch=-1,
            timeout_ms=60_000,
            state=TxnState.ONGOING,
            groups={"g": {TopicPartition("t", 1): PendingOffset(9, -1, "")}},
            start_ms=0,
        )
    )
    topics = [{"name": "t", "partition_indexes": [0, 1]}]
    if version >= 8:
        data: dict[str, Any] = {
            "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": topics}],
            "require_stable": True,
        }
        (entry,) = client.call(OFFSET_FETCH, data, version).groups
        partitions = entry.topics[0].partitions
    else:
        data = {"group_id": "g", "topics": topics, "require_stable": True}
        partitions = client.call(OFFSET_FETCH, data, version).topics[0].partitions
    answers = {int(p.partition_index): (p.error_code, int(p.committed_offset)) for p in partitions}
    assert answers == {0: (ErrorCode.none, 5), 1: (ErrorCode.unstable_offset_commit, -1)}
    assert fetch_offsets(client, "g", version) == {0: 5, 1: 6}  # not asking for stability


@pytest.mark.parametrize("commit_version", range(2, 10))
def test_offsets_committed_in_every_version_are_fetched_in_every_version(
    client: Client, commit_version: int
) -> None:
    response = client.call(OFFSET_COMMIT, commit_request("g", {0: 5, 3: 7}), commit_version)
    codes = [p.error_code for t in response.topics for p in t.partitions]
    assert codes == [ErrorCode.none, ErrorCode.none]
    for fetch_version in range(1, 10):
        assert fetch_offsets(client, "g", fetch_version) == {0: 5, 3: 7}


@pytest.mark.parametrize("how", ["clean", "no-snapshot", "crash"])
def test_offsets_and_groups_survive_restarts_and_crashes(
    client: Client,
    how: str,
    open_client: OpenClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    client.call(OFFSET_COMMIT, commit_request("g", {0: 5, 1: 6}), 9)
    client.call(OFFSET_COMMIT, commit_request("g", {0: 9}), 9)
    client.call(OFFSET_COMMIT, commit_request("other", {2: 1}), 9)
    again = reopen(client, how, open_client, tmp_path)
    assert fetch_offsets(again, "g") == {0: 9, 1: 6}
    assert fetch_offsets(again, "other") == {2: 1}
    listed = again.call(LIST_GROUPS, {"states_filter": [], "types_filter": []}, 5)
    assert sorted(g.group_id for g in listed.groups) == ["g", "other"]


def test_the_offsets_topic_is_internal(client: Client) -> None:
    client.call(OFFSET_COMMIT, commit_request("g", {0: 5}), 9)
    response = client.call(METADATA, {"topics": None, "allow_auto_topic_creation": False})
    internal = {t.name: t.is_internal for t in response.topics}
    assert internal == {"t": False, OFFSETS_TOPIC: True}
    produced = client.produce(OFFSETS_TOPIC, make_batch(1))
    assert produced.error_code is ErrorCode.invalid_topic_exception
    topics = [{"name": OFFSETS_TOPIC, "topic_id": None}]
    deleted = client.call(DELETE_TOPICS, {"topics": topics, "timeout": 1000}, 6)
    (result,) = deleted.responses
    assert result.error_code is ErrorCode.invalid_topic_exception
    assert fetch_offsets(client, "g") == {0: 5}


def test_no_offsets_topic_until_a_group_writes(client: Client) -> None:
    assert client.broker.topics.get(OFFSETS_TOPIC) is None
    client.call(OFFSET_COMMIT, commit_request("g", {0: 1}), 9)
    assert client.broker.topics.get(OFFSETS_TOPIC) is not None


def test_the_log_is_compacted_and_the_state_kept(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_service, "COMPACT_MIN_BYTES", 20_000)
    monkeypatch.setitem(group_service.OFFSETS_TOPIC_CONFIGS, "segment.bytes", "4096")

    async def commit_many() -> None:
        for round_ in range(300):
            await call_async(client, OFFSET_COMMIT, commit_request("g", {0: round_, 1: 1}), 9)
            await asyncio.sleep(0)  # compaction runs from the loop between requests

    asyncio.run(commit_many())
    log = client.log(OFFSETS_TOPIC)
    assert log.log_start_offset > 0
    assert log.size_bytes < 40_000
    client.restart()
    assert fetch_offsets(client, "g") == {0: 299, 1: 1}


def join_request(member_id: str = "", instance: str | None = None) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta"}],
        "reason": None,
    }


def test_join_sync_heartbeat_leave_in_one_loop(client: Client) -> None:
    async def scenario() -> None:
        first = await call_async(client, JOIN_GROUP, join_request(), 9)
        assert first.error_code is ErrorCode.member_id_required
        a = first.member_id
        joined_a = await call_async(client, JOIN_GROUP, join_request(a), 9)
        assert (joined_a.error_code, joined_a.leader, joined_a.generation_id) == (
            ErrorCode.none,
            a,
            1,
        )
        sync = {
            "group_id": "g",
            "generation_id": 1,
            "member_id": a,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": a, "assignment": b"all"}],
        }
        synced = await call_async(client, SYNC_GROUP, sync, 5)
        assert synced.assignment == b"all"
        # a second member (v3: no MEMBER_ID_REQUIRED) waits until the first rejoins
        second = asyncio.ensure_future(call_async(client, JOIN_GROUP, join_request(), 3))
        await asyncio.sleep(0.01)
        assert not second.done()
        beat = {"group_id": "g", "generation_id": 1, "member_id": a, "group_instance_id": None}
        answer = await call_async(client, HEARTBEAT, beat, 4)
        assert answer.error_code is ErrorCode.rebalance_in_progress
        rejoined = await call_async(client, JOIN_GROUP, join_request(a), 9)
        joined_b = await second
        assert rejoined.generation_id == joined_b.generation_id == 2
        assert {m.member_id for m in rejoined.members} == {a, joined_b.member_id}
        described = await call_async(client, DESCRIBE_GROUPS, {"groups": ["g", "x"]}, 5)
        assert [g.group_state for g in described.groups] == ["CompletingRebalance", "Dead"]
        left = await call_async(
            client,
            LEAVE_GROUP,
            {
                "group_id": "g",
                "members": [
                    {"member_id": joined_b.member_id, "group_instance_id": None, "reason": "bye"}
                ],
            },
            5,
        )
        assert left.members[0].error_code is ErrorCode.none
        gone = await call_async(client, DELETE_GROUPS, {"groups_names": ["g"]}, 2)
        assert gone.results[0].error_code is ErrorCode.non_empty_group

    asyncio.run(scenario())


def test_a_join_whose_connection_closed_gets_no_reply_and_shutdown_answers_the_rest(
    client: Client,
) -> None:
    replies = client.broker.group_replies

    async def scenario() -> None:
        a = (await call_async(client, JOIN_GROUP, join_request(), 3)).member_id
        sync = {
            "group_id": "g",
            "generation_id": 1,
            "member_id": a,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": a, "assignment": b"all"}],
        }
        assert (await call_async(client, SYNC_GROUP, sync, 5)).error_code is ErrorCode.none
        # b waits for `a` to rejoin; its connection closes, which cancels the request
        gone = asyncio.ensure_future(call_async(client, JOIN_GROUP, join_request(), 3))
        await asyncio.sleep(0.01)
        assert replies.waiting == 1
        gone.cancel()
        await asyncio.sleep(0)
        assert gone.cancelled() and replies.waiting == 0
        # the rebalance completes: b's reply finds no request and is dropped quietly
        kept = asyncio.ensure_future(call_async(client, JOIN_GROUP, join_request(), 3))
        await asyncio.sleep(0.01)
        rejoined = await call_async(client, JOIN_GROUP, join_request(a), 9)
        joined_c = await kept
        assert rejoined.generation_id == joined_c.generation_id == 2
        assert replies.waiting == 0
        # a join waiting when the broker stops is told to find the coordinator again
        last = asyncio.ensure_future(call_async(client, JOIN_GROUP, join_request(), 3))
        await asyncio.sleep(0.01)
        assert not last.done()
        client.broker.wake_all()
        assert (await last).error_code is ErrorCode.not_coordinator
        assert replies.waiting == 0

    asyncio.run(scenario())


def test_deleting_a_topic_deletes_the_groups_offsets_of_it(client: Client) -> None:
    client.call(OFFSET_COMMIT, commit_request("g", {0: 5}), 9)
    topics = [{"name": "t", "topic_id": None}]
    (result,) = client.call(DELETE_TOPICS, {"topics": topics, "timeout": 1000}, 6).responses
    assert result.error_code is ErrorCode.none
    client.call(METADATA, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True})
    assert fetch_offsets(client, "g") == {}  # the new "t" inherits nothing
    client.restart()
    assert fetch_offsets(client, "g") == {}


@pytest.mark.parametrize("version", range(0, 6))
def test_describe_groups_shows_a_stable_group_in_every_version(
    client: Client, version: int
) -> None:
    async def scenario() -> Any:
        joined = await call_async(client, JOIN_GROUP, join_request(instance="host-a"), 9)
        sync = {
            "group_id": "g",
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "group_instance_id": "host-a",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": joined.member_id, "assignment": b"all"}],
        }
        await call_async(client, SYNC_GROUP, sync, 5)
        described = await call_async(client, DESCRIBE_GROUPS, {"groups": ["g", "x"]}, version)
        return joined.member_id, described

    member_id, described = asyncio.run(scenario())

    g, x = described.groups
    assert (g.error_code, g.group_id, g.group_state) == (ErrorCode.none, "g", "Stable")
    assert (g.protocol_type, g.protocol_data) == ("consumer", "range")
    (member,) = g.members
    assert (member.member_id, member.client_id) == (member_id, "test-client")
    assert (member.member_metadata, member.member_assignment) == (b"meta", b"all")
    if version >= 4:
        assert member.group_instance_id == "host-a"
    if version >= 3:
        assert g.authorized_operations == -(2**31)
    # a group nobody knows is Dead, without an error, as Kafka describes it
    assert (x.error_code, x.group_id, x.group_state, x.members) == (ErrorCode.none, "x", "Dead", ())


def consumer_heartbeat(client: Client, member_id: str, instance_id: str | None = None) -> Any:
    data = {
        "group_id": "kg",
        "member_id": member_id,
        "member_epoch": 0,
        "instance_id": instance_id,
        "rack_id": None,
        "rebalance_timeout": 30_000,
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
    }
    response = client.call(CONSUMER_GROUP_HEARTBEAT, data, 1)
    assert response.error_code is ErrorCode.none, response.error_message
    return response


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_shows_epochs_and_both_assignments(
    client: Client, version: int
) -> None:
    topic_id = client.metadata(["t"]).topics[0].topic_id
    consumer_heartbeat(client, "member-a", "host-a")  # gets all four partitions
    consumer_heartbeat(client, "member-b")  # the target splits them; a has not heard yet

    data = {"group_ids": ["kg", "nope"], "include_authorized_operations": False}
    kg, nope = client.call(CONSUMER_GROUP_DESCRIBE, data, version).groups

    assert (kg.error_code, kg.error_message, kg.group_id) == (ErrorCode.none, None, "kg")
    assert (kg.group_state, kg.group_epoch, kg.assignment_epoch) == ("Reconciling", 2, 2)
    assert (kg.assignor_name, kg.authorized_operations) == ("uniform", -(2**31))
    a, b = kg.members
    assert (a.member_id, a.instance_id, a.rack_id, a.member_epoch) == (
        "member-a",
        "host-a",
        None,
        1,
    )
    assert (b.member_id, b.instance_id, b.member_epoch) == ("member-b", None, 2)
    assert (a.client_id, a.subscribed_topic_names, a.subscribed_topic_regex) == (
        "test-client",
        ("t",),
        None,
    )

    def parts(assignment: Any) -> list[tuple[Any, str, tuple[int, ...]]]:
        return [
            (t.topic_id, t.topic_name, tuple(t.partitions)) for t in assignment.topic_partitions
        ]

    assert parts(a.assignment) == [(topic_id, "t", (0, 1, 2, 3))]
    assert parts(a.target_assignment) == [(topic_id, "t", (0, 1))]
    assert parts(b.assignment) == []
    assert parts(b.target_assignment) == [(topic_id, "t", (2, 3))]
    if version >= 1:
        assert (a.member_type, b.member_type) == (1, 1)
    assert (nope.error_code, nope.group_id, nope.members) == (
        ErrorCode.group_id_not_found,
        "nope",
        (),
    )
    # classic tools see the group too, its assignments in the consumer protocol's format
    (classic,) = client.call(DESCRIBE_GROUPS, {"groups": ["kg"]}, 5).groups
    assert (classic.group_state, classic.protocol_data) == ("Reconciling", "uniform")
    assert [m.member_assignment for m in classic.members] == [
        encode_assignment([("t", p) for p in range(4)]),
        encode_assignment([]),
    ]
