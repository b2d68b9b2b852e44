"""The pump's global bounds without sockets: the request memory budget, connection limits.

Connections are driven as asyncio drives them (`connection_made`, `get_buffer` /
`buffer_updated`, `connection_lost`) through a fake transport, with Kafka's real size-prefix
framer (`FrameReader`) and a session that answers each frame at once, or when the test
releases it. What is checked is what the connection does to its transport (pause, resume,
close) and what the listener's budget holds.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from weirmq.protocols.contract import ConnectionHandle, Frame, Outcome, Reply
from weirmq.protocols.kafka.wire.framing import FrameReader
from weirmq.server.connection import Connection, ConnectionCounts, Listener, RequestMemory
from weirmq.settings import Settings

MIB = 1024 * 1024


class Transport(asyncio.Transport):
    def __init__(self, protocol: Connection, host: str) -> None:
        super().__init__({"peername": (host, 40000), "socket": None})
        self.protocol = protocol
        self.reading = True
        self.closed = False
        self.written = b""

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)


class Session:
    """Answers a frame starting with b"w" when the test sets `gate`, any other at once."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    def handle(self, frame: Frame) -> Outcome:
        if bytes(frame[:1]) == b"w":
            return self._later()
        return Reply(b"ok", [])

    async def _later(self) -> Reply:
        await self.gate.wait()
        return Reply(b"late", [])

    def writing_resumed(self) -> None:
        pass

    def closed(self) -> None:
        pass


class Adapter:
    name = "test"

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    def new_framer(self, max_frame_bytes: int) -> FrameReader:
        return FrameReader(max_frame_bytes)

    def new_session(self, connection: ConnectionHandle) -> Session:
        return Session(self.gate)


def make_listener(**settings: Any) -> tuple[Listener, Adapter]:
    adapter = Adapter()
    return Listener(adapter, Settings(**settings), ConnectionCounts()), adapter


def connect(listener: Listener, host: str = "127.0.0.1") -> tuple[Connection, Transport]:
    connection = listener.new_connection()
    transport = Transport(connection, host)
    connection.connection_made(transport)
    return connection, transport


def feed(connection: Connection, data: bytes) -> None:
    while data:
        buffer = connection.get_buffer(-1)
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        connection.buffer_updated(n)
        data = data[n:]


def frame_start(size: int, first: bytes = b"x") -> bytes:
    """The size prefix of a frame of `size` bytes and its first byte."""
    return struct.pack(">i", size) + first


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        await asyncio.wait_for(scenario(), 10)

    asyncio.run(main())


# --- RequestMemory ----------------------------------------------------------------------------


class Waiter:
    def __init__(self, wanted: int) -> None:
        self.wanted_bytes = wanted
        self.granted: list[int] = []

    def memory_granted(self, nbytes: int) -> None:
        self.granted.append(nbytes)


def test_memory_grants_in_arrival_order_as_releases_make_room() -> None:
    memory = RequestMemory(100)
    assert memory.reserve(Waiter(60), 60)
    big, small = Waiter(50), Waiter(10)
    assert not memory.reserve(big, 50)
    assert not memory.reserve(small, 10)  # it would fit, but must not overtake `big`
    memory.release(5)  # 55 + 50 does not fit yet
    assert big.granted == [] and small.granted == []
    memory.release(55)
    assert big.granted == [50] and small.granted == [10]
    assert memory.used_bytes == 60 and memory.waiting == 0


def test_memory_lets_one_frame_larger_than_the_budget_in_alone() -> None:
    memory = RequestMemory(100)
    assert memory.reserve(Waiter(500), 500)  # nothing held: it gets in
    second = Waiter(1)
    assert not memory.reserve(second, 1)
    memory.release(500)
    assert second.granted == [1]


def test_a_forgotten_waiter_no_longer_blocks_the_queue() -> None:
    memory = RequestMemory(100)
    assert memory.reserve(Waiter(90), 90)
    gone, next_one = Waiter(50), Waiter(5)
    assert not memory.reserve(gone, 50)
    assert not memory.reserve(next_one, 5)
    memory.forget(gone)
    assert next_one.granted == [5]


