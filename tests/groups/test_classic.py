"""The classic group state machine, driven by events and a stepped clock.

Every test plays the part of the clients: it sends joins, syncs, heartbeats and leaves,
each join and sync under a new ticket, routes the replies every step returns to the
answers of the request holding their ticket, and moves time forward by hand. After every
step the invariants hold: the state is one `TRANSITIONS` allows, in Stable every member
has the assignment its leader gave, and no request is answered twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from weirmq.errors import ErrorCode
from weirmq.groups.classic import (
    TRANSITIONS,
    ClassicGroup,
    ClassicSettings,
    GroupReply,
    JoinReply,
    JoinRequest,
    JoinResult,
    State,
    SyncReply,
    SyncResult,
)
from weirmq.groups.errors import GroupError

SESSION_MS = 10_000
REBALANCE_MS = 30_000


@dataclass
class Harness:
    """One group, a clock, and every answer the group gave, by ticket."""

    delay_ms: int = 0
    now: int = 1_000
    persisted: list[int] = field(default_factory=list)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    tickets: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    joins: dict[int, list[JoinResult]] = field(default_factory=dict)
    """The answers of each JoinGroup request, by ticket (what `join` returned)."""
    syncs: dict[int, list[SyncResult]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group = ClassicGroup(
            "g",
            ClassicSettings(
                min_session_timeout_ms=1_000,
                max_session_timeout_ms=60_000,
                initial_rebalance_delay_ms=self.delay_ms,
            ),
            lambda prefix: f"{prefix}-{next(self.ids)}",
            lambda group: self.persisted.append(group.generation),
        )

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        client: str = "c",
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"r"),),
        known_required: bool = True,
        session_ms: int = SESSION_MS,
    ) -> list[JoinResult]:
        ticket = next(self.tickets)
        answers = self.joins[ticket] = []
        request = JoinRequest(
            member_id,
            instance,
            client,
            "/127.0.0.1",
            session_ms,
            REBALANCE_MS,
            "consumer",
            protocols,
            known_required,
        )
        self.deliver(self.group.join(request, self.now, ticket))
        return answers

    def new_member(self, **kwargs: object) -> tuple[str, list[JoinResult]]:
        """A fresh dynamic member: MEMBER_ID_REQUIRED, then the real join."""
        first = self.join(**kwargs)  # type: ignore[arg-type]
        assert first[0].error is ErrorCode.member_id_required
        member_id = first[0].member_id
        return member_id, self.join(member_id, **kwargs)  # type: ignore[arg-type]

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None
    ) -> list[SyncResult]:
        ticket = next(self.tickets)
        answers = self.syncs[ticket] = []
        replies = self.group.sync(
            member_id,
            None,
            generation,
            "consumer",
            None,
            list((assignments or {}).items()),
            self.now,
            ticket,
        )
        self.deliver(replies)
        return answers

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        code = self.group.heartbeat(member_id, None, generation, self.now)
        self.check()
        return code

    def leave(self, member_id: str, instance: str | None = None) -> ErrorCode:
        outcome = self.group.leave([(member_id, instance)], self.now)
        self.deliver(outcome.replies)
        (code,) = outcome.codes
        return code

    def advance(self, ms: int) -> None:
        self.now += ms
        self.deliver(self.group.tick(self.now))

    def deliver(self, replies: Iterable[GroupReply]) -> None:
        """Hand each reply to the request holding its ticket, then check invariants."""
        for reply in replies:
            if isinstance(reply, JoinReply):
                join_answers = self.joins[reply.ticket]
                assert not join_answers, f"join {reply.ticket} answered twice"
                join_answers.append(reply.result)
            else:
                assert isinstance(reply, SyncReply)
                sync_answers = self.syncs[reply.ticket]
                assert not sync_answers, f"sync {reply.ticket} answered twice"
                sync_answers.append(reply.result)
        self.check()

    def check(self) -> None:
        group = self.group
        assert group.state in TRANSITIONS
        if group.state is State.STABLE:
            assert group.leader in group.members
        if group.state is State.EMPTY:
            assert not group.members


def stable_group(h: Harness, count: int) -> list[str]:
    """`count` members joined, the leader synced; returns member ids, leader first."""
    ids = []
    pending: list[list[JoinResult]] = []
    for _ in range(count):
        member_id, answers = h.new_member()
        ids.append(member_id)
        pending.append(answers)
        # each new member starts a rebalance the earlier ones must rejoin
        for other, earlier in zip(ids[:-1], pending[:-1], strict=True):
            if earlier:
                earlier.clear()
                pending[ids.index(other)] = h.join(other)
    results = [answers[-1] for answers in pending]
    assert all(r.error is ErrorCode.none for r in results)
    leader = results[0].leader
    generation = results[0].generation
    assignments = {m: f"a-{m}".encode() for m in ids}
    synced = h.sync(leader, generation, assignments)
    for member_id in ids:
        if member_id != leader:
            synced += h.sync(member_id, generation)
    assert h.group.state is State.STABLE
    return [leader] + [m for m in ids if m != leader]


def test_first_join_asks_for_a_member_id_then_completes_alone() -> None:
    h = Harness()
    first = h.join()
    assert first[0].error is ErrorCode.member_id_required
    assert first[0].member_id.startswith("c-")
    assert h.group.state is State.EMPTY  # a pending member is not a member yet
    second = h.join(first[0].member_id)
    assert second[0].error is ErrorCode.none
    assert second[0].generation == 1
    assert second[0].leader == first[0].member_id
    assert second[0].protocol == "range"
    assert [m[0] for m in second[0].members] == [first[0].member_id]
    assert h.group.state is State.COMPLETING_REBALANCE


def test_old_clients_without_member_id_required_join_at_once() -> None:
    h = Harness()
    answers = h.join(known_required=False)
    assert answers[0].error is ErrorCode.none
    assert answers[0].member_id


def test_leader_sync_stores_assignments_and_answers_waiting_followers() -> None:
    h = Harness()
    a, _ = h.new_member()
    b_first = h.join()
    b = b_first[0].member_id
    b_answers = h.join(b)
    assert not b_answers  # waits for a to rejoin
    a_answers = h.join(a)
    gen = h.group.generation
    assert a_answers[0].generation == b_answers[0].generation == gen == 2
    leader = a_answers[0].leader
    follower = b if leader == a else a
    leader_answer = a_answers[0] if leader == a else b_answers[0]
    follower_answer = b_answers[0] if leader == a else a_answers[0]
    assert {m[0] for m in leader_answer.members} == {a, b}
    assert follower_answer.members == ()
    waiting = h.sync(follower, gen)
    assert not waiting
    done = h.sync(leader, gen, {a: b"for-a", b: b"for-b"})
    assert h.group.state is State.STABLE
    assert done[0].assignment == (b"for-a" if leader == a else b"for-b")
    assert waiting[0].assignment == (b"for-b" if leader == a else b"for-a")
    assert h.persisted == [gen]
    # a late sync in Stable gets its assignment at once
    again = h.sync(follower, gen)
    assert again[0].assignment == (b"for-b" if leader == a else b"for-a")


def test_heartbeats_keep_a_stable_member_and_silence_expires_it() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    gen = h.group.generation
    for _ in range(5):  # well past one session timeout, with heartbeats
        h.advance(SESSION_MS // 2)
        assert h.heartbeat(leader, gen) is ErrorCode.none
        assert h.heartbeat(other, gen) is ErrorCode.none
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(leader, gen) is ErrorCode.none  # `other` falls silent
    assert other in h.group.members
    h.advance(SESSION_MS // 2)
    # `other` stopped heartbeating: expired, and the leader is told to rejoin
    assert other not in h.group.members
    assert h.group.state is State.PREPARING_REBALANCE
    assert h.heartbeat(leader, gen) is ErrorCode.rebalance_in_progress
    rejoined = h.join(leader)
    assert rejoined[0].generation == gen + 1
    assert [m[0] for m in rejoined[0].members] == [leader]


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    gen = h.group.generation
    newcomer, waiting = h.new_member()
    assert not waiting
    leader_answer = h.join(leader)
    assert not leader_answer  # `other` has not rejoined yet
    # `other` keeps heartbeating but never rejoins
    for _ in range(REBALANCE_MS // 5_000):
        h.advance(5_000)
        if other in h.group.members and h.group.state is State.PREPARING_REBALANCE:
            assert h.heartbeat(other, gen) is ErrorCode.rebalance_in_progress
    assert other not in h.group.members
    assert newcomer in h.group.members
    assert leader_answer[0].generation == waiting[0].generation == gen + 1
    assert h.group.state is State.COMPLETING_REBALANCE


def test_members_waiting_in_join_or_sync_do_not_expire() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    h.join(leader)  # starts a rebalance; the leader now waits in JoinGroup
    h.advance(SESSION_MS + 1)
    assert leader in h.group.members  # kept alive while waiting on us
    assert other not in h.group.members  # silent, so expired


def test_leave_triggers_a_rebalance_and_the_last_leave_empties_the_group() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    gen = h.group.generation
    assert h.leave(other) is ErrorCode.none
    assert h.group.state is State.PREPARING_REBALANCE
    answer = h.join(leader)
    assert answer[0].generation == gen + 1
    h.sync(leader, gen + 1, {leader: b"all"})
    assert h.leave(leader) is ErrorCode.none
    assert h.group.state is State.EMPTY
    assert h.group.generation == gen + 2
    assert h.persisted[-1] == gen + 2
    assert h.leave("nobody") is ErrorCode.unknown_member_id


def test_error_semantics_clients_rely_on() -> None:
    h = Harness()
    leader, _other = stable_group(h, 2)
    gen = h.group.generation
    with pytest.raises(GroupError) as info:
        h.heartbeat("stranger", gen)
    assert info.value.code is ErrorCode.unknown_member_id
    with pytest.raises(GroupError) as info:
        h.heartbeat(leader, gen + 7)
    assert info.value.code is ErrorCode.illegal_generation
    with pytest.raises(GroupError) as info:
        h.sync(leader, gen + 7)
    assert info.value.code is ErrorCode.illegal_generation
    h.join(known_required=False)  # a newcomer: rebalance in progress
    with pytest.raises(GroupError) as info:
        h.sync(leader, gen)
    assert info.value.code is ErrorCode.rebalance_in_progress
    with pytest.raises(GroupError) as info:
        h.join(session_ms=100)
    assert info.value.code is ErrorCode.invalid_session_timeout
    with pytest.raises(GroupError) as info:
        h.join(protocols=(("roundrobin-only", b""),))
    assert info.value.code is ErrorCode.inconsistent_group_protocol


def test_pending_syncs_get_rebalance_in_progress_when_a_new_rebalance_starts() -> None:
    h = Harness()
    a, _ = h.new_member()
    b_first = h.join()
    b = b_first[0].member_id
    b_join = h.join(b)
    a_join = h.join(a)
    leader = a_join[0].leader
    follower = b if leader == a else a
    del b_join
    waiting = h.sync(follower, h.group.generation)
    assert not waiting
    h.join(known_required=False)  # a third client arrives before the leader synced
    assert waiting == [SyncResult(ErrorCode.rebalance_in_progress)]


def test_static_member_restart_within_session_timeout_does_not_rebalance() -> None:
    h = Harness()
    leader_id, leader_join = h.new_member()
    static = h.join(instance="worker-1")
    assert static == []  # static members skip MEMBER_ID_REQUIRED; waits for the leader
    leader_join = h.join(leader_id)
    static_id = h.group.static_members["worker-1"]
    generation = leader_join[0].generation
    h.sync(static_id, generation)
    h.sync(leader_id, generation, {leader_id: b"L", static_id: b"S"})
    assert h.group.state is State.STABLE
    # the static member's process restarts: unknown member id, same instance id
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(leader_id, generation) is ErrorCode.none
    again = h.join(instance="worker-1")
    assert again[0].error is ErrorCode.none
    assert again[0].generation == generation  # no new generation
    assert h.group.state is State.STABLE
    new_id = again[0].member_id
    assert new_id != static_id
    assert h.sync(new_id, generation)[0].assignment == b"S"
    # the old incarnation is fenced
    with pytest.raises(GroupError) as info:
        h.group.heartbeat(static_id, "worker-1", generation, h.now)
    assert info.value.code is ErrorCode.fenced_instance_id
    assert h.heartbeat(leader_id, generation) is ErrorCode.none


def test_static_member_gone_past_session_timeout_is_removed() -> None:
    h = Harness()
    h.join(instance="worker-1")
    member = h.group.static_members["worker-1"]
    h.advance(1)
    h.sync(member, 1, {member: b"x"})
    h.advance(SESSION_MS + 1)
    # its only member gone, the rebalance has nobody to wait for
    assert h.group.state is State.EMPTY
    assert h.group.generation == 2
    assert "worker-1" not in h.group.static_members


def test_leave_of_a_static_member_by_instance_id() -> None:
    h = Harness()
    h.join(instance="worker-1")
    member = h.group.static_members["worker-1"]
    h.sync(member, 1, {member: b"x"})
    assert h.leave("", "worker-1") is ErrorCode.none
    assert h.group.state is State.EMPTY
    assert h.leave("other-id", "worker-2") is ErrorCode.unknown_member_id


def test_initial_delay_gathers_members_that_start_together() -> None:
    h = Harness(delay_ms=3_000)
    a, a_join = h.new_member()
    h.advance(1_000)
    b, b_join = h.new_member()
    h.advance(1_000)
    assert not a_join and not b_join  # still gathering
    h.advance(1_000)  # the first delay passed, but b arrived meanwhile: one more round
    assert not a_join
    h.advance(3_000)
    assert a_join[0].generation == b_join[0].generation == 1
    assert {m[0] for m in (a_join[0].members or b_join[0].members)} == {a, b}


def test_concurrent_joins_during_a_rebalance_land_in_one_generation() -> None:
    h = Harness()
    ids = stable_group(h, 3)
    gen = h.group.generation
    newcomers = [h.new_member()[0] for _ in range(2)]
    answers = {m: h.join(m) for m in ids}
    generations = {r[0].generation for r in answers.values()}
    assert generations == {gen + 1}
    leader = next(r[0] for r in answers.values() if r[0].members)
    assert {m[0] for m in leader.members} == set(ids) | set(newcomers)


def test_a_retried_join_of_a_known_member_in_a_stable_group_gets_the_same_answer() -> None:
    h = Harness()
    _leader, other = stable_group(h, 2)
    again = h.join(other)
    assert again[0].generation == h.group.generation
    assert again[0].members == ()
    assert h.group.state is State.STABLE


def test_protocol_is_chosen_by_vote_among_protocols_every_member_supports() -> None:
    coop_first = (("cooperative-sticky", b"c"), ("range", b"r"))
    range_first = (("range", b"r"), ("cooperative-sticky", b"c"))
    h = Harness(delay_ms=1_000)  # so that all three land in the first generation
    answers = [h.join(protocols=p, known_required=False) for p in (coop_first, coop_first)]
    answers.append(h.join(protocols=range_first, known_required=False))
    h.advance(1_000)  # members arrived during the delay: it is extended once
    h.advance(1_000)
    assert {a[0].protocol for a in answers} == {"cooperative-sticky"}  # two votes to one
    leader = next(a[0] for a in answers if a[0].members)
    assert {m[2] for m in leader.members} == {b"c"}  # metadata of the chosen protocol

    h = Harness(delay_ms=1_000)
    answers = [h.join(protocols=coop_first, known_required=False) for _ in range(2)]
    answers.append(h.join(protocols=(("range", b"r"),), known_required=False))
    h.advance(2_000)
    h.advance(2_000)
    assert {a[0].protocol for a in answers} == {"range"}  # the only one all support


def test_record_and_restore_round_trip_keeps_members_and_assignments() -> None:
    h = Harness()
    ids = stable_group(h, 2)
    record = h.group.record()
    copy = Harness()
    copy.group.restore(record, 50_000)
    assert copy.group.state is State.STABLE
    assert copy.group.generation == h.group.generation
    assert set(copy.group.members) == set(ids)
    for member_id in ids:
        assert copy.group.members[member_id].assignment == f"a-{member_id}".encode()
        assert copy.group.members[member_id].heartbeat_deadline_ms == 50_000 + SESSION_MS
    # a member heartbeating the restored generation is accepted
    copy.now = 50_000
    assert copy.heartbeat(ids[0], h.group.generation) is ErrorCode.none


def test_waiting_joins_and_syncs_are_answered_when_the_broker_stops() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    waiting_join = h.join(leader)  # a rebalance: waits for `other`
    assert not waiting_join
    h.deliver(h.group.abort_waiting(ErrorCode.not_coordinator))
    assert waiting_join[0].error is ErrorCode.not_coordinator
    assert other in h.group.members


def test_a_retried_join_during_a_rebalance_answers_the_first_and_waits_with_itself() -> None:
    h = Harness()
    leader, other = stable_group(h, 2)
    gen = h.group.generation
    first = h.join(leader)  # starts a rebalance; waits for `other`
    assert not first
    retried = h.join(leader)  # the client gave up on the first and sent it again
    assert first == [JoinResult(ErrorCode.rebalance_in_progress)]
    assert not retried
    assert h.join(other)[0].generation == gen + 1
    assert retried[0].generation == gen + 1
    assert retried[0].member_id == leader


def test_a_fenced_static_members_waiting_join_is_answered_under_its_old_id() -> None:
    h = Harness()
    leader_id, _ = h.new_member()
    waiting = h.join(instance="worker-1")  # a rebalance: waits for the leader to rejoin
    assert not waiting
    old_id = h.group.static_members["worker-1"]
    again = h.join(instance="worker-1")  # its process restarted meanwhile
    assert waiting == [JoinResult(ErrorCode.fenced_instance_id, member_id=old_id)]
    assert not again  # the new incarnation waits in its place
    h.join(leader_id)
    new_id = h.group.static_members["worker-1"]
    assert new_id != old_id
    assert (again[0].error, again[0].member_id) == (ErrorCode.none, new_id)
