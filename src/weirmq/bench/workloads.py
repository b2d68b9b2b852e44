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

Requests: with our own broker, the produce cases and every catch-up read also count the
Produce or Fetch requests the broker answered in their window (from the broker's metrics;
`target` says why the idle and partitions windows do not read them), and divide the
window's broker CPU by them. The ``requests`` workload turns
that into issue 17's per-request overhead: the same data moved once in small requests and
once in large ones, so the difference in CPU per GB divided by the difference in requests
per GB is what one more request costs beyond its bytes:

    overhead per request = (CPU s/GB small - CPU s/GB large)
                           / (requests/GB small - requests/GB large)

Both halves come from the broker's own counts over the same windows, so neither the
client's batching decisions nor a guess at the request size enter the figure.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from weirmq.bench import amqp as amqp_load
from weirmq.bench import rebalance, report
from weirmq.bench import sqs as sqs_load
from weirmq.bench.rabbitmq import RabbitMQNotInstalled, RabbitNode
from weirmq.bench.target import (
    BrokerProcess,
    ExternalBroker,
    Target,
    Window,
    amqp_listen_env,
    histogram_quantile,
    process_rss_bytes,
)
from weirmq.bench.workers import (
    CTX,
    ConsumeSpec,
    GroupReadSpec,
    ProduceSpec,
    consume_worker,
    group_worker,
    percentiles,
    produce_worker,
    run_clients,
)

KB = 1024
# Issue 17's small requests: 60 KB batches, what latency-minded producers, many-partition
# workloads and per-message protocols (AMQP publishes, SQS sends) look like to a broker.
SMALL_REQUEST_BYTES = 60_000
SMALL_BATCH = {"batch.size": SMALL_REQUEST_BYTES}
# librdkafka refuses a fetch.max.bytes below message.max.bytes (1 MB by default), which for
# a consumer bounds only the requests it sends: small ones, so lowering it changes nothing.
SMALL_FETCH = {"max.partition.fetch.bytes": SMALL_REQUEST_BYTES,
               "fetch.max.bytes": SMALL_REQUEST_BYTES, "message.max.bytes": SMALL_REQUEST_BYTES}
LATENCY_METRIC = "weirmq_request_latency_seconds"
STOP_WAIT_S = 300.0  # a stop slower than this is killed and recorded as a failure


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


def create_topic(
    target: Target, partitions: int, prefix: str, configs: dict[str, str] | None = None
) -> tuple[str, float]:
    """A new topic on `target`; returns its name and the seconds its creation took."""
    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    start = time.perf_counter()
    new = NewTopic(name, partitions, 1, config=configs or {})
    futures = admin.create_topics([new], operation_timeout=120, request_timeout=180)
    futures[name].result()
    # Creation is acknowledged before every client sees the topic: wait until Metadata has it.
    deadline = time.monotonic() + 60
    while len(admin.list_topics(name, timeout=30).topics[name].partitions) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} not visible with {partitions} partitions")
        time.sleep(0.1)
    return name, time.perf_counter() - start


def delete_topic(target: Target, name: str, even_ours: bool = False) -> None:
    """Delete `name` from an external broker; ours keep theirs (they go with the broker's
    data directory) unless `even_ours`. Deleting frees the topic's page-cache pages for
    the next writes to reuse: on a virtual machine, a write to guest memory never touched
    since boot is several times slower (measured here: 1 MiB into new page-cache pages in
    1.2-1.6 ms, 0.2 ms into reused ones), so a case measured after gigabytes kept runs
    slower than the same case on a recycled cache, as a long-running broker's is."""
    if not target.own or even_ours:
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


def _per_request_us(cpu_s: float | None, requests: int | None) -> float | None:
    return None if cpu_s is None or not requests else cpu_s * 1e6 / requests


def _request_figures(window: Window, api: str, gb: float) -> dict[str, Any]:
    """The `api` requests the broker answered in `window`, per GB and per CPU µs."""
    requests = window.requests(api)
    return {
        "requests": requests,
        "requests_per_gb": None if requests is None or not gb else requests / gb,
        "broker_cpu_us_per_request": _per_request_us(window.cpu_s, requests),
    }


def measure_produce(run: Run, target: Target, topic: str, value_bytes: int, producers: int,
                    duration_s: float, config: dict[str, Any], count_requests: bool = False,
                    **spec: Any) -> dict[str, Any]:
    """`producers` processes produce to `topic` together; the figures of the whole.

    With `count_requests`, the window reads the broker's metrics for its Produce requests
    (see `target` for why that is not the default).
    """
    specs = [ProduceSpec(target.bootstrap, topic, value_bytes, duration_s, config, **spec)
             for _ in range(producers)]
    window = target.window(metrics=count_requests)
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
        **_request_figures(window, "Produce", gb),
        "client_cpu_percent": clients,
        "partitions_touched": max(r["partitions_touched"] for r in results),
        "limit": limit(broker["broker_cpu_percent"], clients, run.cores),
    }


