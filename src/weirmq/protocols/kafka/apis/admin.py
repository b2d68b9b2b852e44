"""The Kafka admin APIs: topics, partitions, configs, records, the cluster and log dirs.

    CreateTopics (19)            DeleteTopics (20)             DeleteRecords (21)
    DescribeConfigs (32)         AlterConfigs (33)             DescribeLogDirs (35)
    CreatePartitions (37)        IncrementalAlterConfigs (44)  DescribeCluster (60)

Each handler is a loop over the resources of the request, answering every one of them
with its own error code (a bad resource never fails its neighbours), as Kafka does. The
work itself is in `Broker` (create_topic, delete_topic, create_partitions, the config
methods, delete_records), which raises a `KafkaError` naming the precise code; here the
request's shape is checked and the answer built. A topic exists on disk, with its configs
persisted, before its CreateTopics answer is sent.

Creation is bounded (issue 20; the limits are the broker's settings, see
broker/topics.py), as Kafka bounds it:

- a CreateTopics or CreatePartitions asking more than `max_partitions_per_request`
  partitions in all is refused whole, every topic POLICY_VIOLATION (Kafka 4,
  KAFKA-17870 and KAFKA-19673); past `max_broker_partitions`, the topic that would pass it;
- the controller mutation quota (KIP-599, `controller_mutation_rate`): before each topic
  created, grown or deleted, a client past its quota gets THROTTLING_QUOTA_EXCEEDED for
  it, with the wait in the message and in `throttle_time_ms`; what is admitted is counted,
  in partitions. Versions older than KIP-599's (CreateTopics v6, CreatePartitions v3,
  DeleteTopics v5) do not know the error, so, as Kafka, they are counted but never refused.

A creation of more than `CREATE_IN_REQUEST_MAX` partitions is made off the event loop
(`Broker.create_topic_soon`): the handler answers once it is done, other requests served
meanwhile, or after `CREATE_WAIT_MAX_MS` with REQUEST_TIMED_OUT while the creation goes on
(Kafka's answer to a creation that outlasts the request's timeout).

One broker is the whole cluster: a replication factor of 1 (or -1, "the default") is the
only one possible, and a manual replica assignment may name only this broker.

Configs: TOPIC (2), BROKER (4) and GROUP (32; librdkafka's 3) resources are described and
altered, by AlterConfigs (the whole set replaced) and IncrementalAlterConfigs. A BROKER
resource is this broker's id or "" (the cluster-wide default); only the dynamic broker
configs of broker/dynamic_configs.py change, in force at once. Groups: broker/group_configs.py.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ....broker import configs
from ....broker.configs import ConfigSource, ConfigType
from ....broker.core import CREATE_IN_REQUEST_MAX, INTERNAL_TOPICS, PARTITIONS_MAX, Broker
from ....broker.dynamic_configs import CLUSTER_DEFAULT, DYNAMIC, NODE, DynamicBrokerConfigs
from ....broker.exchanges import BINDINGS_CONFIG
from ....broker.topics import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    ThrottlingQuotaExceededError,
    Topic,
    UnknownTopicError,
)
from ....errors import ErrorCode, KafkaError
from ....settings import SETTING_SPECS, Settings
from ....types import RequestContext, TopicPartition
from ..requests import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
    CreatableConfig,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResource,
)
from .metadata import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS

_Resource = AlterConfigsResource | IncrementalAlterConfigsResource
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
"""Kafka's ConfigResource.Type.GROUP (KIP-848); librdkafka sends its own ResourceType
GROUP (3) instead, which no Kafka config resource uses, so both name a group."""
RESOURCE_GROUPS = (RESOURCE_GROUP, 3)
DEFAULT_REPLICATION_FACTOR = -1
DEFAULT_PARTITIONS = -1
CREATE_TOPICS_QUOTA_VERSION: Final = 6
DELETE_TOPICS_QUOTA_VERSION: Final = 5
CREATE_PARTITIONS_QUOTA_VERSION: Final = 3
"""The first versions that know THROTTLING_QUOTA_EXCEEDED (KIP-599)."""
DESCRIBE_CLUSTER_OPERATIONS: Final = CLUSTER_OPERATIONS
"""Kafka's seven operations on the CLUSTER resource (see `metadata.CLUSTER_OPERATIONS`)."""
CREATE_WAIT_MAX_MS: Final = 30_000
"""The longest a CreateTopics or CreatePartitions answer waits for an off-loop creation:
about a client's own request timeout (librdkafka's and Java's are 30 s)."""


