"""The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat) for one group, sans I/O.

There is no barrier here, unlike the classic protocol: members only heartbeat, and the
coordinator computes the assignment. Three epochs drive everything:

    group epoch        bumped when membership, a subscription, the group's assignor, or
                       the metadata of a subscribed topic (existence, id, partition count)
                       changes
    assignment epoch   the group epoch the target assignment was computed for; the target
                       is computed right after each bump, so it lags only inside one call
    member epoch       the target epoch a member has converged to (0 = joining,
                       -2 = a static member away for a while)

Group states, as ConsumerGroupDescribe names them, follow from those epochs (`_derive`).
`TRANSITIONS` is the whole table; a change outside it is a bug, so it is asserted:

    from                  to            when
    Empty                 Assigning     a member joins (the group epoch is bumped)
    Assigning             Reconciling   the target is computed (at once, in the same call)
    Reconciling           Stable        every member has converged to the target
    Stable                Reconciling   a static member leaves for a while (epoch -2)
    Reconciling, Stable   Assigning     the group epoch is bumped again
    Reconciling, Stable   Empty         the last member leaves or expires
    Empty                 Dead          the group is deleted

A group converted from a classic group (`from_classic`) is built, not moved: it starts
Stable, every member at the classic generation with what it was assigned.

Each member converges to its target on its own heartbeats (Kafka's CurrentAssignmentBuilder):

    STABLE ──new target epoch──▶ keeps current ∩ target; if it must give partitions up
                                 ▶ UNREVOKED_PARTITIONS (epoch unchanged, it is sent
                                   current ∩ target and must report the rest gone);
                                 else gets target partitions that nobody else holds,
                                 takes the target epoch, and is STABLE, or
                                 UNRELEASED_PARTITIONS while others still hold some
    UNREVOKED_PARTITIONS ──reports none of the revoked partitions──▶ as above
    UNRELEASED_PARTITIONS ──any heartbeat──▶ picks up what has been released since

A partition belongs to at most one member at any time, counting the partitions a member
still has to revoke; `_holders` indexes that and every update asserts it. So a partition
moves only after its old owner has reported letting it go, and two consumers of the group
never own one partition at the same time.

A member that misses `session_timeout_ms` of heartbeats, or stays in UNREVOKED_PARTITIONS
for its rebalance timeout, is removed by `expire`; `next_deadline_ms` says when to call it.
A static member (instance id) leaving with epoch -2 keeps its partitions reserved for its
session timeout; rejoining with the same instance id (epoch 0, any member id) takes its
place and assignment without a new group epoch unless its subscription changed.

Classic members (KIP-848's online migration). A group converted from a classic group
(`from_classic`), or joined by a classic consumer while it has members, may hold members
that speak the classic protocol. They are assigned and reconciled like the others; only
the way they hear about it differs, since a classic client learns its assignment only
from SyncGroup and reports what it owns only in JoinGroup (subscription v1+; a v0 member
is eager and owns nothing when it rejoins):

    JoinGroup   `classic_join`: the member is created or updated from its subscription
                and reconciled against what it says it owns; answered at once (no
                barrier) with its member epoch as the generation and no leader, so that
                no client computes an assignment
    SyncGroup   `classic_sync`: its assigned partitions, in the consumer protocol format
    Heartbeat   `classic_heartbeat`: REBALANCE_IN_PROGRESS when it must rejoin to move
                on (`_must_rejoin`): its epoch is behind the group's, or partitions it
                waits for were released; never while it has revocations pending (it
                rejoins by itself once it has revoked them). From the first time it is
                told, it has its rebalance timeout to rejoin, or it is removed (Kafka's
                join timeout: a member that keeps heartbeating without ever rejoining
                would otherwise hold its partitions for ever)
    LeaveGroup  `classic_leave`: it goes, as a consumer-protocol member leaving

A classic member's generation is its member epoch (ILLEGAL_GENERATION otherwise, for
commits too); its session timeout is its own, from its JoinGroup. Unlike Kafka, there is
no separate timeout between a classic member's JoinGroup and its SyncGroup: its session
timeout bounds that wait, and its rebalance timeout bounds a rejoin it was told to make.

Simplifications, compared with Kafka: regular expressions are resolved synchronously with
Python's `re.fullmatch` against the topic snapshot each call brings (Kafka resolves RE2J
patterns in the background); topic metadata is compared on every heartbeat rather than on
a refresh interval; a static member rejoining with its own, still active member id is taken
back (Kafka refuses it with UNRELEASED_INSTANCE_ID until its session expires); a static
member taking its own place is not refused by `max_size`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Final, Protocol, TypeVar

from ..errors import ErrorCode
from ..types import TopicPartition
from .assignors import ASSIGNORS
from .classic import ClassicGroup, GroupReply, JoinRequest, JoinResult, SyncResult
from .errors import GroupError
from .protocol import Subscription, assigned_partitions, encode_assignment, parse_subscription
from .records import RecordFormatError
from .views import (
    AssignedTopic,
    ConsumerGroupDescription,
    ConsumerMemberDescription,
    GroupView,
    MemberView,
)

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
"""A member leaving for good."""
STATIC_LEAVE_EPOCH: Final = -2
"""A static member leaving for a while; its partitions wait for it."""
UNCHANGED_REBALANCE_TIMEOUT: Final = -1
"""A heartbeat's rebalance_timeout when it repeats nothing."""
_MEMBER_ID_ATTEMPTS_MAX: Final = 16
CONSUMER_PROTOCOL_TYPE: Final = "consumer"
"""The classic protocol type of Kafka consumers: the only one a consumer group speaks."""

