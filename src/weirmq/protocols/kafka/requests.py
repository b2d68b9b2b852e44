"""Version-independent, typed Kafka requests: what a handler may read, at every version.

kio decodes each request into the dataclass of its exact version (`FetchRequest` v4 and v12
are different classes with different fields). A handler should not care which of a dozen
versions it answers, so it is written against one `Protocol` per request below: every field
it reads, typed, whatever the version. Fields that some advertised versions lack get the
value Kafka gives them when absent, declared once in `ABSENT` (by the path of field names
that leads to them), instead of `getattr(request, name, default)` scattered through the
handlers, where a misspelt name silently read the default on every version.

How a decoded request comes to have every field: the first time a request class is seen
(`conform`, called by the dispatcher once per class), each field of `ABSENT` that the class
lacks is set on the class itself as a class attribute, so an instance without that slot
reads the absent value. Nothing is done per request, and kio's readers, writers and
equality look only at the dataclass fields, which are untouched.

Tests check both directions for every API and advertised version
(tests/protocols/kafka/test_requests.py): every field a Protocol declares exists in every
advertised version or has an `ABSENT` entry, and every `ABSENT` path names a field some
version has, so a misspelt name fails a test instead of reading a default.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

FieldPath = tuple[str, ...]

# --- Fetch (1) -----------------------------------------------------------------------------


class FetchPartition(Protocol):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    partition_max_bytes: int


class FetchTopic(Protocol):
    topic: str
    """From v13, "" until the handler finds the topic of `topic_id` (it sets it)."""
    topic_id: uuid.UUID | None
    partitions: Sequence[FetchPartition]


class FetchRequest(Protocol):
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: Sequence[FetchTopic]


# --- ListOffsets (2) -----------------------------------------------------------------------


class ListOffsetsPartition(Protocol):
    partition_index: int
    current_leader_epoch: int
    timestamp: int


class ListOffsetsTopic(Protocol):
    name: str
    partitions: Sequence[ListOffsetsPartition]


class ListOffsetsRequest(Protocol):
    isolation_level: int
    topics: Sequence[ListOffsetsTopic]


# --- Metadata (3) --------------------------------------------------------------------------


class MetadataTopic(Protocol):
    name: str | None
    topic_id: uuid.UUID | None


class MetadataRequest(Protocol):
    topics: Sequence[MetadataTopic] | None
    allow_auto_topic_creation: bool
    include_cluster_authorized_operations: bool
    include_topic_authorized_operations: bool


# --- InitProducerId (22), OffsetForLeaderEpoch (23) ----------------------------------------


class InitProducerIdRequest(Protocol):
    transactional_id: str | None
    transaction_timeout: datetime.timedelta
    producer_id: int
    """The producer id and epoch the client has (KIP-360, v3+); -1 without."""
    producer_epoch: int


class EpochPartition(Protocol):
    partition: int
    current_leader_epoch: int
    leader_epoch: int


class EpochTopic(Protocol):
    topic: str
    partitions: Sequence[EpochPartition]


class OffsetForLeaderEpochRequest(Protocol):
    topics: Sequence[EpochTopic]


# --- admin: topics and partitions ----------------------------------------------------------


class CreatableConfig(Protocol):
    name: str
    value: str | None


class CreatableAssignment(Protocol):
    partition_index: int
    broker_ids: Sequence[int]


class CreatableTopic(Protocol):
    name: str
    num_partitions: int
    replication_factor: int
    assignments: Sequence[CreatableAssignment]
    configs: Sequence[CreatableConfig]


class CreateTopicsRequest(Protocol):
    topics: Sequence[CreatableTopic]
    validate_only: bool


class DeleteTopicState(Protocol):
    name: str | None
    topic_id: uuid.UUID


class DeleteTopicsRequest(Protocol):
    topic_names: Sequence[str]
    """v0-5 name topics here (empty from v6)."""
    topics: Sequence[DeleteTopicState]
    """v6+ name topics, or topic ids, here (empty before v6)."""


class DeleteRecordsPartition(Protocol):
    partition_index: int
    offset: int


class DeleteRecordsTopic(Protocol):
    name: str
    partitions: Sequence[DeleteRecordsPartition]


class DeleteRecordsRequest(Protocol):
    topics: Sequence[DeleteRecordsTopic]


class CreatePartitionsAssignment(Protocol):
    broker_ids: Sequence[int]


class CreatePartitionsTopic(Protocol):
    name: str
    count: int
    assignments: Sequence[CreatePartitionsAssignment] | None


class CreatePartitionsRequest(Protocol):
    topics: Sequence[CreatePartitionsTopic]
    validate_only: bool


# --- admin: configs, the cluster, log dirs -------------------------------------------------


class DescribeConfigsResource(Protocol):
    resource_type: int
    resource_name: str
    configuration_keys: Sequence[str] | None


class DescribeConfigsRequest(Protocol):
    resources: Sequence[DescribeConfigsResource]
    include_synonyms: bool
    include_documentation: bool


class AlterableConfig(Protocol):
    name: str
    value: str | None


class AlterConfigsResource(Protocol):
    resource_type: int
    resource_name: str
    configs: Sequence[AlterableConfig]


class AlterConfigsRequest(Protocol):
    resources: Sequence[AlterConfigsResource]
    validate_only: bool


class AlterableConfigOp(Protocol):
    name: str
    config_operation: int
    value: str | None


class IncrementalAlterConfigsResource(Protocol):
    resource_type: int
    resource_name: str
    configs: Sequence[AlterableConfigOp]


class IncrementalAlterConfigsRequest(Protocol):
    resources: Sequence[IncrementalAlterConfigsResource]
    validate_only: bool


class DescribeClusterRequest(Protocol):
    include_cluster_authorized_operations: bool
    endpoint_type: int


class DescribeLogDirsTopic(Protocol):
    topic: str
    partitions: Sequence[int]


class DescribeLogDirsRequest(Protocol):
    topics: Sequence[DescribeLogDirsTopic] | None


# --- groups: coordinator, membership -------------------------------------------------------


class FindCoordinatorRequest(Protocol):
    key: str
    """v0-3: the one key asked for ("" from v4)."""
    key_type: int
    coordinator_keys: Sequence[str]
    """v4+: the keys asked for (empty before v4)."""


class JoinGroupProtocol(Protocol):
    name: str
    metadata: bytes


class JoinGroupRequest(Protocol):
    group_id: str
    session_timeout: datetime.timedelta
    rebalance_timeout: datetime.timedelta | None
    """None in v0, where the session timeout is also the rebalance timeout."""
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: Sequence[JoinGroupProtocol]


class SyncGroupAssignment(Protocol):
    member_id: str
    assignment: bytes


class SyncGroupRequest(Protocol):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Sequence[SyncGroupAssignment]


class HeartbeatRequest(Protocol):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class LeavingMember(Protocol):
    member_id: str
    group_instance_id: str | None
    reason: str | None


class LeaveGroupRequest(Protocol):
    group_id: str
    member_id: str
    """v0-2: the one member leaving ("" from v3)."""
    members: Sequence[LeavingMember]
    """v3+: the members leaving (empty before v3)."""


# --- groups: offsets, listing, deleting ----------------------------------------------------


class CommitPartition(Protocol):
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None


class CommitTopic(Protocol):
    name: str
    partitions: Sequence[CommitPartition]


class OffsetCommitRequest(Protocol):
    group_id: str
    generation_id_or_member_epoch: int
    """The generation (classic groups) or member epoch (KIP-848), in every version."""
    member_id: str
    group_instance_id: str | None
    topics: Sequence[CommitTopic]


class OffsetFetchTopic(Protocol):
    name: str
    partition_indexes: Sequence[int]


class OffsetFetchGroup(Protocol):
    group_id: str
    member_id: str | None
    member_epoch: int
    topics: Sequence[OffsetFetchTopic] | None


class OffsetFetchRequest(Protocol):
    group_id: str
    """v1-7: the one group asked for ("" from v8)."""
    topics: Sequence[OffsetFetchTopic] | None
    """v1-7: its topics (None: all of them; None from v8 too, where groups say)."""
    groups: Sequence[OffsetFetchGroup]
    """v8+: the groups asked for (empty before v8)."""
    require_stable: bool
    """v7+ (KIP-447): offsets a transaction has yet to commit answer UNSTABLE_OFFSET_COMMIT."""


class OffsetDeletePartition(Protocol):
    partition_index: int


class OffsetDeleteTopic(Protocol):
    name: str
    partitions: Sequence[OffsetDeletePartition]


class OffsetDeleteRequest(Protocol):
    group_id: str
    topics: Sequence[OffsetDeleteTopic]


class DescribeGroupsRequest(Protocol):
    groups: Sequence[str]


class ListGroupsRequest(Protocol):
    states_filter: Sequence[str]
    types_filter: Sequence[str]


class DeleteGroupsRequest(Protocol):
    groups_names: Sequence[str]


# --- KIP-848 consumer groups ---------------------------------------------------------------


class OwnedTopicPartitions(Protocol):
    topic_id: uuid.UUID
    partitions: Sequence[int]


class ConsumerGroupHeartbeatRequest(Protocol):
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout: datetime.timedelta
    subscribed_topic_names: Sequence[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    topic_partitions: Sequence[OwnedTopicPartitions] | None


class ConsumerGroupDescribeRequest(Protocol):
    group_ids: Sequence[str]


# --- client quotas (48, 49) -----------------------------------------------------------------


class QuotaComponent(Protocol):
    entity_type: str
    match_type: int
    match: str | None


class DescribeClientQuotasRequest(Protocol):
    components: Sequence[QuotaComponent]
    strict: bool


class QuotaEntity(Protocol):
    entity_type: str
    entity_name: str | None


class QuotaOp(Protocol):
    key: str
    value: float
    remove: bool


class QuotaEntry(Protocol):
    entity: Sequence[QuotaEntity]
    ops: Sequence[QuotaOp]


class AlterClientQuotasRequest(Protocol):
    entries: Sequence[QuotaEntry]
    validate_only: bool


# --- share groups (76-79, KIP-932) ---------------------------------------------------------


class ShareGroupHeartbeatRequest(Protocol):
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: Sequence[str] | None


class ShareGroupDescribeRequest(Protocol):
    group_ids: Sequence[str]


class ShareAckBatch(Protocol):
    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


class ShareFetchPartition(Protocol):
    partition_index: int
    acknowledgement_batches: Sequence[ShareAckBatch]


class ShareFetchTopic(Protocol):
    topic_id: uuid.UUID | None
    partitions: Sequence[ShareFetchPartition]


class ShareForgottenTopic(Protocol):
    topic_id: uuid.UUID | None
    partitions: Sequence[int]


class ShareFetchRequest(Protocol):
    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int
    topics: Sequence[ShareFetchTopic]
    forgotten_topics_data: Sequence[ShareForgottenTopic]


class ShareAckPartition(Protocol):
    partition_index: int
    acknowledgement_batches: Sequence[ShareAckBatch]


class ShareAckTopic(Protocol):
    topic_id: uuid.UUID | None
    partitions: Sequence[ShareAckPartition]


class ShareAcknowledgeRequest(Protocol):
    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    topics: Sequence[ShareAckTopic]


# --- single-node cluster admin (apis/cluster.py) -------------------------------------------


class TopicPartitionsEntry(Protocol):
    topic: str
    partitions: Sequence[int]


class ElectLeadersRequest(Protocol):
    election_type: int
    topic_partitions: Sequence[TopicPartitionsEntry] | None


class ReplicaLogDirTopic(Protocol):
    name: str
    partitions: Sequence[int]


class ReplicaLogDir(Protocol):
    path: str
    topics: Sequence[ReplicaLogDirTopic]


class AlterReplicaLogDirsRequest(Protocol):
    dirs: Sequence[ReplicaLogDir]


class ReassignablePartition(Protocol):
    partition_index: int
    replicas: Sequence[int] | None


class ReassignableTopic(Protocol):
    name: str
    partitions: Sequence[ReassignablePartition]


class AlterPartitionReassignmentsRequest(Protocol):
    allow_replication_factor_change: bool
    topics: Sequence[ReassignableTopic]


class ListReassignmentsTopic(Protocol):
    name: str
    partition_indexes: Sequence[int]


class ListPartitionReassignmentsRequest(Protocol):
    topics: Sequence[ListReassignmentsTopic] | None


class QuorumPartition(Protocol):
    partition_index: int


class QuorumTopic(Protocol):
    topic_name: str
    partitions: Sequence[QuorumPartition]


class DescribeQuorumRequest(Protocol):
    topics: Sequence[QuorumTopic]


class TopicRequest(Protocol):
    name: str


class PartitionsCursor(Protocol):
    topic_name: str
    partition_index: int


class DescribeTopicPartitionsRequest(Protocol):
    topics: Sequence[TopicRequest]
    response_partition_limit: int
    cursor: PartitionsCursor | None


class ListConfigResourcesRequest(Protocol):
    resource_types: Sequence[int]


# --- transactions (24-28, 61, 65, 66) -------------------------------------------------------


class TxnTopic(Protocol):
    name: str
    partitions: Sequence[int]


class AddPartitionsTransaction(Protocol):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    topics: Sequence[TxnTopic]


class AddPartitionsToTxnRequest(Protocol):
    v3_and_below_transactional_id: str
    """v0-3: one transaction; v4+ (brokers, KIP-890): `transactions`."""
    v3_and_below_producer_id: int
    v3_and_below_producer_epoch: int
    v3_and_below_topics: Sequence[TxnTopic]
    transactions: Sequence[AddPartitionsTransaction]


class AddOffsetsToTxnRequest(Protocol):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


class EndTxnRequest(Protocol):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


class TxnOffsetPartition(Protocol):
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None


class TxnOffsetTopic(Protocol):
    name: str
    partitions: Sequence[TxnOffsetPartition]


class TxnOffsetCommitRequest(Protocol):
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: Sequence[TxnOffsetTopic]


class ProducersTopic(Protocol):
    name: str
    partition_indexes: Sequence[int]


class DescribeProducersRequest(Protocol):
    topics: Sequence[ProducersTopic]


class DescribeTransactionsRequest(Protocol):
    transactional_ids: Sequence[str]


class ListTransactionsRequest(Protocol):
    state_filters: Sequence[str]
    producer_id_filters: Sequence[int]
    duration_filter: int
    transactional_id_pattern: str | None


# --- what absent fields read ----------------------------------------------------------------

ABSENT: dict[int, dict[FieldPath, Any]] = {
    # Fetch: sessions from v7, the leader-epoch fence from v9.
    1: {
        ("session_id",): 0,
        ("session_epoch",): -1,
        ("topics", "partitions", "current_leader_epoch"): -1,
        ("topics", "topic"): "",
        ("topics", "topic_id"): None,
    },
    # ListOffsets: the leader-epoch fence from v4.
    2: {("topics", "partitions", "current_leader_epoch"): -1, ("isolation_level",): 0},
    # Metadata: v0-3 always auto-create; topic ids from v10; operations from v8.
    3: {
        ("allow_auto_topic_creation",): True,
        ("include_cluster_authorized_operations",): False,
        ("include_topic_authorized_operations",): False,
        ("topics", "topic_id"): None,
    },
    # OffsetCommit: the leader epoch from v6; static membership from v7.
    8: {
        ("group_instance_id",): None,
        ("topics", "partitions", "committed_leader_epoch"): -1,
    },
    # OffsetFetch: one group until v7, many from v8 (with the member from v9).
    9: {
        ("group_id",): "",
        ("topics",): None,
        ("groups",): (),
        ("groups", "member_id"): None,
        ("groups", "member_epoch"): -1,
        ("require_stable",): False,
    },
    # FindCoordinator: key types from v1; one key until v3, many from v4.
    10: {("key",): "", ("key_type",): 0, ("coordinator_keys",): ()},
    # JoinGroup: the rebalance timeout from v1, static membership from v5.
    11: {("rebalance_timeout",): None, ("group_instance_id",): None},
    # Heartbeat: static membership from v3.
    12: {("group_instance_id",): None},
    # LeaveGroup: one member until v2, many from v3, each with a reason from v5.
    13: {("member_id",): "", ("members",): (), ("members", "reason"): None},
    # SyncGroup: static membership from v3, the protocol's type and name from v5.
    14: {("group_instance_id",): None, ("protocol_type",): None, ("protocol_name",): None},
    # ListGroups: filters by state from v4, by type from v5.
    16: {("states_filter",): (), ("types_filter",): ()},
    # DeleteTopics: names until v5, topic states from v6.
    20: {("topic_names",): (), ("topics",): ()},
    # DescribeConfigs: synonyms from v1, documentation from v3.
    32: {("include_synonyms",): False, ("include_documentation",): False},
    # DescribeCluster: the endpoint type from v1 (1: brokers).
    60: {("endpoint_type",): 1},
    # ConsumerGroupHeartbeat: regular-expression subscriptions from v1.
    68: {("subscribed_topic_regex",): None},
    # ElectLeaders: the election type from v1 (v0 elects the preferred leader, 0).
    43: {("election_type",): 0},
    # AlterPartitionReassignments: KIP-1074's replication factor switch from v1.
    45: {("allow_replication_factor_change",): True},
    # ListConfigResources: v0 (ListClientMetricsResources) lists client metrics only.
    74: {("resource_types",): (16,)},
    # InitProducerId: the client's producer id and epoch from v3 (KIP-360).
    22: {("producer_id",): -1, ("producer_epoch",): -1},
    # AddPartitionsToTxn: one transaction until v3, many (with verify_only) from v4.
    24: {
        ("v3_and_below_transactional_id",): "",
        ("v3_and_below_producer_id",): -1,
        ("v3_and_below_producer_epoch",): -1,
        ("v3_and_below_topics",): (),
        ("transactions",): (),
    },
    # TxnOffsetCommit: the leader epoch from v2, the group member from v3 (KIP-447).
    28: {
        ("topics", "partitions", "committed_leader_epoch"): -1,
        ("generation_id",): -1,
        ("member_id",): "",
        ("group_instance_id",): None,
    },
    # ListTransactions: the duration filter from v1, the id pattern from v2.
    66: {("duration_filter",): -1, ("transactional_id_pattern",): None},
}
"""Per API key, the value a field reads in versions that lack it, by its path."""


# --- conforming kio's classes --------------------------------------------------------------


def conform(api_key: int, cls: type[Any]) -> None:
    """Give request class `cls` (one version of `api_key`) every field of `ABSENT` it
    lacks, as class attributes; see the module docstring. Idempotent."""
    for path, value in ABSENT.get(api_key, {}).items():
        owner = _class_at(cls, path[:-1])
        if owner is not None and path[-1] not in _field_names(owner):
            setattr(owner, path[-1], value)


def _class_at(cls: type[Any], path: FieldPath) -> type[Any] | None:
    """The entity class reached from `cls` through `path`; None if a step is missing."""
    for name in path:
        hints = typing.get_type_hints(cls)
        if name not in hints:
            return None
        found = entity_class(hints[name])
        if found is None:
            return None
        cls = found
    return cls


def entity_class(hint: Any) -> type[Any] | None:
    """The dataclass a field holds (one, or a tuple of them; None allowed), else None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and args:
        hint = args[0]
    elif args and type(None) in args:  # X | None
        inner = [a for a in args if a is not type(None)]
        hint = entity_class(inner[0]) if len(inner) == 1 else None
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


