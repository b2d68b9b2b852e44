"""The workloads of ``weirmq bench``: what each one runs and which figures it keeps.

Every workload is a function ``(Run) -> dict`` returning ``{"description", "params",
"cases": [...]}``; a case is one measured configuration, a flat dict of figures with a
``name``. A case that fails keeps its ``name`` and gets an ``error`` instead; the others
still run.

Isolation: when we own the broker, each case gets a fresh broker process and data
directory, so one case's memory, page cache and files do not leak into the next one's
figures (start-up takes a third of a second). Against an external broker every case uses
a new topic, deleted afterwards.

Units: MB = 10**6 bytes, GB = 10**9 bytes, of message values (keys are null and headers
absent, as in ``kafka-producer-perf-test``). Times are wall clock.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from weirmq.bench import rebalance
from weirmq.bench.target import BrokerProcess, ExternalBroker, Target, process_rss_bytes
from weirmq.bench.workers import (
    ConsumeSpec,
    ProduceSpec,
    consume_worker,
    produce_worker,
    run_clients,
)

KB = 1024


@dataclass
class Run:
    """What every workload needs: the mode, where brokers live, how to log."""

    quick: bool
    work: Path  # temporary directory for the brokers we start
    log: Callable[[str], None]
    bootstrap: str | None = None  # an external broker, instead of starting our own
    broker_pid: int | None = None  # its process, if on this machine, to watch CPU and RSS
    cores: int = 1

    @contextmanager
    def broker(self, settings_env: dict[str, str] | None = None) -> Iterator[Target]:
        """A fresh broker of ours, or the external one."""
        if self.bootstrap is not None:
            yield ExternalBroker(self.bootstrap, self.broker_pid)
            return
        broker = BrokerProcess(self.work, settings_env)
        try:
            yield broker
        finally:
            broker.stop()


# --- Helpers --------------------------------------------------------------------------------


def create_topic(target: Target, partitions: int, prefix: str) -> tuple[str, float]:
    """A new topic on `target`; returns its name and the seconds its creation took."""
    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    start = time.perf_counter()
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=120,
                                  request_timeout=180)
    futures[name].result()
    # Creation is acknowledged before every client sees the topic: wait until Metadata has it.
    deadline = time.monotonic() + 60
    while len(admin.list_topics(name, timeout=30).topics[name].partitions) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} not visible with {partitions} partitions")
        time.sleep(0.1)
    return name, time.perf_counter() - start


def delete_topic(target: Target, name: str) -> None:
    if not target.own:  # ours go away with the broker's data directory
        admin = AdminClient({"bootstrap.servers": target.bootstrap})  # alive until answered
        admin.delete_topics([name], operation_timeout=60)[name].result()


def limit(broker_cpu_percent: float | None, client_cpu_percents: list[float], cores: int) -> str:
    """Which side held the figure back, from CPU use over the measured window.

    A side at 90% of a core or more was busy all the time: the broker's work runs on one
    event-loop thread, and each client's Python thread is one core at most (librdkafka's
    threads add a little on top, so a client can show more than 100%).
    """
    busy = 90.0
    client_busy = any(c >= busy for c in client_cpu_percents)
    if broker_cpu_percent is None:
        return "client" if client_busy else "unknown (broker CPU not visible)"
    total = broker_cpu_percent + sum(client_cpu_percents)
    broker_busy = broker_cpu_percent >= busy
    if (broker_busy and client_busy) or total >= busy * cores:
        return "cores (broker and clients share the machine)"
    if broker_busy:
        return "broker"
    if client_busy:
        return "client"
    return "neither (waiting on round trips or fsync)"


def _percent(cpu_s: float | None, seconds: float) -> float | None:
    return None if cpu_s is None or seconds <= 0 else 100 * cpu_s / seconds


def measure_produce(run: Run, target: Target, topic: str, value_bytes: int, producers: int,
                    duration_s: float, config: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`producers` processes produce to `topic` together; the figures of the whole."""
    specs = [ProduceSpec(target.bootstrap, topic, value_bytes, duration_s, config, **spec)
             for _ in range(producers)]
    window = target.window()
    results = run_clients([(produce_worker, s) for s in specs], window,
                          timeout_s=duration_s + 120, check_alive=target.check_alive)
    for r in results:
        if r["failed"] or r["undelivered"]:
            raise RuntimeError(f"{r['failed']} failed, {r['undelivered']} undelivered; "
                               f"first error: {r['first_error']}")
    delivered = sum(r["delivered"] for r in results)
    seconds = max(r["seconds"] for r in results)
    gb = delivered * value_bytes / 1e9
    clients = [100 * r["client_cpu_s"] / r["seconds"] for r in results]
    broker = window.figures()
    return {
        "messages": delivered,
        "seconds": seconds,
        "messages_per_s": delivered / seconds,
        "mb_per_s": gb * 1e3 / seconds,
        "broker_cpu_s_per_gb": None if window.cpu_s is None or not gb else window.cpu_s / gb,
        **broker,
        "client_cpu_percent": clients,
        "partitions_touched": max(r["partitions_touched"] for r in results),
        "limit": limit(broker["broker_cpu_percent"], clients, run.cores),
    }


