"""The ``sqs`` workload: the SQS API with boto3, flat with queue depth, next to AMQP and moto.

Issue 22 asks for SQS throughput that does not fall as a queue grows, at least half of
what the same broker does over AMQP, with moto (the in-memory emulator Python users run
today, whose every call scans the queue) measured beside it. One run of this workload
measures all of it, so every ratio compares figures taken minutes apart on one machine.

Theory of operation
-------------------
- **One WeirMQ broker** (`weirmq.bench.target.BrokerProcess`, a fresh data directory) with
  its SQS API and its AMQP listener on free loopback ports, found from their announcement
  lines. AMQP goes first, on the fresh broker: `weirmq.bench.amqp.measure_server`, the
  ``amqp`` workload's own pika clients (publish waiting for each confirm, publish with a
  window of confirms, consume with an ack each), so the SQS figures have their reference
  from the same process. Then the SQS phases at each depth, each on a queue of its own.
- **A queue "at depth D"** holds between D and D plus the shallowest depth while it is
  measured (1,000 to 2,000; 100,000 to 101,000). It is filled to D first, outside every
  figure, with SendMessageBatch from the same clients. Not by producing to the queue's
  topic with a Kafka client, though that would be faster: librdkafka writes batches of up
  to ~1,000 records, SQS sends batches of 10, and a receive reads and decodes whole
  batches, so a queue filled by Kafka costs WeirMQ about twice the broker CPU per message
  received (measured here: 276-324 µs against 148-162): the deep queue would differ from
  the shallow one in more than its depth. Then rounds, each moving as many messages as
  the shallowest depth, at every depth, so that the start and end of a round (a wait for
  the slowest client) weigh the same everywhere: **send** (SendMessageBatch of `BATCH` x
  1 KB), then **receive + delete** as many (ReceiveMessage with MaxNumberOfMessages
  `BATCH`, then DeleteMessageBatch of what came), which brings the queue back to D. A
  phase's figures are the sums over its rounds, each round in a `Window` on the server's
  process (CPU from ``/proc``, peak RSS sampled).
- **Clients** (`ClientPool`): `CLIENTS` processes, each with its own boto3 client and one
  call in flight, started (spawn, as `weirmq.bench.workers` does) and connected before any
  round. A boto3 call costs its caller 1.5-3.5 ms of CPU, so one Python client cannot
  keep a broker busy; several processes come closer, on a machine whose cores the
  clients share with the broker. The client CPU figures say how close. Beside it, a
  **light client** (`light_worker`, the "(light client)" rows): the same AWS JSON 1.0
  requests (the body botocore would send) POSTed with aiohttp over keep-alive
  connections, `LIGHT_CONCURRENCY` calls in flight in `LIGHT_PROCESSES` process(es),
  each answer checked as boto3's are. It costs ~25-50 µs of CPU per message, near
  pika's, so its ratios to AMQP are the broker's; issue 22's ÷ AMQP targets use them.
  It fills each queue; at each depth boto3's phases run first, then its own.
- **Per call**: each client times every call (SendMessageBatch, ReceiveMessage,
  DeleteMessageBatch) with its own clock; the phase reports their p50 and p99. A partial
  failure of a batch fails the measurement; boto3 does not retry (``total_max_attempts``
  1), so a failure shows instead of hiding behind a retry.
- **Bounds**: every phase has a count and a time limit (`Plan`); a round's tasks stop at
  the time left, so a slow server (moto) moves fewer messages rather than running long,
  and the figures say how many it moved.
- **moto** (``python -m moto.server``, what the ``moto_server`` script runs, on a free
  port) serves the same client code at the shallow depth only, then tries, for a bounded
  time, to grow the queue toward a larger depth in steps: the depth it reached and its
  send rate at each step show how it degrades.

`add_ratios` gives the cases their ratios: flatness (each deep row's msg/s ÷ the same
server's and phase's at the shallowest depth), SQS ÷ AMQP on WeirMQ's rows (send ÷ publish
with a confirm window, and ÷ publish confirming each; receive + delete ÷ consume with an
ack each), the same for messages per broker CPU second (which the clients' share of the
cores does not move), and WeirMQ ÷ moto at moto's depth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing.connection
import os
import socket
import subprocess
import sys
import time
import uuid
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weirmq.bench import amqp as amqp_load
from weirmq.bench.target import BrokerProcess, Window
from weirmq.bench.workers import CTX, READY_TIMEOUT_S, ClientFailed, _cpu_s, percentiles

VALUE_BYTES = 1024
BATCH = 10
"""Messages per SendMessageBatch, ReceiveMessage and DeleteMessageBatch: SQS's most."""
BOTO3 = "boto3"
LIGHT = "light"
"""The two SQS clients: boto3 (what applications run), and a light one that sends the
same AWS JSON 1.0 requests over aiohttp with many calls in flight (`light_worker`)."""
CLIENTS = 8
"""Client processes. A boto3 call costs its client ~1.5-2 ms of CPU, more than the broker
spends on it, so on 2 cores the clients take most of the machine: sending to WeirMQ here,
1 client moved ~2,400 msg/s, 4 ~5,400 and 8 ~7,600 (then client and broker CPU together
were ~1.7 of the 2 cores), 16 no more."""
WAIT_S = 1
"""ReceiveMessage's WaitTimeSeconds: a long poll answers as soon as a message is there, and
an empty answer (none visible yet) costs a second at most, not a busy loop."""
CREDENTIALS = {
    "aws_access_key_id": "bench",
    "aws_secret_access_key": "bench",
    "region_name": "us-east-1",
}
LIGHT_PROCESSES = 1
LIGHT_CONCURRENCY = 16
"""The light client: `LIGHT_PROCESSES` processes with `LIGHT_CONCURRENCY` coroutines each,
one call in flight per coroutine, each on a keep-alive connection of its own. Measured
here at 1,000 deep (send, receive + delete, msg/s): 1 x 16 ~11,600 and ~6,600; 1 x 32 the
same; 2 x 8 ~7,300 and ~4,700; 2 x 16 ~9,600 and ~5,900; 2 x 32 ~10,400 and ~6,700. One
process spends ~25 µs of CPU per message sent and ~50 per message received and deleted,
so it is not what holds the figures back; a second one only takes cores from the broker."""
AMZ_JSON = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS"
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/sqs/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
"""Not a signature (the broker checks none unless keys are configured): it names an access
key, as boto3's does, so the broker has a SenderId to record."""
CALL_TIMEOUT_S = 30.0  # one boto3 call's read timeout
START_TIMEOUT_S = 30.0  # moto's port open, or a queue's depth reached after a fill

