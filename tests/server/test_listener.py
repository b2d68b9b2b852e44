"""The asyncio listener over real loopback sockets: ordering, limits, bad frames, idling.

The broker runs in this process (`KafkaServer` around a real `Broker` on a temporary data
directory); requests are written as raw frames, encoded with kio, so each test controls
exactly what is on the wire, including pipelining and broken frames.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from weirmq.broker.core import Broker
from weirmq.broker.partition import Durability
from weirmq.protocols.kafka.dispatch import Dispatcher
from weirmq.server.listener import KafkaServer
from weirmq.settings import Settings

pytestmark = pytest.mark.integration


def request_frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    cls = load_request_schema(api_key, version)
    header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="test",
        ),
    )
    entity_writer(cls)(out, body)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def metadata_request(correlation_id: int) -> bytes:
    cls = load_request_schema(3, 12)
    body = cls(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return request_frame(3, 12, correlation_id, body)


def fetch_at_end(correlation_id: int, topic: str, offset: int, wait_ms: int) -> bytes:
    cls = load_request_schema(1, 12)
    module = __import__(cls.__module__, fromlist=["FetchTopic"])
    body = cls(
        max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1,
        topics=(
            module.FetchTopic(
                topic=topic,
                partitions=(
                    module.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return request_frame(1, 12, correlation_id, body)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    (correlation_id,) = struct.unpack_from(">i", frame)
    return correlation_id, frame[4:]


@asynccontextmanager
async def running(tmp_path: Path, **overrides: Any) -> AsyncIterator[tuple[Broker, int]]:
    settings = Settings(data_dir=tmp_path, **overrides)
    broker = Broker(settings)
    server = KafkaServer(Dispatcher(broker), settings)
    _host, port = await server.start("127.0.0.1", 0)
    broker.advertised = ("127.0.0.1", port)
    try:
        yield broker, port
    finally:
        broker.closing = True
        broker.wake_all()
        await server.stop(2.0)
        broker.close()


def run(test: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as (broker, port):
            broker.create_topic("quiet", 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # A long poll first: the Metadata behind it is ready at once but must wait.
            writer.write(fetch_at_end(1, "quiet", 0, 300) + metadata_request(2))
            first = await read_response(reader)
            second = await read_response(reader)
            assert [first[0], second[0]] == [1, 2]
            writer.close()

    run(scenario)


def test_a_bounded_in_flight_window_still_answers_everything(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path, max_in_flight_requests=1) as (broker, port):
            broker.create_topic("quiet", 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            frames = [fetch_at_end(i, "quiet", 0, 20) if i % 2 else metadata_request(i)
                      for i in range(40)]
            writer.write(b"".join(frames))
            got = [(await read_response(reader))[0] for _ in range(40)]
            assert got == list(range(40))
            writer.close()

    run(scenario)


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", 200 * 1024 * 1024),  # over max_request_bytes
        struct.pack(">i", -5),
        struct.pack(">i", 0),
        struct.pack(">i", 6) + b"\x00\x63\x00\x00\x00\x01",  # unknown API key 99
        struct.pack(">i", 12) + b"\x00\x03\x00\x0c" + b"\xff" * 8,  # Metadata, garbage body
    ],
)
def test_a_bad_frame_closes_only_its_connection(tmp_path: Path, garbage: bytes) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as (_broker, port):
            good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
            bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", port)
            bad_writer.write(garbage)
            assert await bad_reader.read() == b""  # closed by the broker, nothing answered
            good_writer.write(metadata_request(7))
            correlation_id, body = await read_response(good_reader)
            assert correlation_id == 7
            response, _ = entity_reader(load_response_schema(3, 12))(body[1:], 0)
            assert response.brokers[0].port == port
            good_writer.close()
            bad_writer.close()

    run(scenario)


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path, idle_timeout_ms=200) as (_broker, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(metadata_request(1))
            await read_response(reader)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()

    run(scenario)


def test_a_waiting_fetch_is_woken_by_a_produce(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as (broker, port):
            broker.create_topic("events", 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(fetch_at_end(1, "events", 0, 20_000))
            await asyncio.sleep(0.2)
            from weirmq.testing.records import make_batch

            events = broker.partition("events", 0)
            assert events is not None
            events.publish(make_batch(3), Durability.WRITTEN)  # wakes the waiting fetch
            correlation_id, body = await asyncio.wait_for(read_response(reader), 5)
            assert correlation_id == 1
            response, _ = entity_reader(load_response_schema(1, 12))(body[1:], 0)
            (partition,) = response.responses[0].partitions
            assert partition.high_watermark == 3
            assert partition.records
            writer.close()

    run(scenario)


def produce_request(correlation_id: int, topic: str, records: bytes) -> bytes:
    cls = load_request_schema(0, 9)
    module = __import__(cls.__module__, fromlist=["TopicProduceData"])
    body = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            module.TopicProduceData(
                name=topic,
                partition_data=(module.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )
    return request_frame(0, 9, correlation_id, body)


def test_large_produce_requests_trickling_in_or_pipelined_are_answered(tmp_path: Path) -> None:
    """Large frames arrive under a receive low-water mark (SO_RCVLOWAT) and into a reused
    buffer: neither may stall a frame that comes slowly, nor mix up frames sent at once."""
    from weirmq.testing.records import make_batch, read_all

    async def scenario() -> None:
        async with running(tmp_path, message_max_bytes=4 << 20) as (broker, port):
            broker.create_topic("big", 1)
            batches = [
                make_batch(1500, size=1000, tag=b"a"),  # ~1.5 MB: over the highest mark
                make_batch(300, size=1000, tag=b"b"),
                make_batch(700, size=1000, tag=b"c"),
            ]
            frames = [produce_request(i, "big", b) for i, b in enumerate(batches)]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frames[1] + frames[2])  # two at once
            # Then the largest, slowly and last: nothing after it could wake the reader
            # if the mark stayed above the bytes the frame still lacks.
            for start in range(0, len(frames[0]), 100_000):
                writer.write(frames[0][start : start + 100_000])
                await writer.drain()
                await asyncio.sleep(0.01)
            got = [await asyncio.wait_for(read_response(reader), 10) for _ in frames]
            assert [correlation_id for correlation_id, _ in got] == [1, 2, 0]
            for _, body in got:
                response, _ = entity_reader(load_response_schema(0, 9))(body[1:], 0)
                partition = response.responses[0].partition_responses[0]
                assert partition.error_code == 0
            stored = read_all(broker.partition_log("big", 0))  # type: ignore[arg-type]
            assert [b[16:] for b in stored] == [b[16:] for b in batches[1:] + batches[:1]]
            writer.close()

    run(scenario)
