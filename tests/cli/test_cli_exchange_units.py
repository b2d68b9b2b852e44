"""`weirmq exchanges` without a broker: the config names it shares with the broker, reading
a definition from DescribeConfigs values, the bind/unbind options and how they are checked
against an exchange's type, the binding items (made and read by the broker's own helpers),
the tables, and usage errors."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from weirmq.broker import configs as broker_configs
from weirmq.broker import exchanges as broker_exchanges
from weirmq.cli.clients import CommandError
from weirmq.cli.exchanges import (
    ALTERNATE_CONFIG,
    BINDINGS_CONFIG,
    EXCHANGE_TYPES,
    TYPE_CONFIG,
    UNROUTABLE_CONFIG,
    BindingOptions,
    Definition,
    binding_options,
    binding_to_json,
    definition_from_configs,
    differences,
    equivalent,
    parse_headers,
    parsed_bindings,
    print_description,
    print_list,
    to_binding,
)
from weirmq.cli.main import main
from weirmq.routing import Binding


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def definition(kind: str, *items: str) -> Definition:
    return Definition(kind, None, "drop", items)


# -- the broker's interface --------------------------------------------------------------------


def test_config_names_are_the_brokers() -> None:
    assert TYPE_CONFIG == broker_configs.EXCHANGE_TYPE
    assert ALTERNATE_CONFIG == broker_configs.EXCHANGE_ALTERNATE
    assert UNROUTABLE_CONFIG == broker_configs.EXCHANGE_UNROUTABLE
    assert BINDINGS_CONFIG == broker_exchanges.BINDINGS_CONFIG
    assert EXCHANGE_TYPES == broker_configs.EXCHANGE_TYPES


def test_a_definition_from_describe_configs() -> None:
    plain = {TYPE_CONFIG: "", ALTERNATE_CONFIG: "", UNROUTABLE_CONFIG: "drop"}
    assert definition_from_configs(plain) is None
    assert definition_from_configs({"retention.ms": "1"}) is None  # not a WeirMQ broker
    exchange = {
        TYPE_CONFIG: "topic",
        ALTERNATE_CONFIG: "unrouted",
        UNROUTABLE_CONFIG: "reject",
        BINDINGS_CONFIG: "eu?key=eu.#, all?key=%23,",
    }
    assert definition_from_configs(exchange) == Definition(
        "topic", "unrouted", "reject", ("eu?key=eu.#", "all?key=%23")
    )
    empty = {TYPE_CONFIG: "fanout", ALTERNATE_CONFIG: "", BINDINGS_CONFIG: ""}
    assert definition_from_configs(empty) == Definition("fanout", None, "drop", ())


def test_differences_name_each_field() -> None:
    existing = Definition("topic", None, "drop", ("eu?key=eu.#",))
    assert differences(existing, 3, Definition("topic", None, "drop", ()), None) == []
    assert differences(existing, 3, Definition("topic", None, "drop", ()), 3) == []
    asked = Definition("direct", "ae", "reject", ())
    assert differences(existing, 3, asked, 6) == [
        "its type is topic, not direct",
        "its alternate is none, not 'ae'",
        "its unroutable policy is drop, not reject",
        "it has 3 partitions, not 6",
    ]


# -- bind and unbind options -------------------------------------------------------------------


def test_headers_are_name_value_or_bare_names() -> None:
    assert parse_headers(["region=eu,urgent", "formula=a=b", ""]) == {
        "region": "eu",
        "urgent": None,
        "formula": "a=b",
    }
    assert parse_headers([""]) == {}


@pytest.mark.parametrize(
    ("texts", "complaint"),
    [
        (["=eu"], "no header name"),
        (["a=1,a=2"], "given twice"),
        (["x-match=any"], "--any and --with-x"),
    ],
)
def test_bad_headers_are_refused(texts: list[str], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_headers(texts)


def test_x_match_follows_any_and_with_x() -> None:
    headers = {"a": "1"}
    assert binding_options(None, None, headers, False, False).x_match == "all"
    assert binding_options(None, None, headers, True, False).x_match == "any"
    assert binding_options(None, None, headers, False, True).x_match == "all-with-x"
    assert binding_options(None, None, headers, True, True).x_match == "any-with-x"


@pytest.mark.parametrize(
    ("kind", "options", "complaint"),
    [
        (
            "fanout",
            BindingOptions(key="k"),
            "a fanout exchange: its bindings take no --key (they match every record)",
        ),
        ("direct", BindingOptions(), "a direct exchange: its bindings need --key KEY"),
        (
            "topic",
            BindingOptions(match="a = 1"),
            "a topic exchange: its bindings need --key PATTERN, not --match",
        ),
        (
            "content",
            BindingOptions(headers={}),
            "a content exchange: its bindings need --match EXPRESSION, not --headers",
        ),
        (
            "headers",
            BindingOptions(key=""),
            "a headers exchange: its bindings need --headers NAME=VALUE, not --key",
        ),
    ],
)
def test_options_that_do_not_fit_the_type_are_refused(
    kind: str, options: BindingOptions, complaint: str
) -> None:
    with pytest.raises(CommandError) as caught:
        options.check_type("x", kind)
    assert caught.value.message == f"exchange 'x' is {complaint}"
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("fanout", BindingOptions()),
        ("direct", BindingOptions(key="")),
        ("topic", BindingOptions(key="eu.#")),
        ("headers", BindingOptions(headers={"a": None})),
        ("content", BindingOptions(match="a = 1")),
        ("future-type", BindingOptions(key="k")),  # left to the broker
    ],
)
def test_options_that_fit_the_type_pass(kind: str, options: BindingOptions) -> None:
    options.check_type("x", kind)


# -- binding items -----------------------------------------------------------------------------

# Each exchange type with options whose item needs escaping (% , & =).
ROUND_TRIPS = [
    ("fanout", BindingOptions()),
    ("direct", BindingOptions(key="")),
    ("direct", BindingOptions(key="a,b&c=d%e")),
    ("topic", BindingOptions(key="eu.#.*")),
    ("content", BindingOptions(match="region = 'eu,fr' AND amount >= 100")),
    ("headers", BindingOptions(headers={"region": "eu&fr", "urgent": None, "a=b": "1"})),
    ("headers", BindingOptions(headers={"x-prio": "high"}, x_match="any-with-x")),
]


@pytest.mark.parametrize(("kind", "options"), ROUND_TRIPS)
def test_a_binding_survives_its_item(kind: str, options: BindingOptions) -> None:
    binding = to_binding("ex", kind, "dest", options)
    item = broker_exchanges.binding_spec(binding)
    assert "," not in item
    ((read_item, read),) = parsed_bindings("ex", definition(kind, item))
    assert read_item == item
    assert read == binding
    assert binding_to_json(kind, read) == {"destination": "dest", **_fields(kind, options)}


def _fields(kind: str, options: BindingOptions) -> dict[str, object]:
    document = options.to_json()
    if kind == "fanout":
        document["key"] = None
    return document


def test_headers_without_x_match_are_x_match_all() -> None:
    implicit = Binding("ex", "dest", "topic", arguments={"a": "1"})
    explicit = Binding("ex", "dest", "topic", arguments={"a": "1", "x-match": "all"})
    other = Binding("ex", "dest", "topic", arguments={"a": "1", "x-match": "any"})
    assert equivalent(implicit, explicit)
    assert equivalent(explicit, implicit)
    assert not equivalent(implicit, other)
    direct = Binding("ex", "dest", "topic", key="a")
    assert equivalent(direct, Binding("ex", "dest", "topic", key="a"))
    assert not equivalent(direct, Binding("ex", "dest", "topic", key="b"))


def test_an_unreadable_item_is_one_error() -> None:
    with pytest.raises(CommandError, match="cannot read the bindings of exchange 'ex'"):
        parsed_bindings("ex", definition("content", "dest?key=x"))


# -- tables ------------------------------------------------------------------------------------


def describe(kind: str, bindings: list[dict[str, object]], **extra: object) -> dict[str, object]:
    document: dict[str, object] = {
        "name": "orders",
        "type": kind,
        "partitions": 3,
        "alternate": None,
        "unroutable": "drop",
        "bindings": bindings,
    }
    return {**document, **extra}


def binding(destination: str, **fields: object) -> dict[str, object]:
    return {"destination": destination, "key": None, "match": None, "arguments": None, **fields}


def test_a_description_shows_the_field_its_type_uses(capsys: pytest.CaptureFixture[str]) -> None:
    print_description(
        describe("topic", [binding("eu", key="eu.#"), binding("all", key="")], alternate="ae")
    )
    header, blank, titles, *rows = capsys.readouterr().out.splitlines()
    assert header == (
        "Exchange orders (topic): 3 partitions, 2 bindings, alternate ae, unroutable records: drop"
    )
    assert blank == ""
    assert titles.split() == ["DESTINATION", "KEY"]
    assert [row.split() for row in rows] == [["eu", "eu.#"], ["all", '""']]

    arguments = {"x-match": "any", "region": "eu", "urgent": None}
    print_description(describe("headers", [binding("eu", arguments=arguments)]))
    *_, titles, row = capsys.readouterr().out.splitlines()
    assert titles.split() == ["DESTINATION", "ARGUMENTS"]
    assert row.rstrip() == "eu           x-match=any, region=eu, urgent"

    print_description(describe("content", [binding("big", match="amount > 100")]))
    *_, titles, row = capsys.readouterr().out.splitlines()
    assert (titles.split(), row.rstrip()) == (["DESTINATION", "MATCH"], "big          amount > 100")

    print_description(describe("fanout", [binding("a"), binding("b")]))
    *_, titles, first, second = capsys.readouterr().out.splitlines()
    assert [titles.strip(), first.strip(), second.strip()] == ["DESTINATION", "a", "b"]


def test_an_exchange_without_bindings(capsys: pytest.CaptureFixture[str]) -> None:
    print_description(describe("direct", [], partitions=1))
    captured = capsys.readouterr()
    assert captured.out == (
        "Exchange orders (direct): 1 partition, 0 bindings, no alternate, "
        "unroutable records: drop\n"
    )
    assert captured.err == "weirmq: exchange 'orders' has no bindings\n"


def test_the_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    print_list(
        [
            {"name": "orders", "type": "topic", "partitions": 12, "alternate": "ae",
             "unroutable": "drop", "bindings": 2},
            {"name": "ae", "type": "fanout", "partitions": 1, "alternate": None,
             "unroutable": "reject", "bindings": 0},
        ]
    )  # fmt: skip
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "EXCHANGE", "TYPE", "PARTITIONS", "ALTERNATE", "UNROUTABLE", "BINDINGS"
    ]  # fmt: skip
    assert [row.split() for row in rows] == [
        ["orders", "topic", "12", "ae", "drop", "2"],
        ["ae", "fanout", "1", "-", "reject", "0"],
    ]


# -- usage errors (exit 2, before any connection) ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["declare", "x"], "Missing option '--type'"),
        (["declare", "x", "--type", "dirct"], "'dirct' is not one of"),
        (["declare", "x", "--type", "topic", "--unroutable", "keep"], "'keep' is not one of"),
        (["declare", "x", "--type", "topic", "--partitions", "0"], "--partitions"),
        (["bind", "x"], "Missing argument 'DESTINATION'"),
        (["bind", "x", "d", "--key", "k", "--match", "a = 1"], "cannot be used together"),
        (["bind", "x", "d", "--key", "k", "--headers", "a=1"], "cannot be used together"),
        (["bind", "x", "d", "--any"], "--any goes with --headers"),
        (["unbind", "x", "d", "--with-x", "--key", "k"], "--with-x goes with --headers"),
        (["bind", "x", "d", "--headers", "=1"], "no header name"),
        (["unbind", "x", "d", "--headers", "x-match=any"], "set with --any and --with-x"),
        (["describe"], "Missing argument 'NAME'"),
        (["list", "extra"], "unexpected extra argument"),
    ],
)
def test_usage_errors_exit_2(args: list[str], complaint: str) -> None:
    result = CliRunner().invoke(main, ["exchanges", *args], env={"WEIRMQ_BOOTSTRAP": None})
    assert result.exit_code == 2, result.output
    assert complaint in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["declare", "x", "--type", "fanout"],
        ["bind", "x", "d"],
        ["unbind", "x", "d", "--key", "k"],
        ["describe", "x"],
        ["delete", "x"],
    ],
)
def test_broker_down_is_one_line_and_exit_3(closed_port: int, args: list[str]) -> None:
    bootstrap = f"127.0.0.1:{closed_port}"
    result = CliRunner().invoke(main, ["exchanges", *args, "--bootstrap", bootstrap])
    assert result.exit_code == 3
    assert result.output == f"weirmq: cannot reach a broker at {bootstrap} (connection refused)\n"


def test_help_lists_the_exchange_commands() -> None:
    top = CliRunner().invoke(main, ["--help"])
    assert "Declare, bind, list, describe, replay and delete exchanges." in top.output
    result = CliRunner().invoke(main, ["exchanges", "--help"])
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.output.split("Commands:")[1].splitlines()[1:]]
    assert listed == ["bind", "declare", "delete", "describe", "list", "replay", "unbind"]
