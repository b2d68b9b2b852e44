"""Group configs: per-group overrides of the share group settings, with Kafka's names.

Kafka (KIP-848, KIP-932, KIP-1191) lets an administrator set configs on a GROUP resource
(ConfigResource type 32) with IncrementalAlterConfigs, and read them with DescribeConfigs,
for a group that may not exist yet. This module is that table and its store:

- every config is one row of ``GROUP_CONFIGS``: Kafka's name and type, the broker setting
  it defaults to (Kafka's synonym, e.g. ``share.record.lock.duration.ms`` <-
  ``group.share.record.lock.duration.ms``), a parser from text to canonical text, and one
  line of documentation. The chain reported as synonyms is

      GROUP_CONFIG (8)  <  STATIC_BROKER_CONFIG (4)  <  DEFAULT_CONFIG (5)

- a group stores only its overrides, in ``group-configs.json`` in the data directory,
  rewritten atomically (temp file, fsync, rename) before a change is answered, as
  ``topics.json`` is;
- the whole set of a group's overrides is checked together: the heartbeat interval must
  stay below the session timeout, as the broker's own settings must.

What the values drive: `share_config` (the share-partitions' `ShareConfig`: lock duration,
delivery limit, window, reset, retry backoff) and `share_settings` (membership: session
timeout, heartbeat interval), read by the share service and the coordinator at each use,
so a change applies to the next fetch and the next heartbeat. The dead-letter configs
(KIP-1191) name the topic rejected and exhausted records are copied to.

Kafka's names (Kafka 4.2's GroupConfig): ``consumer.*`` drive the KIP-848 members of the
group (`consumer_timeouts`, read by the coordinator at each heartbeat, so a change applies
from each member's next heartbeat); ``share.*`` the share group; ``streams.*`` are stored
and described only, as WeirMQ has no streams groups. A value a group sets is held to the
broker's bounds, as Kafka holds it (``group.consumer.min.session.timeout.ms`` and the
others, `BOUNDS`); a stored value outside bounds changed since is clamped when used, as
Kafka 4.2 does. Kafka's ``share.renew.acknowledge.enable`` is not known here (no RENEW
acknowledgement yet).

Not Kafka's: ``weirmq.share.retry.backoff.ms`` (queues/config.py says why it exists).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..groups.share import ShareGroupSettings
from ..queues import ShareConfig
from ..settings import Settings
from ..storage.checkpoint import write_atomically
from ..storage.errors import StorageError
from .configs import (
    INT32_MAX,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    InvalidConfigError,
    _boolean,
    _choice,
    _integer,
    _Refused,
    _topic_name,
)

log = logging.getLogger(__name__)

GROUP_CONFIGS_FILE: Final = "group-configs.json"
CONFIGURED_GROUPS_MAX: Final = 10_000
"""Groups with overrides at most: each is an entry of a file rewritten on every change."""

LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
MAX_RECORD_LOCKS = "share.partition.max.record.locks"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
RETRY_BACKOFF = "weirmq.share.retry.backoff.ms"
CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_INITIAL_REBALANCE_DELAY = "streams.initial.rebalance.delay.ms"

STREAMS_STANDBY_REPLICAS_MAX: Final = 2
"""Kafka's group.streams.max.standby.replicas default (no streams groups here to set it)."""


@dataclass(frozen=True, slots=True)
class Bound:
    """A broker setting bounding a group config: Kafka's name and WeirMQ's field."""

    kafka_name: str
    setting: str | None
    fixed: int = 0
    """The bound when no setting holds it (streams: Kafka's defaults)."""

    def value(self, settings: Settings) -> int:
        return int(getattr(settings, self.setting)) if self.setting else self.fixed


