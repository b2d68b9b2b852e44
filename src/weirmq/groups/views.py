"""Read-only views of groups: what leaves the coordinator.

The state machines keep their own richer state; these frozen records are all a reader
gets, so it can never change a group by accident. Two families:

- `GroupView`, `MemberView`, `PartitionLag`: the same shape for both kinds of group,
  shared by the admin API, the metrics and the CLI's tables;
- `ClassicDescription` and `ConsumerGroupDescription`: everything a protocol needs to
  describe a group in its own terms (Kafka's DescribeGroups and ConsumerGroupDescribe).
  They hold domain facts only; error codes, authorized operations and field names are
  the adapter's (protocols/kafka/apis/groups.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..types import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]
    """Partitions the member owns now, sorted (classic: decoded from its assignment bytes
    when the protocol type is "consumer"; otherwise empty)."""


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    kind: str
    """"classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848 ConsumerGroupHeartbeat)."""
    state: str
    """Kafka's state names: classic Empty, PreparingRebalance, CompletingRebalance, Stable,
    Dead; consumer Empty, Assigning, Reconciling, Stable, Dead."""
    protocol_type: str
    """"consumer" for Kafka consumers; "" for a group that only holds offsets."""
    protocol: str
    """The chosen assignor ("range", "cooperative-sticky", "uniform", ...) or ""."""
    generation: int
    """Classic: the generation id. Consumer: the group epoch."""
    members: tuple[MemberView, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int
    """-1 when the group has no committed offset for this partition."""
    log_end_offset: int
    """-1 when the partition does not exist (any more)."""
    lag: int | None
    """log end - committed; None when either is unknown."""
    member_id: str | None
    """The member that owns the partition now, if any."""


# --- classic terms (DescribeGroups) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassicMemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    """The member's subscription for the group's protocol (opaque to the coordinator)."""
    assignment: bytes
    """What the leader assigned it (opaque; for a KIP-848 group, written out in the
    consumer protocol's format, see protocol.py)."""


@dataclass(frozen=True, slots=True)
class ClassicDescription:
    """A group as classic tools see it. A classic group shows its protocol, metadata and
    assignments only while Stable (otherwise they are about to change), as Kafka does;
    a KIP-848 group is shown in classic terms too, as Kafka 4 does."""

    group_id: str
    state: str
    """As in `GroupView.state`."""
    protocol_type: str
    """"consumer" for Kafka consumers; "" for a group that only holds offsets."""
    protocol: str
    """The chosen assignor, or "" (none yet, or not Stable)."""
    members: tuple[ClassicMemberDescription, ...]


# --- KIP-848 terms (ConsumerGroupDescribe) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignedTopic:
    """Some partitions of one topic, named by id and by its current name."""

    topic_id: uuid.UUID
    topic: str
    partitions: tuple[int, ...]
    """Sorted."""


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[AssignedTopic, ...]
    """What the member was told it owns, by topic name; topics that no longer exist are
    left out."""
    target_assignment: tuple[AssignedTopic, ...]
    """What it is converging to, likewise."""
    classic: bool = False
    """A member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) in a
    consumer group, after an online upgrade (ConsumerGroupDescribe's member type 0)."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A KIP-848 consumer group with its epochs and each member's assignments."""

    group_id: str
    state: str
    """Empty, Assigning, Reconciling or Stable (a Dead group is not described)."""
    group_epoch: int
    assignment_epoch: int
    assignor: str
    """The server-side assignor the group uses ("uniform", "range")."""
    members: tuple[ConsumerMemberDescription, ...]
    """Sorted by member id."""
