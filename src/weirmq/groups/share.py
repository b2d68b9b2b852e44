"""Share group membership (KIP-932, ShareGroupHeartbeat v1) for one group, sans I/O.

A share group reads partitions like queues: the share-partitions (`weirmq.queues`) hand
each record to one member at a time, so two members may fetch from one partition without
ever getting the same record. Membership therefore needs no exclusive ownership, and this
is much simpler than KIP-848 (consumer.py): there is no revocation, no owned partitions in
the request and no rebalance timeout. The coordinator computes a target assignment and a
member is simply handed its target on its next heartbeat, replacing what it had.

Epochs, as in KIP-848:

    group epoch        bumped when a member joins or leaves (or expires), when a member's
                       subscription changes, or when the metadata of a subscribed topic
                       (existence, id, partition count) changes
    assignment epoch   the group epoch the target was computed for; the target is computed
                       at once after each bump, so both are equal between calls
    member epoch       the assignment epoch the member last took, on its own heartbeat
                       (0 before its first answer); it lags while the member is silent

The member id is the client's: since v1 (KIP-1082) a share consumer generates a UUID and
sends it from its first heartbeat on, so an empty member id is an invalid request. A
heartbeat with epoch 0 joins; -1 leaves; any other epoch must be the member's epoch or the
one before (the answer that moved it on may have been lost), else FENCED_MEMBER_EPOCH.
An epoch-0 heartbeat from a known member follows the same rule, as in Kafka: accepted only
while the member is still at its first epoch (its join answer was lost).

Group states, as ShareGroupDescribe names them, follow from the membership (`_derive`);
`TRANSITIONS` is the whole table, and a move outside it is a bug, so it is asserted:

    from     to       when
    Empty    Stable   a member joins
    Stable   Empty    the last member leaves or expires
    Empty    Dead     the group is deleted

Kafka has no Assigning or Reconciling state for share groups: a member never waits for
another to give anything up, so the group is Stable as soon as it has a member.

The assignment (`assign_simple`) is a pure function of the subscriptions and the partition
counts, not sticky. It is not Kafka's SimpleAssignor (which hashes member ids onto
partitions; its newer homogeneous builder balances and keeps previous assignments). It
works in sorted order, so the same membership always gives the same answer, and ensures:

- every partition of a topic that some member subscribes to goes to at least one member
  subscribed to it, and members get partitions of their own topics only;
- partitions go out one by one to the least loaded subscriber (fewest candidates first),
  so members with the same subscription differ by at most one partition and, when every
  member subscribes to the same topics and there are at least as many partitions as
  members, no partition is given twice;
- then every member still without a partition, while its topics have some, shares the
  least shared one: with more members than partitions every member still consumes.

Simplifications, compared with Kafka: topic metadata is compared on every heartbeat rather
than on a refresh interval, and the target is computed in the same call rather than on an
assignment interval (group.share.assignment.interval.ms) or in the background.

Not here yet: the persisted form. Kafka writes share group membership to
__consumer_offsets (ShareGroupMemberMetadata, ShareGroupMetadata (the group epoch),
ShareGroupTargetAssignmentMember / ...Metadata, ShareGroupCurrentMemberAssignment), and
replays it on load; records.py will need those records, and this class a way to emit and
replay them. Nor the initialisation of share-partition state for newly assigned topics
(Kafka's ShareGroupStatePartitionMetadata), which belongs with the broker wiring.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from ..errors import ErrorCode
from ..types import TopicPartition
from .consumer import (
    Partitions,
    TopicInfo,
    assigned_by_name,
    assigned_by_topic_id,
    assigned_topics,
    checked_move,
    invalid_request,
    require_event,
    topic_names,
)
from .errors import GroupError
from .views import AssignedTopic, GroupView, MemberView

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
PROTOCOL_TYPE: Final = "share"
"""Kafka's ShareGroup.PROTOCOL_TYPE, shown by ListGroups and DescribeGroups."""
ASSIGNOR_NAME: Final = "simple"
"""The name ShareGroupDescribe shows (Kafka's only share assignor is "simple")."""


