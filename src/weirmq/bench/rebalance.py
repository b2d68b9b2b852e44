"""Rebalance benchmark: how long a consumer group takes to absorb a new member.

Run: ``make bench-rebalance`` (or ``python -m weirmq.bench.rebalance [--quick] [--runs N]
[--scenario NAME ...] [--json FILE]``). It prints a table and writes every figure, the
parameters and the machine to a JSON file (default ``bench/results/rebalance-<timestamp>.json``,
gitignored). It is not a test: nothing here passes or fails on speed.

What is measured
----------------
Rebalance time is the time from a new member joining a 3-member group to all 4 members
consuming again. t0 is the instant the 4th member is told to ``subscribe``; t1 is the first
instant at which

- every partition is owned by exactly one member and the shares are balanced (they differ by
  at most one partition: 3 each for 12 partitions), and
- every member has consumed a message since t0 and since its own latest assignment change.

The balance condition matters for the incremental protocols: under KIP-848 the new member
gets each partition as soon as its owner gives it up, so "every partition owned once" holds
long before the group has finished moving partitions. Also reported: the new member's time
from t0 to its first non-empty assignment and to its first message, and the time for the
remaining 3 members to settle in the same sense after the 4th one leaves (``close()``). Each
scenario repeats join + leave N times (default 5, ``--quick`` 2) and reports median and max.

Scenarios, each on a fresh broker:

=======================  ==========================================================
classic-eager            classic protocol, librdkafka's default assignors range,roundrobin
classic-cooperative      classic protocol, cooperative-sticky
consumer-hb-default      KIP-848 (``group.protocol=consumer``), the broker's default
                         heartbeat interval (``group.consumer.heartbeat.interval.ms``,
                         5000 as in Kafka)
consumer-hb500           KIP-848 with a 500 ms heartbeat interval, to show how the figure
                         follows it
=======================  ==========================================================

Set-up
------
The broker runs as a subprocess (``python -m weirmq serve``) on 127.0.0.1, port 0, with its
own data directory, and ``WEIRMQ_GROUP_INITIAL_REBALANCE_DELAY_MS=0`` (Kafka's
``group.initial.rebalance.delay.ms``: its default of 3 s would hold every classic join and
dominate the figure). A topic of 12 partitions gets 2,000 messages/s of 100 B from a producer
process, spread round robin over the partitions so that every partition always has fresh
data. Every consumer is its own process with librdkafka's defaults (for the classic protocol
that means ``heartbeat.interval.ms`` 3000: the old members learn of a rebalance from their
next heartbeat) and ``auto.offset.reset=earliest``. Each reports over one queue the wall
clock (``time.time()``; all processes are on one machine) of its assignment changes
(on_assign / on_revoke / on_lost, with the partitions it owns afterwards) and of the first
message it consumes after each assignment change and after each instant the parent marks
(t0, or the start of a leave): that is all the parent needs to find t1, without a message
per record. Every wait has a timeout (``--timeout-s``, default 60 s per join or leave), and
every process is stopped at the end of its scenario.

The clients and the broker share the machine's cores, so the figures are for the set.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from weirmq.bench.results import machine_info, save_results, table
from weirmq.bench.target import BrokerProcess, ExternalBroker, Target
from weirmq.settings import Settings

CTX = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive fork()
TOPIC = "rebalance"
GROUP = "rebalance-bench"
HEARTBEAT_ENV_VAR = "WEIRMQ_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS"
SETTLE_S = 1.0  # how long a group must stay unchanged before a join counts as "from steady"
READY_TIMEOUT_S = 60.0  # a member process starting, or the first group of 3 settling
STOP_TIMEOUT_S = 15.0  # a process closing its client and exiting
POLL_S = 0.05  # a member's poll timeout: how soon it notices go/stop


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    client_config: dict[str, str]
    broker_env: dict[str, str]


SCENARIOS = (
    Scenario("classic-eager", "classic, range,roundrobin (eager)",
             {"partition.assignment.strategy": "range,roundrobin"}, {}),
    Scenario("classic-cooperative", "classic, cooperative-sticky",
             {"partition.assignment.strategy": "cooperative-sticky"}, {}),
    Scenario("consumer-hb-default", "KIP-848, broker heartbeat default",
             {"group.protocol": "consumer"}, {}),
    Scenario("consumer-hb500", "KIP-848, broker heartbeat 500 ms",
             {"group.protocol": "consumer"}, {HEARTBEAT_ENV_VAR: "500"}),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True)
class Params:
    runs: int
    partitions: int
    rate_per_s: int
    value_bytes: int
    timeout_s: float
    topic: str = TOPIC  # and the group is named after it


# --- Child processes (top-level functions: the spawn context imports them by name) -----------


Report = tuple[str, str, float, dict[str, Any]]  # (source, kind, time.time(), details)


def run_producer(bootstrap: str, params: Params, stop: Any, events: Any, lifetime_s: float) -> None:
    """Produce `params.rate_per_s` messages/s round robin over the partitions until `stop`."""
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            if not failures:
                events.put(("producer", "error", time.time(), {"error": str(err)}))
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"x" * params.value_bytes
    start = time.monotonic()
    sent = 0
    while not stop.is_set() and time.monotonic() - start < lifetime_s:
        due = int((time.monotonic() - start) * params.rate_per_s)
        while sent < due:
            try:
                producer.produce(params.topic, value, partition=sent % params.partitions,
                                 on_delivery=on_delivery)
            except BufferError:
                break  # the broker is behind: catch up on the next round, never queue more
            sent += 1
        producer.poll(0.01)
    remaining = producer.flush(STOP_TIMEOUT_S / 2)
    events.put(("producer", "done", time.time(),
                {"sent": sent, "failed": len(failures), "undelivered": remaining}))


def run_member(name: str, bootstrap: str, topic: str, client_config: dict[str, str], events: Any,
               mark: Any, go: Any, stop: Any, lifetime_s: float) -> None:
    """One group member: subscribe on `go`, consume until `stop`, report as `Report` says.

    Assignment changes are queued by the callbacks and reported after `poll` returns, when
    the client has applied them (confluent-kafka assigns after on_assign returns), so the
    partitions sent are the ones owned; the time is the callback's.
    """
    changes: list[tuple[str, float]] = []

    def send(kind: str, at: float, **details: Any) -> None:
        events.put((name, kind, at, details))

    def on_error(err: KafkaError) -> None:
        send("error", time.time(), error=str(err))

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-{GROUP}", "client.id": name,
        "auto.offset.reset": "earliest", "error_cb": on_error, **client_config,
    })
    deadline = time.monotonic() + lifetime_s
    send("ready", time.time())
    while not go.wait(POLL_S):
        if stop.is_set() or time.monotonic() > deadline:
            consumer.close()
            send("closed", time.time())
            return
    send("subscribed", time.time())
    consumer.subscribe(
        [topic],
        on_assign=lambda _c, _p: changes.append(("assign", time.time())),
        on_revoke=lambda _c, _p: changes.append(("revoke", time.time())),
        on_lost=lambda _c, _p: changes.append(("lost", time.time())),
    )
    change_seq = reported_seq = 0
    reported_mark = 0.0
    while not stop.is_set() and time.monotonic() < deadline:
        msg = consumer.poll(POLL_S)
        if changes:
            owned = sorted(tp.partition for tp in consumer.assignment())
            for kind, at in changes:
                send(kind, at, owned=owned)
            change_seq += len(changes)
            changes.clear()
        if msg is None:
            continue
        if msg.error() is not None:
            send("error", time.time(), error=str(msg.error()))
            continue
        now = time.time()
        marked = mark.value
        if change_seq != reported_seq or (marked > reported_mark and now >= marked):
            send("consumed", now)
            reported_seq = change_seq
            reported_mark = marked if now >= marked else reported_mark
    consumer.close()
    send("closed", time.time())


# --- The parent's view of the group --------------------------------------------------------


@dataclass
class Member:
    name: str
    process: Any
    go: Any
    stop: Any
    ready: bool = False
    closed: bool = False
    owned: frozenset[int] = frozenset()
    last_change_at: float = 0.0
    consuming_since: float | None = None  # first message after max(mark, last change)
    first_assigned_at: float | None = None
    first_consumed_at: float | None = None
    changes: int = 0


class Timeout(Exception):
    """A wait ran out of time; says what it was waiting for and what the group looked like."""


@dataclass
class Group:
    """Spawns members and follows their reports; knows when the group has settled."""

    bootstrap: str
    topic: str
    client_config: dict[str, str]
    partitions: int
    lifetime_s: float
    broker: Target
    events: Any = field(default_factory=CTX.Queue)
    mark: Any = field(default_factory=lambda: CTX.Value("d", 0.0, lock=False))
    members: dict[str, Member] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    producer_report: dict[str, Any] = field(default_factory=dict)

    def spawn(self, name: str, wait: bool = True) -> Member:
        """A member process whose client exists but has not subscribed (until `go`)."""
        go, stop = CTX.Event(), CTX.Event()
        process = CTX.Process(
            target=run_member, name=name, daemon=True,
            args=(name, self.bootstrap, self.topic, self.client_config, self.events, self.mark,
                  go, stop, self.lifetime_s),
        )
        process.start()
        member = self.members[name] = Member(name, process, go, stop)
        if wait:
            self.wait_for(lambda: member.ready, READY_TIMEOUT_S, f"{name} to start")
        return member

    def set_mark(self) -> float:
        """Now, as the instant every member must consume after; returns it."""
        now = time.time()
        self.mark.value = now
        for member in self.members.values():
            member.consuming_since = None
        return now

    def live(self) -> list[Member]:
        """Members that have subscribed and are not leaving: the ones a settled group needs."""
        return [m for m in self.members.values()
                if m.go.is_set() and not m.stop.is_set() and not m.closed]

    def settled_at(self) -> float | None:
        """The instant the live members were all consuming a balanced, exact assignment."""
        members = self.live()
        if not members or any(m.consuming_since is None for m in members):
            return None
        owned = sorted(p for m in members for p in m.owned)
        sizes = [len(m.owned) for m in members]
        if owned != list(range(self.partitions)) or max(sizes) - min(sizes) > 1:
            return None
        return max(m.consuming_since for m in members if m.consuming_since is not None)

    def wait_settled(self, timeout_s: float, what: str) -> float:
        found: list[float] = []

        def settled() -> bool:
            at = self.settled_at()
            if at is not None:
                found.append(at)
            return at is not None

        self.wait_for(settled, timeout_s, what)
        return found[-1]

    def wait_steady(self, timeout_s: float) -> None:
        """Until the group has settled and then seen no assignment change for SETTLE_S."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.set_mark()
            self.wait_settled(deadline - time.monotonic(), "the group to settle")
            changes = sum(m.changes for m in self.members.values())
            self.pump_until(time.monotonic() + SETTLE_S)
            if changes == sum(m.changes for m in self.members.values()) and self.settled_at():
                return

    def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() >= deadline:
                raise Timeout(f"timed out after {timeout_s:.0f} s waiting for {what}; "
                              f"{self.describe()}")
            self.pump_until(min(deadline, time.monotonic() + 0.2), stop_early=True)

    def pump_until(self, deadline: float, stop_early: bool = False) -> None:
        """Apply reports until `deadline` (or the first report, if `stop_early`)."""
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.check_processes()
                return
            self.apply(event)
            if stop_early:
                # Drain what is already queued, so that conditions see a consistent state.
                self.drain()
                return

    def drain(self) -> None:
        while True:
            try:
                self.apply(self.events.get_nowait())
            except queue.Empty:
                return

    def apply(self, event: Report) -> None:
        source, kind, at, details = event
        if source == "producer":
            if kind == "error":
                self.errors.append(f"producer: {details['error']}")
            else:
                self.producer_report = details
            return
        member = self.members[source]
        if kind == "ready":
            member.ready = True
        elif kind == "closed":
            member.closed = True
        elif kind == "error":
            self.errors.append(f"{source}: {details['error']}")
        elif kind in ("assign", "revoke", "lost"):
            member.owned = frozenset(details["owned"])
            member.last_change_at = at
            member.consuming_since = None
            member.changes += 1
            if member.owned and member.first_assigned_at is None:
                member.first_assigned_at = at
        elif kind == "consumed":
            if member.first_consumed_at is None:
                member.first_consumed_at = at
            if member.consuming_since is None and at >= max(self.mark.value, member.last_change_at):
                member.consuming_since = at

    def check_processes(self) -> None:
        self.broker.check_alive()
        for member in self.members.values():
            if not member.closed and member.process.exitcode is not None:
                raise RuntimeError(f"{member.name} exited with {member.process.exitcode}; "
                                   f"client errors: {self.errors[-5:]}")

    def describe(self) -> str:
        owners = ", ".join(
            f"{m.name} owns {sorted(m.owned)}{' (consuming)' if m.consuming_since else ''}"
            for m in self.live()
        )
        return f"{owners or 'no live member'}; last client errors: {self.errors[-5:]}"

    def remove(self, member: Member, timeout_s: float) -> None:
        member.stop.set()
        self.wait_for(lambda: member.closed, timeout_s, f"{member.name} to close")
        member.process.join(STOP_TIMEOUT_S)

    def shutdown(self) -> None:
        for member in self.members.values():
            member.stop.set()
        for member in self.members.values():
            member.process.join(STOP_TIMEOUT_S)
            if member.process.exitcode is None:
                member.process.kill()
                member.process.join(STOP_TIMEOUT_S)


