"""The exactly-once sink's two-phase commit: tasks prepare, Spark's batch commit commits.

With `deliveryGuarantee=exactly-once` a write is atomic as Spark sees it: every task's rows
become visible to read_committed readers when the driver commits the batch (or the job),
and none do when it fails. Kafka has no transaction spanning producers, so each task writes
in a transaction of its own and leaves it open ("prepared"); the driver then ends all of
them. This module is the driver's half, write.py the task's.

Phase one, on the executors (`write.write_transactionally`): a task fences earlier attempts
of itself (`init_transactions`), writes its rows, waits until every one is acknowledged and
returns, as Spark's commit message, its transaction's identity (`PreparedTxn`: transactional
id, producer id, epoch), read from the coordinator (DescribeTransactions). The producer is
dropped without ending the transaction.

Phase two, on the driver (`commit`):

    1. the decision so far: has this write (query) already decided this batch? (a replay
       after a driver crash) -> roll it forward: commit what it lists, and stop
    2. check every prepared transaction is still open with the producer id and epoch its
       task reported (none was fenced or timed out); any missing -> abort all, fail
    3. log the decision durably: a record on COMMITS_TOPIC listing the transactions, then
       the offset batch id + 1 committed to the write's decision group, naming the record
    4. EndTxn(commit) of each transaction: it names the producer id and epoch, which is all
       the coordinator checks, so the driver can end a transaction it did not begin

Crashes: before 3, nothing is decided; the transactions stay open until a replay's tasks
fence them (their `init_transactions` aborts them) or their timeout aborts them. After 3,
the batch is decided: a replay finds the decision, its tasks write nothing (write.py checks
it before fencing anything), and its driver commits the listed transactions still open (an
EndTxn retried on a committed one is answered NONE). So a batch is visible whole or not at
all, and once at most, provided the driver comes back within the transaction timeout: a
decided transaction the broker has since aborted for its age is lost, and `commit` says so
(the same bound as Flink's Kafka sink).

Spark's `abort` (`abort`): before a decision, it aborts every prepared transaction and fences
those of failed tasks (so they do not hold read_committed readers back until they time out);
after one (a commit that failed in step 4), it rolls forward instead, so that a batch never
ends up torn.

Bounds: one connection to the coordinator, one request in flight; every retry of a
retriable error (the coordinator busy ending a transaction) stops after `END_WAIT_S`; a
decision lists at most one transaction per Spark partition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weirmq.cli.clients import Address, Bootstrap, BrokerUnreachable, CommandError, parse_bootstrap
from weirmq.cli.kafka_request import KafkaConnection, VersionRange

FIND_COORDINATOR = 10
END_TXN = 26
DESCRIBE_TRANSACTIONS = 65
TRANSACTION_COORDINATOR = 1
"""FindCoordinator's key type of a transactional id."""
FIND_COORDINATOR_VERSIONS = VersionRange(4, 6)
"""v4 asks for many keys at once."""
END_TXN_VERSIONS = VersionRange(0, 4)
DESCRIBE_TRANSACTIONS_VERSIONS = VersionRange(0, 0)
LIST_TRANSACTIONS = 66
LIST_TRANSACTIONS_VERSIONS = VersionRange(0, 0)

COMMITS_TOPIC = "__weirmq_spark_commits"
"""Holds the decisions: a record per decided batch, and the decision groups' offsets."""
COMMITS_PARTITION = 0
WAIT_S = 60.0
"""Longest wait for the decision's record, offset, or a lookup."""
END_WAIT_S = 60.0
"""Longest time one EndTxn is retried while the coordinator answers a retriable error."""
RETRY_BACKOFF_S = 0.05

NONE = 0
CONCURRENT_TRANSACTIONS = 51
RETRIABLE = frozenset({14, 15, 16, CONCURRENT_TRANSACTIONS})
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and
CONCURRENT_TRANSACTIONS (markers of an end still being written)."""
ONGOING = "Ongoing"


class TwoPhaseError(RuntimeError):
    """A batch could not be committed (or rolled forward); the message says which task."""


@dataclass(frozen=True, slots=True)
class PreparedTxn:
    """One task's open transaction, as the coordinator knows it."""

    partition: int
    transactional_id: str
    producer_id: int
    producer_epoch: int

    def as_json(self) -> list[Any]:
        return [self.partition, self.transactional_id, self.producer_id, self.producer_epoch]

    @classmethod
    def from_json(cls, item: Sequence[Any]) -> PreparedTxn:
        partition, transactional_id, producer_id, epoch = item
        return cls(int(partition), str(transactional_id), int(producer_id), int(epoch))


