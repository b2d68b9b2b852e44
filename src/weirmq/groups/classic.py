"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) of one group.

States and transitions (Kafka's, and `TRANSITIONS` below is the whole table):

    Empty ──join──▶ PreparingRebalance ──all joined / deadline──▶ CompletingRebalance
      ▲                 │   ▲                                         │      │
      └──no member left─┘   └──join, leave, expiry, new metadata──────┘      │ leader's
                            ▲                                                ▼ SyncGroup
                            └────────────join, leave, expiry──────────── Stable
    any state ──delete──▶ Dead

A rebalance is a barrier. Every member must (re)send JoinGroup; the coordinator holds the
answers until all known members have joined or the rebalance deadline passes (the
largest rebalance timeout among members), drops those that did not come, increments the
generation, picks the protocol every member supports (by vote) and answers: the leader
gets every member's metadata, the others an empty list. Then everyone sends SyncGroup;
the leader's carries the assignment, which is stored and handed to each member. Members
that fall behind learn it through Heartbeat's REBALANCE_IN_PROGRESS and rejoin.

A first join to an Empty group waits `initial_rebalance_delay_ms` (extended by each new
member, up to the rebalance timeout) so that a fleet of consumers starting together gets
one rebalance instead of one per member, as Kafka's group.initial.rebalance.delay.ms.

Answers are outputs, as h11 returns events: every step (`join`, `sync`, `leave`, `tick`,
`abort_waiting`) takes an event and the time and returns the replies it produced, each a
`JoinReply` or `SyncReply` addressed to a ticket. A ticket (an int the caller allocates
for each JoinGroup or SyncGroup request) names one request, not a member: a retried join
replaces the first, whose ticket is answered at once; a fenced static member's waiting
request is answered under the old member id. A request that must wait leaves its ticket
on the member (`join_ticket`, `sync_ticket`) until the barrier answers it; one that can
be answered at once gets its reply in the same step's output. So nothing here calls
back: the caller delivers every reply of a step (its own and other members') in one
place (broker/group_service.py `GroupReplies`). Time is `now_ms`, passed in by the
caller, and `tick(now_ms)` fires what is due (rebalance deadlines, session expiries):
`next_deadline_ms` says when to call it next.

Member ids: a dynamic member's first JoinGroup (v4+) gets MEMBER_ID_REQUIRED together with
a new id, and becomes a member when it rejoins with it (KIP-394; so a client that crashed
mid-join leaves no ghost member behind). Static members (`group.instance.id`, KIP-345)
keep their instance id across restarts: a rejoin with an unknown member id but a known
instance id takes the old member's place, with its assignment, and does not rebalance a
Stable group; the old member id is fenced (FENCED_INSTANCE_ID).

Members are expired when `session_timeout_ms` passes without a heartbeat, except while a
JoinGroup or SyncGroup of theirs is waiting here, that is while they hold a ticket (they
cannot heartbeat meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..errors import ErrorCode
from ..types import TopicPartition
from . import protocol as consumer_protocol
from .errors import GroupError
from .records import GroupValue, MemberRecord
from .views import ClassicDescription, ClassicMemberDescription, GroupView, MemberView


class State(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.EMPTY: frozenset({State.PREPARING_REBALANCE, State.DEAD}),
    State.PREPARING_REBALANCE: frozenset({State.COMPLETING_REBALANCE, State.EMPTY, State.DEAD}),
    State.COMPLETING_REBALANCE: frozenset({State.PREPARING_REBALANCE, State.STABLE, State.DEAD}),
    State.STABLE: frozenset({State.PREPARING_REBALANCE, State.DEAD}),
    State.DEAD: frozenset(),
}


@dataclass(frozen=True, slots=True)
class ClassicSettings:
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    """(member id, instance id, metadata) of every member: for the leader only."""


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinReply:
    """The answer to the JoinGroup request holding `ticket`."""

    ticket: int
    result: JoinResult


@dataclass(frozen=True, slots=True)
class SyncReply:
    """The answer to the SyncGroup request holding `ticket`."""

    ticket: int
    result: SyncResult


GroupReply = JoinReply | SyncReply
GroupResult = JoinResult | SyncResult
Replies = list[GroupReply]
"""What a step produced, in the order it produced them: the caller delivers them all."""


@dataclass(frozen=True, slots=True)
class LeaveOutcome:
    """A LeaveGroup step: one error code per member named (none when it left), in the
    request's order, and the replies the departures produced (a rebalance completing
    for the members that stay)."""

    codes: tuple[ErrorCode, ...]
    replies: tuple[GroupReply, ...]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool
    """JoinGroup v4+: an unknown dynamic member first gets MEMBER_ID_REQUIRED."""


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    join_ticket: int | None = None
    """The JoinGroup request of this member that waits for the barrier."""
    sync_ticket: int | None = None
    """The SyncGroup request of this member that waits for the leader's assignment."""

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def kept_alive(self) -> bool:
        """A member waiting on us (holding a ticket) cannot heartbeat, so it does not
        expire meanwhile."""
        return self.join_ticket is not None or self.sync_ticket is not None

    def answer_join(self, result: JoinResult) -> Replies:
        """Answer this member's waiting JoinGroup, if any."""
        ticket, self.join_ticket = self.join_ticket, None
        return [] if ticket is None else [JoinReply(ticket, result)]

    def answer_sync(self, result: SyncResult) -> Replies:
        """Answer this member's waiting SyncGroup, if any."""
        ticket, self.sync_ticket = self.sync_ticket, None
        return [] if ticket is None else [SyncReply(ticket, result)]


@dataclass(slots=True)
class _DelayedJoin:
    """Kafka's initial rebalance delay: how long the first rebalance may still grow."""

    remaining_ms: int
    new_member_added: bool = False


@dataclass(slots=True)
class ClassicGroup:
    """One classic group; see the module docstring."""

    group_id: str
    settings: ClassicSettings
    new_member_id: Callable[[str], str]
    """Makes a member id from a client id or instance id (randomness is injected)."""
    persist: Callable[[ClassicGroup], None]
    """Called after every change that must survive a restart (generation, assignment,
    membership of a stable group); the coordinator writes `record()` to its log."""
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    pending_members: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED -> when they lapse."""
    join_deadline_ms: int | None = None
    delayed_join: _DelayedJoin | None = None
    state_timestamp_ms: int = -1

    # --- state -------------------------------------------------------------------------

    def _transition(self, to: State, now_ms: int) -> None:
        assert to in TRANSITIONS[self.state], (
            f"group {self.group_id!r}: no transition from {self.state.value} to {to.value}"
        )
        self.state = to
        self.state_timestamp_ms = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def _check_alive(self) -> None:
        if self.state is State.DEAD:
            # The group was deleted while the client held on to it: find the coordinator
            # again and start over.
            raise GroupError(ErrorCode.coordinator_not_available, "group is being deleted")

    def check_member(self, member_id: str, instance_id: str | None) -> Member:
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is not None and known != member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"instance {instance_id!r} now belongs to another member",
                )
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id, f"unknown member {member_id!r}")
        return member

    # --- JoinGroup ---------------------------------------------------------------------

    def join(self, request: JoinRequest, now_ms: int, ticket: int) -> Replies:
        """Handle the JoinGroup holding `ticket`: the replies it produced, its own among
        them when it is answered now (else it waits for the rebalance to complete).
        Refusals that need no state are raised as GroupError."""
        self._check_alive()
        self._check_join(request)
        if not request.member_id:
            return self._join_unknown(request, now_ms, ticket)
        if request.member_id in self.pending_members:
            del self.pending_members[request.member_id]
            return self._add_member(request.member_id, request, now_ms, ticket)
        return self._join_known(request, now_ms, ticket)

    def _check_join(self, request: JoinRequest) -> None:
        low, high = self.settings.min_session_timeout_ms, self.settings.max_session_timeout_ms
        if not low <= request.session_timeout_ms <= high:
            raise GroupError(
                ErrorCode.invalid_session_timeout,
                f"session timeout {request.session_timeout_ms} ms is outside the broker's "
                f"range {low}..{high} ms",
            )
        if not request.protocol_type or not request.protocols:
            raise GroupError(ErrorCode.inconsistent_group_protocol, "no protocol given")
        if self.members and not self._supports(request):
            raise GroupError(
                ErrorCode.inconsistent_group_protocol,
                "none of the member's protocols is supported by every member of the group",
            )

    def _supports(self, request: JoinRequest) -> bool:
        if request.protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in request.protocols}
        return bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = {name for name, _ in first.protocols}
        for member in members:
            common &= {name for name, _ in member.protocols}
        return common

    def _join_unknown(self, request: JoinRequest, now_ms: int, ticket: int) -> Replies:
        instance_id = request.group_instance_id
        if instance_id is not None and instance_id in self.static_members:
            return self._replace_static_member(request, now_ms, ticket)
        self._check_size()
        member_id = self.new_member_id(instance_id or request.client_id)
        if instance_id is None and request.require_known_member_id:
            # KIP-394: the member comes back with this id; until then it only counts as
            # pending, so a client that never returns leaves nothing to wait for.
            self.pending_members[member_id] = now_ms + request.session_timeout_ms
            result = JoinResult(ErrorCode.member_id_required, member_id=member_id)
            return [JoinReply(ticket, result)]
        return self._add_member(member_id, request, now_ms, ticket)

    def _check_size(self) -> None:
        if len(self.members) + len(self.pending_members) >= self.settings.max_size:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"the group has reached its maximum of {self.settings.max_size} members",
            )

    def _add_member(
        self, member_id: str, request: JoinRequest, now_ms: int, ticket: int
    ) -> Replies:
        if not self.members:
            self.protocol_type = request.protocol_type
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocol_type,
            request.protocols,
            heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
            join_ticket=ticket,
        )
        self.members[member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member_id
        if self.delayed_join is not None:
            self.delayed_join.new_member_added = True
        return self._prepare_rebalance(now_ms) + self._maybe_complete_join(now_ms)

    def _replace_static_member(self, request: JoinRequest, now_ms: int, ticket: int) -> Replies:
        assert request.group_instance_id is not None
        old_id = self.static_members[request.group_instance_id]
        member = self.members.pop(old_id)
        # The old incarnation's waiting requests are answered under its old id.
        replies = member.answer_join(JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
        replies += member.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        new_id = self.new_member_id(request.group_instance_id)
        old_metadata = member.metadata(self.protocol)
        member.member_id = new_id
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.protocols = request.protocols
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        self.members[new_id] = member
        self.static_members[request.group_instance_id] = new_id
        was_leader = self.leader == old_id
        if was_leader:
            self.leader = new_id
        unchanged = member.metadata(self.protocol) == old_metadata
        if self.state is State.STABLE and unchanged and not was_leader:
            # KIP-345: a restarted static member takes its old place without a rebalance;
            # its SyncGroup returns the assignment it had.
            self.persist(self)
            return [*replies, JoinReply(ticket, self._join_result(member, for_leader=False))]
        member.join_ticket = ticket
        return replies + self._prepare_rebalance(now_ms) + self._maybe_complete_join(now_ms)

    def _join_known(self, request: JoinRequest, now_ms: int, ticket: int) -> Replies:
        member = self.check_member(request.member_id, request.group_instance_id)
        changed = member.protocols != request.protocols
        member.protocols = request.protocols
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if self.state is State.PREPARING_REBALANCE:
            # a retried join replaces the first, which is answered now
            replies = member.answer_join(JoinResult(ErrorCode.rebalance_in_progress))
            member.join_ticket = ticket
            return replies + self._maybe_complete_join(now_ms)
        leader_rejoins = self.state is State.STABLE and member.member_id == self.leader
        if changed or leader_rejoins:
            # The leader rejoining a stable group means it wants a new assignment (for
            # instance, its subscription's topics changed).
            member.join_ticket = ticket
            return self._prepare_rebalance(now_ms) + self._maybe_complete_join(now_ms)
        # Nothing changed: the member lost our previous answer; give it again.
        for_leader = member.member_id == self.leader
        return [JoinReply(ticket, self._join_result(member, for_leader=for_leader))]

    def _join_result(self, member: Member, *, for_leader: bool) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if for_leader:
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata(self.protocol))
                for m in self.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol=self.protocol,
            leader=self.leader or "",
            member_id=member.member_id,
            members=members,
        )

    # --- the barrier -------------------------------------------------------------------

    def _prepare_rebalance(self, now_ms: int) -> Replies:
        if self.state is State.PREPARING_REBALANCE:
            return []
        replies: Replies = []
        if self.state is State.COMPLETING_REBALANCE:
            replies = self._fail_pending_syncs(ErrorCode.rebalance_in_progress)
        was_empty = self.state is State.EMPTY
        self._transition(State.PREPARING_REBALANCE, now_ms)
        rebalance_timeout_ms = max(
            (m.rebalance_timeout_ms for m in self.members.values()), default=0
        )
        delay_ms = self.settings.initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            self.delayed_join = _DelayedJoin(max(rebalance_timeout_ms - delay_ms, 0))
            self.join_deadline_ms = now_ms + delay_ms
        else:
            self.join_deadline_ms = now_ms + rebalance_timeout_ms
        return replies

    def _fail_pending_syncs(self, error: ErrorCode) -> Replies:
        return _flatten(m.answer_sync(SyncResult(error)) for m in self.members.values())

    def _all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_ticket is not None for m in self.members.values()
        )

    def _maybe_complete_join(self, now_ms: int) -> Replies:
        if (
            self.state is State.PREPARING_REBALANCE
            and self.delayed_join is None
            and self._all_joined()
        ):
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> Replies:
        replies = _flatten(
            self._drop(m) for m in list(self.members.values()) if m.join_ticket is None
        )
        self.join_deadline_ms = None
        self.delayed_join = None
        self.generation += 1
        if not self.members:
            self.protocol = None
            self.leader = None
            self._transition(State.EMPTY, now_ms)
            self.persist(self)
            return replies
        self.protocol = self._select_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._transition(State.COMPLETING_REBALANCE, now_ms)
        for member in self.members.values():
            assert member.join_ticket is not None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            for_leader = member.member_id == self.leader
            replies += member.answer_join(self._join_result(member, for_leader=for_leader))
        return replies

    def _select_protocol(self) -> str:
        candidates = self._candidates()
        assert candidates, "members were admitted only with a protocol in common"
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # max() keeps the first of equal counts: the leader's or first member's preference
        return max(votes, key=lambda name: votes[name])

    def _drop(self, member: Member) -> Replies:
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        replies = member.answer_join(
            JoinResult(ErrorCode.unknown_member_id, member_id=member.member_id)
        )
        return replies + member.answer_sync(SyncResult(ErrorCode.unknown_member_id))

    def _remove_member(self, member: Member, now_ms: int) -> Replies:
        replies = self._drop(member)
        if self.state in (State.STABLE, State.COMPLETING_REBALANCE):
            replies += self._prepare_rebalance(now_ms)
        return replies + self._maybe_complete_join(now_ms)

    # --- SyncGroup ---------------------------------------------------------------------

    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol: str | None,
        assignments: Sequence[tuple[str, bytes]],
        now_ms: int,
        ticket: int,
    ) -> Replies:
        """Handle the SyncGroup holding `ticket`: the replies it produced, its own among
        them when it is answered now (in Stable, or from the leader); a follower's waits
        for the leader's. Refusals are raised as GroupError."""
        self._check_alive()
        member = self.check_member(member_id, instance_id)
        if generation != self.generation:
            raise GroupError(
                ErrorCode.illegal_generation,
                f"generation {generation} is not the group's ({self.generation})",
            )
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol is not None and protocol != self.protocol
        ):
            raise GroupError(ErrorCode.inconsistent_group_protocol, "protocol mismatch")
        if self.state is State.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is State.STABLE:
            return [SyncReply(ticket, self._sync_result(member))]
        assert self.state is State.COMPLETING_REBALANCE, self.state
        # a retried sync replaces the first, which is answered now
        replies = member.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_ticket = ticket
        if member_id != self.leader:
            return replies
        given = dict(assignments)
        for each in self.members.values():
            each.assignment = given.get(each.member_id, b"")
        self._transition(State.STABLE, now_ms)
        self.persist(self)
        return replies + _flatten(
            each.answer_sync(self._sync_result(each)) for each in self.members.values()
        )

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, self.protocol_type, self.protocol, member.assignment)

    # --- Heartbeat and LeaveGroup ------------------------------------------------------

    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        """The heartbeat's answer: none, or REBALANCE_IN_PROGRESS (the member must rejoin).
        Refusals are raised as GroupError. A heartbeat only moves a deadline, so it never
        answers a waiting request."""
        self._check_alive()
        if self.state is State.EMPTY:
            raise GroupError(ErrorCode.unknown_member_id, "the group has no members")
        member = self.check_member(member_id, instance_id)
        if generation != self.generation:
            raise GroupError(
                ErrorCode.illegal_generation,
                f"generation {generation} is not the group's ({self.generation})",
            )
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is State.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, members: Sequence[tuple[str, str | None]], now_ms: int) -> LeaveOutcome:
        """LeaveGroup for (member id, instance id) pairs, in order; see `LeaveOutcome`."""
        codes: list[ErrorCode] = []
        replies: Replies = []
        for member_id, instance_id in members:
            code, produced = self._leave_one(member_id, instance_id, now_ms)
            codes.append(code)
            replies += produced
        return LeaveOutcome(tuple(codes), tuple(replies))

    def _leave_one(
        self, member_id: str, instance_id: str | None, now_ms: int
    ) -> tuple[ErrorCode, Replies]:
        if self.state is State.DEAD:
            return ErrorCode.coordinator_not_available, []
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id, []
            if member_id and member_id != known:
                return ErrorCode.fenced_instance_id, []
            member_id = known
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return ErrorCode.none, self._maybe_complete_join(now_ms)
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, []
        return ErrorCode.none, self._remove_member(member, now_ms)

    # --- time --------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Replies:
        """Fire what is due at `now_ms` (the rebalance deadline, session expiries): the
        replies it produced."""
        replies: Replies = []
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[member_id]
                replies += self._maybe_complete_join(now_ms)
        for member in list(self.members.values()):
            if member.member_id in self.members and self._expired(member, now_ms):
                replies += self._remove_member(member, now_ms)
        if self.join_deadline_ms is not None and self.join_deadline_ms <= now_ms:
            replies += self._join_deadline_passed(now_ms)
        return replies

    @staticmethod
    def _expired(member: Member, now_ms: int) -> bool:
        return not member.kept_alive and member.heartbeat_deadline_ms <= now_ms

    def _join_deadline_passed(self, now_ms: int) -> Replies:
        delayed = self.delayed_join
        if delayed is not None and delayed.new_member_added and delayed.remaining_ms > 0:
            step = min(self.settings.initial_rebalance_delay_ms, delayed.remaining_ms)
            delayed.remaining_ms -= step
            delayed.new_member_added = False
            self.join_deadline_ms = now_ms + step
            return []
        return self._complete_join(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.heartbeat_deadline_ms for m in self.members.values() if not m.kept_alive]
        deadlines += self.pending_members.values()
        if self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        return min(deadlines, default=None)

    def abort_waiting(self, error: ErrorCode) -> Replies:
        """Answer every JoinGroup and SyncGroup waiting here with `error` (the broker is
        stopping); the members find the coordinator again and rejoin."""
        replies = _flatten(
            m.answer_join(JoinResult(error, member_id=m.member_id)) for m in self.members.values()
        )
        return replies + self._fail_pending_syncs(error)

    # --- deletion, persistence and views -----------------------------------------------

    def delete(self, now_ms: int) -> None:
        """Mark the group Dead (DeleteGroups, offsets expiry); only an empty group."""
        assert self.is_empty, "only an empty group is deleted"
        self._transition(State.DEAD, now_ms)

    def record(self) -> GroupValue:
        return GroupValue(
            self.protocol_type or "",
            self.generation,
            self.protocol,
            self.leader,
            self.state_timestamp_ms,
            tuple(
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def restore(self, value: GroupValue, now_ms: int) -> None:
        """Take the state a record describes (replay on start). Members get a full session
        timeout from now to heartbeat again, as after a coordinator move in Kafka."""
        self.protocol_type = value.protocol_type or None
        self.generation = value.generation
        self.protocol = value.protocol
        self.leader = value.leader
        self.state_timestamp_ms = value.current_state_timestamp_ms
        self.members.clear()
        self.static_members.clear()
        for m in value.members:
            protocols = ((value.protocol, m.subscription),) if value.protocol else ()
            self.members[m.member_id] = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                value.protocol_type,
                protocols,
                assignment=m.assignment,
                heartbeat_deadline_ms=now_ms + m.session_timeout_ms,
            )
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        self.state = State.STABLE if self.members else State.EMPTY

    def start_rebalance(self, now_ms: int) -> None:
        """Every member must rejoin: a group just rebuilt from a consumer group (an online
        downgrade, see coordinator.py), whose members were assigned by the coordinator
        and now need a leader's assignment. Nobody waits here yet, so nothing is
        answered; members hear REBALANCE_IN_PROGRESS on their next heartbeat."""
        assert self.state is State.STABLE and self.members, "a restored group with members"
        assert not any(m.kept_alive for m in self.members.values()), "nobody waits yet"
        replies = self._prepare_rebalance(now_ms)
        assert not replies, replies
        self.persist(self)

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to; None when the protocol is not "consumer"
        (the subscription is then opaque)."""
        if self.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= consumer_protocol.subscribed_topics(member.metadata(self.protocol))
        return frozenset(topics)

    def owners(self) -> dict[TopicPartition, str]:
        if self.protocol_type != "consumer" or self.state is not State.STABLE:
            return {}
        return {
            tp: m.member_id
            for m in self.members.values()
            for tp in consumer_protocol.assigned_partitions(m.assignment)
        }

    def view(self) -> GroupView:
        consumer = self.protocol_type == "consumer" and self.state is State.STABLE
        return GroupView(
            self.group_id,
            "classic",
            self.state.value,
            self.protocol_type or "",
            self.protocol or "",
            self.generation,
            tuple(
                MemberView(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    consumer_protocol.assigned_partitions(m.assignment) if consumer else (),
                )
                for m in self.members.values()
            ),
        )

    def describe(self) -> ClassicDescription:
        """What DescribeGroups shows. Member metadata and assignments, and the protocol,
        are shown only in Stable, as Kafka does: otherwise they are about to change."""
        stable = self.state is State.STABLE
        return ClassicDescription(
            group_id=self.group_id,
            state=self.state.value,
            protocol_type=self.protocol_type or "",
            protocol=(self.protocol or "") if stable else "",
            members=tuple(
                ClassicMemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata(self.protocol) if stable else b"",
                    assignment=m.assignment if stable else b"",
                )
                for m in self.members.values()
            ),
        )


def _flatten(parts: Iterable[Replies]) -> Replies:
    return [reply for part in parts for reply in part]
