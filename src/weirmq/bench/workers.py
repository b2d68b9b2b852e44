"""The load: confluent-kafka clients, each in a process of its own.

Why processes: one Python thread calling ``produce()`` tops out well below what a broker
can take, and a client in the benchmark's own process would share its interpreter with
the sampler and the bookkeeping. So every client is a child process started with the
*spawn* method (librdkafka's threads do not survive ``fork()``), and reports its own CPU
time (``getrusage``: its Python thread and librdkafka's threads together), so a run can
say whether the client or the broker was the limit.

The protocol between parent and child is three steps, over one queue per run:

1. the child builds its client, connects and fetches the topic's metadata, then reports
   ``("ready", name)``: connection set-up is not part of any figure;
2. the parent opens its measurement window and sets the shared ``go`` event, so all the
   children of one measurement start together;
3. each child does its work and reports ``("result", name, figures)``, or
   ``("error", name, text)``.

`run_clients` drives that from the parent. Every wait has a limit.

Group readers (`group_worker`): several members of one consumer group or share group read
one topic together, so no member knows on its own when the whole is read. They add what
they received to one shared counter (a ``multiprocessing.Value``) and stop when it reaches
the total; each notes, on CLOCK_MONOTONIC, when it received its first record and when it
was done, and the parent takes the span from the earliest first record to the latest
finish. Joining the group (a classic group's initial rebalance delay, a share group's first
heartbeats) happens before the first record and is reported apart.

Latency: the producer writes ``time.monotonic_ns()`` into the first 8 bytes of each value
just before ``produce()``; the consumer subtracts it from its own ``monotonic_ns()`` when
``poll()`` hands it the message. CLOCK_MONOTONIC is one clock for every process on a
machine, so no clock sync is needed (and this only works on one machine).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import resource
import struct
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

CTX = multiprocessing.get_context("spawn")
READY_TIMEOUT_S = 60.0
STAMP = struct.Struct("<q")  # the send time in a latency-stamped value
POLL_EVERY = 1024  # a producer serves delivery reports (and checks the clock) this often


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentiles(values: Sequence[int] | array[int], points: Sequence[float]) -> list[int]:
    """Nearest-rank percentiles of `values` (which need not be sorted) at `points` (0-100)."""
    if not values:
        return [0 for _ in points]
    ordered = sorted(values)
    n = len(ordered)
    # The rank is ceil(p% of n); rounding first keeps 99.9% of 1000 at 999, not 1000.
    ranks = (math.ceil(round(p * n / 100, 6)) for p in points)
    return [ordered[max(0, min(n - 1, rank - 1))] for rank in ranks]


# --- Child processes (top-level functions: the spawn method imports them by name) ----------


@dataclass(frozen=True)
class ProduceSpec:
    """One producer process: what to send, how fast, for how long."""

    bootstrap: str
    topic: str
    value_bytes: int
    duration_s: float
    config: dict[str, Any] = field(default_factory=dict)
    rate_per_s: float | None = None  # None: as fast as the client and broker allow
    max_messages: int | None = None  # stop after this many, even before `duration_s`
    round_robin_partitions: int | None = None  # set: send message i to partition i % n
    stamp: bool = False  # latency: the send time in the value's first 8 bytes
    count_partitions: bool = False  # report how many partitions received messages
    keys: tuple[bytes, ...] = ()  # set: message i has key keys[i % len(keys)]
    flush_timeout_s: float = 60.0
    # set: a transactional producer committing a transaction every this many messages
    # (until `duration_s`, a whole transaction at a time); its own transactional.id
    transaction_messages: int | None = None


@dataclass(frozen=True)
class ConsumeSpec:
    """One consumer process reading `expected` messages from the start of `partitions`."""

    bootstrap: str
    topic: str
    partitions: tuple[int, ...]
    expected: int
    timeout_s: float
    config: dict[str, Any] = field(default_factory=dict)
    latency: bool = False  # poll one message at a time and time each from its stamp
    warmup_s: float = 0.0  # latency: leave out messages sent this soon after `go`
    # Assign the partitions only at `go`: librdkafka starts fetching as soon as a partition
    # is assigned, so a reader assigned earlier fetches before the window opens, and the
    # bytes it counts no longer match the broker's CPU and requests in the window. (Pausing
    # until `go` instead stalled the read for a second now and then after the resume.)
    assign_at_go: bool = False


def produce_worker(name: str, spec: ProduceSpec, reports: Any, go: Any) -> None:
    _reporting_errors(_produce, name, spec, reports, go)


def _reporting_errors(body: Callable[[str, Any, Any, Any], None], name: str, spec: Any,
                      reports: Any, go: Any) -> None:
    try:
        body(name, spec, reports, go)
    except Exception as exc:  # reported to the parent, which fails the measurement
        reports.put(("error", name, f"{type(exc).__name__}: {exc}"))


def _produce(name: str, spec: ProduceSpec, reports: Any, go: Any) -> None:
    from confluent_kafka import Producer

    delivered = failed = 0
    first_error: list[str] = []
    touched: set[int] = set()

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
            if spec.count_partitions:
                touched.add(msg.partition())
        else:
            failed += 1
            if not first_error:
                first_error.append(str(err))

    config = dict(spec.config)
    if spec.transaction_messages is not None:
        config["transactional.id"] = f"weirmq-bench-{name}-{os.getpid()}-{time.time_ns()}"
    producer = Producer({"bootstrap.servers": spec.bootstrap, **config})
    producer.list_topics(spec.topic, timeout=30)  # connected, and the metadata is cached
    if spec.transaction_messages is not None:
        producer.init_transactions(30)
    reports.put(("ready", name))
    if not go.wait(READY_TIMEOUT_S * 2):
        raise TimeoutError("never told to go")
    cpu_start, start = _cpu_s(), time.perf_counter()
    if spec.transaction_messages is None:
        sent = _send(producer, spec, on_delivery, start)
    else:
        sent = _send_in_transactions(producer, spec, spec.transaction_messages, on_delivery, start)
    remaining = producer.flush(spec.flush_timeout_s)
    elapsed, cpu = time.perf_counter() - start, _cpu_s() - cpu_start
    reports.put(("result", name, {
        "sent": sent, "delivered": delivered, "failed": failed, "undelivered": remaining,
        "first_error": first_error[0] if first_error else None,
        "seconds": elapsed, "client_cpu_s": cpu, "partitions_touched": len(touched),
    }))


def _send_in_transactions(producer: Any, spec: ProduceSpec, per_transaction: int,
                          on_delivery: Callable[..., None], start: float) -> int:
    """Produce in transactions of `per_transaction` messages, each committed (which
    flushes it) before the next begins, until `spec.duration_s` has passed."""
    produce, poll, topic = producer.produce, producer.poll, spec.topic
    value = os.urandom(spec.value_bytes)
    deadline = start + spec.duration_s
    sent = 0
    while time.perf_counter() < deadline:
        producer.begin_transaction()
        for _ in range(per_transaction):
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    break
                except BufferError:  # librdkafka's queue is full: serve reports, retry
                    poll(0.001)
        producer.commit_transaction(spec.flush_timeout_s)
        sent += per_transaction
    return sent


def _send(producer: Any, spec: ProduceSpec, on_delivery: Callable[..., None],
          start: float) -> int:
    """Produce until `spec.duration_s` has passed; returns how many were handed over."""
    produce, poll, topic = producer.produce, producer.poll, spec.topic
    value = os.urandom(spec.value_bytes)  # random, so that no codec could shrink it
    padding = value[STAMP.size:]
    deadline = start + spec.duration_s
    rate, partitions, keys = spec.rate_per_s, spec.round_robin_partitions, spec.keys
    limit = spec.max_messages if spec.max_messages is not None else 1 << 62
    sent = 0
    while sent < limit:
        if sent % POLL_EVERY == 0 or rate is not None:
            now = time.perf_counter()
            if now >= deadline:
                return sent
            poll(0)
            if rate is not None and sent >= (now - start) * rate:
                time.sleep(0.0002)  # ahead of the schedule: the next message is not due yet
                continue
        if spec.stamp:
            value = STAMP.pack(time.monotonic_ns()) + padding
        try:
            if keys:
                produce(topic, value, keys[sent % len(keys)], on_delivery=on_delivery)
            elif partitions is None:
                produce(topic, value, on_delivery=on_delivery)
            else:
                produce(topic, value, partition=sent % partitions, on_delivery=on_delivery)
        except BufferError:  # librdkafka's queue is full: serve delivery reports, then retry
            poll(0.001)
            continue
        sent += 1
    return sent


def consume_worker(name: str, spec: ConsumeSpec, reports: Any, go: Any) -> None:
    _reporting_errors(_consume, name, spec, reports, go)


def _consume(name: str, spec: ConsumeSpec, reports: Any, go: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": spec.bootstrap, "group.id": f"bench-{name}",
        "enable.auto.commit": False, "enable.auto.offset.store": False, **spec.config,
    })
    consumer.list_topics(spec.topic, timeout=30)
    assignment = [TopicPartition(spec.topic, p, 0) for p in spec.partitions]
    if not spec.assign_at_go:
        consumer.assign(assignment)
    reports.put(("ready", name))
    if not go.wait(READY_TIMEOUT_S * 2):
        raise TimeoutError("never told to go")
    cpu_start, start = _cpu_s(), time.perf_counter()
    if spec.assign_at_go:
        consumer.assign(assignment)
    if spec.latency:
        figures = _read_stamped(consumer, spec, time.monotonic_ns())
    else:
        figures = _read_all(consumer, spec, start)
    figures["seconds"] = time.perf_counter() - start
    figures["client_cpu_s"] = _cpu_s() - cpu_start
    consumer.close()
    reports.put(("result", name, figures))


def _read_all(consumer: Any, spec: ConsumeSpec, start: float) -> dict[str, Any]:
    """Catch-up: read `spec.expected` messages as fast as they come."""
    received = value_bytes = errors = 0
    deadline = start + spec.timeout_s
    while received < spec.expected and time.perf_counter() < deadline:
        # Never ask for more than remain: consume() waits for its whole count or the timeout.
        for msg in consumer.consume(min(10_000, spec.expected - received), 0.5):
            if msg.error() is not None:
                errors += 1
                continue
            received += 1
            value_bytes += len(msg.value())
    return {"received": received, "value_bytes": value_bytes, "errors": errors}


def _read_stamped(consumer: Any, spec: ConsumeSpec, go_ns: int) -> dict[str, Any]:
    """Latency: poll one message at a time and time each one from its send stamp."""
    latencies = array("q")
    received = errors = 0
    counted_from_ns = go_ns + int(spec.warmup_s * 1e9)
    deadline = time.monotonic() + spec.timeout_s
    poll, now_ns, unpack = consumer.poll, time.monotonic_ns, STAMP.unpack_from
    while received < spec.expected and time.monotonic() < deadline:
        msg = poll(0.1)
        if msg is None:
            continue
        arrived = now_ns()
        if msg.error() is not None:
            errors += 1
            continue
        received += 1
        (sent_ns,) = unpack(msg.value())
        if sent_ns >= counted_from_ns:
            latencies.append(arrived - sent_ns)
    points = (50.0, 90.0, 99.0, 99.9, 100.0)
    p50, p90, p99, p999, worst = (v / 1e6 for v in percentiles(latencies, points))
    return {
        "received": received, "errors": errors, "measured": len(latencies),
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "p999_ms": p999, "max_ms": worst,
        "mean_ms": (sum(latencies) / len(latencies) / 1e6) if latencies else 0.0,
    }


@dataclass(frozen=True)
class GroupReadSpec:
    """One member of a group reading `expected` records of `topic` with the other members.

    `counter` is a shared ``multiprocessing.Value("q")``: the records all members have
    received so far. With `share`, a `ShareConsumer` in explicit acknowledgement mode that
    accepts every record (`acknowledge(ACCEPT)`) and commits the acknowledgements of each
    poll (`commit_async`); otherwise a classic `Consumer` subscribed to the topic.
    """

    bootstrap: str
    topic: str
    group: str
    expected: int
    timeout_s: float
    counter: Any
    share: bool
    config: dict[str, Any] = field(default_factory=dict)


def group_worker(name: str, spec: GroupReadSpec, reports: Any, go: Any) -> None:
    _reporting_errors(_group_read, name, spec, reports, go)


def _group_read(name: str, spec: GroupReadSpec, reports: Any, go: Any) -> None:
    # A group member has no connection before it subscribes, and subscribing joins the
    # group (and, on a share group, acquires records): all of that comes after `go`, and
    # the figures count from the first record on.
    reports.put(("ready", name))
    if not go.wait(READY_TIMEOUT_S * 2):
        raise TimeoutError("never told to go")
    cpu_start, go_ns = _cpu_s(), time.monotonic_ns()
    figures = _read_shared(spec) if spec.share else _read_classic(spec)
    figures["go_ns"] = go_ns
    figures["client_cpu_s"] = _cpu_s() - cpu_start
    reports.put(("result", name, figures))


def _add(counter: Any, received: int) -> int:
    with counter.get_lock():
        counter.value += received
        return int(counter.value)


def _read_classic(spec: GroupReadSpec) -> dict[str, Any]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": spec.bootstrap, "group.id": spec.group,
                         "auto.offset.reset": "earliest", **spec.config})
    consumer.subscribe([spec.topic])
    by_partition: dict[int | None, int] = {}  # a record always has its partition
    received = errors = 0
    first_ns = None
    total = 0
    deadline = time.monotonic() + spec.timeout_s
    while total < spec.expected and time.monotonic() < deadline:
        got = 0
        for msg in consumer.consume(10_000, 0.1):
            if msg.error() is not None:
                errors += 1
                continue
            got += 1
            partition = msg.partition()
            by_partition[partition] = by_partition.get(partition, 0) + 1
        if got:
            first_ns = first_ns or time.monotonic_ns()
            received += got
            total = _add(spec.counter, got)
        else:
            total = int(spec.counter.value)
    done_ns = time.monotonic_ns()
    consumer.close()
    return {"received": received, "errors": errors, "by_partition": by_partition,
            "first_ns": first_ns, "done_ns": done_ns}


def _read_shared(spec: GroupReadSpec) -> dict[str, Any]:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": spec.bootstrap, "group.id": spec.group,
                              "share.acknowledgement.mode": "explicit", **spec.config})
    accepted = ack_errors = 0
    first_ack_error: list[str] = []

    def on_commit(offsets: dict[Any, set[int]], error: Any) -> None:
        nonlocal accepted, ack_errors
        count = sum(len(o) for o in offsets.values())
        if error is None:
            accepted += count
            return
        ack_errors += count or 1
        if not first_ack_error:
            first_ack_error.append(str(error))

    consumer.set_acknowledgement_commit_callback(on_commit)
    consumer.subscribe([spec.topic])
    acknowledge, accept = consumer.acknowledge, AcknowledgeType.ACCEPT
    by_partition: dict[int | None, int] = {}  # a record always has its partition
    received = errors = redelivered = 0
    first_ns = None
    total = 0
    deadline = time.monotonic() + spec.timeout_s
    while total < spec.expected and time.monotonic() < deadline:
        got = 0
        for msg in consumer.poll(0.1):
            if msg.error() is not None:
                errors += 1
                continue
            acknowledge(msg, accept)
            got += 1
            partition = msg.partition()
            by_partition[partition] = by_partition.get(partition, 0) + 1
            if msg.delivery_count() != 1:
                redelivered += 1
        if got:
            first_ns = first_ns or time.monotonic_ns()
            received += got
            consumer.commit_async()
            total = _add(spec.counter, got)
        else:
            total = int(spec.counter.value)
    # Done once the broker has answered every acknowledgement. commit_sync sends what is
    # pending but may return before an earlier commit_async is answered; calling it again
    # serves those answers' callbacks. Closing earlier would leave the group (which ends
    # the share session) while an acknowledgement is still on its way.
    while accepted + ack_errors < received and time.monotonic() < deadline:
        consumer.commit_sync(1)
        if accepted + ack_errors < received:
            time.sleep(0.001)
    done_ns = time.monotonic_ns()
    consumer.close()
    return {"received": received, "errors": errors, "by_partition": by_partition,
            "redelivered": redelivered, "accepted": accepted, "ack_errors": ack_errors,
            "first_ack_error": first_ack_error[0] if first_ack_error else None,
            "first_ns": first_ns, "done_ns": done_ns}


# --- The parent's side ---------------------------------------------------------------------


Worker = tuple[Callable[[str, Any, Any, Any], None], Any]  # (function, its spec)


class ClientFailed(RuntimeError):
    """A client process failed, stalled or died; the message says which and how."""


def run_clients(workers: Sequence[Worker], window: Any, timeout_s: float,
                check_alive: Callable[[], None] = lambda: None) -> list[dict[str, Any]]:
    """Start `workers`, then measure them together inside `window`; their results in order.

    `window` is entered once every client is ready and closed once every result is in, so
    its figures cover the measured work and nothing else.
    """
    reports, go = CTX.Queue(), CTX.Event()
    names = [f"client-{i}" for i in range(len(workers))]
    processes = [CTX.Process(target=fn, args=(n, spec, reports, go), name=n, daemon=True)
                 for n, (fn, spec) in zip(names, workers, strict=True)]
    for process in processes:
        process.start()
    try:
        _collect(reports, processes, "ready", READY_TIMEOUT_S, check_alive)
        with window:
            go.set()
            results = _collect(reports, processes, "result", timeout_s, check_alive)
    finally:
        for process in processes:
            process.join(10)
            if process.exitcode is None:
                process.kill()
                process.join(10)
        reports.close()
    return [results[n] for n in names]


def _collect(reports: Any, processes: Sequence[Any], kind: str, timeout_s: float,
             check_alive: Callable[[], None]) -> dict[str, Any]:
    """Wait for one `kind` report from every process; raise `ClientFailed` on any trouble."""
    got: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(processes):
        if time.monotonic() > deadline:
            raise ClientFailed(f"clients not {kind} after {timeout_s:.0f} s: "
                               f"{sorted({p.name for p in processes} - set(got))}")
        try:
            report = reports.get(timeout=0.2)
        except queue.Empty:
            check_alive()
            dead = [p.name for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise ClientFailed(f"client process died: {dead}") from None
            continue
        if report[0] == "error":
            raise ClientFailed(f"{report[1]}: {report[2]}")
        if report[0] == kind:
            got[report[1]] = report[2] if kind == "result" else True
    return got