class _InvalidRequest(KafkaError):
    code = ErrorCode.invalid_request


class _UnknownTopicId(KafkaError):
    code = ErrorCode.unknown_topic_id


def _named_once(
    entries: Sequence[CreatableConfig] | Sequence[AlterableConfig],
) -> dict[str, str | None]:
    """{name: value} of a request's config entries; INVALID_CONFIG if a name repeats."""
    values = {entry.name: entry.value for entry in entries}
    if len(values) != len(entries):
        raise configs.InvalidConfigError("a config is named twice")
    return values


def _error(exc: KafkaError) -> tuple[ErrorCode, str]:
    return exc.code, str(exc)


class _TimedOut(KafkaError):
    code = ErrorCode.request_timed_out


@dataclass
class _MutationQuota:
    """KIP-599 for one request (module docstring): `admit` before each topic, `charge`
    what was admitted; `throttle_ms` is the response's throttle."""

    broker: Broker
    client_id: str
    strict: bool
    asked_ms: int = 0

    def admit(self, name: str) -> None:
        quota = self.broker.mutation_quota
        wait_ms = quota.throttle_ms(self.client_id, self.broker.clock())
        if not wait_ms:
            return
        self.asked_ms = max(self.asked_ms, wait_ms)
        if self.strict:
            raise ThrottlingQuotaExceededError(
                f"topic {name!r}: client {self.client_id!r} is past its controller mutation "
                f"quota ({quota.rate_per_s} partitions/s); retry in {wait_ms} ms",
                wait_ms,
            )

    def charge(self, partitions: int) -> None:
        self.broker.mutation_quota.record(self.client_id, partitions, self.broker.clock())

    def throttle_ms(self) -> int:
        now = self.broker.clock()
        return max(self.asked_ms, self.broker.mutation_quota.throttle_ms(self.client_id, now))


def _too_many(broker: Broker, asked: int) -> str | None:
    """Why a request asking `asked` partitions in all is refused whole, or None."""
    limit = broker.settings.max_partitions_per_request
    if asked <= limit:
        return None
    return (
        f"Excessively large number of partitions per request: {asked} asked in all, "
        f"max_partitions_per_request is {limit}"
    )


async def _settled(broker: Broker, task: asyncio.Task[Topic], deadline_ms: int) -> Topic:
    """The topic an off-loop creation makes, or `_TimedOut` at `deadline_ms` on the
    broker's clock (the creation goes on). A cancelled wait leaves it going too."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(*_: object) -> None:
        if not woken.done():
            woken.set_result(None)

    timer = broker.timers.call_at(deadline_ms, wake)
    task.add_done_callback(wake)
    try:
        await woken
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
    if not task.done():
        raise _TimedOut(
            f"still being made after {CREATE_WAIT_MAX_MS} ms; it is known once every partition "
            "exists"
        )
    return task.result()


# --- CreateTopics ---------------------------------------------------------------------------


def handle_create_topics(
    broker: Broker, request: CreateTopicsRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    counts = Counter(t.name for t in request.topics)
    validate_only = bool(request.validate_only)
    refusal = _too_many(broker, sum(_asked_partitions(broker, t) for t in request.topics))
    if refusal is not None:
        return {
            "topics": [
                _created_error(t.name, ErrorCode.policy_violation, refusal) for t in request.topics
            ]
        }
    quota = _MutationQuota(broker, ctx.client_id, version >= CREATE_TOPICS_QUOTA_VERSION)
    results: list[dict[str, Any] | tuple[str, asyncio.Task[Topic]]] = []
    for wanted in request.topics:
        if counts[wanted.name] > 1:
            results.append(
                _created_error(wanted.name, ErrorCode.invalid_request, "topic named twice")
            )
            continue
        try:
            results.append(_create_one(broker, wanted, validate_only, quota))
        except KafkaError as exc:
            results.append(_created_error(wanted.name, *_error(exc)))
    if any(isinstance(result, tuple) for result in results):
        return _when_created(broker, results, quota)
    return {"topics": results, "throttle_time": quota.throttle_ms()}


async def _when_created(
    broker: Broker,
    results: list[dict[str, Any] | tuple[str, asyncio.Task[Topic]]],
    quota: _MutationQuota,
) -> dict[str, Any]:
    """The answer once the off-loop creations of the request are done (or at most
    `CREATE_WAIT_MAX_MS` from now, all of them together)."""
    deadline_ms = broker.clock() + CREATE_WAIT_MAX_MS
    topics = []
    for result in results:
        if isinstance(result, dict):
            topics.append(result)
            continue
        name, task = result
        try:
            topics.append(_created(broker, await _settled(broker, task, deadline_ms)))
        except KafkaError as exc:
            topics.append(_created_error(name, *_error(exc)))
    return {"topics": topics, "throttle_time": quota.throttle_ms()}


def _create_one(
    broker: Broker, wanted: CreatableTopic, validate_only: bool, quota: _MutationQuota
) -> dict[str, Any] | tuple[str, asyncio.Task[Topic]]:
    """The topic's answer, or its off-loop creation under way."""
    if wanted.name in INTERNAL_TOPICS:
        # Kafka refuses its own internal log (__cluster_metadata) so; WeirMQ's internal
        # topics are all made by the broker, with the configs its services rely on.
        raise _InvalidRequest(f"Creation of internal topic {wanted.name} is prohibited.")
    partitions = _partition_count(broker, wanted)
    overrides = _named_once(wanted.configs)
    if validate_only:
        validated = broker.create_topic(wanted.name, partitions, overrides, validate_only=True)
        return _created(broker, validated)
    quota.admit(wanted.name)
    if partitions > CREATE_IN_REQUEST_MAX:
        task = broker.create_topic_soon(wanted.name, partitions, overrides)
        quota.charge(partitions)
        return wanted.name, task
    topic = broker.create_topic(wanted.name, partitions, overrides)
    quota.charge(partitions)
    return _created(broker, topic)


