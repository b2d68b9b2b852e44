"""Two ``weirmq serve`` processes on one data directory: the second refuses to start.

Both writing the same logs once lost an acknowledged record, so the second broker must stop
at once with one line that names the directory and the first broker's pid, while the first
carries on serving. The lock is the kernel's: a broker killed with SIGKILL leaves its
``.lock`` file behind, and the next broker on the directory must start anyway and serve
what the dead one acknowledged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, Message, Producer
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    create_topic,
    producer_config,
)

if TYPE_CHECKING:
    from conftest import BrokerProcess

TOPIC = "locked-dir"
# A refused broker only imports, parses settings and fails to lock: well under this.
REFUSAL_MAX_S = 15.0
STEP_TIMEOUT_S = 30.0


def serve_once(data_dir: Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a second ``weirmq serve`` on ``data_dir`` to its end; returns it and its run time.

    A broker that starts would serve until the timeout, and ``subprocess.run`` kills it
    then: the test fails on the timeout instead of hanging."""
    command = [
        sys.executable,
        "-m",
        "weirmq",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
        "--admin-listen",
        "off",
        "--amqp-listen",
        "127.0.0.1:0",
        "--sqs-listen",
        "127.0.0.1:0",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    started = time.monotonic()
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=REFUSAL_MAX_S,
        check=False,
    )
    return done, time.monotonic() - started


def produce_one(bootstrap: str, value: bytes) -> tuple[int, int]:
    """One record, acks=all; returns where the broker said it stored it."""
    errors, deliveries = ErrorLog(), DeliveryLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all"))
    producer.produce(TOPIC, value=value, partition=0, on_delivery=deliveries.callback(0))
    assert producer.flush(STEP_TIMEOUT_S) == 0, "the record was not acknowledged"
    assert deliveries.errors == [], deliveries.errors
    assert errors.snapshot() == [], errors.snapshot()
    return deliveries.where[0]


def read_all(bootstrap: str, count: int) -> list[tuple[int, bytes | None]]:
    """The first ``count`` records of partition 0, as (offset, value)."""
    errors = ErrorLog()
    consumer = Consumer(consumer_config(bootstrap, errors))
    read: list[tuple[int, bytes | None]] = []

    def keep(message: Message) -> None:
        read.append((message.offset(), message.value()))

    try:
        deadline = Deadline(STEP_TIMEOUT_S, f"reading {count} records of {TOPIC}")
        consume_from_beginning(consumer, TOPIC, {0: count}, deadline, keep)
    finally:
        consumer.close()
    assert errors.snapshot() == [], errors.snapshot()
    return read


def test_a_second_broker_on_the_same_data_dir_is_refused(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, TOPIC, 1)
    first = produce_one(broker.bootstrap, b"before the second broker")

    done, elapsed_s = serve_once(broker.data_dir, tmp_path)

    assert done.returncode != 0, f"the second broker started; stderr:\n{done.stderr}"
    assert elapsed_s < REFUSAL_MAX_S
    assert "Traceback" not in done.stderr, done.stderr
    assert "accepting Kafka connections" not in done.stdout, done.stdout
    expected = (
        f"weirmq serve: cannot start: data directory {broker.data_dir.resolve()} is in use "
        f"by another WeirMQ broker (pid {broker.pid}); stop it or choose another data_dir"
    )
    assert expected in done.stderr.splitlines(), done.stderr

    assert broker.running, "the refused broker must not disturb the first one"
    second = produce_one(broker.bootstrap, b"after the second broker")
    assert second == (0, first[1] + 1)
    assert read_all(broker.bootstrap, 2) == [
        (first[1], b"before the second broker"),
        (second[1], b"after the second broker"),
    ]


def test_a_broker_killed_with_sigkill_does_not_block_the_next(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, TOPIC, 1)
    acknowledged = produce_one(broker.bootstrap, b"acknowledged before the kill")
    dead_pid = broker.pid

    broker.kill()
    lock_file = broker.data_dir / ".lock"
    assert lock_file.read_text() == f"{dead_pid}\n", "the dead broker's lock file stays"
    broker.start()  # fails the test if the broker does not come up

    assert broker.pid != dead_pid
    assert lock_file.read_text() == f"{broker.pid}\n"
    assert read_all(broker.bootstrap, 1) == [(acknowledged[1], b"acknowledged before the kill")]
