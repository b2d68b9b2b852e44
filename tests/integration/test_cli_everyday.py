"""The everyday operations end to end: ``groups reset-offsets``, ``topics trim``,
``consume --from-timestamp`` and its end notes, ``produce``'s compression, acks, timestamp,
headers and ``--file``, and ``status``. Each command runs as a user would run it
(``python -m weirmq ...`` in a subprocess) against a real broker process, and what it did
is checked with other people's code: a confluent-kafka consumer resumes where a reset put
its group, sees the low watermark a trim left and the headers and timestamps a produce
sent; kcat reads a trimmed partition from its new start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from test_cli import failed, ok, ok_json, weirmq
from test_cli_groups import commit, member

import weirmq as weirmq_package

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 20.0
BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z: record i of a partition is BASE_MS + i s
KCAT = shutil.which("kcat")


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    # No initial rebalance delay: a lone member is assigned at once, not after 3 s.
    return broker_factory(group_initial_rebalance_delay_ms=0)


def produce_timed(broker: BrokerProcess, topic: str, partitions: int, records: int) -> None:
    """``records`` records in each partition, record i stamped BASE_MS + i seconds."""
    ok(weirmq(broker, "topics", "create", topic, "--partitions", str(partitions)))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for partition in range(partitions):
        for i in range(records):
            value = f"p{partition}-{i}".encode()
            producer.produce(topic, value, partition=partition, timestamp=BASE_MS + i * 1000)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


@pytest.fixture
def consumers(broker: BrokerProcess) -> Iterator[list[Consumer]]:
    """Consumers made by `consumer`, closed at teardown."""
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.close()


def consumer(broker: BrokerProcess, made: list[Consumer], group: str = "probe") -> Consumer:
    created = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    made.append(created)
    return created


def first_offsets(client: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """The offset of the first record the subscribed ``client`` gets from each partition."""
    client.subscribe([topic])
    found: dict[int, int] = {}
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(found) < partitions:
        assert time.monotonic() < deadline, f"first offsets so far: {found}"
        message = client.poll(0.2)
        if message is not None and message.error() is None:
            found.setdefault(message.partition() or 0, message.offset() or 0)
    return found


def records(client: Consumer, count: int) -> list[Any]:
    """``count`` records read by the assigned ``client``."""
    got: list[Any] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        message = client.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
    return got


# -- groups reset-offsets ------------------------------------------------------------------------


def test_reset_offsets_plans_then_executes_and_a_consumer_resumes_there(
    broker: BrokerProcess, consumers: list[Consumer]
) -> None:
    produce_timed(broker, "orders", partitions=2, records=10)
    with member(broker, "billing", "orders", 20) as app:
        commit(app, "orders", {0: 8, 1: 9})

    plan = ok_json(
        weirmq(broker, "groups", "reset-offsets", "billing", "--all-topics", "--to-offset", "3",
               "--json")
    )  # fmt: skip
    assert plan == {
        "group": "billing",
        "reset": {"to": "offset", "value": 3},
        "executed": False,
        "partitions": [
            {"topic": "orders", "partition": 0, "current_offset": 8, "new_offset": 3},
            {"topic": "orders", "partition": 1, "current_offset": 9, "new_offset": 3},
        ],
    }
    # The dry run changed nothing.
    described = ok_json(weirmq(broker, "groups", "describe", "billing", "--json"))
    assert [p["current_offset"] for p in described["partitions"]] == [8, 9]

    result = weirmq(
        broker, "groups", "reset-offsets", "billing", "--topic", "orders:1", "--to-offset", "3",
        "--execute",
    )  # fmt: skip
    header, row = ok(result).splitlines()
    assert header.split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert row.split() == ["orders", "1", "9", "3"]
    assert "reset group billing on 1 partition to offset 3" in result.stderr.decode()

    # An independent client in the group resumes at the reset offset.
    assert first_offsets(consumer(broker, consumers, "billing"), "orders", 2) == {0: 8, 1: 3}


def test_reset_offsets_by_time_shift_earliest_and_latest(broker: BrokerProcess) -> None:
    produce_timed(broker, "events", partitions=1, records=10)
    with member(broker, "audit", "events", 10) as app:
        commit(app, "events", {0: 5})

    def reset(*target: str) -> dict[str, Any]:
        document: dict[str, Any] = ok_json(
            weirmq(broker, "groups", "reset-offsets", "audit", "--topic", "events", *target,
                   "--execute", "--json")
        )  # fmt: skip
        assert document["executed"] is True
        return document

    def new_offset(*target: str) -> int:
        offset: int = reset(*target)["partitions"][0]["new_offset"]
        return offset

    # Record 7 is stamped BASE_MS + 7 s; ISO 8601 or milliseconds.
    assert new_offset("--to-timestamp", "2024-01-01T00:00:06.500Z") == 7
    assert new_offset("--to-timestamp", str(BASE_MS + 2000)) == 2
    assert new_offset("--shift-by", "-1") == 1
    assert new_offset("--shift-by", "100") == 10  # clamped to the end
    assert new_offset("--to-earliest") == 0
    assert new_offset("--to-latest") == 10
    assert new_offset("--to-timestamp", "2030-01-01") == 10  # later than every record: the end
    described = ok_json(weirmq(broker, "groups", "describe", "audit", "--json"))
    assert described["partitions"][0]["current_offset"] == 10


def test_reset_offsets_gives_a_new_group_its_start(
    broker: BrokerProcess, consumers: list[Consumer]
) -> None:
    produce_timed(broker, "jobs", partitions=1, records=6)
    ok(weirmq(broker, "groups", "reset-offsets", "fresh", "--topic", "jobs", "--to-offset", "4",
              "--execute"))  # fmt: skip
    assert first_offsets(consumer(broker, consumers, "fresh"), "jobs", 1) == {0: 4}


def test_reset_offsets_refuses_a_group_with_members(broker: BrokerProcess) -> None:
    produce_timed(broker, "orders", partitions=1, records=3)
    with member(broker, "billing", "orders", 3) as app:
        commit(app, "orders", {0: 2})
        for mode in ("--dry-run", "--execute"):
            result = weirmq(broker, "groups", "reset-offsets", "billing", "--topic", "orders",
                            "--to-earliest", mode)  # fmt: skip
            assert failed(result, 1) == (
                "weirmq: group 'billing' has 1 active member (Stable): offsets can only be "
                "reset while it has no members; stop its consumers first"
            )
    described = ok_json(weirmq(broker, "groups", "describe", "billing", "--json"))
    assert described["partitions"][0]["current_offset"] == 2


def test_reset_offsets_errors(broker: BrokerProcess) -> None:
    produce_timed(broker, "orders", partitions=2, records=1)
    assert failed(
        weirmq(broker, "groups", "reset-offsets", "g", "--topic", "ordrs", "--to-latest"), 1
    ) == ("weirmq: topic 'ordrs' does not exist")
    assert failed(
        weirmq(broker, "groups", "reset-offsets", "g", "--topic", "orders:5", "--to-latest"), 1
    ) == ("weirmq: topic 'orders' has no partition 5 (it has 2: 0-1)")
    assert failed(
        weirmq(broker, "groups", "reset-offsets", "nobody", "--all-topics", "--to-latest"), 1
    ) == ("weirmq: group 'nobody' has no committed offsets: name the topics with --topic")
    assert failed(
        weirmq(broker, "groups", "reset-offsets", "nobody", "--topic", "orders", "--shift-by", "1"),
        1,
    ) == ("weirmq: cannot shift partition orders-0: it has no committed offset to shift")


# -- topics trim ---------------------------------------------------------------------------------


def test_trim_before_an_offset_and_a_time(broker: BrokerProcess, consumers: list[Consumer]) -> None:
    produce_timed(broker, "logs", partitions=2, records=10)
    trimmed = ok_json(
        weirmq(broker, "topics", "trim", "logs", "--before", "4", "--partition", "0", "--json")
    )
    assert trimmed == {
        "name": "logs",
        "partitions": [{"partition": 0, "previous_low_watermark": 0, "low_watermark": 4}],
    }
    # Records older than record 7 (stamped BASE_MS + 7 s) go, in every partition.
    result = weirmq(broker, "topics", "trim", "logs", "--before-timestamp", str(BASE_MS + 6500))
    header, *rows = ok(result).splitlines()
    assert header.split() == ["PARTITION", "OLD-LOW-WATERMARK", "NEW-LOW-WATERMARK"]
    assert [row.split() for row in rows] == [["0", "4", "7"], ["1", "0", "7"]]
    assert "trimmed topic logs: 10 offsets deleted" in result.stderr.decode()

    # An independent client sees the new start.
    probe = consumer(broker, consumers)
    for partition in (0, 1):
        low, high = probe.get_watermark_offsets(
            TopicPartition("logs", partition), timeout=CLIENT_TIMEOUT_S
        )
        assert (low, high) == (7, 10)
    probe.assign([TopicPartition("logs", 0, -2)])  # OFFSET_BEGINNING
    assert [m.offset() for m in records(probe, 3)] == [7, 8, 9]
    described = ok_json(weirmq(broker, "topics", "describe", "logs", "--json"))
    assert [p["earliest_offset"] for p in described["partitions"]] == [7, 7]

    ok(weirmq(broker, "topics", "trim", "logs", "--before", "end", "-p", "1"))
    if KCAT is not None:
        seen = subprocess.run(
            [KCAT, "-b", broker.bootstrap, "-C", "-t", "logs", "-p", "0", "-o", "beginning",
             "-e", "-q", "-f", "%o\n"],
            capture_output=True, timeout=CLIENT_TIMEOUT_S, check=True,
        )  # fmt: skip
        assert seen.stdout.split() == [b"7", b"8", b"9"]


def test_trim_errors(broker: BrokerProcess) -> None:
    produce_timed(broker, "logs", partitions=1, records=3)
    assert failed(weirmq(broker, "topics", "trim", "lgs", "--before", "1"), 1) == (
        "weirmq: topic 'lgs' does not exist"
    )
    assert failed(weirmq(broker, "topics", "trim", "logs", "--before", "1", "-p", "3"), 1) == (
        "weirmq: topic 'logs' has no partition 3 (it has 1: 0-0)"
    )
    message = failed(weirmq(broker, "topics", "trim", "logs", "--before", "9"), 1)
    assert message.startswith("weirmq: cannot trim partition 0 of topic 'logs' before offset 9")
    assert "--before end trims everything" in message


# -- consume -------------------------------------------------------------------------------------


def test_consume_from_a_time_says_when_it_reaches_the_end(broker: BrokerProcess) -> None:
    produce_timed(broker, "events", partitions=2, records=5)
    result = weirmq(broker, "consume", "events", "--from-timestamp", "2024-01-01T00:00:03Z",
                    "--exit", "--format", "%p:%o %s\n")  # fmt: skip
    assert sorted(ok(result).splitlines()) == ["0:3 p0-3", "0:4 p0-4", "1:3 p1-3", "1:4 p1-4"]
    notes = result.stderr.decode().splitlines()
    assert sorted(notes[:2]) == [
        "weirmq: reached the end of events [0] at offset 5",
        "weirmq: reached the end of events [1] at offset 5",
    ]
    assert notes[2:] == ["weirmq: consumed 4 records from events"]

    # Later than every record: each partition starts at its end.
    later = weirmq(broker, "consume", "events", "--from-timestamp", "2030-01-01", "--exit")
    assert ok(later) == ""

    quiet = weirmq(broker, "consume", "events", "--from-beginning", "--exit", "--quiet")
    assert len(ok(quiet).splitlines()) == 10
    assert quiet.stderr == b""
    as_json = weirmq(broker, "consume", "events", "--from-beginning", "--exit", "--json")
    assert len(ok(as_json).splitlines()) == 10
    assert b"reached the end" not in as_json.stderr


def test_consume_waiting_at_the_end_says_so(broker: BrokerProcess) -> None:
    produce_timed(broker, "events", partitions=1, records=2)
    # Without --exit it waits at the end (and says so); --max-messages 3 ends it once a
    # third record comes.
    command = ["consume", "events", "--from-beginning", "-c", "3", "--bootstrap", broker.bootstrap]
    follower = subprocess.Popen(
        [sys.executable, "-m", "weirmq", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")},
    )
    # readline() below blocks: a follower that never says anything is killed, not waited on.
    watchdog = threading.Timer(CLIENT_TIMEOUT_S, follower.kill)
    watchdog.start()
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        assert follower.stderr is not None
        line = follower.stderr.readline()
        while b"reached the end" not in line:
            assert time.monotonic() < deadline and line, "no 'reached the end' note"
            line = follower.stderr.readline()
        assert (
            line == b"weirmq: reached the end of events [0] at offset 2; waiting for new records\n"
        )
        ok(weirmq(broker, "produce", "events", stdin=b"third\n"))
        out, _ = follower.communicate(timeout=CLIENT_TIMEOUT_S)
    finally:
        watchdog.cancel()
        follower.kill()
    assert out == b"p0-0\np0-1\nthird\n"


# -- produce -------------------------------------------------------------------------------------


def test_produce_a_file_with_headers_timestamp_acks_and_partition(
    broker: BrokerProcess, consumers: list[Consumer], tmp_path: Path
) -> None:
    ok(weirmq(broker, "topics", "create", "orders", "--partitions", "2"))
    lines = tmp_path / "orders.txt"
    lines.write_bytes(b"o-1:12.00\no-2:7.50\n")
    result = weirmq(
        broker, "produce", "orders", "--file", str(lines), "--key-separator", ":",
        "--header", "src=shop", "--header", "trace=a=b", "--timestamp", "2024-01-01T00:00:00Z",
        "--acks", "1", "--partition", "1", "--json",
    )  # fmt: skip
    summary = ok_json(result)
    assert summary == {
        "topic": "orders",
        "records": 2,
        "bytes": 15,
        "delivered": 2,
        "failed": 0,
        "acks": "1",
        "compression": "none",
        "partitions": [{"partition": 1, "records": 2, "first_offset": 0, "last_offset": 1}],
        "errors": [],
    }
    assert result.stderr.decode() == (
        "weirmq: produced 2 records (15 B) to orders (partition 1: offsets 0-1)\n"
    )
    probe = consumer(broker, consumers)
    probe.assign([TopicPartition("orders", 1, 0)])
    got = records(probe, 2)
    assert [(m.key(), m.value()) for m in got] == [(b"o-1", b"12.00"), (b"o-2", b"7.50")]
    assert [m.headers() for m in got] == [[("src", b"shop"), ("trace", b"a=b")]] * 2
    assert [m.timestamp() for m in got] == [(1, BASE_MS)] * 2  # 1: TIMESTAMP_CREATE_TIME


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_produce_compressed_batches_are_stored_compressed(
    broker: BrokerProcess, consumers: list[Consumer], tmp_path: Path, codec: str
) -> None:
    lines = tmp_path / "big.txt"
    value = b"the same line, again and again, " * 30  # ~1 kB and very compressible
    lines.write_bytes((value + b"\n") * 2000)
    topics = {"plain": "none", "packed": codec}
    for topic, compression in topics.items():
        ok(weirmq(broker, "topics", "create", topic, "--partitions", "1"))
        summary = ok_json(
            weirmq(broker, "produce", topic, "--file", str(lines), "--compression", compression,
                   "--acks", "1", "--json")
        )  # fmt: skip
        assert summary["compression"] == compression
        assert summary["delivered"] == 2000
    # A confluent-kafka consumer reads the compressed records back as they were.
    probe = consumer(broker, consumers)
    probe.assign([TopicPartition("packed", 0, 0)])
    assert {m.value() for m in records(probe, 2000)} == {value}
    # ... and the broker keeps them compressed: its log is a fraction of the plain one.
    size = {topic: _log_bytes(broker, topic) for topic in topics}
    assert size["packed"] * 5 < size["plain"], size


def _log_bytes(broker: BrokerProcess, topic: str) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-0").glob("*.log"))


def test_produce_to_an_unknown_partition_reads_nothing(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "orders", "--partitions", "1"))
    assert failed(weirmq(broker, "produce", "orders", "-p", "4", "--compression", "zstd"), 1) == (
        "weirmq: topic 'orders' has no partition 4 (it has 1: 0-0)"
    )


# -- status --------------------------------------------------------------------------------------


def test_status_with_and_without_the_admin_api(
    broker_factory: BrokerFactory, closed_port: int
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    produce_timed(broker, "orders", partitions=3, records=1)
    assert broker.admin_url is not None
    document = ok_json(weirmq(broker, "status", "--admin-url", broker.admin_url, "--json"))
    cluster_id = document["cluster_id"]
    assert cluster_id
    assert document["controller_id"] == 0
    assert document["brokers"] == [
        {"node_id": 0, "host": "127.0.0.1", "port": broker.port, "controller": True}
    ]
    assert document["topics"] >= 1
    assert document["partitions"] >= 3
    admin = document["admin"]
    assert admin["reachable"] is True
    assert admin["same_cluster"] is True
    assert (admin["status"], admin["cluster_id"]) == ("ok", cluster_id)
    assert admin["version"] == weirmq_package.__version__
    assert admin["uptime_ms"] >= 0

    text = ok(weirmq(broker, "status", env={"WEIRMQ_ADMIN": broker.admin_url}))
    assert text.splitlines()[0] == f"Cluster {cluster_id}: 1 broker, controller 0"
    assert f"Broker 0 (admin API {broker.admin_url}): ok, version" in text

    # No admin API there: noted, and still exit 0.
    nowhere = f"http://127.0.0.1:{closed_port}"
    result = weirmq(broker, "status", "--admin-url", nowhere)
    assert f"Admin API {nowhere}: unreachable" in ok(result)
    assert "did not answer; set --admin-url or --no-admin" in result.stderr.decode()
    quiet = ok_json(weirmq(broker, "status", "--no-admin", "--json"))
    assert quiet["admin"] is None


@pytest.fixture
def closed_port() -> Iterator[int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


EVERYDAY_COMMANDS = (
    ("status",),
    ("status", "--json"),
    ("groups", "reset-offsets", "g", "--all-topics", "--to-earliest"),
    ("topics", "trim", "t", "--before", "1"),
    ("consume", "t", "--from-timestamp", "2024-01-01"),
    ("produce", "t", "--compression", "zstd", "--acks", "1"),
)


def test_an_unreachable_broker_is_one_line_and_exit_3(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    for command in EVERYDAY_COMMANDS:
        result = weirmq(None, *command, "--bootstrap", address, stdin=b"x\n")
        assert failed(result, 3) == (
            f"weirmq: cannot reach a broker at {address} (connection refused)"
        ), command


def test_json_documents_are_json(broker: BrokerProcess) -> None:
    """Every new command's --json output parses, whatever else it printed on stderr."""
    produce_timed(broker, "orders", partitions=1, records=2)
    for command in (
        ("status", "--no-admin", "--json"),
        ("topics", "trim", "orders", "--before", "1", "--json"),
        ("groups", "reset-offsets", "g", "--topic", "orders", "--to-latest", "--json"),
    ):
        json.loads(ok(weirmq(broker, *command)))
