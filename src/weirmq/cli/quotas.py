"""``weirmq quotas``: describe and alter client quotas (KIP-13, KIP-55, KIP-124), as
``kafka-configs.sh --entity-type clients|users`` does, with Kafka's own requests:
DescribeClientQuotas (API 48) and AlterClientQuotas (API 49).

Theory of operation:

- No Python Kafka client sends these two requests, so the commands speak them through
  ``kafka_request``: one connection, ApiVersions, then the highest version of the request
  that both sides speak.
- An entity is a user, a client id, or both, each named or ``<default>`` (a null name on
  the wire). ``alter`` changes exactly one entity: ``--add KEY=VALUE`` sets a quota,
  ``--delete KEY`` removes one, the others keep their values.
- ``describe`` without options asks for every entity (no filter components, not strict).
  With options it asks as ``kafka-configs.sh --describe`` does: one component per entity
  type named (match type exact for a name, default for ``--...-default``, any for
  ``--...-any``) and strict, so ``--client-id app`` shows the entity ``client-id app``
  and not ``user alice, client-id app``; give ``--user-any`` as well for those.
- Keys and values are checked here only as far as Kafka's tool checks them (a value must
  be a number). The broker refuses what it does not know (a key, a value of 0) with its
  own message, which the command shows with Kafka's error name and exit code 1.
- As in topics.py, each command gathers what it reports as plain data (the ``--json``
  shape of docs/cli.md), then prints that data as JSON or as text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click

from weirmq.cli.clients import (
    Bootstrap,
    bootstrap_option,
    client_command_settings,
    json_option,
)
from weirmq.cli.formats import parse_assignments
from weirmq.cli.kafka_request import KafkaConnection, VersionRange, kafka_error
from weirmq.cli.output import Column, note, print_json, print_line, print_table

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_VERSIONS = VersionRange(0, 1)
ALTER_VERSIONS = VersionRange(0, 1)
"""The versions kio has classes for (Kafka 4 knows no others)."""
USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
"""Kafka's entity types, in the order of its quota paths (/users/U/clients/C)."""
DEFAULT_NAME = "<default>"
"""How Kafka's tools print the default entity (a null name on the wire)."""

MatchType = Literal["exact", "default", "any"]
MATCH_TYPES: dict[MatchType, int] = {"exact": 0, "default": 1, "any": 2}
"""DescribeClientQuotas' match types: 2 is "any specified name" in Kafka's schema."""

F = TypeVar("F", bound=Callable[..., Any])
Entity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for <default>) pairs, user first: (("client-id", "app"),)."""


@dataclass(frozen=True, slots=True)
class Component:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: MatchType
    name: str | None = None  # for "exact" only

    def to_request(self) -> dict[str, Any]:
        return {
            "entity_type": self.entity_type,
            "match_type": MATCH_TYPES[self.match_type],
            "match": self.name,
        }


# -- entity options ----------------------------------------------------------------------------


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value == "":
        default_flag = f"{param.opts[0]}-default" if param.opts else "the -default option"
        raise click.BadParameter(f"an empty name; {default_flag} names the default", ctx, param)
    return value


ENTITY_OPTIONS = ((CLIENT_ID, "client_id", "client id"), (USER, "user", "user"))
"""Entity type, the options' Python name, and its name in help texts."""


def entity_options(*, with_any: bool) -> Callable[[F], F]:
    """--client-id NAME, --client-id-default, --user NAME, --user-default (and, with
    ``with_any``, --client-id-any and --user-any); a parameter for each."""

    def decorate(command: F) -> F:
        options = []
        for entity_type, python_name, noun in ENTITY_OPTIONS:
            options += [
                click.option(
                    f"--{entity_type}",
                    f"{python_name}_name",
                    metavar="NAME",
                    callback=_not_empty,
                    help=f"The {noun} NAME.",
                ),
                click.option(
                    f"--{entity_type}-default",
                    f"{python_name}_default",
                    is_flag=True,
                    help=f"The default {noun} ({DEFAULT_NAME}).",
                ),
            ]
            if with_any:
                options.append(
                    click.option(
                        f"--{entity_type}-any",
                        f"{python_name}_any",
                        is_flag=True,
                        help=f"Any {noun}, {DEFAULT_NAME} included.",
                    )
                )
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def entity_choice(
    entity_type: str, name: str | None, default: bool, any_name: bool = False
) -> Component | None:
    """The one choice made for ``entity_type`` (a name, its default or any), or None;
    click.UsageError when more than one is given."""
    option = "--client-id" if entity_type == CLIENT_ID else "--user"
    given = [
        Component(entity_type, "exact", name) if name is not None else None,
        Component(entity_type, "default") if default else None,
        Component(entity_type, "any") if any_name else None,
    ]
    chosen = [component for component in given if component is not None]
    if len(chosen) > 1:
        names = {"exact": option, "default": f"{option}-default", "any": f"{option}-any"}
        both = " and ".join(names[c.match_type] for c in chosen)
        raise click.UsageError(f"{both} cannot go together: give one")
    return chosen[0] if chosen else None