Partition = tuple[uuid.UUID, int]
"""(topic id, partition): ids, not names, so a topic deleted and recreated is a new topic."""
Partitions = frozenset[Partition]


class GroupState(Enum):
    """Kafka's consumer group states; the values are what ConsumerGroupDescribe shows."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(Enum):
    """What may happen to a group; `TRANSITIONS` says in which states."""

    HEARTBEAT = "heartbeat"
    EXPIRE = "expire"
    DELETE = "delete"
    DESCRIBE = "describe"


@dataclass(frozen=True, slots=True)
class _Row:
    accepts: frozenset[GroupEvent]
    leads_to: frozenset[GroupState]


_LIVE: Final = frozenset({GroupEvent.HEARTBEAT, GroupEvent.EXPIRE, GroupEvent.DESCRIBE})

TRANSITIONS: Final[Mapping[GroupState, _Row]] = {
    GroupState.EMPTY: _Row(
        _LIVE | {GroupEvent.DELETE}, frozenset({GroupState.ASSIGNING, GroupState.DEAD})
    ),
    GroupState.ASSIGNING: _Row(_LIVE, frozenset({GroupState.RECONCILING})),
    GroupState.RECONCILING: _Row(
        _LIVE, frozenset({GroupState.ASSIGNING, GroupState.STABLE, GroupState.EMPTY})
    ),
    GroupState.STABLE: _Row(
        _LIVE, frozenset({GroupState.ASSIGNING, GroupState.RECONCILING, GroupState.EMPTY})
    ),
    # A timer may still fire for a deleted group: it finds no member and does nothing.
    GroupState.DEAD: _Row(frozenset({GroupEvent.EXPIRE}), frozenset()),
}
"""Per state: the events it accepts and the states it may move to."""


class MemberState(Enum):
    """Where a member is on its way to its target assignment (module docstring)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol told us in its last JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    """(assignor name, subscription) in the member's order of preference; not empty."""

    @property
    def preferred(self) -> str:
        return self.protocols[0][0]

    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata(self, protocol: str) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the group needs to know of an existing topic."""

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    session_timeout_ms: int = 45_000
    """Kafka's group.consumer.session.timeout.ms."""
    heartbeat_interval_ms: int = 5_000
    """Kafka's group.consumer.heartbeat.interval.ms."""
    max_size: int | None = None
    """Members at most (Kafka's group.consumer.max.size); None: no limit."""
    assignors: tuple[str, ...] = ("uniform", "range")
    """Assignors members may ask for; the first is the default."""

    def __post_init__(self) -> None:
        if self.session_timeout_ms <= 0 or self.heartbeat_interval_ms <= 0:
            raise ValueError("session timeout and heartbeat interval must be positive")
        if self.max_size is not None and self.max_size <= 0:
            raise ValueError(f"max_size must be positive, not {self.max_size}")
        unknown = [name for name in self.assignors if name not in ASSIGNORS]
        if not self.assignors or unknown:
            raise ValueError(f"assignors must name some of {sorted(ASSIGNORS)}: {unknown}")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat v0/v1; None (or -1 for the timeout) means "unchanged"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = UNCHANGED_REBALANCE_TIMEOUT
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    """v1; "" clears it."""
    server_assignor: str | None = None
    topic_partitions: Mapping[uuid.UUID, tuple[int, ...]] | None = None
    """The partitions the member owns now, by topic id."""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """A successful ConsumerGroupHeartbeat answer (errors are raised as GroupError)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[uuid.UUID, tuple[int, ...]] | None
    """The partitions the member may own now; None when unchanged."""
    released: tuple[GroupReply, ...] = ()
    """Answers to waiting classic requests this step gave (an online upgrade answers
    them REBALANCE_IN_PROGRESS); the caller delivers them, as a classic step's replies."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member as the coordinator knows it; replaced, never changed, on each update."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...]
    """Sorted and without duplicates, so a reordering is not a change."""
    subscribed_topic_regex: str | None
    server_assignor: str | None
    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Partitions
    """What the member was told it owns."""
    pending_revocation: Partitions
    """What it must give up and has not yet reported gone; still held by it."""
    session_deadline_ms: int
    rebalance_deadline_ms: int | None
    """Set while in UNREVOKED_PARTITIONS."""
    classic: ClassicMemberMetadata | None = None
    """Set for a member that speaks the classic protocol (module docstring)."""

    @property
    def held(self) -> Partitions:
        return self.assigned | self.pending_revocation

    @property
    def session_timeout_ms(self) -> int | None:
        """The member's own session timeout (classic members); None: the group's."""
        return None if self.classic is None else self.classic.session_timeout_ms


def _random_member_id() -> str:
    return str(uuid.uuid4())


def invalid_request(message: str) -> GroupError:
    """INVALID_REQUEST with `message` (share.py uses it too)."""
    return GroupError(ErrorCode.invalid_request, message)