BOUNDS: Mapping[str, tuple[Bound, Bound]] = {
    CONSUMER_SESSION_TIMEOUT: (
        Bound("group.consumer.min.session.timeout.ms", "group_consumer_min_session_timeout_ms"),
        Bound("group.consumer.max.session.timeout.ms", "group_consumer_max_session_timeout_ms"),
    ),
    CONSUMER_HEARTBEAT_INTERVAL: (
        Bound(
            "group.consumer.min.heartbeat.interval.ms", "group_consumer_min_heartbeat_interval_ms"
        ),
        Bound(
            "group.consumer.max.heartbeat.interval.ms", "group_consumer_max_heartbeat_interval_ms"
        ),
    ),
    SESSION_TIMEOUT: (
        Bound("group.share.min.session.timeout.ms", "group_share_min_session_timeout_ms"),
        Bound("group.share.max.session.timeout.ms", "group_share_max_session_timeout_ms"),
    ),
    HEARTBEAT_INTERVAL: (
        Bound("group.share.min.heartbeat.interval.ms", "group_share_min_heartbeat_interval_ms"),
        Bound("group.share.max.heartbeat.interval.ms", "group_share_max_heartbeat_interval_ms"),
    ),
    LOCK_DURATION: (
        Bound("group.share.min.record.lock.duration.ms", "group_share_min_record_lock_duration_ms"),
        Bound("group.share.max.record.lock.duration.ms", "group_share_max_record_lock_duration_ms"),
    ),
    DELIVERY_LIMIT: (
        Bound("group.share.min.delivery.count.limit", "group_share_min_delivery_count_limit"),
        Bound("group.share.max.delivery.count.limit", "group_share_max_delivery_count_limit"),
    ),
    STREAMS_SESSION_TIMEOUT: (
        Bound("group.streams.min.session.timeout.ms", None, 45_000),
        Bound("group.streams.max.session.timeout.ms", None, 60_000),
    ),
    STREAMS_HEARTBEAT_INTERVAL: (
        Bound("group.streams.min.heartbeat.interval.ms", None, 5_000),
        Bound("group.streams.max.heartbeat.interval.ms", None, 15_000),
    ),
    STREAMS_STANDBY_REPLICAS: (
        Bound("group.streams.min.standby.replicas", None, 0),
        Bound("group.streams.max.standby.replicas", None, STREAMS_STANDBY_REPLICAS_MAX),
    ),
}
"""Group config -> (lowest, highest) value a group may set, both inclusive."""
TIMEOUT_PAIRS: tuple[tuple[str, str], ...] = (
    (CONSUMER_SESSION_TIMEOUT, CONSUMER_HEARTBEAT_INTERVAL),
    (SESSION_TIMEOUT, HEARTBEAT_INTERVAL),
    (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL),
)
"""(session timeout, heartbeat interval): the interval must stay below the timeout."""


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: ConfigType
    parse: Callable[[str], str]
    default: str
    documentation: str
    setting: str | None = None
    """The `Settings` field of the broker config it defaults to, when there is one."""
    broker_name: str | None = None


