"""The load of the soak test (test_soak.py): producers, group members, share members,
admin calls and a memory sampler, each in a thread of the test process, all real clients.

Theory of operation: every worker runs until told to stop, reports what it did to a
ledger and every error it saw to one `Problems` list; the test only starts and stops
workers and reads their ledgers. A record is named by its topic and the sequence number
its producer gave it (the ``seq`` header, as everywhere in the integration tests), so a
ledger can check exact sets at the end: every record the broker acknowledged was read by
each group, and a record never shows up at two offsets (an idempotent producer must not
write a retry twice).

Errors are collected, not raised: a soak must report all it saw, and its memory figures,
even when it fails. The errors a client may see without anything being wrong are few and
named where they are dropped (`BENIGN_COMMIT_ERRORS`); everything else fails the test.

Everything has a bound: the rate is a number of records a second (the machine's two cores
are shared by the broker and every client, so a flood would measure the scheduler), every
client call has a timeout and every thread is joined with one.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)
from integration_support import headers_for, payload

# A client's configuration: its stubs type the values as str | int | float, but callbacks
# (error_cb) go in the same dict.
Config = dict[str, Any]

CALL_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 40.0
VALUE_BYTES = 200
KEYS = 64  # keyed records: the same key always lands on the same partition
TICK_S = 0.05

# A commit the group refused because membership moved on (a rebalance began, the member
# was fenced, or its assignment was taken back). It is how a group tells a member "not
# yours any more": the records stay uncommitted and the next holder reads them again, so
# nothing is lost and the ledger still sees every record. Counted, not failed.
BENIGN_COMMIT_ERRORS = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class Problems:
    """Every error any client of the soak saw, named by who saw it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def add(self, source: str, text: str) -> None:
        with self._lock:
            self._items.append(f"{source}: {text}")

    def error_cb(self, source: str) -> Callable[[KafkaError], None]:
        def on_error(error: KafkaError) -> None:
            self.add(source, f"error_cb: {error.name()}: {error.str()}")

        return on_error

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._items)


