"""``weirmq quotas`` end to end: the command runs as a user would run it (``python -m
weirmq ...`` in a subprocess) against a real broker process, and what it sets is proven by
a real confluent-kafka producer that the broker then throttles (its ``throttle_cb``
fires), as in test_client_quotas_throttle.py, where the quota is set without the CLI.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer, ThrottleEvent
from test_cli import failed, ok, ok_json, weirmq

if TYPE_CHECKING:
    from conftest import BrokerProcess

QUOTA_BYTES_PER_S = 100_000
SENT_BYTES = 300_000
RECORD_BYTES = 1_000
FLUSH_TIMEOUT_S = 60


def produce(broker: BrokerProcess, client_id: str, sent_bytes: int) -> tuple[float, list[int]]:
    """Send ``sent_bytes`` as client ``client_id``: how long it took (s), and the throttle
    times (ms) the broker told the producer about."""
    throttles: list[int] = []
    lock = threading.Lock()

    def on_throttle(event: ThrottleEvent) -> None:
        with lock:
            throttles.append(int(event.throttle_time * 1000))

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": client_id,
            "throttle_cb": on_throttle,
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    started = time.monotonic()
    for _ in range(sent_bytes // RECORD_BYTES):
        producer.produce("metered", b"x" * RECORD_BYTES)
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    producer.poll(0)  # serve the callbacks of the last responses
    return time.monotonic() - started, throttles


def test_a_quota_set_with_the_cli_throttles_a_real_producer(broker: BrokerProcess) -> None:
    assert ok_json(weirmq(broker, "quotas", "describe", "--json")) == {"quotas": []}
    altered = ok(
        weirmq(
            broker,
            *("quotas", "alter", "--client-id", "metered-app"),
            *("--add", f"producer_byte_rate={QUOTA_BYTES_PER_S}"),
        )
    )
    assert altered == (
        f"Altered the quotas of client-id metered-app: producer_byte_rate={QUOTA_BYTES_PER_S}.\n"
    )

    described = ok_json(
        weirmq(broker, "quotas", "describe", "--client-id", "metered-app", "--json")
    )
    assert described == {
        "quotas": [
            {
                "entity": {"client-id": "metered-app"},
                "values": {"producer_byte_rate": QUOTA_BYTES_PER_S},
            }
        ]
    }
    header, *rows = ok(weirmq(broker, "quotas", "describe")).splitlines()
    assert header.split() == ["USER", "CLIENT-ID", "QUOTA", "VALUE"]
    assert [row.split() for row in rows] == [
        ["-", "metered-app", "producer_byte_rate", str(QUOTA_BYTES_PER_S)]
    ]

    metered_s, throttles = produce(broker, "metered-app", SENT_BYTES)
    assert throttles, "the producer was never told to slow down"
    # Enforcement, not speed: 300 KB at 100 KB/s cannot get through in much less than 3 s
    # (half of it allows for the measuring window's start).
    assert metered_s > SENT_BYTES / QUOTA_BYTES_PER_S / 2

    deleted = ok(
        weirmq(
            broker,
            *("quotas", "alter", "--client-id", "metered-app", "--delete", "producer_byte_rate"),
        )
    )
    assert deleted == "Altered the quotas of client-id metered-app: producer_byte_rate removed.\n"
    assert ok_json(weirmq(broker, "quotas", "describe", "--json")) == {"quotas": []}
    _, throttles = produce(broker, "metered-app", SENT_BYTES)
    assert not throttles


def test_defaults_users_and_strict_matching(broker: BrokerProcess) -> None:
    for args in (
        ("--client-id-default", "--add", "consumer_byte_rate=2000000"),
        ("--user", "alice", "--client-id", "app", "--add", "request_percentage=150.5"),
        ("--user-default", "--add", "producer_byte_rate=1e6", "--add", "consumer_byte_rate=5e5"),
    ):
        ok(weirmq(broker, "quotas", "alter", *args))

    def entities(*args: str) -> list[dict[str, str | None]]:
        found = ok_json(weirmq(broker, "quotas", "describe", *args, "--json"))["quotas"]
        return [quota["entity"] for quota in found]

    everything = ok_json(weirmq(broker, "quotas", "describe", "--json"))["quotas"]
    assert everything == [
        {"entity": {"client-id": None}, "values": {"consumer_byte_rate": 2000000}},
        {
            "entity": {"user": None},
            "values": {"consumer_byte_rate": 500000, "producer_byte_rate": 1000000},
        },
        {"entity": {"user": "alice", "client-id": "app"}, "values": {"request_percentage": 150.5}},
    ]
    # As kafka-configs.sh --describe: only entities with exactly the types named.
    assert entities("--client-id", "app") == []
    assert entities("--client-id-default") == [{"client-id": None}]
    assert entities("--user-default") == [{"user": None}]
    assert entities("--user", "alice", "--client-id-any") == [{"user": "alice", "client-id": "app"}]
    assert entities("--user-any") == [{"user": None}]

    ok(weirmq(broker, "quotas", "alter", "--user-default", "--delete", "producer_byte_rate"))
    assert entities("--user-default") == [{"user": None}]
    ok(weirmq(broker, "quotas", "alter", "--user-default", "--delete", "consumer_byte_rate"))
    assert entities("--user-default") == []  # an entity without quotas is gone


def test_validate_only_changes_nothing(broker: BrokerProcess) -> None:
    validated = ok_json(
        weirmq(
            broker,
            *("quotas", "alter", "--client-id", "app", "--add", "producer_byte_rate=1024"),
            *("--validate-only", "--json"),
        )
    )
    assert validated == {
        "entity": {"client-id": "app"},
        "set": {"producer_byte_rate": 1024},
        "deleted": [],
        "validate_only": True,
    }
    assert ok_json(weirmq(broker, "quotas", "describe", "--json")) == {"quotas": []}


def test_what_the_broker_refuses_is_exit_1_with_its_message(broker: BrokerProcess) -> None:
    unknown = failed(
        weirmq(broker, "quotas", "alter", "--client-id", "app", "--add", "bogus_rate=1"), 1
    )
    assert unknown.startswith("weirmq: cannot alter the quotas of client-id app: ")
    assert "'bogus_rate'" in unknown
    assert unknown.endswith("(INVALID_REQUEST)")
    zero = failed(
        weirmq(broker, "quotas", "alter", "--client-id", "app", "--add", "producer_byte_rate=0"), 1
    )
    assert "producer_byte_rate" in zero
    assert zero.endswith("(INVALID_REQUEST)")
    assert ok_json(weirmq(broker, "quotas", "describe", "--json")) == {"quotas": []}


def test_usage_errors_exit_2(broker: BrokerProcess) -> None:
    result = weirmq(
        broker, "quotas", "alter", "--client-id", "app", "--add", "producer_byte_rate=x"
    )
    assert result.returncode == 2
    assert b"the value is not a number" in result.stderr
    result = weirmq(broker, "quotas", "alter", "--add", "producer_byte_rate=1")
    assert result.returncode == 2
    assert b"which quotas?" in result.stderr


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that refuses connections: bound, so nobody else takes it, but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_no_broker_is_exit_3(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    for command in (("describe",), ("alter", "--client-id", "app", "--delete", "x")):
        line = failed(weirmq(None, "quotas", *command, "--bootstrap", address), 3)
        assert line == f"weirmq: cannot reach a broker at {address} (connection refused)"
    # WEIRMQ_BOOTSTRAP, as every client command reads it.
    line = failed(weirmq(None, "quotas", "describe", env={"WEIRMQ_BOOTSTRAP": address}), 3)
    assert address in line
