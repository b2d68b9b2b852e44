"""``weirmq exchanges``: declare, bind, unbind, list, describe and delete exchanges through
the Kafka admin API (confluent-kafka's AdminClient), as any Kafka tool could.

Theory of operation: an exchange is a topic whose ``weirmq.exchange.type`` config is set
(docs/routing.md, weirmq/broker/exchanges.py), so every command is a Kafka admin request:

    declare    CreateTopics with the exchange's configs
    bind       IncrementalAlterConfigs APPEND of one item of ``weirmq.exchange.bindings``
    unbind     IncrementalAlterConfigs SUBTRACT of that item
    list       Metadata for the topic names, then DescribeConfigs of all of them
    describe   DescribeConfigs (type, alternate, policy, bindings) and Metadata (partitions)
    delete     DeleteTopics, once DescribeConfigs has shown that the topic is an exchange

Each binding item is made by ``binding_spec`` and read back by ``parse_binding_spec``
(weirmq.broker.exchanges), so the CLI and the broker cannot disagree on the encoding.

Like RabbitMQ's exchange.declare, declaring an exchange that exists with the same
definition succeeds, and a different definition is an error naming each difference. Like
topics.py, each command gathers what it reports into plain data (the ``--json`` shape of
docs/cli.md) and prints that either as JSON or as tables and sentences.

Before ``bind`` and ``unbind`` send anything they read the exchange's definition: the type
says which option a binding needs (``--key`` for direct and topic, ``--match`` for content,
``--headers`` for headers, none for fanout), so a mismatch is reported as such rather than
as the broker's INVALID_CONFIG; and the current bindings say whether the binding is new
(binding twice is binding once) or exists to be removed. A headers binding without
``x-match`` means ``x-match=all``, so either form is found by ``unbind``.

weirmq.routing (behind ``binding_spec``) loads kio, so it is imported inside the functions
that need it: ``weirmq --help``, ``list``, ``declare`` and ``delete`` do not pay for it. The
config names are the broker's public interface; a unit test checks that they match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from weirmq.cli.clients import (
    REQUEST_TIMEOUT_S,
    Bootstrap,
    CommandError,
    admin_client,
    admin_request,
    admin_url_option,
    bootstrap_option,
    client_command_settings,
    json_option,
    kafka_errors,
    topic_metadata,
    wait_for,
)
from weirmq.cli.offsets import parse_time_ms
from weirmq.cli.output import (
    Column,
    activity,
    note,
    plural,
    print_json,
    print_line,
    print_table,
    progress_wanted,
    report_deleted,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from weirmq.cli.kafka_admin import AdminClient
    from weirmq.routing import Binding

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# The broker's topic configs that make an exchange (weirmq.broker.configs and .exchanges).
TYPE_CONFIG = "weirmq.exchange.type"
ALTERNATE_CONFIG = "weirmq.exchange.alternate"
UNROUTABLE_CONFIG = "weirmq.exchange.unroutable"
BINDINGS_CONFIG = "weirmq.exchange.bindings"
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers", "content")
UNROUTABLE_POLICIES = ("drop", "reject")
DEFAULT_UNROUTABLE = "drop"

UNKNOWN_TOPIC = "UNKNOWN_TOPIC_OR_PART"
TOPIC_EXISTS = "TOPIC_ALREADY_EXISTS"
X_MATCH = "x-match"
NONE = "-"  # how a table shows a value that does not exist

# The field of a binding each exchange type matches on (fanout: none).
BINDING_FIELDS: Mapping[str, str | None] = {
    "direct": "key",
    "topic": "key",
    "fanout": None,
    "headers": "arguments",
    "content": "match",
}
# The option that gives each field, and what it takes per exchange type.
FIELD_OPTIONS = {"key": "--key", "match": "--match", "arguments": "--headers"}
OPTION_METAVARS = {
    "direct": "KEY",
    "topic": "PATTERN",
    "headers": "NAME=VALUE",
    "content": "EXPRESSION",
}


@click.group()
def exchanges() -> None:
    """Declare, bind, list, describe, replay and delete exchanges."""


# -- definitions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Definition:
    """An exchange as its topic configs define it."""

    type: str
    alternate: str | None
    unroutable: str
    bindings: tuple[str, ...]
    """The items of ``weirmq.exchange.bindings``, as the broker wrote them."""


def definition_from_configs(configs: Mapping[str, str | None]) -> Definition | None:
    """The exchange these DescribeConfigs values define, or None for a plain topic."""
    kind = configs.get(TYPE_CONFIG)
    if not kind:
        return None
    return Definition(
        type=kind,
        alternate=configs.get(ALTERNATE_CONFIG) or None,
        unroutable=configs.get(UNROUTABLE_CONFIG) or DEFAULT_UNROUTABLE,
        bindings=split_bindings(configs.get(BINDINGS_CONFIG) or ""),
    )


def split_bindings(value: str) -> tuple[str, ...]:
    """The items of a ``weirmq.exchange.bindings`` value (an item never holds a comma)."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