class Worker:
    """A daemon thread running ``body(stop)``; an exception in it is a problem."""

    def __init__(self, name: str, problems: Problems) -> None:
        self.name = name
        self.problems = problems
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Worker:
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the body to finish (without waiting: see `stop_all`)."""
        self._stop.set()

    def stop(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Ask the body to finish, and wait for it; a body still running is a problem."""
        self._stop.set()
        if self._thread.ident is None:  # never started (the soak failed before it did)
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.problems.add(self.name, f"still running {timeout_s:.0f} s after stop")

    def body(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self.body(self._stop)
        except BaseException:
            self.problems.add(self.name, traceback.format_exc())


def stop_all(workers: Sequence[Worker], timeout_s: float) -> None:
    """Ask every worker to finish at once, then wait for them all within one budget."""
    for worker in workers:
        worker.request_stop()
    end = time.monotonic() + timeout_s
    for worker in workers:
        worker.stop(max(0.1, end - time.monotonic()))


# -- producers ------------------------------------------------------------------------------


class ProducerLoad(Worker):
    """Keyed records to one topic at ``rate_per_s``, idempotent with acks=all.

    Record ``seq`` has key ``seq % KEYS``; the delivery reports say where each landed.
    """

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float, problems: Problems) -> None:
        super().__init__(f"producer-{topic}", problems)
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.sent = 0
        self.where: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.unflushed = -1
        config: Config = {
            "bootstrap.servers": bootstrap,
            "client.id": self.name,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 10,
            "error_cb": problems.error_cb(self.name),
        }
        self._producer = Producer(config)

    def body(self, stop: threading.Event) -> None:
        due = 0.0
        next_tick = time.monotonic()
        while not stop.is_set():
            due += self.rate_per_s * TICK_S
            while due >= 1:
                self._produce(self.sent)
                self.sent += 1
                due -= 1
            self._producer.poll(0)
            next_tick += TICK_S
            stop.wait(max(0.0, next_tick - time.monotonic()))
        self.unflushed = self._producer.flush(CALL_TIMEOUT_S)
        self._producer.close()
        if self.unflushed:
            self.problems.add(self.name, f"{self.unflushed} records never acknowledged")

    def _produce(self, seq: int) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=b"key-%02d" % (seq % KEYS),
                    value=payload(seq, VALUE_BYTES),
                    headers=[*headers_for(seq)],
                    on_delivery=self._report(seq),
                )
                return
            except BufferError:  # librdkafka's queue is full: let the broker catch up
                self._producer.poll(0.05)

    def _report(self, seq: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.problems.add(self.name, f"seq {seq}: {error.name()}: {error.str()}")
            elif seq in self.where:
                self.problems.add(self.name, f"seq {seq}: a second delivery report")
            else:
                self.where[seq] = position(message)[1:]

        return on_delivery


def seq_header(message: Message) -> int:
    """The record's sequence number, from its ``seq`` header (`integration_support`)."""
    headers = message.headers()
    assert isinstance(headers, list), f"{position(message)}: headers {headers!r}"
    for name, value in headers:
        if name == "seq" and value is not None:
            return int(value)
    raise AssertionError(f"{position(message)}: no seq header in {headers!r}")


def position(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset of a message the broker acknowledged or delivered."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None, message
    return topic, partition, offset


# -- what the readers read ------------------------------------------------------------------


class Ledger:
    """What one group read: where each (topic, seq) was, how often, and its commits."""

    def __init__(self, group: str, problems: Problems) -> None:
        self.group = group
        self.problems = problems
        self._lock = threading.Lock()
        self._seen: dict[str, dict[int, tuple[int, int]]] = {}
        self.reads = 0
        self.commits = 0
        self.refused_commits = 0
        self.rebalance_events = 0
        self.joins = 0
        self.leaves = 0

    def read(self, member: str, message: Message) -> None:
        topic, partition, offset = position(message)
        seq = seq_header(message)
        with self._lock:
            self.reads += 1
            seen = self._seen.setdefault(topic, {})
            first = seen.setdefault(seq, (partition, offset))
        if first != (partition, offset):
            self.problems.add(
                member, f"{topic} seq {seq} read at {(partition, offset)}, and before at {first}"
            )

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    def seqs(self, topic: str) -> dict[int, tuple[int, int]]:
        with self._lock:
            return dict(self._seen.get(topic, {}))

    def distinct(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._seen.values())

    def missing(self, producers: Iterable[ProducerLoad]) -> dict[str, int]:
        """How many acknowledged records of each topic this group has not read yet."""
        return {p.topic: len(set(p.where) - set(self.seqs(p.topic))) for p in producers}


# -- consumer group members -----------------------------------------------------------------


class GroupMember(Worker):
    """A confluent-kafka member of a consumer group (classic or KIP-848): subscribes to
    ``topics``, reads in batches and commits each batch synchronously before the next
    (at-least-once), until stopped; then closes, which leaves the group."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        config: dict[str, object],
        ledger: Ledger,
    ) -> None:
        super().__init__(name, ledger.problems)
        self.ledger = ledger
        self.topics = list(topics)
        self.config: Config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self.problems.error_cb(name),
            **config,
        }

    def body(self, stop: threading.Event) -> None:
        consumer = Consumer(self.config)
        self.ledger.count("joins")

        def rebalanced(_: Consumer, __: list[TopicPartition]) -> None:
            self.ledger.count("rebalance_events")

        consumer.subscribe(
            self.topics, on_assign=rebalanced, on_revoke=rebalanced, on_lost=rebalanced
        )
        try:
            while not stop.is_set():
                self._process(consumer, consumer.consume(num_messages=500, timeout=0.2))
        finally:
            consumer.close()  # revokes (on_revoke), then leaves the group
            self.ledger.count("leaves")

    def _process(self, consumer: Consumer, messages: list[Message]) -> None:
        offsets: dict[tuple[str, int], int] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                self.problems.add(self.name, f"consume: {error.name()}: {error.str()}")
                continue
            self.ledger.read(self.name, message)
            topic, partition, offset = position(message)
            offsets[(topic, partition)] = offset + 1
        if offsets:
            self._commit(consumer, offsets)

    def _commit(self, consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
        request = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            result = consumer.commit(offsets=request, asynchronous=False)
        except KafkaException as exc:
            self._refused(exc.args[0], f"commit {offsets}")
            return
        self.ledger.count("commits")
        for tp in result:
            if tp.error is not None:
                self._refused(tp.error, f"commit {tp.topic} [{tp.partition}]@{tp.offset}")

    def _refused(self, error: KafkaError, what: str) -> None:
        if error.code() in BENIGN_COMMIT_ERRORS:
            self.ledger.count("refused_commits")
        else:
            self.problems.add(self.name, f"{what}: {error.name()}: {error.str()}")


class ShareMember(Worker):
    """A ShareConsumer of a share group: explicit acknowledgement, every record accepted
    (the queue's "processed"), the acceptances sent after each poll."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topics: Sequence[str], ledger: Ledger
    ) -> None:
        super().__init__(name, ledger.problems)
        self.ledger = ledger
        self.topics = list(topics)
        self.config: Config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "share.acknowledgement.mode": "explicit",
            "error_cb": self.problems.error_cb(name),
        }

    def body(self, stop: threading.Event) -> None:
        consumer = ShareConsumer(self.config)
        self.ledger.count("joins")
        consumer.subscribe(self.topics)
        try:
            while not stop.is_set():
                self._process(consumer, list(consumer.poll(0.3)))
        finally:
            consumer.close()  # sends what is still pending, leaves the share group
            self.ledger.count("leaves")

    def _process(self, consumer: ShareConsumer, messages: list[Message]) -> None:
        for message in messages:
            error = message.error()
            if error is not None:
                self.problems.add(self.name, f"poll: {error.name()}: {error.str()}")
                continue
            self.ledger.read(self.name, message)
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        if not messages:
            return
        results = consumer.commit_sync(CALL_TIMEOUT_S) or {}
        self.ledger.count("commits")
        for tp, failure in results.items():
            if failure is not None:
                self.problems.add(self.name, f"acknowledge {tp.topic} [{tp.partition}]: {failure}")


class Churn(Worker):
    """Members come and go: every ``period_s`` a new member joins, stays ``stay_s`` and
    leaves (each join and each leave is a rebalance of the group)."""

    def __init__(
        self,
        name: str,
        make_member: Callable[[str], Worker],
        *,
        first_s: float,
        period_s: float,
        stay_s: float,
        problems: Problems,
    ) -> None:
        super().__init__(name, problems)
        assert stay_s < period_s
        self.make_member = make_member
        self.first_s = first_s
        self.period_s = period_s
        self.stay_s = stay_s
        self.cycles = 0

    def body(self, stop: threading.Event) -> None:
        start = time.monotonic() + self.first_s
        while not stop.wait(max(0.0, start + self.cycles * self.period_s - time.monotonic())):
            member = self.make_member(f"{self.name}-{self.cycles}").start()
            try:
                stop.wait(self.stay_s)
            finally:
                member.stop()
            self.cycles += 1


# -- admin load -----------------------------------------------------------------------------


@dataclass
class AdminTargets:
    """What the admin load looks at: the soak's topics, groups, and the HTTP API."""

    topics: list[str]
    partitions: int
    groups: list[str]
    share_group: str
    admin_url: str | None


class AdminLoad(Worker):
    """One admin operation every ``period_s`` (`AdminCalls`), in turn: a short-lived topic
    every other time, and between them the others; the first round does each kind once,
    so that a warm-up sees them all."""

    def __init__(
        self, bootstrap: str, targets: AdminTargets, period_s: float, problems: Problems
    ) -> None:
        super().__init__("admin", problems)
        self.bootstrap = bootstrap
        self.targets = targets
        self.period_s = period_s
        self.done: dict[str, int] = {}

    def body(self, stop: threading.Event) -> None:
        calls = AdminCalls(self.bootstrap, self.targets, self.problems)
        operations = calls.operations()
        turn = 0
        start = time.monotonic()
        while not stop.wait(max(0.0, start + turn * self.period_s - time.monotonic())):
            operation = operations[turn % len(operations)]
            try:
                operation()
            except Exception as exc:
                self.problems.add(f"admin {operation.__name__}", f"{type(exc).__name__}: {exc}")
            else:
                self.done[operation.__name__] = self.done.get(operation.__name__, 0) + 1
            turn += 1
        # The AdminClient goes with `calls`, now: not after the broker has stopped.


class AdminCalls:
    """The admin operations, on one AdminClient; any failure raises."""

    def __init__(self, bootstrap: str, targets: AdminTargets, problems: Problems) -> None:
        self.bootstrap = bootstrap
        self.targets = targets
        self.problems = problems
        config: Config = {"bootstrap.servers": bootstrap, "error_cb": problems.error_cb("admin")}
        self._admin = AdminClient(config)
        self._temporary = 0

    def operations(self) -> list[Callable[[], None]]:
        others: list[Callable[[], None]] = [
            self.describe_configs,
            self.groups,
            self.offsets,
            self.cluster,
        ]
        if self.targets.admin_url is not None:
            # First: its first request loads the admin API's modules (weirmq.admin.deferred).
            others.insert(0, self.scrape)
        return [op for other in others for op in (other, self.short_lived_topic)]

    def short_lived_topic(self) -> None:
        name = f"soak-temporary-{self._temporary}"
        self._temporary += 1
        new = NewTopic(
            name, num_partitions=2, replication_factor=1, config={"retention.ms": "60000"}
        )
        self._admin.create_topics([new])[name].result(CALL_TIMEOUT_S)
        config: Config = {
            "bootstrap.servers": self.bootstrap,
            "client.id": "admin-short-lived",
            "acks": "all",
            "error_cb": self.problems.error_cb(f"producer {name}"),
        }
        producer = Producer(config)
        failed: list[str] = []
        for seq in range(20):
            producer.produce(
                name,
                value=payload(seq, VALUE_BYTES),
                on_delivery=lambda e, _: failed.append(str(e)) if e is not None else None,
            )
        left = producer.flush(CALL_TIMEOUT_S)
        producer.close()  # before the delete: its metadata refresh would bring the topic back
        assert left == 0 and not failed, f"{name}: {left} unacknowledged, failed {failed[:3]}"
        self._admin.delete_topics([name])[name].result(CALL_TIMEOUT_S)

    def describe_configs(self) -> None:
        resources = [
            ConfigResource(ConfigResource.Type.TOPIC, self.targets.topics[0]),
            ConfigResource(ConfigResource.Type.GROUP, self.targets.share_group),
        ]
        for future in self._admin.describe_configs(resources).values():
            future.result(CALL_TIMEOUT_S)
        broker = ConfigResource(ConfigResource.Type.BROKER, "0")
        self._admin.describe_configs([broker])[broker].result(CALL_TIMEOUT_S)

    def groups(self) -> None:
        listed = self._admin.list_consumer_groups().result(CALL_TIMEOUT_S)
        assert not listed.errors, listed.errors
        names = {g.group_id for g in listed.valid}
        assert set(self.targets.groups) <= names, f"groups listed: {sorted(names)}"
        for future in self._admin.describe_consumer_groups(self.targets.groups).values():
            future.result(CALL_TIMEOUT_S)

    def offsets(self) -> None:
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
            request = {
                TopicPartition(t, p): spec
                for t in self.targets.topics
                for p in range(self.targets.partitions)
            }
            for future in self._admin.list_offsets(request).values():
                future.result(CALL_TIMEOUT_S)
        group = self.targets.groups[0]
        committed = [ConsumerGroupTopicPartitions(group)]
        self._admin.list_consumer_group_offsets(committed)[group].result(CALL_TIMEOUT_S)

    def cluster(self) -> None:
        self._admin.describe_cluster().result(CALL_TIMEOUT_S)
        topics = TopicCollection(self.targets.topics)
        for future in self._admin.describe_topics(topics).values():
            future.result(CALL_TIMEOUT_S)
        self._admin.list_topics(timeout=CALL_TIMEOUT_S)

    def scrape(self) -> None:
        url = self.targets.admin_url
        assert url is not None
        for path in ("/metrics", "/api/v1/groups", "/api/v1/topics", "/api/v1/broker"):
            with urllib.request.urlopen(url + path, timeout=CALL_TIMEOUT_S) as response:
                body = response.read()
            assert response.status == 200, f"{path}: {response.status}"
            if path != "/metrics":
                json.loads(body)


# -- the broker's memory --------------------------------------------------------------------


@dataclass
class Sample:
    at_s: float
    rss_bytes: int
    fds: int
    threads: int
    cpu_s: float  # user + system time of the broker process so far


class MemorySampler(Worker):
    """The broker process's RSS (VmRSS), open files and threads every ``period_s``."""

    def __init__(self, pid: int, period_s: float, problems: Problems) -> None:
        super().__init__(f"memory-{pid}", problems)
        self.pid = pid
        self.period_s = period_s
        self._origin = time.monotonic()
        self._lock = threading.Lock()
        self._samples: list[Sample] = []

    def sample(self) -> Sample:
        """Take one sample now (it is kept with the periodic ones)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        taken = Sample(
            at_s=round(time.monotonic() - self._origin, 1),
            rss_bytes=_status_number(status, "VmRSS") * 1024,
            fds=len(list(Path(f"/proc/{self.pid}/fd").iterdir())),
            threads=_status_number(status, "Threads"),
            cpu_s=_cpu_s(self.pid),
        )
        with self._lock:
            self._samples.append(taken)
        return taken

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def body(self, stop: threading.Event) -> None:
        while not stop.wait(self.period_s):
            self.sample()


def _cpu_s(pid: int) -> float:
    # /proc/PID/stat: the command name is in parentheses and may hold spaces; utime and
    # stime are the 12th and 13th fields after it.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_number(status: str, name: str) -> int:
    match = re.search(rf"^{name}:\s+(\d+)", status, re.M)
    assert match is not None, f"no {name} in /proc/PID/status"
    return int(match.group(1))
