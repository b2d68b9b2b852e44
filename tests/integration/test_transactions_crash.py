"""Kafka transactions survive kill -9 of the broker in every phase, and of their clients.

Theory of operation. The transaction coordinator (broker/txn_service.py) makes a crash in
any phase recoverable by the order of its writes: PREPARE_* fsynced, then a marker to
every partition and the pending offsets to their groups, fsynced, then COMPLETE_*; from
the start of a restarted broker its timer completes what was left in PREPARE_*, and
aborts (fencing) what is still open past its timeout. Housekeeping keeps its default
period here (5 minutes), so nothing but that timer can do it in time. These tests
SIGKILL a real broker (conftest.BrokerProcess),
restart it on the same data directory and port, and judge the outcome only through what
confluent-kafka clients see:

- a transaction left open by a crash (records written, no EndTxn) is aborted, by its
  timeout or by the fencing of a new producer with the same transactional.id; a
  read_committed consumer never sees its records and is not stuck behind it;
- a zombie, a producer that outlived the broker with its transaction open, is fenced by
  its successor: none of its records shows, its commit fails;
- a transaction ended while the broker dies (killed within a few milliseconds of the
  coordinator appending PREPARE_COMMIT, which the test sees as the growth of
  __transaction_state on disk, or right after commit_transaction returned; which phase
  each kill hit is printed) is wholly visible to read_committed or
  wholly invisible, never in part, and wholly visible whenever commit_transaction
  returned; committed records keep their order;
- an abort's entry in the aborted-transaction index (.txnindex) is written by the log's
  flush, after the marker: a crash between the two leaves the marker without its entry.
  The window is too short to aim a kill at, so the test makes that state by deleting
  the .txnindex files after the kill; the broker must rebuild the entries from the log;
- a consume-transform-produce loop (txn_loop.py, in a process of its own) that commits
  each batch with its group's offsets turns every input record into exactly one output
  record, though it and the broker are killed at random moments along the way.

"Not stuck" is checked as a user would: a read_committed consumer reads until it reaches
the high watermark (librdkafka reports the end of a read_committed partition at the last
stable offset), and read_committed ListOffsets (a read_committed consumer's watermark
query) must then give the high watermark: no transaction is left open anywhere.

Random moments come from one seed per test, printed, so a failure can be replayed
(``TXN_CRASH_SEED=...``). Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from integration_support import (
    Deadline,
    ErrorLog,
    committed_offsets,
    consumer_config,
    create_topic,
    high_watermarks,
)
from txn_loop import RECOVERY

from weirmq.storage.manager import BOOT_ID_FILE

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOOP_SCRIPT = Path(__file__).resolve().parent / "txn_loop.py"
EXIT_ABORTED = 3
"""txn_loop.py's exit code after it aborted a transaction, as the client asked."""
PARTITIONS = 3
CALL_TIMEOUT_S = 30.0
"""Bound of each blocking client call (init, commit, abort, flush)."""
TEST_BUDGET_S = 120.0
CLEANUP_INTERVAL_MS = 200
"""transaction.abort.timed.out.transaction.cleanup.interval.ms of the brokers here."""
SHORT_TXN_TIMEOUT_MS = 2_000
LONG_TXN_TIMEOUT_MS = 60_000
"""Longer than any test: only fencing may end such a transaction early."""
CLIENT_EXIT_TIMEOUT_S = 10.0
COMMIT_ATTEMPTS_MAX = 5

Record = tuple[int, bytes, bytes]  # (offset, key, value) of a consumed record


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("TXN_CRASH_SEED", random.randrange(2**32)))
    print(f"{name}: TXN_CRASH_SEED={seed}")
    return random.Random(seed)