# fmt: off
GROUP_CONFIGS: tuple[GroupConfigDef, ...] = (
    GroupConfigDef(
        CONSUMER_HEARTBEAT_INTERVAL, ConfigType.INT, _integer(1, INT32_MAX), "5000",
        "how often the group's consumer-protocol (KIP-848) members are told to heartbeat",
        "group_consumer_heartbeat_interval_ms", "group.consumer.heartbeat.interval.ms",
    ),
    GroupConfigDef(
        CONSUMER_SESSION_TIMEOUT, ConfigType.INT, _integer(1, INT32_MAX), "45000",
        "a consumer-protocol (KIP-848) member of the group silent this long is removed",
        "group_consumer_session_timeout_ms", "group.consumer.session.timeout.ms",
    ),
    GroupConfigDef(
        STREAMS_HEARTBEAT_INTERVAL, ConfigType.INT, _integer(1, INT32_MAX), "5000",
        "stored and described only: WeirMQ has no streams groups (KIP-1071)",
        broker_name="group.streams.heartbeat.interval.ms",
    ),
    GroupConfigDef(
        STREAMS_INITIAL_REBALANCE_DELAY, ConfigType.INT, _integer(0, INT32_MAX), "3000",
        "stored and described only: WeirMQ has no streams groups (KIP-1071)",
        broker_name="group.streams.initial.rebalance.delay.ms",
    ),
    GroupConfigDef(
        STREAMS_STANDBY_REPLICAS, ConfigType.INT, _integer(0, INT32_MAX), "0",
        "stored and described only: WeirMQ has no streams groups (KIP-1071)",
        broker_name="group.streams.num.standby.replicas",
    ),
    GroupConfigDef(
        STREAMS_SESSION_TIMEOUT, ConfigType.INT, _integer(1, INT32_MAX), "45000",
        "stored and described only: WeirMQ has no streams groups (KIP-1071)",
        broker_name="group.streams.session.timeout.ms",
    ),
    GroupConfigDef(
        AUTO_OFFSET_RESET, ConfigType.STRING, _choice("latest", "earliest"), "latest",
        "where a share-partition first read by the group starts: the log end (latest) or "
        "start (earliest)",
    ),
    GroupConfigDef(
        DELIVERY_LIMIT, ConfigType.INT, _integer(1, 25), "5",
        "deliveries of one record before it is archived and dead-lettered",
        "group_share_delivery_count_limit", "group.share.delivery.count.limit",
    ),
    GroupConfigDef(
        HEARTBEAT_INTERVAL, ConfigType.INT, _integer(1, INT32_MAX), "5000",
        "how often members are told to heartbeat",
        "group_share_heartbeat_interval_ms", "group.share.heartbeat.interval.ms",
    ),
    GroupConfigDef(
        ISOLATION_LEVEL, ConfigType.STRING, _choice("read_uncommitted", "read_committed"),
        "read_uncommitted",
        "which records share consumers see (no transactions yet: both see the same)",
    ),
    GroupConfigDef(
        MAX_RECORD_LOCKS, ConfigType.INT, _integer(1, 10_000), "2000",
        "records in flight per share-partition at most",
        "group_share_partition_max_record_locks", "group.share.partition.max.record.locks",
    ),
    GroupConfigDef(
        LOCK_DURATION, ConfigType.INT, _integer(1, 3_600_000), "30000",
        "how long a delivered record stays locked to its member before others may get it",
        "group_share_record_lock_duration_ms", "group.share.record.lock.duration.ms",
    ),
    GroupConfigDef(
        SESSION_TIMEOUT, ConfigType.INT, _integer(1, INT32_MAX), "45000",
        "a member silent this long is removed and its records released",
        "group_share_session_timeout_ms", "group.share.session.timeout.ms",
    ),
    GroupConfigDef(
        DLQ_COPY_RECORD, ConfigType.BOOLEAN, _boolean, "false",
        "whether a dead-letter record carries the original key, value and headers (else "
        "only the context headers)",
    ),
    GroupConfigDef(
        DLQ_TOPIC, ConfigType.STRING, _topic_name, "",
        "the topic rejected and exhausted records are copied to (empty: none); created on "
        "first use",
    ),
    GroupConfigDef(
        RETRY_BACKOFF, ConfigType.LONG, _integer(0, 3_600_000), "1000",
        "a released or timed-out record is delivered again only this long after",
    ),
)
# fmt: on
GROUP_CONFIGS_BY_NAME: Mapping[str, GroupConfigDef] = {c.name: c for c in GROUP_CONFIGS}


class SetOp:
    """IncrementalAlterConfigs operations that apply to group configs."""

    SET = 0
    DELETE = 1