def measure_catch_up(run: Run, target: Target, topic: str, messages: int,
                     config: dict[str, Any]) -> dict[str, Any]:
    """One consumer process reads `messages` from offset 0 of `topic`'s partition 0.

    The consumer is assigned its partition only when the window opens: assigned earlier,
    librdkafka fetches at once, up to 100,000 messages or 64 MB while the window is being
    opened (a scrape of the broker's metrics takes a fifth of a second), and those bytes
    would be counted without the broker CPU or the requests that served them.
    """
    spec = ConsumeSpec(target.bootstrap, topic, (0,), messages, timeout_s=300,
                       config={**CATCH_UP_CONFIG, **config}, assign_at_go=True)
    window = target.window(metrics=True)
    [result] = run_clients([(consume_worker, spec)], window, 360, target.check_alive)
    if result["received"] != messages or result["errors"]:
        raise RuntimeError(f"read {result['received']} of {messages} messages, "
                           f"{result['errors']} errors")
    gb = result["value_bytes"] / 1e9
    client = 100 * result["client_cpu_s"] / result["seconds"]
    broker = window.figures()
    return {
        "messages": messages, "seconds": result["seconds"],
        "messages_per_s": messages / result["seconds"],
        "mb_per_s": gb * 1e3 / result["seconds"],
        "broker_cpu_s_per_gb": None if window.cpu_s is None else window.cpu_s / gb,
        **broker,
        **_request_figures(window, "Fetch", gb),
        "client_cpu_percent": [client],
        "limit": limit(broker["broker_cpu_percent"], [client], run.cores),
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


def _cases(run: Run, names: list[str], body: Callable[[], list[dict[str, Any]]]
           ) -> list[dict[str, Any]]:
    """Several cases measured in one go (on one broker); a failure fails each of them."""
    run.log(f"  {', '.join(names)} ...")
    try:
        results = body()
    except Exception as exc:
        run.log(f"  {names[0]} and the rest: FAILED: {type(exc).__name__}: {exc}")
        return [{"name": name, "error": f"{type(exc).__name__}: {exc}"} for name in names]
    return [{"name": name, **figures} for name, figures in zip(names, results, strict=True)]


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
        BrokerProcess(run.work, settle=False).stop()  # not counted: fills the bytecode cache
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
                       f"and to a first Metadata answer (median of {runs}, after one start "
                       "that is not counted: with Python's bytecode cached, as installed)",
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


def produce_plan(quick: bool) -> list[tuple[int, str, int, int | None]]:
    """(value bytes, acks, producers, batch.size or None for librdkafka's 1 MB) per case.

    Issue 17's small-batch cases (one producer, 1 KB and 16 KB) follow each size's default
    cases, so the two sit side by side in the table.
    """
    sizes = [KB] if quick else [100, KB, 16 * KB]
    plan: list[tuple[int, str, int, int | None]] = []
    for value_bytes in sizes:
        plan += [(value_bytes, acks, producers, None)
                 for acks in ("1", "all") for producers in (1, 2)]
        if value_bytes >= KB:
            plan += [(value_bytes, acks, 1, SMALL_REQUEST_BYTES) for acks in ("1", "all")]
    return plan


def produce_case_name(value_bytes: int, acks: str, producers: int,
                      batch_bytes: int | None) -> str:
    batch = "" if batch_bytes is None else f" batch={batch_bytes}"
    return f"{_size_name(value_bytes)} acks={acks}{batch} x{producers}"


def produce(run: Run) -> dict[str, Any]:
    """Throughput of 1 and 2 producer processes, by message size, acks and batch size."""
    plan = produce_plan(run.quick)
    duration_s = 1.5 if run.quick else 5.0
    cases = []
    for value_bytes, acks, producers, batch_bytes in plan:

        def body(value_bytes: int = value_bytes, acks: str = acks, producers: int = producers,
                 batch_bytes: int | None = batch_bytes) -> dict[str, Any]:
            config = {"acks": acks, **({} if batch_bytes is None else SMALL_BATCH)}
            with run.broker() as target:
                topic, _ = create_topic(target, 1, "produce")
                figures = measure_produce(run, target, topic, value_bytes, producers,
                                          duration_s, config, count_requests=True)
                delete_topic(target, topic)
            return {"value_bytes": value_bytes, "acks": acks, "producers": producers,
                    "batch_size": batch_bytes, **figures}

        name = produce_case_name(value_bytes, acks, producers, batch_bytes)
        cases.append(_case(run, name, body))
    return {
        "description": "producers as fast as they can for a fixed time, one topic of one "
                       "partition, librdkafka's default batching (linger.ms 5, batch.size "
                       f"1 MB, no compression), null keys; 'batch={SMALL_REQUEST_BYTES}' "
                       f"cases set batch.size={SMALL_REQUEST_BYTES}. 'requests': Produce "
                       "requests the broker answered in the window",
        "params": {"cases": [list(c) for c in plan], "duration_s": duration_s,
                   "small_batch_bytes": SMALL_REQUEST_BYTES},
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
                figures = measure_catch_up(run, target, topic, messages, {})
                delete_topic(target, topic)
            return {"value_bytes": value_bytes, **figures}

        cases.append(_case(run, f"{_size_name(value_bytes)} x{messages}", body))
    return {
        "description": "one consumer process reads a one-partition topic from offset 0 to "
                       "its end (librdkafka defaults but fetch.queue.backoff.ms=1, no "
                       "consumer group)",
        "params": {"messages": {str(k): v for k, v in amounts.items()},
                   "consumer_config": CATCH_UP_CONFIG},
        "cases": cases,
    }


def _produce_fixed(run: Run, target: Target, topic: str, messages: int,
                   config: dict[str, Any]) -> dict[str, Any]:
    figures = measure_produce(run, target, topic, KB, 1, 600.0, config, count_requests=True,
                              max_messages=messages)
    if figures["messages"] != messages:
        raise RuntimeError(f"delivered {figures['messages']} of {messages} messages")
    return {"api": "Produce", "value_bytes": KB, **figures}


def requests(run: Run) -> dict[str, Any]:
    """Issue 17's per-request overhead: one amount of data in small and in large requests.

    Produce: `messages` of 1 KB with batch.size=60000 and again with librdkafka's default
    1 MB batches, each on a fresh broker. Fetch: what the small batches wrote, read from
    offset 0 with fetch limits of 60000 and with the defaults (1 MB per partition), on the
    same broker: a fetch returns whole batches, so 1 MB batches would make both reads the
    same size. The module docstring has the arithmetic.
    """
    messages = 100_000 if run.quick else 300_000
    acks = {"acks": "1"}  # acks=all would add fsyncs, which the produce cases measure
    names = [f"produce batch.size={SMALL_REQUEST_BYTES}", "produce default (1 MB)",
             f"fetch fetch.max.bytes={SMALL_REQUEST_BYTES}", "fetch default (1 MB)"]

    def produce_large() -> dict[str, Any]:
        with run.broker() as target:
            topic, _ = create_topic(target, 1, "requests")
            figures = _produce_fixed(run, target, topic, messages, acks)
            delete_topic(target, topic)
        return {"request_bytes": None, **figures}

    def small_then_fetches() -> list[dict[str, Any]]:
        with run.broker() as target:
            topic, _ = create_topic(target, 1, "requests")
            produced = _produce_fixed(run, target, topic, messages, {**acks, **SMALL_BATCH})
            fetched = [{"api": "Fetch", "value_bytes": KB, "request_bytes": request_bytes,
                        **measure_catch_up(run, target, topic, messages, config)}
                       for request_bytes, config in ((SMALL_REQUEST_BYTES, SMALL_FETCH),
                                                     (None, {}))]
            delete_topic(target, topic)
        return [{"request_bytes": SMALL_REQUEST_BYTES, **produced}, *fetched]

    small_produce, small_fetch, large_fetch = _cases(run, [names[0], *names[2:]],
                                                     small_then_fetches)
    large_produce = _case(run, names[1], produce_large)
    for small, large in ((small_produce, large_produce), (small_fetch, large_fetch)):
        if "error" not in small:
            small["overhead_us_per_request"] = report.per_request_overhead_us(small, large)
    return {
        "description": f"{messages:,} messages of 1 KB produced (acks=1) in {SMALL_REQUEST_BYTES}"
                       "-byte batches and in librdkafka's default 1 MB ones, each on a fresh "
                       f"broker; then the {SMALL_REQUEST_BYTES}-byte batches read from offset 0 "
                       f"with fetch limits of {SMALL_REQUEST_BYTES} and with the defaults. "
                       "'overhead': broker CPU per request beyond the per-byte cost",
        "params": {"messages": messages, "value_bytes": KB,
                   "small_request_bytes": SMALL_REQUEST_BYTES, "producer_config": acks,
                   "small_fetch_config": SMALL_FETCH, "consumer_config": CATCH_UP_CONFIG},
        "cases": [small_produce, large_produce, small_fetch, large_fetch],
    }


def broker_latency(window: Window, e2e_p99_ms: float) -> dict[str, Any]:
    """The broker's own latency histogram over `window`: its p50 and p99, and its share.

    The histogram times each Kafka request from its frame read to its response written,
    by request; the figures are the producer's Produce requests. (A consumer's Fetch waits
    in the broker on purpose, for data to arrive, so its time there is mostly the wait.)
    Without the histogram (an external broker, or one that does not export it) every
    figure is None.
    """
    buckets = window.histogram(LATENCY_METRIC, protocol="kafka", request="Produce")
    p50, p99 = (histogram_quantile(q, buckets) for q in (0.5, 0.99))
    p99_ms = None if p99 is None else p99 * 1000
    return {
        "broker_requests": None if buckets is None else round(buckets[-1][1]),
        "broker_p50_ms": None if p50 is None else p50 * 1000,
        "broker_p99_ms": p99_ms,
        "broker_p99_share": None if p99_ms is None or not e2e_p99_ms else p99_ms / e2e_p99_ms,
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
                window = target.window(metrics=True)
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
                **broker_latency(window, got["p99_ms"]),
                **broker,
                "client_cpu_percent": clients,
                "limit": limit(broker["broker_cpu_percent"], clients, run.cores),
            }

        cases.append(_case(run, f"{rate} msg/s", body))
    return {
        "description": f"1 KB messages at a fixed rate for {duration_s:.0f} s, acks=1, "
                       "linger.ms=1; one consumer process polling; send (just before "
                       "produce()) to receipt (poll() returns), the first "
                       f"{warmup_s:.0f} s left out; 'broker': the broker's own histogram "
                       "of request latency (frame read to response written) over the "
                       "window's requests",
        "params": {"rates": rates, "duration_s": duration_s, "warmup_s": warmup_s,
                   "producer_config": producer_config},
        "cases": cases,
    }


def partitions_plan(quick: bool) -> list[tuple[str, int]]:
    """(mode, partitions) per case. Quick keeps what the targets compare: 10 and 1,000
    partitions in the default mode (issue 6), and both modes at 1,000 (issue 17)."""
    if quick:
        return [("default", 1), ("default", 10), ("default", 1000), ("round-robin", 1000)]
    return [(mode, count) for mode in ("default", "round-robin")
            for count in (1, 10, 100, 1000, 10000)]


def partitions(run: Run) -> dict[str, Any]:
    """The same produce load over more and more partitions: throughput and memory."""
    plan = partitions_plan(run.quick)
    duration_s = 1.5 if run.quick else 5.0
    cases = []
    for mode, count in plan:

        def body(count: int = count, mode: str = mode) -> dict[str, Any]:
            with run.broker() as target:
                topic, create_s = create_topic(target, count, "partitions")
                time.sleep(0.5)
                idle_rss = None if target.pid is None else process_rss_bytes(target.pid)
                spread = count if mode == "round-robin" else None
                figures = measure_produce(run, target, topic, KB, 1, duration_s, {},
                                          count_partitions=True, round_robin_partitions=spread)
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
        "params": {"cases": [list(c) for c in plan], "duration_s": duration_s},
        "cases": cases,
    }


def stop(run: Run) -> dict[str, Any]:
    """A clean stop with many partitions, each holding an idempotent producer's state.

    The producer writes a few messages to every partition in turn, so the broker has
    producer state (and, if it keeps them, snapshots to write) for each. Then SIGTERM, and
    the time until the process has exited. A slow stop is waited for, up to `STOP_WAIT_S`;
    only past that is the broker killed, and the case fails rather than report a time.
    """
    count = 1000 if run.quick else 10_000
    per_partition = 3
    value_bytes = 100
    config = {"enable.idempotence": True, "acks": "all"}
    if run.bootstrap is not None:
        return {"description": "not measured: the broker is external", "params": {},
                "cases": []}

    def body() -> dict[str, Any]:
        broker = BrokerProcess(run.work)
        try:
            topic, create_s = create_topic(broker, count, "stop")
            figures = measure_produce(run, broker, topic, value_bytes, 1, 300.0, config,
                                      max_messages=count * per_partition,
                                      round_robin_partitions=count, count_partitions=True)
            if figures["partitions_touched"] != count:
                raise RuntimeError(f"wrote to {figures['partitions_touched']} of {count} "
                                   "partitions")
            rss = None if broker.pid is None else process_rss_bytes(broker.pid)
            stop_s, exit_code = broker.stop_timed(STOP_WAIT_S)
        finally:
            broker.stop()
        if exit_code is None:
            raise RuntimeError(f"still running {stop_s:.0f} s after SIGTERM: killed")
        return {"partitions": count, "messages": figures["messages"],
                "partitions_written": figures["partitions_touched"], "create_s": create_s,
                "rss_before_stop_mb": None if rss is None else rss / 1e6,
                "stop_s": stop_s, "stop_ms_per_partition": stop_s * 1000 / count,
                "exit_code": exit_code}

    return {
        "description": f"a topic of {count:,} partitions; an idempotent producer (acks=all) "
                       f"writes {per_partition} messages of {value_bytes} B to each in turn; "
                       "then SIGTERM, timed until the broker process has exited",
        "params": {"partitions": count, "messages_per_partition": per_partition,
                   "value_bytes": value_bytes, "producer_config": config,
                   "wait_s": STOP_WAIT_S},
        "cases": [_case(run, f"{count} partitions", body)],
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


ROUTING_DESTINATIONS = 10


def routing_plan(quick: bool) -> list[int]:
    """Bindings of the topic exchange, per case (issue 18's two)."""
    return [10, 10_000]


def _routing_keys(bindings: int) -> tuple[list[str], tuple[bytes, ...]]:
    """(binding specs, record keys) such that every key matches exactly one binding:
    with 10 bindings, `r{i}.*` over 100 keys each; with more, one exact pattern per key."""
    per = bindings // ROUTING_DESTINATIONS
    if bindings <= ROUTING_DESTINATIONS:
        specs = [f"route-{i}?key=r{i}.*" for i in range(bindings)]
        keys = [f"r{i}.k{j}" for j in range(100) for i in range(bindings)]
    else:
        specs = [f"route-{i}?key=r{i}.k{j}" for i in range(ROUTING_DESTINATIONS)
                 for j in range(per)]
        keys = [f"r{i}.k{j}" for j in range(per) for i in range(ROUTING_DESTINATIONS)]
    return specs, tuple(key.encode() for key in keys)


def _declare_exchange(target: Target, name: str, specs: list[str]) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": target.bootstrap})  # alive until answered
    topics = [NewTopic(name, 1, 1, config={"weirmq.exchange.type": "topic"})]
    topics += [NewTopic(f"route-{i}", 1, 1) for i in range(ROUTING_DESTINATIONS)]
    for future in admin.create_topics(topics, operation_timeout=60).values():
        future.result()
    # A config value is a Kafka string, 32,767 bytes at most: the bindings go in chunks,
    # each APPENDed to the list.
    chunks: list[list[str]] = [[]]
    for spec in specs:
        if sum(len(s) + 1 for s in chunks[-1]) + len(spec) > 30_000:
            chunks.append([])
        chunks[-1].append(spec)
    for chunk in chunks:
        entry = ConfigEntry("weirmq.exchange.bindings", ",".join(chunk),
                            incremental_operation=AlterConfigOpType.APPEND)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource], request_timeout=120).values():
            future.result()