class ShareGroupState(Enum):
    """Kafka's ShareGroup.ShareGroupState; the values are what ShareGroupDescribe shows."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


class ShareGroupEvent(Enum):
    """What may happen to a share group; `TRANSITIONS` says in which states."""

    HEARTBEAT = "heartbeat"
    EXPIRE = "expire"
    DELETE = "delete"
    DESCRIBE = "describe"


@dataclass(frozen=True, slots=True)
class _Row:
    accepts: frozenset[ShareGroupEvent]
    leads_to: frozenset[ShareGroupState]


_LIVE: Final = frozenset(
    {ShareGroupEvent.HEARTBEAT, ShareGroupEvent.EXPIRE, ShareGroupEvent.DESCRIBE}
)

TRANSITIONS: Final[Mapping[ShareGroupState, _Row]] = {
    ShareGroupState.EMPTY: _Row(
        _LIVE | {ShareGroupEvent.DELETE},
        frozenset({ShareGroupState.STABLE, ShareGroupState.DEAD}),
    ),
    ShareGroupState.STABLE: _Row(_LIVE, frozenset({ShareGroupState.EMPTY})),
    # A timer may still fire for a deleted group: it finds no member and does nothing.
    ShareGroupState.DEAD: _Row(frozenset({ShareGroupEvent.EXPIRE}), frozenset()),
}
"""Per state: the events it accepts and the states it may move to."""


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """Kafka's broker defaults (GroupCoordinatorConfig)."""

    session_timeout_ms: int = 45_000
    """Kafka's group.share.session.timeout.ms."""
    heartbeat_interval_ms: int = 5_000
    """Kafka's group.share.heartbeat.interval.ms."""
    max_size: int = 200
    """Members at most: Kafka's group.share.max.size."""

    def __post_init__(self) -> None:
        if self.session_timeout_ms <= 0 or self.heartbeat_interval_ms <= 0:
            raise ValueError("session timeout and heartbeat interval must be positive")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            # A member told to heartbeat less often than its session lasts always expires.
            raise ValueError("the heartbeat interval must be shorter than the session timeout")
        if self.max_size <= 0:
            raise ValueError(f"max_size must be positive, not {self.max_size}")


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    """A successful ShareGroupHeartbeat answer (errors are raised as GroupError)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[uuid.UUID, tuple[int, ...]] | None
    """The member's partitions by topic id, sorted; None when unchanged (Kafka sends it
    on a join and whenever it changes)."""


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    """One member as the coordinator knows it; replaced, never changed, on each update."""

    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    """Sorted and without duplicates, so a reordering is not a change."""
    member_epoch: int
    previous_member_epoch: int
    assigned: Partitions
    """What the member was last told it has."""
    session_deadline_ms: int


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[AssignedTopic, ...]
    """What the member was last told it has, by topic name; topics that no longer exist
    are left out."""


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A share group as ShareGroupDescribe shows it."""

    group_id: str
    state: str
    """Empty or Stable (a Dead group is not described)."""
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    """Sorted by member id."""


