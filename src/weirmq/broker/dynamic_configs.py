"""Dynamic broker configs (Kafka's KIP-226): broker settings changed at runtime through
AlterConfigs and IncrementalAlterConfigs on a BROKER resource, without a restart.

Theory of operation
-------------------
Kafka resolves a broker config through four layers, the first that has it wins:

    DYNAMIC_BROKER_CONFIG (2)          the resource named by this broker's id
    DYNAMIC_DEFAULT_BROKER_CONFIG (3)  the resource named "" (the cluster-wide default)
    STATIC_BROKER_CONFIG (4)           the settings file, environment and flags
    DEFAULT_CONFIG (5)                 the built-in default

WeirMQ keeps the two dynamic layers in ``broker-configs.json`` in the data directory,
rewritten atomically (temp file, fsync, rename) before a change is answered, and derives
the effective `Settings` from the static ones and both layers (`effective`). The broker
swaps its `settings` for that and re-applies every topic's log config, so the change is in
force for the next append, roll and retention round.

Only a few names are dynamic here, those that truly take effect at once (`DYNAMIC`): the
broker-wide defaults of the topic configs that have a WeirMQ setting (log.retention.ms,
log.retention.bytes, log.segment.bytes, message.max.bytes). A name of another broker
setting is answered as Kafka answers a read-only one (INVALID_REQUEST, "Cannot update these
configs dynamically: [...]"); any other name is INVALID_CONFIG. Both refuse the whole
resource, as Kafka does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ..errors import ErrorCode, KafkaError
from ..settings import SETTING_SPECS, Settings, SettingsError
from ..storage.checkpoint import write_atomically
from ..storage.errors import StorageError
from .configs import INT32_MAX, INT64_MAX, ConfigSource, InvalidConfigError, _integer, _Refused

log = logging.getLogger(__name__)

BROKER_CONFIGS_FILE: Final = "broker-configs.json"
NODE, CLUSTER_DEFAULT = "node", "default"
"""The two dynamic layers: this broker's own resource, and the cluster-wide default ("")."""


class _ReadOnlyConfigError(KafkaError):
    """Kafka's answer to a broker config that cannot change at runtime (private: a
    refinement of INVALID_REQUEST for this module alone, left out of errors.py's tree)."""

    code = ErrorCode.invalid_request


@dataclass(frozen=True, slots=True)
class DynamicConfigDef:
    name: str
    setting: str
    parse: Callable[[str], str]


# fmt: off
DYNAMIC: Mapping[str, DynamicConfigDef] = {
    d.name: d
    for d in (
        DynamicConfigDef("log.retention.bytes", "retention_bytes", _integer(-1, INT64_MAX)),
        DynamicConfigDef("log.retention.ms", "retention_ms", _integer(-1, INT64_MAX)),
        DynamicConfigDef("log.segment.bytes", "segment_bytes", _integer(1024, INT32_MAX)),
        DynamicConfigDef("message.max.bytes", "message_max_bytes", _integer(64, INT32_MAX)),
    )
}
# fmt: on
_STATIC_NAMES = frozenset(spec.kafka_name for spec in SETTING_SPECS if spec.kafka_name)