def _routed_records(target: Target) -> int:
    """Records in the destination topics (their high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "bench-routing"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(f"route-{i}", 0),
                                                  timeout=30)[1]
                   for i in range(ROUTING_DESTINATIONS))
    finally:
        consumer.close()


def routing(run: Run) -> dict[str, Any]:
    """Issue 18: records/s into destinations through a topic exchange, against plain produce.

    One producer process, 1 KB records with keys, acks=1, librdkafka's default batching.
    Plain: to a topic of one partition. Routed: to a topic exchange of one partition with
    10 and with 10,000 bindings spread over 10 destination topics, every key matching
    exactly one binding; routing is done before a produce is answered, so the copies in
    the destinations are counted at the end and must equal what was acknowledged.
    """
    duration_s = 3.0 if run.quick else 8.0
    config = {"acks": "1"}
    keys_10 = _routing_keys(10)[1]
    cases = []

    def plain() -> dict[str, Any]:
        with run.broker() as target:
            topic, _ = create_topic(target, 1, "plain")
            figures = measure_produce(run, target, topic, KB, 1, duration_s, config,
                                      keys=keys_10)
        return {"bindings": 0, "routed_per_s": figures["messages_per_s"], **figures}

    cases.append(_case(run, "plain", plain))
    for bindings in routing_plan(run.quick):

        def routed(bindings: int = bindings) -> dict[str, Any]:
            specs, keys = _routing_keys(bindings)
            with run.broker() as target:
                _declare_exchange(target, "bench-exchange", specs)
                figures = measure_produce(run, target, "bench-exchange", KB, 1, duration_s,
                                          config, keys=keys)
                copies = _routed_records(target)
            if copies != figures["messages"]:
                raise RuntimeError(f"{figures['messages']} records acknowledged, "
                                   f"{copies} in the destinations")
            return {"bindings": bindings, "routed": copies,
                    "routed_per_s": copies / figures["seconds"], **figures}

        cases.append(_case(run, f"topic exchange, {bindings:,} bindings", routed))
    return {
        "description": "one producer, 1 KB records with keys, acks=1, librdkafka's default "
                       "batching, as fast as it can: to a plain topic, and to a topic exchange "
                       "with 10 and 10,000 bindings over 10 destination topics (each record "
                       "routed to exactly one); 'routed_per_s': records/s into destinations",
        "params": {"duration_s": duration_s, "value_bytes": KB, "producer_config": config,
                   "destinations": ROUTING_DESTINATIONS},
        "cases": cases,
    }


DELAY_HEADER = "weirmq.deliver.at.ms"
DELAYS_MS = (250, 500, 1000, 1500, 2000)
"""The delays of the `delay` workload, in turn: several due times always pending."""


def delay_plan(quick: bool) -> list[int]:
    """Records/s produced with a delay, per case."""
    return [2000] if quick else [1000, 5000]


def _delay_consumer(bootstrap: str, topic: str, expected: int, deadline_s: float,
                    out: list[tuple[bytes, int]]) -> None:
    """Read `topic` from the beginning until `expected` records (or the deadline): (value,
    arrival in epoch ms) each. Runs on a thread: librdkafka waits without the GIL."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-delay",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    end = time.monotonic() + deadline_s
    try:
        while len(out) < expected and time.monotonic() < end:
            # poll, not consume(n, timeout): that waits for n records or the whole timeout.
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                out.append((message.value() or b"", time.time_ns() // 1_000_000))
    finally:
        consumer.close()


def measure_delay(run: Run, target: Target, rate: int, duration_s: float) -> dict[str, Any]:
    """Produce `rate` records/s for `duration_s`, each due `DELAYS_MS` later in turn
    (absolute `weirmq.deliver.at.ms`, so the due time is exact); a plain consumer notes when
    each arrives. Lateness = arrival - due, on this machine's clock."""
    import threading

    from confluent_kafka import Producer

    topic, _ = create_topic(target, 1, "delay", {"weirmq.delay.enable": "true"})
    total = int(rate * duration_s)
    arrived: list[tuple[bytes, int]] = []
    reader = threading.Thread(
        target=_delay_consumer,
        args=(target.bootstrap, topic, total, duration_s + max(DELAYS_MS) / 1000 + 60, arrived),
        daemon=True)
    reader.start()
    producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "1", "linger.ms": 5})
    due: dict[bytes, int] = {}
    started = time.monotonic()
    for n in range(total):
        pause = started + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        value = b"%d" % n
        due[value] = time.time_ns() // 1_000_000 + DELAYS_MS[n % len(DELAYS_MS)]
        while True:
            try:
                producer.produce(topic, value, headers=[(DELAY_HEADER, str(due[value]).encode())])
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("records not acknowledged within 60 s")
    reader.join()
    late = [at - due[value] for value, at in arrived if value in due]
    p50, p99, p999 = percentiles(late, (50, 99, 99.9)) if late else (None, None, None)
    run.log(f"  delay {rate}/s: {len(arrived)} of {total} arrived, lateness p50 {p50} ms, "
            f"p99 {p99} ms")
    return {"rate_per_s": rate, "records": total, "arrived": len(arrived),
            "distinct": len({value for value, _ in arrived}),
            "lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_p999_ms": p999,
            "lateness_max_ms": max(late, default=None),
            "early": sum(1 for x in late if x < 0)}


