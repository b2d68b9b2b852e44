"""The `weirmq` client commands end to end: each test runs the command as a user would
(`python -m weirmq ...` in a subprocess) against a real broker process, and reads the
results back through the command's own `--json` output or a real Kafka client.

`weirmq groups` and `consume --group` have their tests in test_cli_groups.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from weirmq.cli.output import bytes_from_json

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

COMMAND_TIMEOUT_S = 60


def weirmq(
    broker: BrokerProcess | None, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `weirmq ARGS` (with --bootstrap of ``broker`` when given) and wait for it."""
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    bootstrap = ["--bootstrap", broker.bootstrap] if broker is not None else []
    return subprocess.run(
        [sys.executable, "-m", "weirmq", *args, *bootstrap],
        input=stdin,
        capture_output=True,
        env={**clean_env, **(env or {})},
        timeout=COMMAND_TIMEOUT_S,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    """stdout of a command that must have succeeded."""
    assert result.returncode == 0, (result.returncode, result.stderr.decode())
    assert b"Traceback" not in result.stderr
    return result.stdout.decode()


def ok_json(result: subprocess.CompletedProcess[bytes]) -> Any:
    return json.loads(ok(result))


def failed(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    """The one stderr line of a command that must have failed with exit code ``code``."""
    stderr = result.stderr.decode()
    assert result.returncode == code, (result.returncode, stderr)
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1, stderr
    assert result.stdout == b""
    return stderr.removesuffix("\n")


def columns(line: str) -> list[int]:
    """Where each whitespace-separated word of ``line`` ends (for alignment checks)."""
    ends, position = [], 0
    for word in line.split():
        position = line.index(word, position) + len(word)
        ends.append(position)
    return ends


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that refuses connections: bound, so nobody else takes it, but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# -- topics ------------------------------------------------------------------------------------


def test_topics_list_as_table_and_json(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "produce", "payments", stdin=b"1\n"))  # auto-creates
    ok(weirmq(broker, "topics", "create", "orders-by-region", "--partitions", "12"))
    listed = ok_json(weirmq(broker, "topics", "list", "--json"))
    assert listed == {
        "topics": [
            {"name": "orders-by-region", "partitions": 12},
            {"name": "payments", "partitions": 1},
        ]
    }
    header, *rows = ok(weirmq(broker, "topics", "list")).splitlines()
    assert header.split() == ["TOPIC", "PARTITIONS"]
    assert [row.split() for row in rows] == [["orders-by-region", "12"], ["payments", "1"]]
    # Numbers are right-aligned under their header.
    assert {columns(line)[-1] for line in (header, *rows)} == {columns(header)[-1]}


def test_create_with_configs_then_describe(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(default_partitions=2)
    created = ok_json(
        weirmq(
            broker,
            *("topics", "create", "orders", "--partitions", "3", "--json"),
            *("--config", "retention.ms=3600000", "--config", "cleanup.policy=compact"),
        )
    )
    assert created == {"name": "orders", "created": True, "partitions": 3}
    default = ok_json(weirmq(broker, "topics", "create", "defaulted", "--json"))
    assert default == {"name": "defaulted", "created": True, "partitions": 2}
    # Keyed: a compacted topic refuses records without a key, as Kafka does.
    produce = ("produce", "orders", "--partition", "1", "--key-separator", ":")
    ok(weirmq(broker, *produce, stdin=b"k1:a\nk2:b\nk3:c\n"))

    described = ok_json(weirmq(broker, "topics", "describe", "orders", "--json"))
    assert described["name"] == "orders"
    assert [
        (p["partition"], p["earliest_offset"], p["latest_offset"]) for p in described["partitions"]
    ] == [(0, 0, 0), (1, 0, 3), (2, 0, 0)]
    assert all(
        p["leader"] == 0 and p["replicas"] == p["isr"] == [0] for p in described["partitions"]
    )
    configs = described["configs"]
    assert configs["retention.ms"] == {
        "value": "3600000",
        "default": False,
        "source": "DYNAMIC_TOPIC_CONFIG",
        "read_only": False,
        "sensitive": False,
    }
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["segment.bytes"]["default"] is True

    text = ok(weirmq(broker, "topics", "describe", "orders"))
    assert text.startswith("Topic orders: 3 partitions\n")
    partition_rows = {line.split()[0]: line.split() for line in text.splitlines() if line}
    assert partition_rows["1"] == ["1", "0", "0", "0", "0", "3"]
    marked = [line.split() for line in text.splitlines() if line.startswith("*")]
    assert ["*", "retention.ms", "3600000", "topic"] in marked
    assert all(row[1] in {"retention.ms", "cleanup.policy"} for row in marked if len(row) == 4)


def test_create_errors_are_one_line_and_exit_1(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "orders"))
    assert failed(weirmq(broker, "topics", "create", "orders"), 1) == (
        "weirmq: topic 'orders' already exists"
    )
    again = ok_json(weirmq(broker, "topics", "create", "orders", "--if-not-exists", "--json"))
    assert again == {"name": "orders", "created": False, "partitions": 1}
    invalid = failed(weirmq(broker, "topics", "create", "x", "--config", "retention.ms=soon"), 1)
    assert invalid.startswith("weirmq: cannot create topic 'x': ")
    assert invalid.endswith("(INVALID_CONFIG)")
    assert "retention.ms" in invalid


def test_alter_configs_and_partitions(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "orders", "--partitions", "2"))

    def describe() -> dict[str, Any]:
        result: dict[str, Any] = ok_json(weirmq(broker, "topics", "describe", "orders", "--json"))
        return result

    altered = ok_json(
        weirmq(broker, "topics", "alter", "orders", "--config", "retention.ms=7200000", "--json")
    )
    assert altered == {
        "name": "orders",
        "set": {"retention.ms": "7200000"},
        "deleted": [],
        "partitions": None,
    }
    retention = describe()["configs"]["retention.ms"]
    assert (retention["value"], retention["default"]) == ("7200000", False)

    text = ok(weirmq(broker, "topics", "alter", "orders", "--delete-config", "retention.ms"))
    assert text == "Altered topic orders: retention.ms back to its default.\n"
    assert describe()["configs"]["retention.ms"]["default"] is True

    ok(weirmq(broker, "topics", "alter", "orders", "--partitions", "5"))
    assert len(describe()["partitions"]) == 5
    shrink = failed(weirmq(broker, "topics", "alter", "orders", "--partitions", "3"), 1)
    assert "(INVALID_PARTITIONS)" in shrink
    bad = failed(weirmq(broker, "topics", "alter", "orders", "--config", "retention.ms=x"), 1)
    assert bad.endswith("(INVALID_CONFIG)")
    assert failed(weirmq(broker, "topics", "alter", "nope", "--config", "retention.ms=1"), 1) == (
        "weirmq: topic 'nope' does not exist"
    )


