"""The `weirmq` data source's options: Spark's Kafka source options, parsed and checked.

Spark hands a data source its options case-insensitively (keys arrive lower-cased), so
every name here is compared lower-cased and error messages use Spark's spelling. Parsing
happens on the driver when the DataFrame is defined, so a misspelled option or a bad JSON
offset fails there, naming the option, before any task runs.

`kafka.`-prefixed options (other than `kafka.bootstrap.servers`) go to the Kafka client
unchanged: `kafka.linger.ms`, `kafka.compression.type`, `kafka.security.protocol`...
librdkafka knows most of the Java client's names; one it does not know is reported when
the first client is made, on the driver, with its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Spark's own spelling, for messages and docs; keys are matched lower-cased.
READ_OPTIONS = (
    "kafka.bootstrap.servers",
    "bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "includeHeaders",
    "failOnDataLoss",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    # WeirMQ's own: commit a stream's progress to kafka.group.id, for lag monitoring.
    "commitOffsetsToGroup",
)
WRITE_OPTIONS = (
    "kafka.bootstrap.servers",
    "bootstrap.servers",
    "topic",
    # WeirMQ's own (Flink's Kafka sink names): at-least-once or exactly-once, and the prefix
    # of the transactional ids and marker groups exactly-once uses.
    "deliveryGuarantee",
    "transactionalIdPrefix",
)
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
DELIVERY_GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)
# Spark adds these itself (`.load(path)`, `.option("checkpointLocation", ...)`, a query's
# name); they are not the source's business, so they are neither errors nor used.
SPARK_OWN_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})
# Options Spark's Kafka source refuses because the source manages them itself.
MANAGED_CLIENT_OPTIONS = {
    "kafka.auto.offset.reset": "set startingOffsets instead",
    "kafka.enable.auto.commit": "the source never commits through the consumer",
    "kafka.key.deserializer": "keys are always read as binary",
    "kafka.value.deserializer": "values are always read as binary",
    "kafka.key.serializer": "keys are always written as binary",
    "kafka.value.serializer": "values are always written as binary",
    "kafka.group.protocol": "the source assigns partitions itself",
    "kafka.transactional.id": (
        "the sink derives one per task with deliveryGuarantee=exactly-once "
        "(set transactionalIdPrefix to choose its prefix)"
    ),
}

EARLIEST = -2
"""Kafka's (and Spark's JSON offsets') code for the earliest offset of a partition."""
LATEST = -1
"""... and for the latest (the high watermark)."""

DEFAULT_POLL_TIMEOUT_MS = 120_000


class OptionError(ValueError):
    """An option is unknown, missing, or has a value the source cannot use."""


TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: exactly one of the three ways Spark's source offers."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to a `subscribe` or `subscribePattern` subscription."""
        if self.pattern is not None:
            # Java's Pattern.matcher(topic).matches() is a whole-string match.
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends: one code for every partition, per-partition offsets,
    one timestamp for every partition, or per-partition timestamps (milliseconds)."""

    default: int = LATEST
    """EARLIEST or LATEST, for partitions given nothing more specific."""
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[TopicPartitionKey, int] = field(default_factory=dict)

    @property
    def by_time(self) -> bool:
        return self.timestamp is not None or bool(self.timestamps)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A read's options, checked. `client` is the Kafka client configuration."""

    client: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    include_headers: bool
    fail_on_data_loss: bool
    latest_if_no_timestamp_match: bool
    group_id_prefix: str
    poll_timeout_ms: int
    commit_to_group: bool
    """`commitOffsetsToGroup`: commit each finished micro-batch's end offsets to
    `kafka.group.id`, for lag monitoring."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A write's options, checked."""

    client: Mapping[str, str]
    topic: str | None
    exactly_once: bool = False
    """`deliveryGuarantee=exactly-once`: each task writes in a transaction (write.py)."""
    transactional_id_prefix: str = "weirmq-spark"


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Checks a read's options; raises `OptionError` naming the problem it finds.

    `streaming=None` checks what batch and streaming reads share, for when it is not known
    yet which one the options are for (and the offsets it returns are the batch ones)."""
    opts = _lower(options)
    _reject_unknown(opts, READ_OPTIONS, "read")
    client = _client_config(opts)
    subscription = _subscription(opts)
    starting = _offset_spec(
        opts,
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        default=LATEST if streaming is not False else EARLIEST,
        allow_earliest=True,
        allow_latest=streaming is not False,
    )
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in opts:
                raise OptionError(f"{name} is for batch reads only; a stream has no end")
        ending = OffsetSpec(default=LATEST)
    else:
        ending = _offset_spec(
            opts,
            "endingOffsets",
            "endingTimestamp",
            "endingOffsetsByTimestamp",
            default=LATEST,
            allow_earliest=False,
            allow_latest=True,
        )
    commit_to_group = _bool(opts, "commitOffsetsToGroup", False)
    if commit_to_group and "group.id" not in client:
        raise OptionError("commitOffsetsToGroup=true needs kafka.group.id (the group to commit to)")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', not {strategy!r}"
        )
    return ReadOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        latest_if_no_timestamp_match=strategy == "latest",
        group_id_prefix=opts.get("groupidprefix", "weirmq-spark"),
        poll_timeout_ms=_positive_int(opts, "kafkaConsumer.pollTimeoutMs")
        or DEFAULT_POLL_TIMEOUT_MS,
        commit_to_group=commit_to_group,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Checks a write's options; raises `OptionError` naming every problem it finds."""
    opts = _lower(options)
    read_only = sorted(
        name for name in READ_OPTIONS if name.lower() in opts and name not in WRITE_OPTIONS
    )
    if read_only:
        raise OptionError(
            f"{', '.join(read_only)}: read options, not valid for a write "
            "(the target is the `topic` option or column)"
        )
    _reject_unknown(opts, WRITE_OPTIONS, "write")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("topic must not be empty")
    guarantee = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in DELIVERY_GUARANTEES:
        raise OptionError(
            f"deliveryGuarantee must be {' or '.join(DELIVERY_GUARANTEES)}, not {guarantee!r}"
        )
    prefix = opts.get("transactionalidprefix", "weirmq-spark").strip()
    if not prefix:
        raise OptionError("transactionalIdPrefix must not be empty")
    client = _client_config(opts)
    if guarantee == EXACTLY_ONCE:
        # A transaction needs both; a user's other choice would be silently overridden.
        wrong = [
            f"kafka.{name}={client[name]}"
            for name, allowed in (("acks", ("all", "-1")), ("enable.idempotence", ("true",)))
            if name in client and client[name].strip().lower() not in allowed
        ]
        if wrong:
            raise OptionError(
                f"deliveryGuarantee=exactly-once needs acks=all and idempotence: {', '.join(wrong)}"
            )
    return WriteOptions(
        client=client,
        topic=topic.strip() if topic else None,
        exactly_once=guarantee == EXACTLY_ONCE,
        transactional_id_prefix=prefix,
    )


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _reject_unknown(opts: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
    allowed = {name.lower() for name in known}
    unknown = sorted(
        key
        for key in opts
        if key not in allowed and key not in SPARK_OWN_OPTIONS and not key.startswith("kafka.")
    )
    if unknown:
        raise OptionError(
            f"unknown option(s) for a weirmq {what}: {', '.join(unknown)}; known options are "
            f"{', '.join(known)} and kafka.* (passed to the Kafka client)"
        )
    managed = sorted(key for key in opts if key in MANAGED_CLIENT_OPTIONS)
    if managed:
        raise OptionError(
            "; ".join(f"{key} is not supported: {MANAGED_CLIENT_OPTIONS[key]}" for key in managed)
        )


def _client_config(opts: Mapping[str, str]) -> dict[str, str]:
    servers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
    if not servers or not servers.strip():
        raise OptionError("kafka.bootstrap.servers (or bootstrap.servers) must be set")
    config = {
        key.removeprefix("kafka."): value
        for key, value in opts.items()
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers"
    }
    config["bootstrap.servers"] = servers.strip()
    return config


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of subscribe, subscribePattern or assign must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe must name at least one topic")
        return Subscription(topics=topics)
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise OptionError("subscribePattern must not be empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"subscribePattern is not a valid pattern: {exc}") from None
        return Subscription(pattern=pattern)
    parsed = _json(opts["assign"], "assign", '{"topicA":[0,1],"topicB":[2,4]}')
    pairs: list[TopicPartitionKey] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(f"assign: {topic!r} must map to a list of partition numbers")
        pairs.extend((topic, p) for p in partitions)
    if not pairs:
        raise OptionError("assign must name at least one partition")
    return Subscription(assign=tuple(sorted(set(pairs))))


def _offset_spec(
    opts: Mapping[str, str],
    offsets_name: str,
    timestamp_name: str,
    by_timestamp_name: str,
    *,
    default: int,
    allow_earliest: bool,
    allow_latest: bool,
) -> OffsetSpec:
    # Spark's precedence: one timestamp for all, then per-partition timestamps, then offsets.
    if timestamp_name.lower() in opts:
        raw = opts[timestamp_name.lower()].strip()
        try:
            timestamp = int(raw)
        except ValueError:
            raise OptionError(
                f"{timestamp_name} must be milliseconds since the epoch, not {raw!r}"
            ) from None
        if timestamp < 0:
            raise OptionError(f"{timestamp_name} must be >= 0")
        return OffsetSpec(default=default, timestamp=timestamp)
    if by_timestamp_name.lower() in opts:
        example = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
        table = _partition_table(opts[by_timestamp_name.lower()], by_timestamp_name, example)
        bad = [k for k, v in table.items() if v < 0]
        if bad:
            raise OptionError(f"{by_timestamp_name}: timestamps must be >= 0")
        return OffsetSpec(default=default, timestamps=table)
    if offsets_name.lower() not in opts:
        return OffsetSpec(default=default)
    raw = opts[offsets_name.lower()]
    word = raw.strip().lower()
    if word == "earliest":
        if not allow_earliest:
            raise OptionError(f"{offsets_name}=earliest is not allowed (it would read nothing)")
        return OffsetSpec(default=EARLIEST)
    if word == "latest":
        if not allow_latest:
            raise OptionError(
                f"{offsets_name}=latest is not allowed in a batch read (it would read nothing)"
            )
        return OffsetSpec(default=LATEST)
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    table = _partition_table(raw, offsets_name, example)
    allowed = ["an offset >= 0"]
    allowed += ["-1 for latest"] if allow_latest else []
    allowed += ["-2 for earliest"] if allow_earliest else []
    for (topic, partition), offset in table.items():
        if (
            offset < EARLIEST
            or (offset == EARLIEST and not allow_earliest)
            or (offset == LATEST and not allow_latest)
        ):
            raise OptionError(
                f"{offsets_name}: offset {offset} for {topic}-{partition} is not valid here "
                f"(use {', '.join(allowed)})"
            )
    return OffsetSpec(default=default, offsets=table)


def _partition_table(raw: str, name: str, example: str) -> dict[TopicPartitionKey, int]:
    parsed = _json(raw, name, example)
    table: dict[TopicPartitionKey, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{name}: {topic!r} must map partitions to numbers, e.g. {example}")
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(f"{name}: partition {partition!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"{name}: {topic}-{partition} must map to an integer")
            table[(topic, number)] = value
    return table


def _json(raw: str, name: str, example: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"{name} is not valid JSON ({exc.msg}); expected e.g. {example}"
        ) from None
    if not isinstance(parsed, dict):
        raise OptionError(f"{name} must be a JSON object, e.g. {example}")
    return parsed


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    word = raw.strip().lower()
    if word not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {raw!r}")
    return word == "true"


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"{name} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"{name} must be a positive integer, not {value}")
    return value