def delay(run: Run) -> dict[str, Any]:
    """Issue 19: delayed delivery's lateness, arrival at a plain consumer minus due time."""
    duration_s = 3.0 if run.quick else 10.0
    cases = []
    for rate in delay_plan(run.quick):

        def body(rate: int = rate) -> dict[str, Any]:
            with run.broker() as target:
                figures = measure_delay(run, target, rate, duration_s)
            wanted = figures["records"]
            if figures["arrived"] != wanted or figures["distinct"] != wanted:
                raise RuntimeError(f"{figures['records']} delayed records produced, "
                                   f"{figures['arrived']} arrived ({figures['distinct']} distinct)")
            return figures

        cases.append(_case(run, f"{rate}/s delayed", body))
    return {
        "description": "one producer, acks=1, records due 0.25-2 s later (header "
                       f"{DELAY_HEADER}), at a steady rate; a plain consumer (fetch.wait.max.ms "
                       "10) notes each arrival: lateness = arrival - due time, 'early' must be 0",
        "params": {"duration_s": duration_s, "delays_ms": list(DELAYS_MS)},
        "cases": cases,
    }


SHARE_PARTITIONS = 4
SHARE_MEMBERS = 2
SHARE_CASE = f"share group, explicit ack x{SHARE_MEMBERS}"  # report.py's names, too
CLASSIC_CASE = f"classic group x{SHARE_MEMBERS}"


