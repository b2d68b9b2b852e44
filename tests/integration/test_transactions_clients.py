"""Kafka transactions (KIP-98) against WeirMQ with other people's clients.

confluent-kafka (librdkafka) is the reference: commit, abort, the consume-transform-produce
step (send_offsets_to_transaction: the group's offsets move only when the transaction
commits), fencing by a second producer with the same transactional.id, what read_committed
and read_uncommitted consumers see (nothing past an open transaction's first offset, the
last stable offset, for the first), a transaction the broker aborts when it outlives its
timeout, an empty transaction and one over many partitions. kafka-python and aiokafka
commit and abort, read back by a read_committed consumer of the same library; kafka-python's
admin client gives DescribeTransactions, ListTransactions and DescribeProducers (confluent-
kafka 2.16's AdminClient has no transaction calls).

Every record's value names its transaction (``b"<txn>-<i>"``), so what a consumer reads is
compared with what was committed, in order per partition. "Nothing more to read" is proved
by a committed sentinel written after the records that must stay hidden: a consumer that
reached the sentinel has passed them, with no idle wait.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from integration_support import Deadline, committed_offsets, create_topic

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

# kafka-python 3.0 loads its schemas with importlib.resources.read_text, deprecated in 3.11
# (see test_python_clients.py): ignore exactly those warnings, nothing else.
KAFKA_PYTHON_RESOURCE_WARNINGS = r"(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=KAFKA_PYTHON_RESOURCE_WARNINGS, category=DeprecationWarning
    )
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError as KafkaPythonError
    from kafka.structs import TopicPartition as KafkaTopicPartition

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_RESOURCE_WARNINGS}:DeprecationWarning"),
]

STEP_TIMEOUT_S = 30.0
"""Every client call and every read is bounded by this."""
TXN_TIMEOUT_MS = 2_000
"""transaction.timeout.ms of the timeout test: the broker must abort it by itself."""
CLEANUP_INTERVAL_MS = 200
"""The broker's timer period for that test (Kafka's default is 10 s)."""
MANY_PARTITIONS = 20
SMALL_MESSAGE_BYTES = 1_024
RECOVERY_ATTEMPTS = 3
CONCURRENT_PRODUCERS = 6
CONCURRENT_PARTITIONS = 4
CONCURRENT_TXNS = 15
CONCURRENT_TIMEOUT_S = 120.0
ODD_TIMEOUT_MS = 32_001
"""A transaction.timeout.ms that milliseconds read through a float would turn into 32000."""
SENTINEL = b"sentinel"

Read = dict[int, list[bytes]]  # partition -> values read, in offset order


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def values(txn: str, count: int) -> list[bytes]:
    return [f"{txn}-{i}".encode() for i in range(count)]


# -- confluent-kafka plumbing ---------------------------------------------------------------------


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra}
    )
    producer.init_transactions(STEP_TIMEOUT_S)
    return producer


def send_all(producer: Producer, topic: str, partition: int, items: Iterable[bytes]) -> None:
    """Produce and flush: the records are in the log before the transaction ends."""
    for value in items:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(STEP_TIMEOUT_S) == 0, "records not delivered"


def committed_txn(producer: Producer, topic: str, partition: int, items: list[bytes]) -> None:
    producer.begin_transaction()
    send_all(producer, topic, partition, items)
    producer.commit_transaction(STEP_TIMEOUT_S)


def aborted_txn(producer: Producer, topic: str, partition: int, items: list[bytes]) -> None:
    producer.begin_transaction()
    send_all(producer, topic, partition, items)
    producer.abort_transaction(STEP_TIMEOUT_S)


def reader(bootstrap: str, isolation: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("assign-only"),
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "isolation.level": isolation,
            **extra,
        }
    )


def read_until(
    consumer: Consumer, topic: str, partitions: Iterable[int], last: dict[int, bytes]
) -> Read:
    """Read `partitions` from the beginning until each one's value `last[p]` is read."""
    wanted = list(partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
    got: Read = {p: [] for p in wanted}
    deadline = Deadline(STEP_TIMEOUT_S, f"reading {topic}")
    while any(not got[p] or got[p][-1] != last[p] for p in last):
        deadline.check(f"read {got}")
        for message in consumer.consume(100, timeout=deadline.remaining(0.5)):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {error}")
            value = message.value()
            assert value is not None
            got[message.partition()].append(value)
    return got


def read_all(bootstrap: str, isolation: str, topic: str, last: dict[int, bytes]) -> Read:
    consumer = reader(bootstrap, isolation)
    try:
        return read_until(consumer, topic, last, last)
    finally:
        consumer.close()


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    low, high = consumer.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=STEP_TIMEOUT_S
    )
    return int(low), int(high)


