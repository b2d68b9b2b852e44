"""Transactional confluent-kafka clients in a process of their own, for kill -9 tests
(test_transactions_crash.py).

Two modes, each a client a test may SIGKILL at any moment:

- ``open``: commits one transaction of ``--records`` records (values ``committed-<i>``),
  then opens another, writes ``--records`` records in it (``open-<i>``), waits until the
  broker has acknowledged them, prints ``{"kind": "open"}`` and sleeps until it is killed
  (at most ``OPEN_SLEEP_MAX_S``). The open transaction is left for the broker to abort.
- ``transform``: a consume-transform-produce loop. It reads ``--input`` read_committed,
  from the group's committed offsets (``assign``, no subscription: one loop runs at a
  time, and a restarted loop must not wait for its killed predecessor's session to end),
  writes one output record per input record (same key, value ``out-`` + input value) and
  commits every ``--batch`` records in a transaction together with the group's offsets
  (``send_offsets_to_transaction``). Every commit that returned is printed as
  ``{"kind": "committed", "records": n}``. Exit codes: 0 once every input partition is at
  its end and everything read is committed; ``EXIT_ABORTED`` after aborting a transaction
  the client said must be aborted (the test starts a new loop, which resumes from the
  committed offsets: simpler than rewinding in place, and the same path a crash takes);
  ``EXIT_FAILED`` on any other error.

The loop calls ``init_transactions`` before it reads the committed offsets: that fences a
predecessor and completes (or aborts) its last transaction, so the offsets read are final.

    python txn_loop.py transform --bootstrap 127.0.0.1:9092 --input in --output out \\
        --group g --txn-id loop --partitions 3
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import (
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

CALL_TIMEOUT_S = 30.0
"""Bound of each blocking client call (init, send offsets, commit, abort)."""
COMMIT_ATTEMPTS_MAX = 5
"""Retries of a commit that failed with a retriable error (the broker was down)."""
OPEN_SLEEP_MAX_S = 600.0
POLL_TIMEOUT_S = 0.5
RECOVERY = {"metadata.recovery.strategy": "none", "reconnect.backoff.max.ms": 1000}
"""No re-bootstrap when every broker is down (librdkafka 2.10+ does one by default): it
decommissions the broker's handle, and send_offsets_to_transaction() can then hang past
its timeout for good (librdkafka issue 5511), which a kill of the one broker here
triggers within a few kills. The broker comes back on the same address anyway, and a
reconnect backoff of up to a second (not 10) finds it soon after its restart."""
TRANSACTION_TIMEOUT_MS = 60_000
"""Longer than a broker restart: a transaction must not time out while it is down."""
EXIT_ABORTED = 3
EXIT_FAILED = 2


def emit(kind: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"kind": kind, **data}) + "\n")
    sys.stdout.flush()


def producer_config(bootstrap: str, txn_id: str, timeout_ms: int) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        **RECOVERY,
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
        "error_cb": lambda error: emit("error", text=f"{error.name()}: {error.str()}"),
    }


# -- open ----------------------------------------------------------------------------------------


def run_open(args: argparse.Namespace) -> int:
    producer = Producer(producer_config(args.bootstrap, args.txn_id, args.timeout_ms))
    producer.init_transactions(CALL_TIMEOUT_S)
    for state in ("committed", "open"):
        producer.begin_transaction()
        for i in range(args.records):
            producer.produce(
                args.topic,
                key=b"%d" % i,
                value=b"%s-%d" % (state.encode(), i),
                partition=i % args.partitions,
            )
        left = producer.flush(CALL_TIMEOUT_S)
        if left:
            emit("error", text=f"{left} records unacknowledged")
            return EXIT_FAILED
        if state == "committed":
            producer.commit_transaction(CALL_TIMEOUT_S)
    emit("open")
    time.sleep(OPEN_SLEEP_MAX_S)  # the test kills this process long before
    return EXIT_FAILED


# -- transform -----------------------------------------------------------------------------------


def run_transform(args: argparse.Namespace) -> int:
    producer = Producer(producer_config(args.bootstrap, args.txn_id, TRANSACTION_TIMEOUT_MS))
    producer.init_transactions(CALL_TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            **RECOVERY,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(args.input, p, OFFSET_STORED) for p in range(args.partitions)])
    at_end: set[int] = set()
    try:
        while len(at_end) < args.partitions:
            messages = consumer.consume(num_messages=args.batch, timeout=POLL_TIMEOUT_S)
            records = read_batch(messages, at_end)
            if records is None:
                return EXIT_FAILED
            if records:
                code = transact(args, producer, consumer, records)
                if code is not None:
                    return code
    finally:
        consumer.close()
    emit("done")
    return 0


def read_batch(messages: list[Message], at_end: set[int]) -> list[Message] | None:
    """The records of a batch (None after an error, reported); end-of-partition events
    go to `at_end`."""
    records = []
    for message in messages:
        error = message.error()
        if error is None:
            at_end.discard(message.partition())
            records.append(message)
        elif error.code() == KafkaError._PARTITION_EOF:
            at_end.add(message.partition())
        else:
            emit("error", text=f"consume: {error.name()}: {error.str()}")
            return None
    return records


def transact(
    args: argparse.Namespace, producer: Producer, consumer: Consumer, records: list[Message]
) -> int | None:
    """One transaction: the transformed records and the offsets after them. None when it
    committed, else the exit code."""
    try:
        producer.begin_transaction()
        for message in records:
            produce_transformed(args.output, producer, message)
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        producer.send_offsets_to_transaction(
            positions, consumer.consumer_group_metadata(), CALL_TIMEOUT_S
        )
    except KafkaException as exc:
        return abort(producer, exc.args[0])
    return commit(producer, len(records))


def produce_transformed(topic: str, producer: Producer, message: Message) -> None:
    while True:
        try:
            producer.produce(topic, key=message.key(), value=b"out-" + message.value())
            return
        except BufferError:  # librdkafka's queue is full: serve callbacks, retry
            producer.poll(0.05)


def commit(producer: Producer, count: int) -> int | None:
    for _attempt in range(COMMIT_ATTEMPTS_MAX):
        try:
            producer.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.retriable():
                emit("retry", text=f"commit: {error.name()}: {error.str()}")
                continue
            return abort(producer, error)
        emit("committed", records=count)
        return None
    emit("error", text=f"commit failed {COMMIT_ATTEMPTS_MAX} times")
    return EXIT_FAILED


def abort(producer: Producer, error: KafkaError) -> int:
    text = f"{error.name()}: {error.str()}"
    if not error.txn_requires_abort():
        emit("error", text=f"fatal or unexpected: {text}")
        return EXIT_FAILED
    emit("aborting", text=text)
    try:
        producer.abort_transaction(CALL_TIMEOUT_S)
    except KafkaException as exc:
        emit("error", text=f"abort: {exc.args[0]}")
        return EXIT_FAILED
    return EXIT_ABORTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["open", "transform"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--txn-id", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--topic", help="open: the topic written")
    parser.add_argument("--records", type=int, default=30, help="open: records per transaction")
    parser.add_argument("--timeout-ms", type=int, default=TRANSACTION_TIMEOUT_MS)
    parser.add_argument("--input", help="transform: the topic read")
    parser.add_argument("--output", help="transform: the topic written")
    parser.add_argument("--group", help="transform: the group whose offsets are committed")
    parser.add_argument("--batch", type=int, default=100, help="transform: records per txn")
    args = parser.parse_args(argv)
    # A loop that hangs can be asked where (kill -USR1): the stacks go to stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        return run_open(args) if args.mode == "open" else run_transform(args)
    except KafkaException as exc:
        emit("error", text=f"{exc.args[0]}")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