def share_records(quick: bool) -> int:
    """Records of 1 KB in the topic both groups read (a multiple of `SHARE_PARTITIONS`)."""
    return 20_000 if quick else 200_000


def _set_group_configs(target: Target, group: str, configs: dict[str, str]) -> None:
    """Group configs, as a Kafka user sets them: IncrementalAlterConfigs on the GROUP."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": target.bootstrap})  # alive until answered
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource], request_timeout=60).values():
        future.result()


def _check_group_read(results: list[dict[str, Any]], records: int, share: bool) -> None:
    """Every record read exactly once, split over the members; on a share group, accepted."""
    by_partition: dict[int, int] = {}
    for r in results:
        for partition, count in r["by_partition"].items():
            by_partition[partition] = by_partition.get(partition, 0) + count
    per_partition = records // SHARE_PARTITIONS
    wanted = dict.fromkeys(range(SHARE_PARTITIONS), per_partition)
    errors = sum(r["errors"] for r in results)
    if by_partition != wanted or errors:
        raise RuntimeError(f"read {dict(sorted(by_partition.items()))} records by partition "
                           f"({errors} errors); wanted {per_partition} of each")
    if not share:
        return
    redelivered = sum(r["redelivered"] for r in results)
    accepted = sum(r["accepted"] for r in results)
    ack_errors = sum(r["ack_errors"] for r in results)
    if redelivered or ack_errors or accepted != records:
        first = next((r["first_ack_error"] for r in results if r["first_ack_error"]), None)
        raise RuntimeError(f"{accepted} of {records} accepted, {ack_errors} acknowledgements "
                           f"failed (first: {first}), {redelivered} delivered again")


def measure_group_read(run: Run, target: Target, topic: str, group: str, records: int,
                       share: bool, config: dict[str, Any]) -> dict[str, Any]:
    """`SHARE_MEMBERS` processes of one group (share or classic) read all of `topic`.

    records/s is over the span from the first record any member received to the last
    member done (on a share group: its last acknowledgements committed), so joining the
    group is left out and shown as `join_s`. Broker CPU is the window's, which also holds
    the join (a few heartbeats, next to nothing); CPU % and CPU per record are over the span.
    """
    counter = CTX.Value("q", 0)
    spec = GroupReadSpec(target.bootstrap, topic, group, records, 300.0, counter, share,
                         config)
    window = target.window(metrics=True)
    results = run_clients([(group_worker, spec) for _ in range(SHARE_MEMBERS)], window,
                          timeout_s=360, check_alive=target.check_alive)
    _check_group_read(results, records, share)
    start_ns = min(r["first_ns"] for r in results if r["first_ns"] is not None)
    seconds = (max(r["done_ns"] for r in results) - start_ns) / 1e9
    broker = window.figures()
    clients = [100 * r["client_cpu_s"] / ((r["done_ns"] - r["go_ns"]) / 1e9) for r in results]
    cpu_percent = _percent(window.cpu_s, seconds)
    apis = ("ShareFetch", "ShareAcknowledge") if share else ("Fetch", "OffsetCommit")
    requests = {f"{api}_requests": window.requests(api) for api in apis}
    return {
        "records": records, "seconds": seconds, "records_per_s": records / seconds,
        "mb_per_s": records * KB / 1e6 / seconds,
        "join_s": (start_ns - min(r["go_ns"] for r in results)) / 1e9,
        "per_member": [r["received"] for r in results],
        **broker, "broker_cpu_percent": cpu_percent,
        "broker_cpu_us_per_record": None if window.cpu_s is None
        else window.cpu_s * 1e6 / records,
        **requests,
        "client_cpu_percent": clients,
        "limit": limit(cpu_percent, clients, run.cores),
    }


def share(run: Run) -> dict[str, Any]:
    """Issue 19: a share group's consume with explicit per-record acknowledgement against a
    classic consumer group's, both reading one pre-filled topic from its start."""
    records = share_records(run.quick)
    share_configs = {"share.auto.offset.reset": "earliest"}

    def body() -> list[dict[str, Any]]:
        with run.broker() as target:
            topic, _ = create_topic(target, SHARE_PARTITIONS, "share")
            produced = measure_produce(run, target, topic, KB, 1, 600.0, {},
                                       max_messages=records,
                                       round_robin_partitions=SHARE_PARTITIONS)
            if produced["messages"] != records:
                raise RuntimeError(f"delivered {produced['messages']} of {records} records")
            # Before the group first reads the topic, or it starts at the log end.
            suffix = uuid.uuid4().hex[:8]
            _set_group_configs(target, f"bench-share-{suffix}", share_configs)
            try:
                shared = measure_group_read(run, target, topic, f"bench-share-{suffix}",
                                            records, True, {})
            except RuntimeError as exc:  # the classic group is still measured
                shared = {"error": f"{type(exc).__name__}: {exc}"}
                run.log(f"  {SHARE_CASE}: FAILED: {shared['error']}")
            classic = measure_group_read(run, target, topic, f"bench-classic-{suffix}",
                                         records, False, CATCH_UP_CONFIG)
            delete_topic(target, topic)
        if "error" not in shared:
            shared["ratio_to_classic"] = shared["records_per_s"] / classic["records_per_s"]
        return [shared, classic]

    return {
        "description": f"{records:,} records of 1 KB in a topic of {SHARE_PARTITIONS} "
                       f"partitions, read from the start by {SHARE_MEMBERS} processes of a "
                       "share group (ShareConsumer, explicit mode: acknowledge(ACCEPT) for "
                       "every record, commit_async after each poll), then of a classic "
                       "group (Consumer.subscribe, librdkafka defaults but "
                       "fetch.queue.backoff.ms=1); records/s from the first record to the "
                       "last member done, joining the group left out ('join s')",
        "params": {"records": records, "value_bytes": KB, "partitions": SHARE_PARTITIONS,
                   "members": SHARE_MEMBERS, "share_group_configs": share_configs,
                   "classic_consumer_config": CATCH_UP_CONFIG},
        "cases": _cases(run, [SHARE_CASE, CLASSIC_CASE], body),
    }