# --- the budget on connections ------------------------------------------------------------------


def test_connections_stop_reading_when_the_budget_is_used_and_resume_when_answered() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener(queued_max_request_bytes=3 * MIB)
        first, first_transport = connect(listener)
        second, second_transport = connect(listener)
        feed(first, frame_start(2 * MIB, b"w"))  # a 2 MiB request, answered later
        assert first.held_bytes >= 2 * MIB and first_transport.reading
        feed(second, frame_start(2 * MIB))  # does not fit beside the first
        assert not second_transport.reading  # back-pressure: no more bytes taken
        assert second.held_bytes == 0 and listener.memory.waiting == 1
        feed(first, b"\0" * (2 * MIB - 1))  # the first frame completes: in flight now
        assert listener.memory.used_bytes >= 2 * MIB  # held until it is answered
        assert not second_transport.reading
        adapter.gate.set()
        await settle()
        assert first_transport.written.endswith(b"late")
        assert second_transport.reading  # its frame is reserved for now
        assert second.held_bytes >= 2 * MIB
        feed(second, b"\0" * (2 * MIB - 1))
        assert second_transport.written == b"ok"
        assert listener.memory.used_bytes == 0

    run(scenario)


def test_a_closed_connection_gives_back_what_it_held_and_what_it_waited_for() -> None:
    async def scenario() -> None:
        listener, _ = make_listener(queued_max_request_bytes=3 * MIB)
        holder, holder_transport = connect(listener)
        waiter, waiter_transport = connect(listener)
        third, third_transport = connect(listener)
        feed(holder, frame_start(2 * MIB) + b"\0" * MIB)  # half received, then stalls
        feed(waiter, frame_start(2 * MIB))
        feed(third, frame_start(2 * MIB))
        assert listener.memory.waiting == 2
        waiter_transport.close()
        await settle()
        assert listener.memory.waiting == 1 and not third_transport.reading
        holder_transport.close()
        await settle()
        assert third_transport.reading and third.held_bytes >= 2 * MIB
        assert listener.memory.used_bytes == third.held_bytes
        assert waiter.held_bytes == 0 and holder.held_bytes == 0

    run(scenario)


def test_small_frames_are_not_held_back_by_a_used_budget() -> None:
    async def scenario() -> None:
        listener, _ = make_listener(queued_max_request_bytes=1 * MIB)
        hog, _ = connect(listener)
        feed(hog, frame_start(4 * MIB))  # alone, so let in; the budget is now used up
        client, client_transport = connect(listener)
        feed(client, struct.pack(">i", 5) + b"hello" + struct.pack(">i", 2) + b"hi")
        assert client_transport.written == b"okok" and client_transport.reading

    run(scenario)


# --- connection limits ------------------------------------------------------------------------


def test_connections_over_a_limit_are_closed_at_once_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        listener, _ = make_listener(max_connections=4, max_connections_per_address=2)
        with caplog.at_level(logging.WARNING, logger="weirmq.server.connection"):
            kept = [connect(listener, "10.0.0.1")[1] for _ in range(2)]
            refused_same_host = [connect(listener, "10.0.0.1")[1] for _ in range(3)]
            kept += [connect(listener, "10.0.0.2")[1] for _ in range(2)]
            refused_total = connect(listener, "10.0.0.3")[1]
            await settle()
        assert not any(t.closed for t in kept)
        assert all(t.closed for t in [*refused_same_host, refused_total])
        assert all(t.written == b"" for t in [*refused_same_host, refused_total])
        assert listener.connections_refused == 4
        assert listener.stats.connections_open == 4
        lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
        assert len(lines) == 1, lines  # rate-limited: one line for the burst
        assert "max_connections_per_address" in lines[0]
        kept[0].close()
        await settle()
        assert not connect(listener, "10.0.0.1")[1].closed  # room again from that host
        assert listener.connections_by_address == {"10.0.0.1": 2, "10.0.0.2": 2}

    run(scenario)