def test_delete(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "doomed"))
    assert ok(weirmq(broker, "topics", "delete", "doomed")) == "Deleted topic doomed.\n"
    assert ok_json(weirmq(broker, "topics", "list", "--json")) == {"topics": []}
    assert failed(weirmq(broker, "topics", "delete", "doomed"), 1) == (
        "weirmq: topic 'doomed' does not exist"
    )
    gone = ok_json(weirmq(broker, "topics", "delete", "doomed", "--if-exists", "--json"))
    assert gone == {"name": "doomed", "deleted": False}


def test_unknown_topic_is_one_line_exit_1_and_not_created(broker: BrokerProcess) -> None:
    expected = "weirmq: topic 'nope' does not exist"
    assert failed(weirmq(broker, "topics", "describe", "nope"), 1) == expected
    assert failed(weirmq(broker, "topics", "describe", "nope", "--json"), 1) == expected
    assert failed(weirmq(broker, "consume", "nope", "--exit"), 1) == expected
    assert ok_json(weirmq(broker, "topics", "list", "--json")) == {"topics": []}


# -- produce and consume -----------------------------------------------------------------------


def test_produce_then_consume_keys_headers_and_format(broker: BrokerProcess) -> None:
    lines = b"k1:v1\nk2:v:with:colons\nno key here\n:empty key\n"
    produced = weirmq(
        broker,
        *("produce", "orders", "--key-separator", ":"),
        *("--header", "source=cli", "--header", "trace=a=b"),
        stdin=lines,
    )
    ok(produced)
    assert produced.stderr.decode() == (
        "weirmq: produced 4 records (39 B) to orders (partition 0: offsets 0-3)\n"
    )

    formatted = weirmq(
        broker,
        *("consume", "orders", "--from-beginning", "--exit"),
        *("--format", r"%t/%p/%o key=%k(%K) value=%s headers=%h\n"),
    )
    assert ok(formatted) == (
        "orders/0/0 key=k1(2) value=v1 headers=source=cli,trace=a=b\n"
        "orders/0/1 key=k2(2) value=v:with:colons headers=source=cli,trace=a=b\n"
        "orders/0/2 key=(-1) value=no key here headers=source=cli,trace=a=b\n"
        "orders/0/3 key=(0) value=empty key headers=source=cli,trace=a=b\n"
    )
    assert formatted.stderr.decode() == (
        "weirmq: reached the end of orders [0] at offset 4\n"
        "weirmq: consumed 4 records from orders\n"
    )
    # The default: values, one per line.
    plain = ok(weirmq(broker, "consume", "orders", "--from-beginning", "--exit"))
    assert plain == "v1\nv:with:colons\nno key here\nempty key\n"


