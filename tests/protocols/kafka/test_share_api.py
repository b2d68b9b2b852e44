"""The share group APIs (KIP-932) through the dispatcher, on a clock stepped by hand.

ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and ShareAcknowledge
(79) are spoken to in request frames encoded with kio's classes, as in test_handlers.py,
and every reply is decoded with kio's response class. The cases follow Kafka's own
ShareGroupHeartbeatRequestTest and ShareFetchAcknowledgeRequestTest: session epochs and
their errors, acquired records and delivery counts, acknowledgements piggybacked on a
fetch or sent alone, lock timeouts, the delivery limit, and long polls.

The broker runs on a `ManualClock` and `ManualTimers`, so a 30-second lock or a long
poll is driven to the millisecond without sleeping. Group configs (lock duration, delivery
limit, retry backoff, auto offset reset) are set as a client sets them: IncrementalAlterConfigs
on the GROUP config resource.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (
    Client,
    batch_headers,
    decode_reply,
    fetch_request,
    fetch_results,
    request_frame,
)

from weirmq.broker.partition import Durability
from weirmq.records.batch import ATTR_TRANSACTIONAL, Record, decode_full_records, encode_batch
from weirmq.settings import Settings
from weirmq.testing import ManualClock, ManualTimers
from weirmq.testing.records import make_batch, split_batches

PRODUCE, FETCH, OFFSET_COMMIT, FIND_COORDINATOR, LIST_GROUPS = 0, 1, 8, 10, 16
API_VERSIONS, CREATE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 18, 19, 32, 44
SHARE_HEARTBEAT, SHARE_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
GROUP_RESOURCE, LIBRDKAFKA_GROUP_RESOURCE, SET = 32, 3, 0
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
INITIAL_EPOCH, FINAL_EPOCH = 0, -1

LOCK_MS = 30_000  # group.share.record.lock.duration.ms
BACKOFF_MS = 1_000  # weirmq.share.retry.backoff.ms
SESSION_TIMEOUT_MS = 45_000  # group.share.session.timeout.ms
WAIT_MAX_MS = 30_000  # a ShareFetch's max wait is capped here, as a Fetch's is

Key = tuple[uuid.UUID, int]
AckBatch = tuple[int, int, Sequence[int]]


# --- the broker and its requests --------------------------------------------------------------


@pytest.fixture
def timers() -> ManualTimers:
    return ManualTimers(ManualClock())


@pytest.fixture
def client(tmp_path: Path, timers: ManualTimers) -> Iterator[Client]:
    settings = Settings(
        data_dir=tmp_path / "data",
        flush_interval_ms=3_600_000,
        default_partitions=1,
        group_initial_rebalance_delay_ms=0,
        # below Kafka's bounds for a group's own values: these tests step short ones
        group_share_min_session_timeout_ms=1,
        group_share_min_heartbeat_interval_ms=1,
        group_share_min_record_lock_duration_ms=1,
        group_share_max_record_lock_duration_ms=3_600_000,
        group_share_min_delivery_count_limit=1,
    )
    client = Client(settings, clock=timers.clock, timers=timers)
    yield client
    client.close()


def call(client: Client, api_key: int, data: Mapping[str, Any], version: int = 1) -> Any:
    return client.call(api_key, data, version)


def create_topic(client: Client, name: str, partitions: int = 1) -> uuid.UUID:
    request = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": -1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 30_000,
        "validate_only": False,
    }
    (created,) = call(client, CREATE_TOPICS, request, 7).topics
    assert created.error_code is ErrorCode.none
    return uuid.UUID(str(created.topic_id))


def produce(client: Client, topic: str, count: int, *, partition: int = 0) -> int:
    """`count` records in one batch; returns the base offset."""
    answer = client.produce(topic, make_batch(count), partition=partition)
    assert answer.error_code is ErrorCode.none
    return int(answer.base_offset)


def configure(client: Client, group: str, configs: Mapping[str, str], *, kind: int = 32) -> Any:
    request = {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": group,
                "configs": [
                    {"name": name, "config_operation": SET, "value": value}
                    for name, value in configs.items()
                ],
            }
        ],
        "validate_only": False,
    }
    (result,) = call(client, INCREMENTAL_ALTER_CONFIGS, request).responses
    return result


def heartbeat(
    client: Client,
    member_id: str,
    epoch: int = INITIAL_EPOCH,
    topics: Sequence[str] | None = ("t",),
    *,
    group: str = "g",
) -> Any:
    request = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "rack_id": None,
        "subscribed_topic_names": None if topics is None else list(topics),
    }
    return call(client, SHARE_HEARTBEAT, request)


def describe(client: Client, *groups: str) -> list[Any]:
    request = {"group_ids": list(groups), "include_authorized_operations": False}
    return list(call(client, SHARE_DESCRIBE, request).groups)


def _topics(wanted: Sequence[Key], acks: Mapping[Key, Sequence[AckBatch]]) -> list[dict[str, Any]]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in [*wanted, *acks]:
        partitions = by_topic.setdefault(topic_id, [])
        if partition not in partitions:
            partitions.append(partition)
    return [
        {
            "topic_id": topic_id,
            "partitions": [
                {
                    "partition_index": p,
                    "acknowledgement_batches": [
                        {"first_offset": f, "last_offset": la, "acknowledge_types": list(types)}
                        for f, la, types in acks.get((topic_id, p), ())
                    ],
                }
                for p in partitions
            ],
        }
        for topic_id, partitions in by_topic.items()
    ]


def fetch_data(
    member_id: str,
    epoch: int,
    wanted: Sequence[Key] = (),
    acks: Mapping[Key, Sequence[AckBatch]] | None = None,
    *,
    group: str = "g",
    max_wait_ms: int = 0,
    max_records: int = 500,
    forgotten: Sequence[Key] = (),
) -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": member_id,
        "share_session_epoch": epoch,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": max_records,
        "batch_size": max_records,
        "topics": _topics(wanted, acks or {}),
        "forgotten_topics_data": [
            {"topic_id": topic_id, "partitions": [p]} for topic_id, p in forgotten
        ],
    }


def share_fetch(
    client: Client,
    member_id: str,
    epoch: int,
    wanted: Sequence[Key] = (),
    acks: Mapping[Key, Sequence[AckBatch]] | None = None,
    **options: Any,
) -> Any:
    return call(client, SHARE_FETCH, fetch_data(member_id, epoch, wanted, acks, **options))


def ack_data(
    member_id: str,
    epoch: int,
    acks: Mapping[Key, Sequence[AckBatch]],
    *,
    group: str = "g",
) -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": member_id,
        "share_session_epoch": epoch,
        "topics": _topics((), acks),
    }


def acknowledge(
    client: Client,
    member_id: str,
    epoch: int,
    acks: Mapping[Key, Sequence[AckBatch]],
    *,
    group: str = "g",
) -> Any:
    return call(client, SHARE_ACKNOWLEDGE, ack_data(member_id, epoch, acks, group=group))


def partitions(response: Any) -> dict[Key, Any]:
    """Each partition's answer in a ShareFetch or ShareAcknowledge response."""
    assert response.error_code is ErrorCode.none, response.error_message
    return {
        (uuid.UUID(str(topic.topic_id)), int(p.partition_index)): p
        for topic in response.responses
        for p in topic.partitions
    }