PROTOCOLS: Mapping[int, type[Any]] = {
    1: FetchRequest,
    2: ListOffsetsRequest,
    3: MetadataRequest,
    19: CreateTopicsRequest,
    20: DeleteTopicsRequest,
    21: DeleteRecordsRequest,
    22: InitProducerIdRequest,
    23: OffsetForLeaderEpochRequest,
    32: DescribeConfigsRequest,
    33: AlterConfigsRequest,
    35: DescribeLogDirsRequest,
    37: CreatePartitionsRequest,
    44: IncrementalAlterConfigsRequest,
    60: DescribeClusterRequest,
    8: OffsetCommitRequest,
    9: OffsetFetchRequest,
    10: FindCoordinatorRequest,
    11: JoinGroupRequest,
    12: HeartbeatRequest,
    13: LeaveGroupRequest,
    14: SyncGroupRequest,
    15: DescribeGroupsRequest,
    16: ListGroupsRequest,
    42: DeleteGroupsRequest,
    47: OffsetDeleteRequest,
    48: DescribeClientQuotasRequest,
    49: AlterClientQuotasRequest,
    68: ConsumerGroupHeartbeatRequest,
    69: ConsumerGroupDescribeRequest,
    76: ShareGroupHeartbeatRequest,
    77: ShareGroupDescribeRequest,
    78: ShareFetchRequest,
    79: ShareAcknowledgeRequest,
    34: AlterReplicaLogDirsRequest,
    43: ElectLeadersRequest,
    45: AlterPartitionReassignmentsRequest,
    46: ListPartitionReassignmentsRequest,
    55: DescribeQuorumRequest,
    74: ListConfigResourcesRequest,
    75: DescribeTopicPartitionsRequest,
    24: AddPartitionsToTxnRequest,
    25: AddOffsetsToTxnRequest,
    26: EndTxnRequest,
    28: TxnOffsetCommitRequest,
    61: DescribeProducersRequest,
    65: DescribeTransactionsRequest,
    66: ListTransactionsRequest,
}
"""The typed view of each API's request (Produce has its own decoder, `wire.fast`), for
the test that checks the views against kio's classes."""