def kafka_code(exc: KafkaException) -> KafkaError:
    error = exc.args[0]
    assert isinstance(error, KafkaError)
    return error


# -- confluent-kafka ------------------------------------------------------------------------------


def test_confluent_commit_abort_then_commit(broker: BrokerProcess) -> None:
    """Commit, abort after flush, and a transaction after the abort that commits: a
    read_committed consumer reads exactly the committed records, in order; read_uncommitted
    reads all of them, the aborted ones included."""
    topic = unique("txn-basic")
    create_topic(broker.bootstrap, topic, 2)
    producer = txn_producer(broker.bootstrap, unique("tid"))
    first, dropped, second = values("a", 5), values("b", 4), values("c", 3)
    committed_txn(producer, topic, 0, first)
    aborted_txn(producer, topic, 0, dropped)
    committed_txn(producer, topic, 0, second)
    committed_txn(producer, topic, 1, [SENTINEL])

    committed = read_all(broker.bootstrap, "read_committed", topic, {0: second[-1], 1: SENTINEL})
    assert committed == {0: first + second, 1: [SENTINEL]}
    everything = read_all(broker.bootstrap, "read_uncommitted", topic, {0: second[-1], 1: SENTINEL})
    assert everything == {0: first + dropped + second, 1: [SENTINEL]}


def test_confluent_open_transaction_holds_back_read_committed(broker: BrokerProcess) -> None:
    """While a transaction is open, read_committed readers get nothing at or past its first
    offset (the last stable offset is what ListOffsets gives them as the end), while
    read_uncommitted readers read it; once it commits, both read it."""
    topic = unique("txn-lso")
    create_topic(broker.bootstrap, topic, 1)
    producer = txn_producer(broker.bootstrap, unique("tid"))
    before, during = values("before", 3), values("open", 4)
    committed_txn(producer, topic, 0, before)  # offsets 0..2, marker at 3
    producer.begin_transaction()
    send_all(producer, topic, 0, during)  # offsets 4..7, still open
    first_open = len(before) + 1

    committed_reader = reader(broker.bootstrap, "read_committed")
    uncommitted_reader = reader(broker.bootstrap, "read_uncommitted")
    try:
        assert watermarks(committed_reader, topic, 0) == (0, first_open)
        assert watermarks(uncommitted_reader, topic, 0) == (0, first_open + len(during))
        assert read_until(uncommitted_reader, topic, [0], {0: during[-1]}) == {0: before + during}
        assert read_until(committed_reader, topic, [0], {0: before[-1]}) == {0: before}
        # Long polls past the LSO return nothing while the transaction stays open.
        for _ in range(3):
            assert committed_reader.consume(10, timeout=0.3) == []
        position = committed_reader.position([TopicPartition(topic, 0)])[0].offset
        assert position <= first_open

        producer.commit_transaction(STEP_TIMEOUT_S)
        got: list[bytes] = []
        deadline = Deadline(STEP_TIMEOUT_S, "reading the committed transaction")
        while len(got) < len(during):
            deadline.check(f"read {got}")
            got += [m.value() for m in committed_reader.consume(10, 0.5) if m.error() is None]
        assert got == during
        end = first_open + len(during) + 1  # the second marker
        assert watermarks(committed_reader, topic, 0) == (0, end)
    finally:
        committed_reader.close()
        uncommitted_reader.close()