def describe_filter(components: Sequence[Component | None]) -> dict[str, Any]:
    """The DescribeClientQuotas request of these components: every entity when there are
    none, else strictly those entities that have exactly these types and match."""
    given = [component for component in components if component is not None]
    return {"components": [c.to_request() for c in given], "strict": bool(given)}


def alter_entity(components: Sequence[Component | None]) -> Entity:
    """The entity ``alter`` changes: at least one of user and client id, named or default."""
    given = [component for component in components if component is not None]
    if not given:
        raise click.UsageError(
            "which quotas? give --client-id, --client-id-default, --user or --user-default"
        )
    assert all(c.match_type != "any" for c in given), "alter has no --...-any options"
    return _entity((c.entity_type, c.name) for c in given)


def _entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """Pairs in Kafka's order: user, then client id, then types we do not set (a Kafka
    broker also has ``ip``), by name."""
    found = dict(pairs)
    return tuple((t, found[t]) for t in entity_types(found))


def entity_types(named: Iterable[str]) -> list[str]:
    """The entity types among ``named``, in the order of ``_entity``."""
    present = set(named)
    return [t for t in ENTITY_TYPES if t in present] + sorted(present - set(ENTITY_TYPES))


def entity_text(entity: Entity) -> str:
    """``user alice, client-id <default>``."""
    return ", ".join(f"{t} {DEFAULT_NAME if n is None else n}" for t, n in entity)


def entity_to_json(entity: Entity) -> dict[str, str | None]:
    """``{"user": "alice", "client-id": null}``: null is the default."""
    return dict(entity)


def quota_number(value: float) -> int | float:
    """1048576.0 -> 1048576: quotas are doubles on the wire, mostly whole numbers."""
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


# -- the command group -------------------------------------------------------------------------


@click.group()
def quotas() -> None:
    """Describe and alter client quotas (byte rates, request time).

    Quotas apply to a client id, a user, or both, each named or the default; the keys are
    producer_byte_rate, consumer_byte_rate (bytes per second) and request_percentage.
    """


# -- describe ----------------------------------------------------------------------------------


