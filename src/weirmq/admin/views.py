"""Broker state as the JSON documents the admin API answers with.

Every function here reads the broker directly and returns plain dicts and lists. They run
on the broker's event loop thread, the thread that writes that state, so what they read is
consistent without locks, and each costs time proportional to the number of partitions.
The shapes are described, field by field, in `weirmq.admin.openapi`; a test validates
every answer against that description, so the two cannot drift apart unnoticed.

An exchange is a topic that routes (`weirmq.broker.exchanges`); its documents describe the
routing side (definition, bindings, counters, lag), and the topic documents its log.

Names follow Kafka where Kafka has one (``log_start_offset``, ``log_end_offset``,
``topic_id``, ``group_id``, ``member_id``); sizes are in bytes and durations in
milliseconds, with the unit in the name. With one broker and no replication, a partition's
high watermark is its log end offset. Where the broker has no value (a group without a
committed offset, a committed partition whose topic is gone), the JSON says null rather
than Kafka's -1, so a client cannot mistake it for an offset.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Protocol

from weirmq import __version__
from weirmq.broker.configs import ConfigSource
from weirmq.broker.core import INTERNAL_TOPICS, Broker
from weirmq.broker.exchanges import ExchangeView
from weirmq.broker.group_service import GroupView, MemberView
from weirmq.broker.messages import Record
from weirmq.broker.shares import SharePartitionView
from weirmq.broker.topics import Topic
from weirmq.settings import SPECS_BY_NAME, Settings

from .history import History, Sample, Totals

JsonObject = dict[str, object]

NO_LOG_REASON = "no log is open for this partition"
"""The offline reason of a partition the registry knows but the storage layer does not."""

CONFIG_SOURCES: dict[int, str] = {source.value: source.name.lower() for source in ConfigSource}
"""Kafka's DescribeConfigs source numbers, named as Kafka's AdminClient names them."""


class ConfigEntry(Protocol):
    """What `Broker.describe_topic_configs` returns for one config."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...
    @property
    def source(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def sensitive(self) -> bool: ...
    @property
    def type(self) -> str: ...
    @property
    def documentation(self) -> str: ...


class BindingDefinition(Protocol):
    """What the broker's exchange service returns for one binding (the routing core's
    `Binding`, which this package may not import: tests/test_import_rules.py)."""

    @property
    def source(self) -> str: ...
    @property
    def destination(self) -> str: ...
    @property
    def destination_kind(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def arguments(self) -> Mapping[str, object]: ...
    @property
    def expression(self) -> str | None: ...


# --- the broker -----------------------------------------------------------------------------


def uptime_ms(broker: Broker) -> int:
    # The broker's clock may be a test's manual clock; never report a negative uptime.
    return max(0, broker.clock() - broker.started_ms)


def offline_partitions(broker: Broker) -> int:
    return sum(
        1
        for topic in broker.topics
        for partition in range(topic.partitions)
        if _offline_reason(broker, topic.name, partition) is not None
    )


def health(broker: Broker) -> tuple[JsonObject, bool]:
    """The health document and whether the broker is healthy (serving every partition)."""
    offline = offline_partitions(broker)
    if broker.closing:
        status = "stopping"
    elif offline:
        status = "degraded"
    else:
        status = "ok"
    document: JsonObject = {
        "status": status,
        "node_id": broker.node_id,
        "cluster_id": broker.cluster_id,
        "version": __version__,
        "uptime_ms": uptime_ms(broker),
        "offline_partitions": offline,
    }
    return document, status == "ok"


def broker_document(broker: Broker) -> JsonObject:
    stats = broker.stats
    host, port = broker.advertised
    return {
        "node_id": broker.node_id,
        "cluster_id": broker.cluster_id,
        "version": __version__,
        "advertised_address": format_address(host, port),
        "data_dir": str(Path(broker.settings.data_dir).absolute()),
        "uptime_ms": uptime_ms(broker),
        "connections": {
            "open": stats.connections_open,
            "accepted_total": stats.connections_total,
            "closed_for_errors_total": stats.connections_closed_for_errors,
        },
        "topics": len(broker.topics),
        "partitions": sum(topic.partitions for topic in broker.topics),
        "flow": flow_document(broker),
        "settings": settings_document(broker.settings),
    }


def flow_document(broker: Broker) -> JsonObject:
    flow = broker.flow
    return {
        "resources": [
            {
                "name": name,
                "state": gauge.state.value,
                "level": gauge.level,
                "low": gauge.marks.low,
                "high": gauge.marks.high,
                "resume": gauge.marks.resume_level,
                "ratio": gauge.ratio,
            }
            for name, gauge in sorted(flow.gauges.items())
        ],
        "throttled_requests_total": flow.throttled_requests,
        "throttle_seconds_total": flow.throttle_ms_total / 1000,
        "refused_publishes_total": flow.refused_publishes,
    }


def settings_document(settings: Settings) -> JsonObject:
    """Every setting by name. A setting holding secrets (`amqp_users`' passwords) shows
    only what its kind says may be shown (`ValueKind.public`: the user names)."""
    document: JsonObject = {}
    for field in fields(settings):
        value = getattr(settings, field.name)
        public = SPECS_BY_NAME[field.name].kind.public
        if public is not None:
            value = public(value)
        document[field.name] = str(value) if isinstance(value, Path) else value
    return document


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets so the port can be told apart."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- topics and partitions ------------------------------------------------------------------


def partition_document(broker: Broker, topic: str, partition: int) -> JsonObject:
    log = broker.partition_log(topic, partition)
    if log is None:
        return {
            "topic": topic,
            "partition": partition,
            "log_start_offset": 0,
            "log_end_offset": 0,
            "size_bytes": 0,
            "segments": 0,
            "offline_reason": NO_LOG_REASON,
        }
    return {
        "topic": topic,
        "partition": partition,
        "log_start_offset": log.log_start_offset,
        "log_end_offset": log.log_end_offset,
        "size_bytes": log.size_bytes,
        "segments": log.segment_count,
        "offline_reason": log.offline_reason,
    }


def partitions_of(broker: Broker, topic: Topic) -> list[JsonObject]:
    return [partition_document(broker, topic.name, p) for p in range(topic.partitions)]


def topic_summary(broker: Broker, topic: Topic) -> JsonObject:
    size_bytes = records = 0
    for partition in range(topic.partitions):
        log = broker.partition_log(topic.name, partition)
        if log is not None:
            size_bytes += log.size_bytes
            # Offsets, not a count of records: control records (and, later, compaction)
            # make it an upper bound. Kafka tools show the same as a topic's message count.
            records += log.log_end_offset - log.log_start_offset
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partition_count": topic.partitions,
        "size_bytes": size_bytes,
        "records": records,
        "configs": dict(sorted(topic.configs.items())),
    }


def topic_detail(broker: Broker, topic: Topic) -> JsonObject:
    """The summary and every partition's state."""
    return {**topic_summary(broker, topic), "partitions": partitions_of(broker, topic)}


def configs_document(topic: str, entries: Iterable[ConfigEntry]) -> JsonObject:
    return {"topic": topic, "configs": [config_entry(entry) for entry in entries]}


def group_configs_document(group_id: str, entries: Iterable[ConfigEntry]) -> JsonObject:
    """A group's configs, shaped as a topic's (`configs_document`); a group's own value
    has the source ``group_config``."""
    return {"group": group_id, "configs": [config_entry(entry) for entry in entries]}


def config_entry(entry: ConfigEntry) -> JsonObject:
    return {
        "name": entry.name,
        # As Kafka does: a sensitive value is never sent, whoever asks.
        "value": None if entry.sensitive else entry.value,
        "source": CONFIG_SOURCES.get(entry.source, CONFIG_SOURCES[ConfigSource.UNKNOWN]),
        "read_only": entry.read_only,
        "sensitive": entry.sensitive,
        "type": entry.type,
        "documentation": entry.documentation,
    }


# --- consumer groups ------------------------------------------------------------------------


def group_summary(broker: Broker, view: GroupView) -> JsonObject:
    """A group as listed: what it is, its state, its size and its total lag."""
    lags = [p.lag for p in broker.group_lag(view.group_id) if p.lag is not None]
    return {
        "group_id": view.group_id,
        "kind": view.kind,
        "state": view.state,
        "protocol_type": view.protocol_type,
        "protocol": view.protocol,
        "generation": view.generation,
        "member_count": len(view.members),
        # A partition counts once its lag is known (a committed offset and a log); with
        # none known, neither is the total.
        "lag": sum(lags) if lags else None,
    }


def group_detail(broker: Broker, view: GroupView) -> JsonObject:
    """The summary, every member with its partitions, and every partition the group has
    committed or owns, with its committed offset, log end and lag."""
    partitions = [
        {
            "topic": partition.topic,
            "partition": partition.partition,
            "committed_offset": _known(partition.committed_offset),
            "log_end_offset": _known(partition.log_end_offset),
            "lag": partition.lag,
            "member_id": partition.member_id,
        }
        for partition in broker.group_lag(view.group_id)
    ]
    shared = broker.shares.views(view.group_id) if view.kind == "share" else []
    return {
        **group_summary(broker, view),
        "members": [member_document(member) for member in view.members],
        "partitions": partitions,
        "share_partitions": [share_partition_document(broker, p) for p in shared],
    }


def share_partition_document(broker: Broker, view: SharePartitionView) -> JsonObject:
    """One share-partition: its window, its records by state, and what happened to them
    since the broker started."""
    oldest = view.oldest_unacknowledged_ms
    return {
        "topic": view.topic,
        "partition": view.partition,
        "start_offset": view.start_offset,
        "end_offset": view.end_offset,
        "high_watermark": view.high_watermark,
        "available": view.available,
        "acquired": view.acquired,
        "acknowledged": view.acknowledged,
        "archived": view.archived,
        "oldest_unacknowledged_age_ms": (
            None if oldest is None else max(0, broker.clock() - oldest)
        ),
        "delivered": view.stats.delivered,
        "accepted": view.stats.accepted,
        "released": view.stats.released,
        "rejected": view.stats.rejected,
        "dead_lettered": view.stats.dead_lettered,
    }


def member_document(member: MemberView) -> JsonObject:
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "assignment": [
            {"topic": topic, "partition": partition} for topic, partition in member.assignment
        ],
    }