def test_confluent_send_offsets_to_transaction(broker: BrokerProcess) -> None:
    """Consume-transform-produce: the group's committed offsets move only when the
    transaction commits; an aborted step leaves them (and its output is invisible)."""
    source, sink = unique("txn-src"), unique("txn-sink")
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values("in", 6):
        feeder.produce(source, value=value, partition=0)
    assert feeder.flush(STEP_TIMEOUT_S) == 0
    group = unique("ctp-group")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = txn_producer(broker.bootstrap, unique("tid"))
    try:
        consumer.assign([TopicPartition(source, 0, OFFSET_BEGINNING)])

        def step(count: int, commit: bool) -> list[bytes]:
            taken: list[bytes] = []
            deadline = Deadline(STEP_TIMEOUT_S, "consuming the source")
            while len(taken) < count:
                deadline.check(f"took {taken}")
                for message in consumer.consume(count - len(taken), 0.5):
                    assert message.error() is None, message.error()
                    taken.append(message.value())
            producer.begin_transaction()
            send_all(producer, sink, 0, [b"out:" + v for v in taken])
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                STEP_TIMEOUT_S,
            )
            assert committed_offsets(broker.bootstrap, group, source, 1) == {0: before}
            if commit:
                producer.commit_transaction(STEP_TIMEOUT_S)
            else:
                producer.abort_transaction(STEP_TIMEOUT_S)
            return taken

        before = -1001  # OFFSET_INVALID: nothing committed yet
        first = step(3, commit=True)
        assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 3}
        before = 3
        dropped = step(2, commit=False)
        assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 3}
        # A restarted application would resume from 3: do that, and commit this time.
        consumer.seek(TopicPartition(source, 0, 3))
        again = step(3, commit=True)
        assert again[:2] == dropped
        assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 6}
        committed_view = consumer.committed([TopicPartition(source, 0)], STEP_TIMEOUT_S)
        assert committed_view[0].offset == 6
    finally:
        consumer.close()

    output = read_all(broker.bootstrap, "read_committed", sink, {0: b"out:" + again[-1]})
    assert output == {0: [b"out:" + v for v in first + again]}


def test_confluent_offsets_only_transaction(broker: BrokerProcess) -> None:
    """A transaction that only sends offsets (nothing produced): committed, the group's
    offsets move; aborted, they stay."""
    source = unique("txn-offsets-only")
    create_topic(broker.bootstrap, source, 2)
    group = unique("offsets-only")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer = txn_producer(broker.bootstrap, unique("tid"))
    try:
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 4), TopicPartition(source, 1, 9)], metadata, STEP_TIMEOUT_S
        )
        producer.commit_transaction(STEP_TIMEOUT_S)
        assert committed_offsets(broker.bootstrap, group, source, 2) == {0: 4, 1: 9}
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 6)], metadata, STEP_TIMEOUT_S
        )
        producer.abort_transaction(STEP_TIMEOUT_S)
        assert committed_offsets(broker.bootstrap, group, source, 2) == {0: 4, 1: 9}
    finally:
        consumer.close()


def test_confluent_fencing(broker: BrokerProcess) -> None:
    """A second producer with the same transactional.id fences the first: its open
    transaction is aborted, and its next produce or commit fails fatally."""
    topic = unique("txn-fence")
    create_topic(broker.bootstrap, topic, 1)
    txn_id = unique("tid")
    zombie = txn_producer(broker.bootstrap, txn_id)
    zombie.begin_transaction()
    send_all(zombie, topic, 0, values("zombie", 3))

    successor = txn_producer(broker.bootstrap, txn_id)  # aborts the zombie's transaction

    with pytest.raises(KafkaException) as raised:  # at the flush or at the commit
        zombie.produce(topic, value=b"late", partition=0)
        zombie.flush(STEP_TIMEOUT_S)
        zombie.commit_transaction(STEP_TIMEOUT_S)
    error = kafka_code(raised.value)
    assert error.fatal(), f"not fatal: {error}"
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error

    committed_txn(successor, topic, 0, [*values("successor", 2), SENTINEL])
    committed = read_all(broker.bootstrap, "read_committed", topic, {0: SENTINEL})
    assert committed == {0: [*values("successor", 2), SENTINEL]}
    everything = read_all(broker.bootstrap, "read_uncommitted", topic, {0: SENTINEL})
    assert b"late" not in everything[0], "a fenced producer's write reached the log"


