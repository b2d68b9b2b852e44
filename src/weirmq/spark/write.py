"""Writing a Spark task's rows to WeirMQ topics: Arrow batches into a Kafka producer.

Spark hands each write task its rows as Arrow record batches (the data source is an
`DataSourceArrowWriter`), so a column comes out as one Python list with one C++ call
(`to_pylist`) and the per-row work is a single `Producer.produce`. librdkafka batches,
compresses (with `kafka.compression.type`) and pipelines the records; delivery reports are
asked for failures only (`delivery.report.only.error`), so a healthy write costs no Python
callback per record.

Two guarantees, chosen with the `deliveryGuarantee` option:

**at-least-once** (the default, like Spark's Kafka sink; `write_batches`). A task returns
only after every one of its records is acknowledged (`flush`), and fails if any was
refused, so Spark retries it; a retried task (or a micro-batch replayed after a crash)
writes its rows again.

**exactly-once** (`write_transactionally`): per Spark task, not per job. A task is named
by a *write id* and a *batch id* (a streaming query's persistent id and the micro-batch's
id; a batch write's own random id and 0) and Spark's partition id. It writes:

    init_transactions(tid)          tid = <prefix>-<write id>-<partition>: fences every
                                    other attempt of the same task and waits until their
                                    open transaction is aborted (or their commit finished)
    committed(marker group)         offset > batch id: this task's rows are already
                                    committed (a replay, or a retry after a commit whose
                                    task then died): write nothing
    begin; produce every row;
    send_offsets_to_transaction     marker: offset batch id + 1, on COMMITS_TOPIC, for the
                                    group <prefix>-<write id>-<partition>
    commit_transaction              the rows and the marker become visible together

The transactional id leaves out the batch id on purpose: a stream's task of partition p
then fences a zombie attempt of an earlier batch too, and a stream uses as many ids as it
has partitions, not a new set per micro-batch (the broker holds a bounded number).

Why the task commits, and not the driver after every task succeeded (the two-phase commit
of Flink's Kafka sink): a Kafka client can only end a transaction it began, and librdkafka
(confluent-kafka) cannot resume another process's transaction from its producer id and
epoch, which is what Flink does through the Java client's internals; nor can a task hold
its transaction open until the driver decides, as Spark calls the driver's commit only
after every task has returned. So the unit of
atomicity is one task: read_committed readers never see part of a task's rows, never see a
failed attempt's rows (its transaction is aborted, by itself or by the fencing of the next
attempt), and never see a task's rows twice (the marker commits atomically with them and
is checked after fencing, so two attempts cannot both commit). Across tasks there is no
atomicity: a job (or micro-batch) that fails leaves the tasks that had committed visible;
a batch write run again is a new write, so those rows appear again. A replayed micro-batch
(same query id and batch id) skips the tasks that had committed, provided it puts the same
rows in the same Spark partitions, as a deterministic query does.

Bounds: one producer (librdkafka's own bounded queue; `BufferError` makes us poll) and one
consumer per task; every wait on the broker is bounded by `TXN_TIMEOUT_S` or the
transaction timeout (`DEFAULT_TRANSACTION_TIMEOUT_MS` unless `kafka.transaction.timeout.ms`
says otherwise: a task must finish writing within it, or the broker aborts its transaction
and the task fails).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

FLUSH_POLL_S = 1.0
TXN_TIMEOUT_S = 60.0
"""Longest wait for one transactional step (init, offsets, commit, abort) or a lookup."""
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000
"""A task's transaction is open while it writes: long enough for a large task, short enough
that a transaction left open by a lost executor does not hold read_committed readers back
for long (a retry fences it at once anyway). Below Kafka's default maximum, 15 min."""
COMMITS_TOPIC = "__weirmq_spark_commits"
"""Anchors the exactly-once markers: each task commits an offset of its partition 0 to a
group of its own. No record is ever written to it."""
COMMITS_PARTITION = 0

# Producer settings the exactly-once mode owns: a transaction needs idempotence and acks=all.
_TRANSACTIONAL_OVERRIDES = {"enable.idempotence": "true", "acks": "all"}


class WriteError(RuntimeError):
    """Some records of a task were not acknowledged by the broker."""


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """What names one exactly-once task, the same for all its attempts and replays."""

    prefix: str
    write_id: str
    batch_id: int
    partition: int

    @property
    def transactional_id(self) -> str:
        return f"{self.prefix}-{self.write_id}-{self.partition}"

    @property
    def marker_group(self) -> str:
        return f"{self.prefix}-{self.write_id}-{self.partition}"


def producer_config(client: Mapping[str, str], on_error: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"linger.ms": 5}
    config.update(client)
    config["on_delivery"] = on_error
    config["delivery.report.only.error"] = True
    return config


def transactional_config(client: Mapping[str, str], transactional_id: str) -> dict[str, Any]:
    """The client settings of an exactly-once task's producer (without callbacks)."""
    config: dict[str, Any] = {"transaction.timeout.ms": str(DEFAULT_TRANSACTION_TIMEOUT_MS)}
    config.update(client)
    config.update(_TRANSACTIONAL_OVERRIDES)
    config["transactional.id"] = transactional_id
    return config


def write_batches(batches: Iterator[Any], client: Mapping[str, str], topic: str | None) -> int:
    """At least once: produces every row of every batch; returns the number of records
    acknowledged."""
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer(producer_config(client, _failure_collector(failures)))
    written = _produce_all(producer, batches, topic, failures)
    while producer.flush(FLUSH_POLL_S) > 0:
        pass
    _raise_failures(failures)
    return written