def start_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker whose transaction timer runs every CLEANUP_INTERVAL_MS. Nothing else is
    tuned: housekeeping keeps its default (5 minutes), so after a restart only the timer
    the broker starts with itself can end what a crash left open or half ended."""
    return broker_factory(
        amqp_listen="off",
        sqs_listen="off",
        transaction_abort_timed_out_transaction_cleanup_interval_ms=CLEANUP_INTERVAL_MS,
    )


def txn_producer(bootstrap: str, txn_id: str, errors: ErrorLog) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # No re-bootstrap while the one broker is down, and reconnect within a
            # second of its restart: see txn_loop.RECOVERY.
            **RECOVERY,
            "transactional.id": txn_id,
            "transaction.timeout.ms": LONG_TXN_TIMEOUT_MS,
            "error_cb": errors.error_cb,
        }
    )
    producer.init_transactions(CALL_TIMEOUT_S)
    return producer


def commit_or_abort(producer: Producer) -> str:
    """End the open transaction as a careful application does: retry a commit that
    failed retriably (the broker was down), abort when the client says the transaction
    must be aborted. "committed" or "aborted"; a fatal error fails the test."""
    for _attempt in range(COMMIT_ATTEMPTS_MAX):
        try:
            producer.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.retriable():
                continue
            assert error.txn_requires_abort(), f"commit_transaction: fatal {error}"
            producer.abort_transaction(CALL_TIMEOUT_S)
            return "aborted"
        return "committed"
    raise AssertionError(f"commit_transaction failed {COMMIT_ATTEMPTS_MAX} times")


# -- reading what read_committed sees ----------------------------------------------------------


def watermarks(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    """ListOffsets(latest) of every partition: the high watermark for read_uncommitted,
    the last stable offset for read_committed."""
    consumer = Consumer(consumer_config(bootstrap, ErrorLog(), **{"isolation.level": isolation}))
    try:
        return high_watermarks(consumer, topic, list(range(PARTITIONS)))
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, deadline: Deadline) -> dict[int, list[Record]]:
    """Every record a read_committed consumer reads from the beginning, per partition, once
    it has reached the high watermark of each (it cannot pass an open transaction); then
    the last stable offsets must equal the high watermarks."""
    high = watermarks(bootstrap, topic, "read_uncommitted")
    errors = ErrorLog()
    consumer = Consumer(
        consumer_config(
            bootstrap, errors, **{"isolation.level": "read_committed", "enable.partition.eof": True}
        )
    )
    found: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    end = dict.fromkeys(range(PARTITIONS), -1)
    try:
        consumer.assign(
            [KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        while any(end[p] < high[p] for p in range(PARTITIONS)):
            deadline.check(
                f"read_committed reached {end}, high watermarks {high}: "
                "the last stable offset stays below the high watermark"
            )
            for message in consumer.consume(num_messages=1000, timeout=deadline.remaining(0.5)):
                error = message.error()
                partition = message.partition()
                if error is None:
                    found[partition].append((message.offset(), message.key(), message.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    end[partition] = message.offset()
                else:
                    raise AssertionError(f"consumer error: {error.name()}: {error.str()}")
    finally:
        consumer.close()
    assert errors.snapshot() == []
    stable = watermarks(bootstrap, topic, "read_committed")
    high = watermarks(bootstrap, topic, "read_uncommitted")
    assert stable == high, f"last stable offsets {stable} below high watermarks {high}"
    return found


def values(found: dict[int, list[Record]]) -> dict[int, list[bytes]]:
    return {p: [value for _offset, _key, value in records] for p, records in found.items()}


# -- a client in a process of its own -----------------------------------------------------------


class ClientProcess:
    """``txn_loop.py`` with these arguments; its JSON events are collected as they come."""

    def __init__(self, args: list[str], log_dir: Path, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._stderr_path = log_dir / f"{name}.stderr"
        with self._stderr_path.open("wb") as stderr:
            self._proc = subprocess.Popen(
                [sys.executable, str(LOOP_SCRIPT), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert self._proc.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout,), name=f"{name}-reader", daemon=True
        )
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self.events.append(json.loads(line))

    def wait_for(self, kind: str, deadline: Deadline) -> None:
        while not any(e["kind"] == kind for e in self.events):
            deadline.check(f"{self.name}: no {kind!r} event; events {self.events[-5:]}")
            assert self._proc.poll() is None or any(e["kind"] == kind for e in self.events), (
                f"{self.name} exited with {self._proc.returncode}: {self.events[-5:]} "
                f"{self.stderr_tail()}"
            )
            time.sleep(0.02)

    def count(self, kind: str) -> int:
        return sum(1 for e in list(self.events) if e["kind"] == kind)

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(CLIENT_EXIT_TIMEOUT_S)
        self._reader.join(CLIENT_EXIT_TIMEOUT_S)
        assert self._proc.stdout is not None
        self._proc.stdout.close()

    def stderr_tail(self) -> str:
        return self._stderr_path.read_bytes()[-3000:].decode("utf-8", "replace")


# -- 1a: records written, no EndTxn ----------------------------------------------------------


@pytest.mark.parametrize("ending", ["timeout", "fencing"])
def test_transaction_left_open_by_a_crash_is_aborted(
    broker_factory: BrokerFactory, tmp_path: Path, ending: str
) -> None:
    """The broker and the producer are killed with a transaction open (its records
    acknowledged, no EndTxn). After the restart the transaction is aborted by its timeout,
    or by a new producer of the same transactional.id (init_transactions fences it)."""
    deadline = Deadline(TEST_BUDGET_S, f"open transaction, ended by {ending}")
    broker = start_broker(broker_factory)
    topic, txn_id, records = f"open-{ending}", f"open-{ending}", 30
    create_topic(broker.bootstrap, topic, PARTITIONS)
    timeout_ms = SHORT_TXN_TIMEOUT_MS if ending == "timeout" else LONG_TXN_TIMEOUT_MS
    client = ClientProcess(
        [
            "open",
            *("--bootstrap", broker.bootstrap, "--txn-id", txn_id, "--topic", topic),
            *("--partitions", str(PARTITIONS), "--records", str(records)),
            *("--timeout-ms", str(timeout_ms)),
        ],
        tmp_path,
        "open-client",
    )
    try:
        client.wait_for("open", deadline)
        broker.kill()
    finally:
        client.kill()
    broker.restart()

    expected = {
        p: [b"committed-%d" % i for i in range(p, records, PARTITIONS)] for p in range(PARTITIONS)
    }
    if ending == "fencing":
        errors = ErrorLog()
        producer = txn_producer(broker.bootstrap, txn_id, errors)
        producer.begin_transaction()
        for i in range(records):
            producer.produce(topic, key=b"%d" % i, value=b"after-%d" % i, partition=i % PARTITIONS)
        assert commit_or_abort(producer) == "committed"
        for p in range(PARTITIONS):
            expected[p] += [b"after-%d" % i for i in range(p, records, PARTITIONS)]
    seen = values(read_committed(broker.bootstrap, topic, deadline))
    assert seen == expected


def test_zombie_producer_is_fenced_after_restart(broker_factory: BrokerFactory) -> None:
    """A producer outlives the broker with its transaction open; after the restart a new
    producer of the same transactional.id fences it. The old one's records, written before
    the kill and after the fencing, stay invisible, and its commit fails."""
    deadline = Deadline(TEST_BUDGET_S, "zombie producer after a restart")
    broker = start_broker(broker_factory)
    topic, txn_id = "zombie", "zombie"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    zombie = txn_producer(broker.bootstrap, txn_id, ErrorLog())
    zombie.begin_transaction()
    for i in range(6):
        zombie.produce(topic, value=b"zombie-%d" % i, partition=i % PARTITIONS)
    assert zombie.flush(CALL_TIMEOUT_S) == 0
    broker.kill()
    broker.restart()

    successor = txn_producer(broker.bootstrap, txn_id, ErrorLog())
    successor.begin_transaction()
    for i in range(6):
        successor.produce(topic, value=b"successor-%d" % i, partition=i % PARTITIONS)
    assert commit_or_abort(successor) == "committed"
    for i in range(6):
        zombie.produce(topic, value=b"late-%d" % i, partition=i % PARTITIONS)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(CALL_TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error

    seen = values(read_committed(broker.bootstrap, topic, deadline))
    assert seen == {p: [b"successor-%d" % i for i in (p, p + 3)] for p in range(PARTITIONS)}


@pytest.mark.parametrize("stop", ["process", "machine"])
def test_a_transaction_open_across_a_crash_commits_unless_the_machine_crashed(
    broker_factory: BrokerFactory, stop: str
) -> None:
    """A producer outlives the broker with its transaction open and its records
    acknowledged: acknowledged once written, they are fsynced only at the commit. After
    kill -9 of the broker's process the kernel kept them, and the producer commits. After
    a crash of the machine (made here by recording another boot id in the data directory,
    storage/manager.py) they may be gone, so the broker fences every transaction: the
    producer's commit fails fatally, read_committed shows none of its records, and a new
    producer of the same transactional.id goes on."""
    deadline = Deadline(TEST_BUDGET_S, f"open transaction across a {stop} crash")
    broker = start_broker(broker_factory)
    topic, txn_id = f"across-{stop}", f"across-{stop}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    errors = ErrorLog()
    producer = txn_producer(broker.bootstrap, txn_id, errors)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"before-%d" % i, partition=i % PARTITIONS)
    assert producer.flush(CALL_TIMEOUT_S) == 0
    broker.kill()
    if stop == "machine":
        (broker.data_dir / BOOT_ID_FILE).write_text("a-boot-before-this-one\n")
    broker.restart()

    if stop == "process":
        assert commit_or_abort(producer) == "committed"
        expected = {p: [b"before-%d" % i for i in (p, p + 3)] for p in range(PARTITIONS)}
    else:
        fatal = None
        for _attempt in range(COMMIT_ATTEMPTS_MAX):
            try:
                producer.commit_transaction(CALL_TIMEOUT_S)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable():
                    continue
                fatal = error
                break
            raise AssertionError("the commit of a fenced transaction succeeded")
        assert fatal is not None and fatal.fatal(), fatal
        successor = txn_producer(broker.bootstrap, txn_id, ErrorLog())
        successor.begin_transaction()
        for i in range(6):
            successor.produce(topic, value=b"after-%d" % i, partition=i % PARTITIONS)
        assert commit_or_abort(successor) == "committed"
        expected = {p: [b"after-%d" % i for i in (p, p + 3)] for p in range(PARTITIONS)}
    assert values(read_committed(broker.bootstrap, topic, deadline)) == expected


# -- 1b: kill -9 while commit_transaction() is in flight, or right after it returned ---------


class KillAndRestart(threading.Thread):
    """Once the transaction log has grown (the coordinator appended PREPARE_* for the
    EndTxn under way) and `delay_s` more has passed, SIGKILL the broker and start it
    again; what failed is kept for the test's thread (`check`)."""

    def __init__(self, broker: BrokerProcess, delay_s: float, deadline: Deadline) -> None:
        super().__init__(name="kill-and-restart", daemon=True)
        self.broker = broker
        self.delay_s = delay_s
        self.deadline = deadline
        self.size_before = txn_log_bytes(broker)
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while txn_log_bytes(self.broker) == self.size_before:
                self.deadline.check("waiting for PREPARE in the transaction log")
                time.sleep(PREPARE_POLL_S)
            time.sleep(self.delay_s)
            self.broker.kill()
            self.broker.restart()
        except BaseException as exc:  # pytest.fail raises a BaseException
            self.failure = exc

    def check(self) -> None:
        self.join(STARTUP_JOIN_S)
        assert not self.is_alive(), "the broker did not come back"
        if self.failure is not None:
            raise self.failure


