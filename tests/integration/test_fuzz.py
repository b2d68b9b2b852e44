"""A storm of malformed frames does not hurt the broker or the clients next to it.

While a real confluent-kafka producer and consumer stream a topic, eight raw sockets throw
10,000 bad frames at the broker: random bytes, frames cut short and abandoned, length
prefixes over 100 MiB or negative, well-formed request headers (known and unknown API
keys, valid and invalid versions) followed by garbage, and ApiVersions / Metadata /
Produce / Fetch requests whose bodies stop half-way. The broker may answer a bad frame
with an error or close that connection; it must not die, must not disturb the other
connections, and must not hold on to memory for frames it refused.

The seed is printed; ``FUZZ_SEED=<n>`` replays the same frames (thread interleaving and
timing still differ between runs).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import crc32c
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    headers_for,
    payload,
    produce_with_backpressure,
    producer_config,
    seq_of,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.slow

BAD_FRAMES = 10_000
CONNECTIONS = 8
LIVE_MESSAGES_MIN = 20_000
LIVE_MESSAGES_MAX = 200_000  # the producer keeps going while the storm lasts, up to this
LIVE_VALUE_BYTES = 64
LIVE_TOPIC = "fuzz-live"
TARGET_TOPIC = "fuzz-target"  # the only topic a malformed request ever names
RSS_GROWTH_MAX_BYTES = 200 * 1024 * 1024
MIB = 1024 * 1024
SOCKET_TIMEOUT_S = 5.0
STORM_BUDGET_S = 60.0
LIVE_BUDGET_S = 100.0

# -- wire encoding (just enough to write requests by hand) ------------------------------------

Frame = tuple[bytes, bool]  # bytes to send, close the connection afterwards


def int16(n: int) -> bytes:
    return struct.pack(">h", n)


def int32(n: int) -> bytes:
    return struct.pack(">i", n)


def int64(n: int) -> bytes:
    return struct.pack(">q", n)


def string(text: str) -> bytes:
    raw = text.encode()
    return int16(len(raw)) + raw


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))  # zigzag, as record fields use


def compact_string(text: str) -> bytes:
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: bytes | None, flexible: bool
) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) when ``flexible``."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id)
    header += int16(-1) if client_id is None else int16(len(client_id)) + client_id
    return header + (b"\x00" if flexible else b"")


def frame(payload_bytes: bytes) -> bytes:
    return int32(len(payload_bytes)) + payload_bytes


def record_batch(value: bytes, timestamp_ms: int) -> bytes:
    """A v2 record batch holding one record, with a correct CRC-32C."""
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, timestamp_ms, timestamp_ms, -1, -1, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


def api_versions_body() -> tuple[int, int, bytes]:
    return 18, 3, compact_string("weirmq-fuzz") + compact_string("0.0") + b"\x00"


def metadata_body(rng: random.Random) -> tuple[int, int, bytes]:
    version = rng.randint(1, 8)  # the versions before flexible encoding
    body = int32(1) + string(TARGET_TOPIC)
    if version >= 4:
        body += b"\x00"  # allow_auto_topic_creation = false
    if version >= 8:
        body += b"\x00\x00"
    return 3, version, body


def produce_body(rng: random.Random) -> tuple[int, int, bytes]:
    version = rng.randint(3, 8)
    batch = record_batch(rng.randbytes(rng.randint(0, 200)), 1_704_067_200_000)
    partition = int32(0) + int32(len(batch)) + batch
    body = int16(-1) + int16(1) + int32(1000) + int32(1) + string(TARGET_TOPIC)
    return 0, version, body + int32(1) + partition


def fetch_body(rng: random.Random) -> tuple[int, int, bytes]:
    version = rng.randint(4, 11)
    body = int32(-1) + int32(100) + int32(1) + int32(MIB) + b"\x00"
    if version >= 7:
        body += int32(0) + int32(-1)  # no fetch session
    partition = int32(0)
    if version >= 9:
        partition += int32(-1)
    partition += int64(0)
    if version >= 5:
        partition += int64(-1)
    partition += int32(MIB)
    body += int32(1) + string(TARGET_TOPIC) + int32(1) + partition
    if version >= 7:
        body += int32(0)  # no forgotten topics
    if version >= 11:
        body += string("")
    return 1, version, body


# -- bad frames ---------------------------------------------------------------------------------


def random_bytes(rng: random.Random) -> Frame:
    return rng.randbytes(rng.randint(1, 4096)), rng.random() < 0.5


def truncated_frame(rng: random.Random) -> Frame:
    """A length prefix promising more than what follows; then the client goes away."""
    sent = rng.randbytes(rng.randint(0, 2048))
    promised = rng.choice([rng.randint(len(sent) + 1, 64 * 1024), rng.randint(1, 8) * MIB])
    return int32(promised) + sent, True


def oversize_prefix(rng: random.Random) -> Frame:
    prefix = rng.choice(
        [
            rng.randint(100 * MIB + 1, 2**31 - 1),
            2**31 - 1,
            -1,
            -(2**31),
            rng.randint(-(2**31), -1),
        ]
    )
    return int32(prefix) + rng.randbytes(rng.randint(0, 64)), True


def header_then_garbage(rng: random.Random) -> Frame:
    api_key = rng.choice(
        [rng.randint(0, 80), rng.randint(0, 80), rng.randint(81, 32767), rng.randint(-32768, -1)]
    )
    api_version = rng.choice([rng.randint(0, 17), rng.randint(0, 17), -1, 32767])
    client_id = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 32))
    header = request_header(
        api_key, api_version, rng.randint(-(2**31), 2**31 - 1), client_id, rng.random() < 0.5
    )
    return frame(header + rng.randbytes(rng.randint(0, 512))), False


def truncated_body(rng: random.Random) -> Frame:
    """A known request whose body stops early; the frame length matches what is sent."""
    make: Callable[[], tuple[int, int, bytes]] = rng.choice(
        [
            api_versions_body,
            lambda: metadata_body(rng),
            lambda: produce_body(rng),
            lambda: fetch_body(rng),
        ]
    )
    api_key, version, body = make()
    flexible = api_key == 18  # ApiVersions v3; the other versions chosen are not flexible
    header = request_header(api_key, version, rng.randint(0, 2**31 - 1), b"fuzz", flexible)
    return frame(header + body[: rng.randint(0, len(body) - 1)]), False


BAD_FRAME_KINDS: list[Callable[[random.Random], Frame]] = [
    random_bytes,
    truncated_frame,
    oversize_prefix,
    header_then_garbage,
    truncated_body,
]


class Storm:
    """Sends bad frames over one connection at a time per worker, reconnecting as needed."""

    def __init__(self, address: tuple[str, int], seed: int) -> None:
        self.address = address
        self.seed = seed
        self.stats: Counter[str] = Counter()
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def run(self, frames: int, connections: int, budget_s: float) -> None:
        per_worker = [
            frames // connections + (i < frames % connections) for i in range(connections)
        ]
        workers = [
            threading.Thread(target=self._worker, args=(i, n), name=f"fuzz-{i}", daemon=True)
            for i, n in enumerate(per_worker)
        ]
        for worker in workers:
            worker.start()
        deadline = Deadline(budget_s, "the storm of bad frames")
        for worker in workers:
            worker.join(deadline.remaining())
        assert not any(w.is_alive() for w in workers), f"storm still running: {self.stats}"
        assert self.failures == [], self.failures[:10]

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _worker(self, index: int, frames: int) -> None:
        try:
            self._send_frames(random.Random(self.seed * 1000 + index), frames)
        except Exception as error:  # a worker must report, not die silently
            with self._lock:
                self.failures.append(f"worker {index}: {error!r}")

    def _connect(self) -> socket.socket:
        for _ in range(20):
            try:
                return socket.create_connection(self.address, timeout=SOCKET_TIMEOUT_S)
            except OSError as error:
                self._count(f"connect failed: {type(error).__name__}")
                time.sleep(0.1)
        raise AssertionError("the broker refused 20 connections in a row")

    def _send_frames(self, rng: random.Random, frames: int) -> None:
        sock: socket.socket | None = None
        for _ in range(frames):
            if sock is None:
                sock = self._connect()
                self._count("connections")
            kind = rng.choice(BAD_FRAME_KINDS)
            data, close_after = kind(rng)
            self._count(kind.__name__)
            try:
                sock.sendall(data)
                open_ = drain(sock)
            except TimeoutError:
                self._count("send stalled for 5 s")
                open_ = False
            except OSError:
                self._count("closed by broker (send)")
                open_ = False
            else:
                if not open_:
                    self._count("closed by broker (read)")
            if close_after or not open_:
                sock.close()
                sock = None
        if sock is not None:
            sock.close()


def drain(sock: socket.socket) -> bool:
    """Read whatever the broker has answered so far; False once it has closed."""
    sock.settimeout(0)
    try:
        while True:
            try:
                if not sock.recv(1 << 16):
                    return False
            except BlockingIOError:
                return True
    finally:
        sock.settimeout(SOCKET_TIMEOUT_S)


# -- live traffic -------------------------------------------------------------------------------


class LiveTraffic:
    """A real producer and consumer on one partition, running while the storm lasts."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer_errors = ErrorLog()
        self.consumer_errors = ErrorLog()
        self.deliveries = DeliveryLog()
        self.storm_over = threading.Event()
        self.first_delivery = threading.Event()
        self.consumed: list[int] = []
        self.produced = 0
        self.failures: list[str] = []
        self._producer_thread = threading.Thread(target=self._guard(self._produce), daemon=True)
        self._consumer_thread = threading.Thread(target=self._guard(self._consume), daemon=True)
        self._producer_done = threading.Event()

    def start(self) -> None:
        self._producer_thread.start()
        assert self.first_delivery.wait(30), (
            f"no delivery report: {self.producer_errors.snapshot()}"
        )
        self._consumer_thread.start()

    def wait_until_consuming(self, timeout_s: float) -> None:
        deadline = Deadline(timeout_s, "the live consumer reading its first message")
        while not self.consumed:
            deadline.check(f"failures: {self.failures}")
            time.sleep(0.05)

    def finish(self, timeout_s: float) -> None:
        self.storm_over.set()
        deadline = Deadline(timeout_s, "live traffic finishing")
        self._producer_thread.join(deadline.remaining())
        self._consumer_thread.join(deadline.remaining())
        alive = self._producer_thread.is_alive() or self._consumer_thread.is_alive()
        assert not alive, (
            f"live traffic still running: produced {self.produced}, "
            f"consumed {len(self.consumed)}, failures {self.failures}"
        )

    def _guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except Exception as error:
                self.failures.append(f"{body.__name__}: {error!r}")
            finally:
                self.first_delivery.set()  # never leave start() waiting on a dead thread

        return run

    def _produce(self) -> None:
        config = producer_config(
            self.bootstrap, self.producer_errors, **{"enable.idempotence": True, "acks": "all"}
        )
        producer = Producer(config)
        try:
            while self.produced < LIVE_MESSAGES_MAX and (
                self.produced < LIVE_MESSAGES_MIN or not self.storm_over.is_set()
            ):
                for _ in range(50):
                    seq = self.produced
                    produce_with_backpressure(
                        lambda seq=seq: producer.produce(
                            LIVE_TOPIC,
                            key=b"%d" % seq,
                            value=payload(seq, LIVE_VALUE_BYTES),
                            headers=headers_for(seq),
                            on_delivery=self.deliveries.callback(seq),
                        ),
                        producer.poll,
                    )
                    self.produced += 1
                producer.poll(0.02)  # about 2,500 messages/s: spread over the whole storm
                if self.deliveries.where:
                    self.first_delivery.set()
            left = producer.flush(60)
            assert left == 0, f"{left} live messages unacknowledged after 60 s"
        finally:
            # Also on failure, so the consumer stops once it has what was handed over.
            self._producer_done.set()

    def _consume(self) -> None:
        consumer = Consumer(consumer_config(self.bootstrap, self.consumer_errors))
        deadline = Deadline(LIVE_BUDGET_S, "the live consumer")
        try:
            consumer.assign([TopicPartition(LIVE_TOPIC, 0, OFFSET_BEGINNING)])
            while not (self._producer_done.is_set() and len(self.consumed) >= self.produced):
                deadline.check(f"consumed {len(self.consumed)}, produced so far {self.produced}")
                for message in consumer.consume(num_messages=1000, timeout=0.5):
                    error = message.error()
                    if error is not None:
                        raise AssertionError(f"consumer error: {error.name()}: {error.str()}")
                    assert message.offset() == len(self.consumed), (
                        f"offset {message.offset()} after {len(self.consumed)} records"
                    )
                    self.consumed.append(seq_of(message.headers()))
        finally:
            consumer.close()