SEND = "send"
RECEIVE = "receive"
FILL = "fill"
PHASES = (SEND, RECEIVE)
SEND_CALLS = f"SendMessageBatch x{BATCH}"
RECEIVE_CALLS = f"ReceiveMessage x{BATCH} + DeleteMessageBatch"
CALLS = {SEND: SEND_CALLS, RECEIVE: RECEIVE_CALLS}
WEIRMQ = "WeirMQ"
MOTO = "moto"
SQS = "SQS"
AMQP = "AMQP"
AMQP_SEND = amqp_load.PUBLISH_WINDOW  # what SQS sends are held against: many in flight
AMQP_SEND_EACH = amqp_load.PUBLISH_EACH
AMQP_RECEIVE = amqp_load.CONSUME


@dataclass(frozen=True)
class Plan:
    """How much each part of the workload moves, and for how long at most."""

    depths: tuple[int, ...]  # WeirMQ's queue depths, shallowest first
    fill_s_max: float  # filling WeirMQ's queue to a depth, which must complete in this
    messages: int  # sent, then received and deleted, at each depth
    phase_s_max: float  # one phase at one depth, all its rounds together
    amqp: amqp_load.Plan
    moto_depth: int | None  # None: moto is not measured
    moto_prefill_s_max: float  # filling moto to its depth, which must complete in this
    moto_messages: int
    moto_phase_s_max: float
    moto_fill_depth: int | None  # the time-bounded attempt at a larger depth; None: none
    moto_fill_s_max: float
    moto_fill_step: int = 500  # messages per step of that attempt (one send rate each)
    clients: int = CLIENTS
    light_processes: int = LIGHT_PROCESSES
    light_concurrency: int = LIGHT_CONCURRENCY  # per process


def plan(quick: bool) -> Plan:
    """Full: issue 22's depths, ~5-10 s per WeirMQ phase (~20 s more to fill 100,000),
    moto for ~2 minutes in all. moto moves 200 messages per phase, so its queue stays
    between 1,000 and 1,200 deep: here it sent ~100 msg/s into an empty queue and 30-40
    at 1,000 deep, and received and deleted ~13, with 1 client or 8 alike. Quick: small
    depths, moto briefly, no larger-depth attempt."""
    if quick:
        return Plan(
            depths=(200, 2_000),
            fill_s_max=30.0,
            messages=2_000,
            phase_s_max=15.0,
            amqp=amqp_load.Plan(500, 5_000),
            moto_depth=200,
            moto_prefill_s_max=15.0,
            moto_messages=100,
            moto_phase_s_max=4.0,
            moto_fill_depth=None,
            moto_fill_s_max=0.0,
        )
    return Plan(
        depths=(1_000, 100_000),
        fill_s_max=180.0,
        messages=20_000,
        phase_s_max=60.0,
        amqp=amqp_load.plan(False),
        moto_depth=1_000,
        moto_prefill_s_max=60.0,
        moto_messages=200,
        moto_phase_s_max=30.0,
        moto_fill_depth=20_000,
        moto_fill_s_max=60.0,
    )


def message_body(value_bytes: int = VALUE_BYTES) -> str:
    """A random body of `value_bytes` ASCII characters (SQS bodies are text)."""
    return os.urandom(math.ceil(value_bytes / 2)).hex()[:value_bytes]


