"""Topic configs: which exist, what they default to, how a value is checked, and what a
topic's effective settings are.

Theory of operation
-------------------
Every topic config is one row of ``TOPIC_CONFIGS``: Kafka's name and type, the broker
setting it defaults to (Kafka's synonym, e.g. ``retention.ms`` <- ``log.retention.ms``),
a parser that turns the text a client sends into a canonical value or says why not, and
one line of documentation. A topic stores only its overrides (``topics.json``); the value
in force is the override, else the broker's setting, else the built-in default, which is
exactly the chain DescribeConfigs reports as synonyms, each with Kafka's ConfigSource:

    DYNAMIC_TOPIC_CONFIG (1)  <  STATIC_BROKER_CONFIG (4)  <  DEFAULT_CONFIG (5)

A broker setting counts as STATIC_BROKER_CONFIG only when it differs from WeirMQ's default
(the settings loader keeps no record of which layer set a value; a value equal to the
default reads the same either way).

Overrides are validated as a whole set (`check_overrides`): every name must be known, every
value must parse, and the combination must make a valid `LogConfig`. Values are stored in
canonical form (``"  100 "`` becomes ``"100"``, ``"Compact"`` is refused like Kafka
refuses it). Unknown names are INVALID_CONFIG, as in Kafka, because a typo silently ignored
(``retention.msec``) is a retention policy that never applies.

Every topic config Kafka 4.x knows (its LogConfig) is in the table, validated by Kafka's
type and range, stored and described, so that tools that copy a topic's configs from a
Kafka cluster work unchanged. Those that mean nothing on one WeirMQ broker (replication
throttles, tiered storage, preallocation, flush policies: WeirMQ fsyncs acks=all batches
before answering) say so in their documentation; docs/configuration.md lists which are
honoured. Kafka 4.0 removed ``message.downconversion.enable``,
``message.timestamp.difference.max.ms`` and ``message.format.version``: unknown here too.

``compression.type`` takes every Kafka value: ``producer`` stores batches as the producer
compressed them; any other value has a batch in another codec rewritten in it on append
(`recompression`, `records.recompress`), at the topic's ``compression.*.level``, as Kafka
does, whichever protocol wrote the batch.

``cleanup.policy=compact`` hands the topic to the log cleaner (`weirmq.storage.cleaner`,
with ``delete.retention.ms``, ``min.cleanable.dirty.ratio`` and the compaction lags),
which keeps the newest record of every key, and turns time and size retention off unless
``delete`` is listed too. An empty
``cleanup.policy`` (Kafka 4.2, KIP-1161) means neither delete nor compact: the log is kept
whole. ``min.insync.replicas`` is accepted and reported; with one broker there is one
replica, so acks=all means that replica (fsynced).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from ..errors import ErrorCode, KafkaError
from ..settings import Settings
from ..storage.config import DAY_MS, LogConfig, TimestampType

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs config_source values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs config_type values (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class _Refused(Exception):
    """Why a value does not parse; the caller adds which config it was for."""


# --- parsers: text in, canonical text out --------------------------------------------------


def _integer(minimum: int, maximum: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        stripped = text.strip()
        try:
            value = int(stripped, 10)
        except ValueError:
            raise _Refused(f"expected an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise _Refused(f"must be between {minimum} and {maximum}, got {value}")
        return str(value)

    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in allowed:
            raise _Refused(f"must be one of {', '.join(allowed)}; got {text!r}")
        return value

    return parse


def _boolean(text: str) -> str:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise _Refused(f"expected true or false, got {text!r}")
    return value


def _cleanup_policy(text: str) -> str:
    # Kafka 4.2 (KIP-1161) accepts an empty list: neither delete nor compact, so the log is
    # kept whole, as with `compact` before compaction runs.
    items = [item.strip() for item in text.split(",") if item.strip()]
    if any(item not in ("delete", "compact") for item in items):
        raise _Refused(f"must be a list of delete and compact (or empty); got {text!r}")
    return ",".join(dict.fromkeys(items))  # Kafka's order kept, duplicates dropped


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
"""Kafka's BrokerCompressionType names; see the module docstring for what is honoured."""


