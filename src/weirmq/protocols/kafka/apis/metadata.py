"""Metadata (API key 3) and InitProducerId (API key 22).

Metadata describes one broker (this one, at its advertised address) leading every
partition at leader epoch 0, with itself as the only replica and the only in-sync replica.
Requested topics that do not exist are created when both the broker setting and the
request allow it (`allow_auto_topic_creation`, v4+; older versions always allow), which
client test suites assume; the new topic is answered ready at once, because creation is
synchronous here. Auto-creation is bounded (issue 20): past `auto_create_topics_rate` for
the client id, the topic is answered THROTTLING_QUOTA_EXCEEDED (retriable: clients ask
again), and past `max_broker_partitions` UNKNOWN_TOPIC_OR_PARTITION, Kafka's answer for a
topic it does not create; the broker logs why. A topic still being made by a large
CreateTopics is answered LEADER_NOT_AVAILABLE, as Kafka answers a topic being created.
Which topics a request means:

    v0        an empty list means every topic
    v1+       null means every topic, an empty list none
    v12+      a topic may be named by id instead of name (v10-11: INVALID_REQUEST)

InitProducerId without a transactional id gives an idempotent producer a fresh producer
id at epoch 0, as Kafka does (an id is never reused; see `topics.ProducerIdAllocator`).
With a transactional id, the transaction coordinator answers (apis/transactions.py).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ....broker.core import INTERNAL_TOPICS, LEADER_EPOCH, Broker
from ....broker.topics import Topic
from ....errors import ErrorCode, KafkaError
from ....types import RequestContext
from ..requests import InitProducerIdRequest, MetadataRequest, MetadataTopic
from .transactions import init_transactional_producer

TOPIC_ID_LOOKUP_VERSION = 12
"""Metadata versions below this have a topic id field but cannot look topics up by it."""
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
"""Kafka's value for "not requested" in the authorized-operations fields."""
# Every topic operation (Kafka's AclOperation codes 3..11 without CLUSTER_ACTION 9 and
# IDEMPOTENT_WRITE 12): there is no authorization yet, so everything is allowed.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Kafka's seven cluster operations (CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12), as DescribeCluster gives
# them; WRITE is not one (Metadata v8-v10 asked for them too).
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def handle_metadata(
    broker: Broker, request: MetadataRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    host, port = broker.advertised
    node = broker.node_id
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        topics = [_describe(broker, t) for t in broker.topics]
    else:
        allow = bool(request.allow_auto_topic_creation)
        topics = [_lookup(broker, entry, allow, version, ctx.client_id) for entry in wanted]
    include_topic_ops = bool(request.include_topic_authorized_operations)
    include_cluster_ops = bool(request.include_cluster_authorized_operations)
    for topic in topics:
        topic["topic_authorized_operations"] = (
            TOPIC_OPERATIONS if include_topic_ops else AUTHORIZED_OPERATIONS_OMITTED
        )
    return {
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": node,
        "topics": topics,
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS if include_cluster_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
        "error_code": ErrorCode.none,
    }


def _lookup(
    broker: Broker, entry: MetadataTopic, allow_auto_create: bool, version: int, client_id: str
) -> dict[str, Any]:
    name, topic_id = entry.name, entry.topic_id
    if name is None:
        if version < TOPIC_ID_LOOKUP_VERSION:  # v10-11 carry ids but cannot name by them
            return _error(ErrorCode.invalid_request, "", None)
        found = broker.topics.by_id(topic_id) if topic_id is not None else None
        if found is None:
            return _error(ErrorCode.unknown_topic_id, None, topic_id)
        return _describe(broker, found)
    if broker.topics.get(name) is None and broker.topics.pending(name) is not None:
        return _error(ErrorCode.leader_not_available, name, None)
    try:
        topic = broker.topic(name, auto_create=allow_auto_create, client_id=client_id)
        return _describe(broker, topic)
    except KafkaError as exc:
        return _error(exc.code, name, None)


def _error(code: ErrorCode, name: str | None, topic_id: Any) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
    }


def _describe(broker: Broker, topic: Topic) -> dict[str, Any]:
    node = broker.node_id
    partitions = []
    for index in range(topic.partitions):
        partition = broker.partition(topic.name, index)
        online = partition is not None and partition.offline_reason is None
        partitions.append(
            {
                "error_code": ErrorCode.none if online else ErrorCode.kafka_storage_error,
                "partition_index": index,
                "leader_id": node if online else -1,
                "leader_epoch": LEADER_EPOCH if partition is None else partition.leader_epoch,
                "replica_nodes": [node],
                "isr_nodes": [node] if online else [],
                "offline_replicas": [] if online else [node],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions,
    }


def handle_init_producer_id(
    broker: Broker, request: InitProducerIdRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    if request.transactional_id is not None:
        return init_transactional_producer(broker, request, request.transactional_id, version)
    return {
        "error_code": ErrorCode.none,
        "producer_id": broker.producer_ids.allocate(),
        "producer_epoch": 0,
    }
