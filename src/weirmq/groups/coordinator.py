"""The group coordinator: every group of this broker, their committed offsets, their log.

Groups come in three kinds, which share one namespace and one offsets store:

- classic groups (`classic.ClassicGroup`): JoinGroup / SyncGroup / Heartbeat, the
  assignment computed by the clients' leader;
- consumer groups (`consumer.ConsumerGroup`, KIP-848): ConsumerGroupHeartbeat, the
  assignment computed here;
- share groups (`share.ShareGroup`, KIP-932): ShareGroupHeartbeat; their delivery state
  is not here but in the broker's share service (broker/shares.py), which this
  coordinator tells when members go (`ShareListener`) so that their records are released.

An empty classic or consumer group turns into the other kind when a member of the other
protocol arrives (its offsets stay). A live group migrates online, as Kafka 4 does
(KIP-848), as far as `migration_policy` (Kafka's group.consumer.migration.policy)
allows:

    upgrade    a ConsumerGroupHeartbeat joins a classic group of Kafka consumers
               (protocol type "consumer"): the group becomes a consumer group holding its
               classic members, each keeping its assignment at the classic generation,
               which becomes the group epoch (`ConsumerGroup.from_classic`); waiting
               JoinGroup and SyncGroup requests are answered REBALANCE_IN_PROGRESS. The
               joining member bumps the epoch, so the classic members are told to rejoin
               and give up what moves, incrementally, as consumer-protocol members do.
               Refused with GROUP_ID_NOT_FOUND (Kafka's answer) when the policy forbids
               it, the group is not of Kafka consumers, is larger than a consumer group
               may be, or a subscription does not parse.
    classic    JoinGroup, SyncGroup, Heartbeat and LeaveGroup of a non-empty consumer
               group are served by it (its classic members; see consumer.py), whatever
               the policy, as Kafka does; a classic join whose protocols the group's
               classic members do not share gets INCONSISTENT_GROUP_PROTOCOL.
    downgrade  the last consumer-protocol member leaves (epoch -1, or its session
               expires) and classic members remain: the group becomes a classic group of
               those members, at the group epoch as generation, with their current
               assignments, and starts a rebalance (`ClassicGroup.start_rebalance`), so
               they rejoin and a leader assigns again. Their commits stay valid until
               then: their generation is their epoch (a member still behind the group
               epoch gets ILLEGAL_GENERATION, and rejoins too). Without the policy's consent (or
               with more members than a classic group may have, or no protocol they all
               share) the group stays a consumer group of classic members.

A share group never turns into another kind, nor another kind into a share group: its
id is taken until it is deleted (Kafka refuses with INCONSISTENT_GROUP_PROTOCOL or
GROUP_ID_NOT_FOUND).
Share groups commit no offsets and are not written to this log: their membership is lost
on a restart (members rejoin) and the groups themselves are recreated, empty, by the
share service from its own log (`ensure_share_group`).

Replies. JoinGroup and SyncGroup requests may wait for other members; each is named by a
ticket its caller allocates (`join_group(..., ticket)`). Every classic step that can
answer a waiting request (`join_group`, `sync_group`, `leave_group`, `tick`,
`abort_waiting`) returns the replies it produced (`classic.JoinReply` and `SyncReply`,
the caller's own when it is answered at once, and other members'), passed up from the
group unchanged; the caller delivers them all (broker/group_service.py `GroupReplies`).
Heartbeat and deletion produce none: a heartbeat only moves a deadline, and only an
empty group, with nobody waiting, is deleted.

Durability. Every change to remember is a record for the internal log (`records.py`,
Kafka's `__consumer_offsets` format), handed to the injected `write`, which appends it
before the change is applied in memory: an append that fails (disk full) changes
nothing, and the client gets a retriable error. Replaying the log from its start
rebuilds the state (`replay`, then `finish_loading`); requests that arrive before that
get COORDINATOR_LOAD_IN_PROGRESS. What is stored: offsets of every group, and the
generation, members and assignments of classic groups (so members of a stable group
keep heartbeating across a restart). KIP-848 groups keep their offsets and their group
epoch (a record written at each epoch bump and at each conversion, which says the group
is a consumer group): after a restart their members are told UNKNOWN_MEMBER_ID and
rejoin, which the protocol handles without losing a committed offset, and the epoch goes
on from where it was. A conversion writes the tombstone of the old kind's record with
the new kind's record, so replay ends with the kind the group had last.

Compaction. The log keeps one live record per key, so its live size is bounded by the
state; `snapshot` yields that state as records. The broker appends a snapshot when the
log has grown to several times the live size and moves the log start to where the
snapshot begins. A crash midway leaves the old records before a partial snapshot, and
replaying both gives the same state: the snapshot repeats values that were already
current.

Retention. Offsets of an empty group expire `offsets_retention_ms` after the later of
their commit and the moment the group became empty (KIP-211); a group left with no
members and no offsets is deleted. A client-chosen expiry (OffsetCommit v1 values) is
honoured too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import (
    Callable,
    Collection,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field, replace
from enum import Enum

from ..errors import ErrorCode
from ..types import TopicPartition
from . import consumer as kip848
from . import share as kip932
from .classic import (
    ClassicGroup,
    ClassicSettings,
    JoinReply,
    JoinRequest,
    LeaveOutcome,
    Replies,
    State,
    SyncReply,
)
from .errors import GroupError
from .protocol import encode_assignment
from .records import (
    ConsumerGroupKey,
    ConsumerGroupValue,
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_consumer_group_value,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_value,
)
from .views import (
    ClassicDescription,
    ClassicMemberDescription,
    ConsumerGroupDescription,
    GroupView,
)

log = logging.getLogger(__name__)

RecordPair = tuple[bytes, bytes | None]
"""(key, value) of one record of the coordinator's log; value None is a tombstone."""