def differences(
    existing: Definition,
    existing_partitions: int,
    asked: Definition,
    asked_partitions: int | None,
) -> list[str]:
    """How an existing exchange differs from a declaration, one phrase per difference
    (the partition count only when the declaration names one)."""
    found = []
    if existing.type != asked.type:
        found.append(f"its type is {existing.type}, not {asked.type}")
    if existing.alternate != asked.alternate:
        found.append(
            f"its alternate is {_quoted_or_none(existing.alternate)}, "
            f"not {_quoted_or_none(asked.alternate)}"
        )
    if existing.unroutable != asked.unroutable:
        found.append(f"its unroutable policy is {existing.unroutable}, not {asked.unroutable}")
    if asked_partitions is not None and existing_partitions != asked_partitions:
        found.append(f"it has {plural(existing_partitions, 'partition')}, not {asked_partitions}")
    return found


def _quoted_or_none(name: str | None) -> str:
    return "none" if name is None else repr(name)


def _describe_configs(
    admin: AdminClient, names: Sequence[str], bootstrap: Bootstrap
) -> dict[str, dict[str, str | None] | None]:
    """The config values of each topic (None for a topic that does not exist), from one
    DescribeConfigs request."""
    from weirmq.cli.kafka_admin import ConfigResource, ResourceType

    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    found: dict[str, dict[str, str | None] | None] = {}
    for resource, future in futures.items():
        name = resource.name
        try:
            entries = wait_for(future, f"cannot describe the configs of {name!r}", bootstrap)
        except CommandError as exc:
            if exc.error_name != UNKNOWN_TOPIC:
                raise
            found[name] = None
            continue
        found[name] = {entry.name: entry.value for entry in entries.values()}
    return found


def read_definition(admin: AdminClient, name: str, bootstrap: Bootstrap) -> Definition | None:
    """Exchange ``name``'s definition, None if it is a plain topic; CommandError "exchange
    ... does not exist" if there is no such topic."""
    configs = _describe_configs(admin, [name], bootstrap)[name]
    if configs is None:
        raise _no_exchange(name)
    return definition_from_configs(configs)


def read_exchange(admin: AdminClient, name: str, bootstrap: Bootstrap) -> Definition:
    """``read_definition``, with a plain topic an error too."""
    definition = read_definition(admin, name, bootstrap)
    if definition is None:
        raise CommandError(f"{name!r} is a plain topic, not an exchange")
    return definition


def _no_exchange(name: str) -> CommandError:
    return CommandError(f"exchange {name!r} does not exist", UNKNOWN_TOPIC)


def _wait(future: Future[T], doing: str, bootstrap: Bootstrap, name: str) -> T:
    """``wait_for``, with an unknown topic said as an unknown exchange."""
    try:
        return wait_for(future, doing, bootstrap)
    except CommandError as exc:
        if exc.error_name != UNKNOWN_TOPIC:
            raise
        raise _no_exchange(name) from None