def restarts_completing(broker: BrokerProcess) -> str:
    """How many restarts found a transaction in PREPARE_* (the broker logs it): which
    phase the kills hit varies from run to run, and this says what a run covered."""
    found = [
        int(match.group(1))
        for path in sorted(broker.log_dir.glob("broker-*.stderr"))
        for match in re.finditer(rb"; (\d+) to complete", path.read_bytes())
    ]
    return f"{sum(1 for n in found if n)} of {len(found)} restarts completed a PREPARE_*"


def txn_log_bytes(broker: BrokerProcess) -> int:
    """The size of the transaction coordinator's log (__transaction_state) on disk."""
    return sum(p.stat().st_size for p in broker.data_dir.glob("__transaction_state-0/*.log"))


STARTUP_JOIN_S = 40.0
END_TXNS = 24
END_RECORDS_PER_TXN = 6
KILLS_DURING_COMMIT = 4
KILLS_AFTER_COMMIT = 2
PREPARE_POLL_S = 0.0002
KILL_DELAY_MAX_S = 0.003
"""A kill lands this long at most after PREPARE_* was appended: while the broker fsyncs
it, writes the markers and the offsets, fsyncs them, logs COMPLETE_*."""


def run_end_txn_kills(
    broker: BrokerProcess, topic: str, rng: random.Random, deadline: Deadline
) -> dict[int, str]:
    """Transactions 0 .. END_TXNS-1, some killed mid-commit or right after; how each
    ended as the client saw it ("committed", "aborted")."""
    chosen = rng.sample(range(1, END_TXNS), KILLS_DURING_COMMIT + KILLS_AFTER_COMMIT)
    during, after = set(chosen[:KILLS_DURING_COMMIT]), set(chosen[KILLS_DURING_COMMIT:])
    print(f"kills during commit of {sorted(during)}, right after commit of {sorted(after)}")
    errors = ErrorLog()
    producer = txn_producer(broker.bootstrap, "end-txn", errors)
    outcome: dict[int, str] = {}
    for k in range(END_TXNS):
        deadline.check(f"transaction {k}")
        producer.begin_transaction()
        for i in range(END_RECORDS_PER_TXN):
            producer.produce(topic, key=b"%d" % k, value=b"%d-%d" % (k, i), partition=i % 3)
        killer = None
        if k in during:
            producer.flush(CALL_TIMEOUT_S)  # the log grows next with PREPARE_COMMIT
            delay_s = rng.choice([0.0, rng.uniform(0, KILL_DELAY_MAX_S)])
            killer = KillAndRestart(broker, delay_s, deadline)
            killer.start()
        started = time.monotonic()
        outcome[k] = commit_or_abort(producer)
        if killer is not None:
            killer.check()
        if k in after:
            broker.kill()
            broker.restart()
        if k in during or k in after:
            print(f"transaction {k}: {outcome[k]}, {time.monotonic() - started:.1f} s")
    producer.flush(CALL_TIMEOUT_S)
    return outcome