class _Skip(Exception):
    """A server this run cannot measure, and why (not a failure)."""


def _measure_weirmq(run: Run, amounts: amqp_load.Plan) -> dict[str, dict[str, Any]]:
    if run.bootstrap is not None:
        raise _Skip("the broker is external (--bootstrap): its AMQP address is not known")
    broker = BrokerProcess(run.work)  # its AMQP listener on a free port (amqp_listen_env)
    try:
        address = broker.wait_for_amqp()
        if address is None:
            setting = ("amqp_listen=127.0.0.1:0" if amqp_listen_env()
                       else "this build has no amqp_listen setting")
            raise RuntimeError("no AMQP listener: the broker announced no 'weirmq: "
                               f"accepting AMQP connections on' line ({setting})")
        run.log(f"    WeirMQ: AMQP on {address}, started in {broker.announced_s:.2f} s")
        figures = amqp_load.measure_server(amqp_load.amqp_url(address), broker.pid,
                                           broker.check_alive, amounts)
    finally:
        broker.stop()
    return figures


def _measure_rabbitmq(run: Run, amounts: amqp_load.Plan) -> dict[str, dict[str, Any]]:
    try:
        node = RabbitNode(run.work).start()
    except RabbitMQNotInstalled as exc:
        raise _Skip(str(exc)) from exc
    try:
        run.log(f"    RabbitMQ: {node.host}:{node.port}, started in {node.started_s:.2f} s")
        return amqp_load.measure_server(node.url, node.pid, node.check_alive, amounts)
    finally:
        node.stop()