class ShareGroup:
    """One KIP-932 share group's membership. Not thread-safe: the coordinator serialises
    calls."""

    def __init__(self, group_id: str, *, settings: ShareGroupSettings | None = None) -> None:
        # The coordinator refuses an empty GroupId (INVALID_REQUEST) before routing.
        assert group_id.strip(), "a share group needs a group id"
        self._group_id = group_id
        self._settings = settings or ShareGroupSettings()
        self._state = ShareGroupState.EMPTY
        self._group_epoch = 0
        self._assignment_epoch = 0
        self._members: dict[str, ShareGroupMember] = {}
        self._target: dict[str, Partitions] = {}
        self._subscribed: dict[str, TopicInfo] = {}
        """The subscribed topics that exist: a change bumps the group epoch."""
        self._topics: dict[str, TopicInfo] = {}
        """The latest topic snapshot, for calls that bring none (expiry, describe)."""

    # -- reading -------------------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def state(self) -> ShareGroupState:
        return self._state

    @property
    def group_epoch(self) -> int:
        return self._group_epoch

    @property
    def assignment_epoch(self) -> int:
        return self._assignment_epoch

    @property
    def is_empty(self) -> bool:
        return not self._members

    @property
    def settings(self) -> ShareGroupSettings:
        return self._settings

    def configure(self, settings: ShareGroupSettings) -> None:
        """New session timeout, heartbeat interval or size limit (the group's configs
        changed): they apply from each member's next heartbeat."""
        self._settings = settings

    @property
    def members(self) -> tuple[ShareGroupMember, ...]:
        return tuple(self._members[member_id] for member_id in sorted(self._members))

    def member(self, member_id: str) -> ShareGroupMember | None:
        return self._members.get(member_id)

    def target(self, member_id: str) -> Partitions:
        """The member's target assignment (empty for an unknown member)."""
        return self._target.get(member_id, frozenset())

    def subscribed_topics(self) -> frozenset[str]:
        """The existing topics some member subscribes to."""
        return frozenset(self._subscribed)

    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to do; None when there is no member."""
        return min((m.session_deadline_ms for m in self._members.values()), default=None)

    def view(self) -> GroupView:
        names = self._topic_names()
        return GroupView(
            group_id=self._group_id,
            kind="share",
            state=self._state.value,
            protocol_type=PROTOCOL_TYPE,
            protocol=ASSIGNOR_NAME,
            generation=self._group_epoch,
            members=tuple(
                MemberView(
                    member_id=m.member_id,
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    assignment=assigned_by_name(m.assigned, names),
                )
                for m in self.members
            ),
        )

    def describe(self, topics: Mapping[str, TopicInfo] | None = None) -> ShareGroupDescription:
        """The group for ShareGroupDescribe; topic ids are named from `topics` (or the last
        snapshot). A Dead group is refused with GROUP_ID_NOT_FOUND."""
        self._require(ShareGroupEvent.DESCRIBE)
        names = self._topic_names() if topics is None else topic_names(topics)
        return ShareGroupDescription(
            group_id=self._group_id,
            state=self._state.value,
            group_epoch=self._group_epoch,
            assignment_epoch=self._assignment_epoch,
            assignor=ASSIGNOR_NAME,
            members=tuple(
                ShareMemberDescription(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    assignment=assigned_topics(m.assigned, names),
                )
                for m in self.members
            ),
        )

    # -- events --------------------------------------------------------------------------

    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        subscribed_topic_names: tuple[str, ...] | None,
        rack_id: str | None,
        *,
        now_ms: int,
        topics: Mapping[str, TopicInfo],
        client_id: str = "",
        client_host: str = "",
    ) -> ShareHeartbeatResult:
        """Join (epoch 0), heartbeat, or leave (epoch -1). `subscribed_topic_names` and
        `rack_id` are None when unchanged. Raises GroupError with the code to answer."""
        self._require(ShareGroupEvent.HEARTBEAT)
        check_request(member_id, member_epoch, subscribed_topic_names, rack_id)
        self._topics = dict(topics)
        if member_epoch == LEAVE_EPOCH:
            return self.leave(member_id)

        member, is_new = self._find_or_create(member_id, member_epoch)
        updated = replace(
            member,
            rack_id=member.rack_id if rack_id is None else rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=(
                member.subscribed_topic_names
                if subscribed_topic_names is None
                else tuple(sorted(set(subscribed_topic_names)))
            ),
            session_deadline_ms=now_ms + self._settings.session_timeout_ms,
        )
        self._members[member_id] = updated
        changed = is_new or updated.subscribed_topic_names != member.subscribed_topic_names
        # Not short-circuited: _refresh also records the new metadata.
        if self._refresh() or changed:
            self._bump()
        # No revocation: the member takes its whole target, and the target epoch, now.
        taken = replace(updated, assigned=self.target(member_id))
        if taken.member_epoch != self._assignment_epoch:
            taken = replace(
                taken,
                member_epoch=self._assignment_epoch,
                previous_member_epoch=taken.member_epoch,
            )
        self._members[member_id] = taken
        self._settle()
        # Kafka sends the assignment on a join and when it changes. We also send it to a
        # member still at its previous epoch: the answer that carried it was lost.
        lost_answer = JOIN_EPOCH < member_epoch < member.member_epoch
        send = member_epoch == JOIN_EPOCH or lost_answer or taken.assigned != member.assigned
        return ShareHeartbeatResult(
            member_id=member_id,
            member_epoch=taken.member_epoch,
            heartbeat_interval_ms=self._settings.heartbeat_interval_ms,
            assignment=assigned_by_topic_id(taken.assigned) if send else None,
        )

    def leave(self, member_id: str) -> ShareHeartbeatResult:
        """The member leaves (a heartbeat with epoch -1; Kafka does not check the epoch of
        a leave). Raises UNKNOWN_MEMBER_ID for a member not in the group."""
        self._require(ShareGroupEvent.HEARTBEAT)
        if member_id not in self._members:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not in the group."
            )
        self._remove([member_id])
        return ShareHeartbeatResult(
            member_id=member_id,
            member_epoch=LEAVE_EPOCH,
            heartbeat_interval_ms=0,
            assignment=None,
        )

    def expire(self, now_ms: int) -> list[str]:
        """Remove members whose session has run out; their ids, sorted."""
        self._require(ShareGroupEvent.EXPIRE)
        expired = sorted(
            m.member_id for m in self._members.values() if now_ms >= m.session_deadline_ms
        )
        if expired:
            self._remove(expired)
        return expired

    def delete(self) -> None:
        """DeleteGroups: only an Empty group may go (NON_EMPTY_GROUP otherwise)."""
        self._require(ShareGroupEvent.DELETE)
        self._move(ShareGroupState.DEAD)

    # -- membership ----------------------------------------------------------------------

    def _find_or_create(self, member_id: str, member_epoch: int) -> tuple[ShareGroupMember, bool]:
        """The member the heartbeat is from, and whether it is new. Raises the refusals in
        Kafka's order: the group is full, the member is unknown, its epoch is fenced."""
        existing = self._members.get(member_id)
        if existing is None:
            max_size = self._settings.max_size
            if len(self._members) >= max_size:
                raise GroupError(
                    ErrorCode.group_max_size_reached,
                    f"The share group has reached its maximum capacity of {max_size} members.",
                )
            if member_epoch != JOIN_EPOCH:
                raise GroupError(
                    ErrorCode.unknown_member_id, f"Member {member_id} is not in the group."
                )
            return _new_member(member_id), True
        _check_epoch(existing, member_epoch)
        return existing, False

    def _remove(self, member_ids: list[str]) -> None:
        for member_id in member_ids:
            del self._members[member_id]
            self._target.pop(member_id, None)
        self._refresh()
        self._bump()
        self._settle()

    def _refresh(self) -> bool:
        """Recompute the metadata of the subscribed topics; whether it changed (which
        bumps the group epoch)."""
        names = {name for m in self._members.values() for name in m.subscribed_topic_names}
        metadata = {name: self._topics[name] for name in sorted(names) if name in self._topics}
        changed = metadata != self._subscribed
        self._subscribed = metadata
        return changed

    def _bump(self) -> None:
        """A new group epoch, and at once the target assignment for it."""
        self._group_epoch += 1
        by_name = assign_simple(
            {m.member_id: set(m.subscribed_topic_names) for m in self._members.values()},
            {name: info.partitions for name, info in self._subscribed.items()},
        )
        self._target = {
            member_id: frozenset((self._subscribed[t].topic_id, p) for t, p in tps)
            for member_id, tps in by_name.items()
        }
        assert self._target.keys() == self._members.keys(), "one target per member"
        self._assignment_epoch = self._group_epoch

    # -- states --------------------------------------------------------------------------

    def _derive(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self._members else ShareGroupState.EMPTY

    def _settle(self) -> None:
        self._move(self._derive())

    def _move(self, state: ShareGroupState) -> None:
        self._state = checked_move(TRANSITIONS, self._group_id, self._state, state)

    def _require(self, event: ShareGroupEvent) -> None:
        require_event(TRANSITIONS, self._group_id, self._state, event, ShareGroupState.DEAD)

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return topic_names(self._topics)


# -- the assignor ------------------------------------------------------------------------


def assign_simple(
    subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int]
) -> dict[str, frozenset[TopicPartition]]:
    """The share group target assignment (rules in the module docstring): member id ->
    its partitions, for every member of `subscriptions`. Topics absent from `partitions`
    (or with no partition) are ignored."""
    wanted = {
        member: frozenset(t for t in topics if partitions.get(t, 0) > 0)
        for member, topics in sorted(subscriptions.items())
    }
    subscribers: dict[str, tuple[str, ...]] = {}
    for member, topics in wanted.items():  # sorted by member id
        for topic in topics:
            subscribers[topic] = (*subscribers.get(topic, ()), member)
    result: dict[str, list[TopicPartition]] = {member: [] for member in wanted}
    shared: dict[TopicPartition, int] = {}
    _spread(result, shared, subscribers, partitions)
    _share_with_idle(result, shared, wanted, partitions)
    return {member: frozenset(assigned) for member, assigned in result.items()}


