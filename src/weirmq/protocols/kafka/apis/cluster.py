"""The cluster admin APIs of replicated Kafka, answered as a one-node KRaft cluster answers:

    AlterReplicaLogDirs (34)          ElectLeaders (43)
    AlterPartitionReassignments (45)  ListPartitionReassignments (46)
    DescribeQuorum (55)               ListConfigResources (74)
    DescribeTopicPartitions (75)

One broker is the whole cluster: it leads every partition, is its only replica, and is
the only voter of the metadata quorum. So nothing here changes anything; each API gives
the answer Kafka gives on a one-node cluster, which tools (kafka-leader-election,
kafka-reassign-partitions, kafka-metadata-quorum, AdminClient.describeTopics) understand:

- ElectLeaders: every named partition already has its preferred (and only) leader,
  ELECTION_NOT_NEEDED; an unknown one UNKNOWN_TOPIC_OR_PARTITION. A null list means every
  partition, and then, as Kafka's controller does, partitions needing no election are left
  out: the answer is empty.
- AlterReplicaLogDirs: the one log dir is the data directory. Moving a replica to it is a
  successful no-op; any other path is LOG_DIR_NOT_FOUND.
- AlterPartitionReassignments: the only assignment possible is [this node], accepted as a
  no-op; another broker id, a repeated id or an empty list is INVALID_REPLICA_ASSIGNMENT;
  cancelling (null replicas) is NO_REASSIGNMENT_IN_PROGRESS. ListPartitionReassignments
  has none in progress, ever.
- DescribeQuorum: `__cluster_metadata` partition 0, this node its leader and only voter,
  caught up (its log end is the high watermark), no observers; v2 names the node's
  listener. There is no metadata log, so its offsets are 0.
- DescribeTopicPartitions (KIP-966): topics by name (all when none are named), sorted,
  from the cursor's topic and partition on, at most `response_partition_limit`
  partitions (capped at `PARTITION_LIMIT_MAX`, Kafka's max.request.partition.size.limit);
  when the limit cuts the answer short, `next_cursor` names where to go on. Eligible
  leader replicas are empty: the leader is the whole ISR.
- ListConfigResources (KIP-1142; v0 was ListClientMetricsResources): the config resources
  of the types asked (all when none are): topics, the broker and its loggers (named by
  node id), groups that have configs; no client-metrics resources exist. A type that is
  not a config resource type is UNSUPPORTED_VERSION, Kafka's answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from ....broker.core import INTERNAL_TOPICS, Broker
from ....broker.topics import Topic
from ....errors import ErrorCode
from ....types import RequestContext
from ..requests import (
    AlterPartitionReassignmentsRequest,
    AlterReplicaLogDirsRequest,
    DescribeQuorumRequest,
    DescribeTopicPartitionsRequest,
    ElectLeadersRequest,
    ListConfigResourcesRequest,
    ListPartitionReassignmentsRequest,
    ReassignablePartition,
)
from .metadata import TOPIC_OPERATIONS

METADATA_TOPIC: Final = "__cluster_metadata"
"""KRaft's metadata log, the one partition DescribeQuorum describes."""
QUORUM_EPOCH: Final = 1
"""The quorum's epoch: the first election, which this node won alone and for good."""
PARTITION_LIMIT_MAX: Final = 2000
"""Kafka's max.request.partition.size.limit: DescribeTopicPartitions' ceiling."""
ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1
RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER = 2, 4, 8
RESOURCE_CLIENT_METRICS, RESOURCE_GROUP = 16, 32
CONFIG_RESOURCE_TYPES: Final = (
    RESOURCE_TOPIC,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
)


def _partitions_of(broker: Broker, name: str) -> int | None:
    """How many partitions topic `name` has; None when there is no such topic."""
    topic = broker.topics.get(name)
    return None if topic is None else topic.partitions


# --- ElectLeaders (43) ------------------------------------------------------------------------