class ConsumerGroup:
    """One KIP-848 consumer group. Not thread-safe: the coordinator serialises calls."""

    def __init__(
        self,
        group_id: str,
        *,
        settings: ConsumerGroupSettings | None = None,
        new_member_id: Callable[[], str] = _random_member_id,
        persist: Callable[[ConsumerGroup], None] | None = None,
    ) -> None:
        self._group_id = group_id
        self._settings = settings or ConsumerGroupSettings()
        self._new_member_id = new_member_id
        self._persist = persist
        """Called after each group epoch bump: the coordinator records the epoch."""
        self._state = GroupState.EMPTY
        self._group_epoch = 0
        self._assignment_epoch = 0
        self._assignor = self._settings.assignors[0]
        self._members: dict[str, ConsumerGroupMember] = {}
        self._static: dict[str, str] = {}
        """Instance id -> member id."""
        self._holders: dict[Partition, str] = {}
        """Partition -> the member that holds it (assigned or pending revocation)."""
        self._target: dict[str, Partitions] = {}
        self._subscribed: dict[str, TopicInfo] = {}
        """The subscribed topics that exist: a change bumps the group epoch."""
        self._topics: dict[str, TopicInfo] = {}
        """The latest topic snapshot, for calls that bring none (expiry, describe)."""
        self._regex_matches: dict[str, frozenset[str]] = {}
        """Per regex, the topics of `_topics` it matches; cleared when they change."""

    # -- reading -------------------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def group_epoch(self) -> int:
        return self._group_epoch

    @property
    def settings(self) -> ConsumerGroupSettings:
        return self._settings

    def configure(self, settings: ConsumerGroupSettings) -> None:
        """New session timeout or heartbeat interval (the group's configs changed): they
        apply from each member's next heartbeat, whose deadline they set."""
        self._settings = settings

    @property
    def assignment_epoch(self) -> int:
        return self._assignment_epoch

    @property
    def assignor_name(self) -> str:
        return self._assignor

    @property
    def is_empty(self) -> bool:
        return not self._members

    @property
    def members(self) -> tuple[ConsumerGroupMember, ...]:
        return tuple(self._members[member_id] for member_id in sorted(self._members))

    def member(self, member_id: str) -> ConsumerGroupMember | None:
        return self._members.get(member_id)

    def target(self, member_id: str) -> Partitions:
        """The member's target assignment (empty for an unknown member)."""
        return self._target.get(member_id, frozenset())

    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to do; None when there is no member."""
        deadlines = [m.session_deadline_ms for m in self._members.values()]
        deadlines += [
            m.rebalance_deadline_ms
            for m in self._members.values()
            if m.rebalance_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    def validate_commit(self, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit v9+ from a member: its id must be known and its epoch current (a
        classic member's generation is its epoch: ILLEGAL_GENERATION, as Kafka)."""
        member = self._members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            if member.classic is not None:
                return ErrorCode.illegal_generation
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def uses_classic_only(self, leaving: Iterable[str] = ()) -> bool:
        """Whether members remain once `leaving` have gone, all speaking the classic
        protocol (the condition of an online downgrade)."""
        gone = set(leaving)
        rest = [m for m in self._members.values() if m.member_id not in gone]
        return bool(rest) and all(m.classic is not None for m in rest)

    def expiring(self, now_ms: int) -> list[str]:
        """The members `expire(now_ms)` would remove, sorted."""
        return sorted(m.member_id for m in self._members.values() if _is_expired(m, now_ms))

    def validate_fetch(self, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member; same rules as a commit. A request from outside
        the group (member epoch -1, no member id) is not checked: the caller skips it."""
        return self.validate_commit(member_id, member_epoch)

    def view(self) -> GroupView:
        names = self._topic_names()
        return GroupView(
            group_id=self._group_id,
            kind="consumer",
            state=self._state.value,
            protocol_type="consumer",
            protocol=self._assignor,
            generation=self._group_epoch,
            members=tuple(
                MemberView(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    # Partitions pending revocation are still being consumed.
                    assignment=assigned_by_name(m.held, names),
                )
                for m in self.members
            ),
        )

    def describe(self, topics: Mapping[str, TopicInfo] | None = None) -> ConsumerGroupDescription:
        """The group for ConsumerGroupDescribe; topic ids are named from `topics` (or the
        last snapshot), and partitions of topics that no longer exist are left out, as
        Kafka does. A Dead group is refused with GROUP_ID_NOT_FOUND."""
        self._require(GroupEvent.DESCRIBE)
        if topics is not None:
            self._observe_topics(topics)
        names = self._topic_names()
        return ConsumerGroupDescription(
            group_id=self._group_id,
            state=self._state.value,
            group_epoch=self._group_epoch,
            assignment_epoch=self._assignment_epoch,
            assignor=self._assignor,
            members=tuple(
                ConsumerMemberDescription(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=assigned_topics(m.assigned, names),
                    target_assignment=assigned_topics(self.target(m.member_id), names),
                    classic=m.classic is not None,
                )
                for m in self.members
            ),
        )

    # -- events --------------------------------------------------------------------------

    def heartbeat(
        self,
        request: HeartbeatRequest,
        *,
        topics: Mapping[str, TopicInfo],
        now_ms: int,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResponse:
        """Join, heartbeat or leave. Raises GroupError with the code to answer."""
        self._require(GroupEvent.HEARTBEAT)
        self._check_request(request)
        self._observe_topics(topics)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request, now_ms)

        owned = _partitions(request.topic_partitions)
        member, replaced_id, is_new = self._find_or_create(request, owned)
        if member.classic is not None:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"Member {member.member_id} uses the classic protocol.",
            )
        updated = self._apply(member, request, now_ms, client_id, client_host)
        reconciled = self._upsert(member, updated, replaced_id, is_new, owned, now_ms)

        lost_response = JOIN_EPOCH < request.member_epoch < member.member_epoch
        full_request = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != UNCHANGED_REBALANCE_TIMEOUT
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and owned is not None
        )
        send = full_request or lost_response or reconciled.assigned != member.assigned
        return HeartbeatResponse(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._settings.heartbeat_interval_ms,
            assignment=assigned_by_topic_id(reconciled.assigned) if send else None,
        )

    def _upsert(
        self,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        replaced_id: str | None,
        is_new: bool,
        owned: Partitions | None,
        now_ms: int,
    ) -> ConsumerGroupMember:
        """Store `updated` (the request applied to `member`), bump the group epoch if
        that changed the group, assign, and take the member one step towards its target;
        the member as it ends up."""
        bump = is_new or _subscription(member) != _subscription(updated)
        self._put(updated, replacing=replaced_id)
        # Not short-circuited: _refresh also records the new metadata and assignor.
        bump = self._refresh() or bump
        if bump:
            self._bump_group_epoch()
        if self._group_epoch > self._assignment_epoch:
            self._assign()
        reconciled = self._reconcile(updated, owned, now_ms)
        self._put(reconciled)
        self._settle()
        return reconciled

    # -- classic members (module docstring) ----------------------------------------------

    def classic_join(
        self, request: JoinRequest, *, topics: Mapping[str, TopicInfo], now_ms: int
    ) -> JoinResult:
        """JoinGroup from a classic member: answered at once. Raises GroupError."""
        self._require(GroupEvent.HEARTBEAT)
        self._observe_topics(topics)
        subscription = self._check_classic_join(request)
        member_id = request.member_id
        if not member_id:
            member_id = self._fresh_member_id()
            if request.group_instance_id is None and request.require_known_member_id:
                # KIP-394, as in a classic group; the id is not reserved (Kafka's neither).
                self._check_room()
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        beat = HeartbeatRequest(
            group_id=self._group_id,
            member_id=member_id,
            member_epoch=JOIN_EPOCH,
            instance_id=request.group_instance_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics,
        )
        member, replaced_id, is_new = self._find_classic(request, member_id)
        classic = ClassicMemberMetadata(request.session_timeout_ms, request.protocols)
        updated = replace(
            self._apply(member, beat, now_ms, request.client_id, request.client_host),
            classic=classic,
            session_deadline_ms=now_ms + classic.session_timeout_ms,
            rebalance_deadline_ms=None,  # it rejoined; reconciling may set a new one
        )
        ids = {name: info.topic_id for name, info in self._topics.items()}
        owned = frozenset((ids[t], p) for t, p in subscription.owned if t in ids)
        reconciled = self._upsert(member, updated, replaced_id, is_new, owned, now_ms)
        return JoinResult(
            ErrorCode.none,
            generation=reconciled.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol=classic.preferred,
            leader="",  # nobody leads: the coordinator assigns
            member_id=reconciled.member_id,
        )

    def _check_classic_join(self, request: JoinRequest) -> Subscription:
        """The member's subscription, once its protocols fit the group's classic members
        (INCONSISTENT_GROUP_PROTOCOL otherwise, as Kafka)."""
        names = frozenset(name for name, _ in request.protocols)
        shared = frozenset[str](names)
        for m in self._members.values():
            if m.classic is not None and m.member_id != request.member_id:
                shared &= m.classic.names()
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not shared:
            raise GroupError(
                ErrorCode.inconsistent_group_protocol,
                f"Member {request.member_id}'s protocols are not supported.",
            )
        try:
            return parse_subscription(request.protocols[0][1])
        except RecordFormatError:
            raise GroupError(
                ErrorCode.inconsistent_group_protocol,
                f"Member {request.member_id}'s subscription is malformed.",
            ) from None

    def _find_classic(
        self, request: JoinRequest, member_id: str
    ) -> tuple[ConsumerGroupMember, str | None, bool]:
        """As `_find_or_create`, for a JoinGroup: a static member rejoining without its
        member id takes its own place at once (the classic protocol's rule)."""
        instance_id = request.group_instance_id
        existing = self._members.get(self._static.get(instance_id or "", ""))
        if existing is not None and existing.member_id != member_id:
            if request.member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {instance_id} belongs to member {existing.member_id}.",
                )
            if member_id in self._members:
                raise invalid_request(f"MemberId {member_id} is already used.")
            return _static_replacement(existing, member_id), existing.member_id, False
        known = self._members.get(member_id)
        if known is not None:
            if known.classic is None:
                raise GroupError(
                    ErrorCode.unknown_member_id,
                    f"Member {member_id} does not use the classic protocol.",
                )
            return known, None, False
        return self._new_member(member_id), None, True

    def classic_sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol: str | None,
        now_ms: int,
    ) -> SyncResult:
        """SyncGroup from a classic member: its assignment. Raises GroupError."""
        self._require(GroupEvent.HEARTBEAT)
        member = self._classic_member(member_id, instance_id, generation)
        assert member.classic is not None
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol is not None and protocol not in member.classic.names()
        ):
            raise GroupError(ErrorCode.inconsistent_group_protocol, "protocol mismatch")
        if self._told_to_rejoin(member, now_ms):
            raise GroupError(ErrorCode.rebalance_in_progress)
        assignment = encode_assignment(assigned_by_name(member.assigned, self._topic_names()))
        return SyncResult(
            ErrorCode.none, CONSUMER_PROTOCOL_TYPE, protocol or member.classic.preferred, assignment
        )

    def classic_heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        """Heartbeat from a classic member: none, or REBALANCE_IN_PROGRESS when it must
        rejoin. Raises GroupError."""
        self._require(GroupEvent.HEARTBEAT)
        member = self._classic_member(member_id, instance_id, generation)
        rejoin = self._told_to_rejoin(member, now_ms)
        return ErrorCode.rebalance_in_progress if rejoin else ErrorCode.none

    def _told_to_rejoin(self, member: ConsumerGroupMember, now_ms: int) -> bool:
        """A classic member was heard from: its session goes on; whether it must rejoin
        (then its rebalance timeout runs from the first time it is told)."""
        assert member.classic is not None
        rejoin = self._must_rejoin(member)
        deadline_ms = member.rebalance_deadline_ms
        if rejoin and deadline_ms is None:
            deadline_ms = now_ms + member.rebalance_timeout_ms
        session_deadline_ms = now_ms + member.classic.session_timeout_ms
        self._put(
            replace(
                member,
                session_deadline_ms=session_deadline_ms,
                rebalance_deadline_ms=deadline_ms,
            )
        )
        return rejoin

    def classic_leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """LeaveGroup for one classic member: its answer (none when it left)."""
        if instance_id is not None:
            known = self._static.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != known:
                return ErrorCode.fenced_instance_id
            member_id = known
        member = self._members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.unknown_member_id
        self._remove([member_id])
        return ErrorCode.none

    def _classic_member(
        self, member_id: str, instance_id: str | None, generation: int
    ) -> ConsumerGroupMember:
        if instance_id is not None:
            known = self._static.get(instance_id)
            if known is not None and known != member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {instance_id} belongs to member {known}.",
                )
        member = self._members.get(member_id)
        if member is None or member.classic is None:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a classic member of the group.",
            )
        if generation != member.member_epoch:
            raise GroupError(
                ErrorCode.illegal_generation,
                f"Generation {generation} is not member {member_id}'s ({member.member_epoch}).",
            )
        return member

    def _must_rejoin(self, member: ConsumerGroupMember) -> bool:
        """Whether a classic member has to rejoin to move on (module docstring)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            return False  # it was told what to give up, and rejoins once it has
        if self._group_epoch > member.member_epoch:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            waiting = self.target(member.member_id) - member.assigned
            return any(p not in self._holders for p in waiting)
        return False

    def _check_room(self) -> None:
        max_size = self._settings.max_size
        if max_size is not None and len(self._members) >= max_size:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {max_size} members.",
            )

    # -- conversions ---------------------------------------------------------------------

    @classmethod
    def from_classic(
        cls,
        classic: ClassicGroup,
        *,
        settings: ConsumerGroupSettings,
        topics: Mapping[str, TopicInfo],
        now_ms: int,
        persist: Callable[[ConsumerGroup], None] | None = None,
    ) -> ConsumerGroup:
        """A consumer group holding the members of a classic group of Kafka consumers (an
        online upgrade): each keeps what it was assigned, which is also its target, at
        the classic generation, which becomes the group epoch; so the group starts
        Stable, and the member that triggered the upgrade bumps the epoch as it joins.
        Raises RecordFormatError when a member's subscription does not parse."""
        group = cls(classic.group_id, settings=settings, persist=persist)
        group._observe_topics(topics)
        ids = {name: info.topic_id for name, info in topics.items()}
        epoch = classic.generation
        group._group_epoch = group._assignment_epoch = epoch
        for m in classic.members.values():
            protocol = classic.protocol or m.protocols[0][0]
            subscription = parse_subscription(m.metadata(protocol))
            assigned = frozenset(
                (ids[t], p)
                for t, p in assigned_partitions(m.assignment)
                if t in ids and (ids[t], p) not in group._holders  # first claim wins
            )
            group._put(
                ConsumerGroupMember(
                    member_id=m.member_id,
                    instance_id=m.group_instance_id,
                    rack_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    subscribed_topic_names=subscription.topics,
                    subscribed_topic_regex=None,
                    server_assignor=None,
                    state=MemberState.STABLE,
                    member_epoch=epoch,
                    previous_member_epoch=epoch,
                    assigned=assigned,
                    pending_revocation=frozenset(),
                    session_deadline_ms=now_ms + m.session_timeout_ms,
                    rebalance_deadline_ms=None,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
                )
            )
            group._target[m.member_id] = assigned
        group._refresh()
        # Built, not moved: the group starts in the state its members put it in.
        group._state = group._derive()
        return group

    def on_epoch_bump(self, persist: Callable[[ConsumerGroup], None]) -> None:
        """From now on, call `persist` after each group epoch bump (a converted group,
        once the coordinator keeps it)."""
        self._persist = persist

    def restore_epoch(self, epoch: int) -> None:
        """The group epoch a record of the log says (replay): the group is empty, and its
        members rejoin with higher epochs."""
        assert self.is_empty, "only an empty group is restored"
        self._group_epoch = self._assignment_epoch = epoch

    def expire(self, now_ms: int) -> list[str]:
        """Remove members past their session or rebalance deadline; their ids, sorted."""
        self._require(GroupEvent.EXPIRE)
        expired = self.expiring(now_ms)
        if expired:
            self._remove(expired)
        return expired

    def delete(self) -> None:
        """Kafka's DeleteGroups: only an Empty group may go (NON_EMPTY_GROUP otherwise)."""
        self._require(GroupEvent.DELETE)
        self._move(GroupState.DEAD)

    # -- the request ---------------------------------------------------------------------

    def _check_request(self, request: HeartbeatRequest) -> None:
        """Kafka's own request checks, in its order, before anything changes."""
        if not request.group_id:
            raise invalid_request("GroupId can't be empty.")
        assert request.group_id == self._group_id, "the coordinator routes by group id"
        epoch = request.member_epoch
        if request.instance_id == "":
            raise invalid_request("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid_request("RackId can't be empty.")
        if epoch < STATIC_LEAVE_EPOCH:
            raise invalid_request(f"MemberEpoch {epoch} is invalid.")
        if epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            raise invalid_request("InstanceId can't be null when MemberEpoch is -2.")
        if epoch != JOIN_EPOCH and not request.member_id:
            raise invalid_request("MemberId can't be empty.")
        if request.rebalance_timeout_ms < UNCHANGED_REBALANCE_TIMEOUT:
            raise invalid_request("RebalanceTimeoutMs can't be negative.")
        if epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == UNCHANGED_REBALANCE_TIMEOUT:
                raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions:
                raise invalid_request("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid_request(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        assignor = request.server_assignor
        if assignor is not None and assignor not in self._settings.assignors:
            raise GroupError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {assignor} is not supported. "
                f"Supported assignors: {', '.join(self._settings.assignors)}.",
            )
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise GroupError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex {request.subscribed_topic_regex!r} is invalid: {exc}",
                ) from None

    def _find_or_create(
        self, request: HeartbeatRequest, owned: Partitions | None
    ) -> tuple[ConsumerGroupMember, str | None, bool]:
        """The member the request is from: (member, id of the static member it replaces,
        whether it is new). Raises the fencing errors."""
        if request.instance_id is not None:
            return self._find_or_create_static(request, request.instance_id, owned)
        if request.member_epoch == JOIN_EPOCH:
            member_id = request.member_id or self._fresh_member_id()
            existing = self._members.get(member_id)
            if existing is not None:
                return existing, None, False
            return self._new_member(member_id), None, True
        existing = self._members.get(request.member_id)
        if existing is None:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Member {request.member_id} is not in the group."
            )
        _check_epoch(existing, request.member_epoch, owned)
        return existing, None, False

    def _find_or_create_static(
        self, request: HeartbeatRequest, instance_id: str, owned: Partitions | None
    ) -> tuple[ConsumerGroupMember, str | None, bool]:
        existing = self._members.get(self._static.get(instance_id, ""))
        if request.member_epoch != JOIN_EPOCH:
            if existing is None:
                raise GroupError(
                    ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown."
                )
            if existing.member_id != request.member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {instance_id} belongs to member {existing.member_id}.",
                )
            _check_epoch(existing, request.member_epoch, owned)
            return existing, None, False
        if existing is None:
            member_id = request.member_id or self._fresh_member_id()
            known = self._members.get(member_id)
            if known is not None:
                return known, None, False
            return self._new_member(member_id), None, True
        if existing.member_id == request.member_id:
            return existing, None, False
        if existing.member_epoch != STATIC_LEAVE_EPOCH:
            raise GroupError(
                ErrorCode.unreleased_instance_id,
                f"Instance id {instance_id} is still used by member {existing.member_id}.",
            )
        member_id = request.member_id or self._fresh_member_id()
        if member_id in self._members:
            raise invalid_request(f"MemberId {member_id} is already used by another member.")
        return _static_replacement(existing, member_id), existing.member_id, False

    def _new_member(self, member_id: str) -> ConsumerGroupMember:
        self._check_room()
        return ConsumerGroupMember(
            member_id=member_id,
            instance_id=None,
            rack_id=None,
            client_id="",
            client_host="",
            rebalance_timeout_ms=0,
            subscribed_topic_names=(),
            subscribed_topic_regex=None,
            server_assignor=None,
            state=MemberState.STABLE,
            member_epoch=JOIN_EPOCH,
            previous_member_epoch=JOIN_EPOCH,
            assigned=frozenset(),
            pending_revocation=frozenset(),
            session_deadline_ms=0,
            rebalance_deadline_ms=None,
        )

    def _fresh_member_id(self) -> str:
        for _ in range(_MEMBER_ID_ATTEMPTS_MAX):
            member_id = self._new_member_id()
            if member_id and member_id not in self._members:
                return member_id
        raise AssertionError("new_member_id keeps returning ids already in use")

    def _apply(
        self,
        member: ConsumerGroupMember,
        request: HeartbeatRequest,
        now_ms: int,
        client_id: str,
        client_host: str,
    ) -> ConsumerGroupMember:
        """The member with what the request changes, and a new session deadline."""
        names = request.subscribed_topic_names
        regex = member.subscribed_topic_regex
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None  # "" clears it
        timeout_ms = request.rebalance_timeout_ms
        return replace(
            member,
            instance_id=_or(request.instance_id, member.instance_id),
            rack_id=_or(request.rack_id, member.rack_id),
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=(
                member.rebalance_timeout_ms
                if timeout_ms == UNCHANGED_REBALANCE_TIMEOUT
                else timeout_ms
            ),
            subscribed_topic_names=(
                member.subscribed_topic_names if names is None else tuple(sorted(set(names)))
            ),
            subscribed_topic_regex=regex,
            server_assignor=_or(request.server_assignor, member.server_assignor),
            session_deadline_ms=now_ms
            + (member.session_timeout_ms or self._settings.session_timeout_ms),
        )

    def _leave(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        if request.instance_id is None:
            member = self._members.get(request.member_id)
            if member is None or member.classic is not None:
                raise GroupError(
                    ErrorCode.unknown_member_id, f"Member {request.member_id} is not in the group."
                )
        else:
            member = self._members.get(self._static.get(request.instance_id, ""))
            if member is None:
                raise GroupError(
                    ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
                )
            if member.member_id != request.member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {request.instance_id} belongs to member {member.member_id}.",
                )
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            # The client gave everything up on leaving: only what it was assigned stays
            # reserved, for a session timeout.
            away = replace(
                member,
                state=MemberState.STABLE,
                member_epoch=STATIC_LEAVE_EPOCH,
                pending_revocation=frozenset(),
                session_deadline_ms=now_ms + self._settings.session_timeout_ms,
                rebalance_deadline_ms=None,
            )
            self._put(away)
            self._settle()
        else:
            self._remove([member.member_id])
        return HeartbeatResponse(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=0,
            assignment=None,
        )

    # -- convergence ---------------------------------------------------------------------

    def _reconcile(
        self, member: ConsumerGroupMember, owned: Partitions | None, now_ms: int
    ) -> ConsumerGroupMember:
        """One step of the member towards its target (see the module docstring)."""
        if member.state is MemberState.STABLE and member.member_epoch == self._assignment_epoch:
            return member
        if member.state is MemberState.UNREVOKED_PARTITIONS and _owns_any(
            owned, member.pending_revocation
        ):
            return member
        target = self.target(member.member_id)
        assigned = member.assigned & target
        revoking = member.assigned - assigned
        wanted = target - assigned
        mine = member.member_id
        free = frozenset(p for p in wanted if self._holders.get(p, mine) == mine)
        if revoking and _owns_any(owned, revoking):
            moved = replace(
                member,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned=assigned,
                pending_revocation=revoking,
            )
        else:
            moved = _with_epoch(
                replace(
                    member,
                    state=(
                        MemberState.UNRELEASED_PARTITIONS if wanted - free else MemberState.STABLE
                    ),
                    assigned=assigned | free,
                    pending_revocation=frozenset(),
                ),
                self._assignment_epoch,
            )
        if moved == member:
            return member
        # The rebalance timeout runs from the latest request to revoke.
        unrevoked = moved.state is MemberState.UNREVOKED_PARTITIONS
        deadline_ms = now_ms + moved.rebalance_timeout_ms if unrevoked else None
        return replace(moved, rebalance_deadline_ms=deadline_ms)

    def _refresh(self) -> bool:
        """Recompute the subscribed topics' metadata and the group's assignor; whether
        either changed (which bumps the group epoch)."""
        subscribed = set[str]()
        for member in self._members.values():
            subscribed |= self._resolve(member)
        metadata = {name: self._topics[name] for name in sorted(subscribed)}
        assignor = self._preferred_assignor()
        changed = metadata != self._subscribed or assignor != self._assignor
        self._subscribed = metadata
        self._assignor = assignor
        return changed

    def _preferred_assignor(self) -> str:
        """The assignor most members ask for (ties: settings order); else the default."""
        votes = [m.server_assignor for m in self._members.values() if m.server_assignor]
        if not votes:
            return self._settings.assignors[0]
        order = self._settings.assignors
        return max(order, key=lambda name: (votes.count(name), -order.index(name)))

    def subscribed_topics(self) -> frozenset[str]:
        """The existing topics some member subscribes to (OffsetDelete refuses those)."""
        topics: set[str] = set()
        for member in self._members.values():
            topics |= self._resolve(member)
        return frozenset(topics)

    def _resolve(self, member: ConsumerGroupMember) -> frozenset[str]:
        """The existing topics a member subscribes to, by name or by regex."""
        names = frozenset(n for n in member.subscribed_topic_names if n in self._topics)
        regex = member.subscribed_topic_regex
        if not regex:
            return names
        matches = self._regex_matches.get(regex)
        if matches is None:
            pattern = re.compile(regex)
            matches = frozenset(name for name in self._topics if pattern.fullmatch(name))
            self._regex_matches[regex] = matches
        return names | matches

    def _assign(self) -> None:
        """Compute the target assignment for the current group epoch."""
        ids = {info.topic_id: name for name, info in self._subscribed.items()}
        current = {
            member_id: frozenset(TopicPartition(ids[t], p) for t, p in target if t in ids)
            for member_id, target in self._target.items()
        }
        by_name = ASSIGNORS[self._assignor](
            {member_id: self._resolve(m) for member_id, m in self._members.items()},
            {name: info.partitions for name, info in self._subscribed.items()},
            current,
        )
        target = {
            member_id: frozenset((self._subscribed[t].topic_id, p) for t, p in tps)
            for member_id, tps in by_name.items()
        }
        assert target.keys() == self._members.keys(), "one target per member"
        total = sum(len(tps) for tps in target.values())
        distinct = frozenset[Partition]().union(*target.values())
        assert len(distinct) == total, "a partition in two members' targets"
        self._target = target
        self._assignment_epoch = self._group_epoch
        self._settle()

    # -- bookkeeping ---------------------------------------------------------------------

    def _observe_topics(self, topics: Mapping[str, TopicInfo]) -> None:
        if topics != self._topics:
            self._topics = dict(topics)
            self._regex_matches.clear()

    def _put(self, member: ConsumerGroupMember, *, replacing: str | None = None) -> None:
        """Store a member (instead of `replacing`, a static member's old id)."""
        old = self._members.pop(replacing if replacing is not None else member.member_id, None)
        if old is not None:
            self._release(old)
        for partition in member.held:
            holder = self._holders.setdefault(partition, member.member_id)
            assert holder == member.member_id, (
                f"{partition} held by {holder} and {member.member_id}"
            )
        self._members[member.member_id] = member
        if member.instance_id is not None:
            self._static[member.instance_id] = member.member_id
        if replacing is not None:
            self._target[member.member_id] = self._target.pop(replacing, frozenset())

    def _release(self, member: ConsumerGroupMember) -> None:
        for partition in member.held:
            holder = self._holders.pop(partition)
            assert holder == member.member_id, f"{partition} held by {holder}, not {member}"
        instance_id = member.instance_id
        if instance_id is not None and self._static.get(instance_id) == member.member_id:
            del self._static[instance_id]

    def _remove(self, member_ids: Iterable[str]) -> None:
        """Members leave (or are fenced): their partitions are free; a new epoch follows."""
        for member_id in member_ids:
            self._release(self._members.pop(member_id))
            self._target.pop(member_id, None)
        self._refresh()
        self._bump_group_epoch()
        self._assign()
        self._settle()

    def _bump_group_epoch(self) -> None:
        self._group_epoch += 1
        self._settle()
        if self._persist is not None:
            self._persist(self)

    def _derive(self) -> GroupState:
        """Kafka's rule: no member, target behind, someone behind the target, or none."""
        if not self._members:
            return GroupState.EMPTY
        if self._group_epoch > self._assignment_epoch:
            return GroupState.ASSIGNING
        epoch = self._assignment_epoch
        if any(
            m.state is not MemberState.STABLE or m.member_epoch != epoch
            for m in self._members.values()
        ):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def _settle(self) -> None:
        self._move(self._derive())

    def _move(self, state: GroupState) -> None:
        self._state = checked_move(TRANSITIONS, self._group_id, self._state, state)

    def _require(self, event: GroupEvent) -> None:
        require_event(TRANSITIONS, self._group_id, self._state, event, GroupState.DEAD)

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return topic_names(self._topics)


