"""Where a transaction's time goes: one transactional producer against a broker whose
Kafka requests are timed on the wire.

    python -m bench.txn_timeline [--transactions 1500] [--per-transaction 1000]
                                 [--idempotent] [--no-fsync]

The broker runs in this process (127.0.0.1, a temporary data directory) with two hooks on
its connections: the time each request frame is complete (`Connection._on_frame`) and
the time each batch of replies is written (`Connection._flush`). A confluent-kafka
producer in a child process runs `begin_transaction`, 1,000 `produce()` calls of 1 KB
(`--per-transaction`; a delivery callback each, as `weirmq bench` has) and
`commit_transaction`, over and over, noting when each step starts and ends. Both sides
read CLOCK_MONOTONIC, one clock for every process on a machine, so the two timelines
interleave.

It prints, for the most common sequence of events in a transaction, the median and mean
milliseconds between consecutive events, and whose time each gap is: the broker's (a
request received until answered) or the client's (everything else, the transfer of
requests included). The means add up to that sequence's mean transaction.

`--idempotent` runs the same producer without a `transactional.id` for as many messages
(a `poll(0)` every 1,024), and prints only its msg/s: the figure to compare with.
`--no-fsync` makes fsync a no-op: not a way to run a broker, a bound. It shows what
either would reach if durability cost nothing at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

API_NAMES = {0: "Produce", 24: "AddPartitionsToTxn", 26: "EndTxn"}

CLIENT = r"""
import json, os, sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, count, out, idempotent = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
per = int(sys.argv[5])
admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until it has answered
admin.create_topics([NewTopic("timeline", 1, 1)])["timeline"].result()
config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
if idempotent != "1":
    config["transactional.id"] = "timeline"
producer = Producer(config)
producer.list_topics("timeline", timeout=30)
value, delivered, steps = os.urandom(1024), [0], []
def on_delivery(err, msg):
    if err is None:
        delivered[0] += 1
now = time.monotonic
def send():
    while True:
        try:
            producer.produce("timeline", value, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.001)
if idempotent == "1":
    began = now()
    for sent in range(per * count):
        send()
        if sent % 1024 == 0:
            producer.poll(0)
    producer.flush(60)
    steps.append((began, began, now()))
else:
    producer.init_transactions(30)
    for _ in range(count):
        began = now()
        producer.begin_transaction()
        for _ in range(per):
            send()
        produced = now()
        producer.commit_transaction(30)
        steps.append((began, produced, now()))
assert delivered[0] == per * count, delivered[0]
json.dump(steps, open(out, "w"))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _hook_connections(events: list[tuple[float, str]]) -> None:
    """Record (time, "in:API" or "out") for every request frame and reply write."""
    from weirmq.server import connection

    on_frame, flush = connection.Connection._on_frame, connection.Connection._flush
    now = time.monotonic

    def timed_on_frame(self: Any, frame: Any, read_at: float, held: int) -> None:
        api = struct.unpack_from(">h", frame, 0)[0]
        events.append((now(), "in:" + API_NAMES.get(api, str(api))))
        on_frame(self, frame, read_at, held)

    def timed_flush(self: Any) -> None:
        due = bool(self._due)
        flush(self)
        if due:
            events.append((now(), "out"))

    connection.Connection._on_frame = timed_on_frame  # type: ignore[method-assign]
    connection.Connection._flush = timed_flush  # type: ignore[method-assign]


async def _measure(data_dir: Path, transactions: int, per: int, steps_path: Path,
                   idempotent: bool) -> None:
    from weirmq.server.run import serve
    from weirmq.settings import Settings

    port = _free_port()
    settings = Settings(data_dir=data_dir, listen=f"127.0.0.1:{port}", amqp_listen=None,
                        sqs_listen=None)
    stop = asyncio.Event()
    ready = asyncio.Event()
    broker = asyncio.create_task(
        serve(settings, stop=stop, announce=lambda _line: None,
              ready=lambda _broker: ready.set()))
    await asyncio.wait_for(ready.wait(), 60)
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, f"127.0.0.1:{port}", str(transactions), str(steps_path),
        "1" if idempotent else "0", str(per))
    code = await asyncio.wait_for(client.wait(), 60 + transactions * 0.1)
    stop.set()
    await broker
    if code != 0:
        raise SystemExit(f"the producer failed with exit status {code}")


def _analyse(events: list[tuple[float, str]], steps: list[list[float]], per: int) -> str:
    """Per gap of the most common transaction's sequence: median and mean ms, and whose."""
    timeline = sorted(
        events
        + [(s[0], "begin") for s in steps]
        + [(s[1], "produced") for s in steps]
        + [(s[2], "committed") for s in steps]
    )
    begins = [i for i, (_t, what) in enumerate(timeline) if what == "begin"]
    cycles = [timeline[a : b + 1] for a, b in pairwise(begins)][20:]  # warm
    shapes = Counter(tuple(what for _t, what in cycle) for cycle in cycles)
    shape, count = shapes.most_common(1)[0]
    gaps: list[list[float]] = [[] for _ in shape[1:]]
    for cycle in cycles:
        if tuple(what for _t, what in cycle) == shape:
            for i in range(1, len(cycle)):
                gaps[i - 1].append((cycle[i][0] - cycle[i - 1][0]) * 1000)
    lines = [f"{len(cycles)} transactions; the most common sequence ({count}):"]
    sides = {"client": 0.0, "broker": 0.0}
    for i, values in enumerate(gaps):
        start, end = shape[i], shape[i + 1]
        side = "broker" if start.startswith("in:") and end == "out" else "client"
        sides[side] += statistics.mean(values)
        median, mean = statistics.median(values), statistics.mean(values)
        lines.append(f"  {start:>22} -> {end:<22} {side:<6}  median {median:6.3f}"
                     f"  mean {mean:6.3f} ms")
    every = [(b[0] - a[0]) * 1000 for a, b in pairwise(steps)]
    lines.append(f"  means: client {sides['client']:.2f} ms, broker {sides['broker']:.2f} ms; "
                 f"every transaction: median {statistics.median(every):.2f}, "
                 f"mean {statistics.mean(every):.2f} ms "
                 f"({per * 1000 / statistics.mean(every):,.0f} msg/s)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=1500)
    parser.add_argument("--per-transaction", type=int, default=1000,
                        help="messages per transaction (with --idempotent: the messages"
                             " sent are this times --transactions)")
    parser.add_argument("--idempotent", action="store_true",
                        help="the same producer without transactions: msg/s only")
    parser.add_argument("--no-fsync", action="store_true",
                        help="make fsync a no-op (a bound, not a way to run)")
    args = parser.parse_args()
    if args.no_fsync:
        from weirmq.storage import log as storage_log

        storage_log._fsync_path = lambda _path: None  # type: ignore[assignment]
    events: list[tuple[float, str]] = []
    _hook_connections(events)
    with tempfile.TemporaryDirectory(prefix="weirmq-timeline-") as work:
        steps_path = Path(work) / "steps.json"
        asyncio.run(_measure(Path(work) / "data", args.transactions, args.per_transaction,
                             steps_path, args.idempotent))
        steps = json.loads(steps_path.read_text())
    if args.idempotent:
        began, _began, done = steps[0]
        sent = args.per_transaction * args.transactions
        print(f"idempotent: {sent / (done - began):,.0f} msg/s")
    else:
        print(_analyse(events, steps, args.per_transaction))


if __name__ == "__main__":
    main()