def handle_elect_leaders(
    broker: Broker, request: ElectLeadersRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    if int(request.election_type) not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        return {"error_code": ErrorCode.invalid_request, "replica_election_results": []}
    results = []
    for entry in request.topic_partitions or ():  # None: every partition, none needs one
        count = _partitions_of(broker, entry.topic)
        partitions = []
        for index in entry.partitions:
            known = count is not None and 0 <= int(index) < count
            code = ErrorCode.election_not_needed if known else ErrorCode.unknown_topic_or_partition
            message = (
                "the leader is already the preferred and only replica"
                if known
                else "no such topic or partition"
            )
            partitions.append(
                {"partition_id": int(index), "error_code": code, "error_message": message}
            )
        results.append({"topic": entry.topic, "partition_result": partitions})
    return {"error_code": ErrorCode.none, "replica_election_results": results}


# --- AlterReplicaLogDirs (34) -----------------------------------------------------------------


def handle_alter_replica_log_dirs(
    broker: Broker, request: AlterReplicaLogDirsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    log_dir = broker.logs.data_dir.resolve()
    results: dict[str, list[dict[str, Any]]] = {}
    for wanted in request.dirs:
        here = _same_dir(wanted.path, log_dir)
        for topic in wanted.topics:
            count = _partitions_of(broker, topic.name)
            answers = results.setdefault(topic.name, [])
            for index in topic.partitions:
                if count is None or not 0 <= int(index) < count:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    code = ErrorCode.none if here else ErrorCode.log_dir_not_found
                answers.append({"partition_index": int(index), "error_code": code})
    return {
        "results": [
            {"topic_name": name, "partitions": partitions} for name, partitions in results.items()
        ]
    }


def _same_dir(path: str, log_dir: Path) -> bool:
    """Whether `path` names the broker's log dir (as DescribeLogDirs gives it, or any other
    spelling of it)."""
    if not path:
        return False
    try:
        return Path(path).resolve() == log_dir
    except (OSError, RuntimeError, ValueError):  # a path the OS cannot even resolve
        return False


# --- AlterPartitionReassignments (45), ListPartitionReassignments (46) ------------------------


def handle_alter_partition_reassignments(
    broker: Broker, request: AlterPartitionReassignmentsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    allow_change = bool(request.allow_replication_factor_change)
    responses = []
    for topic in request.topics:
        count = _partitions_of(broker, topic.name)
        partitions = []
        for wanted in topic.partitions:
            code, message = _reassignment(broker, count, wanted, allow_change)
            partitions.append(
                {
                    "partition_index": int(wanted.partition_index),
                    "error_code": code,
                    "error_message": message,
                }
            )
        responses.append({"name": topic.name, "partitions": partitions})
    return {
        "allow_replication_factor_change": allow_change,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": responses,
    }


def _reassignment(
    broker: Broker, count: int | None, wanted: ReassignablePartition, allow_change: bool
) -> tuple[ErrorCode, str | None]:
    """The answer to one partition's reassignment: the only one possible is a no-op."""
    if count is None or not 0 <= int(wanted.partition_index) < count:
        return ErrorCode.unknown_topic_or_partition, None
    replicas = wanted.replicas
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, "no reassignment is in progress"
    ids = [int(r) for r in replicas]
    if not ids:
        return ErrorCode.invalid_replica_assignment, "the replica list is empty"
    if len(set(ids)) != len(ids):
        return ErrorCode.invalid_replica_assignment, f"the replica list {ids} repeats a broker"
    if not allow_change and len(ids) != 1:
        return (
            ErrorCode.invalid_replication_factor,
            f"the replication factor would change from 1 to {len(ids)}",
        )
    strangers = [r for r in ids if r != broker.node_id]
    if strangers:
        return (
            ErrorCode.invalid_replica_assignment,
            f"broker {strangers[0]} is not registered: broker {broker.node_id} is the only one",
        )
    return ErrorCode.none, None


def handle_list_partition_reassignments(
    broker: Broker, request: ListPartitionReassignmentsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    return {"error_code": ErrorCode.none, "error_message": None, "topics": []}


# --- DescribeQuorum (55) ----------------------------------------------------------------------


def handle_describe_quorum(
    broker: Broker, request: DescribeQuorumRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    asked = [(t.topic_name, int(p.partition_index)) for t in request.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:  # Kafka: exactly the metadata partition, or refused
        partition = _quorum_partition(broker, ErrorCode.unknown_topic_or_partition)
    else:
        partition = _quorum_partition(broker, ErrorCode.none)
    host, port = broker.advertised
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
        "nodes": [
            {
                "node_id": broker.node_id,
                "listeners": [{"name": "PLAINTEXT", "host": host, "port": port}],
            }
        ],
    }


def _quorum_partition(broker: Broker, code: ErrorCode) -> dict[str, Any]:
    if code is not ErrorCode.none:
        return {
            "partition_index": 0,
            "error_code": code,
            "error_message": None,
            "leader_id": -1,
            "leader_epoch": -1,
            "high_watermark": -1,
            "current_voters": [],
            "observers": [],
        }
    now_ms = broker.clock()
    voter = {
        "replica_id": broker.node_id,
        "replica_directory_id": None,  # no directory id: Kafka's zero uuid
        "log_end_offset": 0,
        "last_fetch_timestamp": now_ms,  # the leader is always caught up with itself
        "last_caught_up_timestamp": now_ms,
    }
    return {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": broker.node_id,
        "leader_epoch": QUORUM_EPOCH,
        "high_watermark": 0,
        "current_voters": [voter],
        "observers": [],
    }


# --- DescribeTopicPartitions (75) -------------------------------------------------------------


def handle_describe_topic_partitions(
    broker: Broker, request: DescribeTopicPartitionsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    cursor = request.cursor
    after = "" if cursor is None else cursor.topic_name
    every = not request.topics
    names = [t.name for t in broker.topics] if every else [t.name for t in request.topics]
    names = sorted({name for name in names if name >= after})
    refusal = None
    if cursor is not None and not every and cursor.topic_name not in names:
        refusal = f"the topic list must hold the cursor's topic {cursor.topic_name!r}"
    elif cursor is not None and int(cursor.partition_index) < 0:
        refusal = f"the cursor's partition must be valid, got {int(cursor.partition_index)}"
    if refusal is not None:  # Kafka's answer to INVALID_REQUEST: every topic named, empty
        return {
            "topics": [_unknown(t.name, ErrorCode.invalid_request) for t in request.topics],
            "next_cursor": None,
        }
    limit = max(min(int(request.response_partition_limit), PARTITION_LIMIT_MAX), 1)
    start = {after: int(cursor.partition_index)} if cursor is not None else {}
    return _described(broker, names, start, limit, every)


def _described(
    broker: Broker, names: Iterable[str], start: dict[str, int], limit: int, every: bool
) -> dict[str, Any]:
    topics: list[dict[str, Any]] = []
    remaining = limit
    for name in names:
        if remaining == 0:  # the next answer starts with this topic
            return {"topics": topics, "next_cursor": {"topic_name": name, "partition_index": 0}}
        topic = broker.topics.get(name)
        if topic is None:
            if not every:
                topics.append(_unknown(name, ErrorCode.unknown_topic_or_partition))
            continue
        first = start.get(name, 0)
        last = min(topic.partitions, first + remaining)
        topics.append(_topic(broker, topic, range(first, last)))
        if last < topic.partitions:
            return {"topics": topics, "next_cursor": {"topic_name": name, "partition_index": last}}
        remaining -= max(last - first, 0)
    return {"topics": topics, "next_cursor": None}


def _unknown(name: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [],
    }


def _topic(broker: Broker, topic: Topic, indexes: range) -> dict[str, Any]:
    node = broker.node_id
    partitions = []
    for index in indexes:
        partition = broker.partition(topic.name, index)
        online = partition is not None and partition.offline_reason is None
        partitions.append(
            {
                "error_code": ErrorCode.none if online else ErrorCode.kafka_storage_error,
                "partition_index": index,
                "leader_id": node if online else -1,
                "leader_epoch": 0 if partition is None else partition.leader_epoch,
                "replica_nodes": [node],
                "isr_nodes": [node] if online else [],
                "eligible_leader_replicas": [],
                "last_known_elr": [],
                "offline_replicas": [] if online else [node],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": TOPIC_OPERATIONS,
    }


# --- ListConfigResources (74) -----------------------------------------------------------------


def handle_list_config_resources(
    broker: Broker, request: ListConfigResourcesRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    asked = {int(t) for t in request.resource_types} or set(CONFIG_RESOURCE_TYPES)
    if not asked <= set(CONFIG_RESOURCE_TYPES):
        return {"error_code": ErrorCode.unsupported_version, "config_resources": []}
    resources: list[dict[str, Any]] = []
    node = str(broker.node_id)
    if RESOURCE_TOPIC in asked:
        resources += [_resource(t.name, RESOURCE_TOPIC) for t in broker.topics]
    if RESOURCE_BROKER in asked:
        resources.append(_resource(node, RESOURCE_BROKER))
    if RESOURCE_BROKER_LOGGER in asked:
        resources.append(_resource(node, RESOURCE_BROKER_LOGGER))
    if RESOURCE_GROUP in asked:
        resources += [_resource(g, RESOURCE_GROUP) for g in sorted(broker.group_configs.groups())]
    return {"error_code": ErrorCode.none, "config_resources": resources}


def _resource(name: str, kind: int) -> dict[str, Any]:
    return {"resource_name": name, "resource_type": kind}