def acquired(response: Any) -> dict[Key, list[tuple[int, int, int]]]:
    """(first offset, last offset, delivery count) of the records acquired, by partition;
    checks that the records sent hold every offset acquired."""
    result = {}
    for key, answer in partitions(response).items():
        ranges = [
            (int(r.first_offset), int(r.last_offset), int(r.delivery_count))
            for r in answer.acquired_records
        ]
        if not ranges:
            assert not answer.records, "records sent without any acquired"
            continue
        headers = batch_headers(answer.records)
        first_sent = headers[0].base_offset
        last_sent = headers[-1].base_offset + headers[-1].last_offset_delta
        assert first_sent <= ranges[0][0] and ranges[-1][1] <= last_sent
        result[key] = ranges
    return result


def only_acquired(response: Any) -> list[tuple[int, int, int]]:
    got = acquired(response)
    if not got:
        return []
    (ranges,) = got.values()
    return ranges


@pytest.fixture
def tid(client: Client) -> uuid.UUID:
    """Topic "t", one partition."""
    return create_topic(client, "t")


def open_session(client: Client, member_id: str, tid: uuid.UUID, **options: Any) -> Any:
    """An epoch-0 ShareFetch of t-0 (the next request carries epoch 1)."""
    return share_fetch(client, member_id, INITIAL_EPOCH, [(tid, 0)], **options)


# --- discovery ------------------------------------------------------------------------------


def test_api_versions_advertises_the_share_apis_at_version_1_only(client: Client) -> None:
    response = call(
        client,
        API_VERSIONS,
        {"client_software_name": "weirmq-tests", "client_software_version": "1.0"},
        4,
    )
    table = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}
    assert {key: table.get(key) for key in (76, 77, 78, 79)} == {
        76: (1, 1),
        77: (1, 1),
        78: (1, 1),
        79: (1, 1),
    }


def test_find_coordinator_for_a_share_partition_key_names_this_broker(
    client: Client, tid: uuid.UUID
) -> None:
    client.broker.advertised = ("127.0.0.1", 19092)
    key = f"g:{tid}:0"
    request = {"key": "", "key_type": 2, "coordinator_keys": [key]}
    (coordinator,) = call(client, FIND_COORDINATOR, request, 6).coordinators
    assert coordinator.error_code is ErrorCode.none
    assert (coordinator.key, coordinator.node_id, coordinator.host, coordinator.port) == (
        key,
        0,
        "127.0.0.1",
        19092,
    )


# --- ShareGroupHeartbeat (ShareGroupHeartbeatRequestTest) -------------------------------------


def test_a_join_gets_epoch_1_and_every_partition_by_topic_id(client: Client) -> None:
    tid = create_topic(client, "t", 3)
    joined = heartbeat(client, "member-a")
    assert joined.error_code is ErrorCode.none
    assert (joined.member_id, joined.member_epoch) == ("member-a", 1)
    assert joined.heartbeat_interval == datetime.timedelta(milliseconds=5_000)
    ((topic_id, assigned),) = [
        (t.topic_id, sorted(t.partitions)) for t in joined.assignment.topic_partitions
    ]
    assert (topic_id, assigned) == (tid, [0, 1, 2])
    again = heartbeat(client, "member-a", 1, None)
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, 1)
    assert again.assignment is None, "an unchanged assignment is not sent again"


def test_a_second_member_bumps_the_epoch_and_the_partitions_are_split(client: Client) -> None:
    create_topic(client, "t", 2)
    heartbeat(client, "member-a")
    joined = heartbeat(client, "member-b")
    assert joined.member_epoch == 2
    first = heartbeat(client, "member-a", 1, None)
    assert first.member_epoch == 2
    split = [
        sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)
        for answer in (first, joined)
    ]
    assert sorted(split) == [[0], [1]]