class GroupConfigs:
    """The overrides of every group, and what they resolve to; see the module docstring."""

    def __init__(self, data_dir: Path, settings: Settings) -> None:
        self._path = data_dir / GROUP_CONFIGS_FILE
        self._settings = settings
        self._overrides: dict[str, dict[str, str]] = {}
        self._share_configs: dict[str, ShareConfig] = {}
        """Resolved per group, on first use after a change."""
        self._load()

    def _load(self) -> None:
        try:
            document = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # Refusing to start would be worse: the defaults are safe, the file is kept.
            log.error("%s unreadable, every group uses the defaults: %s", self._path, exc)
            return
        groups = document.get("groups", {}) if isinstance(document, dict) else {}
        for group_id, overrides in groups.items():
            try:
                self._overrides[group_id] = self._checked(group_id, overrides)
            except InvalidConfigError as exc:
                log.error("group %r: configs ignored: %s", group_id, exc)

    # --- reading --------------------------------------------------------------------------

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def groups(self) -> Iterator[str]:
        return iter(sorted(self._overrides))

    def value(self, group_id: str, name: str) -> str:
        """The value in force: the group's override, else the broker's, else built in."""
        overrides = self._overrides.get(group_id, {})
        if name in overrides:
            return self._clamped(name, overrides[name])
        return self._broker_value(GROUP_CONFIGS_BY_NAME[name])

    def _clamped(self, name: str, text: str) -> str:
        """A stored value within the broker's bounds as they are now (they may have changed
        since it was set): Kafka 4.2 caps it so, with a warning, rather than refuse to use
        the group."""
        bounds = BOUNDS.get(name)
        if bounds is None:
            return text
        low, high = (bound.value(self._settings) for bound in bounds)
        value = int(text)
        if low <= value <= high:
            return text
        capped = str(min(max(value, low), high))
        log.warning("group config %s=%s is outside [%d, %d]: %s is used", name, text, low, high,
                    capped)  # fmt: skip
        return capped

    def consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of the group's KIP-848 members, in ms."""
        return (
            int(self.value(group_id, CONSUMER_SESSION_TIMEOUT)),
            int(self.value(group_id, CONSUMER_HEARTBEAT_INTERVAL)),
        )

    def _broker_value(self, definition: GroupConfigDef) -> str:
        if definition.setting is None:
            return definition.default
        return str(getattr(self._settings, definition.setting))

    def share_config(self, group_id: str) -> ShareConfig:
        found = self._share_configs.get(group_id)
        if found is None:
            found = self._share_configs[group_id] = _share_config(
                lambda name: self.value(group_id, name)
            )
        return found

    def share_settings(self, group_id: str) -> ShareGroupSettings:
        return ShareGroupSettings(
            session_timeout_ms=int(self.value(group_id, SESSION_TIMEOUT)),
            heartbeat_interval_ms=int(self.value(group_id, HEARTBEAT_INTERVAL)),
        )

    def dead_letter_topic(self, group_id: str) -> str:
        return self.value(group_id, DLQ_TOPIC)

    def copy_dead_letters(self, group_id: str) -> bool:
        return self.value(group_id, DLQ_COPY_RECORD) == "true"

    def describe(self, group_id: str) -> list[ConfigEntry]:
        """Every group config, in name order, with its source and synonyms."""
        overrides = self._overrides.get(group_id, {})
        entries = []
        for definition in sorted(GROUP_CONFIGS, key=lambda d: d.name):
            synonyms: list[tuple[str, str, int]] = []
            if definition.name in overrides:
                synonyms.append(
                    (definition.name, overrides[definition.name], ConfigSource.GROUP_CONFIG)
                )
            broker_value = self._broker_value(definition)
            if definition.broker_name is not None and broker_value != definition.default:
                synonyms.append(
                    (definition.broker_name, broker_value, ConfigSource.STATIC_BROKER_CONFIG)
                )
            synonyms.append(
                (
                    definition.broker_name or definition.name,
                    definition.default,
                    ConfigSource.DEFAULT_CONFIG,
                )
            )
            entries.append(
                ConfigEntry(
                    name=definition.name,
                    value=self.value(group_id, definition.name),
                    source=synonyms[0][2],
                    read_only=False,
                    sensitive=False,
                    type=definition.type.name,
                    documentation=definition.documentation,
                    synonyms=tuple(synonyms),
                )
            )
        return entries

    # --- changing -------------------------------------------------------------------------

    def replace(
        self, group_id: str, values: Mapping[str, str | None], *, validate_only: bool
    ) -> dict[str, str]:
        """Legacy AlterConfigs: the group's overrides become exactly `values` (Kafka's
        AlterConfigs replaces the whole set; a name left out returns to its default)."""
        ops: list[tuple[str, int, str | None]] = [
            (name, SetOp.DELETE, None)
            for name in self._overrides.get(group_id, {})
            if name not in values
        ]
        ops += [(name, SetOp.SET, value) for name, value in values.items()]
        return self.alter(group_id, ops, validate_only=validate_only)

    def alter(
        self, group_id: str, ops: list[tuple[str, int, str | None]], *, validate_only: bool
    ) -> dict[str, str]:
        """Apply IncrementalAlterConfigs `ops` ((name, op, value), in order) to the group's
        overrides, checked as a whole, and store them; returns the new overrides."""
        if not group_id:
            raise InvalidConfigError("a group config needs a group id")
        before_overrides = self._overrides.get(group_id, {})
        result: dict[str, str] = dict(before_overrides)
        seen: set[str] = set()
        for name, op, value in ops:
            if name in seen:
                raise InvalidConfigError(f"group config {name!r} appears twice in one request")
            seen.add(name)
            if name not in GROUP_CONFIGS_BY_NAME:
                raise InvalidConfigError(f"unknown group config {name!r}")
            if op == SetOp.SET:
                if value is None:
                    raise InvalidConfigError(f"group config {name!r} needs a value (null given)")
                result[name] = value
            elif op == SetOp.DELETE:
                result.pop(name, None)
            else:
                raise InvalidConfigError(
                    f"operation {op} does not apply to group config {name!r} (SET and DELETE do)"
                )
        changed = {name for name in seen if result.get(name) != before_overrides.get(name)}
        checked = self._checked(group_id, result, bounded=changed)
        if (
            group_id not in self._overrides
            and checked
            and len(self._overrides) >= CONFIGURED_GROUPS_MAX
        ):
            raise InvalidConfigError(
                f"{CONFIGURED_GROUPS_MAX} groups have configs already; delete some first"
            )
        if validate_only:
            return checked
        before = self._overrides.get(group_id)
        if checked:
            self._overrides[group_id] = checked
        else:
            self._overrides.pop(group_id, None)
        try:
            self._save()
        except OSError as exc:
            if before is None:
                self._overrides.pop(group_id, None)
            else:
                self._overrides[group_id] = before
            raise StorageError(f"group configs not written: {exc}") from exc
        self._share_configs.pop(group_id, None)
        log.info("group %r configs now %s", group_id, checked or "the defaults")
        return checked

    def forget(self, group_id: str) -> None:
        """The group was deleted: its configs go with it (as in Kafka)."""
        if self._overrides.pop(group_id, None) is not None:
            self._share_configs.pop(group_id, None)
            try:
                self._save()
            except OSError as exc:
                log.error("configs of deleted group %r not removed: %s", group_id, exc)

    def _checked(
        self, group_id: str, overrides: object, bounded: Collection[str] = ()
    ) -> dict[str, str]:
        """Parsed overrides, the `bounded` ones held to the broker's bounds (those a request
        changes: stored ones are clamped instead, see `_clamped`), the session timeouts
        above their heartbeat intervals; or InvalidConfigError."""
        if not isinstance(overrides, dict):
            raise InvalidConfigError(f"group {group_id!r}: configs must be a mapping")
        result: dict[str, str] = {}
        for name, text in sorted(overrides.items()):
            definition = GROUP_CONFIGS_BY_NAME.get(name)
            if definition is None:
                raise InvalidConfigError(f"unknown group config {name!r}")
            if not isinstance(text, str):
                raise InvalidConfigError(f"group config {name!r} must be text")
            try:
                result[name] = definition.parse(text)
            except _Refused as exc:
                raise InvalidConfigError(
                    f"invalid value for group config {name!r}: {exc}"
                ) from None

        self._check_bounds({name: result[name] for name in bounded if name in result})

        def resolved(name: str) -> str:
            if name in result:
                return result[name]
            return self._broker_value(GROUP_CONFIGS_BY_NAME[name])

        for session_name, heartbeat_name in TIMEOUT_PAIRS:
            session = int(resolved(session_name))
            heartbeat = int(resolved(heartbeat_name))
            if heartbeat >= session:
                raise InvalidConfigError(
                    f"{heartbeat_name} ({heartbeat}) must be below {session_name} ({session})"
                )
        _share_config(resolved)  # everything else ShareConfig checks
        return result

    def _check_bounds(self, changed: Mapping[str, str]) -> None:
        """The values a request sets, within the broker's bounds (Kafka's GroupConfig
        validation); INVALID_CONFIG naming the bound otherwise."""
        for name, text in sorted(changed.items()):
            bounds = BOUNDS.get(name)
            if bounds is None:
                continue
            low, high = bounds
            value = int(text)
            if value < low.value(self._settings):
                raise InvalidConfigError(
                    f"{name} must be greater than or equal to {low.kafka_name} "
                    f"({low.value(self._settings)}); got {value}"
                )
            if value > high.value(self._settings):
                raise InvalidConfigError(
                    f"{name} must be less than or equal to {high.kafka_name} "
                    f"({high.value(self._settings)}); got {value}"
                )

    def _save(self) -> None:
        document = {"version": 1, "groups": self._overrides}
        write_atomically(self._path, json.dumps(document, sort_keys=True, indent=1).encode())


def _share_config(value: Callable[[str], str]) -> ShareConfig:
    reset = value(AUTO_OFFSET_RESET)
    assert reset in ("latest", "earliest"), reset
    return ShareConfig(
        record_lock_duration_ms=int(value(LOCK_DURATION)),
        delivery_count_limit=int(value(DELIVERY_LIMIT)),
        max_record_locks=int(value(MAX_RECORD_LOCKS)),
        auto_offset_reset="latest" if reset == "latest" else "earliest",
        retry_backoff_ms=int(value(RETRY_BACKOFF)),
    )