def test_consume_json_round_trips_binary_keys_values_and_headers(broker: BrokerProcess) -> None:
    records = [
        (b"\xff\xfe", "naïve".encode(), [("bin", b"\x80\x81"), ("text", b"ok")]),
        (None, b"\x00\xff\x02", []),  # control characters alone would be valid UTF-8
        ("日本".encode(), b"", [("null", None)]),
    ]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for key, value, headers in records:
        producer.produce("mixed", value=value, key=key, headers=headers, timestamp=1_700_000_000)
    assert producer.flush(10) == 0

    out = ok(weirmq(broker, "consume", "mixed", "--from-beginning", "--exit", "--json"))
    consumed = [json.loads(line) for line in out.splitlines()]
    assert [(r["topic"], r["partition"], r["offset"]) for r in consumed] == [
        ("mixed", 0, 0),
        ("mixed", 0, 1),
        ("mixed", 0, 2),
    ]
    assert {r["timestamp"] for r in consumed} == {1_700_000_000}
    assert [(r["key_base64"], r["value_base64"]) for r in consumed] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    read_back = [
        (
            bytes_from_json(r["key"], r["key_base64"]),
            bytes_from_json(r["value"], r["value_base64"]),
            [(h["key"], bytes_from_json(h["value"], h["value_base64"])) for h in r["headers"]],
        )
        for r in consumed
    ]
    assert read_back == records


def test_produce_json_summary_and_binary_lines(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "spread", "--partitions", "2"))
    result = weirmq(broker, "produce", "spread", "--partition", "1", "--json", stdin=b"a\n\xff\nc")
    summary = ok_json(result)
    assert summary == {
        "topic": "spread",
        "records": 3,
        "bytes": 3,
        "delivered": 3,
        "failed": 0,
        "acks": "all",
        "compression": "none",
        "partitions": [{"partition": 1, "records": 3, "first_offset": 0, "last_offset": 2}],
        "errors": [],
    }
    assert result.stderr.decode() == (
        "weirmq: produced 3 records (3 B) to spread (partition 1: offsets 0-2)\n"
    )
    out = weirmq(broker, "consume", "spread", "--partition", "1", "--from-beginning", "--exit")
    assert out.returncode == 0
    assert out.stdout == b"a\n\xff\nc\n"  # bytes in, the same bytes out