# --- One scenario --------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)


def measure_join_and_leave(group: Group, name: str, timeout_s: float) -> dict[str, float]:
    joiner = group.spawn(name)  # its client exists; it subscribes at t0
    group.wait_steady(READY_TIMEOUT_S)
    t0 = group.set_mark()
    joiner.go.set()
    t1 = group.wait_settled(timeout_s, f"{name} to join")
    assert joiner.first_assigned_at is not None and joiner.first_consumed_at is not None
    figures = {
        "rebalance_s": t1 - t0,
        "new_member_assigned_s": joiner.first_assigned_at - t0,
        "new_member_consuming_s": joiner.first_consumed_at - t0,
    }
    group.wait_steady(READY_TIMEOUT_S)  # leave from a steady group too
    t2 = group.set_mark()
    joiner.stop.set()
    t3 = group.wait_settled(timeout_s, f"the group to settle after {name} left")
    figures["leave_s"] = t3 - t2
    group.remove(joiner, STOP_TIMEOUT_S)
    return figures


def run_scenario(work: Path, scenario: Scenario, params: Params, log: Callable[[str], None],
                 bootstrap: str | None = None) -> dict[str, Any]:
    """Figures for one scenario; raises on a timeout or a failed broker or client.

    With `bootstrap`, against that broker as it is configured (its initial rebalance delay
    included), on a topic of its own.
    """
    lifetime_s = READY_TIMEOUT_S * 2 + params.runs * (2 * params.timeout_s + 3 * READY_TIMEOUT_S)
    broker: Target
    if bootstrap is None:
        broker = BrokerProcess(
            work, {"WEIRMQ_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", **scenario.broker_env})
    else:
        assert not scenario.broker_env, "cannot change an external broker's settings"
        broker = ExternalBroker(bootstrap)
        # A broker that outlives us keeps its topics and groups: use names of our own.
        params = replace(params, topic=f"{TOPIC}-{uuid.uuid4().hex[:8]}")
    stop_producer = CTX.Event()
    group = Group(broker.bootstrap, params.topic, scenario.client_config, params.partitions,
                  lifetime_s, broker)
    producer = CTX.Process(target=run_producer, name="producer", daemon=True,
                           args=(broker.bootstrap, params, stop_producer, group.events,
                                 lifetime_s))
    runs: list[dict[str, float]] = []
    try:
        create_topic(broker.bootstrap, params.topic, params.partitions)
        producer.start()
        first = [group.spawn(f"member-{i}", wait=False) for i in range(3)]
        group.wait_for(lambda: all(m.ready for m in first), READY_TIMEOUT_S, "3 members to start")
        for member in first:
            member.go.set()
        group.wait_steady(READY_TIMEOUT_S)
        for run in range(params.runs):
            figures = measure_join_and_leave(group, f"joiner-{run}", params.timeout_s)
            log(f"{scenario.name} run {run + 1}/{params.runs}: "
                + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))
            runs.append(figures)
    finally:
        stop_producer.set()
        group.shutdown()
        producer.join(STOP_TIMEOUT_S)
        if producer.exitcode is None:
            producer.kill()
            producer.join(STOP_TIMEOUT_S)
        group.drain()
        broker.stop()
    return {
        "description": scenario.description,
        "client_config": scenario.client_config,
        "broker_env": scenario.broker_env,
        "runs": runs,
        "summary": summarize(runs),
        "producer": group.producer_report,
        "client_errors": group.errors[:20],
    }


