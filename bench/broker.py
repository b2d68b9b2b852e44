"""Broker benchmark: start-up time, idle CPU, and produce throughput from a real client.

Run: ``make bench-broker`` (or ``.venv/bin/python -m bench.broker [--quick] [--json FILE]
[--messages N]``). It prints a table and writes the figures, parameters and machine to a
JSON file (default ``bench/results/broker-<timestamp>.json``, gitignored). It is not a
test: nothing here passes or fails on speed.

Every measurement starts the real broker as a subprocess (``python -m weirmq serve``) on
127.0.0.1 with a fresh data directory in a temporary directory under the current one:

1. Start-up: wall time from spawning the process to the line announcing that it accepts
   connections, and on to a completed Metadata round trip from a client (the real
   "ready"); the median of 5 starts (``--quick``: 3), on an empty data directory.
2. Idle CPU: the broker's user+system CPU time (``/proc/PID/stat``) over 10 s with one
   idle client connection open, as a percentage of one core.
3. Produce: one confluent-kafka producer with librdkafka's default settings (acks=all,
   batching by ``linger.ms`` 5 and ``batch.size`` 1 MB) sends N messages of 1 KB values
   (default 200,000; ``--quick`` 50,000) with 8-byte keys to a 1-partition topic, and
   waits for every delivery report. Reported: MB/s of values, messages/s, and the
   broker's CPU time over the run as a share of one core (if it is below 100%, the
   client, not the broker, was the limit). The same again with ``enable.idempotence``.

The client runs in this process on the same 2 cores as the broker, so the figures are
for the pair. Units: MB = 10**6 bytes. Times are wall clock (``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.common import machine_info, save_results

ANNOUNCEMENT = "weirmq: accepting Kafka connections on "
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BrokerProcess:
    """The broker as a subprocess on a free port, with a data directory under `work`."""

    def __init__(self, work: Path) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="broker-", dir=work))
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            # The admin API runs as it does by default (it starts after the Kafka port is
            # announced), on a free port so that two runs never collide.
            [sys.executable, "-m", "weirmq", "serve", "--listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:0",
             "--data-dir", str(self.data_dir), "--log-level", "warning"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        self.announced_s = time.perf_counter() - self.started
        if not line.startswith(ANNOUNCEMENT):
            self.process.kill()
            raise RuntimeError(f"broker did not start: {line!r}")
        self.bootstrap = line.removeprefix(ANNOUNCEMENT).strip()

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(10)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return code


def bench_startup(work: Path, runs: int) -> dict[str, float]:
    announced, ready = [], []
    for _ in range(runs):
        broker = BrokerProcess(work)
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        ready.append(time.perf_counter() - broker.started)
        announced.append(broker.announced_s)
        broker.stop()
    return {
        "announced_ms_median": statistics.median(announced) * 1000,
        "metadata_answered_ms_median": statistics.median(ready) * 1000,
        "runs": runs,
    }


def bench_idle(work: Path, seconds: float) -> dict[str, float]:
    broker = BrokerProcess(work)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_topics(timeout=10)  # one client connection stays open while we watch
    time.sleep(1.0)
    before = broker.cpu_s()
    time.sleep(seconds)
    used = broker.cpu_s() - before
    broker.stop()
    return {"seconds": seconds, "cpu_s": used, "cpu_percent_of_one_core": 100 * used / seconds}


def bench_produce(work: Path, messages: int, extra: dict[str, Any]) -> dict[str, float]:
    broker = BrokerProcess(work)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **extra})
    value = os.urandom(1024)
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    producer.produce("warmup", value=value, on_delivery=on_delivery)
    producer.flush(10)
    cpu_before = broker.cpu_s()
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce("bench", key=i.to_bytes(8, "big"), value=value,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    cpu = broker.cpu_s() - cpu_before
    broker.stop()
    if failures or remaining:
        raise RuntimeError(f"{len(failures)} failed deliveries, {remaining} undelivered")
    return {
        "messages": messages,
        "seconds": elapsed,
        "mb_per_s": messages * len(value) / elapsed / 1e6,
        "messages_per_s": messages / elapsed,
        "broker_cpu_percent_of_one_core": 100 * cpu / elapsed,
    }


def report(results: dict[str, Any]) -> str:
    s, i = results["startup"], results["idle"]
    lines = [
        f"start-up: announced in {s['announced_ms_median']:.0f} ms, first Metadata answered "
        f"after {s['metadata_answered_ms_median']:.0f} ms (median of {s['runs']})",
        f"idle: {i['cpu_s']:.3f} s CPU over {i['seconds']:.0f} s "
        f"= {i['cpu_percent_of_one_core']:.2f}% of one core",
    ]
    for name in ("produce_default", "produce_idempotent"):
        p = results[name]
        lines.append(
            f"{name}: {p['messages']} x 1 KB in {p['seconds']:.2f} s = {p['mb_per_s']:.1f} MB/s,"
            f" {p['messages_per_s']:.0f} msg/s; broker CPU "
            f"{p['broker_cpu_percent_of_one_core']:.0f}% of one core"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and messages")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    messages = args.messages or (50_000 if args.quick else 200_000)
    started = time.strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="weirmq-bench-", dir=Path.cwd()))
    try:
        results = {
            "startup": bench_startup(work, 3 if args.quick else 5),
            "idle": bench_idle(work, 10.0),
            "produce_default": bench_produce(work, messages, {}),
            "produce_idempotent": bench_produce(work, messages, {"enable.idempotence": True}),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    document = {"params": {"messages": messages}, "machine": machine_info(), "results": results}
    print(f"results: {save_results('broker', started, document, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