def _partitions(admin: AdminClient, name: str, bootstrap: Bootstrap) -> int:
    try:
        return len(topic_metadata(admin, name, bootstrap).partitions)
    except CommandError as exc:
        if exc.error_name != UNKNOWN_TOPIC:
            raise
        raise _no_exchange(name) from None


def _document(name: str, definition: Definition, partitions: int) -> dict[str, Any]:
    return {
        "name": name,
        "type": definition.type,
        "partitions": partitions,
        "alternate": definition.alternate,
        "unroutable": definition.unroutable,
    }


# -- declare -----------------------------------------------------------------------------------


@exchanges.command("declare", **client_command_settings())
@click.argument("name")
@click.option(
    "--type",
    "kind",
    type=click.Choice(EXCHANGE_TYPES),
    required=True,
    help="How the exchange routes each record to its bindings.",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="Partitions of the exchange's input log [default: the broker's default_partitions].",
)
@click.option(
    "--alternate",
    metavar="EXCHANGE",
    default=None,
    help="The exchange that gets the records no binding routes.",
)
@click.option(
    "--unroutable",
    type=click.Choice(UNROUTABLE_POLICIES),
    default=None,
    help="A record nothing routes is dropped, or its write refused [default: drop].",
)
@click.option(
    "--if-not-exists",
    is_flag=True,
    help="Succeed if the exchange exists, even with another definition.",
)
@bootstrap_option
@json_option
def declare_command(
    name: str,
    kind: str,
    partitions: int | None,
    alternate: str | None,
    unroutable: str | None,
    if_not_exists: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Declare exchange NAME.

    An exchange is a topic that routes the records written to it into the topics (and
    exchanges) bound to it. Declaring an exchange that exists with the same definition
    succeeds; with another one (type, alternate, unroutable policy, or --partitions if
    given) it is an error.
    """
    from weirmq.cli.kafka_admin import NewTopic

    asked = Definition(kind, alternate or None, unroutable or DEFAULT_UNROUTABLE, ())
    configs = {TYPE_CONFIG: kind}
    if alternate:
        configs[ALTERNATE_CONFIG] = alternate
    if unroutable:
        configs[UNROUTABLE_CONFIG] = unroutable
    admin = admin_client(bootstrap)
    # -1 asks the broker for its default partition count (KIP-464).
    new_topic = NewTopic(name, num_partitions=partitions or -1, config=configs)
    futures = admin.create_topics([new_topic], request_timeout=REQUEST_TIMEOUT_S)
    try:
        wait_for(futures[name], f"cannot declare exchange {name!r}", bootstrap, name)
    except CommandError as exc:
        if exc.error_name != TOPIC_EXISTS:
            raise
        definition, count = _existing(admin, name, asked, partitions, if_not_exists, bootstrap)
        created = False
    else:
        definition, count = asked, _partitions(admin, name, bootstrap)
        created = True
    if as_json:
        print_json({**_document(name, definition, count), "created": created})
    elif created:
        print_line(f"Declared {kind} exchange {name} with {plural(count, 'partition')}.")


def _existing(
    admin: AdminClient,
    name: str,
    asked: Definition,
    partitions: int | None,
    if_not_exists: bool,
    bootstrap: Bootstrap,
) -> tuple[Definition, int]:
    """The definition and partition count of exchange ``name``, which CreateTopics found
    already there: CommandError unless it is what was asked (or ``if_not_exists``)."""
    definition = read_definition(admin, name, bootstrap)
    if definition is None:
        raise CommandError(f"topic {name!r} already exists and is not an exchange", TOPIC_EXISTS)
    count = _partitions(admin, name, bootstrap)
    found = differences(definition, count, asked, partitions)
    if found and not if_not_exists:
        message = f"exchange {name!r} already exists with another definition: {'; '.join(found)}"
        raise CommandError(message, TOPIC_EXISTS)
    if found:
        note(f"exchange {name!r} already exists with another definition: {'; '.join(found)}")
    else:
        note(f"exchange {name!r} already exists as declared")
    return definition, count


# -- bind and unbind ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BindingOptions:
    """What ``bind`` and ``unbind`` were told: at most one of key, match and headers."""

    key: str | None = None
    match: str | None = None
    headers: Mapping[str, str | None] | None = None
    x_match: str = "all"

    @property
    def given(self) -> str | None:
        """The option that was given: ``--key``, ``--match``, ``--headers`` or None."""
        if self.key is not None:
            return "--key"
        if self.match is not None:
            return "--match"
        if self.headers is not None:
            return "--headers"
        return None

    def check_type(self, exchange: str, kind: str) -> None:
        """CommandError saying what to give instead when the option does not fit an
        exchange of type ``kind`` (a type this CLI does not know is left to the broker)."""
        if kind not in BINDING_FIELDS:
            return
        field, given = BINDING_FIELDS[kind], self.given
        wanted = None if field is None else FIELD_OPTIONS[field]
        if wanted == given:
            return
        prefix = f"exchange {exchange!r} is a {kind} exchange"
        if wanted is None:
            raise CommandError(f"{prefix}: its bindings take no {given} (they match every record)")
        instead = f"{wanted} {OPTION_METAVARS[kind]}"
        if given is None:
            raise CommandError(f"{prefix}: its bindings need {instead}")
        raise CommandError(f"{prefix}: its bindings need {instead}, not {given}")

    def arguments(self) -> dict[str, str | None]:
        """A headers binding's arguments: x-match first, then the conditions."""
        return {X_MATCH: self.x_match, **(self.headers or {})}

    def describe(self) -> str:
        """What the binding matches, for a sentence ("" for a fanout binding)."""
        if self.key is not None:
            return f" with key {self.key!r}"
        if self.match is not None:
            return f" matching {self.match!r}"
        if self.headers is not None:
            return f" on headers {format_arguments(self.arguments())}"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "match": self.match,
            "arguments": None if self.headers is None else self.arguments(),
        }