def _created(broker: Broker, topic: Topic) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
        "topic_config_error_code": ErrorCode.none,
        "num_partitions": topic.partitions,
        "replication_factor": 1,
        "configs": [
            {
                "name": entry.name,
                "value": entry.value,
                "read_only": entry.read_only,
                "config_source": entry.source,
                "is_sensitive": entry.sensitive,
            }
            for entry in broker.describe_overrides(topic.configs)
        ],
    }


def _asked_partitions(broker: Broker, wanted: CreatableTopic) -> int:
    """The partitions a CreatableTopic asks for, as Kafka counts them for its limit per
    request, except that a count no topic may have (INVALID_PARTITIONS on its own, such as
    100,001) counts nothing: that topic's own error says more."""
    if wanted.assignments:
        count = len(wanted.assignments)
    elif int(wanted.num_partitions) == DEFAULT_PARTITIONS:
        count = broker.settings.default_partitions
    else:
        count = int(wanted.num_partitions)
    return count if 1 <= count <= PARTITIONS_MAX else 0


def _partition_count(broker: Broker, wanted: CreatableTopic) -> int:
    """The partition count a CreatableTopic asks for, with its replication checked."""
    assignments = wanted.assignments
    if assignments:
        if wanted.num_partitions != DEFAULT_PARTITIONS:
            raise _InvalidRequest("num_partitions must be -1 when assignments are given")
        if wanted.replication_factor != DEFAULT_REPLICATION_FACTOR:
            raise _InvalidRequest("replication_factor must be -1 when assignments are given")
        indexes = sorted(int(a.partition_index) for a in assignments)
        if indexes != list(range(len(indexes))):
            raise InvalidReplicaAssignmentError(
                "assigned partitions must be numbered 0, 1, 2, ... without gaps"
            )
        for assignment in assignments:
            _check_replicas(broker, assignment.broker_ids)
        return len(indexes)
    factor = int(wanted.replication_factor)
    if factor not in (DEFAULT_REPLICATION_FACTOR, 1):
        raise InvalidReplicationFactorError(
            f"replication factor {factor} is larger than the 1 broker available"
            if factor > 1
            else f"replication factor must be at least 1, got {factor}"
        )
    count = int(wanted.num_partitions)
    return broker.settings.default_partitions if count == DEFAULT_PARTITIONS else count


def _check_replicas(broker: Broker, broker_ids: Sequence[int]) -> None:
    if list(broker_ids) != [broker.node_id]:
        raise InvalidReplicaAssignmentError(
            f"replicas {list(broker_ids)}: the only broker is {broker.node_id}"
        )