@quotas.command("describe", **client_command_settings())
@entity_options(with_any=True)
@bootstrap_option
@json_option
def describe_command(
    client_id_name: str | None,
    client_id_default: bool,
    client_id_any: bool,
    user_name: str | None,
    user_default: bool,
    user_any: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Show client quotas: all of them, or those of one entity.

    With options, only entities with exactly the entity types named are shown (as
    kafka-configs.sh --describe does): --client-id app shows the quotas of client id app,
    not those of user alice with client id app (add --user-any for those).
    """
    request = describe_filter(
        [
            entity_choice(USER, user_name, user_default, user_any),
            entity_choice(CLIENT_ID, client_id_name, client_id_default, client_id_any),
        ]
    )
    found = describe_quotas(bootstrap, request)
    if as_json:
        print_json({"quotas": found})
    elif not found:
        note("no quotas" if not request["components"] else "no quotas match")
    else:
        print_quotas(found)


def describe_quotas(bootstrap: Bootstrap, request: dict[str, Any]) -> list[dict[str, Any]]:
    """The quotas the broker has that match ``request``, in the ``--json`` shape."""
    with KafkaConnection.open(bootstrap) as connection:
        version = connection.version_for(DESCRIBE_CLIENT_QUOTAS, DESCRIBE_VERSIONS)
        response = connection.request(DESCRIBE_CLIENT_QUOTAS, version, request)
    if response.error_code != 0:
        raise kafka_error("cannot describe quotas", response.error_code, response.error_message)
    entries = [
        (
            _entity((e.entity_type, e.entity_name) for e in entry.entity),
            {value.key: quota_number(value.value) for value in entry.values},
        )
        for entry in response.entries or ()
    ]
    types = entity_types(t for entity, _ in entries for t, _ in entity)
    return [
        {"entity": entity_to_json(entity), "values": dict(sorted(values.items()))}
        for entity, values in sorted(entries, key=lambda item: _sort_key(item[0], types))
    ]


def _sort_key(entity: Entity, types: Sequence[str]) -> tuple[tuple[int, str], ...]:
    """Type by type (users first): absent, then default, then named in order."""
    named = dict(entity)
    return tuple(
        (0, "") if t not in named else (1, "") if named[t] is None else (2, named[t] or "")
        for t in types
    )


def print_quotas(found: Sequence[dict[str, Any]]) -> None:
    """One row per quota: a column per entity type (user, client id, any other a Kafka
    broker names; ``-`` where the entity has none of it), then the key and the value."""
    types = entity_types([*ENTITY_TYPES, *(t for entry in found for t in entry["entity"])])
    rows = [
        (*(_name_cell(entry["entity"], t) for t in types), key, str(value))
        for entry in found
        for key, value in entry["values"].items()
    ]
    columns = [Column(t.upper()) for t in types] + [Column("QUOTA"), Column("VALUE", "right")]
    print_table(columns, rows)


def _name_cell(entity: dict[str, str | None], entity_type: str) -> str:
    if entity_type not in entity:
        return "-"
    name = entity[entity_type]
    return DEFAULT_NAME if name is None else name


# -- alter -------------------------------------------------------------------------------------


def parse_additions(texts: Sequence[str]) -> dict[str, float]:
    """``--add KEY=VALUE`` options -> {key: value}; ValueError when a value is not a number
    (all Kafka's tool checks). A key given twice keeps its last value, as there."""
    added = {}
    for key, text in parse_assignments(texts, "--add"):
        try:
            added[key] = float(text)
        except ValueError:
            raise ValueError(f"--add {key}={text}: the value is not a number") from None
    return added


def _additions_callback(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> Any:
    try:
        return parse_additions(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def alter_request(
    entity: Entity, added: dict[str, float], deleted: Sequence[str], validate_only: bool
) -> dict[str, Any]:
    """The AlterClientQuotas request changing one entity."""
    ops = [{"key": key, "value": value, "remove": False} for key, value in added.items()]
    ops += [{"key": key, "value": 0.0, "remove": True} for key in deleted]
    return {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": ops,
            }
        ],
        "validate_only": validate_only,
    }


@quotas.command("alter", **client_command_settings())
@entity_options(with_any=False)
@click.option(
    "--add",
    "added",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_additions_callback,
    help="Set a quota, e.g. producer_byte_rate=1048576 (repeatable).",
)
@click.option(
    "--delete",
    "deleted",
    metavar="KEY",
    multiple=True,
    help="Remove a quota, e.g. consumer_byte_rate (repeatable).",
)
@click.option(
    "--validate-only",
    is_flag=True,
    help="Have the broker check the change without applying it.",
)
@bootstrap_option
@json_option
def alter_command(
    client_id_name: str | None,
    client_id_default: bool,
    user_name: str | None,
    user_default: bool,
    added: dict[str, float],
    deleted: tuple[str, ...],
    validate_only: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Set or remove the quotas of one entity.

    The entity is a client id, a user, or both, each named or the default. Quotas not
    named keep their values; an entity left without quotas disappears.
    """
    entity = alter_entity(
        [
            entity_choice(USER, user_name, user_default),
            entity_choice(CLIENT_ID, client_id_name, client_id_default),
        ]
    )
    if not (added or deleted):
        raise click.UsageError("nothing to alter: give --add KEY=VALUE or --delete KEY")
    alter_quotas(bootstrap, entity, alter_request(entity, added, deleted, validate_only))
    if as_json:
        print_json(
            {
                "entity": entity_to_json(entity),
                "set": {key: quota_number(value) for key, value in added.items()},
                "deleted": list(deleted),
                "validate_only": validate_only,
            }
        )
    else:
        changes = [f"{key}={quota_number(value)}" for key, value in added.items()]
        changes += [f"{key} removed" for key in deleted]
        done = "Validated (not applied)" if validate_only else "Altered"
        print_line(f"{done} the quotas of {entity_text(entity)}: {', '.join(changes)}.")


def alter_quotas(bootstrap: Bootstrap, entity: Entity, request: dict[str, Any]) -> None:
    """Send ``request``; CommandError with the broker's message if it refuses the change."""
    with KafkaConnection.open(bootstrap) as connection:
        version = connection.version_for(ALTER_CLIENT_QUOTAS, ALTER_VERSIONS)
        response = connection.request(ALTER_CLIENT_QUOTAS, version, request)
        if len(response.entries) != 1:
            raise connection.garbage(f"{len(response.entries)} results for one entity")
    (result,) = response.entries
    if result.error_code != 0:
        doing = f"cannot alter the quotas of {entity_text(entity)}"
        raise kafka_error(doing, result.error_code, result.error_message)