def test_kill_9_during_and_after_commit_transaction(
    broker_factory: BrokerFactory,
) -> None:
    """Each transaction is wholly visible to read_committed or wholly not; one whose
    commit_transaction() returned is visible; an aborted one is not; order is kept."""
    rng = seeded("end txn")
    deadline = Deadline(TEST_BUDGET_S, "kill -9 around EndTxn")
    broker = start_broker(broker_factory)
    topic = "end-txn"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    outcome = run_end_txn_kills(broker, topic, rng, deadline)
    print(f"outcomes: {Counter(outcome.values())}; {restarts_completing(broker)}")

    found = read_committed(broker.bootstrap, topic, deadline)
    visible: Counter[int] = Counter()
    for p, records in found.items():
        ends = [tuple(int(x) for x in value.split(b"-")) for _o, _k, value in records]
        assert ends == sorted(ends), f"partition {p}: records out of order: {ends}"
        assert all(i % 3 == p for _k, i in ends), f"partition {p}: {ends}"
        visible.update(k for k, _i in ends)
    partial = {k: n for k, n in visible.items() if n != END_RECORDS_PER_TXN}
    assert partial == {}, f"transactions partly visible (records seen): {partial}"
    lost = sorted(k for k, how in outcome.items() if how == "committed" and k not in visible)
    assert lost == [], f"committed transactions invisible after the restart: {lost}"
    shown = sorted(k for k, how in outcome.items() if how == "aborted" and k in visible)
    assert shown == [], f"aborted transactions visible: {shown}"