def _created_error(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": None,
        "error_code": code,
        "error_message": message,
        "topic_config_error_code": ErrorCode.none,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


# --- DeleteTopics ---------------------------------------------------------------------------


def handle_delete_topics(
    broker: Broker, request: DeleteTopicsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    # v0-5 name topics in topic_names, v6+ in topics (by name or id); the other is empty.
    wanted: list[tuple[str | None, uuid.UUID | None]] = [
        *((name, None) for name in request.topic_names),
        *((t.name, t.topic_id) for t in request.topics),
    ]
    quota = _MutationQuota(broker, ctx.client_id, version >= DELETE_TOPICS_QUOTA_VERSION)
    responses = []
    for name, topic_id in wanted:
        code, message = ErrorCode.none, None
        if name is not None:
            topic = broker.topics.get(name)
        else:
            topic = broker.topics.by_id(topic_id) if topic_id is not None else None
        try:
            if topic is None:
                if name is None:
                    raise _UnknownTopicId(f"unknown topic id {topic_id}")
                raise UnknownTopicError(f"unknown topic {name!r}")
            quota.admit(topic.name)
            broker.delete_topic(topic.name)
            quota.charge(topic.partitions)
        except KafkaError as exc:
            code, message = _error(exc)
        responses.append(
            {
                "name": topic.name if topic is not None else name,
                "topic_id": topic.topic_id if topic is not None else topic_id,
                "error_code": code,
                "error_message": message,
            }
        )
    return {"responses": responses, "throttle_time": quota.throttle_ms()}


# --- CreatePartitions -----------------------------------------------------------------------


def handle_create_partitions(
    broker: Broker, request: CreatePartitionsRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    counts = Counter(t.name for t in request.topics)
    refusal = _too_many(broker, sum(_new_partitions(broker, t) for t in request.topics))
    if refusal is not None:
        return {
            "results": [_grown(t.name, ErrorCode.policy_violation, refusal) for t in request.topics]
        }
    quota = _MutationQuota(broker, ctx.client_id, version >= CREATE_PARTITIONS_QUOTA_VERSION)
    results: list[dict[str, Any] | tuple[str, asyncio.Task[Topic]]] = []
    for wanted in request.topics:
        try:
            if counts[wanted.name] > 1:
                raise _InvalidRequest("topic named twice")
            results.append(_grow_one(broker, wanted, bool(request.validate_only), quota))
        except KafkaError as exc:
            results.append(_grown(wanted.name, *_error(exc)))
    if any(isinstance(result, tuple) for result in results):
        return _when_grown(broker, results, quota)
    return {"results": results, "throttle_time": quota.throttle_ms()}


def _grow_one(
    broker: Broker, wanted: CreatePartitionsTopic, validate_only: bool, quota: _MutationQuota
) -> dict[str, Any] | tuple[str, asyncio.Task[Topic]]:
    """The topic's answer, or its off-loop growth under way."""
    topic = broker.known_topic(wanted.name)
    total = int(wanted.count)
    if wanted.assignments is not None:
        if len(wanted.assignments) != total - topic.partitions:
            raise InvalidReplicaAssignmentError(
                f"{len(wanted.assignments)} assignment(s) for "
                f"{total - topic.partitions} new partition(s)"
            )
        for assignment in wanted.assignments:
            _check_replicas(broker, assignment.broker_ids)
    if validate_only:
        broker.create_partitions(wanted.name, total, validate_only=True)
        return _grown(wanted.name)
    quota.admit(wanted.name)
    adding = total - topic.partitions
    if adding > CREATE_IN_REQUEST_MAX:
        task = broker.create_partitions_soon(wanted.name, total)
        quota.charge(adding)
        return wanted.name, task
    broker.create_partitions(wanted.name, total)
    quota.charge(adding)
    return _grown(wanted.name)


async def _when_grown(
    broker: Broker,
    results: list[dict[str, Any] | tuple[str, asyncio.Task[Topic]]],
    quota: _MutationQuota,
) -> dict[str, Any]:
    """The answer once the off-loop growths of the request are done (or at most
    `CREATE_WAIT_MAX_MS` from now, all of them together)."""
    deadline_ms = broker.clock() + CREATE_WAIT_MAX_MS
    answers = []
    for result in results:
        if isinstance(result, dict):
            answers.append(result)
            continue
        name, task = result
        try:
            await _settled(broker, task, deadline_ms)
            answers.append(_grown(name))
        except KafkaError as exc:
            answers.append(_grown(name, *_error(exc)))
    return {"results": answers, "throttle_time": quota.throttle_ms()}


def _new_partitions(broker: Broker, wanted: CreatePartitionsTopic) -> int:
    """The partitions a CreatePartitionsTopic would add (0 for an unknown topic, or a
    count no topic may have: those are refused on their own)."""
    topic = broker.topics.get(wanted.name)
    if topic is None or not topic.partitions < int(wanted.count) <= PARTITIONS_MAX:
        return 0
    return int(wanted.count) - topic.partitions


def _grown(
    name: str, code: ErrorCode = ErrorCode.none, message: str | None = None
) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message}


# --- DescribeConfigs ------------------------------------------------------------------------


def handle_describe_configs(
    broker: Broker, request: DescribeConfigsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    synonyms = bool(request.include_synonyms)
    documentation = bool(request.include_documentation)
    results = []
    for resource in request.resources:
        code, message, entries = ErrorCode.none, None, []
        try:
            entries = _resource_configs(broker, int(resource.resource_type), resource.resource_name)
        except KafkaError as exc:
            code, message = _error(exc)
        keys = resource.configuration_keys
        results.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": [
                    _entry(entry, synonyms, documentation)
                    for entry in entries
                    if keys is None or entry.name in keys
                ],
            }
        )
    return {"results": results}


