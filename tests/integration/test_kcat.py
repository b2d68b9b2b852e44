"""kcat (Debian's, librdkafka inside) produces, consumes and lists topics against WeirMQ."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import BrokerFactory

# Not a skip: `make test` installs kcat (make system-deps), so a missing kcat is a failure.
KCAT = shutil.which("kcat") or "kcat"
KCAT_TIMEOUT_S = 60
LINE_COUNT = 1_000


def run_kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(
        [KCAT, *args], input=stdin, capture_output=True, timeout=KCAT_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, (
        f"kcat {' '.join(args)} exited with {result.returncode}; stderr:\n"
        f"{result.stderr.decode(errors='replace')}"
    )
    return result


def test_lines_round_trip_in_order(broker_factory: BrokerFactory) -> None:
    # One partition, so the order of all lines is defined.
    broker = broker_factory(default_partitions=1)
    topic = "kcat-lines"
    lines = [f"line {i:04d}: kcat to weirmq and back".encode() for i in range(LINE_COUNT)]

    run_kcat("-P", "-b", broker.bootstrap, "-t", topic, stdin=b"\n".join(lines) + b"\n")
    consumed = run_kcat(
        "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"
    ).stdout.splitlines()

    assert len(consumed) == len(lines)
    assert consumed == lines


def test_metadata_lists_the_topic(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(default_partitions=1)
    topic = "kcat-listed"
    run_kcat("-P", "-b", broker.bootstrap, "-t", topic, stdin=b"one\ntwo\n")

    metadata = json.loads(run_kcat("-L", "-J", "-b", broker.bootstrap).stdout)

    assert [b["name"] for b in metadata["brokers"]] == [broker.bootstrap], metadata
    topics = {t["topic"]: t for t in metadata["topics"]}
    assert topic in topics, metadata
    listed = topics[topic]
    assert "error" not in listed, listed
    assert [p["partition"] for p in listed["partitions"]] == [0], listed
    broker_ids = {b["id"] for b in metadata["brokers"]}
    for partition in listed["partitions"]:
        assert "error" not in partition, partition
        assert partition["leader"] in broker_ids, partition