def test_a_join_to_a_topic_that_does_not_exist_gets_an_empty_assignment(client: Client) -> None:
    joined = heartbeat(client, "member-a", topics=["missing"])
    assert joined.error_code is ErrorCode.none
    assert joined.assignment is not None and joined.assignment.topic_partitions == ()


@pytest.mark.parametrize(
    ("member_id", "epoch", "topics"),
    [("", 0, ["t"]), ("member-a", 0, None), ("member-a", -2, ["t"])],
    ids=["empty-member-id", "join-without-topics", "epoch-below-leave"],
)
def test_malformed_heartbeats_are_invalid_requests(
    client: Client, member_id: str, epoch: int, topics: list[str] | None
) -> None:
    create_topic(client, "t")
    refused = heartbeat(client, member_id, epoch, topics)
    assert refused.error_code is ErrorCode.invalid_request
    assert refused.error_message
    assert refused.member_epoch == -1 and refused.assignment is None


def test_a_refused_heartbeat_creates_no_group(client: Client) -> None:
    """Kafka checks the request before it looks the group up: a malformed first heartbeat
    must not leave an empty share group behind, since a share group is never expired and
    keeps its id from every other kind of group until it is deleted."""
    create_topic(client, "t")
    assert heartbeat(client, "", 0, ["t"]).error_code is ErrorCode.invalid_request
    (described,) = describe(client, "g")
    assert described.error_code is ErrorCode.group_id_not_found
    listed = call(client, LIST_GROUPS, {"states_filter": [], "types_filter": []}, 5)
    assert [g.group_id for g in listed.groups] == []


def test_an_unknown_member_with_a_nonzero_epoch_is_unknown_member_id(client: Client) -> None:
    create_topic(client, "t")
    no_group = heartbeat(client, "member-a", 1, None)
    assert no_group.error_code is ErrorCode.unknown_member_id
    heartbeat(client, "member-a")
    stranger = heartbeat(client, "member-b", 3, None)
    assert stranger.error_code is ErrorCode.unknown_member_id
    assert stranger.member_epoch == -1


def test_an_epoch_ahead_of_the_member_is_fenced(client: Client) -> None:
    create_topic(client, "t")
    heartbeat(client, "member-a")
    fenced = heartbeat(client, "member-a", 7, None)
    assert fenced.error_code is ErrorCode.fenced_member_epoch


def test_leave_answers_epoch_minus_1_and_empties_the_group(client: Client) -> None:
    create_topic(client, "t")
    heartbeat(client, "member-a")
    left = heartbeat(client, "member-a", FINAL_EPOCH, None)
    assert (left.error_code, left.member_id, left.member_epoch) == (
        ErrorCode.none,
        "member-a",
        -1,
    )
    (described,) = describe(client, "g")
    assert (described.group_state, described.members) == ("Empty", ())
    again = heartbeat(client, "member-a", FINAL_EPOCH, None)
    assert again.error_code is ErrorCode.unknown_member_id


def test_a_share_heartbeat_on_a_classic_group_is_refused(client: Client) -> None:
    create_topic(client, "t")
    commit_outside_any_group(client, "classic")
    refused = heartbeat(client, "member-a", group="classic")
    assert refused.error_code is ErrorCode.inconsistent_group_protocol


def test_a_silent_member_expires_after_the_share_session_timeout(
    client: Client, timers: ManualTimers
) -> None:
    create_topic(client, "t")
    heartbeat(client, "member-a")
    timers.advance(SESSION_TIMEOUT_MS - 1)
    (described,) = describe(client, "g")
    assert [m.member_id for m in described.members] == ["member-a"]
    timers.advance(1)
    (described,) = describe(client, "g")
    assert (described.group_state, described.members) == ("Empty", ())
    assert heartbeat(client, "member-a", 1, None).error_code is ErrorCode.unknown_member_id


# --- ShareGroupDescribe -----------------------------------------------------------------------


def commit_outside_any_group(client: Client, group: str) -> None:
    """An OffsetCommit with generation -1: creates a classic group holding an offset."""
    request = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 0,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }
    (topic,) = call(client, OFFSET_COMMIT, request, 9).topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.none]


def test_describe_a_share_group_its_members_and_their_assignment(client: Client) -> None:
    tid = create_topic(client, "t", 2)
    heartbeat(client, "member-a")
    (described,) = describe(client, "g")
    assert described.error_code is ErrorCode.none
    assert (described.group_id, described.group_state, described.assignor_name) == (
        "g",
        "Stable",
        "simple",
    )
    assert (described.group_epoch, described.assignment_epoch) == (1, 1)
    (member,) = described.members
    assert (member.member_id, member.member_epoch, member.client_id) == (
        "member-a",
        1,
        "test-client",
    )
    assert member.subscribed_topic_names == ("t",)
    ((topic_id, name, assigned),) = [
        (t.topic_id, t.topic_name, sorted(t.partitions)) for t in member.assignment.topic_partitions
    ]
    assert (topic_id, name, assigned) == (tid, "t", [0, 1])


