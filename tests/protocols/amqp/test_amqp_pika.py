"""The AMQP connection layer against a real client: pika 1.x through the real pump.

The test runs a `weirmq.server.connection.Listener` with the AMQP adapter and no broker
behind its methods, on a loop in a thread, on a free loopback port, and pika's
BlockingConnection talks to it. What is checked is the connection itself: the handshake
and its refusals, channels, heartbeats both ways, Connection.Blocked, 540 for a method
without a handler (what a broker-less table answers), and what a non-AMQP client gets.
The broker behind the methods is tested in test_amqp_pika_queues.py and through
`weirmq serve` in tests/integration/test_amqp_*.py.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands, frame

from weirmq.broker.timers import LoopTimers
from weirmq.protocols.amqp import AmqpAdapter, AmqpConfig
from weirmq.server.connection import Listener
from weirmq.settings import Settings

pytestmark = pytest.mark.integration


def _clock() -> int:
    return time.time_ns() // 1_000_000


class Server:
    """The AMQP adapter behind a real listener, on its own loop thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.adapter = AmqpAdapter(AmqpConfig(), _clock, LoopTimers(_clock))
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),))

    async def _main(self) -> None:
        listener = Listener(self.adapter, Settings())
        _, self.port = await listener.start("127.0.0.1", 0)
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await listener.stop(timeout_s=1)

    def __enter__(self) -> Server:
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)
        self.loop.close()

    def call(self, function: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(function, *args)

    def parameters(self, **kwargs: Any) -> pika.ConnectionParameters:
        kwargs.setdefault("connection_attempts", 1)
        return pika.ConnectionParameters("127.0.0.1", self.port, **kwargs)


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as running:
        yield running


def test_pika_connects_opens_channels_and_closes(server: Server) -> None:
    connection = pika.BlockingConnection(server.parameters())
    properties = connection._impl.server_properties
    assert properties["product"] == "WeirMQ"
    assert properties["capabilities"]["publisher_confirms"] is True
    channels = [connection.channel() for _ in range(3)]
    assert all(channel.is_open for channel in channels)
    channels[0].close()
    assert connection.channel().is_open  # its number is reused
    connection.close()
    assert connection.is_closed


def test_heartbeats_keep_an_idle_pika_connection_alive(server: Server) -> None:
    connection = pika.BlockingConnection(server.parameters(heartbeat=1))
    deadline = time.monotonic() + 3.5  # pika gives up after ~2 silent intervals
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.5)
    assert connection.is_open
    connection.close()


def test_bad_credentials_get_403(server: Server) -> None:
    credentials = pika.PlainCredentials("guest", "not-the-password")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as caught:
        pika.BlockingConnection(server.parameters(credentials=credentials))
    assert "403" in str(caught.value) and "ACCESS_REFUSED" in str(caught.value)


def test_an_unknown_vhost_gets_530(server: Server) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as caught:
        pika.BlockingConnection(server.parameters(virtual_host="nope"))
    assert "530" in str(caught.value) and "vhost nope not found" in str(caught.value)


def test_methods_without_a_handler_get_540(server: Server) -> None:
    connection = pika.BlockingConnection(server.parameters())
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        channel.queue_declare("jobs")
    assert caught.value.reply_code == 540
    assert caught.value.reply_text == "NOT_IMPLEMENTED - 'queue.declare' is not implemented"


def test_the_flow_signal_reaches_pika_as_blocked_then_unblocked(server: Server) -> None:
    connection = pika.BlockingConnection(server.parameters())
    seen: list[str] = []
    connection.add_on_connection_blocked_callback(
        lambda _c, method: seen.append(f"blocked: {method.method.reason}")
    )
    connection.add_on_connection_unblocked_callback(lambda _c, _m: seen.append("unblocked"))
    server.call(server.adapter.flow, True, "low on memory")
    server.call(server.adapter.flow, False)
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert seen == ["blocked: low on memory", "unblocked"]
    connection.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_a_non_amqp_client_gets_our_header_and_a_closed_socket(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_until_closed(sock) == b"AMQP\x00\x00\x09\x01"


def _opened_socket(port: int) -> socket.socket:
    """A raw client socket past Connection.OpenOk."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    sock.recv(65536)  # Connection.Start
    sock.sendall(frame.marshal(commands.Connection.StartOk(response="\x00guest\x00guest"), 0))
    sock.recv(65536)  # Connection.Tune
    sock.sendall(frame.marshal(commands.Connection.TuneOk(2047, 131_072, 0), 0))
    sock.sendall(frame.marshal(commands.Connection.Open(), 0))
    sock.recv(65536)  # Connection.OpenOk
    return sock


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x09\x00\x00\x00\x00\x00\x01x\xce",  # a frame of an unknown type
        b"\x01\x00\x01\x00\x00\x00\x02xy\x00",  # a bad frame-end octet
    ],
)
def test_garbage_after_the_handshake_gets_a_501_close(server: Server, garbage: bytes) -> None:
    with _opened_socket(server.port) as sock:
        sock.sendall(garbage)
        _, _, close = frame.unmarshal(sock.recv(65536))
        assert isinstance(close, commands.Connection.Close) and close.reply_code == 501
        sock.sendall(frame.marshal(commands.Connection.CloseOk(), 0))
        assert _read_until_closed(sock) == b""


def test_a_frame_claiming_gigabytes_gets_a_501_close_and_is_never_buffered(
    server: Server,
) -> None:
    with _opened_socket(server.port) as sock:
        sock.sendall(b"\xff" * 64)  # type 255, channel 65535, 4 GiB
        _, _, close = frame.unmarshal(sock.recv(65536))
        assert isinstance(close, commands.Connection.Close) and close.reply_code == 501
        assert "larger than frame_max 131072" in close.reply_text