def amqp(run: Run) -> dict[str, Any]:
    """AMQP 0-9-1, WeirMQ against RabbitMQ with one pika load (see `weirmq.bench.amqp`).

    Each round starts each server afresh (WeirMQ with its AMQP listener on a free port, a
    private RabbitMQ node) and runs the three measurements on it; the servers alternate
    which goes first from round to round. A server that fails is not run again.
    """
    import importlib.util

    amounts = amqp_load.plan(run.quick)
    repeats = 1 if run.quick else 3
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {s: [] for s in amqp_load.SERVERS}
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    if importlib.util.find_spec("pika") is None:
        failed = dict.fromkeys(amqp_load.SERVERS, "pika is not installed: pip install "
                                                  "'weirmq[bench]'")
    measure = {amqp_load.WEIRMQ: _measure_weirmq, amqp_load.RABBITMQ: _measure_rabbitmq}
    for repeat in range(repeats):
        for server in amqp_load.server_order(repeat):
            if server in failed or server in skipped:
                continue
            run.log(f"  {server}, round {repeat + 1} of {repeats} ...")
            try:
                runs[server].append(measure[server](run, amounts))
            except _Skip as exc:
                skipped[server] = str(exc)
                run.log(f"  {server}: skipped: {exc}")
            except Exception as exc:
                failed[server] = f"{type(exc).__name__}: {exc}"
                run.log(f"  {server}: FAILED: {failed[server]}")
    cases = amqp_load.summarise(runs, failed, skipped)
    for case in cases:
        if "error" not in case and "skipped" not in case:
            case["limit"] = limit(case["broker_cpu_percent"], case["client_cpu_percent"],
                                  run.cores)
    return {
        "description": f"pika (one client process) against WeirMQ and RabbitMQ, 1 KB "
                       f"persistent messages into a durable queue: {amounts.each_messages:,} "
                       "published waiting for each confirm (BlockingConnection); "
                       f"{amounts.window_messages:,} published with up to {amqp_load.WINDOW} "
                       "unconfirmed (SelectConnection), then consumed with "
                       f"prefetch {amqp_load.PREFETCH} and a basic_ack each; median of "
                       f"{repeats} round(s), servers alternating; '÷ RabbitMQ': WeirMQ's "
                       "median ÷ RabbitMQ's",
        "params": {"repeats": repeats, "each_messages": amounts.each_messages,
                   "window_messages": amounts.window_messages,
                   "value_bytes": amqp_load.VALUE_BYTES, "window": amqp_load.WINDOW,
                   "prefetch": amqp_load.PREFETCH},
        "cases": cases,
    }


