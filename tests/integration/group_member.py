"""One confluent-kafka consumer-group member, in a test's thread or in a process of its own.

The member subscribes to one topic, reads in batches and, after processing each batch,
commits synchronously the offset after the last record of each partition (at-least-once:
nothing is committed before it has been processed). It reports what happens to a reporter
with the methods of ``GroupTracker``: the rebalance callbacks, the records it read, the
commits the broker acknowledged, the commits refused because of a rebalance, and errors.

In a thread (``confluent_member``), the reporter is the test's tracker itself. As a script,
the reporter prints one JSON line per event on stdout, stamped with ``time.monotonic_ns()``
(one clock for every process of the machine), so a test can SIGKILL the member and still
order the events of all its members::

    python group_member.py --bootstrap 127.0.0.1:9092 --group g --topic t --name m1 \\
        --set session.timeout.ms=6000 --set heartbeat.interval.ms=500

SIGTERM makes the script close the consumer (which leaves the group) and exit with 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from integration_support import member_config, seq_of

BATCH_RECORDS = 200
POLL_TIMEOUT_S = 0.2

# A commit the group refused because membership moved on (a rebalance started, the member
# was fenced or left). The records stay uncommitted: the next holder reads them again.
REBALANCE_COMMIT_ERRORS = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class Reporter(Protocol):
    def assigned(self, member: str, partitions: Iterable[int]) -> None: ...
    def revoked(self, member: str, partitions: Iterable[int]) -> None: ...
    def lost(self, member: str, partitions: Iterable[int]) -> None: ...
    def released(self, member: str, why: str) -> None: ...
    def consumed(self, member: str, records: Iterable[Sequence[int]]) -> None: ...
    def committing(self, member: str, offsets: Iterable[Sequence[int]]) -> None: ...
    def committed(self, member: str, offsets: Iterable[Sequence[int]]) -> None: ...
    def commit_failed(self, member: str, text: str) -> None: ...
    def error(self, member: str, text: str) -> None: ...


def confluent_member(
    name: str, topic: str, config: dict[str, object], report: Reporter
) -> Callable[[threading.Event], None]:
    """The body of a ``MemberThread``: consume ``topic`` in the group until ``stop`` is set."""

    def body(stop: threading.Event) -> None:
        run_member(name, topic, config, report, stop)

    return body


def run_member(
    name: str, topic: str, config: dict[str, object], report: Reporter, stop: threading.Event
) -> None:
    def on_error(error: KafkaError) -> None:
        report.error(name, f"error_cb: {error.name()}: {error.str()}")

    consumer = Consumer({**config, "error_cb": on_error})
    consumer.subscribe(
        [topic],
        on_assign=lambda _, tps: report.assigned(name, [tp.partition for tp in tps]),
        on_revoke=lambda _, tps: report.revoked(name, [tp.partition for tp in tps]),
        on_lost=lambda _, tps: report.lost(name, [tp.partition for tp in tps]),
    )
    try:
        while not stop.is_set():
            messages = consumer.consume(num_messages=BATCH_RECORDS, timeout=POLL_TIMEOUT_S)
            process_batch(name, topic, consumer, messages, report)
    finally:
        consumer.close()  # revokes through on_revoke, then leaves the group
        report.released(name, "closed")


def process_batch(
    name: str, topic: str, consumer: Consumer, messages: list[Message], report: Reporter
) -> None:
    records: list[tuple[int, int, int]] = []
    next_offsets: dict[int, int] = {}
    for message in messages:
        error = message.error()
        if error is not None:
            report.error(name, f"consume: {error.name()}: {error.str()}")
            continue
        partition, offset = message.partition(), message.offset()
        records.append((partition, offset, seq_of(message.headers())))
        next_offsets[partition] = offset + 1
    if records:
        report.consumed(name, records)
    if next_offsets:
        commit(name, topic, consumer, next_offsets, report)


def commit(
    name: str, topic: str, consumer: Consumer, offsets: dict[int, int], report: Reporter
) -> None:
    """Commit synchronously; report what the broker acknowledged and what it refused."""
    request = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
    report.committing(name, sorted(offsets.items()))
    try:
        result = consumer.commit(offsets=request, asynchronous=False)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        refused = f"commit {offsets}: {error.name()}: {error.str()}"
        if error.code() in REBALANCE_COMMIT_ERRORS:
            report.commit_failed(name, refused)
        else:
            report.error(name, refused)
        return
    done = [(tp.partition, tp.offset) for tp in result if tp.error is None]
    if done:
        report.committed(name, done)
    for tp in result:
        if tp.error is None:
            continue
        refused = f"commit {tp.partition}@{tp.offset}: {tp.error.name()}: {tp.error.str()}"
        if tp.error.code() in REBALANCE_COMMIT_ERRORS:
            report.commit_failed(name, refused)
        else:
            report.error(name, refused)


# -- as a process -----------------------------------------------------------------------------


class JsonLinesReporter:
    """Prints each event as ``{"kind", "member", "data", "at_ns"}`` on one line of stdout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # librdkafka's error_cb may come from another thread

    def _emit(self, kind: str, member: str, data: Any) -> None:
        line = json.dumps(
            {"kind": kind, "member": member, "data": data, "at_ns": time.monotonic_ns()}
        )
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def assigned(self, member: str, partitions: Iterable[int]) -> None:
        self._emit("assigned", member, list(partitions))

    def revoked(self, member: str, partitions: Iterable[int]) -> None:
        self._emit("revoked", member, list(partitions))

    def lost(self, member: str, partitions: Iterable[int]) -> None:
        self._emit("lost", member, list(partitions))

    def released(self, member: str, why: str) -> None:
        self._emit("released", member, why)

    def consumed(self, member: str, records: Iterable[Sequence[int]]) -> None:
        self._emit("consumed", member, [list(r) for r in records])

    def committing(self, member: str, offsets: Iterable[Sequence[int]]) -> None:
        self._emit("committing", member, [list(o) for o in offsets])

    def committed(self, member: str, offsets: Iterable[Sequence[int]]) -> None:
        self._emit("committed", member, [list(o) for o in offsets])

    def commit_failed(self, member: str, text: str) -> None:
        self._emit("commit_failed", member, text)

    def error(self, member: str, text: str) -> None:
        self._emit("error", member, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.set)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reporter = JsonLinesReporter()
    try:
        run_member(
            args.name,
            args.topic,
            member_config(args.bootstrap, args.group, **extra),
            reporter,
            stop,
        )
    except Exception as exc:
        reporter.error(args.name, f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