def test_confluent_interleaved_transactions(broker: BrokerProcess) -> None:
    """Two producers' transactions interleaved on one partition: while the older one is
    open, the younger one's commit stays hidden from read_committed readers (the last
    stable offset is the older one's first offset); once the older one aborts, readers
    get the committed records and none of the aborted ones, whose batches sit between
    them in the log."""
    topic = unique("txn-interleaved")
    create_topic(broker.bootstrap, topic, 1)
    older = txn_producer(broker.bootstrap, unique("tid-older"))
    younger = txn_producer(broker.bootstrap, unique("tid-younger"))
    older.begin_transaction()
    younger.begin_transaction()
    for round_ in range(3):
        send_all(older, topic, 0, [b"older-%d" % round_])
        send_all(younger, topic, 0, [b"younger-%d" % round_])
    younger.commit_transaction(STEP_TIMEOUT_S)

    committed_reader = reader(broker.bootstrap, "read_committed")
    try:
        assert watermarks(committed_reader, topic, 0) == (0, 0), "the older one is open"
        older.abort_transaction(STEP_TIMEOUT_S)
        assert read_until(committed_reader, topic, [0], {0: b"younger-2"}) == {
            0: [b"younger-%d" % i for i in range(3)]
        }
    finally:
        committed_reader.close()
    committed_txn(younger, topic, 0, [SENTINEL])
    everything = read_all(broker.bootstrap, "read_uncommitted", topic, {0: SENTINEL})
    assert everything == {
        0: [b"%s-%d" % (who, i) for i in range(3) for who in (b"older", b"younger")] + [SENTINEL]
    }


def test_confluent_abortable_error_then_recovery(broker: BrokerProcess) -> None:
    """A record the broker refuses (larger than the topic's max.message.bytes) makes the
    transaction abortable: librdkafka aborts it, bumps its epoch with InitProducerId
    naming its current one (KIP-360), and the next transaction commits."""
    topic = unique("txn-abortable")
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": str(SMALL_MESSAGE_BYTES)})
    txn_id = unique("tid")
    producer = txn_producer(broker.bootstrap, txn_id)
    failures: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    producer.begin_transaction()
    producer.produce(topic, value=b"small-0", partition=0, on_delivery=on_delivery)
    producer.flush(STEP_TIMEOUT_S)  # its own batch: the refusal is the big one's only
    big = b"x" * (4 * SMALL_MESSAGE_BYTES)
    producer.produce(topic, value=big, partition=0, on_delivery=on_delivery)
    producer.flush(STEP_TIMEOUT_S)
    assert [e.code() for e in failures] == [KafkaError.MSG_SIZE_TOO_LARGE]
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(STEP_TIMEOUT_S)
    error = kafka_code(raised.value)
    assert error.txn_requires_abort() and not error.fatal(), error
    producer.abort_transaction(STEP_TIMEOUT_S)
    # The refused record left a gap in the producer's sequence: the next transaction's
    # first write gets OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka turns into "abort,
    # then bump the epoch" (as it does against Kafka, which refuses the gap too).
    for attempt in range(RECOVERY_ATTEMPTS):
        try:
            committed_txn(producer, topic, 0, [*values("after", 2), SENTINEL])
            break
        except KafkaException as exc:
            error = kafka_code(exc)
            assert error.txn_requires_abort() and attempt + 1 < RECOVERY_ATTEMPTS, error
            producer.abort_transaction(STEP_TIMEOUT_S)

    committed = read_all(broker.bootstrap, "read_committed", topic, {0: SENTINEL})
    assert committed == {0: [*values("after", 2), SENTINEL]}
    admin = kafka_admin(broker.bootstrap)
    try:
        described = complete(admin, txn_id, "CompleteCommit")
    finally:
        admin.close()
    assert described.producer_epoch >= 1, "no KIP-360 epoch bump happened"


