"""Share group membership (KIP-932): heartbeats, fencing, expiry with a stepped clock, the
group epoch, and the properties of the simple assignor."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.errors import ErrorCode
from weirmq.groups.consumer import Partition, TopicInfo
from weirmq.groups.errors import GroupError
from weirmq.groups.share import (
    TRANSITIONS,
    ShareGroup,
    ShareGroupSettings,
    ShareGroupState,
    ShareHeartbeatResult,
    assign_simple,
)
from weirmq.groups.views import AssignedTopic
from weirmq.types import TopicPartition

SESSION_MS = 45_000
HEARTBEAT_MS = 5_000


def topic_id(name: str, generation: int = 0) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"weirmq:{name}:{generation}")


def topics(**counts: int) -> dict[str, TopicInfo]:
    return {name: TopicInfo(topic_id(name), n) for name, n in counts.items()}


def tp(name: str, *partitions: int) -> frozenset[Partition]:
    return frozenset((topic_id(name), p) for p in partitions)


def flat(assignment: Mapping[uuid.UUID, tuple[int, ...]] | None) -> frozenset[Partition]:
    assert assignment is not None
    return frozenset((t, p) for t, ps in assignment.items() for p in ps)


class Clock:
    """Plain integer milliseconds, stepped by the test."""

    def __init__(self) -> None:
        self.now_ms = 1_000


def join(
    group: ShareGroup,
    member_id: str,
    names: tuple[str, ...],
    meta: Mapping[str, TopicInfo],
    now_ms: int,
) -> ShareHeartbeatResult:
    return group.heartbeat(member_id, 0, names, None, now_ms=now_ms, topics=meta)


def beat(
    group: ShareGroup,
    member_id: str,
    epoch: int,
    meta: Mapping[str, TopicInfo],
    now_ms: int,
    names: tuple[str, ...] | None = None,
    rack_id: str | None = None,
) -> ShareHeartbeatResult:
    return group.heartbeat(member_id, epoch, names, rack_id, now_ms=now_ms, topics=meta)


@contextmanager
def refused(code: ErrorCode) -> Iterator[None]:
    with pytest.raises(GroupError) as caught:
        yield
    assert caught.value.code is code, caught.value


# -- join, heartbeat, leave -------------------------------------------------------------


def test_join_gets_every_partition_and_the_group_becomes_stable() -> None:
    group, meta = ShareGroup("g"), topics(orders=3)
    assert group.state is ShareGroupState.EMPTY
    result = join(group, "m1", ("orders",), meta, 1_000)
    assert result == ShareHeartbeatResult("m1", 1, HEARTBEAT_MS, {topic_id("orders"): (0, 1, 2)})
    assert group.state is ShareGroupState.STABLE
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)


def test_join_to_a_missing_topic_gets_an_empty_assignment_then_the_topic() -> None:
    group = ShareGroup("g")
    assert join(group, "m1", ("orders",), {}, 1_000).assignment == {}
    result = beat(group, "m1", 1, topics(orders=2), 2_000)
    assert (result.member_epoch, flat(result.assignment)) == (2, tp("orders", 0, 1))


def test_second_member_splits_and_the_first_is_replaced_on_its_heartbeat() -> None:
    group, meta = ShareGroup("g"), topics(orders=4)
    join(group, "m1", ("orders",), meta, 1_000)
    second = join(group, "m2", ("orders",), meta, 1_000)
    assert (second.member_epoch, flat(second.assignment)) == (2, tp("orders", 1, 3))
    # No revocation: m1 keeps what it was told until it heartbeats, then gets its target.
    m1 = group.member("m1")
    assert m1 is not None and m1.member_epoch == 1 and m1.assigned == tp("orders", 0, 1, 2, 3)
    first = beat(group, "m1", 1, meta, 2_000)
    assert (first.member_epoch, flat(first.assignment)) == (2, tp("orders", 0, 2))
    # Nothing changed since: no assignment in the answer.
    assert beat(group, "m1", 2, meta, 3_000).assignment is None


def test_more_members_than_partitions_share_them() -> None:
    group, meta = ShareGroup("g"), topics(orders=1)
    for member in ("m1", "m2", "m3"):
        join(group, member, ("orders",), meta, 1_000)
    for member in ("m1", "m2", "m3"):
        assert group.target(member) == tp("orders", 0)


def test_leave_bumps_the_epoch_and_gives_the_rest_everything() -> None:
    group, meta = ShareGroup("g"), topics(orders=2)
    join(group, "m1", ("orders",), meta, 1_000)
    join(group, "m2", ("orders",), meta, 1_000)
    left = beat(group, "m2", -1, meta, 2_000)
    assert left == ShareHeartbeatResult("m2", -1, 0, None)
    assert group.group_epoch == 3 and group.member("m2") is None
    assert group.target("m1") == tp("orders", 0, 1)
    group.leave("m1")
    assert group.state is ShareGroupState.EMPTY and group.group_epoch == 4


def test_subscription_change_moves_partitions_to_the_new_topic() -> None:
    group, meta = ShareGroup("g"), topics(orders=2, audit=1)
    join(group, "m1", ("orders",), meta, 1_000)
    result = beat(group, "m1", 1, meta, 2_000, names=("audit",))
    assert (result.member_epoch, flat(result.assignment)) == (2, tp("audit", 0))
    assert group.subscribed_topics() == {"audit"}


def test_topic_recreated_with_a_new_id_is_a_new_topic() -> None:
    group = ShareGroup("g")
    join(group, "m1", ("orders",), topics(orders=1), 1_000)
    recreated = {"orders": TopicInfo(topic_id("orders", 1), 1)}
    result = beat(group, "m1", 1, recreated, 2_000)
    assert result.member_epoch == 2
    assert flat(result.assignment) == {(topic_id("orders", 1), 0)}


# -- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member_id", "epoch", "names", "rack_id"),
    [
        ("", 0, ("orders",), None),
        ("  ", 1, None, None),
        ("m1", 0, None, None),
        ("m1", 0, (), None),
        ("m1", -2, None, None),
        ("m1", 0, ("orders",), ""),
    ],
)
def test_bad_requests_are_invalid_and_change_nothing(
    member_id: str, epoch: int, names: tuple[str, ...] | None, rack_id: str | None
) -> None:
    group = ShareGroup("g")
    with refused(ErrorCode.invalid_request):
        group.heartbeat(member_id, epoch, names, rack_id, now_ms=1_000, topics=topics(orders=1))
    assert group.group_epoch == 0 and not group.members


def test_unknown_member_is_refused() -> None:
    group, meta = ShareGroup("g"), topics(orders=1)
    with refused(ErrorCode.unknown_member_id):
        beat(group, "ghost", 3, meta, 1_000)
    with refused(ErrorCode.unknown_member_id):
        beat(group, "ghost", -1, meta, 1_000)
    with refused(ErrorCode.unknown_member_id):
        group.leave("ghost")


def test_stale_and_future_epochs_are_fenced_but_the_previous_one_is_accepted() -> None:
    group, meta = ShareGroup("g"), topics(orders=2)
    join(group, "m1", ("orders",), meta, 1_000)  # m1 at epoch 1, previous 0
    join(group, "m2", ("orders",), meta, 1_000)  # group epoch 2
    beat(group, "m1", 1, meta, 1_000)  # m1 at epoch 2, previous 1
    join(group, "m3", ("orders",), meta, 1_000)  # group epoch 3
    beat(group, "m1", 2, meta, 1_000)  # m1 at epoch 3, previous 2
    with refused(ErrorCode.fenced_member_epoch):
        beat(group, "m1", 4, meta, 2_000)
    with refused(ErrorCode.fenced_member_epoch):
        beat(group, "m1", 1, meta, 2_000)
    with refused(ErrorCode.fenced_member_epoch):
        join(group, "m1", ("orders",), meta, 2_000)  # a rejoin with a used id, as Kafka
    # The answer that moved m1 to epoch 3 was lost: it comes back with 2 and is resent it.
    again = beat(group, "m1", 2, meta, 2_000)
    assert again.member_epoch == 3 and flat(again.assignment) == group.target("m1")


def test_a_lost_join_answer_may_be_retried_with_epoch_zero() -> None:
    group, meta = ShareGroup("g"), topics(orders=1)
    join(group, "m1", ("orders",), meta, 1_000)
    again = join(group, "m1", ("orders",), meta, 2_000)
    assert again.member_epoch == 1 and group.group_epoch == 1
    assert flat(again.assignment) == tp("orders", 0)


def test_max_size_refuses_new_members_only() -> None:
    group = ShareGroup("g", settings=ShareGroupSettings(max_size=2))
    meta = topics(orders=1)
    join(group, "m1", ("orders",), meta, 1_000)
    join(group, "m2", ("orders",), meta, 1_000)
    with refused(ErrorCode.group_max_size_reached):
        join(group, "m3", ("orders",), meta, 1_000)
    assert beat(group, "m2", 2, meta, 2_000).member_epoch == 2
    assert ShareGroupSettings().max_size == 200


def test_settings_are_bounded() -> None:
    assert (
        ShareGroupSettings().session_timeout_ms,
        ShareGroupSettings().heartbeat_interval_ms,
    ) == (
        SESSION_MS,
        HEARTBEAT_MS,
    )
    for bad in (
        {"max_size": 0},
        {"session_timeout_ms": 0},
        {"heartbeat_interval_ms": 45_000},
    ):
        with pytest.raises(ValueError):
            ShareGroupSettings(**bad)  # type: ignore[arg-type]


# -- sessions -----------------------------------------------------------------------------


def test_session_expiry_with_a_stepped_clock() -> None:
    clock, group, meta = Clock(), ShareGroup("g"), topics(orders=2)
    join(group, "m1", ("orders",), meta, clock.now_ms)
    clock.now_ms += 10_000
    join(group, "m2", ("orders",), meta, clock.now_ms)
    assert group.next_deadline_ms() == 1_000 + SESSION_MS
    clock.now_ms = 1_000 + SESSION_MS - 1
    assert group.expire(clock.now_ms) == []
    beat(group, "m2", 2, meta, clock.now_ms)  # m2 keeps its session alive
    clock.now_ms += 1
    assert group.expire(clock.now_ms) == ["m1"]
    assert group.group_epoch == 3 and group.target("m2") == tp("orders", 0, 1)
    assert group.next_deadline_ms() == clock.now_ms - 1 + SESSION_MS
    clock.now_ms += SESSION_MS
    assert group.expire(clock.now_ms) == ["m2"]
    assert group.state is ShareGroupState.EMPTY and group.next_deadline_ms() is None
    with refused(ErrorCode.unknown_member_id):
        beat(group, "m2", 3, meta, clock.now_ms)


# -- states, describe ---------------------------------------------------------------------


def test_transition_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(ShareGroupState)
    assert TRANSITIONS[ShareGroupState.DEAD].leads_to == frozenset()


def test_delete_only_when_empty_and_dead_refuses_everything_but_expiry() -> None:
    group, meta = ShareGroup("g"), topics(orders=1)
    join(group, "m1", ("orders",), meta, 1_000)
    with refused(ErrorCode.non_empty_group):
        group.delete()
    group.leave("m1")
    group.delete()
    assert group.state is ShareGroupState.DEAD
    assert group.expire(10**9) == []
    with refused(ErrorCode.group_id_not_found):
        join(group, "m1", ("orders",), meta, 1_000)
    with refused(ErrorCode.group_id_not_found):
        group.describe()


def test_describe_shows_members_epochs_and_assignments() -> None:
    group, meta = ShareGroup("g"), topics(orders=2, audit=1)
    join(group, "m1", ("orders", "audit"), meta, 1_000)
    group.heartbeat(
        "m2", 0, ("orders",), "rack-a", now_ms=1_000, topics=meta, client_id="c2", client_host="h"
    )
    described = group.describe()
    assert (described.state, described.group_epoch, described.assignment_epoch) == (
        "Stable",
        2,
        2,
    )
    assert described.assignor == "simple"
    m1, m2 = described.members
    assert (m1.member_id, m1.member_epoch, m1.subscribed_topic_names) == (
        "m1",
        1,
        ("audit", "orders"),
    )
    assert (m2.rack_id, m2.client_id, m2.client_host, m2.member_epoch) == ("rack-a", "c2", "h", 2)
    # audit has one subscriber, so it goes first: m1 takes audit-0, m2 then orders-0.
    assert m2.assignment == (AssignedTopic(topic_id("orders"), "orders", (0,)),)
    # m1 has not heartbeat since m2 joined: it is shown with what it was last given.
    assert m1.assignment == (
        AssignedTopic(topic_id("audit"), "audit", (0,)),
        AssignedTopic(topic_id("orders"), "orders", (0, 1)),
    )
    view = group.view()
    assert (view.kind, view.protocol_type, view.state, view.generation) == (
        "share",
        "share",
        "Stable",
        2,
    )


# -- the group epoch ----------------------------------------------------------------------


def test_the_group_epoch_moves_exactly_on_membership_subscription_and_metadata() -> None:
    group = ShareGroup("g")
    meta = topics(orders=2, audit=1)
    join(group, "m1", ("orders",), meta, 1_000)
    assert group.group_epoch == 1
    steps: list[tuple[str, Mapping[str, TopicInfo], tuple[str, ...] | None, str | None, int]] = [
        ("nothing", meta, None, None, 1),
        ("same subscription", meta, ("orders",), None, 1),
        ("reordered, duplicated", meta, ("orders", "orders"), None, 1),
        ("rack", meta, None, "rack-a", 1),
        ("unsubscribed topic grows", topics(orders=2, audit=5), None, None, 1),
        ("subscribed topic grows", topics(orders=3, audit=5), None, None, 2),
        ("subscription", topics(orders=3, audit=5), ("orders", "audit"), None, 3),
        ("subscribed topic deleted", topics(orders=3), None, None, 4),
        ("subscribed topic created", topics(orders=3, audit=1), None, None, 5),
    ]
    for label, snapshot, names, rack_id, expected in steps:
        member = group.member("m1")
        assert member is not None
        beat(group, "m1", member.member_epoch, snapshot, 2_000, names=names, rack_id=rack_id)
        assert group.group_epoch == expected, label
        assert group.assignment_epoch == group.group_epoch, label


Op = tuple[str, int, int]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["join", "beat", "resubscribe", "leave", "resize", "expire"]),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        max_size=25,
    )
)
def test_the_group_epoch_is_bumped_iff_the_signature_changes(ops: list[Op]) -> None:
    """The signature is what Kafka bumps on: members, their subscriptions, and the metadata
    of the subscribed topics. Every call bumps once when it changes, never otherwise."""
    names = ("a", "b", "c")
    group, now_ms = ShareGroup("g"), 0
    sizes = {"a": 1, "b": 2, "c": 0}

    def snapshot() -> dict[str, TopicInfo]:
        return {n: TopicInfo(topic_id(n), k) for n, k in sizes.items() if k}

    def signature() -> tuple[object, ...]:
        subs = {m.member_id: m.subscribed_topic_names for m in group.members}
        used = {n for s in subs.values() for n in s}
        return (sorted(subs.items()), sorted((n, k) for n, k in sizes.items() if n in used and k))

    for kind, who, arg in ops:
        member_id = f"m{who}"
        member = group.member(member_id)
        before, epoch = signature(), group.group_epoch
        now_ms += 1_000 * arg
        try:
            if kind == "join" and member is None:
                join(group, member_id, names[: arg % 3 + 1], snapshot(), now_ms)
            elif kind == "beat" and member is not None:
                beat(group, member_id, member.member_epoch, snapshot(), now_ms)
            elif kind == "resubscribe" and member is not None:
                beat(group, member_id, member.member_epoch, snapshot(), now_ms, names[arg % 3 :])
            elif kind == "leave" and member is not None:
                group.leave(member_id)
            elif kind == "resize":
                sizes[names[who % 3]] = arg
                if group.members:  # metadata is seen on a heartbeat
                    first = group.members[0]
                    beat(group, first.member_id, first.member_epoch, snapshot(), now_ms)
            elif kind == "expire":
                group.expire(now_ms + SESSION_MS * arg // 3)
        except GroupError as error:  # pragma: no cover - the ops above are all legal
            raise AssertionError(error) from None
        bumped = group.group_epoch - epoch
        assert bumped == (1 if signature() != before else 0), (kind, member_id)
        assert group.assignment_epoch == group.group_epoch


# -- the assignor -------------------------------------------------------------------------


@st.composite
def memberships(draw: st.DrawFn) -> tuple[dict[str, set[str]], dict[str, int], bool]:
    topic_count = draw(st.integers(1, 3))
    names = [f"t{i}" for i in range(topic_count)]
    partitions = {n: draw(st.integers(0, 12)) for n in names}
    same = draw(st.booleans())
    members = draw(st.integers(1, 8))
    if same:
        subscribed = set(draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
        subscriptions = {f"m{i}": set(subscribed) for i in range(members)}
    else:
        subscriptions = {
            f"m{i}": set(draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
            for i in range(members)
        }
    return subscriptions, partitions, same


def _check_assignment(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    same: bool,
    result: Mapping[str, frozenset[TopicPartition]],
) -> None:
    assert result.keys() == subscriptions.keys()
    subscribed = {t for ts in subscriptions.values() for t in ts}
    every = {TopicPartition(t, p) for t in subscribed for p in range(partitions.get(t, 0))}
    counts = Counter(tp for tps in result.values() for tp in tps)
    assert set(counts) == every, "every subscribed partition to at least one member"
    for member, tps in result.items():
        assert all(tp.topic in subscriptions[member] for tp in tps), "own topics only"
        if any(partitions.get(t, 0) for t in subscriptions[member]):
            assert tps, "a member whose topics have partitions gets some"
    by_subscription: dict[frozenset[str], list[int]] = {}
    for member, tps in result.items():
        by_subscription.setdefault(frozenset(subscriptions[member]), []).append(len(tps))
    for loads in by_subscription.values():
        assert max(loads) - min(loads) <= 1, "same subscription, balanced within one"
    if same and len(subscriptions) <= len(every):
        assert all(n == 1 for n in counts.values()), "no partition given twice"
    if same and len(subscriptions) > len(every) > 0:
        shares = counts.values()
        assert max(shares) - min(shares) <= 1, "shared evenly"


@settings(max_examples=300, deadline=None)
@given(memberships(), st.randoms(use_true_random=False))
def test_assign_simple_properties(
    membership: tuple[dict[str, set[str]], dict[str, int], bool], rnd: random.Random
) -> None:
    subscriptions, partitions, same = membership
    result = assign_simple(subscriptions, partitions)
    _check_assignment(subscriptions, partitions, same, result)
    # Deterministic: the same membership in another order gives the same answer.
    shuffled = list(subscriptions.items())
    rnd.shuffle(shuffled)
    assert assign_simple(dict(shuffled), dict(reversed(partitions.items()))) == result


@settings(max_examples=100, deadline=None)
@given(memberships())
def test_group_targets_have_the_assignor_properties(
    membership: tuple[dict[str, set[str]], dict[str, int], bool],
) -> None:
    subscriptions, partitions, same = membership
    meta = {n: TopicInfo(topic_id(n), k) for n, k in partitions.items() if k}
    group = ShareGroup("g")
    for member, names in subscriptions.items():
        join(group, member, tuple(sorted(names)), meta, 1_000)
    names_of = {info.topic_id: n for n, info in meta.items()}
    targets = {
        m: frozenset(TopicPartition(names_of[t], p) for t, p in group.target(m))
        for m in subscriptions
    }
    _check_assignment(subscriptions, partitions, same, targets)
    # Everyone heartbeats once: each then holds exactly its target, at the group's epoch.
    for member in subscriptions:
        m = group.member(member)
        assert m is not None
        beat(group, member, m.member_epoch, meta, 2_000)
        m = group.member(member)
        assert m is not None
        assert (m.assigned, m.member_epoch) == (group.target(member), group.group_epoch)


def test_assign_simple_examples() -> None:
    assert assign_simple({}, {"t": 3}) == {}
    assert assign_simple({"a": {"missing"}}, {}) == {"a": frozenset()}
    # Round robin over sorted members, across topics.
    result = assign_simple({"b": {"x", "y"}, "a": {"x", "y"}}, {"x": 3, "y": 1})
    assert result == {
        "a": {TopicPartition("x", 0), TopicPartition("x", 2)},
        "b": {TopicPartition("x", 1), TopicPartition("y", 0)},
    }
    # Five members, two partitions: every member gets one, each partition two or three.
    five = assign_simple({f"m{i}": {"x"} for i in range(5)}, {"x": 2})
    assert sorted(Counter(tp for tps in five.values() for tp in tps).values()) == [2, 3]