def fresh_client_round_trip(bootstrap: str) -> None:
    deadline = Deadline(60, "a fresh client after the storm")
    errors, consumer_errors, deliveries = ErrorLog(), ErrorLog(), DeliveryLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all"))
    for seq in range(100):
        producer.produce(
            "after-storm",
            value=payload(seq, 100),
            headers=headers_for(seq),
            on_delivery=deliveries.callback(seq),
        )
    assert producer.flush(deadline.remaining()) == 0
    assert deliveries.errors == [] and errors.snapshot() == []
    seen: list[int] = []
    consumer = Consumer(consumer_config(bootstrap, consumer_errors))
    try:
        consume_from_beginning(
            consumer,
            "after-storm",
            deliveries.count_by_partition(),
            deadline,
            lambda message: seen.append(seq_of(message.headers())),
        )
    finally:
        consumer.close()
    assert sorted(seen) == list(range(100))
    assert consumer_errors.snapshot() == []


class RssSampler:
    """Samples the broker's RSS every 20 ms in a thread and keeps the peak."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.peak_bytes = broker.rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak_bytes = max(self.peak_bytes, self.broker.rss_bytes())
            except OSError:  # the broker died: the test reports that
                return


def test_bad_frame_storm_beside_live_clients(broker_factory: BrokerFactory) -> None:
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"fuzz seed: {seed} (replay with FUZZ_SEED={seed})")
    broker: BrokerProcess = broker_factory(default_partitions=1)
    live = LiveTraffic(broker.bootstrap)
    live.start()
    live.wait_until_consuming(30)
    rss_before = broker.rss_bytes()

    storm = Storm(("127.0.0.1", broker.port), seed)
    try:
        with RssSampler(broker) as sampler:
            storm.run(BAD_FRAMES, CONNECTIONS, STORM_BUDGET_S)
    finally:
        print(f"storm: {dict(storm.stats)}")
    assert broker.running, f"broker died during the storm (seed {seed})"
    rss_after = broker.rss_bytes()
    print(
        f"broker RSS: {rss_before / MIB:.0f} MiB before the storm, "
        f"peak {sampler.peak_bytes / MIB:.0f} MiB during it, {rss_after / MIB:.0f} MiB after it"
    )

    live.finish(LIVE_BUDGET_S)
    assert broker.running, f"broker died after the storm (seed {seed})"
    assert live.failures == [], live.failures
    assert live.deliveries.errors == [], live.deliveries.errors[:10]
    assert live.producer_errors.snapshot() == []
    assert live.consumer_errors.snapshot() == []
    assert live.produced >= LIVE_MESSAGES_MIN
    assert live.consumed == list(range(live.produced)), "the live consumer missed records"
    fresh_client_round_trip(broker.bootstrap)
    # Bad frames are refused or abandoned: none of them should cost memory that lasts, nor
    # a spike (a 4-byte length prefix must not be able to reserve 100 MiB on its own).
    growth = {
        "right after the storm": rss_after - rss_before,
        "at the peak during the storm": sampler.peak_bytes - rss_before,
    }
    too_much = {
        when: f"{n / MIB:.0f} MiB" for when, n in growth.items() if n >= RSS_GROWTH_MAX_BYTES
    }
    assert too_much == {}, (
        f"broker RSS grew by {RSS_GROWTH_MAX_BYTES // MIB} MiB or more: {too_much} (seed {seed})"
    )