def split(total: int, parts: int, unit: int = BATCH) -> list[int]:
    """`total` shared among `parts` clients in whole `unit`s (batches) as far as it goes:
    the shares differ by one unit at most, and a remainder short of a unit goes to the
    first share that has fewer units. Sums to `total`."""
    assert total >= 0 and parts > 0 and unit > 0, (total, parts, unit)
    units, remainder = divmod(total, unit)
    shares = [(units // parts + (i < units % parts)) * unit for i in range(parts)]
    if remainder:
        shares[units % parts] += remainder
    return shares


def make_client(endpoint: str) -> Any:
    """A boto3 SQS client of its own (boto3's sessions are not thread-safe) for `endpoint`,
    with dummy credentials and no retries."""
    import boto3  # type: ignore[import-untyped]  # boto3 and botocore ship no type hints
    from botocore.config import Config  # type: ignore[import-untyped]

    config = Config(
        retries={"total_max_attempts": 1},
        connect_timeout=5,
        read_timeout=CALL_TIMEOUT_S,
        max_pool_connections=1,
    )
    return boto3.session.Session().client(
        "sqs", endpoint_url=endpoint, config=config, **CREDENTIALS
    )


# --- Client processes (top-level functions: the spawn method imports them by name) ----------


@dataclass(frozen=True)
class Task:
    """One client's share of a round: `messages` to send, or to receive and delete, from
    `queue_url`, stopping after `time_s` whatever is left."""

    kind: str  # SEND or RECEIVE
    queue_url: str
    messages: int
    time_s: float


def client_worker(name: str, endpoint: str, conn: Any) -> None:
    """A client process: builds its client, makes one call (so connecting and boto3's
    loading are in no figure), says ready, then runs each `Task` it is sent until None."""
    try:
        client = make_client(endpoint)
        client.list_queues()
        body = message_body()
        conn.send(("ready", name, None))
        while (task := conn.recv()) is not None:
            run = _send if task.kind == SEND else _receive
            conn.send(("result", name, run(client, task, body)))
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", name, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _send(client: Any, task: Task, body: str) -> dict[str, Any]:
    entries = [{"Id": str(i), "MessageBody": body} for i in range(BATCH)]
    send, url, now_ns = client.send_message_batch, task.queue_url, time.perf_counter_ns
    calls_us = array("q")
    sent = 0
    cpu_start, start = _cpu_s(), time.perf_counter()
    deadline = start + task.time_s
    while sent < task.messages and time.perf_counter() < deadline:
        before = now_ns()
        answer = send(QueueUrl=url, Entries=entries[: min(BATCH, task.messages - sent)])
        calls_us.append((now_ns() - before) // 1000)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch entries failed: {answer['Failed'][:3]}")
        sent += len(answer["Successful"])
    return {
        "messages": sent,
        "seconds": time.perf_counter() - start,
        "client_cpu_s": _cpu_s() - cpu_start,
        "calls_us": calls_us,
        "value_bytes": sent * len(body),
    }


def _receive(client: Any, task: Task, _body: str) -> dict[str, Any]:
    receive, delete = client.receive_message, client.delete_message_batch
    url, now_ns = task.queue_url, time.perf_counter_ns
    calls_us, deletes_us = array("q"), array("q")
    received = empty = value_bytes = 0
    cpu_start, start = _cpu_s(), time.perf_counter()
    deadline = start + task.time_s
    while received < task.messages and time.perf_counter() < deadline:
        before = now_ns()
        # Never more than the share: a message taken and not deleted would come back
        # after its visibility timeout, in some later round's figures.
        answer = receive(
            QueueUrl=url,
            MaxNumberOfMessages=min(BATCH, task.messages - received),
            WaitTimeSeconds=WAIT_S,
        )
        calls_us.append((now_ns() - before) // 1000)
        messages = answer.get("Messages", [])
        if not messages:
            empty += 1
            continue
        before = now_ns()
        deleted = delete(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )
        deletes_us.append((now_ns() - before) // 1000)
        if deleted.get("Failed"):
            raise RuntimeError(f"DeleteMessageBatch entries failed: {deleted['Failed'][:3]}")
        received += len(messages)
        value_bytes += sum(len(m["Body"]) for m in messages)
    return {
        "messages": received,
        "seconds": time.perf_counter() - start,
        "client_cpu_s": _cpu_s() - cpu_start,
        "calls_us": calls_us,
        "deletes_us": deletes_us,
        "empty_receives": empty,
        "value_bytes": value_bytes,
    }


# --- The light client -----------------------------------------------------------------------


def json_request(operation: str, params: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    """The headers and body of an SQS call in AWS JSON 1.0, as botocore serializes it
    (``json.dumps`` of the parameters), with `AUTHORIZATION` for a signature."""
    headers = {
        "X-Amz-Target": f"{TARGET_PREFIX}.{operation}",
        "Content-Type": AMZ_JSON,
        "Authorization": AUTHORIZATION,
    }
    return headers, json.dumps(params).encode()


def send_params(queue_url: str, bodies: Sequence[str]) -> dict[str, Any]:
    return {
        "QueueUrl": queue_url,
        "Entries": [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)],
    }


def receive_params(queue_url: str, most: int) -> dict[str, Any]:
    return {"QueueUrl": queue_url, "MaxNumberOfMessages": most, "WaitTimeSeconds": WAIT_S}


def delete_params(queue_url: str, handles: Sequence[str]) -> dict[str, Any]:
    return {
        "QueueUrl": queue_url,
        "Entries": [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles)],
    }


class LightClient:
    """SQS calls as single POSTs on an aiohttp session's keep-alive connections."""

    def __init__(self, session: Any, endpoint: str) -> None:
        self.session, self.url = session, endpoint.rstrip("/") + "/"

    async def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer's JSON; anything but HTTP 200 raises, with the answer's start."""
        headers, body = json_request(operation, params)
        async with self.session.post(self.url, data=body, headers=headers) as response:
            answer = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{operation}: HTTP {response.status}: {answer[:300]!r}")
        decoded: dict[str, Any] = json.loads(answer) if answer else {}
        return decoded


def light_worker(name: str, endpoint: str, conn: Any, concurrency: int) -> None:
    """A light client process: an asyncio loop with one aiohttp session, `concurrency`
    connections opened and used once (ListQueues) before it says ready, then each `Task`
    shared among `concurrency` coroutines, until None."""
    try:
        asyncio.run(_light_main(name, endpoint, conn, concurrency))
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", name, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


async def _light_main(name: str, endpoint: str, conn: Any, concurrency: int) -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S + WAIT_S, connect=5)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = LightClient(session, endpoint)
        await asyncio.gather(*(client.call("ListQueues", {}) for _ in range(concurrency)))
        body = message_body()
        conn.send(("ready", name, None))
        loop = asyncio.get_running_loop()
        while (task := await loop.run_in_executor(None, conn.recv)) is not None:
            conn.send(("result", name, await _light_task(client, task, body, concurrency)))


@dataclass
class _Tally:
    """What a light client process's coroutines moved in one task."""

    messages: int = 0
    empty_receives: int = 0
    value_bytes: int = 0
    calls_us: array[int] = field(default_factory=lambda: array("q"))
    deletes_us: array[int] = field(default_factory=lambda: array("q"))


async def _light_task(
    client: LightClient, task: Task, body: str, concurrency: int
) -> dict[str, Any]:
    tally = _Tally()
    cpu_start, start = _cpu_s(), time.perf_counter()
    deadline = start + task.time_s
    run = _light_send if task.kind == SEND else _light_receive
    shares = [n for n in split(task.messages, concurrency) if n]
    await asyncio.gather(*(run(client, task.queue_url, n, deadline, body, tally) for n in shares))
    result = {
        "messages": tally.messages,
        "seconds": time.perf_counter() - start,
        "client_cpu_s": _cpu_s() - cpu_start,
        "calls_us": tally.calls_us,
        "value_bytes": tally.value_bytes,
    }
    if task.kind == RECEIVE:
        result |= {"deletes_us": tally.deletes_us, "empty_receives": tally.empty_receives}
    return result


async def _light_send(
    client: LightClient, url: str, share: int, deadline: float, body: str, tally: _Tally
) -> None:
    now_ns, sent = time.perf_counter_ns, 0
    while sent < share and time.perf_counter() < deadline:
        count = min(BATCH, share - sent)
        before = now_ns()
        answer = await client.call("SendMessageBatch", send_params(url, [body] * count))
        tally.calls_us.append((now_ns() - before) // 1000)
        if answer.get("Failed") or len(answer.get("Successful", ())) != count:
            raise RuntimeError(
                f"SendMessageBatch: {len(answer.get('Successful', ()))} of {count} sent, "
                f"failed: {answer.get('Failed', [])[:3]}"
            )
        sent += count
        tally.messages += count
        tally.value_bytes += count * len(body)


async def _light_receive(
    client: LightClient, url: str, share: int, deadline: float, _body: str, tally: _Tally
) -> None:
    now_ns, received = time.perf_counter_ns, 0
    while received < share and time.perf_counter() < deadline:
        most = min(BATCH, share - received)  # never more than the share, as with boto3
        before = now_ns()
        answer = await client.call("ReceiveMessage", receive_params(url, most))
        tally.calls_us.append((now_ns() - before) // 1000)
        messages = answer.get("Messages", [])
        if not messages:
            tally.empty_receives += 1
            continue
        if len(messages) > most:
            raise RuntimeError(f"ReceiveMessage: {len(messages)} messages, asked {most} at most")
        before = now_ns()
        handles = [m["ReceiptHandle"] for m in messages]
        deleted = await client.call("DeleteMessageBatch", delete_params(url, handles))
        tally.deletes_us.append((now_ns() - before) // 1000)
        if deleted.get("Failed") or len(deleted.get("Successful", ())) != len(handles):
            raise RuntimeError(
                f"DeleteMessageBatch: {len(deleted.get('Successful', ()))} of {len(handles)} "
                f"deleted, failed: {deleted.get('Failed', [])[:3]}"
            )
        received += len(messages)
        tally.messages += len(messages)
        tally.value_bytes += sum(len(m["Body"]) for m in messages)


# --- The parent's side -----------------------------------------------------------------------


class ClientPool:
    """`clients` client processes on `endpoint`, ready before any work; `run` gives each
    one task and returns their results once all are done. Every wait has a limit, and
    `check_alive` (the server's) is called while waiting. With `concurrency`, light clients
    (`light_worker`) with that many calls in flight each; without, boto3's (one each)."""

    def __init__(
        self,
        endpoint: str,
        clients: int,
        check_alive: Callable[[], None] = lambda: None,
        concurrency: int | None = None,
    ) -> None:
        self.check_alive = check_alive
        self.client = BOTO3 if concurrency is None else LIGHT
        self.in_flight = clients * (concurrency or 1)
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        try:
            for i in range(clients):
                ours, theirs = CTX.Pipe()
                name = f"sqs-client-{i}" if concurrency is None else f"sqs-light-client-{i}"
                process = CTX.Process(
                    target=client_worker if concurrency is None else light_worker,
                    args=(name, endpoint, theirs) + (() if concurrency is None else (concurrency,)),
                    name=name,
                    daemon=True,
                )
                process.start()
                theirs.close()
                self.processes.append(process)
                self.conns.append(ours)
            self._collect("ready", READY_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    @property
    def size(self) -> int:
        return len(self.conns)

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def run(self, kind: str, queue_url: str, messages: int, time_s: float) -> list[dict[str, Any]]:
        """`messages` split among the clients (`split`), each stopping after `time_s`."""
        tasks = [Task(kind, queue_url, n, time_s) for n in split(messages, self.size)]
        for conn, task in zip(self.conns, tasks, strict=True):
            conn.send(task)
        return self._collect("result", time_s + CALL_TIMEOUT_S + WAIT_S + 30)

    def _collect(self, kind: str, timeout_s: float) -> list[Any]:
        got: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < len(self.conns):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [self.processes[i].name for i in range(self.size) if i not in got]
                raise ClientFailed(f"clients not {kind} after {timeout_s:.0f} s: {missing}")
            waiting = [c for i, c in enumerate(self.conns) if i not in got]
            for ready in multiprocessing.connection.wait(waiting, min(left, 0.5)):
                index = next(i for i, c in enumerate(self.conns) if c is ready)
                conn = self.conns[index]
                try:
                    report, name, payload = conn.recv()
                except EOFError:
                    raise ClientFailed(f"{self.processes[index].name} exited") from None
                if report == "error":
                    raise ClientFailed(f"{name}: {payload}")
                assert report == kind, (report, kind)
                got[index] = payload
            self.check_alive()
        return [got[i] for i in range(self.size)]

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process in self.processes:
            process.join(10)
            if process.exitcode is None:
                process.kill()
                process.join(10)
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []


def _ms(values_us: Sequence[int], point: float) -> float | None:
    return percentiles(values_us, [point])[0] / 1000 if values_us else None


@dataclass
class Phase:
    """One phase at one depth, summed over its rounds."""

    messages: int = 0
    seconds: float = 0.0
    rounds: int = 0
    value_bytes: int = 0
    empty_receives: int = 0
    broker_cpu_s: float | None = 0.0
    peak_rss_bytes: int | None = None
    client_cpu_s: list[float] = field(default_factory=list)  # per client
    calls_us: array[int] = field(default_factory=lambda: array("q"))
    deletes_us: array[int] = field(default_factory=lambda: array("q"))

    def add(self, window: Window, results: Sequence[dict[str, Any]]) -> int:
        """One round's `results` measured in `window`; returns the messages it moved."""
        moved: int = sum(r["messages"] for r in results)
        self.messages += moved
        self.seconds += window.seconds
        self.rounds += 1
        self.value_bytes += sum(r["value_bytes"] for r in results)
        self.empty_receives += sum(r.get("empty_receives", 0) for r in results)
        self.broker_cpu_s = (
            None
            if self.broker_cpu_s is None or window.cpu_s is None
            else self.broker_cpu_s + window.cpu_s
        )
        if window.peak_rss_bytes is not None:
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, window.peak_rss_bytes)
        cpu = [r["client_cpu_s"] for r in results]
        self.client_cpu_s = [
            a + b for a, b in zip(self.client_cpu_s or [0.0] * len(cpu), cpu, strict=True)
        ]
        for r in results:
            self.calls_us.extend(r["calls_us"])
            self.deletes_us.extend(r.get("deletes_us", ()))
        return moved

    def figures(self) -> dict[str, Any]:
        seconds, messages, cpu_s = self.seconds, self.messages, self.broker_cpu_s
        return {
            "messages": messages,
            "seconds": seconds,
            "rounds": self.rounds,
            "messages_per_s": messages / seconds if seconds else 0.0,
            "mb_per_s": self.value_bytes / 1e6 / seconds if seconds else 0.0,
            "calls": len(self.calls_us),
            "empty_receives": self.empty_receives,
            "call_p50_ms": _ms(self.calls_us, 50),
            "call_p99_ms": _ms(self.calls_us, 99),
            "delete_p50_ms": _ms(self.deletes_us, 50),
            "delete_p99_ms": _ms(self.deletes_us, 99),
            "broker_cpu_s": cpu_s,
            "broker_cpu_percent": None if cpu_s is None or not seconds else 100 * cpu_s / seconds,
            "broker_peak_rss_mb": (
                None if self.peak_rss_bytes is None else self.peak_rss_bytes / 1e6
            ),
            "broker_cpu_us_per_message": None
            if cpu_s is None or not messages
            else cpu_s * 1e6 / messages,
            "messages_per_broker_cpu_s": None if not cpu_s else messages / cpu_s,
            "client_cpu_percent": [
                100 * c / seconds if seconds else 0.0 for c in self.client_cpu_s
            ],
            "client_cpu_us_per_message": (
                sum(self.client_cpu_s) * 1e6 / messages if messages else None
            ),
        }


def _round(
    pool: ClientPool,
    pid: int | None,
    kind: str,
    queue_url: str,
    messages: int,
    time_s: float,
    phase: Phase,
) -> int:
    with Window(pid) as window:
        results = pool.run(kind, queue_url, messages, time_s)
    return phase.add(window, results)


def measure_depth(
    pool: ClientPool,
    pid: int | None,
    queue_url: str,
    messages: int,
    round_messages: int,
    time_s: float,
) -> tuple[Phase, Phase]:
    """Send, then receive + delete, in rounds of `round_messages` each way (so a queue
    that holds D messages holds between D and D + `round_messages` throughout):
    `messages` in all, or `time_s` per phase."""
    assert round_messages > 0, round_messages
    send, receive = Phase(), Phase()
    while send.messages < messages and send.seconds < time_s and receive.seconds < time_s:
        chunk = min(round_messages, messages - send.messages)
        sent = _round(pool, pid, SEND, queue_url, chunk, time_s - send.seconds, send)
        _round(pool, pid, RECEIVE, queue_url, sent, time_s - receive.seconds, receive)
        if sent < chunk:  # out of time
            break
    return send, receive


def queue_depth(client: Any, queue_url: str) -> int:
    """ApproximateNumberOfMessages: visible messages (exact on an idle queue here)."""
    attributes = client.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def wait_for_depth(
    client: Any, queue_url: str, depth: int, timeout_s: float = START_TIMEOUT_S
) -> int:
    deadline = time.monotonic() + timeout_s
    while (now := queue_depth(client, queue_url)) < depth:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{now} of {depth} messages visible after {timeout_s:.0f} s")
        time.sleep(0.1)
    return now


def fill_by_sqs(pool: ClientPool, queue_url: str, messages: int, time_s: float) -> int:
    """`messages` sent through SQS, outside any window; returns how many went in time."""
    return sum(r["messages"] for r in pool.run(SEND, queue_url, messages, time_s))


def _case(
    server: str, api: str, phase: str, depth: int | None, figures: dict[str, Any]
) -> dict[str, Any]:
    return {"server": server, "api": api, "phase": phase, "depth": depth, **figures}


def case_name(
    server: str,
    phase: str,
    depth: int | None = None,
    target: int | None = None,
    client: str = BOTO3,
) -> str:
    """``SendMessageBatch x10: WeirMQ at 1,000`` (boto3), ``SendMessageBatch x10 (light
    client): WeirMQ at 1,000``; AMQP measurements as ``AMQP <m>: WeirMQ``; moto's fill as
    ``SendMessageBatch x10 fill: moto from 1,000 toward 20,000``."""
    if phase in CALLS:
        light = " (light client)" if client == LIGHT else ""
        return f"{CALLS[phase]}{light}: {server} at {depth:,}"
    if phase == FILL:
        return f"{SEND_CALLS} fill: {server} from {depth:,} toward {target:,}"
    return f"{AMQP} {phase}: {server}"


def case_names(amounts: Plan) -> dict[str, list[str]]:
    """Every case the workload reports, by the part that measures it (for failures)."""
    weirmq = [
        case_name(WEIRMQ, p, d, client=c)
        for d in amounts.depths
        for c in (BOTO3, LIGHT)
        for p in PHASES
    ]
    moto: list[str] = []
    if amounts.moto_depth is not None:
        moto = [case_name(MOTO, p, amounts.moto_depth) for p in PHASES]
        if amounts.moto_fill_depth is not None:
            moto.append(case_name(MOTO, FILL, amounts.moto_depth, amounts.moto_fill_depth))
    return {
        "amqp": [case_name(WEIRMQ, m) for m in amqp_load.MEASUREMENTS],
        WEIRMQ: weirmq,
        MOTO: moto,
    }


def _measure_sqs_depths(
    pools: Sequence[ClientPool],
    client: Any,
    broker: BrokerProcess,
    amounts: Plan,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """At each depth, one queue filled by the last pool (the fastest), then each pool's
    send and receive + delete phases on it in turn."""
    cases = []
    for depth in amounts.depths:
        name = f"bench-sqs-{depth}-{uuid.uuid4().hex[:8]}"
        url = client.create_queue(QueueName=name)["QueueUrl"]
        start = time.perf_counter()
        filled = fill_by_sqs(pools[-1], url, depth, amounts.fill_s_max)
        if filled < depth:
            raise RuntimeError(f"{filled} of {depth} messages sent in {amounts.fill_s_max} s")
        wait_for_depth(client, url, depth)
        log(f"    WeirMQ: {depth:,} messages in {name} in {time.perf_counter() - start:.1f} s")
        for pool in pools:
            # Rounds of the shallowest depth at every depth: each round's start and end (a
            # wait for the slowest client) then weigh the same at every depth.
            send, receive = measure_depth(
                pool, broker.pid, url, amounts.messages, amounts.depths[0], amounts.phase_s_max
            )
            after = queue_depth(client, url)
            for phase, figures in ((SEND, send), (RECEIVE, receive)):
                cases.append(
                    _case(
                        WEIRMQ,
                        SQS,
                        phase,
                        depth,
                        {
                            "name": case_name(WEIRMQ, phase, depth, client=pool.client),
                            **figures.figures(),
                            "client": pool.client,
                            "clients": pool.size,
                            "calls_in_flight": pool.in_flight,
                            "depth_after": after,
                        },
                    )
                )
            log(
                f"    WeirMQ at {depth:,}, {pool.client} ({pool.size} processes, "
                f"{pool.in_flight} calls in flight): send "
                f"{cases[-2]['messages_per_s']:,.0f} msg/s, receive + delete "
                f"{cases[-1]['messages_per_s']:,.0f} msg/s"
            )
    return cases


def measure_weirmq(
    work: Path, amounts: Plan, log: Callable[[str], None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """AMQP's three measurements, then SQS at each depth, on one fresh broker: (AMQP cases,
    SQS cases). A failure of either part fails its cases only; one of the broker's, all."""
    broker = BrokerProcess(work)
    try:
        endpoint = broker.wait_for_sqs()
        if endpoint is None:
            raise RuntimeError(
                "no SQS API: the broker announced no 'weirmq: accepting SQS requests on' line"
            )
        address = broker.wait_for_amqp()
        log(f"    WeirMQ: SQS on {endpoint}, AMQP on {address}")
        amqp_cases = _measure_amqp(broker, address, amounts, log)
        try:
            client = make_client(endpoint)
            with (
                ClientPool(endpoint, amounts.clients, broker.check_alive) as pool,
                ClientPool(
                    endpoint,
                    amounts.light_processes,
                    broker.check_alive,
                    amounts.light_concurrency,
                ) as light,
            ):
                sqs_cases = _measure_sqs_depths((pool, light), client, broker, amounts, log)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"    WeirMQ SQS: FAILED: {error}")
            sqs_cases = [{"name": n, "error": error} for n in case_names(amounts)[WEIRMQ]]
    finally:
        broker.stop()
    return amqp_cases, sqs_cases


def _measure_amqp(
    broker: BrokerProcess, address: str | None, amounts: Plan, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    import importlib.util

    names = case_names(amounts)["amqp"]
    if address is None:
        return [{"name": n, "error": "no AMQP listener announced"} for n in names]
    if importlib.util.find_spec("pika") is None:
        return [
            {"name": n, "error": "pika is not installed: pip install 'weirmq[bench]'"}
            for n in names
        ]
    try:
        measured = amqp_load.measure_server(
            amqp_load.amqp_url(address), broker.pid, broker.check_alive, amounts.amqp
        )
    except Exception as exc:
        log(f"    WeirMQ AMQP: FAILED: {type(exc).__name__}: {exc}")
        return [{"name": n, "error": f"{type(exc).__name__}: {exc}"} for n in names]
    cases = []
    for measurement, name in zip(amqp_load.MEASUREMENTS, names, strict=True):
        figures = measured[measurement]
        cpu_s = figures.get("broker_cpu_s")
        cases.append(
            _case(
                WEIRMQ,
                AMQP,
                measurement,
                None,
                {
                    "name": name,
                    **figures,
                    "messages_per_broker_cpu_s": figures["messages"] / cpu_s if cpu_s else None,
                    "client_cpu_us_per_message": sum(figures["client_cpu_percent"])
                    / 100
                    * figures["seconds"]
                    * 1e6
                    / figures["messages"],
                },
            )
        )
    log(
        "    WeirMQ AMQP: "
        + ", ".join(f"{c['phase']} {c['messages_per_s']:,.0f} msg/s" for c in cases)
    )
    return cases


class MotoServer:
    """moto's server (``python -m moto.server``, as its ``moto_server`` script runs it) on a
    free loopback port; its output goes to a file under `work`, shown if it fails."""

    def __init__(self, work: Path) -> None:
        from weirmq.bench.rabbitmq import LOOPBACK, free_ports

        [port] = free_ports(1)
        self.url = f"http://{LOOPBACK}:{port}"
        self.log_path = work / f"moto-{port}.log"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.pid = self.process.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self.check_alive()
            try:
                socket.create_connection((LOOPBACK, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"moto did not listen within {START_TIMEOUT_S:.0f} s"
                    ) from None
                time.sleep(0.05)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"moto exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}"
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log_path.unlink(missing_ok=True)


def moto_missing() -> str | None:
    """Why moto's server cannot run here, or None."""
    import importlib.util

    for module in ("moto", "flask", "werkzeug"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install 'weirmq[bench]' (moto[server])"
    return None


def measure_moto(work: Path, amounts: Plan, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """moto at `amounts.moto_depth` (filled with SendMessageBatch), then the attempt at a
    larger depth."""
    depth = amounts.moto_depth
    assert depth is not None
    server = MotoServer(work)
    try:
        log(f"    moto: {server.url}")
        client = make_client(server.url)
        url = client.create_queue(QueueName=f"bench-sqs-{depth}")["QueueUrl"]
        with ClientPool(server.url, amounts.clients, server.check_alive) as pool:
            start = time.perf_counter()
            filled = fill_by_sqs(pool, url, depth, amounts.moto_prefill_s_max)
            if filled < depth:
                raise RuntimeError(
                    f"moto took {filled} of {depth} messages in {time.perf_counter() - start:.0f} s"
                )
            log(f"    moto: {depth:,} messages in {time.perf_counter() - start:.1f} s")
            send, receive = measure_depth(
                pool, server.pid, url, amounts.moto_messages, depth, amounts.moto_phase_s_max
            )
            after = queue_depth(client, url)
            cases = [
                _case(
                    MOTO,
                    SQS,
                    phase,
                    depth,
                    {
                        "name": case_name(MOTO, phase, depth),
                        **figures.figures(),
                        "client": BOTO3,
                        "clients": pool.size,
                        "depth_after": after,
                    },
                )
                for phase, figures in ((SEND, send), (RECEIVE, receive))
            ]
            log(
                f"    moto at {depth:,}: send {cases[0]['messages_per_s']:,.0f} msg/s, "
                f"receive + delete {cases[1]['messages_per_s']:,.0f} msg/s"
            )
            if amounts.moto_fill_depth is not None:
                cases.append(_moto_fill(pool, server, url, after, amounts, log))
    finally:
        server.stop()
    return cases


def _moto_fill(
    pool: ClientPool,
    server: MotoServer,
    url: str,
    start_depth: int,
    amounts: Plan,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Send toward `amounts.moto_fill_depth` in steps for `moto_fill_s_max` at most; the
    send rate of each step, and the depth reached."""
    target, limit_s = amounts.moto_fill_depth, amounts.moto_fill_s_max
    assert target is not None and amounts.moto_depth is not None
    depth, steps = start_depth, []
    with Window(server.pid) as window:
        started = time.perf_counter()
        while depth < target and (left_s := limit_s - (time.perf_counter() - started)) > 0:
            step_start = time.perf_counter()
            sent = fill_by_sqs(pool, url, min(amounts.moto_fill_step, target - depth), left_s)
            depth += sent
            steps.append(
                {"depth": depth, "messages_per_s": sent / (time.perf_counter() - step_start)}
            )
    seconds = window.seconds
    log(
        f"    moto: {depth:,} of {target:,} deep after {seconds:.0f} s, the last step at "
        f"{steps[-1]['messages_per_s'] if steps else 0:,.0f} msg/s"
    )
    return _case(
        MOTO,
        SQS,
        FILL,
        depth,
        {
            "name": case_name(MOTO, FILL, amounts.moto_depth, target),
            "depth_from": start_depth,
            "depth_target": target,
            "depth_reached": depth,
            "seconds": seconds,
            "messages": depth - start_depth,
            # The rate at the depth reached, what a send costs there.
            "messages_per_s": steps[-1]["messages_per_s"] if steps else 0.0,
            "average_messages_per_s": (depth - start_depth) / seconds if seconds else 0.0,
            "steps": steps,
            **window.figures(),
            "clients": pool.size,
        },
    )


# --- The cases -------------------------------------------------------------------------------


def _client(case: dict[str, Any]) -> str | None:
    """An SQS case's client (boto3 where a document from before the light client has
    none); None for AMQP's."""
    return case.get("client", BOTO3) if case.get("api") == SQS else None


def _matches(case: dict[str, Any], match: dict[str, Any]) -> bool:
    return all((_client(case) if k == "client" else case.get(k)) == v for k, v in match.items())


def _rate(cases: Sequence[dict[str, Any]], **match: Any) -> float | None:
    for case in cases:
        if _matches(case, match) and case.get("messages_per_s"):
            return float(case["messages_per_s"])
    return None


def _per_cpu_s(cases: Sequence[dict[str, Any]], **match: Any) -> float | None:
    for case in cases:
        if _matches(case, match):
            value = case.get("messages_per_broker_cpu_s")
            return float(value) if value else None
    return None


def add_ratios(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases with their ratios (see the module docstring); failed ones as they are."""
    measured = [c for c in cases if "error" not in c and "skipped" not in c]
    out = []
    for case in map(dict, cases):
        out.append(case)
        if (
            "error" in case
            or "skipped" in case
            or case.get("api") != SQS
            or case.get("phase") not in PHASES
        ):
            continue
        server, phase, rate = case["server"], case["phase"], case["messages_per_s"]
        client = _client(case)
        same = {"api": SQS, "server": server, "phase": phase, "client": client}
        depths = sorted(c["depth"] for c in measured if _matches(c, same))
        if case["depth"] > depths[0]:
            shallow = _rate(measured, **same, depth=depths[0])
            case["ratio_to_shallow"] = rate / shallow if shallow else None
        if server != WEIRMQ:
            continue
        amqp_phase = AMQP_SEND if phase == SEND else AMQP_RECEIVE
        amqp = _rate(measured, api=AMQP, server=WEIRMQ, phase=amqp_phase)
        case["ratio_to_amqp"] = rate / amqp if amqp else None
        amqp_cpu = _per_cpu_s(measured, api=AMQP, server=WEIRMQ, phase=amqp_phase)
        per_cpu = case.get("messages_per_broker_cpu_s")
        case["cpu_ratio_to_amqp"] = per_cpu / amqp_cpu if per_cpu and amqp_cpu else None
        if phase == SEND:
            each = _rate(measured, api=AMQP, server=WEIRMQ, phase=AMQP_SEND_EACH)
            case["ratio_to_amqp_each"] = rate / each if each else None
        if client != BOTO3:  # moto is measured with boto3 only
            continue
        moto = _rate(measured, api=SQS, server=MOTO, phase=phase, depth=case["depth"])
        if moto:
            case["ratio_to_moto"] = rate / moto
    return out


def workload(
    work: Path, quick: bool, log: Callable[[str], None], skip: str | None = None
) -> dict[str, Any]:
    """The whole ``sqs`` workload: ``{"description", "params", "cases"}``; with `skip`,
    every case skipped for that reason."""
    import importlib.util

    amounts = plan(quick)
    names = case_names(amounts)
    every = [n for part in names.values() for n in part]
    cases: list[dict[str, Any]] = []
    if skip is not None:
        return _document(amounts, [{"name": n, "skipped": skip} for n in every])
    if importlib.util.find_spec("boto3") is None:
        error = "boto3 is not installed: pip install 'weirmq[bench]'"
        return _document(amounts, [{"name": n, "error": error} for n in every])
    log(f"  {WEIRMQ} ...")
    try:
        amqp_cases, sqs_cases = measure_weirmq(work, amounts, log)
        cases += sqs_cases + amqp_cases
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log(f"  {WEIRMQ}: FAILED: {error}")
        cases += [{"name": n, "error": error} for n in names[WEIRMQ] + names["amqp"]]
    if names[MOTO]:
        log(f"  {MOTO} ...")
        reason = moto_missing()
        try:
            if reason is not None:
                cases += [{"name": n, "skipped": reason} for n in names[MOTO]]
            else:
                cases += measure_moto(work, amounts, log)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"  {MOTO}: FAILED: {error}")
            cases += [{"name": n, "error": error} for n in names[MOTO]]
    return _document(amounts, add_ratios(cases))


def _document(amounts: Plan, cases: list[dict[str, Any]]) -> dict[str, Any]:
    shallow, deep = amounts.depths[0], amounts.depths[-1]
    moto = (
        "moto not measured"
        if amounts.moto_depth is None
        else f"moto's server at {amounts.moto_depth:,} only, {amounts.moto_messages:,} "
        f"messages or {amounts.moto_phase_s_max:.0f} s per phase"
        + (
            ""
            if amounts.moto_fill_depth is None
            else f", then sending toward {amounts.moto_fill_depth:,} for "
            f"{amounts.moto_fill_s_max:.0f} s (msg/s: its last step's)"
        )
    )
    return {
        "description": (
            f"boto3 in {amounts.clients} client processes, one call in flight each, and "
            f"'(light client)': AWS JSON 1.0 over aiohttp in {amounts.light_processes} "
            f"processes x {amounts.light_concurrency} calls in flight; 1 KB "
            f"bodies; SQS on WeirMQ at queue depths {shallow:,} and {deep:,} (filled first, "
            f"uncounted), {amounts.messages:,} messages per phase in rounds of {shallow:,}: "
            f"{SEND_CALLS}, then {RECEIVE_CALLS} (WaitTimeSeconds {WAIT_S}); p50/p99 "
            f"per call (receive rows: ReceiveMessage, 'del' DeleteMessageBatch); '÷ shallow': "
            f"÷ the same at {shallow:,}; '÷ AMQP': send ÷ AMQP {AMQP_SEND}, receive ÷ AMQP "
            f"{AMQP_RECEIVE} ('each': ÷ {AMQP_SEND_EACH}), on the same broker in the same "
            f"run (pika, {amounts.amqp.each_messages:,} and {amounts.amqp.window_messages:,} "
            f"messages); {moto}"
        ),
        "params": {
            "depths": list(amounts.depths),
            "messages": amounts.messages,
            "phase_s_max": amounts.phase_s_max,
            "clients": amounts.clients,
            "light_processes": amounts.light_processes,
            "light_concurrency": amounts.light_concurrency,
            "batch": BATCH,
            "value_bytes": VALUE_BYTES,
            "wait_time_s": WAIT_S,
            "amqp_each_messages": amounts.amqp.each_messages,
            "amqp_window_messages": amounts.amqp.window_messages,
            "moto_depth": amounts.moto_depth,
            "moto_messages": amounts.moto_messages,
            "moto_phase_s_max": amounts.moto_phase_s_max,
            "moto_fill_depth": amounts.moto_fill_depth,
            "moto_fill_s_max": amounts.moto_fill_s_max,
        },
        "cases": cases,
    }