@pytest.mark.slow
def test_confluent_concurrent_producers(broker: BrokerProcess) -> None:
    """Several transactional producers at once over shared partitions, every third
    transaction aborted: read_committed readers get exactly the committed records, each
    producer's in the order it wrote them; read_uncommitted readers get every record."""
    topic = unique("txn-concurrent")
    create_topic(broker.bootstrap, topic, CONCURRENT_PARTITIONS)
    committed: dict[int, list[bytes]] = {p: [] for p in range(CONCURRENT_PARTITIONS)}
    written: dict[int, list[bytes]] = {p: [] for p in range(CONCURRENT_PARTITIONS)}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            producer = txn_producer(broker.bootstrap, unique(f"tid-{worker}"))
            for txn in range(CONCURRENT_TXNS):
                keep = txn % 3 != 2
                producer.begin_transaction()
                sent: dict[int, list[bytes]] = {}
                for k in range(3):
                    p = (worker + txn + k) % CONCURRENT_PARTITIONS
                    value = b"w%d-t%d-k%d" % (worker, txn, k)
                    producer.produce(topic, value=value, partition=p)
                    sent.setdefault(p, []).append(value)
                assert producer.flush(STEP_TIMEOUT_S) == 0
                with lock:  # what the log holds now, whatever the outcome
                    for p, items in sent.items():
                        written[p] += items
                if keep:
                    producer.commit_transaction(STEP_TIMEOUT_S)
                    with lock:
                        for p, items in sent.items():
                            committed[p] += items
                else:
                    producer.abort_transaction(STEP_TIMEOUT_S)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(CONCURRENT_PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CONCURRENT_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a producer hung"
    assert not errors, errors
    closer = txn_producer(broker.bootstrap, unique("tid-closer"))
    closer.begin_transaction()
    for p in range(CONCURRENT_PARTITIONS):
        closer.produce(topic, value=SENTINEL, partition=p)
    closer.commit_transaction(STEP_TIMEOUT_S)

    last = dict.fromkeys(range(CONCURRENT_PARTITIONS), SENTINEL)
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", written)):
        got = read_all(broker.bootstrap, isolation, topic, last)
        for p in range(CONCURRENT_PARTITIONS):
            assert got[p][-1] == SENTINEL
            assert sorted(got[p][:-1]) == sorted(expected[p]), (isolation, p)
            for worker in range(CONCURRENT_PRODUCERS):
                mine = [v for v in got[p] if v.startswith(b"w%d-" % worker)]
                assert mine == [v for v in expected[p] if v.startswith(b"w%d-" % worker)]


@pytest.mark.slow
def test_confluent_transactions_across_a_broker_crash(broker_factory: BrokerFactory) -> None:
    """SIGKILL with one transaction committed and one open: after the restart the
    committed one is readable, the open one still holds read_committed readers back, and
    a new producer with the same transactional.id aborts it (fencing the old one)."""
    broker = broker_factory()
    topic = unique("txn-crash")
    create_topic(broker.bootstrap, topic, 2)
    txn_id = unique("tid")
    producer = txn_producer(broker.bootstrap, txn_id)
    committed_txn(producer, topic, 0, values("kept", 3))
    producer.begin_transaction()
    send_all(producer, topic, 0, values("open", 2))
    send_all(producer, topic, 1, values("open", 2))
    broker.kill()
    broker.restart()
    open_first = 4  # after kept-0..2 and their marker

    committed_reader = reader(broker.bootstrap, "read_committed")
    try:
        assert watermarks(committed_reader, topic, 0) == (0, open_first)
        assert watermarks(committed_reader, topic, 1) == (0, 0)
        assert read_until(committed_reader, topic, [0], {0: b"kept-2"}) == {0: values("kept", 3)}
    finally:
        committed_reader.close()

    successor = txn_producer(broker.bootstrap, txn_id)
    committed_txn(successor, topic, 0, [SENTINEL])
    committed_txn(successor, topic, 1, [SENTINEL])
    committed = read_all(broker.bootstrap, "read_committed", topic, {0: SENTINEL, 1: SENTINEL})
    assert committed == {0: [*values("kept", 3), SENTINEL], 1: [SENTINEL]}
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(STEP_TIMEOUT_S)
    assert kafka_code(raised.value).fatal()


@pytest.mark.slow
def test_confluent_transaction_timeout(broker_factory: BrokerFactory) -> None:
    """A transaction open past transaction.timeout.ms is aborted by the broker: its
    records stay invisible to read_committed readers, the producer's commit fails, and the
    producer (or a new one with the same id) carries on."""
    broker = broker_factory(
        transaction_abort_timed_out_transaction_cleanup_interval_ms=CLEANUP_INTERVAL_MS
    )
    topic = unique("txn-timeout")
    create_topic(broker.bootstrap, topic, 1)
    txn_id = unique("tid")
    producer = txn_producer(broker.bootstrap, txn_id, **{"transaction.timeout.ms": TXN_TIMEOUT_MS})
    producer.begin_transaction()
    send_all(producer, topic, 0, values("late", 3))

    admin = kafka_admin(broker.bootstrap)
    try:
        deadline = Deadline(STEP_TIMEOUT_S, "the broker aborting the transaction")
        while admin.describe_transactions([txn_id])[txn_id].state != "CompleteAbort":
            deadline.check()
            time.sleep(0.1)
    finally:
        admin.close()

    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(STEP_TIMEOUT_S)
    error = kafka_code(raised.value)
    if error.txn_requires_abort():  # librdkafka's KIP-360 recovery
        producer.abort_transaction(STEP_TIMEOUT_S)
    else:
        assert error.fatal(), f"neither abortable nor fatal: {error}"
        producer = txn_producer(broker.bootstrap, txn_id)
    committed_txn(producer, topic, 0, [*values("next", 2), SENTINEL])

    committed = read_all(broker.bootstrap, "read_committed", topic, {0: SENTINEL})
    assert committed == {0: [*values("next", 2), SENTINEL]}


def test_confluent_empty_and_many_partitions(broker: BrokerProcess) -> None:
    """An empty transaction commits (and aborts); one over 20 partitions commits on all of
    them at once, and an abort over 20 partitions hides every one."""
    topic = unique("txn-many")
    create_topic(broker.bootstrap, topic, MANY_PARTITIONS)
    producer = txn_producer(broker.bootstrap, unique("tid"))
    producer.begin_transaction()
    producer.commit_transaction(STEP_TIMEOUT_S)
    producer.begin_transaction()
    producer.abort_transaction(STEP_TIMEOUT_S)

    producer.begin_transaction()
    for p in range(MANY_PARTITIONS):
        producer.produce(topic, value=b"dropped-%d" % p, partition=p)
    assert producer.flush(STEP_TIMEOUT_S) == 0
    producer.abort_transaction(STEP_TIMEOUT_S)
    producer.begin_transaction()
    for p in range(MANY_PARTITIONS):
        for i in range(3):
            producer.produce(topic, value=b"kept-%d-%d" % (p, i), partition=p)
    producer.commit_transaction(STEP_TIMEOUT_S)

    last = {p: b"kept-%d-2" % p for p in range(MANY_PARTITIONS)}
    committed = read_all(broker.bootstrap, "read_committed", topic, last)
    assert committed == {p: [b"kept-%d-%d" % (p, i) for i in range(3)] for p in last}


# -- kafka-python ---------------------------------------------------------------------------------


def kafka_admin(bootstrap: str) -> Any:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def kafka_python_read(bootstrap: str, topic: str, last: bytes) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=None
    )
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = Deadline(STEP_TIMEOUT_S, "kafka-python reading")
        while not got or got[-1] != last:
            deadline.check(f"read {got}")
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        return got
    finally:
        consumer.close()