class DynamicBrokerConfigs:
    """The two dynamic layers and their file; see the module docstring."""

    def __init__(self, data_dir: Path, static: Settings) -> None:
        self._path = data_dir / BROKER_CONFIGS_FILE
        self.static = static
        self._layers: dict[str, dict[str, str]] = {NODE: {}, CLUSTER_DEFAULT: {}}
        self._load()

    def _load(self) -> None:
        try:
            document = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # The static settings are safe; the file is kept for a person to look at.
            log.error("%s unreadable, dynamic broker configs ignored: %s", self._path, exc)
            return
        for layer in (NODE, CLUSTER_DEFAULT):
            values = document.get(layer, {}) if isinstance(document, dict) else {}
            try:
                self._layers[layer] = _checked(values.items() if isinstance(values, dict) else ())
            except KafkaError as exc:
                log.error("dynamic broker configs (%s) ignored: %s", layer, exc)

    # --- reading --------------------------------------------------------------------------

    def layer(self, layer: str) -> dict[str, str]:
        return dict(self._layers[layer])

    def effective(self) -> Settings:
        """The static settings with both dynamic layers over them (this broker's wins)."""
        merged = {**self._layers[CLUSTER_DEFAULT], **self._layers[NODE]}
        return _with(self.static, merged)

    def synonyms(self, name: str) -> list[tuple[str, str, int]]:
        """The dynamic (name, value, source) of broker config `name`, first in force."""
        found = []
        if name in self._layers[NODE]:
            found.append((name, self._layers[NODE][name], int(ConfigSource.DYNAMIC_BROKER_CONFIG)))
        if name in self._layers[CLUSTER_DEFAULT]:
            value = self._layers[CLUSTER_DEFAULT][name]
            found.append((name, value, int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)))
        return found

    # --- changing -------------------------------------------------------------------------

    def alter(
        self, layer: str, ops: Iterable[tuple[str, int, str | None]], *, validate_only: bool
    ) -> dict[str, str]:
        """IncrementalAlterConfigs SET (0) and DELETE (1) on one layer, checked as a whole;
        APPEND and SUBTRACT apply to no dynamic config here (none is a list)."""
        result = dict(self._layers[layer])
        ops = list(ops)
        _check_names(name for name, _, _ in ops)
        for name, op, value in ops:
            if op == 0:
                if value is None:
                    raise InvalidConfigError(f"broker config {name!r} needs a value (null given)")
                result[name] = value
            elif op == 1:
                result.pop(name, None)
            else:
                raise InvalidConfigError(
                    f"operation {op} does not apply to broker config {name!r} (SET and DELETE do)"
                )
        return self._store(layer, _checked(result.items()), validate_only)

    def replace(
        self, layer: str, values: Mapping[str, str | None], *, validate_only: bool
    ) -> dict[str, str]:
        """Legacy AlterConfigs: the layer becomes exactly `values`."""
        _check_names(values)
        if any(value is None for value in values.values()):
            raise InvalidConfigError("a broker config needs a value (null given)")
        checked = _checked((name, value or "") for name, value in values.items())
        return self._store(layer, checked, validate_only)

    def _store(self, layer: str, checked: dict[str, str], validate_only: bool) -> dict[str, str]:
        try:  # the settings' own bounds
            _with(self.static, checked)
        except SettingsError as exc:
            raise InvalidConfigError(str(exc)) from None
        if validate_only:
            return checked
        before = self._layers[layer]
        self._layers[layer] = checked
        try:
            document = {"version": 1, **self._layers}
            write_atomically(self._path, json.dumps(document, sort_keys=True, indent=1).encode())
        except OSError as exc:
            self._layers[layer] = before
            raise StorageError(f"dynamic broker configs not written: {exc}") from exc
        log.info("dynamic broker configs (%s) now %s", layer, checked or "none")
        return checked


def _with(static: Settings, values: Mapping[str, str]) -> Settings:
    """`static` with the settings the dynamic `values` (Kafka names) stand for."""
    changes: dict[str, Any] = {DYNAMIC[name].setting: int(text) for name, text in values.items()}
    return replace(static, **changes) if changes else static


def _check_names(names: Iterable[str]) -> None:
    names = list(names)
    if len(set(names)) != len(names):
        raise InvalidConfigError("a broker config is named twice in one request")
    read_only = sorted(name for name in names if name not in DYNAMIC and name in _STATIC_NAMES)
    if read_only:
        # Kafka's own words for a known config that cannot change at runtime.
        raise _ReadOnlyConfigError(
            f"Cannot update these configs dynamically: [{', '.join(read_only)}] (WeirMQ "
            f"updates {', '.join(sorted(DYNAMIC))} at runtime; the others need a restart)"
        )
    unknown = sorted(name for name in names if name not in DYNAMIC)
    if unknown:
        raise InvalidConfigError(
            f"unknown or not dynamic broker config(s) {', '.join(unknown)}: WeirMQ updates "
            f"{', '.join(sorted(DYNAMIC))} at runtime"
        )


def _checked(items: Iterable[tuple[str, object]]) -> dict[str, str]:
    result = {}
    for name, text in sorted(items):
        definition = DYNAMIC.get(name)
        if definition is None:
            raise InvalidConfigError(f"unknown dynamic broker config {name!r}")
        if not isinstance(text, str):
            raise InvalidConfigError(f"broker config {name!r} must be text")
        try:
            result[name] = definition.parse(text)
        except _Refused as exc:
            raise InvalidConfigError(f"invalid value for broker config {name!r}: {exc}") from None
    return result