OFFSET_METADATA_MAX_BYTES = 4096
"""Kafka's offset.metadata.max.bytes: longer metadata gets OFFSET_METADATA_TOO_LARGE."""


class MigrationPolicy(Enum):
    """Kafka's group.consumer.migration.policy: which online conversions are allowed
    between a classic group and a consumer group (module docstring)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, text: str) -> MigrationPolicy:
        """A policy by Kafka's name, in any case (as Kafka reads it)."""
        return cls(text.strip().lower())

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    classic: ClassicSettings = field(default_factory=ClassicSettings)
    consumer: kip848.ConsumerGroupSettings = field(default_factory=kip848.ConsumerGroupSettings)
    share: kip932.ShareGroupSettings = field(default_factory=kip932.ShareGroupSettings)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    """Kafka's group.consumer.migration.policy (its default in Kafka 4)."""


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    member_id: str
    generation: int
    """The generation (classic) or member epoch (KIP-848); -1 for a commit from outside
    any group (a "simple" consumer using assign())."""
    group_instance_id: str | None
    offsets: Sequence[tuple[str, int, int, int, str | None]]
    """(topic, partition, offset, leader epoch, metadata)."""


Group = ClassicGroup | kip848.ConsumerGroup | kip932.ShareGroup


class ShareListener:
    """What the share service hears from the coordinator (no-ops by default)."""

    def members_gone(self, group_id: str, member_ids: Sequence[str], now_ms: int) -> None:
        """These members left or expired: release what they hold."""

    def group_deleted(self, group_id: str) -> None:
        """The share group was deleted (DeleteGroups): delete its state."""

    def share_settings(self, group_id: str) -> kip932.ShareGroupSettings | None:
        """The group's own membership settings (its configs), None for the defaults."""
        return None


