"""The coordinator: offsets, their log, replay, compaction snapshots, retention, kinds.

The log is a plain list of (key, value) records; "restarting" builds a new coordinator
and replays that list into it, which is exactly what the broker does with its topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest

from weirmq.errors import ErrorCode
from weirmq.groups import consumer as kip848
from weirmq.groups.classic import ClassicSettings, JoinReply, JoinRequest, State, SyncReply
from weirmq.groups.coordinator import CommitRequest, CoordinatorSettings, GroupCoordinator
from weirmq.groups.errors import GroupError
from weirmq.groups.protocol import encode_assignment
from weirmq.groups.views import AssignedTopic, ClassicDescription, ClassicMemberDescription

DAY_MS = 24 * 3600 * 1000
TOPIC_ID = uuid.uuid4()
TOPICS = {"t": 4}


class Fixture:
    def __init__(self, log: list[tuple[bytes, bytes | None]] | None = None) -> None:
        self.log: list[tuple[bytes, bytes | None]] = [] if log is None else log
        self.fail_writes = False
        self.coordinator = self.make()

    def make(self) -> GroupCoordinator:
        return GroupCoordinator(
            CoordinatorSettings(
                classic=ClassicSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1),
                offsets_retention_ms=7 * DAY_MS,
            ),
            self.write,
            partitions_of=TOPICS.get,
            topics=self.topic_infos,
        )

    def topic_infos(self) -> Mapping[str, kip848.TopicInfo]:
        return {name: kip848.TopicInfo(TOPIC_ID, count) for name, count in TOPICS.items()}

    def write(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_writes:
            raise OSError("disk full")
        self.log.extend(pairs)

    def restart(self, now_ms: int = 0) -> GroupCoordinator:
        coordinator = self.make()
        for key, value in self.log:
            coordinator.replay(key, value, now_ms)
        coordinator.finish_loading()
        self.coordinator = coordinator
        return coordinator


@pytest.fixture
def fx() -> Fixture:
    fixture = Fixture()
    fixture.coordinator.finish_loading()
    return fixture


def commit(
    c: GroupCoordinator, group: str, offsets: dict[int, int], *, now: int = 0, **kw: object
) -> list[ErrorCode]:
    request = CommitRequest(
        group,
        str(kw.get("member_id", "")),
        int(kw.get("generation", -1)),  # type: ignore[call-overload]
        None,
        [("t", p, o, -1, "m") for p, o in offsets.items()],
    )
    return c.commit_offsets(request, now)


def fetched(c: GroupCoordinator, group: str) -> dict[int, int]:
    return {
        p: v.offset
        for topic, partitions in c.fetch_offsets(group, None)
        for p, v in partitions
        if v is not None
    }


def join_and_sync(c: GroupCoordinator, group: str, now: int = 0) -> tuple[str, int]:
    """One member joins (v3 style, no MEMBER_ID_REQUIRED) and syncs; returns id, gen.
    Each request is answered at once: its reply is the only one its step returns."""
    request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), False)
    (joined,) = c.join_group(group, request, now, 1)
    assert isinstance(joined, JoinReply) and joined.ticket == 1
    member, gen = joined.result.member_id, joined.result.generation
    (synced,) = c.sync_group(group, member, None, gen, None, None, [(member, b"a")], now, 2)
    assert isinstance(synced, SyncReply) and synced.ticket == 2
    assert synced.result.error is ErrorCode.none
    return member, gen


def test_waiting_requests_are_answered_by_the_step_that_releases_them(fx: Fixture) -> None:
    c = fx.coordinator
    a, gen = join_and_sync(c, "g")
    request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), False)
    assert c.join_group("g", request, 0, 3) == []  # waits for `a` to rejoin
    (aborted,) = c.abort_waiting()
    assert isinstance(aborted, JoinReply) and aborted.ticket == 3
    assert aborted.result.error is ErrorCode.not_coordinator
    b = aborted.result.member_id
    rejoin = JoinRequest(b, None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), False)
    assert c.join_group("g", rejoin, 0, 4) == []
    assert c.tick(9_999) == []
    (joined,) = c.tick(10_000)  # `a` expired: the rebalance completes without it
    assert isinstance(joined, JoinReply) and joined.ticket == 4
    assert (joined.result.generation, joined.result.leader) == (gen + 1, b)
    assert a not in (m[0] for m in joined.result.members)


def test_requests_before_loading_get_coordinator_load_in_progress() -> None:
    c = Fixture().coordinator
    with pytest.raises(GroupError) as info:
        commit(c, "g", {0: 1})
    assert info.value.code is ErrorCode.coordinator_load_in_progress
    with pytest.raises(GroupError) as info:
        c.list_groups()
    assert info.value.code is ErrorCode.coordinator_load_in_progress
    c.finish_loading()
    assert commit(c, "g", {0: 1}) == [ErrorCode.none]


def test_simple_commits_are_fetched_and_survive_a_restart(fx: Fixture) -> None:
    assert commit(fx.coordinator, "g", {0: 10, 1: 20}) == [ErrorCode.none] * 2
    assert commit(fx.coordinator, "g", {0: 15}) == [ErrorCode.none]
    assert fetched(fx.coordinator, "g") == {0: 15, 1: 20}
    assert fetched(fx.restart(), "g") == {0: 15, 1: 20}
    partitions = dict(fx.coordinator.fetch_offsets("g", [("t", [0, 3])])[0][1])
    assert partitions[3] is None
    assert partitions[0] is not None and partitions[0].metadata == "m"


def test_per_partition_errors_and_nothing_written_for_them(fx: Fixture) -> None:
    request = CommitRequest(
        "g",
        "",
        -1,
        None,
        [("t", 9, 1, -1, None), ("nope", 0, 1, -1, None), ("t", 0, 5, -1, "x" * 5000)],
    )
    codes = fx.coordinator.commit_offsets(request, 0)
    assert codes == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.offset_metadata_too_large,
    ]
    assert fx.log == []


def test_a_failed_write_changes_nothing(fx: Fixture) -> None:
    commit(fx.coordinator, "g", {0: 1})
    fx.fail_writes = True
    with pytest.raises(OSError):
        commit(fx.coordinator, "g", {0: 2})
    assert fetched(fx.coordinator, "g") == {0: 1}


def test_member_commits_are_checked_against_generation_and_membership(fx: Fixture) -> None:
    c = fx.coordinator
    member, gen = join_and_sync(c, "g")
    assert commit(c, "g", {0: 3}, member_id=member, generation=gen) == [ErrorCode.none]
    for kwargs, code in [
        ({"member_id": member, "generation": gen + 1}, ErrorCode.illegal_generation),
        ({"member_id": "ghost", "generation": gen}, ErrorCode.unknown_member_id),
        ({"member_id": "", "generation": -1}, ErrorCode.unknown_member_id),
    ]:
        with pytest.raises(GroupError) as info:
            commit(c, "g", {0: 4}, **kwargs)
        assert info.value.code is code
    assert fetched(c, "g") == {0: 3}


def test_group_metadata_survives_a_restart_so_members_keep_heartbeating(fx: Fixture) -> None:
    member, gen = join_and_sync(fx.coordinator, "g")
    c = fx.restart(now_ms=1_000)
    assert c.heartbeat("g", member, None, gen, 1_000) is ErrorCode.none
    view = c.view("g")
    assert view is not None and view.state == "Stable" and view.generation == gen


def test_delete_group_needs_it_empty_and_removes_offsets_for_good(fx: Fixture) -> None:
    c = fx.coordinator
    member, gen = join_and_sync(c, "g")
    commit(c, "g", {0: 3}, member_id=member, generation=gen)
    with pytest.raises(GroupError) as info:
        c.delete_group("g", 0)
    assert info.value.code is ErrorCode.non_empty_group
    assert c.leave_group("g", [(member, None)], 0).codes == (ErrorCode.none,)
    c.delete_group("g", 0)
    assert c.view("g") is None
    with pytest.raises(GroupError) as info:
        c.delete_group("g", 0)
    assert info.value.code is ErrorCode.group_id_not_found
    restarted = fx.restart()
    assert restarted.view("g") is None
    assert fetched(restarted, "g") == {}


def test_offset_delete_refuses_subscribed_topics_of_an_active_group(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "solo", {0: 1, 1: 2})
    result = c.delete_offsets("solo", [("t", [0])])
    assert result == [("t", [(0, ErrorCode.none)])]
    assert fetched(c, "solo") == {1: 2}
    assert fetched(fx.restart(), "solo") == {1: 2}
    with pytest.raises(GroupError) as info:
        fx.coordinator.delete_offsets("unknown", [("t", [0])])
    assert info.value.code is ErrorCode.group_id_not_found


def test_retention_expires_offsets_of_empty_groups_only(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "idle", {0: 1}, now=0)
    member, gen = join_and_sync(c, "busy", now=0)
    commit(c, "busy", {0: 1}, member_id=member, generation=gen, now=0)
    assert c.expire_offsets(7 * DAY_MS - 1) == 0
    # busy's member keeps heartbeating: its group is not empty, its offsets stay
    assert c.heartbeat("busy", member, None, gen, 7 * DAY_MS - 1) is ErrorCode.none
    assert c.expire_offsets(7 * DAY_MS) == 1
    assert c.view("idle") is None  # no members, no offsets: the group is gone
    assert fetched(c, "busy") == {0: 1}
    assert fetched(fx.restart(), "idle") == {}


def test_retention_counts_from_when_the_group_became_empty(fx: Fixture) -> None:
    c = fx.coordinator
    member, gen = join_and_sync(c, "g", now=0)
    commit(c, "g", {0: 1}, member_id=member, generation=gen, now=0)
    c.leave_group("g", [(member, None)], 5 * DAY_MS)
    assert c.expire_offsets(8 * DAY_MS) == 0  # empty for 3 days only
    assert c.expire_offsets(12 * DAY_MS) == 1


def test_snapshot_alone_rebuilds_the_same_state(fx: Fixture) -> None:
    c = fx.coordinator
    member, gen = join_and_sync(c, "g")
    commit(c, "g", {0: 1, 1: 2}, member_id=member, generation=gen)
    commit(c, "solo", {2: 9})
    commit(c, "gone", {0: 1})
    c.delete_group("gone", 0)
    snapshot = list(c.snapshot())
    # replaying the full log followed by a partial snapshot, or the snapshot alone,
    # gives the same state: the snapshot only repeats current values
    for log in (fx.log + snapshot[:2], snapshot):
        again = Fixture(list(log)).restart()
        assert fetched(again, "g") == {0: 1, 1: 2}
        assert fetched(again, "solo") == {2: 9}
        assert again.view("gone") is None
        view = again.view("g")
        assert view is not None and view.generation == gen


def test_kinds_convert_only_when_empty(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "g", {0: 5})  # an offsets-only group: classic, empty
    answer = c.consumer_heartbeat(
        kip848.HeartbeatRequest(
            "g", "m1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
        ),
        "c",
        "/h",
        0,
    )
    assert answer.member_epoch > 0
    view = c.view("g")
    assert view is not None and view.kind == "consumer"
    assert fetched(c, "g") == {0: 5}  # offsets kept across the conversion
    request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), False)
    with pytest.raises(GroupError) as info:
        c.join_group("g", request, 0, 1)
    assert info.value.code is ErrorCode.inconsistent_group_protocol
    # commits from the KIP-848 member are checked against its epoch
    with pytest.raises(GroupError) as info:
        commit(c, "g", {0: 6}, member_id="m1", generation=answer.member_epoch + 1)
    assert info.value.code is ErrorCode.stale_member_epoch
    assert commit(c, "g", {0: 6}, member_id="m1", generation=answer.member_epoch) == [
        ErrorCode.none
    ]
    # a classic group with members whose subscriptions do not parse (b"") cannot be
    # upgraded online: it refuses a KIP-848 member (test_migration.py has the rest)
    member, _gen = join_and_sync(c, "classic")
    with pytest.raises(GroupError) as info:
        c.consumer_heartbeat(
            kip848.HeartbeatRequest(
                "classic", "m2", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
            ),
            "c",
            "/h",
            0,
        )
    assert info.value.code is ErrorCode.group_id_not_found
    assert member


def test_describe_and_list(fx: Fixture) -> None:
    c = fx.coordinator
    join_and_sync(c, "g")
    commit(c, "solo", {0: 1})
    assert c.list_groups() == [
        ("g", "consumer", "Stable", "classic"),
        ("solo", "", "Empty", "classic"),
    ]
    described = c.describe_group("g")
    assert described is not None
    assert (described.group_id, described.state) == ("g", "Stable")
    assert (described.protocol_type, described.protocol) == ("consumer", "range")
    (member,) = described.members
    assert (member.client_id, member.client_host, member.assignment) == ("c", "/h", b"a")
    assert c.describe_group("nobody") is None  # the adapter shows it as Dead
    with pytest.raises(GroupError) as info:
        c.describe_consumer_group("g")
    assert info.value.code is ErrorCode.group_id_not_found
    assert State.STABLE.value == "Stable"


def test_a_consumer_group_is_described_in_classic_terms_too(fx: Fixture) -> None:
    c = fx.coordinator
    c.consumer_heartbeat(
        kip848.HeartbeatRequest(
            "g", "m1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
        ),
        "c",
        "/h",
        0,
    )

    described = c.describe_group("g")

    assert described == ClassicDescription(
        group_id="g",
        state="Stable",
        protocol_type="consumer",
        protocol="uniform",
        members=(
            ClassicMemberDescription(
                member_id="m1",
                group_instance_id=None,
                client_id="c",
                client_host="/h",
                metadata=b"",
                assignment=encode_assignment([("t", p) for p in range(4)]),
            ),
        ),
    )
    consumer = c.describe_consumer_group("g")
    assert (consumer.group_id, consumer.state, consumer.assignor) == ("g", "Stable", "uniform")
    (member,) = consumer.members
    assert member.assignment == (AssignedTopic(TOPIC_ID, "t", (0, 1, 2, 3)),)


def test_offsets_of_a_deleted_topic_are_forgotten_for_good(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "g", {0: 1, 1: 2})
    assert c.forget_topic("t") == 2
    assert fetched(c, "g") == {}
    assert fetched(fx.restart(), "g") == {}