def _case(run: Run, name: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one case; a failure is recorded in the results rather than stopping the run."""
    run.log(f"  {name} ...")
    try:
        figures = body()
    except Exception as exc:
        run.log(f"  {name}: FAILED: {type(exc).__name__}: {exc}")
        return {"name": name, "error": f"{type(exc).__name__}: {exc}"}
    return {"name": name, **figures}


def _size_name(value_bytes: int) -> str:
    return f"{value_bytes // KB} KB" if value_bytes >= KB else f"{value_bytes} B"


# --- Workloads ------------------------------------------------------------------------------


def startup(run: Run) -> dict[str, Any]:
    """Process start to accepting connections, and to a first Metadata answered."""
    runs = 3 if run.quick else 5
    if run.bootstrap is not None:
        return {"description": "not measured: the broker is external", "params": {},
                "cases": []}

    def body() -> dict[str, Any]:
        announced, ready = [], []
        for _ in range(runs):
            broker = BrokerProcess(run.work, settle=False)
            try:
                AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
                ready.append(time.perf_counter() - broker.started)
                announced.append(broker.announced_s)
            finally:
                broker.stop()
        return {
            "runs": runs,
            "announced_ms": statistics.median(announced) * 1000,
            "announced_ms_max": max(announced) * 1000,
            "first_metadata_ms": statistics.median(ready) * 1000,
        }

    return {
        "description": "spawn of `weirmq serve` to its 'accepting Kafka connections' line, "
                       f"and to a first Metadata answer (median of {runs})",
        "params": {"runs": runs},
        "cases": [_case(run, "startup", body)],
    }


def idle(run: Run) -> dict[str, Any]:
    """CPU and memory of a broker doing nothing, with one client connected."""
    seconds = 5.0 if run.quick else 10.0
    settle_s = 1.0

    def body() -> dict[str, Any]:
        with run.broker() as target:
            # Its connection stays open while we watch (and closes quietly with the broker).
            admin = AdminClient({"bootstrap.servers": target.bootstrap,
                                 "log.connection.close": False})
            admin.list_topics(timeout=30)
            time.sleep(settle_s)
            with target.window() as window:
                time.sleep(seconds)
            return {"seconds": seconds, "cpu_percent": _percent(window.cpu_s, window.seconds),
                    "rss_mb": None if window.end_rss_bytes is None
                    else window.end_rss_bytes / 1e6}

    return {
        "description": f"broker CPU over {seconds:.0f} s and RSS, idle with one client "
                       "connection open (CPU as % of one core)",
        "params": {"seconds": seconds, "settle_s": settle_s},
        "cases": [_case(run, "idle", body)],
    }


def produce(run: Run) -> dict[str, Any]:
    """Throughput of 1 and 2 producer processes, by message size and acks."""
    sizes = [KB] if run.quick else [100, KB, 16 * KB]
    duration_s = 1.5 if run.quick else 5.0
    cases = []
    for value_bytes in sizes:
        for acks in ("1", "all"):
            for producers in (1, 2):
                name = f"{_size_name(value_bytes)} acks={acks} x{producers}"

                def body(value_bytes: int = value_bytes, acks: str = acks,
                         producers: int = producers) -> dict[str, Any]:
                    with run.broker() as target:
                        topic, _ = create_topic(target, 1, "produce")
                        figures = measure_produce(run, target, topic, value_bytes, producers,
                                                  duration_s, {"acks": acks})
                        delete_topic(target, topic)
                    return {"value_bytes": value_bytes, "acks": acks, "producers": producers,
                            **figures}

                cases.append(_case(run, name, body))
    return {
        "description": "producers as fast as they can for a fixed time, one topic of one "
                       "partition, librdkafka's default batching (linger.ms 5, batch.size "
                       "1 MB, no compression), null keys",
        "params": {"sizes": sizes, "duration_s": duration_s},
        "cases": cases,
    }


# librdkafka stops fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its local
# queue holds queued.min.messages (100,000) or 64 MB: a catch-up reader of 100 B or 16 KB
# messages fills it at once and then idles a second at a time, so the figure was the
# client's pause (17 MB/s at 100 B, measured; 75 MB/s with 1 ms). 1 ms keeps it reading.
CATCH_UP_CONFIG = {"fetch.queue.backoff.ms": 1}


def consume(run: Run) -> dict[str, Any]:
    """Catch-up read: one consumer process reads from offset 0 what a producer wrote."""
    amounts = {KB: 50_000} if run.quick else {100: 1_000_000, KB: 300_000, 16 * KB: 20_000}
    cases = []
    for value_bytes, messages in amounts.items():

        def body(value_bytes: int = value_bytes, messages: int = messages) -> dict[str, Any]:
            with run.broker() as target:
                topic, _ = create_topic(target, 1, "consume")
                measure_produce(run, target, topic, value_bytes, 1, 600.0, {},
                                max_messages=messages)
                spec = ConsumeSpec(target.bootstrap, topic, (0,), messages, timeout_s=300,
                                   config=CATCH_UP_CONFIG)
                window = target.window()
                [result] = run_clients([(consume_worker, spec)], window, 360,
                                       target.check_alive)
                delete_topic(target, topic)
            if result["received"] != messages or result["errors"]:
                raise RuntimeError(f"read {result['received']} of {messages} messages, "
                                   f"{result['errors']} errors")
            gb = result["value_bytes"] / 1e9
            client = 100 * result["client_cpu_s"] / result["seconds"]
            broker = window.figures()
            return {
                "value_bytes": value_bytes, "messages": messages, "seconds": result["seconds"],
                "messages_per_s": messages / result["seconds"],
                "mb_per_s": gb * 1e3 / result["seconds"],
                "broker_cpu_s_per_gb": None if window.cpu_s is None else window.cpu_s / gb,
                **broker,
                "client_cpu_percent": [client],
                "limit": limit(broker["broker_cpu_percent"], [client], run.cores),
            }

        cases.append(_case(run, f"{_size_name(value_bytes)} x{messages}", body))
    return {
        "description": "one consumer process reads a one-partition topic from offset 0 to "
                       "its end (librdkafka defaults but fetch.queue.backoff.ms=1, no "
                       "consumer group)",
        "params": {"messages": {str(k): v for k, v in amounts.items()},
                   "consumer_config": CATCH_UP_CONFIG},
        "cases": cases,
    }


def latency(run: Run) -> dict[str, Any]:
    """End to end, send to receipt, at fixed rates of 1 KB messages with acks=1."""
    rates = [5000] if run.quick else [5000, 20000]
    duration_s = 4.0 if run.quick else 15.0
    warmup_s = 1.0
    producer_config = {"acks": "1", "linger.ms": 1}
    cases = []
    for rate in rates:

        def body(rate: int = rate) -> dict[str, Any]:
            messages = int(rate * duration_s)
            with run.broker() as target:
                topic, _ = create_topic(target, 1, "latency")
                consumer = ConsumeSpec(target.bootstrap, topic, (0,), messages,
                                       timeout_s=duration_s + 30, latency=True,
                                       warmup_s=warmup_s)
                producer = ProduceSpec(target.bootstrap, topic, KB, duration_s + 10,
                                       producer_config, rate_per_s=rate,
                                       max_messages=messages, stamp=True)
                window = target.window()
                got, sent = run_clients([(consume_worker, consumer), (produce_worker, producer)],
                                        window, duration_s + 60, target.check_alive)
                delete_topic(target, topic)
            if got["received"] != messages or sent["delivered"] != messages:
                raise RuntimeError(f"sent {sent['delivered']}, received {got['received']} "
                                   f"of {messages}")
            clients = [100 * r["client_cpu_s"] / r["seconds"] for r in (sent, got)]
            broker = window.figures()
            return {
                "rate_per_s": rate, "messages": messages,
                "achieved_rate_per_s": messages / sent["seconds"],
                **{k: got[k] for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms",
                                       "mean_ms", "measured")},
                **broker,
                "client_cpu_percent": clients,
                "limit": limit(broker["broker_cpu_percent"], clients, run.cores),
            }

        cases.append(_case(run, f"{rate} msg/s", body))
    return {
        "description": f"1 KB messages at a fixed rate for {duration_s:.0f} s, acks=1, "
                       "linger.ms=1; one consumer process polling; send (just before "
                       "produce()) to receipt (poll() returns), the first "
                       f"{warmup_s:.0f} s left out",
        "params": {"rates": rates, "duration_s": duration_s, "warmup_s": warmup_s,
                   "producer_config": producer_config},
        "cases": cases,
    }


def partitions(run: Run) -> dict[str, Any]:
    """The same produce load over more and more partitions: throughput and memory."""
    counts = [1, 10, 100, 1000] if run.quick else [1, 10, 100, 1000, 10000]
    modes = ["default"] if run.quick else ["default", "round-robin"]
    duration_s = 1.5 if run.quick else 5.0
    cases = []
    for mode in modes:
        for count in counts:

            def body(count: int = count, mode: str = mode) -> dict[str, Any]:
                with run.broker() as target:
                    topic, create_s = create_topic(target, count, "partitions")
                    time.sleep(0.5)
                    idle_rss = None if target.pid is None else process_rss_bytes(target.pid)
                    spread = {"round_robin_partitions": count} if mode == "round-robin" else {}
                    figures = measure_produce(run, target, topic, KB, 1, duration_s, {},
                                              count_partitions=True, **spread)
                    delete_topic(target, topic)
                return {"partitions": count, "mode": mode, "create_s": create_s,
                        "rss_before_mb": None if idle_rss is None else idle_rss / 1e6,
                        **figures}

            cases.append(_case(run, f"{count} partitions {mode}", body))
    return {
        "description": "one producer process, 1 KB messages, librdkafka defaults, for "
                       f"{duration_s:.0f} s into a topic of N partitions. 'default' leaves "
                       "the partition to librdkafka (null keys: the sticky partitioner, as "
                       "kafka-producer-perf-test does); 'round-robin' sends message i to "
                       "partition i % N, so every partition gets small batches",
        "params": {"counts": counts, "modes": modes, "duration_s": duration_s},
        "cases": cases,
    }


def rebalances(run: Run) -> dict[str, Any]:
    """Consumer-group rebalance time (see `weirmq.bench.rebalance`)."""
    names = ["consumer-hb500"] if run.quick else [s.name for s in rebalance.SCENARIOS]
    params = rebalance.Params(runs=1 if run.quick else 3, partitions=12, rate_per_s=2000,
                              value_bytes=100, timeout_s=30.0 if run.quick else 60.0)
    cases = []
    for name in names:
        scenario = rebalance.SCENARIOS_BY_NAME[name]
        if run.bootstrap is not None and scenario.broker_env:
            cases.append({"name": name, "skipped": "needs a broker setting we cannot make "
                                                   "on an external broker"})
            continue

        def body(scenario: rebalance.Scenario = scenario) -> dict[str, Any]:
            result = rebalance.run_scenario(run.work, scenario, params, run.log, run.bootstrap)
            summary = result["summary"]
            return {
                "description": scenario.description, "runs": len(result["runs"]),
                **{f"{key}_median": summary[key]["median"] for key in summary},
                **{f"{key}_max": summary[key]["max"] for key in summary},
            }

        cases.append(_case(run, name, body))
    return {
        "description": "a 4th member joins a 3-member group on 12 partitions (and leaves "
                       "again) while 2,000 msg/s are produced; seconds until every member "
                       "owns a balanced share and consumes",
        "params": {"scenarios": names, **{k: v for k, v in vars(params).items() if k != "topic"}},
        "cases": cases,
    }


WORKLOADS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "startup": startup,
    "idle": idle,
    "produce": produce,
    "consume": consume,
    "latency": latency,
    "partitions": partitions,
    "rebalance": rebalances,
}