def _spread(
    result: dict[str, list[TopicPartition]],
    shared: dict[TopicPartition, int],
    subscribers: Mapping[str, tuple[str, ...]],
    partitions: Mapping[str, int],
) -> None:
    """Every partition of a subscribed topic to its least loaded subscriber (ties: the
    smallest member id), topics with the fewest subscribers first: members with wider
    subscriptions are left room for them. One heap of (load, member) per distinct
    subscriber set; loads only grow, so an entry is at most too low, and a stale top is
    refreshed until the top is true (then it is the least loaded)."""
    heaps: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    load = dict.fromkeys(result, 0)
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        heap = heaps.get(subscribers[topic])
        if heap is None:
            # Sorted, so already a heap; the zero loads are refreshed as they surface.
            heap = heaps[subscribers[topic]] = [(0, m) for m in subscribers[topic]]
        for partition in range(partitions[topic]):
            while heap[0][0] != load[heap[0][1]]:
                heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
            member = heap[0][1]
            tp = TopicPartition(topic, partition)
            result[member].append(tp)
            shared[tp] = 1
            load[member] += 1
            heapq.heapreplace(heap, (load[member], member))


def _share_with_idle(
    result: dict[str, list[TopicPartition]],
    shared: dict[TopicPartition, int],
    wanted: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
) -> None:
    """A member left without a partition while its topics have some shares the least
    shared of them (ties: the first in order). Each partition of its topics went to a
    member that had none yet (else it would have gone to this one), so they number fewer
    than the members: the scan is short."""
    for member, topics in wanted.items():
        if result[member] or not topics:
            continue
        candidates = [TopicPartition(t, p) for t in sorted(topics) for p in range(partitions[t])]
        tp = min(candidates, key=lambda c: (shared[c], c))
        result[member].append(tp)
        shared[tp] += 1