def _resource_configs(broker: Broker, kind: int, name: str) -> list[configs.ConfigEntry]:
    if kind == RESOURCE_TOPIC:
        return broker.describe_topic_configs(name)
    if kind == RESOURCE_BROKER:
        return broker_configs(broker.dynamic_configs, _broker_layer(broker, name))
    if kind in RESOURCE_GROUPS:
        return broker.group_configs.describe(name)
    raise _InvalidRequest(
        f"resource type {kind} is not supported (topics 2, brokers 4 and groups 32 are)"
    )


def _broker_layer(broker: Broker, name: str) -> str:
    """The dynamic layer a BROKER resource names: this broker's id, or "" for the
    cluster-wide default (broker/dynamic_configs.py)."""
    if name == "":
        return CLUSTER_DEFAULT
    if name == str(broker.node_id):
        return NODE
    raise _InvalidRequest(f"unknown broker {name!r}; this broker is {broker.node_id}")


def _entry(entry: configs.ConfigEntry, synonyms: bool, documentation: bool) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": entry.source,
        "is_sensitive": entry.sensitive,
        "synonyms": (
            [{"name": n, "value": v, "source": s} for n, v, s in entry.synonyms] if synonyms else []
        ),
        "config_type": ConfigType[entry.type],
        "documentation": entry.documentation if documentation else None,
    }


def broker_configs(dynamic: DynamicBrokerConfigs, layer: str) -> list[configs.ConfigEntry]:
    """The broker's settings under their Kafka names. For this broker (`NODE`), every one,
    with the dynamic layers over the static settings; for the cluster-wide default, as
    Kafka answers, only the configs set on that layer. Read-only but the `DYNAMIC` ones."""
    defaults = Settings()
    entries = []
    for spec in SETTING_SPECS:
        if spec.kafka_name is None:
            continue
        value = getattr(dynamic.static, spec.name)
        source = (
            ConfigSource.DEFAULT_CONFIG
            if value == getattr(defaults, spec.name)
            else ConfigSource.STATIC_BROKER_CONFIG
        )
        text = _setting_text(value)
        synonyms = [*dynamic.synonyms(spec.kafka_name), (spec.kafka_name, text or "", source)]
        if layer == CLUSTER_DEFAULT:
            synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            if not synonyms:
                continue
        entries.append(
            configs.ConfigEntry(
                name=spec.kafka_name,
                value=synonyms[0][1] if synonyms[0][2] != source else text,
                source=synonyms[0][2],
                read_only=spec.kafka_name not in DYNAMIC,
                sensitive=False,
                type=_setting_type(value),
                documentation=spec.meaning,
                synonyms=tuple(synonyms),
            )
        )
    return sorted(entries, key=lambda e: e.name)


def _setting_text(value: object) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _setting_type(value: object) -> str:
    if isinstance(value, bool):
        return ConfigType.BOOLEAN.name
    if isinstance(value, int):
        return ConfigType.LONG.name
    return ConfigType.STRING.name


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------