def test_describe_an_unknown_group_and_a_classic_group_is_group_id_not_found(
    client: Client,
) -> None:
    create_topic(client, "t")
    commit_outside_any_group(client, "classic")
    heartbeat(client, "member-a", group="share")
    answers = {d.group_id: d for d in describe(client, "nope", "classic", "share")}
    assert answers["nope"].error_code is ErrorCode.group_id_not_found
    assert answers["classic"].error_code is ErrorCode.group_id_not_found
    assert answers["share"].error_code is ErrorCode.none
    assert answers["nope"].error_message


def test_list_groups_shows_a_share_group_with_type_share(client: Client) -> None:
    create_topic(client, "t")
    heartbeat(client, "member-a")
    listed = call(client, LIST_GROUPS, {"states_filter": [], "types_filter": []}, 5)
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [
        ("g", "share", "Stable", "share")
    ]


def test_list_groups_filters_share_groups_by_type(client: Client) -> None:
    create_topic(client, "t")
    heartbeat(client, "member-a", group="share")
    commit_outside_any_group(client, "classic")
    for wanted in (["share"], ["Share"]):
        request = {"states_filter": [], "types_filter": wanted}
        listed = call(client, LIST_GROUPS, request, 5)
        assert [g.group_id for g in listed.groups] == ["share"], wanted
    request = {"states_filter": [], "types_filter": ["classic"]}
    assert [g.group_id for g in call(client, LIST_GROUPS, request, 5).groups] == ["classic"]


# --- ShareFetch: sessions ---------------------------------------------------------------------


def test_epoch_0_opens_a_session_and_acquires_records(client: Client, tid: uuid.UUID) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 3)
    produce(client, "t", 2)
    response = open_session(client, "member-a", tid)
    assert response.error_code is ErrorCode.none
    assert response.acquisition_lock_timeout == datetime.timedelta(milliseconds=LOCK_MS)
    (answer,) = partitions(response).values()
    assert (answer.error_code, answer.acknowledge_error_code) == (ErrorCode.none, 0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in answer.acquired_records] == [
        (0, 4, 1)
    ]
    assert [(h.base_offset, h.last_offset_delta) for h in batch_headers(answer.records)] == [
        (0, 2),
        (3, 1),
    ]
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (0, 0)
    follow_up = share_fetch(client, "member-a", 1)
    assert follow_up.error_code is ErrorCode.none
    assert only_acquired(follow_up) == [], "records held by the member are not sent twice"


def test_transaction_markers_are_gaps_never_delivered(client: Client, tid: uuid.UUID) -> None:
    """A committed transaction's marker (a control batch) is never acquired nor sent: its
    offset is archived as a gap, as Kafka's share groups skip control records."""
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    partition = client.broker.partition("t", 0)
    assert partition is not None
    partition.txn_check = lambda producer_id, epoch, tp: ErrorCode.none
    transactional = encode_batch(
        [Record(b"a"), Record(b"b"), Record(b"c")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        attributes=ATTR_TRANSACTIONAL,
    )
    partition.publish(transactional, Durability.WRITTEN)
    assert partition.write_marker(7, 0, commit=True) == 3
    produce(client, "t", 2)  # offsets 4 and 5
    response = open_session(client, "member-a", tid)
    assert acquired(response) == {(tid, 0): [(0, 2, 1), (4, 5, 1)]}
    (answer,) = partitions(response).values()
    assert not any(h.is_control for h in batch_headers(answer.records))


def test_the_acquisition_lock_timeout_is_the_groups_lock_duration(
    client: Client, tid: uuid.UUID
) -> None:
    assert configure(client, "g", {"share.record.lock.duration.ms": "7000"}).error_code is (
        ErrorCode.none
    )
    response = open_session(client, "member-a", tid)
    assert response.acquisition_lock_timeout == datetime.timedelta(milliseconds=7_000)


def test_epoch_0_with_acknowledgements_is_an_invalid_request(
    client: Client, tid: uuid.UUID
) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 3)
    refused = share_fetch(
        client, "member-a", INITIAL_EPOCH, [(tid, 0)], {(tid, 0): [(0, 2, [ACCEPT])]}
    )
    assert refused.error_code is ErrorCode.invalid_request
    assert refused.responses == ()
    # Nothing of the request applied: no session was opened.
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.share_session_not_found


def test_a_wrong_session_epoch_is_refused_and_the_session_stays(
    client: Client, tid: uuid.UUID
) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    open_session(client, "member-a", tid)
    for wrong in (2, 5):
        refused = share_fetch(client, "member-a", wrong)
        assert refused.error_code is ErrorCode.invalid_share_session_epoch
        assert refused.responses == ()
    produce(client, "t", 2)
    resumed = share_fetch(client, "member-a", 1)
    assert resumed.error_code is ErrorCode.none
    assert only_acquired(resumed) == [(0, 1, 1)]
    assert share_fetch(client, "member-a", 2).error_code is ErrorCode.none


def test_a_nonzero_epoch_without_a_session_is_share_session_not_found(
    client: Client, tid: uuid.UUID
) -> None:
    refused = share_fetch(client, "member-a", 1, [(tid, 0)])
    assert refused.error_code is ErrorCode.share_session_not_found
    open_session(client, "member-a", tid)
    other = share_fetch(client, "member-b", 1, [(tid, 0)])
    assert other.error_code is ErrorCode.share_session_not_found


def test_an_empty_member_id_is_an_invalid_request(client: Client, tid: uuid.UUID) -> None:
    assert open_session(client, "", tid).error_code is ErrorCode.invalid_request