def parse_headers(texts: Sequence[str]) -> dict[str, str | None]:
    """``["a=1,b", "c=x=y"]`` -> ``{"a": "1", "b": None, "c": "x=y"}``: NAME=VALUE items
    split at the first ``=``; a bare NAME asks only that the header be present."""
    found: dict[str, str | None] = {}
    for text in texts:
        for item in text.split(","):
            if not item.strip():
                continue
            name, equals, value = item.partition("=")
            if not name:
                raise ValueError(f"{item!r} has no header name")
            if name == X_MATCH:
                raise ValueError("x-match is set with --any and --with-x")
            if name in found:
                raise ValueError(f"header {name!r} is given twice")
            found[name] = value if equals else None
    return found


def _headers_callback(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> Any:
    if not value:
        return None
    try:
        return parse_headers(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def binding_options(
    key: str | None,
    match: str | None,
    headers: dict[str, str | None] | None,
    any_: bool,
    with_x: bool,
) -> BindingOptions:
    """The options of ``bind``/``unbind``; click.UsageError when they do not go together."""
    given = [
        option
        for option, value in (("--key", key), ("--match", match), ("--headers", headers))
        if value is not None
    ]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} cannot be used together")
    if (any_ or with_x) and headers is None:
        flag = "--any" if any_ else "--with-x"
        raise click.UsageError(f"{flag} goes with --headers (a headers exchange's binding)")
    x_match = ("any" if any_ else "all") + ("-with-x" if with_x else "")
    return BindingOptions(key, match, headers, x_match)


def binding_option_flags(command: F) -> F:
    """``--key``, ``--match``, ``--headers``, ``--any`` and ``--with-x``."""
    for option in reversed(
        [
            click.option(
                "--key",
                metavar="PATTERN",
                default=None,
                help="direct: the routing key; topic: a pattern (* one word, # any number).",
            ),
            click.option(
                "--match",
                metavar="EXPRESSION",
                default=None,
                help='content: an SQL-like condition on the headers, e.g. "amount > 100".',
            ),
            click.option(
                "--headers",
                metavar="NAME=VALUE,...",
                multiple=True,
                callback=_headers_callback,
                help="headers: the headers to match (repeatable); a bare NAME: present.",
            ),
            click.option("--any", "any_", is_flag=True, help="headers: any header matches."),
            click.option(
                "--with-x",
                is_flag=True,
                help="headers: headers named x-... count too (x-match all-with-x/any-with-x).",
            ),
        ]
    ):
        command = option(command)
    return command


def to_binding(exchange: str, kind: str, destination: str, options: BindingOptions) -> Binding:
    """The binding the options describe, with the fields its exchange type uses.

    The destination kind is not part of a binding's item (the broker knows it); all
    bindings here say "topic", so that they compare equal with ``parsed_bindings``."""
    from weirmq.routing import Binding

    if kind == "headers":
        return Binding(exchange, destination, "topic", arguments=options.arguments())
    if kind == "content":
        return Binding(exchange, destination, "topic", expression=options.match)
    return Binding(exchange, destination, "topic", key=options.key or "")


def parsed_bindings(exchange: str, definition: Definition) -> list[tuple[str, Binding]]:
    """Each item of the exchange's bindings, with the binding it describes."""
    from weirmq.broker.exchanges import parse_binding_spec
    from weirmq.errors import KafkaError
    from weirmq.routing import Exchange, ExchangeType

    try:
        source = Exchange(exchange, ExchangeType(definition.type))
        return [
            (item, parse_binding_spec(source, item, lambda _: "topic"))
            for item in definition.bindings
        ]
    except (ValueError, KafkaError) as exc:
        raise CommandError(f"cannot read the bindings of exchange {exchange!r}: {exc}") from None


def equivalent(a: Binding, b: Binding) -> bool:
    """Whether two bindings match the same records: equal, or headers bindings that differ
    only by an ``x-match=all`` one of them leaves implicit."""
    return _explicit(a) == _explicit(b)


def _explicit(binding: Binding) -> Binding:
    """A headers binding with its x-match spelled out. (A headers binding with no
    arguments at all cannot be told from a fanout one here; no CLI binding is one.)"""
    from weirmq.routing import Binding

    if not binding.arguments or X_MATCH in binding.arguments:
        return binding
    arguments = {X_MATCH: "all", **binding.arguments}
    return Binding(binding.source, binding.destination, "topic", arguments=arguments)


def _binding_or_usage_error(
    exchange: str, kind: str, destination: str, options: BindingOptions
) -> Binding:
    from weirmq.errors import KafkaError

    try:
        return to_binding(exchange, kind, destination, options)
    except KafkaError as exc:  # a key or a name too long, a value too long
        raise click.UsageError(str(exc)) from None


def _alter_bindings(
    admin: AdminClient,
    name: str,
    operation: str,
    items: Sequence[str],
    doing: str,
    bootstrap: Bootstrap,
) -> None:
    """IncrementalAlterConfigs ``operation`` (APPEND, SUBTRACT) of ``items`` on the
    exchange's bindings; the broker answers once the change is durable."""
    from weirmq.cli.kafka_admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        BINDINGS_CONFIG, ",".join(items), incremental_operation=AlterConfigOpType[operation]
    )
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    _wait(future, doing, bootstrap, name)