def _compression(text: str) -> str:
    value = text.strip()
    if value not in COMPRESSION_TYPES:
        raise _Refused(f"must be one of {', '.join(COMPRESSION_TYPES)}; got {text!r}")
    return value


def _gzip_level(text: str) -> str:
    value = _integer(-1, 9)(text)
    if value == "0":  # Kafka: -1 (the codec's default) or 1 to 9
        raise _Refused("must be -1 or between 1 and 9, got 0")
    return value


def _double(minimum: float, maximum: float) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            value = float(text.strip())
        except ValueError:
            raise _Refused(f"expected a number, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise _Refused(f"must be between {minimum} and {maximum}, got {value}")
        return repr(value)

    return parse


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _throttled_replicas(text: str) -> str:
    """Kafka's ThrottledReplicaListValidator: empty, "*", or "partition:broker,..."."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"] or all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        return ",".join(items)
    raise _Refused(f"must be '*' or a list of partition:broker ids; got {text!r}")


def _topic_name(text: str) -> str:
    value = text.strip()
    if value and not _TOPIC_NAME.fullmatch(value):
        raise _Refused(f"must be a topic name (letters, digits, '.', '_', '-'); got {text!r}")
    return value


_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
GROUP_ID_BYTES_MAX = 255
"""A named backlog group's id, at most (group ids are free text in Kafka)."""


def _json_object(text: str) -> str:
    """A JSON object (or empty), kept as given: AMQP definitions (protocols/amqp/model.py)."""
    if not text:
        return ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _Refused(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Refused("not a JSON object")
    return text


def _group_id(text: str) -> str:
    value = text.strip()
    if len(value.encode()) > GROUP_ID_BYTES_MAX:
        raise _Refused(f"must be a group id of at most {GROUP_ID_BYTES_MAX} bytes")
    return value


DELAY_ENABLE = "weirmq.delay.enable"
BACKLOG_MAX_BYTES = "weirmq.backlog.max.bytes"
BACKLOG_GROUP = "weirmq.backlog.group"
EXCHANGE_TYPE = "weirmq.exchange.type"
EXCHANGE_ALTERNATE = "weirmq.exchange.alternate"
EXCHANGE_UNROUTABLE = "weirmq.exchange.unroutable"
AMQP_QUEUE = "weirmq.amqp.queue"
AMQP_EXCHANGE = "weirmq.amqp.exchange"
SQS_QUEUE = "weirmq.sqs.queue"
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers", "content")


# --- the table ------------------------------------------------------------------------------

_STORED_ONLY = "accepted and stored as Kafka does, but it changes nothing on one WeirMQ broker"


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    parse: Callable[[str], str]
    default: str
    """Built-in default (DEFAULT_CONFIG)."""
    documentation: str
    broker_name: str | None = None
    """The broker config it defaults to (Kafka's synonym), when there is one."""
    setting: str | None = None
    """The `Settings` field holding that broker config in WeirMQ, when there is one."""
    list_valued: bool = False
    """APPEND and SUBTRACT apply (Kafka: only to LIST configs)."""

    def broker_value(self, settings: Settings) -> str | None:
        """The broker's setting for this config when it differs from the built-in default."""
        if self.setting is None:
            return None
        value = str(getattr(settings, self.setting))
        return None if value == self.default else value


# fmt: off
TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef(
        "cleanup.policy", ConfigType.LIST, _cleanup_policy, "delete",
        "delete: retention removes old segments; compact: the newest record per key is kept "
        "and retention does not delete; empty (Kafka 4.2): neither, the log is kept whole",
        broker_name="log.cleanup.policy", list_valued=True,
    ),
    TopicConfigDef(
        "compression.gzip.level", ConfigType.INT, _gzip_level, "-1",
        f"{_STORED_ONLY} (batches are stored as the producer compressed them)",
        broker_name="compression.gzip.level",
    ),
    TopicConfigDef(
        "compression.lz4.level", ConfigType.INT, _integer(1, 17), "9",
        f"{_STORED_ONLY} (batches are stored as the producer compressed them)",
        broker_name="compression.lz4.level",
    ),
    TopicConfigDef(
        "compression.type", ConfigType.STRING, _compression, "producer",
        "any of Kafka's values is accepted and stored; batches are always stored as the "
        "producer compressed them (no recompression on append), which is 'producer'",
        broker_name="compression.type",
    ),
    TopicConfigDef(
        "compression.zstd.level", ConfigType.INT, _integer(-131072, 22), "3",
        f"{_STORED_ONLY} (batches are stored as the producer compressed them)",
        broker_name="compression.zstd.level",
    ),
    TopicConfigDef(
        "delete.retention.ms", ConfigType.LONG, _integer(0, INT64_MAX), str(DAY_MS),
        "how long compaction keeps tombstones (delete markers) once their key is compacted",
        broker_name="log.cleaner.delete.retention.ms",
    ),
    TopicConfigDef(
        "file.delete.delay.ms", ConfigType.LONG, _integer(0, INT64_MAX), "60000",
        f"{_STORED_ONLY}: deleted segments are removed at once",
        broker_name="log.segment.delete.delay.ms",
    ),
    TopicConfigDef(
        "flush.messages", ConfigType.LONG, _integer(1, INT64_MAX), str(INT64_MAX),
        f"{_STORED_ONLY}: acks=all batches are fsynced before their answer, others every "
        "flush_interval_ms",
        broker_name="log.flush.interval.messages",
    ),
    TopicConfigDef(
        "flush.ms", ConfigType.LONG, _integer(0, INT64_MAX), str(INT64_MAX),
        f"{_STORED_ONLY}: acks=all batches are fsynced before their answer, others every "
        "flush_interval_ms",
        broker_name="log.flush.interval.ms",
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas", ConfigType.LIST, _throttled_replicas, "",
        f"{_STORED_ONLY}: one broker has no followers",
        list_valued=True,
    ),
    TopicConfigDef(
        "index.interval.bytes", ConfigType.INT, _integer(0, INT32_MAX), "4096",
        "bytes of log between two entries of the sparse offset index",
        broker_name="log.index.interval.bytes",
    ),
    TopicConfigDef(
        "leader.replication.throttled.replicas", ConfigType.LIST, _throttled_replicas, "",
        f"{_STORED_ONLY}: one broker has no followers",
        list_valued=True,
    ),
    TopicConfigDef(
        "local.retention.bytes", ConfigType.LONG, _integer(-2, INT64_MAX), "-2",
        f"{_STORED_ONLY}: there is no tiered storage",
        broker_name="log.local.retention.bytes",
    ),
    TopicConfigDef(
        "local.retention.ms", ConfigType.LONG, _integer(-2, INT64_MAX), "-2",
        f"{_STORED_ONLY}: there is no tiered storage",
        broker_name="log.local.retention.ms",
    ),
    TopicConfigDef(
        "max.compaction.lag.ms", ConfigType.LONG, _integer(1, INT64_MAX), str(INT64_MAX),
        "longest a record may stay uncompacted (compacted topics)",
        broker_name="log.cleaner.max.compaction.lag.ms",
    ),
    TopicConfigDef(
        "max.message.bytes", ConfigType.INT, _integer(64, INT32_MAX), "1048588",
        "largest record batch accepted, after compression",
        broker_name="message.max.bytes", setting="message_max_bytes",
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms", ConfigType.LONG, _integer(0, INT64_MAX), "3600000",
        f"{_STORED_ONLY}: timestamps ahead of the broker's clock are not refused",
        broker_name="log.message.timestamp.after.max.ms",
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms", ConfigType.LONG, _integer(0, INT64_MAX),
        str(INT64_MAX),
        f"{_STORED_ONLY}: timestamps behind the broker's clock are not refused",
        broker_name="log.message.timestamp.before.max.ms",
    ),
    TopicConfigDef(
        "message.timestamp.type", ConfigType.STRING, _choice("CreateTime", "LogAppendTime"),
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append",
        broker_name="log.message.timestamp.type",
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio", ConfigType.DOUBLE, _double(0.0, 1.0), "0.5",
        "share of a compacted log not yet compacted before compaction runs",
        broker_name="log.cleaner.min.cleanable.ratio",
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", ConfigType.LONG, _integer(0, INT64_MAX), "0",
        "shortest a record stays uncompacted (compacted topics)",
        broker_name="log.cleaner.min.compaction.lag.ms",
    ),
    TopicConfigDef(
        "min.insync.replicas", ConfigType.INT, _integer(1, INT32_MAX), "1",
        "accepted for compatibility; a single broker is the only replica",
        broker_name="min.insync.replicas",
    ),
    TopicConfigDef(
        "preallocate", ConfigType.BOOLEAN, _boolean, "false",
        f"{_STORED_ONLY}: segment files grow as they are written",
        broker_name="log.preallocate",
    ),
    TopicConfigDef(
        "remote.log.copy.disable", ConfigType.BOOLEAN, _boolean, "false",
        f"{_STORED_ONLY}: there is no tiered storage",
    ),
    TopicConfigDef(
        "remote.log.delete.on.disable", ConfigType.BOOLEAN, _boolean, "false",
        f"{_STORED_ONLY}: there is no tiered storage",
    ),
    TopicConfigDef(
        "remote.storage.enable", ConfigType.BOOLEAN, _boolean, "false",
        f"{_STORED_ONLY}: there is no tiered storage",
    ),
    TopicConfigDef(
        "retention.bytes", ConfigType.LONG, _integer(-1, INT64_MAX), "-1",
        "oldest segments are deleted while a partition is larger than this; -1: no limit",
        broker_name="log.retention.bytes", setting="retention_bytes",
    ),
    TopicConfigDef(
        "retention.ms", ConfigType.LONG, _integer(-1, INT64_MAX), str(7 * DAY_MS),
        "segments whose newest record is older than this are deleted; -1: keep forever",
        broker_name="log.retention.ms", setting="retention_ms",
    ),
    TopicConfigDef(
        "segment.bytes", ConfigType.INT, _integer(1024, INT32_MAX), str(1024**3),
        "a segment file is rolled before it grows past this",
        broker_name="log.segment.bytes", setting="segment_bytes",
    ),
    TopicConfigDef(
        "segment.index.bytes", ConfigType.INT, _integer(4, INT32_MAX), "10485760",
        f"{_STORED_ONLY}: the sparse offset index is sized by the segment",
        broker_name="log.index.size.max.bytes",
    ),
    TopicConfigDef(
        "segment.jitter.ms", ConfigType.LONG, _integer(0, INT64_MAX), "0",
        f"{_STORED_ONLY}: segments roll at segment.ms exactly",
        broker_name="log.roll.jitter.ms",
    ),
    TopicConfigDef(
        "segment.ms", ConfigType.LONG, _integer(1, INT64_MAX), str(7 * DAY_MS),
        "a segment is rolled once it is this old, even if not full",
        broker_name="log.roll.ms",
    ),
    TopicConfigDef(
        "unclean.leader.election.enable", ConfigType.BOOLEAN, _boolean, "false",
        f"{_STORED_ONLY}: the only replica is always the leader",
        broker_name="unclean.leader.election.enable",
    ),
    TopicConfigDef(
        "weirmq.acks.all.fsync", ConfigType.BOOLEAN, _boolean, "true",
        "true: acks=all is answered once the batch is fsynced; false: once it is written to "
        "the OS (acks=1 durability, for data that can be replayed from elsewhere)",
    ),
    TopicConfigDef(
        AMQP_EXCHANGE, ConfigType.STRING, _json_object, "",
        "set by WeirMQ on an exchange declared over AMQP: its virtual host, name, flags "
        "and arguments (JSON), so that it is found and compared again after a restart",
    ),
    TopicConfigDef(
        AMQP_QUEUE, ConfigType.STRING, _json_object, "",
        "set by WeirMQ on the topic of a queue declared over AMQP: its virtual host, name, "
        "flags and arguments (JSON); the topic is read by the queue's own share group",
    ),
    TopicConfigDef(
        BACKLOG_GROUP, ConfigType.STRING, _group_id, "",
        "the consumer or share group whose progress weirmq.backlog.max.bytes is measured "
        "against; empty: the slowest group that consumes the topic",
    ),
    TopicConfigDef(
        BACKLOG_MAX_BYTES, ConfigType.LONG, _integer(-1, INT64_MAX), "-1",
        "bytes the group may fall behind before producers are slowed (from 60%) and then "
        "held back (at 100%, until the backlog is down to 80%); -1: no limit",
    ),
    TopicConfigDef(
        DELAY_ENABLE, ConfigType.BOOLEAN, _boolean, "false",
        "true: a record produced with header weirmq.delay.ms or weirmq.deliver.at.ms is "
        "held back and appended when due (every batch produced is searched for the headers, "
        "which costs CPU per byte: hence off by default); not for exchanges",
    ),
    TopicConfigDef(
        EXCHANGE_ALTERNATE, ConfigType.STRING, _topic_name, "",
        "for an exchange: the exchange that gets the records this one's bindings do not "
        "match (RabbitMQ's alternate-exchange); empty: none",
    ),
    TopicConfigDef(
        EXCHANGE_TYPE, ConfigType.STRING, _choice(*EXCHANGE_TYPES), "",
        "makes the topic an exchange that routes its records (direct, topic, fanout, "
        "headers or content); set when the topic is created, never changed; empty: a plain "
        "topic",
    ),
    TopicConfigDef(
        EXCHANGE_UNROUTABLE, ConfigType.STRING, _choice("drop", "reject"), "drop",
        "for an exchange: what happens to a record no binding routes (after the alternate): "
        "drop it (counted) or refuse the write with INVALID_RECORD",
    ),
    TopicConfigDef(
        SQS_QUEUE, ConfigType.STRING, _json_object, "",
        "set by WeirMQ on the topic of a queue created through the SQS API: its name, "
        "attributes and tags (JSON); the topic is read by the queue's own share group",
    ),
)
# fmt: on

CONFIGS_BY_NAME: Mapping[str, TopicConfigDef] = {c.name: c for c in TOPIC_CONFIGS}


# --- resolution and checks ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of one topic as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: str
    documentation: str
    synonyms: tuple[tuple[str, str, int], ...]
    """(name, value, source) from the value in force down to the built-in default."""


def effective(settings: Settings, overrides: Mapping[str, str], name: str) -> str:
    """The value in force for config `name`."""
    definition = CONFIGS_BY_NAME[name]
    if name in overrides:
        return overrides[name]
    return definition.broker_value(settings) or definition.default


def describe(
    settings: Settings,
    overrides: Mapping[str, str],
    dynamic: Callable[[str], list[tuple[str, str, int]]] | None = None,
) -> list[ConfigEntry]:
    """Every topic config, in name order, with its source and synonyms. `settings` are the
    static ones; `dynamic` gives a broker config's dynamic synonyms (broker/dynamic_configs.py)
    when the broker has any, which come between the topic's override and the static value."""
    entries = []
    for definition in TOPIC_CONFIGS:
        synonyms: list[tuple[str, str, int]] = []
        if definition.name in overrides:
            synonyms.append(
                (definition.name, overrides[definition.name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        if dynamic is not None and definition.broker_name is not None:
            synonyms += dynamic(definition.broker_name)
        broker_value = definition.broker_value(settings)
        if broker_value is not None and definition.broker_name is not None:
            synonyms.append(
                (definition.broker_name, broker_value, ConfigSource.STATIC_BROKER_CONFIG)
            )
        synonyms.append(
            (definition.broker_name or definition.name, definition.default,
             ConfigSource.DEFAULT_CONFIG)
        )  # fmt: skip
        _, value, source = synonyms[0]
        entries.append(
            ConfigEntry(
                name=definition.name,
                value=value,
                source=source,
                read_only=False,
                sensitive=False,
                type=definition.type.name,
                documentation=definition.documentation,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def parse_value(name: str, value: str | None) -> str:
    """`value` in canonical form for config `name`, or InvalidConfigError."""
    definition = CONFIGS_BY_NAME.get(name)
    if definition is None:
        raise InvalidConfigError(f"unknown topic config {name!r}")
    if value is None:
        raise InvalidConfigError(f"topic config {name!r} needs a value (null given)")
    try:
        return definition.parse(value)
    except _Refused as exc:
        raise InvalidConfigError(f"invalid value for topic config {name!r}: {exc}") from None


def check_overrides(settings: Settings, overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Validated, canonical overrides, or InvalidConfigError naming the first bad one."""
    checked = {name: parse_value(name, value) for name, value in sorted(overrides.items())}
    if checked.get(DELAY_ENABLE) == "true" and checked.get(EXCHANGE_TYPE):
        raise InvalidConfigError(
            f"{DELAY_ENABLE} applies to topics, not exchanges: enable it on a bound topic"
        )
    try:
        log_config(settings, checked)
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None
    return checked


def log_config(settings: Settings, overrides: Mapping[str, str]) -> LogConfig:
    """The storage settings of a topic with these overrides."""

    def value(name: str) -> str:
        return effective(settings, overrides, name)

    def bound(name: str) -> int | None:
        number = int(value(name))
        return None if number < 0 else number

    keep_everything = "delete" not in value("cleanup.policy").split(",")
    return LogConfig(
        segment_bytes=int(value("segment.bytes")),
        segment_ms=int(value("segment.ms")),
        retention_ms=None if keep_everything else bound("retention.ms"),
        retention_bytes=None if keep_everything else bound("retention.bytes"),
        max_message_bytes=int(value("max.message.bytes")),
        index_interval_bytes=int(value("index.interval.bytes")),
        timestamp_type=TimestampType(value("message.timestamp.type")),
    )


def acks_all_fsync(settings: Settings, overrides: Mapping[str, str]) -> bool:
    return effective(settings, overrides, "weirmq.acks.all.fsync") == "true"


_LEVEL_CONFIGS = {
    "gzip": "compression.gzip.level",
    "lz4": "compression.lz4.level",
    "zstd": "compression.zstd.level",
}


def recompression(
    settings: Settings, overrides: Mapping[str, str]
) -> tuple[str, int | None] | None:
    """The codec and level batches are rewritten in on append (None: ``producer``, kept as
    sent). gzip's -1 is the library's default level."""
    codec = effective(settings, overrides, "compression.type")
    if codec == "producer":
        return None
    name = _LEVEL_CONFIGS.get(codec)
    level = None if name is None else int(effective(settings, overrides, name))
    return codec, (None if level == -1 else level)


def delays_enabled(settings: Settings, overrides: Mapping[str, str]) -> bool:
    return effective(settings, overrides, DELAY_ENABLE) == "true"


def backlog_limit(overrides: Mapping[str, str]) -> tuple[int, str] | None:
    """A topic's backlog bound and the group it is measured against ("" for the slowest),
    or None when the topic has not opted in (no broker-wide default: it is per topic)."""
    limit = int(overrides.get(BACKLOG_MAX_BYTES, "-1"))
    if limit <= 0:
        return None
    return limit, overrides.get(BACKLOG_GROUP, "")


# --- incremental changes --------------------------------------------------------------------


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_ops(
    settings: Settings, overrides: Mapping[str, str], ops: list[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs `ops` ((name, op, value), in order),
    validated as a whole; the input is not changed."""
    result = dict(overrides)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise InvalidConfigError(f"topic config {name!r} appears twice in one request")
        seen.add(name)
        definition = CONFIGS_BY_NAME.get(name)
        if definition is None:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        if op == AlterOp.SET:
            result[name] = parse_value(name, value)
        elif op == AlterOp.DELETE:
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            result[name] = _list_op(settings, result, definition, op, value)
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {name!r}")
    return check_overrides(settings, result)


def _list_op(
    settings: Settings,
    overrides: Mapping[str, str],
    definition: TopicConfigDef,
    op: int,
    value: str | None,
) -> str:
    if not definition.list_valued:
        raise InvalidConfigError(
            f"APPEND and SUBTRACT apply to list configs only; {definition.name!r} is "
            f"{definition.type.name}"
        )
    if value is None:
        raise InvalidConfigError(f"topic config {definition.name!r} needs a value (null given)")
    current = effective(settings, overrides, definition.name).split(",")
    items = [item.strip() for item in value.split(",") if item.strip()]
    if op == AlterOp.APPEND:
        merged = current + [item for item in items if item not in current]
    else:
        merged = [item for item in current if item not in items]
    return parse_value(definition.name, ",".join(merged))