# -- 1c and 3: after EndTxn; the aborted-transaction index lost --------------------------------


def txnindex_files(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted(broker.data_dir.rglob(f"*{topic}*/*.txnindex"))


@pytest.mark.parametrize("index", ["kept", "lost"])
def test_ended_transactions_survive_kill_9(broker_factory: BrokerFactory, index: str) -> None:
    """Transactions committed and aborted, then kill -9 right after the last
    commit_transaction() returned: after the restart the committed records are visible
    in order and the aborted ones hidden. "lost": the .txnindex files are deleted after
    the kill, which is what a crash between an abort's marker and the flush of its index
    entry leaves; the broker must find the aborts again in the log. A clean stop first
    leaves a producer-state snapshot, so the replay starts after it, as it would in a
    broker that ran for a while."""
    deadline = Deadline(TEST_BUDGET_S, f"ended transactions, index {index}")
    broker = start_broker(broker_factory)
    topic = f"ended-{index}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    errors = ErrorLog()
    plan = [True, True, False, True, False, True]  # commit?

    def one(producer: Producer, k: int, commit: bool) -> None:
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, key=b"%d" % k, value=b"%d-%d" % (k, i), partition=i % 3)
        if commit:
            assert commit_or_abort(producer) == "committed"
        else:
            producer.flush(CALL_TIMEOUT_S)
            producer.abort_transaction(CALL_TIMEOUT_S)

    producer = txn_producer(broker.bootstrap, f"ended-{index}", errors)
    one(producer, 0, plan[0])
    producer.flush(CALL_TIMEOUT_S)
    del producer  # no transaction open: nothing for its destruction to end
    broker.stop()  # clean: the producer-state snapshot covers transaction 0
    broker.restart()
    producer = txn_producer(broker.bootstrap, f"ended-{index}", errors)
    for k, commit in enumerate(plan[1:], start=1):
        one(producer, k, commit)
    broker.kill()
    if index == "lost":
        files = txnindex_files(broker, topic)
        assert files, "an abort was made: some .txnindex must exist"
        for path in files:
            path.unlink()
    broker.restart()

    seen = values(read_committed(broker.bootstrap, topic, deadline))
    committed = [k for k, commit in enumerate(plan) if commit]
    expected = {p: [b"%d-%d" % (k, i) for k in committed for i in (p, p + 3)] for p in range(3)}
    assert seen == expected