def summarize(runs: Sequence[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Median and max of every figure over the runs."""
    keys = runs[0].keys() if runs else ()
    return {
        key: {"median": statistics.median(r[key] for r in runs), "max": max(r[key] for r in runs)}
        for key in keys
    }


# --- Reporting -------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    headers = ["scenario", "runs", "rebalance s med", "max", "new assigned s med", "max",
               "new consuming s med", "max", "leave s med", "max"]
    rows, failures = [], []
    for name, result in results.items():
        if "error" in result:
            failures.append(f"{name}: FAILED: {result['error']}")
            continue
        s = result["summary"]
        cells = [name, str(len(result["runs"]))]
        for key in ("rebalance_s", "new_member_assigned_s", "new_member_consuming_s", "leave_s"):
            cells += [f"{s[key]['median']:.3f}", f"{s[key]['max']:.3f}"]
        rows.append(cells)
    lines = table(headers, rows) if rows else []
    notes = [
        "  (seconds; classic members heartbeat every 3000 ms, librdkafka's default; KIP-848 "
        "members as the broker says: "
        f"{Settings().group_consumer_heartbeat_interval_ms} ms by default)"
    ]
    return "\n".join([*lines, *notes, *failures])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 runs per scenario instead of 5")
    parser.add_argument("--runs", type=int, default=None, help="joins (and leaves) per scenario")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS_BY_NAME),
                        help="run only this scenario (repeatable); default all")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=2000, help="messages/s produced")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="limit on each join and each leave")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    params = Params(
        runs=args.runs or (2 if args.quick else 5), partitions=args.partitions,
        rate_per_s=args.rate, value_bytes=args.value_bytes, timeout_s=args.timeout_s,
    )
    assert params.runs >= 1 and params.partitions >= 4, "need a run and a partition per member"
    chosen: Iterable[Scenario] = (
        [SCENARIOS_BY_NAME[n] for n in args.scenario] if args.scenario else SCENARIOS
    )
    started = time.strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="weirmq-bench-", dir=Path.cwd()))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results: dict[str, Any] = {}
    try:
        for scenario in chosen:
            log(f"{scenario.name}: {scenario.description}")
            try:
                results[scenario.name] = run_scenario(work, scenario, params, log)
            except (Timeout, RuntimeError, KafkaException) as error:
                results[scenario.name] = {"description": scenario.description,
                                          "error": str(error)}
                log(f"{scenario.name}: FAILED: {error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    document = {
        "params": {**vars(params), "group_consumer_heartbeat_interval_ms_default":
                   Settings().group_consumer_heartbeat_interval_ms},
        "machine": machine_info(),
        "results": results,
    }
    print(f"results: {save_results('rebalance', started, document, args.json)}")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
