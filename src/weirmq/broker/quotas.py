"""Client quotas: which quota applies to whom, kept on disk, as Kafka resolves them.

Kafka (KIP-55, KIP-546) sets quotas on entities: a user, a client id, or both, each either
named or `<default>` (entity name null). A request from user U with client id C gets, for
each quota key, the value of the first of these entities that has one:

    /users/U/clients/C    /users/U/clients/<default>    /users/U
    /users/<default>/clients/C    /users/<default>/clients/<default>    /users/<default>
    /clients/C    /clients/<default>

There is no authentication yet, so every request is from Kafka's unauthenticated user,
`ANONYMOUS`; quotas on users are kept, shown and apply to it alone, until SASL brings
real users.

The keys are Kafka's: `producer_byte_rate` and `consumer_byte_rate` (bytes per second),
`request_percentage` (percent of one request handler's time per second, e.g. 200 for
two handlers' worth). Others (`controller_mutation_rate`, `connection_creation_rate`)
are refused with INVALID_REQUEST rather than stored and ignored.

The store is `client-quotas.json` in the data directory, rewritten atomically before an
alteration is answered; at most `ENTITIES_MAX` entities.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from ..errors import ErrorCode, KafkaError
from ..storage.checkpoint import write_atomically
from ..storage.errors import StorageError

log = logging.getLogger(__name__)

QUOTAS_FILE: Final = "client-quotas.json"
ENTITIES_MAX: Final = 10_000
LIMITS_CACHED_MAX: Final = 10_000
"""Clients whose resolved limits are cached (the cache is dropped whole past it)."""
USER: Final = "user"
CLIENT_ID: Final = "client-id"
ENTITY_TYPES: Final = (USER, CLIENT_ID)
ANONYMOUS: Final = "ANONYMOUS"
"""Kafka's principal name of an unauthenticated client."""
KEYS: Final = {
    "producer_byte_rate": "produce_bytes",
    "consumer_byte_rate": "fetch_bytes",
    "request_percentage": "request_time",
}
"""Kafka's quota keys, and the flow controller's kinds they limit (see flow/quotas.py)."""

Entity = tuple[tuple[str, str | None], ...]
"""Sorted (entity type, name or None for <default>) pairs: (("client-id", "app"),)."""


class InvalidQuotaError(KafkaError):
    code = ErrorCode.invalid_request


def entity_of(pairs: Sequence[tuple[str, str | None]]) -> Entity:
    """A request's entity, checked: known types, each at most once."""
    types = [entity_type for entity_type, _ in pairs]
    if not pairs or len(set(types)) != len(types):
        raise InvalidQuotaError("an entity names user, client-id or both, each once")
    for entity_type, name in pairs:
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuotaError(f"unknown entity type {entity_type!r} (user, client-id)")
        if name is not None and not name:
            raise InvalidQuotaError(f"an empty {entity_type} name: use null for <default>")
    return tuple(sorted(pairs))


def _precedence(user: str, client_id: str) -> list[Entity]:
    """Kafka's order of the entities that may hold a request's quota (module docstring)."""
    order: list[Entity] = []
    for user_name in (user, None):
        order += [
            ((CLIENT_ID, client_id), (USER, user_name)),
            ((CLIENT_ID, None), (USER, user_name)),
            ((USER, user_name),),
        ]
    order += [((CLIENT_ID, client_id),), ((CLIENT_ID, None),)]
    return order