@dataclass(frozen=True, slots=True)
class TxnView:
    """What DescribeTransactions says of one transactional id."""

    state: str
    producer_id: int
    producer_epoch: int


def encode_decision(batch_id: int, txns: Iterable[PreparedTxn]) -> bytes:
    body = {"batch": batch_id, "transactions": [t.as_json() for t in txns]}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_decision(value: bytes, batch_id: int) -> list[PreparedTxn]:
    """The transactions a decision record lists; TwoPhaseError if it is not batch_id's."""
    try:
        body = json.loads(value)
        decided = int(body["batch"])
        txns = [PreparedTxn.from_json(item) for item in body["transactions"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise TwoPhaseError(
            f"the decision record of batch {batch_id} is unreadable: {exc}"
        ) from None
    if decided != batch_id:
        raise TwoPhaseError(f"the decision record names batch {decided}, not {batch_id}")
    return txns


class Coordinator:
    """A connection to the transaction coordinator of a set of transactional ids."""

    def __init__(self, connection: KafkaConnection) -> None:
        self.connection = connection

    @classmethod
    def open(cls, bootstrap_servers: str, transactional_ids: Sequence[str]) -> Coordinator:
        """Connects to the coordinator of `transactional_ids` (one broker for them all:
        WeirMQ's single node, which FindCoordinator names)."""
        bootstrap = parse_bootstrap(bootstrap_servers)
        connection = _open(bootstrap)
        try:
            version = connection.version_for(FIND_COORDINATOR, FIND_COORDINATOR_VERSIONS)
            response = connection.request(
                FIND_COORDINATOR,
                version,
                {"key_type": TRANSACTION_COORDINATOR, "coordinator_keys": list(transactional_ids)},
            )
            nodes = set()
            for found in response.coordinators:
                if found.error_code != NONE:
                    raise TwoPhaseError(
                        f"no coordinator for {found.key}: error {found.error_code}"
                        f" ({found.error_message or 'no reason given'})"
                    )
                nodes.add(Address(found.host, int(found.port)))
        except BaseException:
            connection.close()
            raise
        if len(nodes) > 1:
            connection.close()
            raise TwoPhaseError(f"the transactions have {len(nodes)} coordinators; one expected")
        if nodes and str(next(iter(nodes))) != connection.peer:
            connection.close()
            address = nodes.pop()
            connection = _open(Bootstrap(str(address), (address,)))
        return cls(connection)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def describe(self, transactional_id: str) -> TxnView:
        """The state, producer id and epoch of an id with an open transaction. An id with
        none (its start time is -1, which kio cannot read) is TwoPhaseError too."""
        version = self.connection.version_for(DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSIONS)
        try:
            response = self.connection.request(
                DESCRIBE_TRANSACTIONS, version, {"transactional_ids": [transactional_id]}
            )
        except BrokerUnreachable as exc:
            raise TwoPhaseError(
                f"could not read the transaction of {transactional_id} as open: {exc}"
            ) from None
        [found] = response.transaction_states
        if found.error_code != NONE:
            raise TwoPhaseError(
                f"could not describe the transaction of {transactional_id}: "
                f"error {found.error_code}"
            )
        return TxnView(
            str(found.transaction_state), int(found.producer_id), int(found.producer_epoch)
        )

    def state_of(self, txn: PreparedTxn) -> str | None:
        """The state of `txn`'s id if its producer id is still `txn`'s (ListTransactions,
        which, unlike DescribeTransactions, reads whatever the state), else None."""
        version = self.connection.version_for(LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSIONS)
        response = self.connection.request(
            LIST_TRANSACTIONS,
            version,
            {"state_filters": [], "producer_id_filters": [txn.producer_id]},
        )
        if response.error_code != NONE:
            raise TwoPhaseError(f"could not list the transactions: error {response.error_code}")
        for found in response.transaction_states:
            if found.transactional_id == txn.transactional_id:
                return str(found.transaction_state)
        return None

    def end(self, txn: PreparedTxn, *, commit: bool) -> int:
        """EndTxn for `txn`, retried while the answer is retriable; its last error code
        (NONE: ended, or already ended so, before)."""
        version = self.connection.version_for(END_TXN, END_TXN_VERSIONS)
        data = {
            "transactional_id": txn.transactional_id,
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "committed": commit,
        }
        deadline = time.monotonic() + END_WAIT_S
        while True:
            error = int(self.connection.request(END_TXN, version, data).error_code)
            if error not in RETRIABLE or time.monotonic() >= deadline:
                return error
            time.sleep(RETRY_BACKOFF_S)


def _open(bootstrap: Bootstrap) -> KafkaConnection:
    try:
        return KafkaConnection.open(bootstrap, client_id="weirmq-spark-driver")
    except CommandError as exc:
        raise TwoPhaseError(f"cannot reach the transaction coordinator: {exc.message}") from None


def check_prepared(coordinator: Coordinator, txns: Iterable[PreparedTxn]) -> list[str]:
    """Phase two, step 2: what is wrong with each transaction that is not open as its task
    reported it (an empty list: all are)."""
    problems = []
    for txn in txns:
        state = coordinator.state_of(txn)
        view = coordinator.describe(txn.transactional_id) if state == ONGOING else None
        reported = (txn.producer_id, txn.producer_epoch)
        if view is None or (view.state, view.producer_id, view.producer_epoch) != (
            ONGOING,
            *reported,
        ):
            now = (
                f"{view.state} at producer {view.producer_id} epoch {view.producer_epoch}"
                if view is not None
                else (state or "unknown to the coordinator")
            )
            problems.append(
                f"partition {txn.partition}: {txn.transactional_id} is {now}, its task "
                f"prepared producer {txn.producer_id} epoch {txn.producer_epoch} (fenced by "
                "another attempt, or aborted by the transaction timeout)"
            )
    return problems


def commit_all(coordinator: Coordinator, txns: Iterable[PreparedTxn], batch_id: int) -> None:
    """Phase two, step 4 (and a roll-forward): commit every transaction of a decided batch.
    Every one is tried; TwoPhaseError names those that could not be committed."""
    failed = []
    for txn in txns:
        error = coordinator.end(txn, commit=True)
        if error != NONE:
            failed.append(f"partition {txn.partition} ({txn.transactional_id}): error {error}")
    if failed:
        raise TwoPhaseError(
            f"batch {batch_id} was decided but {len(failed)} of its transactions could not be "
            f"committed: {'; '.join(failed[:5])}. A transaction aborted since (past "
            "transaction.timeout.ms) has lost its task's rows"
        )


def abort_all(coordinator: Coordinator, txns: Iterable[PreparedTxn]) -> list[str]:
    """Aborts every transaction still open as prepared; what could not be (best effort:
    the next attempt's fencing or the transaction timeout aborts it anyway)."""
    failed = []
    for txn in txns:
        error = coordinator.end(txn, commit=False)
        if error != NONE:
            failed.append(f"{txn.transactional_id}: error {error}")
    return failed


def prepared_of(messages: Iterable[Any]) -> list[PreparedTxn]:
    """The prepared transactions among Spark's commit messages (None for a failed task)."""
    return [txn for m in messages if (txn := getattr(m, "txn", None)) is not None]


# --- the decision: a record on COMMITS_TOPIC and the decision group's offset ------------------


def decided_batches(client: Mapping[str, str], group: str) -> tuple[int, str]:
    """How many batches of a write are decided (the decision group's committed offset on
    COMMITS_TOPIC, 0 for none), and the metadata naming the last decision's record."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_consumer_config(client, group))
    try:
        [found] = consumer.committed([TopicPartition(COMMITS_TOPIC, COMMITS_PARTITION)], WAIT_S)
    finally:
        consumer.close()
    if found.error is not None:
        raise TwoPhaseError(f"could not read the decisions of {group}: {found.error}")
    return max(int(found.offset), 0), found.metadata or ""  # no offset is -1001


def log_decision(
    client: Mapping[str, str], group: str, batch_id: int, txns: Sequence[PreparedTxn]
) -> None:
    """Phase two, step 3: the record listing the transactions, acknowledged by every
    replica, then the decision group's offset batch_id + 1 naming it."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    written: list[Any] = []
    producer = Producer(
        {**_producer_config(client), "on_delivery": lambda err, msg: written.append((err, msg))}
    )
    producer.produce(
        COMMITS_TOPIC, encode_decision(batch_id, txns), group.encode(), partition=COMMITS_PARTITION
    )
    producer.flush(WAIT_S)
    if len(written) != 1 or written[0][0] is not None:
        problem = written[0][0] if written else "not acknowledged in time"
        raise TwoPhaseError(f"could not log the decision of batch {batch_id}: {problem}")
    record_offset = written[0][1].offset()
    consumer = Consumer(_consumer_config(client, group))
    try:
        mark = TopicPartition(
            COMMITS_TOPIC, COMMITS_PARTITION, batch_id + 1, metadata=str(record_offset)
        )
        [done] = consumer.commit(offsets=[mark], asynchronous=False)
    finally:
        consumer.close()
    if done.error is not None:
        raise TwoPhaseError(f"could not log the decision of batch {batch_id}: {done.error}")


def read_decision(
    client: Mapping[str, str], group: str, batch_id: int, metadata: str
) -> list[PreparedTxn]:
    """The transactions of a decided batch, from the record the decision's offset names."""
    from confluent_kafka import Consumer, TopicPartition

    try:
        record_offset = int(metadata)
    except ValueError:
        raise TwoPhaseError(
            f"batch {batch_id} of {group} is decided but names no decision record ({metadata!r})"
        ) from None
    consumer = Consumer(_consumer_config(client, group))
    try:
        consumer.assign([TopicPartition(COMMITS_TOPIC, COMMITS_PARTITION, record_offset)])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            if message.offset() == record_offset:
                return decode_decision(message.value() or b"", batch_id)
            break  # past it: the record is gone (retention)
    finally:
        consumer.close()
    raise TwoPhaseError(
        f"the decision record of batch {batch_id} of {group} (offset {record_offset} of "
        f"{COMMITS_TOPIC}) could not be read"
    )


def _consumer_config(client: Mapping[str, str], group: str) -> dict[str, Any]:
    config: dict[str, Any] = dict(client)
    for producer_only in ("linger.ms", "acks", "compression.type", "transaction.timeout.ms"):
        config.pop(producer_only, None)  # librdkafka would warn about each
    config.update({"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "error"})
    return config


def _producer_config(client: Mapping[str, str]) -> dict[str, Any]:
    config: dict[str, Any] = dict(client)
    config.update({"enable.idempotence": True, "acks": "all", "linger.ms": 0})
    return config


# --- the two halves Spark calls on the driver --------------------------------------------------


def commit(
    client: Mapping[str, str], group: str, batch_id: int, txns: Sequence[PreparedTxn]
) -> None:
    """Spark's batch commit of an exactly-once write (module docstring, phase two)."""
    decided, metadata = decided_batches(client, group)
    if decided > batch_id + 1:
        return  # later batches were decided since: this one was committed before them
    if decided > batch_id:
        txns = read_decision(client, group, batch_id, metadata)  # a replay: roll forward
        if txns:
            with _coordinator(client, txns) as c:
                commit_all(c, txns, batch_id)
        return
    if not txns:
        return  # no task wrote a row
    with _coordinator(client, txns) as c:
        problems = check_prepared(c, txns)
        if problems:
            abort_all(c, txns)
            raise TwoPhaseError(
                f"batch {batch_id} is not committed, and nothing of it is visible: "
                + "; ".join(problems[:5])
            )
        log_decision(client, group, batch_id, txns)
        commit_all(c, txns, batch_id)


def abort(
    client: Mapping[str, str],
    group: str,
    batch_id: int,
    txns: Sequence[PreparedTxn],
    failed_ids: Sequence[str],
) -> list[str]:
    """Spark's abort: aborts the prepared transactions and fences `failed_ids` (the ids of
    failed tasks) unless the batch was decided, which rolls it forward instead. Returns
    what could not be aborted (best effort)."""
    from confluent_kafka import Producer

    decided, _ = decided_batches(client, group)
    if decided > batch_id:
        commit(client, group, batch_id, txns)
        return []
    problems = []
    if txns:
        with _coordinator(client, txns) as c:
            problems = abort_all(c, txns)
    for transactional_id in failed_ids:
        config = {**_producer_config(client), "transactional.id": transactional_id}
        try:
            Producer(config).init_transactions(WAIT_S)  # fences it: its open transaction aborts
        except Exception as exc:  # best effort, as above
            problems.append(f"{transactional_id}: {exc}")
    return problems


def _coordinator(client: Mapping[str, str], txns: Sequence[PreparedTxn]) -> Coordinator:
    return Coordinator.open(client["bootstrap.servers"], [t.transactional_id for t in txns])