@exchanges.command("bind", **client_command_settings())
@click.argument("name")
@click.argument("destination")
@binding_option_flags
@bootstrap_option
@json_option
def bind_command(
    name: str,
    destination: str,
    key: str | None,
    match: str | None,
    headers: dict[str, str | None] | None,
    any_: bool,
    with_x: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Bind DESTINATION (a topic or an exchange) to exchange NAME.

    A direct or topic exchange's binding takes --key, a content exchange's --match, a
    headers exchange's --headers (with --any and --with-x), a fanout exchange's nothing.
    Binding twice is binding once.
    """
    options = binding_options(key, match, headers, any_, with_x)
    admin = admin_client(bootstrap)
    definition = read_exchange(admin, name, bootstrap)
    options.check_type(name, definition.type)
    wanted = _binding_or_usage_error(name, definition.type, destination, options)
    bound = not any(equivalent(wanted, b) for _, b in parsed_bindings(name, definition))
    what = f"{destination} to exchange {name!r}{options.describe()}"
    if bound:
        from weirmq.broker.exchanges import binding_spec

        spec = binding_spec(wanted)
        _alter_bindings(admin, name, "APPEND", [spec], f"cannot bind {what}", bootstrap)
    document = {"exchange": name, "destination": destination, **options.to_json(), "bound": bound}
    if as_json:
        print_json(document)
    elif bound:
        print_line(f"Bound {destination} to exchange {name}{options.describe()}.")
    else:
        note(f"{destination} is already bound to exchange {name!r}{options.describe()}")


@exchanges.command("unbind", **client_command_settings())
@click.argument("name")
@click.argument("destination")
@binding_option_flags
@click.option("--if-exists", is_flag=True, help="Succeed if there is no such binding.")
@bootstrap_option
@json_option
def unbind_command(
    name: str,
    destination: str,
    key: str | None,
    match: str | None,
    headers: dict[str, str | None] | None,
    any_: bool,
    with_x: bool,
    if_exists: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Remove the binding of DESTINATION to exchange NAME.

    The binding is named by the options it was bound with.
    """
    options = binding_options(key, match, headers, any_, with_x)
    admin = admin_client(bootstrap)
    definition = read_exchange(admin, name, bootstrap)
    options.check_type(name, definition.type)
    wanted = _binding_or_usage_error(name, definition.type, destination, options)
    items = [i for i, b in parsed_bindings(name, definition) if equivalent(wanted, b)]
    missing = f"{destination} is not bound to exchange {name!r}{options.describe()}"
    if items:
        doing = f"cannot unbind {destination} from exchange {name!r}{options.describe()}"
        _alter_bindings(admin, name, "SUBTRACT", items, doing, bootstrap)
    elif not if_exists:
        raise CommandError(missing)
    document = {
        "exchange": name,
        "destination": destination,
        **options.to_json(),
        "unbound": bool(items),
    }
    if as_json:
        print_json(document)
    elif items:
        print_line(f"Unbound {destination} from exchange {name}{options.describe()}.")
    else:
        note(missing)


# -- list --------------------------------------------------------------------------------------


@exchanges.command("list", **client_command_settings())
@bootstrap_option
@json_option
def list_command(bootstrap: Bootstrap, as_json: bool) -> None:
    """List the exchanges.

    Each with its type, partitions, alternate exchange, unroutable policy and number of
    bindings.
    """
    admin = admin_client(bootstrap)
    with kafka_errors("cannot list topics", bootstrap):
        metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    # Kafka's internal topics start with "__"; none of them is an exchange.
    names = sorted(name for name in metadata.topics if not name.startswith("__"))
    found = []
    for name, configs in _describe_configs(admin, names, bootstrap).items():
        definition = None if configs is None else definition_from_configs(configs)
        if definition is not None:
            partitions = len(metadata.topics[name].partitions)
            found.append(
                {**_document(name, definition, partitions), "bindings": len(definition.bindings)}
            )
    found.sort(key=lambda exchange: str(exchange["name"]))
    if as_json:
        print_json({"exchanges": found})
    elif not found:
        note("no exchanges")
    else:
        print_list(found)


def print_list(found: Sequence[Mapping[str, Any]]) -> None:
    """The ``list`` document's exchanges as a table."""
    columns = [
        Column("EXCHANGE"),
        Column("TYPE"),
        Column("PARTITIONS", "right"),
        Column("ALTERNATE"),
        Column("UNROUTABLE"),
        Column("BINDINGS", "right"),
    ]
    rows = [
        (
            e["name"],
            e["type"],
            str(e["partitions"]),
            e["alternate"] or NONE,
            e["unroutable"],
            str(e["bindings"]),
        )
        for e in found
    ]
    print_table(columns, rows)


# -- describe ----------------------------------------------------------------------------------


@exchanges.command("describe", **client_command_settings())
@click.argument("name")
@bootstrap_option
@json_option
def describe_command(name: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Show exchange NAME: its definition and its bindings."""
    admin = admin_client(bootstrap)
    definition = read_exchange(admin, name, bootstrap)
    partitions = _partitions(admin, name, bootstrap)
    document = {
        **_document(name, definition, partitions),
        "bindings": [
            binding_to_json(definition.type, b) for _, b in parsed_bindings(name, definition)
        ],
    }
    if as_json:
        print_json(document)
    else:
        print_description(document)


def binding_to_json(kind: str, binding: Binding) -> dict[str, Any]:
    """A binding as ``describe`` reports it: the field its exchange type uses (key, match
    or arguments) is set, the others are null."""
    field = BINDING_FIELDS.get(kind)
    return {
        "destination": binding.destination,
        "key": binding.key if field == "key" else None,
        "match": binding.expression if field == "match" else None,
        "arguments": _x_match_first(binding.arguments) if field == "arguments" else None,
    }


def _x_match_first(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as ``bind`` was given them: x-match (how they combine), then the rest."""
    return dict(sorted(arguments.items(), key=lambda item: item[0] != X_MATCH))


def print_description(document: Mapping[str, Any]) -> None:
    """The ``describe`` document for people: a line about the exchange, then its bindings
    with the column its type uses."""
    kind, bindings = document["type"], document["bindings"]
    summary = [
        plural(document["partitions"], "partition"),
        plural(len(bindings), "binding"),
        f"alternate {document['alternate']}" if document["alternate"] else "no alternate",
        f"unroutable records: {document['unroutable']}",
    ]
    print_line(f"Exchange {document['name']} ({kind}): {', '.join(summary)}")
    if not bindings:
        note(f"exchange {document['name']!r} has no bindings")
        return
    field = BINDING_FIELDS.get(kind)
    columns = [Column("DESTINATION")] + ([Column(field.upper())] if field else [])
    rows = [(b["destination"], *([_cell(field, b[field])] if field else [])) for b in bindings]
    print_line("")
    print_table(columns, rows)


def _cell(field: str, value: Any) -> str:
    if field == "arguments":
        return format_arguments(value or {})
    if field == "key" and not value:
        return '""'  # the empty routing key, visibly
    return str(value)


def format_arguments(arguments: Mapping[str, object]) -> str:
    """``x-match=any, region=eu, urgent`` (a bare name: present with any value)."""
    return ", ".join(
        name if value is None else f"{name}={value}" for name, value in arguments.items()
    )


# -- delete ------------------------------------------------------------------------------------


REPLAY_TIMEOUT_S = 600.0


def parse_offsets(texts: Sequence[str]) -> dict[str, int] | None:
    """``["0=12", "1=40"]`` -> ``{"0": 12, "1": 40}`` (partition=offset, the admin API's
    shape); None when none were given."""
    if not texts:
        return None
    found: dict[str, int] = {}
    for text in texts:
        partition, equals, offset = text.partition("=")
        if not (equals and partition.isdigit() and offset.isdigit()):
            raise click.BadParameter(f"{text!r}: expected PARTITION=OFFSET, e.g. 0=1200")
        found[str(int(partition))] = int(offset)
    return found


def parse_timestamp_ms(text: str | None) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--from-timestamp'") from None


@exchanges.command("replay", **client_command_settings())
@click.argument("name")
@click.argument("destination")
@binding_option_flags
@click.option("--from-timestamp", "from_timestamp", metavar="TIME",
              help="Start at the first record at or after TIME (ms since the epoch, or ISO "
                   "8601, UTC unless given). Default: the start of the log.")  # fmt: skip
@click.option("--from-offset", "from_offsets", multiple=True, metavar="PARTITION=OFFSET",
              help="Start there in that partition (repeatable).")  # fmt: skip
@click.option("--to-offset", "to_offsets", multiple=True, metavar="PARTITION=OFFSET",
              help="Stop before there in that partition (repeatable). Default: where routing "
                   "was when the binding was made, so it gets nothing twice.")  # fmt: skip
@admin_url_option("replay is not a Kafka operation")
@json_option
def replay_command(
    name: str,
    destination: str,
    key: str | None,
    match: str | None,
    headers: dict[str, str | None] | None,
    any_: bool,
    with_x: bool,
    from_timestamp: str | None,
    from_offsets: tuple[str, ...],
    to_offsets: tuple[str, ...],
    admin_url: str,
    as_json: bool,
) -> None:
    """Re-route exchange NAME's records into its binding to DESTINATION.

    The binding is named by the options it was made with (as for unbind). By default the
    records the exchange held before the binding was made are sent through it, once:
    what a binding added later would have got, had it existed. RabbitMQ cannot do this;
    the exchange's log makes it possible.
    """
    options = binding_options(key, match, headers, any_, with_x)
    body: dict[str, Any] = {"destination": destination}
    if options.key is not None:
        body["key"] = options.key
    if options.match is not None:
        body["expression"] = options.match
    if options.headers is not None:
        body["arguments"] = options.arguments()
    if from_timestamp is not None:
        body["from_timestamp_ms"] = parse_timestamp_ms(from_timestamp)
    for field, texts in (("from_offsets", from_offsets), ("to_offsets", to_offsets)):
        offsets = parse_offsets(texts)
        if offsets is not None:
            body[field] = offsets
    # The admin API answers once every copy is written: a spinner shows it is working.
    with activity(f"replaying exchange {name} into {destination}", enabled=progress_wanted()):
        done = admin_request(
            admin_url, "POST", f"/api/v1/exchanges/{name}/replay", body, timeout_s=REPLAY_TIMEOUT_S
        )
    if as_json:
        print_json(done)
        return
    spans = ", ".join(
        f"{r['partition']}: {r['start_offset']}..{r['end_offset']}" for r in done["ranges"]
    )
    print_line(
        f"Replayed {plural(done['records_read'], 'record')} of exchange {name} "
        f"(partition: offsets [{spans or 'none'}]); "
        f"{done['records_routed']} routed into {destination}."
    )


@exchanges.command("delete", **client_command_settings())
@click.argument("name")
@click.option("--if-exists", is_flag=True, help="Succeed if there is no such exchange.")
@bootstrap_option
@json_option
def delete_command(name: str, if_exists: bool, bootstrap: Bootstrap, as_json: bool) -> None:
    """Delete exchange NAME, its records and its bindings.

    Bindings from other exchanges to it go too. A plain topic is not deleted: that is
    `weirmq topics delete`.
    """
    admin = admin_client(bootstrap)
    deleted = True
    try:
        if read_definition(admin, name, bootstrap) is None:
            raise CommandError(
                f"{name!r} is a plain topic, not an exchange (weirmq topics delete deletes topics)"
            )
        futures = admin.delete_topics([name], request_timeout=REQUEST_TIMEOUT_S)
        _wait(futures[name], f"cannot delete exchange {name!r}", bootstrap, name)
    except CommandError as exc:
        if not (if_exists and exc.error_name == UNKNOWN_TOPIC):
            raise
        deleted = False
    report_deleted("exchange", name, deleted, as_json)