def test_kafka_python_commit_abort(broker: BrokerProcess) -> None:
    topic = unique("txn-kp")
    create_topic(broker.bootstrap, topic, 1)
    source = unique("txn-kp-src")
    create_topic(broker.bootstrap, source, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in values("kept", 3):
            producer.send(topic, value=value, partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        for value in values("dropped", 3):
            producer.send(topic, value=value, partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()  # an empty one
        producer.commit_transaction()
        # send_offsets_to_transaction: the offsets land with the commit.
        group = unique("kp-group")
        producer.begin_transaction()
        producer.send(topic, value=SENTINEL, partition=0)
        producer.send_offsets_to_transaction(
            {KafkaTopicPartition(source, 0): _kafka_python_offset(7)}, group
        )
        assert committed_offsets(broker.bootstrap, group, source, 1) == {0: -1001}
        producer.commit_transaction()
        assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 7}
    finally:
        producer.close()
    assert kafka_python_read(broker.bootstrap, topic, SENTINEL) == [*values("kept", 3), SENTINEL]


def test_kafka_python_txn_offset_commit_from_a_stale_member_is_fenced(
    broker: BrokerProcess,
) -> None:
    """KIP-447: offsets sent with the group metadata of a member the group does not have
    (a zombie consumer from an old generation) are refused (Kafka: ILLEGAL_GENERATION or
    UNKNOWN_MEMBER_ID), and the group's offsets do not move."""
    from kafka.structs import ConsumerGroupMetadata

    source = unique("txn-kp-stale")
    create_topic(broker.bootstrap, source, 1)
    group = unique("kp-stale-group")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        stale = ConsumerGroupMetadata(group, 3, "ghost-member", None)
        with pytest.raises(KafkaPythonError):
            producer.send_offsets_to_transaction(
                {KafkaTopicPartition(source, 0): _kafka_python_offset(5)}, stale
            )
            producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    assert committed_offsets(broker.bootstrap, group, source, 1) == {0: -1001}


def _kafka_python_offset(offset: int) -> Any:
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:  # older field list
        return OffsetAndMetadata(offset, "")


def complete(admin: Any, txn_id: str, state: str) -> Any:
    """DescribeTransactions of `txn_id` once it reads `state` (an end is answered before
    its markers are written, so it can read PrepareCommit or PrepareAbort just after)."""
    deadline = Deadline(STEP_TIMEOUT_S, f"{txn_id} reaching {state}")
    while (described := admin.describe_transactions([txn_id])[txn_id]).state != state:
        assert described.state.startswith("Prepare"), described.state
        deadline.check()
        time.sleep(0.01)
    return described


def test_kafka_python_admin_views(broker: BrokerProcess) -> None:
    """DescribeTransactions, ListTransactions and DescribeProducers with kafka-python's
    admin client: an open transaction shows as Ongoing with its partitions, then
    CompleteCommit with none."""
    topic = unique("txn-admin")
    create_topic(broker.bootstrap, topic, 2)
    txn_id = unique("tid")
    producer = txn_producer(broker.bootstrap, txn_id, **{"transaction.timeout.ms": ODD_TIMEOUT_MS})
    producer.begin_transaction()
    send_all(producer, topic, 1, values("x", 2))
    admin = kafka_admin(broker.bootstrap)
    try:
        described = admin.describe_transactions([txn_id])[txn_id]
        assert described.state == "Ongoing"
        assert described.transaction_timeout_ms == ODD_TIMEOUT_MS
        assert described.transaction_start_time_ms > 0
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(topic, 1)}
        producer_id = described.producer_id
        assert producer_id >= 0

        listed = admin.list_transactions()
        assert any(t.transactional_id == txn_id and t.state == "Ongoing" for t in _list(listed))
        ongoing = _list(admin.list_transactions(state_filters=["Ongoing"]))
        assert txn_id in {t.transactional_id for t in ongoing}
        # Running longer than an hour: none; longer than 0 ms: this one.
        assert _list(admin.list_transactions(duration_filter_ms=3_600_000)) == []
        running = _list(admin.list_transactions(duration_filter_ms=0))
        assert txn_id in {t.transactional_id for t in running}
        by_pid = _list(admin.list_transactions(producer_id_filters=[producer_id]))
        assert [t.transactional_id for t in by_pid] == [txn_id]
        # KIP-1152: the pattern is a regular expression matching the whole id.
        by_pattern = _list(admin.list_transactions(transactional_id_pattern=_pattern(txn_id)))
        assert [t.transactional_id for t in by_pattern] == [txn_id]
        none = _list(admin.list_transactions(transactional_id_pattern=txn_id[:-1]))
        assert none == []
        with pytest.raises(KafkaPythonError, match="Error 128"):  # INVALID_REGULAR_EXPRESSION
            admin.list_transactions(transactional_id_pattern="tid-(")

        states = admin.describe_producers([KafkaTopicPartition(topic, 1)])
        active = states[KafkaTopicPartition(topic, 1)].active_producers
        assert [p.producer_id for p in active] == [producer_id]
        assert active[0].current_transaction_start_offset == 0

        producer.commit_transaction(STEP_TIMEOUT_S)
        # commit_transaction returns once PREPARE_COMMIT is durable, as with Kafka: the
        # markers, then CompleteCommit, follow.
        described = complete(admin, txn_id, "CompleteCommit")
        assert list(described.topic_partitions) == []
        assert described.transaction_start_time_ms == -1
        completed = _list(admin.list_transactions(state_filters=["Ongoing"]))
        assert txn_id not in {t.transactional_id for t in completed}
    finally:
        admin.close()


def _pattern(txn_id: str) -> str:
    """A regular expression (not a glob) that matches `txn_id` and no other id here."""
    prefix, _, suffix = txn_id.rpartition("-")
    return f"{prefix}-[0-9a-f]{{{len(suffix)}}}"


def _list(listed: Any) -> list[Any]:
    """list_transactions' answer as a flat list (a list, or a dict per broker)."""
    if isinstance(listed, dict):
        return [t for found in listed.values() for t in found]
    return list(listed)


# -- aiokafka -------------------------------------------------------------------------------------


async def _aiokafka_commit_abort(bootstrap: str, topic: str) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tid"))
    await producer.start()
    try:
        async with producer.transaction():
            for value in values("kept", 3):
                await producer.send_and_wait(topic, value=value, partition=0)
        await producer.begin_transaction()
        for value in values("dropped", 3):
            await producer.send_and_wait(topic, value=value, partition=0)
        await producer.abort_transaction()
        async with producer.transaction():  # an empty one
            pass
        async with producer.transaction():
            await producer.send_and_wait(topic, value=SENTINEL, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = Deadline(STEP_TIMEOUT_S, "aiokafka reading")
        while not got or got[-1] != SENTINEL:
            deadline.check(f"read {got}")
            batches = await consumer.getmany(timeout_ms=500)
            got += [r.value for records in batches.values() for r in records]
        return got
    finally:
        await consumer.stop()


def test_aiokafka_commit_abort(broker: BrokerProcess) -> None:
    topic = unique("txn-aio")
    create_topic(broker.bootstrap, topic, 1)
    got = asyncio.run(
        asyncio.wait_for(_aiokafka_commit_abort(broker.bootstrap, topic), 3 * STEP_TIMEOUT_S)
    )
    assert got == [*values("kept", 3), SENTINEL]