def handle_alter_configs(
    broker: Broker, request: AlterConfigsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    responses = []
    for resource in request.resources:
        code, message = ErrorCode.none, None
        validate_only = bool(request.validate_only)
        try:
            kind, name = int(resource.resource_type), resource.resource_name
            values = _named_once(resource.configs)
            if kind == RESOURCE_BROKER:
                layer = _broker_layer(broker, name)
                broker.alter_broker_configs(layer, values=values, validate_only=validate_only)
            elif kind in RESOURCE_GROUPS:
                broker.group_configs.replace(name, values, validate_only=validate_only)
            else:
                _check_alterable(broker, resource)
                broker.replace_topic_configs(name, values, validate_only=validate_only)
        except KafkaError as exc:
            code, message = _error(exc)
        responses.append(_altered(resource, code, message))
    return {"responses": responses}


def handle_incremental_alter_configs(
    broker: Broker, request: IncrementalAlterConfigsRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    responses = []
    bindings_changed = False
    for resource in request.resources:
        code, message = ErrorCode.none, None
        try:
            ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
            if int(resource.resource_type) in RESOURCE_GROUPS:
                broker.group_configs.alter(
                    resource.resource_name, ops, validate_only=bool(request.validate_only)
                )
                responses.append(_altered(resource, code, message))
                continue
            if int(resource.resource_type) == RESOURCE_BROKER:
                layer = _broker_layer(broker, resource.resource_name)
                broker.alter_broker_configs(layer, ops, validate_only=bool(request.validate_only))
                responses.append(_altered(resource, code, message))
                continue
            _check_alterable(broker, resource)
            broker.alter_topic_configs_ops(
                resource.resource_name, ops, validate_only=bool(request.validate_only)
            )
            bindings_changed |= any(name == BINDINGS_CONFIG for name, _, _ in ops)
        except KafkaError as exc:
            code, message = _error(exc)
        responses.append(_altered(resource, code, message))
    if bindings_changed and not request.validate_only:
        return _after_definitions_durable(broker, {"responses": responses})
    return {"responses": responses}


async def _after_definitions_durable(broker: Broker, response: dict[str, Any]) -> dict[str, Any]:
    """Answer once the binding changes are fsynced, as topic changes are before answering."""
    await broker.exchanges.definitions_durable()
    return response


def _check_alterable(broker: Broker, resource: _Resource) -> None:
    kind = int(resource.resource_type)
    if kind != RESOURCE_TOPIC:
        raise _InvalidRequest(
            f"resource type {kind} cannot be altered (topics 2, brokers 4 and groups 32 can)"
        )


def _altered(resource: _Resource, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }


# --- DeleteRecords --------------------------------------------------------------------------


def handle_delete_records(
    broker: Broker, request: DeleteRecordsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            code, low_watermark = ErrorCode.none, -1
            try:
                low_watermark = broker.delete_records(
                    topic.name, int(wanted.partition_index), int(wanted.offset)
                )
            except KafkaError as exc:
                code = exc.code
            partitions.append(
                {
                    "partition_index": wanted.partition_index,
                    "low_watermark": low_watermark,
                    "error_code": code,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


# --- DescribeCluster and DescribeLogDirs ----------------------------------------------------


def handle_describe_cluster(
    broker: Broker, request: DescribeClusterRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    host, port = broker.advertised
    include_ops = bool(request.include_cluster_authorized_operations)
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": request.endpoint_type,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "brokers": [
            {
                "broker_id": broker.node_id,
                "host": host,
                "port": port,
                "rack": None,
                "is_fenced": False,
            }
        ],
        "cluster_authorized_operations": (
            DESCRIBE_CLUSTER_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }


def handle_describe_log_dirs(
    broker: Broker, request: DescribeLogDirsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    logs = broker.logs.logs()
    if request.topics is None:
        wanted = sorted(logs)
    else:
        wanted = [TopicPartition(t.topic, int(p)) for t in request.topics for p in t.partitions]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in wanted:
        partition_log = logs.get(tp)
        if partition_log is None:
            continue  # Kafka leaves out what it does not host
        by_topic.setdefault(tp[0], []).append(
            {
                "partition_index": tp[1],
                "partition_size": partition_log.size_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
        )
    usage = shutil.disk_usage(broker.logs.data_dir)
    return {
        "error_code": ErrorCode.none,
        "results": [
            {
                "error_code": ErrorCode.none,
                "log_dir": str(broker.logs.data_dir.resolve()),
                "topics": [
                    {"name": name, "partitions": partitions}
                    for name, partitions in by_topic.items()
                ],
                "total_bytes": usage.total,
                "usable_bytes": usage.free,
            }
        ],
    }