def _default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        write: Callable[[list[RecordPair]], None],
        *,
        partitions_of: Callable[[str], int | None],
        topics: Callable[[], Mapping[str, kip848.TopicInfo]],
        new_member_id: Callable[[str], str] = _default_member_id,
        share_listener: ShareListener | None = None,
        consumer_timeouts: Callable[[str], tuple[int, int]] | None = None,
    ) -> None:
        self.settings = settings
        self._consumer_timeouts = consumer_timeouts
        """A KIP-848 group's (session timeout, heartbeat interval) from its configs
        (consumer.session.timeout.ms, consumer.heartbeat.interval.ms); None: the defaults."""
        self._write = write
        self._partitions_of = partitions_of
        """Partition count of a topic, None if it does not exist."""
        self._topics = topics
        self._new_member_id = new_member_id
        self.share_listener = share_listener or ShareListener()
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetValue]] = {}
        self._empty_since: dict[str, int] = {}
        """KIP-848 groups: when they last became empty (classic groups keep their own)."""
        self.loaded = False

    # --- helpers -------------------------------------------------------------------------

    def _check_ready(self, group_id: str) -> None:
        if not self.loaded:
            raise GroupError(ErrorCode.coordinator_load_in_progress, "offsets are loading")
        if not group_id:
            raise GroupError(ErrorCode.invalid_group_id, "the group id is empty")

    def _persist(self, group: ClassicGroup) -> None:
        key = encode_key(GroupKey(group.group_id))
        try:
            self._write([(key, encode_value(group.record()))])
        except Exception:  # the state machine moved on; members rejoin after a restart
            log.exception("group %r: metadata not written to the offsets log", group.group_id)

    def _new_classic(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self.settings.classic, self._new_member_id, self._persist)
        self.groups[group_id] = group
        self._empty_since.pop(group_id, None)
        return group

    def _new_consumer(self, group_id: str) -> kip848.ConsumerGroup:
        group = kip848.ConsumerGroup(
            group_id,
            settings=self.settings.consumer,
            persist=self._persist_consumer,
        )
        self.groups[group_id] = group
        return group

    def _persist_consumer(self, group: kip848.ConsumerGroup) -> None:
        """Record a consumer group's epoch (after each bump). As for classic groups, a
        failed write is logged and the group goes on: members rejoin after a restart."""
        try:
            self._write([_consumer_record(group)])
        except Exception:  # the state machine moved on; the epoch restarts lower
            log.exception("group %r: epoch not written to the offsets log", group.group_id)

    def _classic(self, group_id: str, *, create: bool) -> ClassicGroup | None:
        """The classic group of that id (created if asked); an empty consumer group is
        replaced by a new classic group when `create`. A consumer group with members
        serves classic requests itself (`_live_consumer`), so it never comes here."""
        group = self.groups.get(group_id)
        if isinstance(group, kip932.ShareGroup):
            raise GroupError(
                ErrorCode.inconsistent_group_protocol, f"group {group_id!r} is a share group"
            )
        if isinstance(group, kip848.ConsumerGroup):
            assert group.is_empty, "a consumer group with members serves classic members"
            if not create:
                return None
            self._write_or_refuse([(encode_key(ConsumerGroupKey(group_id)), None)])
            classic = self._new_classic(group_id)
            # Generations go on from the epoch, so that they never go back in a group.
            classic.generation = group.group_epoch
            return classic
        if group is None and create:
            return self._new_classic(group_id)
        return group

    def _write_or_refuse(self, records: list[RecordPair]) -> None:
        """Append a conversion's records before the conversion; if the log refuses them,
        nothing changes and the client gets a retriable error."""
        try:
            self._write(records)
        except Exception as exc:
            log.error("group records not written to the offsets log: %s", exc)
            raise GroupError(
                ErrorCode.coordinator_not_available, "the offsets log refused the append"
            ) from exc

    def _live_consumer(self, group_id: str) -> kip848.ConsumerGroup | None:
        """The group if it is a consumer group with members, which serves classic
        requests itself (its classic members)."""
        group = self.groups.get(group_id)
        if isinstance(group, kip848.ConsumerGroup) and not group.is_empty:
            self._configure_consumer(group)
            return group
        return None

    # --- classic protocol ----------------------------------------------------------------

    def join_group(self, group_id: str, request: JoinRequest, now_ms: int, ticket: int) -> Replies:
        """The JoinGroup holding `ticket`; see `ClassicGroup.join` (and
        `ConsumerGroup.classic_join` for a consumer group with members)."""
        self._check_ready(group_id)
        consumer = self._live_consumer(group_id)
        if consumer is not None:
            result = consumer.classic_join(request, topics=self._topics(), now_ms=now_ms)
            return [JoinReply(ticket, result)]
        group = self._classic(group_id, create=True)
        assert group is not None
        return group.join(request, now_ms, ticket)

    def sync_group(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol: str | None,
        assignments: Sequence[tuple[str, bytes]],
        now_ms: int,
        ticket: int,
    ) -> Replies:
        """The SyncGroup holding `ticket`; see `ClassicGroup.sync`."""
        self._check_ready(group_id)
        consumer = self._live_consumer(group_id)
        if consumer is not None:
            result = consumer.classic_sync(
                member_id, instance_id, generation, protocol_type, protocol, now_ms
            )
            return [SyncReply(ticket, result)]
        group = self._classic(group_id, create=False)
        if group is None:
            raise GroupError(ErrorCode.unknown_member_id, f"no group {group_id!r}")
        return group.sync(
            member_id,
            instance_id,
            generation,
            protocol_type,
            protocol,
            assignments,
            now_ms,
            ticket,
        )

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        self._check_ready(group_id)
        consumer = self._live_consumer(group_id)
        if consumer is not None:
            return consumer.classic_heartbeat(member_id, instance_id, generation, now_ms)
        group = self._classic(group_id, create=False)
        if group is None:
            raise GroupError(ErrorCode.unknown_member_id, f"no group {group_id!r}")
        return group.heartbeat(member_id, instance_id, generation, now_ms)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int
    ) -> LeaveOutcome:
        """Each member's answer and the replies the departures produced; raises
        GroupError when the whole request is refused."""
        self._check_ready(group_id)
        consumer = self._live_consumer(group_id)
        if consumer is not None:
            codes = tuple(consumer.classic_leave(m, i) for m, i in members)
            self._note_empty(group_id, consumer, now_ms)
            return LeaveOutcome(codes, ())
        group = self._classic(group_id, create=False)
        if group is None:
            raise GroupError(ErrorCode.unknown_member_id, f"no group {group_id!r}")
        return group.leave(members, now_ms)

    # --- KIP-848 -------------------------------------------------------------------------

    def consumer_heartbeat(
        self,
        request: kip848.HeartbeatRequest,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> kip848.HeartbeatResponse:
        group_id = request.group_id
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if isinstance(group, kip932.ShareGroup):
            raise GroupError(ErrorCode.group_id_not_found, f"group {group_id!r} is a share group")
        # Members still to come back with a member id given by MEMBER_ID_REQUIRED do not
        # make a group live (Kafka's group is Empty then): they join the consumer group.
        if isinstance(group, ClassicGroup) and group.members:
            return self._upgrade(group, request, client_id, client_host, now_ms)
        if isinstance(group, ClassicGroup) or group is None:
            if request.member_epoch != kip848.JOIN_EPOCH:
                raise GroupError(ErrorCode.unknown_member_id, f"no group {group_id!r}")
            generation = 0 if group is None else group.generation
            if group is not None:  # an empty classic group is simply converted
                self._write_or_refuse([(encode_key(GroupKey(group_id)), None)])
            group = self._new_consumer(group_id)
            group.restore_epoch(generation)  # epochs go on from the generation
        self._configure_consumer(group)
        if self._leaves_for_good(group, request) and self._downgrade(
            group, {request.member_id}, now_ms
        ):
            return kip848.HeartbeatResponse(request.member_id, kip848.LEAVE_EPOCH, 0, None)
        response = group.heartbeat(
            request,
            topics=self._topics(),
            now_ms=now_ms,
            client_id=client_id,
            client_host=client_host,
        )
        self._note_empty(group_id, group, now_ms)
        return response

    def _upgrade(
        self,
        classic: ClassicGroup,
        request: kip848.HeartbeatRequest,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> kip848.HeartbeatResponse:
        """A consumer-protocol member joins a live classic group: the online upgrade
        (module docstring). The heartbeat is tried on the converted group before
        anything else changes, so a refused request leaves the classic group as it was."""
        group_id = classic.group_id
        if request.member_epoch != kip848.JOIN_EPOCH:
            raise GroupError(ErrorCode.unknown_member_id, f"no consumer group {group_id!r}")
        if not self.settings.migration_policy.upgrades:
            raise _not_upgraded(group_id, "online upgrade is disabled")
        if classic.protocol_type != kip848.CONSUMER_PROTOCOL_TYPE:
            raise _not_upgraded(group_id, "the group does not use the consumer embedded protocol")
        max_size = self.settings.consumer.max_size
        if max_size is not None and len(classic.members) > max_size:
            raise _not_upgraded(group_id, "the group size exceeds the consumer group maximum")
        try:
            group = kip848.ConsumerGroup.from_classic(
                classic, settings=self.settings.consumer, topics=self._topics(), now_ms=now_ms
            )
        except RecordFormatError:
            raise _not_upgraded(group_id, "the embedded consumer protocol is malformed") from None
        self._configure_consumer(group)
        response = group.heartbeat(
            request,
            topics=self._topics(),
            now_ms=now_ms,
            client_id=client_id,
            client_host=client_host,
        )
        self._write_or_refuse([(encode_key(GroupKey(group_id)), None), _consumer_record(group)])
        released = classic.abort_waiting(ErrorCode.rebalance_in_progress)
        group.on_epoch_bump(self._persist_consumer)
        self.groups[group_id] = group
        self._empty_since.pop(group_id, None)
        log.info(
            "group %r: converted from classic to consumer group at epoch %d (%d classic members)",
            group_id,
            group.group_epoch,
            len(classic.members),
        )
        return replace(response, released=tuple(released))

    def _leaves_for_good(
        self, group: kip848.ConsumerGroup, request: kip848.HeartbeatRequest
    ) -> bool:
        """Whether this is a leave heartbeat (epoch -1) from a consumer-protocol member
        of the group (its own id, and its own instance id if it has one)."""
        member = group.member(request.member_id)
        return (
            request.member_epoch == kip848.LEAVE_EPOCH
            and member is not None
            and member.classic is None
            and (request.instance_id is None or request.instance_id == member.instance_id)
        )

    def _downgrade(
        self, group: kip848.ConsumerGroup, leaving: Collection[str], now_ms: int
    ) -> bool:
        """The online downgrade if `leaving` are the last consumer-protocol members
        (module docstring); whether it happened."""
        if not self.settings.migration_policy.downgrades or not group.uses_classic_only(leaving):
            return False
        staying = [m for m in group.members if m.member_id not in leaving]
        protocol = _common_protocol(staying)
        if protocol is None or len(staying) > self.settings.classic.max_size:
            return False
        try:
            self._write([(encode_key(ConsumerGroupKey(group.group_id)), None)])
        except Exception:  # the group stays a consumer group; nothing changed
            log.exception("group %r: not downgraded (offsets log)", group.group_id)
            return False
        names = kip848.topic_names(self._topics())
        value = _classic_value(group.group_epoch, protocol, staying, names, now_ms)
        classic = ClassicGroup(
            group.group_id, self.settings.classic, self._new_member_id, self._persist
        )
        classic.restore(value, now_ms)
        classic.start_rebalance(now_ms)
        self.groups[group.group_id] = classic
        self._empty_since.pop(group.group_id, None)
        log.info(
            "group %r: converted from consumer to classic group at generation %d (%d members)",
            group.group_id,
            group.group_epoch,
            len(staying),
        )
        return True

    def _configure_consumer(self, group: kip848.ConsumerGroup) -> None:
        if self._consumer_timeouts is None:
            return
        session_ms, heartbeat_ms = self._consumer_timeouts(group.group_id)
        wanted = replace(
            self.settings.consumer,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=heartbeat_ms,
        )
        if wanted != group.settings:
            group.configure(wanted)

    def _note_empty(self, group_id: str, group: kip848.ConsumerGroup, now_ms: int) -> None:
        if group.is_empty:
            self._empty_since.setdefault(group_id, now_ms)
        else:
            self._empty_since.pop(group_id, None)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        """A KIP-848 group (ConsumerGroupDescribe); GROUP_ID_NOT_FOUND for any other."""
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if not isinstance(group, kip848.ConsumerGroup):
            raise GroupError(
                ErrorCode.group_id_not_found, f"group {group_id!r} is not a consumer group"
            )
        return group.describe(self._topics())

    # --- KIP-932 -------------------------------------------------------------------------

    def share_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed_topic_names: tuple[str, ...] | None,
        rack_id: str | None,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> kip932.ShareHeartbeatResult:
        """ShareGroupHeartbeat; raises GroupError with the code to answer. The request is
        checked before the group is looked up (or created), as Kafka does."""
        self._check_ready(group_id)
        kip932.check_request(member_id, member_epoch, subscribed_topic_names, rack_id)
        group = self.groups.get(group_id)
        if group is not None and not isinstance(group, kip932.ShareGroup):
            raise GroupError(
                ErrorCode.inconsistent_group_protocol,
                f"group {group_id!r} is a {group.view().kind} group, not a share group",
            )
        if group is None:
            if member_epoch != kip932.JOIN_EPOCH:
                raise GroupError(ErrorCode.unknown_member_id, f"no group {group_id!r}")
            group = self.ensure_share_group(group_id)
        else:
            self._configure_share(group)
        result = group.heartbeat(
            member_id,
            member_epoch,
            subscribed_topic_names,
            rack_id,
            now_ms=now_ms,
            topics=self._topics(),
            client_id=client_id,
            client_host=client_host,
        )
        if member_epoch == kip932.LEAVE_EPOCH:
            self.share_listener.members_gone(group_id, [member_id], now_ms)
        return result

    def ensure_share_group(self, group_id: str) -> kip932.ShareGroup:
        """The share group, created empty if there is no group of that id (another kind
        of group is a bug of the caller: it is asserted)."""
        group = self.groups.get(group_id)
        if group is None:
            group = kip932.ShareGroup(group_id, settings=self.settings.share)
            self._configure_share(group)
            self.groups[group_id] = group
        assert isinstance(group, kip932.ShareGroup), f"{group_id!r} is not a share group"
        return group

    def _configure_share(self, group: kip932.ShareGroup) -> None:
        wanted = self.share_listener.share_settings(group.group_id) or self.settings.share
        if wanted != group.settings:
            group.configure(wanted)

    def share_group(self, group_id: str) -> kip932.ShareGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, kip932.ShareGroup) else None

    def describe_share_group(self, group_id: str) -> kip932.ShareGroupDescription:
        """ShareGroupDescribe; GROUP_ID_NOT_FOUND for a group of another kind or none."""
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if not isinstance(group, kip932.ShareGroup):
            raise GroupError(
                ErrorCode.group_id_not_found, f"group {group_id!r} is not a share group"
            )
        return group.describe(self._topics())

    # --- offsets -------------------------------------------------------------------------

    def commit_offsets(self, request: CommitRequest, now_ms: int) -> list[ErrorCode]:
        """One error code per offset of the request (none when committed); raises
        GroupError when the whole request is refused."""
        self._check_ready(request.group_id)
        self._check_commit(request)
        codes: list[ErrorCode] = []
        accepted: list[tuple[TopicPartition, OffsetValue]] = []
        for topic, partition, offset, leader_epoch, metadata in request.offsets:
            code = self._offset_error(topic, partition, metadata)
            codes.append(code)
            if code is ErrorCode.none:
                value = OffsetValue(offset, leader_epoch, metadata or "", now_ms)
                accepted.append((TopicPartition(topic, partition), value))
        if not accepted:
            return codes
        self._write(
            [
                (encode_key(OffsetKey(request.group_id, tp[0], tp[1])), encode_value(value))
                for tp, value in accepted
            ]
        )
        if request.group_id not in self.groups:
            self._new_classic(request.group_id)
        stored = self.offsets.setdefault(request.group_id, {})
        for tp, value in accepted:
            stored[tp] = value
        return codes

    def commit_transactional(
        self, group_id: str, offsets: Sequence[tuple[str, int, int, int, str | None]], now_ms: int
    ) -> None:
        """Offsets a transaction committed (TxnOffsetCommit, applied when its EndTxn
        commits): written whatever the group's membership is now, as Kafka applies them
        when the commit marker reaches the offsets log. A share group has no offsets, and
        is left alone."""
        if isinstance(self.groups.get(group_id), kip932.ShareGroup):
            return
        accepted = [
            (TopicPartition(topic, partition), OffsetValue(offset, epoch, metadata or "", now_ms))
            for topic, partition, offset, epoch, metadata in offsets
        ]
        if not accepted:
            return
        self._write(
            [
                (encode_key(OffsetKey(group_id, tp[0], tp[1])), encode_value(value))
                for tp, value in accepted
            ]
        )
        if group_id not in self.groups:
            self._new_classic(group_id)
        stored = self.offsets.setdefault(group_id, {})
        for tp, value in accepted:
            stored[tp] = value

    def check_txn_commit(self, request: CommitRequest) -> ErrorCode:
        """KIP-447: may the consumer `request` names (its generation or member epoch,
        member id, instance id) commit offsets in a transaction? As Kafka checks
        TxnOffsetCommit: a group unknown here accepts only a commit from outside any group
        (generation -1); a known group checks its member and generation as OffsetCommit
        does, except that a rebalance in progress does not refuse it (the commit lands when
        the transaction commits). NONE when it may."""
        group = self.groups.get(request.group_id)
        if isinstance(group, kip932.ShareGroup):
            return ErrorCode.group_id_not_found
        if group is None or group.is_empty:
            if request.generation < 0:
                return ErrorCode.none
            return ErrorCode.illegal_generation
        if request.generation < 0 and not request.member_id:
            return ErrorCode.none  # a producer committing for the group from outside it
        if isinstance(group, kip848.ConsumerGroup):
            code = group.validate_commit(request.member_id, request.generation)
            return ErrorCode.illegal_generation if code is ErrorCode.stale_member_epoch else code
        try:
            group.check_member(request.member_id, request.group_instance_id)
        except GroupError as exc:
            return exc.code
        if request.generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def _check_commit(self, request: CommitRequest) -> None:
        group = self.groups.get(request.group_id)
        if isinstance(group, kip932.ShareGroup):
            raise GroupError(
                ErrorCode.group_id_not_found,
                f"group {request.group_id!r} is a share group: it acknowledges, never commits",
            )
        if group is None or group.is_empty:
            if request.generation < 0:
                return  # a commit from outside any group (assign() and commit)
            raise GroupError(
                ErrorCode.unknown_member_id, f"group {request.group_id!r} has no members"
            )
        if isinstance(group, kip848.ConsumerGroup):
            code = group.validate_commit(request.member_id, request.generation)
            if code is not ErrorCode.none:
                raise GroupError(code)
            return
        if group.state is State.DEAD:
            raise GroupError(ErrorCode.coordinator_not_available)
        if request.generation < 0 and not request.member_id:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"group {request.group_id!r} has members; commit as one of them",
            )
        if group.state is State.COMPLETING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress)
        group.check_member(request.member_id, request.group_instance_id)
        if request.generation != group.generation:
            raise GroupError(
                ErrorCode.illegal_generation,
                f"generation {request.generation} is not the group's ({group.generation})",
            )

    def _offset_error(self, topic: str, partition: int, metadata: str | None) -> ErrorCode:
        if metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
            return ErrorCode.offset_metadata_too_large
        count = self._partitions_of(topic)
        if count is None or not 0 <= partition < count:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.none

    def fetch_offsets(
        self,
        group_id: str,
        topics: Iterable[tuple[str, Sequence[int]]] | None,
        *,
        member: tuple[str, int] | None = None,
    ) -> list[tuple[str, list[tuple[int, OffsetValue | None]]]]:
        """Committed offsets by topic: of the partitions asked for, or (topics None) of
        every partition the group committed. `member` (id, epoch) is checked against a
        KIP-848 group (OffsetFetch v9)."""
        self._check_ready(group_id)
        if member is not None:
            group = self.groups.get(group_id)
            if isinstance(group, kip848.ConsumerGroup):
                code = group.validate_fetch(*member)
                if code is not ErrorCode.none:
                    raise GroupError(code)
            elif member[0]:
                raise GroupError(ErrorCode.unknown_member_id, f"no consumer group {group_id!r}")
        stored = self.offsets.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetValue | None]]] = {}
            for (topic, partition), value in sorted(stored.items()):
                by_topic.setdefault(topic, []).append((partition, value))
            return list(by_topic.items())
        return [
            (topic, [(p, stored.get(TopicPartition(topic, p))) for p in partitions])
            for topic, partitions in topics
        ]

    def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> list[tuple[str, list[tuple[int, ErrorCode]]]]:
        """OffsetDelete: remove the group's offsets for these partitions, unless the group
        still consumes the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"no group {group_id!r}")
        opaque = isinstance(group, ClassicGroup) and group.protocol_type != "consumer"
        if opaque and not group.is_empty:
            # A non-consumer classic group's subscriptions cannot be read: refuse, as Kafka.
            raise GroupError(ErrorCode.non_empty_group, f"group {group_id!r} has members")
        subscribed = self._subscribed(group)
        stored = self.offsets.get(group_id, {})
        result: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
        doomed: list[TopicPartition] = []
        for topic, partitions in topics:
            codes = []
            for partition in partitions:
                if topic in subscribed:
                    codes.append((partition, ErrorCode.group_subscribed_to_topic))
                    continue
                if self._partitions_of(topic) is None:
                    codes.append((partition, ErrorCode.unknown_topic_or_partition))
                    continue
                codes.append((partition, ErrorCode.none))
                if (topic, partition) in stored:
                    doomed.append(TopicPartition(topic, partition))
            result.append((topic, codes))
        self._remove_offsets(group_id, doomed)
        return result

    def _subscribed(self, group: Group) -> frozenset[str]:
        if group.is_empty:
            return frozenset()
        if isinstance(group, kip848.ConsumerGroup | kip932.ShareGroup):
            return group.subscribed_topics()
        return group.subscribed_topics() or frozenset()

    def _remove_offsets(self, group_id: str, doomed: Sequence[TopicPartition]) -> None:
        if not doomed:
            return
        self._write(
            [
                (encode_key(OffsetKey(group_id, topic, partition)), None)
                for topic, partition in doomed
            ]
        )
        stored = self.offsets.get(group_id, {})
        for tp in doomed:
            stored.pop(tp, None)
        if not stored:
            self.offsets.pop(group_id, None)

    def forget_topic(self, topic: str) -> int:
        """Delete every group's offsets of a deleted topic (as Kafka does), so that a new
        topic of the same name does not inherit them; returns how many went."""
        removed = 0
        for group_id in list(self.offsets):
            doomed = [tp for tp in self.offsets[group_id] if tp[0] == topic]
            self._remove_offsets(group_id, doomed)
            removed += len(doomed)
        return removed

    # --- listing, describing, deleting ---------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, type) of every group."""
        if not self.loaded:
            raise GroupError(ErrorCode.coordinator_load_in_progress, "offsets are loading")
        result = []
        for group_id, group in sorted(self.groups.items()):
            view = group.view()
            result.append((group_id, view.protocol_type, view.state, view.kind))
        return result

    def describe_group(self, group_id: str) -> ClassicDescription | None:
        """A group in classic terms (DescribeGroups); None when there is no such group
        (Kafka describes it as Dead)."""
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return None
        if isinstance(group, ClassicGroup):
            return group.describe()
        return _describe_as_classic(group.view())

    def delete_group(self, group_id: str, now_ms: int) -> None:
        """DeleteGroups for one group: only an empty one (NON_EMPTY_GROUP otherwise)."""
        self._check_ready(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"no group {group_id!r}")
        if not group.is_empty:
            raise GroupError(ErrorCode.non_empty_group, f"group {group_id!r} has members")
        self._delete(group_id, now_ms)

    def _delete(self, group_id: str, now_ms: int) -> None:
        tombstones: list[RecordPair] = [
            (encode_key(OffsetKey(group_id, topic, partition)), None)
            for topic, partition in self.offsets.get(group_id, {})
        ]
        tombstones.append((encode_key(GroupKey(group_id)), None))
        if isinstance(self.groups.get(group_id), kip848.ConsumerGroup):
            tombstones.append((encode_key(ConsumerGroupKey(group_id)), None))
        self._write(tombstones)
        group = self.groups.pop(group_id)
        if isinstance(group, ClassicGroup):
            group.delete(now_ms)
        elif isinstance(group, kip932.ShareGroup):
            group.delete()
            self.share_listener.group_deleted(group_id)
        self.offsets.pop(group_id, None)
        self._empty_since.pop(group_id, None)

    def views(self) -> list[GroupView]:
        return [group.view() for _, group in sorted(self.groups.items())]

    def view(self, group_id: str) -> GroupView | None:
        group = self.groups.get(group_id)
        return None if group is None else group.view()

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        return {tp: value.offset for tp, value in self.offsets.get(group_id, {}).items()}

    def committed_on(self, topics: Container[str]) -> Iterator[tuple[str, TopicPartition, int]]:
        """Every group's committed offset on a partition of `topics` (for backlogs)."""
        for group_id, offsets in self.offsets.items():
            for tp, value in offsets.items():
                if tp.topic in topics:
                    yield group_id, tp, value.offset

    # --- time ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Replies:
        """Fire every group's due deadlines; the replies that produced."""
        replies: Replies = []
        for group_id, group in list(self.groups.items()):
            if isinstance(group, ClassicGroup):
                replies += group.tick(now_ms)
            elif isinstance(group, kip932.ShareGroup):
                expired = group.expire(now_ms)
                if expired:
                    self.share_listener.members_gone(group_id, expired, now_ms)
            else:
                expiring = group.expiring(now_ms)
                if expiring and self._downgrade(group, expiring, now_ms):
                    continue
                group.expire(now_ms)
                self._note_empty(group_id, group, now_ms)
        return replies

    def abort_waiting(self) -> Replies:
        """The broker is stopping: answer waiting joins and syncs with NOT_COORDINATOR, as
        a Kafka coordinator that unloads its groups does, so no answer waits for us."""
        replies: Replies = []
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                replies += group.abort_waiting(ErrorCode.not_coordinator)
        return replies

    def next_deadline_ms(self) -> int | None:
        deadlines = [group.next_deadline_ms() for group in self.groups.values()]
        return min((d for d in deadlines if d is not None), default=None)

    def expire_offsets(self, now_ms: int) -> int:
        """Apply offsets retention (see the module docstring); returns offsets removed."""
        removed = 0
        for group_id in list(self.groups):
            group = self.groups[group_id]
            if not group.is_empty or isinstance(group, kip932.ShareGroup):
                continue  # a share group lives until deleted: its state is elsewhere
            empty_since = (
                group.state_timestamp_ms
                if isinstance(group, ClassicGroup)
                else self._empty_since.get(group_id, -1)
            )
            retention = self.settings.offsets_retention_ms
            doomed = [
                tp
                for tp, value in self.offsets.get(group_id, {}).items()
                if _expired(value, empty_since, retention, now_ms)
            ]
            self._remove_offsets(group_id, doomed)
            removed += len(doomed)
            if group_id not in self.offsets:
                self._delete(group_id, now_ms)
        return removed

    # --- the log -------------------------------------------------------------------------

    def replay(self, key: bytes | None, value: bytes | None, now_ms: int) -> None:
        """Apply one record of the log (loading). Records of kinds we do not keep are
        skipped; a malformed one raises RecordFormatError."""
        if key is None:
            raise RecordFormatError("a record without a key")
        decoded = decode_key(key)
        if isinstance(decoded, OffsetKey):
            tp = TopicPartition(decoded.topic, decoded.partition)
            if value is None:
                stored = self.offsets.get(decoded.group_id, {})
                stored.pop(tp, None)
                if not stored:
                    self.offsets.pop(decoded.group_id, None)
                return
            self.offsets.setdefault(decoded.group_id, {})[tp] = decode_offset_value(value)
            if decoded.group_id not in self.groups:
                self._new_classic(decoded.group_id)
        elif isinstance(decoded, GroupKey):
            if value is None:
                self.groups.pop(decoded.group_id, None)
                return
            group = self.groups.get(decoded.group_id)
            if not isinstance(group, ClassicGroup):
                group = self._new_classic(decoded.group_id)
            group.restore(decode_group_value(value), now_ms)
        elif isinstance(decoded, ConsumerGroupKey):
            self._replay_consumer(decoded.group_id, value)

    def _replay_consumer(self, group_id: str, value: bytes | None) -> None:
        """A consumer group's record: the group is a consumer group at that epoch, or
        (a tombstone) no longer one; what remains of it then is its offsets, held by an
        empty classic group as for any offsets-only group."""
        current = self.groups.get(group_id)
        if value is None:
            if isinstance(current, kip848.ConsumerGroup):
                self._new_classic(group_id)
            return
        epoch = decode_consumer_group_value(value).epoch
        group = current if isinstance(current, kip848.ConsumerGroup) else None
        if group is None:
            group = self._new_consumer(group_id)
        group.restore_epoch(epoch)

    def finish_loading(self) -> None:
        # Groups whose records were all tombstoned but whose offsets came first.
        for group_id in [g for g, group in self.groups.items() if _forgotten(g, group, self)]:
            del self.groups[group_id]
        self.loaded = True

    def snapshot(self) -> Iterator[RecordPair]:
        """The whole live state as records (the compaction of the log)."""
        for group_id, group in sorted(self.groups.items()):
            if isinstance(group, ClassicGroup) and (group.generation or group.members):
                yield encode_key(GroupKey(group_id)), encode_value(group.record())
            if isinstance(group, kip848.ConsumerGroup):
                yield _consumer_record(group)
            for (topic, partition), value in sorted(self.offsets.get(group_id, {}).items()):
                yield encode_key(OffsetKey(group_id, topic, partition)), encode_value(value)