# -- helpers -----------------------------------------------------------------------------


def check_request(
    member_id: str,
    member_epoch: int,
    subscribed_topic_names: tuple[str, ...] | None,
    rack_id: str | None,
) -> None:
    """Kafka's own request checks (GroupCoordinatorService), before anything changes."""
    if not member_id.strip():
        raise invalid_request("MemberId can't be empty.")
    if rack_id is not None and not rack_id.strip():
        raise invalid_request("RackId can't be empty.")
    if member_epoch == JOIN_EPOCH and not subscribed_topic_names:
        raise invalid_request("SubscribedTopicNames must be set in first request.")
    if member_epoch < LEAVE_EPOCH:
        raise invalid_request(f"MemberEpoch {member_epoch} is invalid.")


def _check_epoch(member: ShareGroupMember, epoch: int) -> None:
    """Kafka's fencing rule for share groups: the member's epoch, or the one before it (the
    answer that moved it on was lost); there are no owned partitions to compare."""
    if epoch > member.member_epoch:
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The member epoch {epoch} is greater than the group's {member.member_epoch}.",
        )
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            f"The member epoch {epoch} is smaller than the group's {member.member_epoch} "
            f"and is not the previous one ({member.previous_member_epoch}).",
        )


def _new_member(member_id: str) -> ShareGroupMember:
    return ShareGroupMember(
        member_id=member_id,
        rack_id=None,
        client_id="",
        client_host="",
        subscribed_topic_names=(),
        member_epoch=JOIN_EPOCH,
        previous_member_epoch=JOIN_EPOCH,
        assigned=frozenset(),
        session_deadline_ms=0,
    )