def _known(offset: int) -> int | None:
    """The broker's -1 ("none") as null."""
    return None if offset < 0 else offset


def _offline_reason(broker: Broker, topic: str, partition: int) -> str | None:
    log = broker.partition_log(topic, partition)
    return NO_LOG_REASON if log is None else log.offline_reason


# --- exchanges ------------------------------------------------------------------------------


def exchange_summary(view: ExchangeView) -> JsonObject:
    """An exchange as listed: its definition, its size and how many bindings leave it."""
    exchange = view.exchange
    return {
        "name": exchange.name,
        "type": str(exchange.type),
        "alternate": exchange.alternate,
        "unroutable": exchange.unroutable,
        "partition_count": view.partitions,
        "binding_count": len(view.bindings),
    }


def exchange_detail(view: ExchangeView) -> JsonObject:
    """The summary, every binding leaving the exchange, its counters and its routing lag."""
    stats = view.stats
    return {
        **exchange_summary(view),
        "bindings": [binding_document(binding) for binding in view.bindings],
        "stats": {
            "routed_records": stats.copies,
            "unroutable_records": stats.unroutable,
            "alternate_records": stats.alternate,
            "failed_records": stats.failed,
        },
        "routing_lag_records": view.lag_records,
    }


def binding_document(binding: BindingDefinition) -> JsonObject:
    """A binding: the same fields a client sends to make it or to remove it, plus where it
    leaves from and what kind of destination it reaches."""
    return {
        "source": binding.source,
        "destination": binding.destination,
        "destination_kind": binding.destination_kind,
        "key": binding.key,
        "arguments": dict(binding.arguments),
        "expression": binding.expression,
    }


