"""Online migration between the classic group protocol and KIP-848's consumer protocol.

Sans I/O, as the coordinator is: a classic group of Kafka consumers is upgraded when a
consumer-protocol member joins it, its classic members are then served in the consumer
group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup against a server-side assignment),
and the group is downgraded back when its last consumer-protocol member leaves. The log
is a list of records; "restarting" replays it into a new coordinator, as the broker does.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping, Sequence

import pytest

from weirmq.errors import ErrorCode
from weirmq.groups import consumer as kip848
from weirmq.groups.classic import (
    ClassicSettings,
    JoinReply,
    JoinRequest,
    JoinResult,
    State,
    SyncReply,
    SyncResult,
)
from weirmq.groups.coordinator import (
    CommitRequest,
    CoordinatorSettings,
    GroupCoordinator,
    MigrationPolicy,
)
from weirmq.groups.errors import GroupError
from weirmq.groups.protocol import assigned_partitions, encode_assignment, encode_subscription
from weirmq.groups.records import ConsumerGroupKey, GroupKey, decode_key
from weirmq.types import TopicPartition

TOPIC_ID = uuid.uuid4()
PARTITIONS = 4
SESSION_MS = 10_000
REBALANCE_MS = 10_000
ALL = frozenset(range(PARTITIONS))

Log = list[tuple[bytes, bytes | None]]


class Fixture:
    def __init__(self, policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL) -> None:
        self.log: Log = []
        self.policy = policy
        self.ticket = 0
        self.coordinator = self.make()
        self.coordinator.finish_loading()

    def make(self) -> GroupCoordinator:
        return GroupCoordinator(
            CoordinatorSettings(
                classic=ClassicSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1),
                migration_policy=self.policy,
            ),
            self.log.extend,
            partitions_of={"t": PARTITIONS}.get,
            topics=self.topics,
        )

    def topics(self) -> Mapping[str, kip848.TopicInfo]:
        return {"t": kip848.TopicInfo(TOPIC_ID, PARTITIONS)}

    def restart(self) -> GroupCoordinator:
        coordinator = self.make()
        for key, value in self.log:
            coordinator.replay(key, value, 0)
        coordinator.finish_loading()
        self.coordinator = coordinator
        return coordinator

    def next_ticket(self) -> int:
        self.ticket += 1
        return self.ticket

    # -- classic members ---------------------------------------------------------------

    def join(
        self,
        member_id: str,
        *,
        metadata: bytes | None = None,
        protocols: Sequence[str] = ("range",),
        now: int = 0,
    ) -> JoinResult | None:
        """A JoinGroup (v3 style: no MEMBER_ID_REQUIRED); its result if answered now."""
        subscription = encode_subscription(["t"]) if metadata is None else metadata
        request = JoinRequest(
            member_id,
            None,
            "classic-client",
            "/10.0.0.1",
            SESSION_MS,
            REBALANCE_MS,
            "consumer",
            tuple((name, subscription) for name in protocols),
            False,
        )
        ticket = self.next_ticket()
        replies = self.coordinator.join_group("g", request, now, ticket)
        own = [r.result for r in replies if r.ticket == ticket]
        assert all(isinstance(r, JoinResult) for r in own)
        return own[0] if own else None  # type: ignore[return-value]

    def sync(
        self, member_id: str, generation: int, assignments: Sequence[tuple[str, bytes]] = ()
    ) -> SyncResult | None:
        ticket = self.next_ticket()
        replies = self.coordinator.sync_group(
            "g", member_id, None, generation, "consumer", None, assignments, 0, ticket
        )
        own = [r.result for r in replies if r.ticket == ticket]
        assert all(isinstance(r, SyncResult) for r in own)
        return own[0] if own else None  # type: ignore[return-value]

    def heartbeat(self, member_id: str, generation: int, now: int = 0) -> ErrorCode:
        return self.coordinator.heartbeat("g", member_id, None, generation, now)

    def commit(self, member_id: str, generation: int, offset: int) -> list[ErrorCode]:
        request = CommitRequest("g", member_id, generation, None, [("t", 0, offset, -1, "")])
        return self.coordinator.commit_offsets(request, 0)

    # -- consumer-protocol members ---------------------------------------------------------

    def beat(
        self,
        member_id: str,
        epoch: int,
        owned: Sequence[int] | None = None,
        now: int = 0,
    ) -> kip848.HeartbeatResponse:
        request = kip848.HeartbeatRequest(
            "g",
            member_id,
            epoch,
            rebalance_timeout_ms=REBALANCE_MS if epoch == 0 else -1,
            subscribed_topic_names=("t",) if epoch == 0 else None,
            topic_partitions=None if owned is None else {TOPIC_ID: tuple(owned)},
        )
        return self.coordinator.consumer_heartbeat(request, "kip848-client", "/10.0.0.2", now)


def partitions(sync: SyncResult | None) -> frozenset[int]:
    assert sync is not None and sync.error is ErrorCode.none, sync
    return frozenset(tp.partition for tp in assigned_partitions(sync.assignment))


def given(response: kip848.HeartbeatResponse) -> frozenset[int]:
    assert response.assignment is not None
    return frozenset(response.assignment.get(TOPIC_ID, ()))


def live_classic_group(fx: Fixture) -> tuple[str, str, int]:
    """Two classic members, Stable, each with half the partitions; (a, b, generation)."""
    first = fx.join("")
    assert first is not None and first.error is ErrorCode.none
    a = first.member_id
    assert fx.sync(
        a, first.generation, [(a, encode_assignment([TopicPartition("t", p) for p in range(4)]))]
    )
    # b joins: a rebalance; a rejoins, and the leader (a) assigns two partitions each
    assert fx.join("") is None
    rejoined = fx.join(a)
    assert rejoined is not None and rejoined.leader == a
    b = next(m for m, _, _ in rejoined.members if m != a)
    halves = [
        (a, encode_assignment([TopicPartition("t", 0), TopicPartition("t", 1)])),
        (b, encode_assignment([TopicPartition("t", 2), TopicPartition("t", 3)])),
    ]
    assert fx.sync(b, rejoined.generation) is None  # waits for the leader
    assert partitions(fx.sync(a, rejoined.generation, halves)) == {0, 1}
    view = fx.coordinator.view("g")
    assert view is not None and (view.kind, view.state) == ("classic", "Stable")
    return a, b, rejoined.generation


def kinds_in_log(log: Log) -> list[str]:
    """The group records of the log, in order: +classic/-classic, +consumer/-consumer."""
    kinds = []
    for key, value in log:
        decoded = decode_key(key)
        sign = "-" if value is None else "+"
        if isinstance(decoded, GroupKey):
            kinds.append(sign + "classic")
        elif isinstance(decoded, ConsumerGroupKey):
            kinds.append(sign + "consumer")
    return kinds


# --- upgrade -------------------------------------------------------------------------------


def test_an_empty_classic_group_is_simply_converted_and_stays_converted() -> None:
    fx = Fixture(MigrationPolicy.DISABLED)  # an empty group converts whatever the policy
    a, b, _gen = live_classic_group(fx)
    for member in (a, b):
        fx.coordinator.leave_group("g", [(member, None)], 0)
    assert fx.commit("", -1, 42) == [ErrorCode.none]
    answer = fx.beat("", 0)
    view = fx.coordinator.view("g")
    assert view is not None and view.kind == "consumer"
    assert given(answer) == ALL
    assert kinds_in_log(fx.log)[-2:] == ["-classic", "+consumer"]
    restarted = fx.restart()
    view = restarted.view("g")
    assert view is not None and (view.kind, view.state) == ("consumer", "Empty")
    assert view.generation == answer.member_epoch  # the group epoch survived
    assert restarted.committed("g") == {TopicPartition("t", 0): 42}


def test_a_live_classic_group_is_upgraded_and_shares_its_partitions() -> None:
    fx = Fixture()
    a, b, gen = live_classic_group(fx)
    assert fx.commit(a, gen, 7) == [ErrorCode.none]

    joined = fx.beat("", 0)
    m = joined.member_id
    assert joined.member_epoch == gen + 1  # the classic generation became the epoch, bumped
    assert given(joined) == set()  # everything is still held by the classic members
    c = fx.coordinator
    assert c.list_groups() == [("g", "consumer", "Reconciling", "consumer")]
    described = c.describe_consumer_group("g")
    assert described.group_epoch == gen + 1
    assert {(x.member_id, x.classic) for x in described.members} == {
        (a, True),
        (b, True),
        (m, False),
    }
    classic_view = c.describe_group("g")
    assert classic_view is not None and classic_view.protocol_type == "consumer"
    assert {x.member_id for x in classic_view.members} == {a, b, m}
    assert c.committed("g") == {TopicPartition("t", 0): 7}  # offsets kept

    # The classic members are told to rejoin; until they do, their commits still count.
    assert fx.heartbeat(a, gen) is ErrorCode.rebalance_in_progress
    assert fx.commit(a, gen, 8) == [ErrorCode.none]
    held: dict[str, frozenset[int]] = {}
    for member in (a, b):
        rejoined = fx.join(member)  # eager (v0): it owns nothing as it rejoins
        assert rejoined is not None and rejoined.error is ErrorCode.none
        assert (rejoined.leader, rejoined.members, rejoined.protocol) == ("", (), "range")
        assert rejoined.generation == gen + 1
        held[member] = partitions(fx.sync(member, rejoined.generation))
        assert fx.heartbeat(member, rejoined.generation) is ErrorCode.none
    with pytest.raises(GroupError) as info:
        fx.commit(a, gen, 9)  # the old generation is gone
    assert info.value.code is ErrorCode.illegal_generation

    held[m] = given(fx.beat(m, joined.member_epoch, owned=()))
    assert all(held.values()), held  # everyone got a share
    assert sorted(p for ps in held.values() for p in ps) == sorted(ALL)  # each exactly once
    assert c.list_groups() == [("g", "consumer", "Stable", "consumer")]


def test_waiting_classic_requests_are_answered_by_the_upgrade() -> None:
    fx = Fixture()
    a, _b, _gen = live_classic_group(fx)
    assert fx.join(a, protocols=("range", "roundrobin")) is None  # a rebalance starts; a waits
    joined = fx.beat("", 0)
    (released,) = joined.released
    assert isinstance(released, JoinReply)
    assert released.result.error is ErrorCode.rebalance_in_progress


def test_a_cooperative_classic_member_revokes_before_the_partitions_move() -> None:
    fx = Fixture()
    a, b, gen = live_classic_group(fx)
    joined = fx.beat("", 0)
    m, epoch = joined.member_id, joined.member_epoch
    # 4 partitions for 3 members: one of the classic members must give one up
    described = {x.member_id: x for x in fx.coordinator.describe_consumer_group("g").members}
    held = {x: set(described[x].assignment[0].partitions) for x in (a, b)}
    targets = {x: set(described[x].target_assignment[0].partitions) for x in (a, b)}
    (loser,) = [x for x in (a, b) if targets[x] < held[x]]

    # it reports what it owns (subscription v1): it keeps part, gives the rest up later
    rejoined = fx.join(loser, metadata=subscription_v1(["t"], owned=sorted(held[loser])))
    assert rejoined is not None and rejoined.generation == gen  # not converged yet
    kept = partitions(fx.sync(loser, gen))
    assert kept == targets[loser]
    assert fx.heartbeat(loser, gen) is ErrorCode.none  # it revokes and rejoins by itself
    assert fx.beat(m, epoch, owned=()).assignment is None  # unchanged: nothing released
    rejoined = fx.join(loser, metadata=subscription_v1(["t"], owned=sorted(kept)))
    assert rejoined is not None and rejoined.generation == epoch
    assert partitions(fx.sync(loser, epoch)) == kept
    assert given(fx.beat(m, epoch, owned=())) == held[loser] - kept


def test_a_classic_consumer_may_join_a_consumer_group_with_members() -> None:
    fx = Fixture()
    first = fx.beat("", 0)
    request = JoinRequest(
        "", None, "c", "/h", SESSION_MS, REBALANCE_MS, "consumer",
        (("range", encode_subscription(["t"])),), True,
    )  # fmt: skip
    (required,) = fx.coordinator.join_group("g", request, 0, 1)
    assert isinstance(required, JoinReply)
    assert required.result.error is ErrorCode.member_id_required
    joined = fx.join(required.result.member_id)
    assert joined is not None and joined.error is ErrorCode.none
    assert partitions(fx.sync(joined.member_id, joined.generation)) == set()  # not free yet
    assert fx.heartbeat(joined.member_id, joined.generation) is ErrorCode.none
    kept = given(fx.beat(first.member_id, first.member_epoch, owned=sorted(ALL)))
    assert kept < ALL
    fx.beat(first.member_id, first.member_epoch, owned=sorted(kept))  # revoked
    # the partitions it waited for were released: it is told to rejoin and gets them
    assert fx.heartbeat(joined.member_id, joined.generation) is ErrorCode.rebalance_in_progress
    again = fx.join(joined.member_id)
    assert again is not None
    assert partitions(fx.sync(joined.member_id, again.generation)) == ALL - kept
    # a classic member with a protocol the group's classic members do not share
    with pytest.raises(GroupError) as info:
        fx.join("", protocols=("roundrobin",))
    assert info.value.code is ErrorCode.inconsistent_group_protocol


@pytest.mark.parametrize("policy", [MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE])
def test_without_the_policy_a_live_classic_group_refuses_the_upgrade(
    policy: MigrationPolicy,
) -> None:
    fx = Fixture(policy)
    a, _b, gen = live_classic_group(fx)
    before = len(fx.log)
    with pytest.raises(GroupError) as info:
        fx.beat("", 0)
    assert info.value.code is ErrorCode.group_id_not_found
    view = fx.coordinator.view("g")
    assert view is not None and (view.kind, view.state) == ("classic", "Stable")
    assert fx.heartbeat(a, gen) is ErrorCode.none
    assert len(fx.log) == before


def test_a_classic_group_of_other_clients_is_not_upgraded() -> None:
    fx = Fixture()
    request = JoinRequest(
        "", None, "c", "/h", SESSION_MS, REBALANCE_MS, "connect", (("v1", b"x"),), False
    )
    fx.coordinator.join_group("g", request, 0, 1)
    with pytest.raises(GroupError) as info:
        fx.beat("", 0)
    assert info.value.code is ErrorCode.group_id_not_found
    view = fx.coordinator.view("g")
    assert view is not None and view.kind == "classic"


def test_an_upgraded_group_survives_a_restart_with_its_epoch_and_offsets() -> None:
    fx = Fixture()
    a, _b, gen = live_classic_group(fx)
    fx.commit(a, gen, 11)
    joined = fx.beat("", 0)
    assert kinds_in_log(fx.log)[-2:] == ["-classic", "+consumer"]
    c = fx.restart()
    view = c.view("g")
    assert view is not None and (view.kind, view.members) == ("consumer", ())
    assert view.generation == joined.member_epoch
    assert c.committed("g") == {TopicPartition("t", 0): 11}
    # members rejoin: the classic ones through JoinGroup (an empty consumer group becomes
    # classic again), the consumer-protocol one upgrades the group again
    with pytest.raises(GroupError) as info:
        fx.heartbeat(a, gen)
    assert info.value.code is ErrorCode.unknown_member_id


# --- downgrade -----------------------------------------------------------------------------


def upgraded(fx: Fixture) -> tuple[str, str, str, int]:
    """A live upgrade, converged: classic a and b, consumer-protocol m, at the epoch."""
    a, b, _gen = live_classic_group(fx)
    joined = fx.beat("", 0)
    m, epoch = joined.member_id, joined.member_epoch
    for member in (a, b):
        rejoined = fx.join(member)
        assert rejoined is not None and rejoined.generation == epoch
        fx.sync(member, epoch)
    fx.beat(m, epoch, owned=())
    assert fx.coordinator.list_groups() == [("g", "consumer", "Stable", "consumer")]
    return a, b, m, epoch


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group() -> None:
    fx = Fixture()
    a, b, m, epoch = upgraded(fx)
    left = fx.beat(m, kip848.LEAVE_EPOCH)
    assert left.member_epoch == kip848.LEAVE_EPOCH
    c = fx.coordinator
    assert c.list_groups() == [("g", "consumer", "PreparingRebalance", "classic")]
    view = c.view("g")
    assert view is not None and view.generation == epoch
    assert {x.member_id for x in view.members} == {a, b}
    assert kinds_in_log(fx.log)[-2:] == ["-consumer", "+classic"]
    # the classic members still commit with their generation, and are told to rejoin
    assert fx.commit(a, epoch, 21) == [ErrorCode.none]
    assert fx.heartbeat(a, epoch) is ErrorCode.rebalance_in_progress
    assert fx.join(a) is None  # the barrier waits for b
    rejoined = fx.join(b)
    assert rejoined is not None and rejoined.generation == epoch + 1
    with pytest.raises(GroupError) as info:
        c.describe_consumer_group("g")
    assert info.value.code is ErrorCode.group_id_not_found
    restarted = fx.restart()
    view = restarted.view("g")
    assert view is not None and view.kind == "classic"
    assert restarted.committed("g") == {TopicPartition("t", 0): 21}


def test_an_expired_consumer_protocol_member_downgrades_the_group_too() -> None:
    fx = Fixture()
    a, _b, _m, epoch = upgraded(fx)
    c = fx.coordinator
    session_ms = c.settings.consumer.session_timeout_ms
    # the classic members keep heartbeating; the consumer-protocol member goes silent
    for now in range(SESSION_MS // 2, session_ms + SESSION_MS, SESSION_MS // 2):
        for member in (a, _b):
            assert fx.heartbeat(member, epoch, now) in (
                ErrorCode.none,
                ErrorCode.rebalance_in_progress,
            )
        c.tick(now)
    view = c.view("g")
    assert view is not None and (view.kind, view.state) == ("classic", "PreparingRebalance")


def test_with_upgrade_only_the_group_stays_a_consumer_group_of_classic_members() -> None:
    fx = Fixture(MigrationPolicy.UPGRADE)
    a, _b, m, epoch = upgraded(fx)
    fx.beat(m, kip848.LEAVE_EPOCH)
    c = fx.coordinator
    described = c.describe_consumer_group("g")
    assert all(x.classic for x in described.members) and len(described.members) == 2
    # the classic members take the partitions back, through the consumer group
    assert fx.heartbeat(a, epoch) is ErrorCode.rebalance_in_progress
    rejoined = fx.join(a)
    assert rejoined is not None and rejoined.generation == epoch + 1
    assert len(partitions(fx.sync(a, rejoined.generation))) == 2


def test_a_leaving_classic_member_does_not_downgrade() -> None:
    fx = Fixture()
    a, _b, _m, _epoch = upgraded(fx)
    outcome = fx.coordinator.leave_group("g", [(a, None)], 0)
    assert outcome.codes == (ErrorCode.none,)
    view = fx.coordinator.view("g")
    assert view is not None and view.kind == "consumer" and len(view.members) == 2


def test_a_consumer_protocol_heartbeat_from_a_classic_member_is_refused() -> None:
    fx = Fixture()
    a, _b, _m, epoch = upgraded(fx)
    with pytest.raises(GroupError) as info:
        fx.beat(a, epoch)
    assert info.value.code is ErrorCode.unknown_member_id
    view = fx.coordinator.view("g")
    assert view is not None and State.STABLE.value == view.state


def subscription_v1(topics: Sequence[str], owned: Sequence[int]) -> bytes:
    """A ConsumerProtocolSubscription v1 (with owned partitions), as cooperative clients
    send it."""
    out = bytearray(struct.pack(">hi", 1, len(topics)))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", -1)  # no user data
    out += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    out += struct.pack(">i", len(owned))
    for partition in owned:
        out += struct.pack(">i", partition)
    return bytes(out)


def test_sync_replies_of_classic_members_carry_the_consumer_protocol() -> None:
    fx = Fixture()
    a, _b, _m, epoch = upgraded(fx)
    ticket = fx.next_ticket()
    (reply,) = fx.coordinator.sync_group("g", a, None, epoch, None, None, [], 0, ticket)
    assert isinstance(reply, SyncReply)
    assert (reply.result.protocol_type, reply.result.protocol) == ("consumer", "range")


def test_a_classic_member_that_never_rejoins_is_removed_after_its_rebalance_timeout() -> None:
    fx = Fixture()
    a, b, gen = live_classic_group(fx)
    joined = fx.beat("", 0)
    for member in (a, b):
        assert fx.heartbeat(member, gen, now=1_000) is ErrorCode.rebalance_in_progress
    rejoined = fx.join(b, now=2_000)
    assert rejoined is not None
    fx.sync(b, rejoined.generation)
    # a keeps heartbeating, never rejoins: its rebalance timeout runs from the first telling
    for now in range(2_000, 1_000 + REBALANCE_MS, 2_000):
        fx.heartbeat(a, gen, now=now)
        fx.heartbeat(b, rejoined.generation, now=now)
        fx.beat(joined.member_id, joined.member_epoch, now=now)
        fx.coordinator.tick(now)
    fx.coordinator.tick(1_000 + REBALANCE_MS)
    described = fx.coordinator.describe_consumer_group("g")
    assert {x.member_id for x in described.members} == {b, joined.member_id}


def test_epochs_never_go_back_across_conversions_of_an_empty_group() -> None:
    fx = Fixture()
    a, b, gen = live_classic_group(fx)
    for member in (a, b):
        fx.coordinator.leave_group("g", [(member, None)], 0)
    generation = fx.coordinator.view("g")
    assert generation is not None
    joined = fx.beat("", 0)
    assert joined.member_epoch > generation.generation >= gen
    fx.beat(joined.member_id, kip848.LEAVE_EPOCH)
    epoch = fx.coordinator.view("g")
    assert epoch is not None and epoch.kind == "consumer"
    first = fx.join("")  # an empty consumer group becomes classic again
    assert first is not None and first.generation > epoch.generation


def test_a_classic_group_with_only_members_to_come_is_simply_converted() -> None:
    fx = Fixture(MigrationPolicy.DISABLED)
    request = JoinRequest(
        "", None, "c", "/h", SESSION_MS, REBALANCE_MS, "consumer",
        (("range", encode_subscription(["t"])),), True,
    )  # fmt: skip
    (required,) = fx.coordinator.join_group("g", request, 0, 1)
    assert isinstance(required, JoinReply)
    assert required.result.error is ErrorCode.member_id_required
    joined = fx.beat("", 0)  # the group is Empty in Kafka's terms: no refusal
    assert given(joined) == ALL
    classic = fx.join(required.result.member_id)  # it comes back: a classic member
    assert classic is not None and classic.error is ErrorCode.none
    described = fx.coordinator.describe_consumer_group("g")
    assert sorted(x.classic for x in described.members) == [False, True]
