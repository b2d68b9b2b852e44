"""Measure how a large CreateTopics affects everyone else: a probe, usable from tests and
by hand.

Theory of operation: one thread sends ApiVersions v0 over its own raw socket, one request
at a time, every `PROBE_INTERVAL_S`, and records when each was sent and answered
(ApiVersions touches no topic, so its latency is the event loop's responsiveness and
nothing else). Meanwhile a confluent-kafka AdminClient creates one topic with many
partitions. The result says how long the create took, how many probes were answered while
it ran and the worst probe latency.

By hand (an in-process broker on a fresh data directory, here under /tmp)::

    .venv/bin/python tests/integration/create_probe.py 20000

`--bootstrap HOST:PORT` probes a running broker instead.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, NewTopic

PROBE_INTERVAL_S = 0.005
PROBE_TIMEOUT_S = 60.0
"""A probe unanswered this long fails the probe thread (a hung broker, not a slow one)."""
API_VERSIONS_KEY = 18


def api_versions_frame(correlation_id: int, client_id: bytes = b"probe") -> bytes:
    """An ApiVersions v0 request: header v1 (key, version, correlation id, client id)."""
    body = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the probe's connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class Probe:
    """ApiVersions round trips on a thread of their own; see the module docstring."""

    host: str
    port: int
    samples: list[tuple[float, float]] = field(default_factory=list)
    """(sent, answered), time.monotonic() seconds."""
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._run, name="api-versions-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_TIMEOUT_S + 5)

    def _run(self) -> None:
        try:
            with socket.create_connection((self.host, self.port), timeout=PROBE_TIMEOUT_S) as sock:
                correlation_id = 0
                while not self._stop.is_set():
                    correlation_id += 1
                    sent = time.monotonic()
                    sock.sendall(api_versions_frame(correlation_id))
                    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
                    (answered_id,) = struct.unpack(">i", _read_exactly(sock, size)[:4])
                    assert answered_id == correlation_id, (answered_id, correlation_id)
                    self.samples.append((sent, time.monotonic()))
                    self._stop.wait(PROBE_INTERVAL_S)
        except BaseException as exc:  # reported by the caller, not lost on this thread
            self.error = exc

    def answered_between(self, start: float, end: float) -> list[float]:
        """Latencies (s) of the probes both sent and answered within [start, end]."""
        return [done - sent for sent, done in self.samples if start <= sent and done <= end]

    def worst_latency_s(self, start: float, end: float) -> float:
        """The worst latency of a probe that overlapped [start, end] at all."""
        overlapping = [done - sent for sent, done in self.samples if done >= start and sent <= end]
        return max(overlapping, default=0.0)


@dataclass(frozen=True)
class CreateResult:
    seconds: float
    """Until the topic had every partition."""
    answered_s: float
    """Until the CreateTopics answer (earlier when it timed out)."""
    error: str | None
    probes_during: int
    """ApiVersions both sent and answered while the create ran."""
    worst_probe_s: float
    metadata_s: float
    """One Metadata request for the new topic, afterwards (None: not asked)."""
    worst_probe_metadata_s: float


def create_and_probe(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0
) -> CreateResult:
    """Create `topic` with `partitions` through an AdminClient while a `Probe` runs, then
    ask for its metadata once."""
    host, _, port = bootstrap.rpartition(":")
    probe = Probe(host, int(port)).start()
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000)}
    )
    try:
        time.sleep(0.2)  # a few probes before: the connection is warm
        started = time.monotonic()
        future = admin.create_topics(
            [NewTopic(topic, partitions)], operation_timeout=timeout_s, request_timeout=timeout_s
        )[topic]
        error: str | None = None
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # REQUEST_TIMED_OUT: the creation goes on
            error = str(exc)
        ended = answered = time.monotonic()
        if error is not None:
            ended = _wait_until_made(admin, topic, partitions, started + timeout_s)
        time.sleep(0.1)
        asked = time.monotonic()
        admin.list_topics(topic, timeout=timeout_s)
        described = time.monotonic()
        time.sleep(0.1)
    finally:
        probe.stop()
    if probe.error is not None:
        raise AssertionError(f"the ApiVersions probe failed: {probe.error!r}")
    return CreateResult(
        seconds=ended - started,
        answered_s=answered - started,
        error=error,
        probes_during=len(probe.answered_between(started, ended)),
        worst_probe_s=probe.worst_latency_s(started, ended),
        metadata_s=described - asked,
        worst_probe_metadata_s=probe.worst_latency_s(asked, described),
    )


def _wait_until_made(admin: AdminClient, topic: str, partitions: int, until: float) -> float:
    """When `topic` was known with every partition, asking every 0.2 s: the time the
    Metadata request that found it was sent, so that describing the whole topic (slow for
    many partitions) is not counted as the creation's."""
    while time.monotonic() < until:
        asked = time.monotonic()
        found = admin.list_topics(topic, timeout=max(until - asked, 1)).topics
        if found[topic].error is None and len(found[topic].partitions) == partitions:
            return asked
        time.sleep(0.2)
    raise AssertionError(f"{topic} not made by the deadline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("partitions", type=int)
    parser.add_argument("--bootstrap", help="a running broker (default: one in this process)")
    parser.add_argument("--data-dir-parent", default=tempfile.gettempdir())
    args = parser.parse_args()
    if args.bootstrap:
        report(create_and_probe(args.bootstrap, "probe-big", args.partitions))
        return
    from weirmq.testing import Broker

    with (
        tempfile.TemporaryDirectory(dir=args.data_dir_parent) as data_dir,
        Broker(data_dir=data_dir, **_room_for(args.partitions)) as broker,
    ):
        report(create_and_probe(broker.bootstrap_servers, "probe-big", args.partitions))


def _room_for(partitions: int) -> dict[str, int]:
    """Settings that let one request create `partitions` (on brokers that have them)."""
    from weirmq.settings import Settings

    wanted = {"max_partitions_per_request": partitions}
    known = Settings.__dataclass_fields__
    return {name: value for name, value in wanted.items() if name in known}


def report(result: CreateResult) -> None:
    answer = "ok" if result.error is None else f"{result.error} at {result.answered_s:.1f} s"
    print(
        f"create: {result.seconds:.2f} s ({answer}); ApiVersions answered "
        f"during it: {result.probes_during}, the worst in {result.worst_probe_s * 1000:.0f} ms; "
        f"then Metadata of the topic: {result.metadata_s:.2f} s, the worst ApiVersions "
        f"meanwhile {result.worst_probe_metadata_s * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