class ClientQuotas:
    """Every quota entity's values, on disk; see the module docstring."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / QUOTAS_FILE
        self._entities: dict[Entity, dict[str, float]] = {}
        self.version = 0
        """Bumped on every change, for callers that cache resolved quotas."""
        self._limits: dict[tuple[str, str], tuple[int, dict[str, float]]] = {}
        self._load()

    def _load(self) -> None:
        try:
            document = json.loads(self._path.read_bytes())
            for row in document["entities"]:
                entity = entity_of([(t, n) for t, n in row["entity"]])
                self._entities[entity] = {
                    key: float(value) for key, value in row["values"].items() if key in KEYS
                }
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, KafkaError) as exc:
            log.error("%s unreadable, no client quotas apply: %s", self._path, exc)
            self._entities = {}

    def resolve(self, client_id: str, user: str = ANONYMOUS) -> dict[str, float]:
        """The quota of each key for a request from `user` with `client_id`, by Kafka's
        precedence; keys without a quota are absent."""
        found: dict[str, float] = {}
        for entity in _precedence(user, client_id):
            for key, value in self._entities.get(entity, {}).items():
                found.setdefault(key, value)
            if len(found) == len(KEYS):
                break
        return found

    def limits(self, client_id: str, user: str = ANONYMOUS) -> dict[str, float]:
        """The flow controller's limits for a client (flow/quotas.py kinds, per second):
        bytes for the byte rates, milliseconds of handler time for request_percentage
        (100 percent = 1,000 ms per second). Cached until the quotas change."""
        key = (client_id, user)
        cached = self._limits.get(key)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        limits = {
            KEYS[name]: value * 10 if name == "request_percentage" else value
            for name, value in self.resolve(client_id, user).items()
        }
        if len(self._limits) >= LIMITS_CACHED_MAX:
            self._limits.clear()
        self._limits[key] = (self.version, limits)
        return limits

    def describe(
        self, components: Sequence[tuple[str, int, str | None]], *, strict: bool
    ) -> Iterator[tuple[Entity, dict[str, float]]]:
        """DescribeClientQuotas: entities matching every component (entity type, match
        type 0 exact / 1 default / 2 any, name); `strict` leaves out entities naming
        types the components do not."""
        for component_type, _, _ in components:
            if component_type not in ENTITY_TYPES:
                raise InvalidQuotaError(f"unknown entity type {component_type!r}")
        for entity, values in sorted(self._entities.items(), key=lambda item: str(item[0])):
            named = dict(entity)
            if strict and set(named) != {c[0] for c in components}:
                continue
            if all(_matches(named, c) for c in components) and values:
                yield entity, dict(values)

    def alter(
        self,
        entries: Sequence[tuple[Entity, Sequence[tuple[str, float, bool]]]],
        *,
        validate_only: bool,
    ) -> list[KafkaError | None]:
        """AlterClientQuotas: per entry (entity, [(key, value, remove)]), None if applied
        or the error that refused it; the applied ones are stored at once."""
        results: list[KafkaError | None] = []
        changed = False
        for entity, ops in entries:
            try:
                values = self._altered(entity, ops)
            except KafkaError as exc:
                results.append(exc)
                continue
            results.append(None)
            if not validate_only:
                if values:
                    self._entities[entity] = values
                else:
                    self._entities.pop(entity, None)
                changed = True
        if changed:
            self.version += 1
            try:
                self._save()
            except OSError as exc:
                raise StorageError(f"client quotas not written: {exc}") from exc
        return results

    def _altered(self, entity: Entity, ops: Sequence[tuple[str, float, bool]]) -> dict[str, float]:
        values = dict(self._entities.get(entity, {}))
        keys = [key for key, _, _ in ops]
        if len(set(keys)) != len(keys):
            raise InvalidQuotaError("a quota key appears twice in one entry")
        for key, value, remove in ops:
            if key not in KEYS:
                raise InvalidQuotaError(
                    f"unknown or unsupported quota key {key!r} ({', '.join(sorted(KEYS))})"
                )
            if remove:
                values.pop(key, None)
            elif not math.isfinite(value) or value <= 0:
                raise InvalidQuotaError(f"quota {key} must be a positive number, got {value}")
            else:
                values[key] = value
        if entity not in self._entities and values and len(self._entities) >= ENTITIES_MAX:
            raise InvalidQuotaError(f"{ENTITIES_MAX} quota entities exist already")
        return values

    def _save(self) -> None:
        rows = [
            {"entity": [list(pair) for pair in entity], "values": values}
            for entity, values in sorted(self._entities.items(), key=lambda item: str(item[0]))
        ]
        write_atomically(self._path, json.dumps({"version": 1, "entities": rows}).encode())

    def any(self) -> bool:
        """Whether any quota is set."""
        return bool(self._entities)

    def entities(self) -> Mapping[Entity, dict[str, float]]:
        return dict(self._entities)


def _matches(named: Mapping[str, str | None], component: tuple[str, int, str | None]) -> bool:
    entity_type, match_type, match = component
    if entity_type not in named:
        return False
    if match_type == 0:  # EXACT
        return named[entity_type] == match and match is not None
    if match_type == 1:  # DEFAULT
        return named[entity_type] is None
    return True  # SPECIFIED (any, default included)