def test_failed_deliveries_exit_1_with_a_summary(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(message_max_bytes=1024)
    # The broker refuses a batch larger than message_max_bytes (librdkafka's own limit is
    # 1 MB, so the record does leave the client).
    result = weirmq(broker, "produce", "limited", "--json", stdin=b"x" * 4096 + b"\n")
    assert result.returncode == 1
    summary = json.loads(result.stdout)
    assert (summary["records"], summary["delivered"], summary["failed"]) == (1, 0, 1)
    assert [(e["error"], e["records"]) for e in summary["errors"]] == [("MSG_SIZE_TOO_LARGE", 1)]
    stderr = result.stderr.decode().splitlines()
    assert stderr[0] == "weirmq: records not delivered to limited: 1 of 1"
    assert stderr[1].startswith("weirmq:   1 record: ")
    assert stderr[1].endswith("(MSG_SIZE_TOO_LARGE)")
    assert len(stderr) == 2


def test_produce_checks_the_topic_and_partition_first(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(auto_create_topics="false")
    assert failed(weirmq(broker, "produce", "absent", stdin=b"x\n"), 1) == (
        "weirmq: topic 'absent' does not exist"
    )
    ok(weirmq(broker, "topics", "create", "small"))
    assert failed(weirmq(broker, "produce", "small", "--partition", "7", stdin=b"x\n"), 1) == (
        "weirmq: topic 'small' has no partition 7 (it has 1: 0-0)"
    )
    assert (
        ok_json(weirmq(broker, "topics", "describe", "small", "--json"))["partitions"][0][
            "latest_offset"
        ]
        == 0
    )


def test_consume_offsets_partitions_and_max_messages(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "numbers", "--partitions", "2"))
    stdin = b"".join(b"%d\n" % n for n in range(10))
    ok(weirmq(broker, "produce", "numbers", "--partition", "0", stdin=stdin))
    ok(weirmq(broker, "produce", "numbers", "--partition", "1", stdin=b"p1\n"))

    def consume(*args: str) -> list[str]:
        return ok(weirmq(broker, "consume", "numbers", *args)).splitlines()

    assert consume("--partition", "0", "--offset", "7", "--exit") == ["7", "8", "9"]
    assert consume("--partition", "0", "--offset", "-2", "--exit") == ["8", "9"]
    assert consume("--partition", "1", "--offset", "beginning", "--exit") == ["p1"]
    assert sorted(consume("--from-beginning", "--exit")) == sorted(
        [str(n) for n in range(10)] + ["p1"]
    )
    assert len(consume("--from-beginning", "--max-messages", "4")) == 4
    assert consume("--exit") == []  # from the end: nothing new
    assert failed(weirmq(broker, "consume", "numbers", "--partition", "5"), 1) == (
        "weirmq: topic 'numbers' has no partition 5 (it has 2: 0-1)"
    )


def test_consume_from_the_end_sees_only_new_records(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "produce", "live", stdin=b"old\n"))
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    follower = subprocess.Popen(
        [sys.executable, "-m", "weirmq", "consume", "live", "--max-messages", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**clean_env, "WEIRMQ_BOOTSTRAP": broker.bootstrap},  # the variable, not the flag
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    deadline = time.monotonic() + 20
    try:
        # The follower starts at the end once assigned; keep producing until it has one.
        while follower.poll() is None and time.monotonic() < deadline:
            producer.produce("live", value=b"new")
            producer.flush(5)
            time.sleep(0.2)
        out, err = follower.communicate(timeout=10)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert out == b"new\n"


# -- a broker that is not there ------------------------------------------------------------------


COMMANDS: Sequence[tuple[str, ...]] = (
    ("topics", "list"),
    ("topics", "list", "--json"),
    ("topics", "create", "t"),
    ("topics", "describe", "t"),
    ("topics", "alter", "t", "--config", "retention.ms=1"),
    ("topics", "delete", "t"),
    ("produce", "t"),
    ("consume", "t", "--from-beginning"),
)


def test_broker_down_is_one_line_and_exit_3(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    for command in COMMANDS:
        started = time.monotonic()
        result = weirmq(None, *command, "--bootstrap", address, stdin=b"x\n")
        took_s = time.monotonic() - started
        assert failed(result, 3) == (
            f"weirmq: cannot reach a broker at {address} (connection refused)"
        ), command
        assert took_s < 10, (command, took_s)


def test_a_broker_that_went_away_is_exit_3(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "produce", "t", stdin=b"x\n"))
    broker.kill()
    assert failed(weirmq(broker, "topics", "list"), 3) == (
        f"weirmq: cannot reach a broker at {broker.bootstrap} (connection refused)"
    )