def _consumer_record(group: kip848.ConsumerGroup) -> RecordPair:
    key = encode_key(ConsumerGroupKey(group.group_id))
    return key, encode_value(ConsumerGroupValue(group.group_epoch))


def _not_upgraded(group_id: str, why: str) -> GroupError:
    """Kafka's refusal of an online upgrade: GROUP_ID_NOT_FOUND, which a consumer-protocol
    client reports as fatal; the classic group goes on unchanged."""
    log.info("group %r: not upgraded to a consumer group: %s", group_id, why)
    return GroupError(
        ErrorCode.group_id_not_found,
        f"Cannot upgrade classic group {group_id} to consumer group because {why}.",
    )


def _common_protocol(members: Sequence[kip848.ConsumerGroupMember]) -> str | None:
    """The classic protocol the members vote for (each its first choice among those all
    support, as a classic group picks one); None when they share none."""
    shared: frozenset[str] | None = None
    for m in members:
        assert m.classic is not None
        shared = m.classic.names() if shared is None else shared & m.classic.names()
    if not shared:
        return None
    votes: dict[str, int] = {}
    for m in members:
        assert m.classic is not None
        choice = next(name for name, _ in m.classic.protocols if name in shared)
        votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=lambda name: votes[name])


def _classic_value(
    generation: int,
    protocol: str,
    members: Sequence[kip848.ConsumerGroupMember],
    names: Mapping[uuid.UUID, str],
    now_ms: int,
) -> GroupValue:
    """The classic group a consumer group of classic members becomes: generation the
    group epoch, each member's current assignment in the consumer protocol's format."""
    records = []
    for m in members:
        assert m.classic is not None
        assigned = kip848.assigned_by_name(m.assigned, names)
        records.append(
            MemberRecord(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic.session_timeout_ms,
                m.classic.metadata(protocol),
                encode_assignment(assigned),
            )
        )
    leader = members[0].member_id
    return GroupValue(
        kip848.CONSUMER_PROTOCOL_TYPE, generation, protocol, leader, now_ms, tuple(records)
    )


def _forgotten(group_id: str, group: Group, coordinator: GroupCoordinator) -> bool:
    return (
        isinstance(group, ClassicGroup)
        and group.is_empty
        and group.generation == 0
        and group_id not in coordinator.offsets
    )


def _expired(value: OffsetValue, empty_since: int, retention_ms: int, now_ms: int) -> bool:
    if value.expire_timestamp_ms >= 0:
        return value.expire_timestamp_ms <= now_ms
    return max(value.commit_timestamp_ms, empty_since) + retention_ms <= now_ms


def _describe_as_classic(view: GroupView) -> ClassicDescription:
    """A KIP-848 group in classic terms (Kafka 4 describes it so too): the assignment in
    the consumer protocol's format, for tools that only speak classic."""
    return ClassicDescription(
        group_id=view.group_id,
        state=view.state,
        protocol_type=view.protocol_type,
        protocol=view.protocol,
        members=tuple(
            ClassicMemberDescription(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                metadata=b"",
                assignment=encode_assignment(member.assignment),
            )
            for member in view.members
        ),
    )