# --- the console's overview, connections and queues ----------------------------------------

PROTOCOLS = ("kafka", "amqp", "sqs")
"""The protocols counted in `connections_document`, always present (0 when off)."""


def connections_document(broker: Broker) -> JsonObject:
    """Open connections per protocol and in all."""
    found = broker.stats.connections_by_protocol()
    counts: JsonObject = {protocol: found.get(protocol, 0) for protocol in PROTOCOLS}
    counts["total"] = sum(found.values())
    return counts


def overview(broker: Broker, history: History) -> JsonObject:
    """What the console's first page shows: the health status, the counts of things,
    the connections, and the recent traffic (`weirmq.admin.history`)."""
    status, _healthy = health(broker)
    return {
        "version": __version__,
        "node_id": broker.node_id,
        "cluster_id": broker.cluster_id,
        "uptime_ms": uptime_ms(broker),
        "status": status["status"],
        "connections": connections_document(broker),
        "topics": len(broker.topics),
        "partitions": sum(topic.partitions for topic in broker.topics),
        "groups": len(broker.group_views()),
        "history": {
            "interval_ms": history.interval_ms,
            "samples": [sample_document(sample) for sample in history.samples()],
        },
    }


def sample_document(sample: Sample) -> JsonObject:
    return {
        "at_ms": sample.at_ms,
        "bytes_in_per_s": sample.bytes_in_per_s,
        "bytes_out_per_s": sample.bytes_out_per_s,
        "messages_in_per_s": sample.messages_in_per_s,
        "messages_out_per_s": sample.messages_out_per_s,
        "connections": sample.connections,
    }


