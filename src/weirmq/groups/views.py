"""Read-only views of groups, shared by the admin API, the metrics and the CLI's tables.

The state machines keep their own richer state; these frozen records are what leaves the
coordinator, so a reader can never change a group by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

TopicPartition = tuple[str, int]


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