def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Partitions | None) -> None:
    """Kafka's fencing rule. The previous epoch is still accepted from a member that owns
    no more than it was given: the response that moved it on was lost."""
    if epoch > member.member_epoch:
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The member epoch {epoch} is greater than the group's {member.member_epoch}.",
        )
    if epoch < member.member_epoch and (
        epoch != member.previous_member_epoch or owned is None or not owned <= member.assigned
    ):
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The member epoch {epoch} is smaller than the group's {member.member_epoch}.",
        )


def _is_expired(member: ConsumerGroupMember, now_ms: int) -> bool:
    if now_ms >= member.session_deadline_ms:
        return True
    deadline_ms = member.rebalance_deadline_ms
    return deadline_ms is not None and now_ms >= deadline_ms


def _with_epoch(member: ConsumerGroupMember, epoch: int) -> ConsumerGroupMember:
    if epoch == member.member_epoch:
        return member
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch)


def _subscription(member: ConsumerGroupMember) -> tuple[tuple[str, ...], str | None]:
    return member.subscribed_topic_names, member.subscribed_topic_regex


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Whether the member still reports owning any of `partitions`. A heartbeat without
    owned partitions proves nothing, so it counts as still owning them."""
    return owned is None or not owned.isdisjoint(partitions)


def _or(value: str | None, default: str | None) -> str | None:
    return default if value is None else value


def _partitions(by_topic: Mapping[uuid.UUID, tuple[int, ...]] | None) -> Partitions | None:
    if by_topic is None:
        return None
    return frozenset((topic_id, p) for topic_id, ps in by_topic.items() for p in ps)


StateT = TypeVar("StateT", bound=Enum)


class _TableRow(Protocol):
    @property
    def accepts(self) -> frozenset[Any]: ...

    @property
    def leads_to(self) -> frozenset[Any]: ...


def checked_move(
    table: Mapping[Any, _TableRow], group_id: str, current: StateT, target: StateT
) -> StateT:
    """`target`, once the table allows `current` to become it (a move outside the table
    is a bug: asserted). Shared by the KIP-848 and share group state machines."""
    if target is not current:
        assert target in table[current].leads_to, (
            f"group {group_id!r}: {current.value} may not become {target.value}"
        )
    return target


def require_event(
    table: Mapping[Any, _TableRow], group_id: str, state: Enum, event: Enum, dead: Enum
) -> None:
    """Refuse an event the table does not accept in `state`: GROUP_ID_NOT_FOUND for a dead
    group, NON_EMPTY_GROUP otherwise (the only other refusal is deleting a live group)."""
    if event in table[state].accepts:
        return
    code = ErrorCode.group_id_not_found if state is dead else ErrorCode.non_empty_group
    raise GroupError(code, f"{event.value} refused: group {group_id!r} is {state.value}")


def topic_names(topics: Mapping[str, TopicInfo]) -> dict[uuid.UUID, str]:
    """Topic id -> name, from a topics snapshot (share.py uses these helpers too)."""
    return {info.topic_id: name for name, info in topics.items()}


def assigned_by_topic_id(partitions: Partitions) -> dict[uuid.UUID, tuple[int, ...]]:
    """Partitions grouped by topic id, sorted (as heartbeat responses list them)."""
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(partitions):
        grouped.setdefault(topic_id, []).append(partition)
    return {topic_id: tuple(ps) for topic_id, ps in grouped.items()}


def assigned_by_name(
    partitions: Partitions, names: Mapping[uuid.UUID, str]
) -> tuple[TopicPartition, ...]:
    """Partitions as sorted (name, partition) pairs; topics unknown by name are left out."""
    return tuple(sorted(TopicPartition(names[t], p) for t, p in partitions if t in names))


def assigned_topics(
    partitions: Partitions, names: Mapping[uuid.UUID, str]
) -> tuple[AssignedTopic, ...]:
    """Partitions as describe answers show them, by topic name."""
    # Topic names are unique in a snapshot, so the sort never compares the ids.
    entries = sorted(
        (names[topic_id], topic_id, ps)
        for topic_id, ps in assigned_by_topic_id(partitions).items()
        if topic_id in names
    )
    return tuple(AssignedTopic(topic_id, name, ps) for name, topic_id, ps in entries)


def _static_replacement(existing: ConsumerGroupMember, member_id: str) -> ConsumerGroupMember:
    """A static member's new incarnation (KIP-345): `existing`'s assignment under a new
    member id, joining at epoch 0 with nothing pending."""
    return replace(
        existing,
        member_id=member_id,
        member_epoch=JOIN_EPOCH,
        previous_member_epoch=JOIN_EPOCH,
        state=MemberState.STABLE,
        pending_revocation=frozenset(),
        rebalance_deadline_ms=None,
    )