# -- 2: consume-transform-produce, exactly once --------------------------------------------------


LOOP_INPUT_RECORDS = 5_000
LOOP_BATCH = 100
LOOP_KILLS = 3
BROKER_KILLS = 2
LOOP_RESTARTS_MAX = 20
"""Loop processes started at most (kills, and exits after an abort or a failure)."""
LOOP_BUDGET_S = 150.0
BROKER_DOWN = re.compile(r"^_(TRANSPORT|ALL_BROKERS_DOWN): ")
"""Errors a client reports while the broker is killed: expected, not reported."""


def fill_input(bootstrap: str, topic: str, deadline: Deadline) -> None:
    errors = ErrorLog()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "error_cb": errors.error_cb}
    )
    for n in range(LOOP_INPUT_RECORDS):
        while True:
            try:
                producer.produce(topic, key=b"%d" % n, value=b"id-%d" % n)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(deadline.remaining(CALL_TIMEOUT_S)) == 0
    assert errors.snapshot() == []


class Loops:
    """The loop processes one after the other (one at a time, same transactional.id and
    group), and the commits they reported."""

    def __init__(self, broker: BrokerProcess, args: list[str], log_dir: Path) -> None:
        self.broker = broker
        self.args = args
        self.log_dir = log_dir
        self.done: list[ClientProcess] = []
        self.exits: list[int | str] = []
        self.current = self._start()

    def _start(self) -> ClientProcess:
        number = len(self.done) + 1
        assert number <= LOOP_RESTARTS_MAX, f"loop started {LOOP_RESTARTS_MAX} times: {self}"
        args = ["transform", "--bootstrap", self.broker.bootstrap, *self.args]
        return ClientProcess(args, self.log_dir, f"loop-{number}")

    def commits(self) -> int:
        return sum(p.count("committed") for p in [*self.done, self.current])

    def kill(self) -> None:
        self.current.kill()
        self.exits.append("killed")
        self.done.append(self.current)
        self.current = self._start()

    def finished(self) -> bool:
        """Whether the loop has processed everything (a loop that stopped short is
        replaced)."""
        code = self.current.returncode
        if code is None:
            return False
        self.current.kill()  # reaps it, reads the rest of its events
        self.exits.append(code)
        if code == 0:
            return True
        self.done.append(self.current)
        self.current = self._start()
        return False

    def errors(self) -> list[str]:
        """What the loops reported besides their commits and the broker being down."""
        return [
            f"{p.name}: {e}"
            for p in [*self.done, self.current]
            for e in p.events
            if e["kind"] not in ("committed", "done") and not BROKER_DOWN.search(e.get("text", ""))
        ]

    def __repr__(self) -> str:
        return f"exits {self.exits}, events {self.errors()[-10:]}"