def totals(broker: Broker) -> Totals:
    """The broker's traffic counters summed over the topics clients use (the internal
    topics' own writes, offsets commits and share state, are not traffic)."""
    bytes_in = bytes_out = records_in = records_out = 0
    for name, stats in broker.stats.topics.items():
        if name in INTERNAL_TOPICS:
            continue
        bytes_in += stats.bytes_in
        bytes_out += stats.bytes_out
        records_in += stats.records_in
        records_out += stats.records_out
    connections = sum(broker.stats.connections_by_protocol().values())
    return Totals(bytes_in, bytes_out, records_in, records_out, connections)


def queue_rows(broker: Broker) -> list[JsonObject]:
    """One row per share-partition of every share group: what waits, what is held, and
    where its dead letters go."""
    rows: list[JsonObject] = []
    for view in broker.shares.views():
        oldest = view.oldest_unacknowledged_ms
        dead_letter_topic = broker.group_configs.dead_letter_topic(view.group_id)
        rows.append(
            {
                "group": view.group_id,
                "topic": view.topic,
                "partition": view.partition,
                "available": view.available,
                "in_flight": view.acquired,
                "oldest_unacknowledged_age_ms": (
                    None if oldest is None else max(0, broker.clock() - oldest)
                ),
                "delivered": view.stats.delivered,
                "dead_lettered": view.stats.dead_lettered,
                "dead_letter_topic": dead_letter_topic or None,
            }
        )
    return rows


def payload_document(data: bytes | None) -> JsonObject | None:
    """A key, value or header value: base64 always (it may be anything), and the text
    when it is valid UTF-8, so a person reads text and a tool gets the bytes."""
    if data is None:
        return None
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    return {"base64": base64.b64encode(data).decode("ascii"), "text": text}


def message_document(offset: int, record: Record) -> JsonObject:
    return {
        "offset": offset,
        "timestamp_ms": record.timestamp_ms,
        "key": payload_document(record.key),
        "value": payload_document(record.value),
        "headers": [
            {"key": name, "value": payload_document(value)} for name, value in record.headers
        ],
    }