def test_reopening_a_session_with_epoch_0_starts_its_epochs_again(
    client: Client, tid: uuid.UUID
) -> None:
    open_session(client, "member-a", tid)
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.none
    assert open_session(client, "member-a", tid).error_code is ErrorCode.none
    assert share_fetch(client, "member-a", 2).error_code is ErrorCode.invalid_share_session_epoch
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.none


def test_a_forgotten_partition_is_no_longer_fetched(client: Client) -> None:
    first, second = create_topic(client, "t"), create_topic(client, "u")
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    opened = share_fetch(client, "member-a", INITIAL_EPOCH, [(first, 0), (second, 0)])
    assert acquired(opened) == {}
    produce(client, "t", 1)
    produce(client, "u", 1)
    response = share_fetch(client, "member-a", 1, forgotten=[(second, 0)])
    assert acquired(response) == {(first, 0): [(0, 0, 1)]}


# --- ShareFetch: records ----------------------------------------------------------------------


def test_the_partitions_of_a_session_are_fetched_together(client: Client) -> None:
    tid = create_topic(client, "t", 2)
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 2, partition=0)
    produce(client, "t", 3, partition=1)
    response = share_fetch(client, "member-a", INITIAL_EPOCH, [(tid, 0), (tid, 1)])
    assert acquired(response) == {(tid, 0): [(0, 1, 1)], (tid, 1): [(0, 2, 1)]}


def test_max_records_is_honoured_across_batches(client: Client, tid: uuid.UUID) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    for _ in range(3):
        produce(client, "t", 5)
    first = open_session(client, "member-a", tid, max_records=3)
    assert only_acquired(first) == [(0, 2, 1)]
    (answer,) = partitions(first).values()
    assert [h.base_offset for h in batch_headers(answer.records)] == [0], "whole batches"
    second = share_fetch(client, "member-a", 1, max_records=4)
    assert only_acquired(second) == [(3, 6, 1)]
    rest = share_fetch(client, "member-a", 2, max_records=100)
    assert only_acquired(rest) == [(7, 14, 1)]


def test_two_members_of_a_group_never_get_the_same_record(client: Client, tid: uuid.UUID) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 6)
    first = open_session(client, "member-a", tid, max_records=4)
    second = open_session(client, "member-b", tid)
    assert only_acquired(first) == [(0, 3, 1)]
    assert only_acquired(second) == [(4, 5, 1)]


def test_each_group_gets_every_record(client: Client, tid: uuid.UUID) -> None:
    for group in ("g", "h"):
        configure(client, group, {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 2, 1)]
    assert only_acquired(open_session(client, "member-a", tid, group="h")) == [(0, 2, 1)]


def test_an_unknown_topic_id_is_unknown_topic_id_on_its_partition(
    client: Client, tid: uuid.UUID
) -> None:
    missing = uuid.uuid4()
    response = share_fetch(client, "member-a", INITIAL_EPOCH, [(missing, 0), (tid, 0)])
    answers = partitions(response)
    assert answers[(missing, 0)].error_code is ErrorCode.unknown_topic_id
    assert answers[(missing, 0)].acquired_records == ()


def test_a_partition_the_topic_does_not_have_is_unknown_topic_or_partition(
    client: Client, tid: uuid.UUID
) -> None:
    response = share_fetch(client, "member-a", INITIAL_EPOCH, [(tid, 4)])
    assert partitions(response)[(tid, 4)].error_code is ErrorCode.unknown_topic_or_partition


def test_share_auto_offset_reset_latest_skips_what_was_there(
    client: Client, tid: uuid.UUID
) -> None:
    assert configure(client, "g", {"share.auto.offset.reset": "latest"}).error_code is (
        ErrorCode.none
    )
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == []
    produce(client, "t", 2)
    assert only_acquired(share_fetch(client, "member-a", 1)) == [(3, 4, 1)]


def test_share_auto_offset_reset_earliest_starts_at_the_log_start(
    client: Client, tid: uuid.UUID
) -> None:
    assert configure(client, "g", {"share.auto.offset.reset": "earliest"}).error_code is (
        ErrorCode.none
    )
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 2, 1)]
    produce(client, "t", 2)
    assert only_acquired(share_fetch(client, "member-a", 1)) == [(3, 4, 1)]


def test_the_default_share_auto_offset_reset_is_latest(client: Client, tid: uuid.UUID) -> None:
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == []
    produce(client, "t", 1)
    assert only_acquired(share_fetch(client, "member-a", 1)) == [(3, 3, 1)]


def test_latest_starts_where_the_log_ended_when_the_member_joined(
    client: Client, tid: uuid.UUID
) -> None:
    """The heartbeat that assigns a partition initialises its state: records produced
    between the join and the first fetch are delivered."""
    produce(client, "t", 3)
    heartbeat(client, "member-a")
    produce(client, "t", 2)
    assert only_acquired(open_session(client, "member-a", tid)) == [(3, 4, 1)]


def test_group_configs_are_set_with_librdkafkas_group_resource_type_too(
    client: Client, tid: uuid.UUID
) -> None:
    changed = configure(
        client, "g", {"share.auto.offset.reset": "earliest"}, kind=LIBRDKAFKA_GROUP_RESOURCE
    )
    assert changed.error_code is ErrorCode.none
    produce(client, "t", 2)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 1, 1)]


