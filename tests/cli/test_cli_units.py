"""The client commands' pure parts, without a broker: option parsing, the --format and JSON
forms of records, produce's line splitting, the groups table, error -> exit code, usage
errors, and the lazy registration that keeps `weirmq serve` free of confluent-kafka and
rich."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError

from weirmq.cli.clients import (
    EXIT_BROKER_ERROR,
    EXIT_UNREACHABLE,
    Address,
    BrokerUnreachable,
    check_reachable,
    error_for,
    parse_bootstrap,
)
from weirmq.cli.consume import OFFSET_BEGINNING, OFFSET_END, parse_start_offset
from weirmq.cli.formats import (
    ConsumedRecord,
    FormatError,
    compile_format,
    parse_assignments,
    record_to_json,
    render,
    split_line,
)
from weirmq.cli.groups import print_description, state_name, type_name
from weirmq.cli.main import main
from weirmq.cli.output import Column, bytes_from_json, print_table, text_or_base64

RECORD = ConsumedRecord(
    topic="orders",
    partition=2,
    offset=41,
    timestamp_ms=1_704_067_200_000,
    key=b"order-1",
    value=b"12.00",
    headers=(("src", b"web"), ("trace", None)),
)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound (so nobody else takes it) but
    not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# -- --bootstrap -------------------------------------------------------------------------------


def test_bootstrap_accepts_lists_and_bracketed_ipv6() -> None:
    bootstrap = parse_bootstrap("broker1:9092, [::1]:9093")
    assert bootstrap.addresses == (Address("broker1", 9092), Address("::1", 9093))
    assert bootstrap.servers == "broker1:9092,[::1]:9093"


@pytest.mark.parametrize("text", ["", "broker", "broker:", ":9092", "broker:x", "b:0", "b:65536"])
def test_bootstrap_refuses_what_is_not_host_port(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(text)


def test_check_reachable_names_the_address_and_the_reason(closed_port: int) -> None:
    with pytest.raises(BrokerUnreachable) as caught:
        check_reachable(parse_bootstrap(f"127.0.0.1:{closed_port}"))
    assert caught.value.exit_code == EXIT_UNREACHABLE
    assert caught.value.message == (
        f"cannot reach a broker at 127.0.0.1:{closed_port} (connection refused)"
    )


def test_check_reachable_is_satisfied_by_any_listening_address(closed_port: int) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_reachable(parse_bootstrap(f"127.0.0.1:{closed_port},127.0.0.1:{port}"))


# -- errors -> exit codes ----------------------------------------------------------------------


def test_broker_errors_exit_1_and_missing_brokers_exit_3() -> None:
    bootstrap = parse_bootstrap("127.0.0.1:9092")
    exists = error_for(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS), "cannot create", bootstrap, "t")
    assert (exists.exit_code, exists.message) == (EXIT_BROKER_ERROR, "topic 't' already exists")
    assert exists.error_name == "TOPIC_ALREADY_EXISTS"
    invalid = error_for(
        KafkaError(KafkaError.INVALID_CONFIG, "bad retention.ms"), "doing", bootstrap
    )
    assert (invalid.exit_code, invalid.message) == (
        EXIT_BROKER_ERROR,
        "doing: bad retention.ms (INVALID_CONFIG)",
    )
    gone = error_for(KafkaError(KafkaError._TRANSPORT), "cannot list topics", bootstrap)
    assert gone.exit_code == EXIT_UNREACHABLE
    assert gone.message.startswith("cannot list topics: no answer from the broker at 127.0.0.1")


# -- --format ----------------------------------------------------------------------------------


def test_every_placeholder_and_escape() -> None:
    parts = compile_format(r"%t|%p|%o|%k|%s|%h|%T|%K|%S|100%%\t\\\n")
    assert render(parts, RECORD) == (
        b"orders|2|41|order-1|12.00|src=web,trace=|1704067200000|7|5|100%\t\\\n"
    )


def test_null_key_value_and_timestamp_print_as_nothing_and_minus_one() -> None:
    record = ConsumedRecord("t", 0, 0, None, None, None)
    assert render(compile_format("[%k][%s][%K][%S][%T][%h]"), record) == b"[][][-1][-1][-1][]"


def test_bytes_are_printed_as_they_are_and_unknown_escapes_kept() -> None:
    record = ConsumedRecord("t", 0, 0, None, b"\xff\x00", "é".encode())
    assert render(compile_format(r"%k\q%s"), record) == b"\xff\x00\\q\xc3\xa9"


@pytest.mark.parametrize(("text", "culprit"), [("%x", "%x"), ("value %", "lone '%'")])
def test_an_unknown_placeholder_is_refused_by_name(text: str, culprit: str) -> None:
    with pytest.raises(FormatError, match=culprit):
        compile_format(text)


# -- JSON --------------------------------------------------------------------------------------


def test_record_json_uses_text_when_utf8_and_base64_otherwise() -> None:
    record = ConsumedRecord("t", 1, 7, 5, b"\xff\xfe", "naïve".encode(), (("bin", b"\x80"),))
    assert record_to_json(record) == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": 5,
        "key": base64.b64encode(b"\xff\xfe").decode(),
        "key_base64": True,
        "value": "naïve",
        "value_base64": False,
        "headers": [{"key": "bin", "value": "gA==", "value_base64": True}],
    }


@pytest.mark.parametrize("data", [None, b"", b"plain", b"\x00\xff\x10", "日本".encode()])
def test_json_bytes_round_trip(data: bytes | None) -> None:
    assert bytes_from_json(*text_or_base64(data)) == data


# -- produce input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "separator", "expected"),
    [
        (b"value\n", None, (None, b"value")),
        (b"k:v:w\n", b":", (b"k", b"v:w")),  # the first separator only
        (b"no separator\n", b":", (None, b"no separator")),
        (b"k::v", b"::", (b"k", b"v")),  # a last line without newline
        (b"\n", None, (None, b"")),
        (b"crlf\r\n", None, (None, b"crlf\r")),  # only the newline is ours to strip
    ],
)
def test_split_line(
    line: bytes, separator: bytes | None, expected: tuple[bytes | None, bytes]
) -> None:
    assert split_line(line, separator) == expected


def test_assignments_split_at_the_first_equals_sign() -> None:
    assert parse_assignments(["a=1", "b=x=y", "c="], "--config") == [
        ("a", "1"),
        ("b", "x=y"),
        ("c", ""),
    ]
    for bad in ("novalue", "=1"):
        with pytest.raises(ValueError, match="--header"):
            parse_assignments([bad], "--header")


# -- consume offsets ---------------------------------------------------------------------------


def test_start_offsets() -> None:
    assert parse_start_offset("beginning") == OFFSET_BEGINNING
    assert parse_start_offset("end") == OFFSET_END
    assert parse_start_offset("42") == 42
    assert parse_start_offset("-3") == -2003  # librdkafka's OFFSET_TAIL(3)
    with pytest.raises(ValueError):
        parse_start_offset("latest")


# -- tables ------------------------------------------------------------------------------------


def test_tables_stay_one_line_per_row_in_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    long_name = "t" * 150
    print_table([Column("TOPIC"), Column("PARTITIONS", "right")], [(long_name, "3"), ("a", "12")])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert "\x1b" not in "".join(lines)  # no colour off a terminal
    header, first, second = (line.rstrip() for line in lines)
    assert first == f"{long_name}           3"
    # Right-aligned numbers end in the same column as their header.
    assert len(header) == len(first) == len(second)


def test_table_cells_are_text_not_markup(capsys: pytest.CaptureFixture[str]) -> None:
    # Kafka allows any character in a group or client id.
    print_table([Column("GROUP")], [("[bold]x",), ("a[/]",)])
    assert capsys.readouterr().out.split() == ["GROUP", "[bold]x", "a[/]"]


# -- groups ------------------------------------------------------------------------------------


def test_group_states_and_types_are_named_as_kafka_names_them() -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    names = [state_name(state) for state in ConsumerGroupState]
    assert names == [
        "Unknown",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
        "Empty",
    ]
    assert [type_name(kind) for kind in ConsumerGroupType] == ["unknown", "consumer", "classic"]


def test_a_group_description_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    busy = {"member_id": "m-1", "client_id": "app", "host": "/10.0.0.7"}
    idle = {"member_id": "m-2", "client_id": "app", "host": "/10.0.0.8"}
    owned = {"topic": "orders", "partition": 0, "current_offset": None, "log_end_offset": 7}
    orphan = {"topic": "orders", "partition": 1, "current_offset": 9, "log_end_offset": None}
    print_description(
        {
            "group": "billing",
            "type": "classic",
            "state": "Stable",
            "protocol": "range",
            "members": [busy, idle],
            "partitions": [
                {**owned, "lag": None, "member_id": "m-1"},
                {**orphan, "lag": None, "member_id": None},
            ],
        }
    )
    header, blank, titles, *rows = capsys.readouterr().out.splitlines()
    assert header == "Group billing (classic): Stable, 2 members, assignor range"
    assert blank == ""
    assert titles.split()[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert [row.split() for row in rows] == [
        ["orders", "0", "-", "7", "-", "m-1", "/10.0.0.7", "app"],
        ["orders", "1", "9", "-", "-", "-", "-", "-"],  # committed, but owned by nobody now
        ["-", "-", "-", "-", "-", "m-2", "/10.0.0.8", "app"],  # a member that owns nothing
    ]


def test_a_group_with_nothing_to_show(capsys: pytest.CaptureFixture[str]) -> None:
    print_description(
        {
            "group": "new",
            "type": "consumer",
            "state": "Empty",
            "protocol": None,
            "members": [],
            "partitions": [],
        }
    )
    captured = capsys.readouterr()
    assert captured.out == "Group new (consumer): Empty, 0 members\n"
    assert captured.err == "weirmq: group 'new' has no members and no committed offsets\n"


# -- usage errors (exit 2, before any connection) ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["consume", "t", "--from-beginning", "--offset", "3"], "cannot be used together"),
        (["consume", "t", "--format", "%z"], "unknown placeholder %z"),
        (["consume", "t", "--format", "%s", "--json"], "cannot be used together"),
        (["consume", "t", "--group", "g", "--partition", "1"], "the group assigns"),
        (["consume", "t", "--offset", "soon"], "not beginning, end, N or -N"),
        (["produce", "t", "--header", "nokey"], "is not KEY=VALUE"),
        (["produce", "t", "--key-separator", ""], "cannot be empty"),
        (["topics", "create", "t", "--config", "retention.ms"], "is not KEY=VALUE"),
        (["topics", "create", "t", "--partitions", "0"], "--partitions"),
        (["topics", "alter", "t"], "nothing to alter"),
        (["topics", "list", "--bootstrap", "nowhere"], "is not HOST:PORT"),
        (["groups", "describe"], "Missing argument 'GROUP'"),
        (["groups", "delete"], "Missing argument 'GROUP'"),
        (["groups", "list", "extra"], "unexpected extra argument"),
    ],
)
def test_usage_errors_exit_2(args: list[str], complaint: str) -> None:
    result = CliRunner().invoke(main, args, env={"WEIRMQ_BOOTSTRAP": None})
    assert result.exit_code == 2, result.output
    assert complaint in result.output


def test_broker_down_is_one_line_and_exit_3(closed_port: int) -> None:
    result = CliRunner().invoke(main, ["topics", "list", "--bootstrap", f"127.0.0.1:{closed_port}"])
    assert result.exit_code == 3
    assert result.output == (
        f"weirmq: cannot reach a broker at 127.0.0.1:{closed_port} (connection refused)\n"
    )


def test_bootstrap_comes_from_the_environment(closed_port: int) -> None:
    env = {"WEIRMQ_BOOTSTRAP": f"127.0.0.1:{closed_port}"}
    result = CliRunner().invoke(main, ["consume", "t"], env=env)
    assert result.exit_code == 3
    assert f"127.0.0.1:{closed_port}" in result.output


# -- registration ------------------------------------------------------------------------------


def test_help_lists_the_client_commands_and_exit_codes() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    # Columns are as wide as the longest command name: compare with spaces collapsed.
    output = " ".join(result.output.split())
    for line in (
        "consume Print the records of TOPIC as they arrive.",
        "produce Send each line of stdin (or --file) to TOPIC as one record.",
        "topics List, create, describe, alter, trim and delete topics.",
        "groups List, describe, reset the offsets of and delete consumer groups.",
        "status Show the cluster: its id, controller, brokers, topics and health.",
        "exchanges ",
        "3 no broker reachable at --bootstrap",
    ):
        assert line in output


def test_the_weirmq_command_does_not_import_librdkafka_or_rich() -> None:
    # A fresh interpreter: this test process has long imported both.
    code = (
        "import sys, weirmq.cli.main\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'confluent_kafka', 'rich'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