def kill_schedule(rng: random.Random) -> list[tuple[int, str]]:
    """(after this many commits, kill what): loop and broker kills at random points of
    the first two thirds of the run."""
    transactions = LOOP_INPUT_RECORDS // LOOP_BATCH
    points = sorted(rng.sample(range(2, transactions * 2 // 3), LOOP_KILLS + BROKER_KILLS))
    targets = ["loop"] * LOOP_KILLS + ["broker"] * BROKER_KILLS
    rng.shuffle(targets)
    return list(zip(points, targets, strict=True))


def test_consume_transform_produce_exactly_once_through_kills(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    rng = seeded("transform loop")
    deadline = Deadline(LOOP_BUDGET_S, "consume-transform-produce through kills")
    broker = start_broker(broker_factory)
    source, sink, group = "loop-in", "loop-out", "loop-group"
    create_topic(broker.bootstrap, source, PARTITIONS)
    create_topic(broker.bootstrap, sink, PARTITIONS)
    fill_input(broker.bootstrap, source, deadline)
    schedule = kill_schedule(rng)
    print(f"kill schedule (after n commits): {schedule}")
    loops = Loops(
        broker,
        [
            *("--input", source, "--output", sink, "--group", group, "--txn-id", "loop"),
            *("--partitions", str(PARTITIONS), "--batch", str(LOOP_BATCH)),
        ],
        tmp_path,
    )
    try:
        run_schedule(loops, broker, schedule, rng, deadline)
    finally:
        loops.current.kill()
    print(f"loop: {loops.commits()} commits; {loops!r}")
    failed = [code for code in loops.exits if code not in ("killed", 0, EXIT_ABORTED)]
    assert failed == [], f"loops failed: {loops!r}"

    found = read_committed(broker.bootstrap, sink, deadline)
    ids = Counter(
        int(value.removeprefix(b"out-id-")) for records in found.values() for _, _, value in records
    )
    doubled = sorted(n for n, times in ids.items() if times > 1)
    missing = sorted(set(range(LOOP_INPUT_RECORDS)) - set(ids))
    assert doubled == [], f"{len(doubled)} ids written twice: {doubled[:20]}"
    assert missing == [], f"{len(missing)} ids lost: {missing[:20]}"
    assert set(ids) == set(range(LOOP_INPUT_RECORDS))
    ends = watermarks(broker.bootstrap, source, "read_uncommitted")
    assert committed_offsets(broker.bootstrap, group, source, PARTITIONS) == ends


def run_schedule(
    loops: Loops,
    broker: BrokerProcess,
    schedule: list[tuple[int, str]],
    rng: random.Random,
    deadline: Deadline,
) -> None:
    """Kill as scheduled, restarting what was killed, until a loop finishes."""
    pending = list(schedule)
    actions: dict[str, Callable[[], None]] = {"loop": loops.kill, "broker": broker.kill}
    while not loops.finished():
        deadline.check(f"{loops.commits()} commits; {loops!r}")
        if pending and loops.commits() >= pending[0][0]:
            _, target = pending.pop(0)
            time.sleep(rng.uniform(0, KILL_DELAY_MAX_S))
            actions[target]()
            if target == "broker":
                broker.restart()
        time.sleep(0.01)
    assert pending == [], f"the loop finished before the kills {pending}"