def test_bad_group_configs_are_invalid_config_and_change_nothing(client: Client) -> None:
    for configs in (
        {"share.auto.offset.reset": "middle"},
        {"share.record.lock.duration.ms": "0"},
        {"no.such.config": "1"},
        {"share.heartbeat.interval.ms": "60000"},  # not below the session timeout
    ):
        refused = configure(client, "g", configs)
        assert refused.error_code is ErrorCode.invalid_config, configs
        assert refused.error_message
    request = {
        "resources": [
            {"resource_type": GROUP_RESOURCE, "resource_name": "g", "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    (result,) = call(client, DESCRIBE_CONFIGS, request, 4).results
    assert result.error_code is ErrorCode.none
    values = {c.name: c.value for c in result.configs}
    assert values["share.auto.offset.reset"] == "latest"
    assert values["share.record.lock.duration.ms"] == str(LOCK_MS)


# --- acknowledgements ---------------------------------------------------------------------


@pytest.fixture
def held(client: Client, tid: uuid.UUID) -> uuid.UUID:
    """Three records (0..2) produced and acquired by member-a, whose next epoch is 1."""
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 2, 1)]
    return tid


def test_accept_piggybacked_on_a_fetch_is_never_delivered_again(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    response = share_fetch(client, "member-a", 1, acks={(held, 0): [(0, 2, [ACCEPT])]})
    (answer,) = partitions(response).values()
    assert (answer.acknowledge_error_code, answer.acquired_records) == (0, ())
    timers.advance(LOCK_MS + BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == []
    produce(client, "t", 1)
    assert only_acquired(share_fetch(client, "member-a", 3)) == [(3, 3, 1)]


def test_release_piggybacked_on_a_fetch_redelivers_after_the_retry_backoff(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    released = share_fetch(client, "member-a", 1, acks={(held, 0): [(0, 2, [RELEASE])]})
    assert partitions(released)[(held, 0)].acknowledge_error_code == 0
    assert only_acquired(released) == [], "released records wait for their backoff"
    timers.advance(BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == [(0, 2, 2)]


def test_release_with_no_backoff_redelivers_in_the_same_fetch(
    client: Client, held: uuid.UUID
) -> None:
    """Kafka's behaviour (there is no backoff there): the fetch that releases acquires the
    records again, after applying its acknowledgements."""
    configure(client, "g", {"weirmq.share.retry.backoff.ms": "0"})
    released = share_fetch(client, "member-a", 1, acks={(held, 0): [(0, 2, [RELEASE])]})
    assert only_acquired(released) == [(0, 2, 2)]


def test_reject_piggybacked_on_a_fetch_is_never_delivered_again(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    rejected = share_fetch(client, "member-a", 1, acks={(held, 0): [(0, 2, [REJECT])]})
    assert partitions(rejected)[(held, 0)].acknowledge_error_code == 0
    timers.advance(LOCK_MS + BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == []
    assert only_acquired(open_session(client, "member-b", held)) == []


def test_one_acknowledge_type_per_offset(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    response = share_fetch(
        client, "member-a", 1, acks={(held, 0): [(0, 2, [ACCEPT, RELEASE, REJECT])]}
    )
    assert partitions(response)[(held, 0)].acknowledge_error_code == 0
    timers.advance(BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == [(1, 1, 2)]


def test_share_acknowledge_accepts_and_moves_the_session_epoch(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    response = acknowledge(
        client, "member-a", 1, {(held, 0): [(0, 1, [ACCEPT]), (2, 2, [RELEASE])]}
    )
    assert response.error_code is ErrorCode.none
    (answer,) = partitions(response).values()
    assert answer.error_code is ErrorCode.none
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.invalid_share_session_epoch
    timers.advance(BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == [(2, 2, 2)]


def test_share_acknowledge_reject_and_release(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    rejected = acknowledge(client, "member-a", 1, {(held, 0): [(0, 0, [REJECT])]})
    released = acknowledge(client, "member-a", 2, {(held, 0): [(1, 2, [RELEASE])]})
    for response in (rejected, released):
        assert [p.error_code for p in partitions(response).values()] == [ErrorCode.none]
    timers.advance(BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 3)) == [(1, 2, 2)]


def test_acknowledging_an_offset_not_held_is_invalid_record_state(
    client: Client, held: uuid.UUID
) -> None:
    beyond = share_fetch(client, "member-a", 1, acks={(held, 0): [(5, 6, [ACCEPT])]})
    answer = partitions(beyond)[(held, 0)]
    assert answer.acknowledge_error_code == ErrorCode.invalid_record_state.value
    assert answer.acknowledge_error_message
    twice = acknowledge(client, "member-a", 2, {(held, 0): [(0, 0, [ACCEPT])]})
    assert partitions(twice)[(held, 0)].error_code is ErrorCode.none
    again = acknowledge(client, "member-a", 3, {(held, 0): [(0, 0, [ACCEPT])]})
    assert partitions(again)[(held, 0)].error_code is ErrorCode.invalid_record_state


def test_a_member_cannot_acknowledge_records_another_member_holds(
    client: Client, held: uuid.UUID
) -> None:
    open_session(client, "member-b", held)
    stolen = acknowledge(client, "member-b", 1, {(held, 0): [(0, 2, [ACCEPT])]})
    assert partitions(stolen)[(held, 0)].error_code is ErrorCode.invalid_record_state
    mine = acknowledge(client, "member-a", 1, {(held, 0): [(0, 2, [ACCEPT])]})
    assert partitions(mine)[(held, 0)].error_code is ErrorCode.none


def test_a_refused_batch_does_not_stop_the_others(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    response = acknowledge(
        client, "member-a", 1, {(held, 0): [(0, 0, [ACCEPT]), (7, 7, [ACCEPT]), (1, 2, [RELEASE])]}
    )
    assert partitions(response)[(held, 0)].error_code is ErrorCode.invalid_record_state
    timers.advance(BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-a", 2)) == [(1, 2, 2)]


def test_acknowledging_an_unknown_topic_id_is_unknown_topic_id(
    client: Client, held: uuid.UUID
) -> None:
    missing = uuid.uuid4()
    response = acknowledge(client, "member-a", 1, {(missing, 0): [(0, 0, [ACCEPT])]})
    assert partitions(response)[(missing, 0)].error_code is ErrorCode.unknown_topic_id


def test_share_acknowledge_with_epoch_0_is_invalid_share_session_epoch(
    client: Client, held: uuid.UUID
) -> None:
    refused = acknowledge(client, "member-a", INITIAL_EPOCH, {(held, 0): [(0, 2, [ACCEPT])]})
    assert refused.error_code is ErrorCode.invalid_share_session_epoch
    assert refused.responses == ()
    # Nothing applied: the records are still the member's to acknowledge, at epoch 1.
    accepted = acknowledge(client, "member-a", 1, {(held, 0): [(0, 2, [ACCEPT])]})
    assert partitions(accepted)[(held, 0)].error_code is ErrorCode.none


def test_share_acknowledge_without_a_session_is_share_session_not_found(
    client: Client, held: uuid.UUID
) -> None:
    refused = acknowledge(client, "member-b", 1, {(held, 0): [(0, 2, [ACCEPT])]})
    assert refused.error_code is ErrorCode.share_session_not_found
    wrong = acknowledge(client, "member-a", 4, {(held, 0): [(0, 2, [ACCEPT])]})
    assert wrong.error_code is ErrorCode.invalid_share_session_epoch


# --- closing sessions, members leaving -------------------------------------------------------


def test_a_final_fetch_releases_what_the_member_holds_and_closes_the_session(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    produce(client, "t", 2)
    closing = share_fetch(client, "member-a", FINAL_EPOCH, acks={(held, 0): [(0, 0, [ACCEPT])]})
    assert partitions(closing)[(held, 0)].acknowledge_error_code == 0
    assert acquired(closing) == {}, "a final fetch fetches nothing"
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.share_session_not_found
    timers.advance(BACKOFF_MS)
    assert only_acquired(open_session(client, "member-b", held)) == [(1, 2, 2), (3, 4, 1)]


def test_a_final_share_acknowledge_closes_the_session(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    closing = acknowledge(client, "member-a", FINAL_EPOCH, {(held, 0): [(0, 1, [ACCEPT])]})
    assert [p.error_code for p in partitions(closing).values()] == [ErrorCode.none]
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.share_session_not_found
    timers.advance(BACKOFF_MS)
    assert only_acquired(open_session(client, "member-b", held)) == [(2, 2, 2)]


def test_a_member_leaving_the_group_releases_its_records(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    configure(client, "g", {"share.auto.offset.reset": "earliest"})
    heartbeat(client, "member-a")
    produce(client, "t", 2)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 1, 1)]
    assert heartbeat(client, "member-a", FINAL_EPOCH, None).error_code is ErrorCode.none
    assert share_fetch(client, "member-a", 1).error_code is ErrorCode.share_session_not_found
    timers.advance(BACKOFF_MS)
    assert only_acquired(open_session(client, "member-b", tid)) == [(0, 1, 2)]


def test_a_member_whose_session_times_out_loses_its_records(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    # The lock outlasts the group session: only the member's expiry can release them.
    configure(
        client,
        "g",
        {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "600000"},
    )
    heartbeat(client, "member-a")
    produce(client, "t", 2)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 1, 1)]
    timers.advance(SESSION_TIMEOUT_MS - 1)
    assert only_acquired(open_session(client, "member-b", tid)) == []
    timers.advance(1 + BACKOFF_MS)
    assert only_acquired(share_fetch(client, "member-b", 1)) == [(0, 1, 2)]


# --- time: locks, the delivery limit, long polls ----------------------------------------------


def test_a_lock_timeout_makes_the_records_available_to_another_member(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    configure(
        client,
        "g",
        {"share.auto.offset.reset": "earliest", "weirmq.share.retry.backoff.ms": "0"},
    )
    produce(client, "t", 3)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 2, 1)]
    timers.advance(LOCK_MS - 1)
    assert only_acquired(open_session(client, "member-b", tid)) == []
    timers.advance(1)
    assert only_acquired(share_fetch(client, "member-b", 1)) == [(0, 2, 2)]
    late = acknowledge(client, "member-a", 1, {(tid, 0): [(0, 2, [ACCEPT])]})
    assert partitions(late)[(tid, 0)].error_code is ErrorCode.invalid_record_state


def test_a_timed_out_record_waits_for_the_retry_backoff(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    timers.advance(LOCK_MS)
    assert only_acquired(open_session(client, "member-b", held)) == []
    timers.advance(BACKOFF_MS - 1)
    assert only_acquired(share_fetch(client, "member-b", 1)) == []
    timers.advance(1)
    assert only_acquired(share_fetch(client, "member-b", 2)) == [(0, 2, 2)]


def test_the_delivery_limit_archives_the_record(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    configure(
        client,
        "g",
        {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "2",
            "weirmq.share.retry.backoff.ms": "0",
        },
    )
    produce(client, "t", 2)
    assert only_acquired(open_session(client, "member-a", tid)) == [(0, 1, 1)]
    timers.advance(LOCK_MS)  # the first delivery times out
    second = share_fetch(client, "member-a", 1)
    assert only_acquired(second) == [(0, 1, 2)]
    last = share_fetch(client, "member-a", 2, acks={(tid, 0): [(0, 1, [RELEASE])]})
    assert partitions(last)[(tid, 0)].acknowledge_error_code == 0
    assert only_acquired(last) == [], "released at the delivery limit: archived"
    timers.advance(LOCK_MS)
    produce(client, "t", 1)
    assert only_acquired(share_fetch(client, "member-a", 3)) == [(2, 2, 1)]


def test_rejected_and_exhausted_records_are_dead_lettered(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    configure(
        client,
        "g",
        {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "1",
            "errors.deadletterqueue.topic.name": "dlq",
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    produce(client, "t", 2)
    open_session(client, "member-a", tid)
    acknowledge(client, "member-a", 1, {(tid, 0): [(0, 0, [REJECT]), (1, 1, [RELEASE])]})
    response = call(client, FETCH, fetch_request([("dlq", 0, 0)]), 12)
    (answer,) = fetch_results(response)
    letters = [
        record
        for batch in split_batches(answer.records)
        for _, record in decode_full_records(batch)
    ]
    assert [(r.value or b"")[:3] for r in letters] == [b"v0-", b"v1-"]
    contexts = [
        {name: (value or b"").decode() for name, value in r.headers if name.startswith("__dlq.")}
        for r in letters
    ]
    assert [(c["__dlq.errors.offset"], c["__dlq.errors.reason"]) for c in contexts] == [
        ("0", "rejected"),
        ("1", "delivery_limit"),
    ]
    assert {(c["__dlq.errors.group.id"], c["__dlq.errors.topic"]) for c in contexts} == {("g", "t")}


async def settle() -> None:
    """Let every callback and task that is ready run (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_long_poll_is_answered_by_an_append(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    open_session(client, "member-a", tid)
    poll = request_frame(SHARE_FETCH, 1, fetch_data("member-a", 1, max_wait_ms=10_000))
    produce_frame = request_frame(
        PRODUCE,
        12,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 30_000,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": make_batch(2)}]}
            ],
        },
    )

    async def scenario() -> Any:
        outcome = client.dispatcher.handle(poll)
        assert inspect.isawaitable(outcome), "a fetch that acquired nothing must wait"
        waiting = asyncio.ensure_future(outcome)
        await settle()
        timers.advance(5_000)
        await settle()
        assert not waiting.done()
        client.dispatcher.handle(produce_frame)
        await settle()
        assert waiting.done(), "the append did not wake the long poll"
        return decode_reply(SHARE_FETCH, 1, waiting.result())

    assert only_acquired(asyncio.run(scenario())) == [(0, 1, 1)]


def test_a_long_poll_ends_empty_at_its_capped_deadline(
    client: Client, timers: ManualTimers, tid: uuid.UUID
) -> None:
    open_session(client, "member-a", tid)
    poll = request_frame(SHARE_FETCH, 1, fetch_data("member-a", 1, max_wait_ms=600_000))

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(poll))  # type: ignore[arg-type]
        await settle()
        timers.advance(WAIT_MAX_MS - 1)
        await settle()
        assert not waiting.done(), "answered before its deadline"
        timers.advance(1)
        await settle()
        assert waiting.done(), "a max wait above the cap was not capped"
        return decode_reply(SHARE_FETCH, 1, waiting.result())

    response = asyncio.run(scenario())
    assert response.error_code is ErrorCode.none
    assert acquired(response) == {}


def test_a_long_poll_gets_records_another_member_released(
    client: Client, timers: ManualTimers, held: uuid.UUID
) -> None:
    open_session(client, "member-b", held)
    poll = request_frame(SHARE_FETCH, 1, fetch_data("member-b", 1, max_wait_ms=20_000))

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(poll))  # type: ignore[arg-type]
        await settle()
        release = ack_data("member-a", 1, {(held, 0): [(0, 2, [RELEASE])]})
        outcome = client.dispatcher.handle(request_frame(SHARE_ACKNOWLEDGE, 1, release))
        if inspect.isawaitable(outcome):
            outcome = await outcome
        released = decode_reply(SHARE_ACKNOWLEDGE, 1, outcome)
        assert partitions(released)[(held, 0)].error_code is ErrorCode.none
        await settle()
        assert not waiting.done(), "released records are not acquirable before their backoff"
        timers.advance(BACKOFF_MS)
        await settle()
        assert waiting.done(), "the end of the backoff did not wake the long poll"
        return decode_reply(SHARE_FETCH, 1, waiting.result())

    assert only_acquired(asyncio.run(scenario())) == [(0, 2, 2)]


def test_opening_a_share_session_in_a_classic_groups_id_is_refused(
    client: Client, tid: uuid.UUID
) -> None:
    """A group id taken by a classic group is not a share group's: opening a share
    session there is refused with a request error (no assertion in the broker), and the
    classic group is left as it was."""
    commit_outside_any_group(client, "classic")
    refused = open_session(client, "member-a", tid, group="classic")
    assert refused.error_code in (
        ErrorCode.inconsistent_group_protocol,
        ErrorCode.group_id_not_found,
        ErrorCode.invalid_request,
    )
    listed = call(client, LIST_GROUPS, {"states_filter": [], "types_filter": []}, 5)
    assert [(g.group_id, g.group_type) for g in listed.groups] == [("classic", "classic")]
