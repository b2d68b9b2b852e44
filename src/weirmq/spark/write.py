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

**exactly-once** (`write_transactionally`): phase one of a two-phase commit whose phase
two is Spark's batch commit, on the driver (twophase.py, which says why and how). A task
is named by a *write id* and a *batch id* (a streaming query's persistent id and the
micro-batch's id; a batch write's own random id and 0) and Spark's partition id. It:

    decided(decision group)          the driver has decided this batch already (a replay
                                     after a crash): write nothing, touch no transaction
    init_transactions(tid)           tid = <prefix>-<write id>-<partition>: fences every
                                     other attempt of the same task, aborting what it left
                                     open
    begin; produce the first row; flush; describe(tid): the producer id and epoch of this
        attempt's transaction, read from the coordinator (librdkafka does not tell them)
    produce every other row; flush
    describe(tid) again              still open at the same producer id and epoch: no other
                                     attempt fenced this one after its first row
    return PreparedTxn               Spark's commit message; the transaction stays open

The producer is dropped, not closed: confluent-kafka's `close()` aborts an open
transaction (its destructor does not; a test checks that the transaction survives). A task
with no rows opens no transaction and reports none.

The transactional id leaves out the batch id on purpose: a stream's task of partition p
then fences a zombie attempt of an earlier batch too, and a stream uses as many ids as it
has partitions, not a new set per micro-batch (the broker holds a bounded number).

Bounds: one producer (librdkafka's own bounded queue; `BufferError` makes us poll), one
consumer (the decision's check) and one connection to the coordinator per task; every wait
on the broker is bounded by `TXN_TIMEOUT_S` or the
transaction timeout (`DEFAULT_TRANSACTION_TIMEOUT_MS` unless `kafka.transaction.timeout.ms`
says otherwise: a task must finish writing, and the driver commit the batch, within it, or
the broker aborts the transaction and the batch fails).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from weirmq.spark.twophase import COMMITS_TOPIC, Coordinator, PreparedTxn, decided_batches

FLUSH_POLL_S = 1.0
TXN_TIMEOUT_S = 60.0
"""Longest wait for one transactional step (init, offsets, commit, abort) or a lookup."""
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000
"""A task's transaction is open while it writes and until the driver commits the batch:
long enough for a large batch (and a driver's restart after a crash in its commit), short
enough that a transaction left open by a lost executor does not hold read_committed readers
back for long (a retry fences it at once anyway). Below Kafka's default maximum, 15 min."""

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
    def decision_group(self) -> str:
        """The group whose offset on COMMITS_TOPIC counts the write's decided batches."""
        return decision_group(self.prefix, self.write_id)


def decision_group(prefix: str, write_id: str) -> str:
    return f"{prefix}-{write_id}"


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
) -> tuple[int, PreparedTxn | None] | None:
    """Phase one (module docstring): the number of records written and the transaction
    left open for the driver to commit (None when no row was written), or None when the
    batch is decided already (nothing is written again)."""
    from confluent_kafka import Producer

    decided, _ = decided_batches(client, task.decision_group)
    if decided > task.batch_id:
        for _ in batches:  # Spark expects its input consumed
            pass
        return None
    failures: list[str] = []
    config = transactional_config(client, task.transactional_id)
    producer = Producer(producer_config(config, _failure_collector(failures)))
    producer.init_transactions(TXN_TIMEOUT_S)
    producer.begin_transaction()
    coordinator = Coordinator.open(client["bootstrap.servers"], [task.transactional_id])
    opened: list[PreparedTxn] = []

    def after_first_row() -> None:
        _flush(producer)
        _raise_failures(failures)
        opened.append(_describe(coordinator, task))

    try:
        written = _produce_all(producer, batches, topic, failures, after_first_row)
        _flush(producer)
        _raise_failures(failures)
        if not opened:  # no row: nothing to prepare
            producer.abort_transaction(TXN_TIMEOUT_S)
            return written, None
        if _describe(coordinator, task) != opened[0]:
            raise WriteError(
                f"{task.transactional_id} was fenced by another attempt of this task while it wrote"
            )
    except Exception as exc:
        _abort_quietly(producer)
        if failures:  # the refused records say more than "the commit failed"
            raise WriteError(_failure_message(failures)) from exc
        raise
    finally:
        coordinator.close()
    # `producer` is dropped here without close(): the transaction stays open for the driver.
    return written, opened[0]


def _describe(coordinator: Coordinator, task: TaskIdentity) -> PreparedTxn:
    view = coordinator.describe(task.transactional_id)
    if view.state != "Ongoing":
        raise WriteError(f"{task.transactional_id} is {view.state}, not open, after a write")
    return PreparedTxn(task.partition, task.transactional_id, view.producer_id, view.producer_epoch)


def _flush(producer: Any) -> None:
    while producer.flush(FLUSH_POLL_S) > 0:
        pass


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
    producer: Any,
    batches: Iterator[Any],
    topic: str | None,
    failures: list[str],
    after_first_row: Callable[[], None] | None = None,
) -> int:
    """Produces every row until the batches end or a delivery fails; returns the rows given
    to the producer (not yet acknowledged). `after_first_row` runs once the first row is
    given to the producer."""
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
            if after_first_row is not None:
                after_first_row()
                after_first_row = None
            if failures:
                break
        written += n
        producer.poll(0)
        if failures:
            break
    return written