def sqs(run: Run) -> dict[str, Any]:
    """The SQS API with boto3 at two queue depths, next to the same broker's AMQP and to
    moto's server (see `weirmq.bench.sqs`)."""
    skip = (None if run.bootstrap is None else
            "the broker is external (--bootstrap): its SQS and AMQP addresses are not known")
    result = sqs_load.workload(run.work, run.quick, run.log, skip)
    for case in result["cases"]:
        if "error" not in case and "skipped" not in case and "client_cpu_percent" in case:
            case["limit"] = limit(case["broker_cpu_percent"], case["client_cpu_percent"],
                                  run.cores)
    return result


TRANSACTION_MESSAGES = 1_000
TXN_CASE = f"1 KB transactions of {TRANSACTION_MESSAGES:,}"  # report.py's names, too
IDEMPOTENT_CASE = "1 KB idempotent"


def transactions(run: Run) -> dict[str, Any]:
    """Issue 24: transactional produce (1 KB, a commit every 1,000 messages) against
    idempotent produce (acks=all, the producer's default with a transactional.id too), one
    producer process each, alternating on one broker; each case's figure is the median of
    its rounds."""
    rounds = 1 if run.quick else 4
    duration_s = 2.0 if run.quick else 6.0
    runs: dict[str, list[dict[str, Any]]] = {IDEMPOTENT_CASE: [], TXN_CASE: []}
    failures: dict[str, str] = {}
    with run.broker() as target:
        # A warm-up, not counted: a fresh broker's first requests load code (kio loads a
        # message class on its first use), which no later round should pay for.
        topic, _ = create_topic(target, 1, "transactions-warm-up")
        try:
            measure_produce(run, target, topic, KB, 1, duration_s,
                            {"enable.idempotence": True, "acks": "all"})
        finally:
            delete_topic(target, topic, even_ours=True)
        pair = ((IDEMPOTENT_CASE, None), (TXN_CASE, TRANSACTION_MESSAGES))
        for round_number in range(rounds):
            # ABBA: the order flips every round, so that a machine drifting through the
            # run weighs on both cases alike rather than always on the second.
            for name, per in pair if round_number % 2 == 0 else pair[::-1]:
                run.log(f"  {name}, round {round_number + 1} of {rounds} ...")
                # A topic of its own per measurement, deleted after (even on our own
                # broker: `delete_topic`), and the machine's dirty pages written out
                # first: every one starts from an empty log on a recycled page cache,
                # not behind gigabytes the kernel is still writing back. (Kept, the
                # topics made every round slower than the one before, idempotent ones
                # most: 250k msg/s, then 160-170k.)
                topic, _ = create_topic(target, 1, "transactions")
                os.sync()
                try:
                    figures = measure_produce(
                        run, target, topic, KB, 1, duration_s,
                        {"enable.idempotence": True, "acks": "all"},
                        transaction_messages=per,
                    )
                except Exception as exc:
                    failures[name] = f"{type(exc).__name__}: {exc}"
                    continue
                finally:
                    delete_topic(target, topic, even_ours=True)
                runs[name].append(figures)
    cases: list[dict[str, Any]] = []
    for name, measured in runs.items():
        if name in failures:
            cases.append({"name": name, "error": failures[name]})
            continue
        ordered = sorted(measured, key=lambda f: f["messages_per_s"])
        median = ordered[(len(ordered) - 1) // 2]  # the lower median of an even count
        cases.append({"name": name, **median,
                      "messages_per_s_runs": [round(f["messages_per_s"]) for f in measured]})
    idempotent = next((c for c in cases if c["name"] == IDEMPOTENT_CASE and "error" not in c),
                      None)
    for case in cases:
        if idempotent is not None and "error" not in case:
            case["ratio_to_idempotent"] = case["messages_per_s"] / idempotent["messages_per_s"]
    return {
        "description": f"one confluent-kafka producer process, 1 KB random values, acks=all, "
                       f"idempotent; '{TXN_CASE}': with a transactional.id, "
                       f"begin_transaction, {TRANSACTION_MESSAGES:,} produce() calls, "
                       f"commit_transaction, again until {duration_s:g} s; the two cases "
                       f"alternate on one broker after a warm-up round (ABBA: the order flips "
                       f"every round), each on a new topic, {rounds} round(s) each; "
                       "figures of each case's median round",
        "params": {"rounds": rounds, "duration_s": duration_s,
                   "transaction_messages": TRANSACTION_MESSAGES, "value_bytes": KB},
        "cases": cases,
    }


WORKLOADS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "startup": startup,
    "idle": idle,
    "produce": produce,
    "consume": consume,
    "requests": requests,
    "latency": latency,
    "partitions": partitions,
    "stop": stop,
    "routing": routing,
    "rebalance": rebalances,
    "delay": delay,
    "share": share,
    "amqp": amqp,
    "sqs": sqs,
    "transactions": transactions,
}