def write_transactionally(
    batches: Iterator[Any], client: Mapping[str, str], topic: str | None, task: TaskIdentity
) -> int | None:
    """Exactly once per task (module docstring): returns the number of records committed,
    or None when this task's rows were already committed (nothing is written again)."""
    from confluent_kafka import Producer

    failures: list[str] = []
    config = transactional_config(client, task.transactional_id)
    producer = Producer(producer_config(config, _failure_collector(failures)))
    # Fences earlier attempts and settles their transaction before the marker is read, so
    # no attempt can commit between the check and our own commit.
    producer.init_transactions(TXN_TIMEOUT_S)
    consumer = _marker_consumer(client, task.marker_group)
    try:
        if committed_batches(consumer) > task.batch_id:
            for _ in batches:  # Spark expects its input consumed
                pass
            return None
        producer.begin_transaction()
        try:
            written = _produce_all(producer, batches, topic, failures)
            _raise_failures(failures)
            marker = _commits_partition(task.batch_id + 1)
            metadata = consumer.consumer_group_metadata()
            producer.send_offsets_to_transaction([marker], metadata, TXN_TIMEOUT_S)
            producer.commit_transaction(TXN_TIMEOUT_S)
        except Exception as exc:
            _abort_quietly(producer)
            if failures:  # the refused records say more than "the commit failed"
                raise WriteError(_failure_message(failures)) from exc
            raise
        _raise_failures(failures)
        return written
    finally:
        consumer.close()


def committed_batches(consumer: Any) -> int:
    """The marker of the consumer's group: how many batches its task has committed (0 for
    none). Read with read_committed, so a marker of an unfinished transaction is waited
    for (the broker answers UNSTABLE_OFFSET_COMMIT and librdkafka retries)."""
    [found] = consumer.committed([_commits_partition()], TXN_TIMEOUT_S)
    if found.error is not None:
        raise WriteError(f"could not read this task's exactly-once marker: {found.error}")
    return max(int(found.offset), 0)  # no offset is -1001


def fence(client: Mapping[str, str], transactional_id: str) -> None:
    """Aborts whatever transaction `transactional_id` has open (by fencing its producer),
    so that read_committed readers are not held back until its timeout."""
    from confluent_kafka import Producer

    Producer(transactional_config(client, transactional_id)).init_transactions(TXN_TIMEOUT_S)


def ensure_commits_topic(client: Mapping[str, str]) -> None:
    """Makes COMMITS_TOPIC (one partition) unless it exists; on the driver, before any task."""
    from confluent_kafka import KafkaError, KafkaException

    # confluent_kafka.admin re-exports these from private modules without an __all__.
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(dict(client))
    if COMMITS_TOPIC in admin.list_topics(timeout=TXN_TIMEOUT_S).topics:
        return
    future = admin.create_topics([NewTopic(COMMITS_TOPIC, 1)])[COMMITS_TOPIC]
    try:
        future.result(timeout=TXN_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # made by a concurrent write
            raise WriteError(f"could not make {COMMITS_TOPIC}: {exc.args[0].str()}") from None


def _commits_partition(offset: int = -1001) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(COMMITS_TOPIC, COMMITS_PARTITION, offset)


def _marker_consumer(client: Mapping[str, str], group: str) -> Any:
    from confluent_kafka import Consumer

    config: dict[str, Any] = dict(client)
    for producer_only in ("linger.ms", "acks", "compression.type", "transaction.timeout.ms"):
        config.pop(producer_only, None)  # librdkafka would warn about each
    config.update(
        {"group.id": group, "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    return Consumer(config)


def _abort_quietly(producer: Any) -> None:
    from confluent_kafka import KafkaException

    # Fenced or fatal: the broker aborts it (the next attempt's fencing, or the transaction
    # timeout); the original error is the one to report.
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(TXN_TIMEOUT_S)


def _failure_collector(failures: list[str]) -> Any:
    def on_error(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    return on_error


def _raise_failures(failures: list[str]) -> None:
    if failures:
        raise WriteError(_failure_message(failures))


def _failure_message(failures: list[str]) -> str:
    return f"{len(failures)} record(s) were not written: {'; '.join(failures[:3])}"


def _produce_all(
    producer: Any, batches: Iterator[Any], topic: str | None, failures: list[str]
) -> int:
    """Produces every row until the batches end or a delivery fails; returns the rows given
    to the producer (not yet acknowledged)."""
    produce = producer.produce
    written = 0
    for batch in batches:
        columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = columns["value"].to_pylist()
        keys = columns["key"].to_pylist() if "key" in columns else [None] * n
        topics = [topic] * n if topic is not None else columns["topic"].to_pylist()
        partitions = columns["partition"].to_pylist() if "partition" in columns else None
        headers = columns["headers"].to_pylist() if "headers" in columns else None
        for i in range(n):
            row_topic = topics[i]
            if row_topic is None:
                raise WriteError(
                    "a row has a null topic and no `topic` option is set; every record "
                    "needs a topic"
                )
            kwargs: dict[str, Any] = {}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(row_topic, values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    # librdkafka's local queue is full: let deliveries drain, then retry.
                    producer.poll(0.05)
            if failures:
                break
        written += n
        producer.poll(0)
        if failures:
            break
    return written
