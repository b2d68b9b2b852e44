"""Hostile byte streams through the connection pump: each costs at most its own connection.

A broker runs in this process (`weirmq.testing.Broker`: the listener, pump, dispatcher and
storage of `weirmq serve`, over loopback TCP). Hypothesis writes byte streams to fresh
connections: the frames of `test_hostile_requests.hostile_frames` (every API and version,
mutated, garbage bodies, garbage headers), raw random bytes, length prefixes over the
frame limit or negative, frames cut short. After each stream the client half-closes; the
broker must close the connection in turn (it never waits for more from a client that has
gone), and a bystander connection opened before the fuzzing must still get its answers.
Nothing may be logged at ERROR. The run is bounded like the dispatcher's
(`HOSTILE_EXAMPLES`).
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_requests import EXAMPLES, hostile_frames, request_frame

from weirmq.protocols.kafka.dispatch import API_VERSIONS
from weirmq.testing import Broker

MAX_REQUEST_BYTES = 1024 * 1024
SOCKET_TIMEOUT_S = 10.0
API_VERSIONS_KEY, METADATA_KEY = 18, 3


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(auto_create_topics=False, max_request_bytes=MAX_REQUEST_BYTES) as running:
        yield running


@pytest.fixture(scope="module")
def address(broker: Broker) -> tuple[str, int]:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return host, int(port)


class Bystander:
    """A well-behaved client on its own connection: ApiVersions, answered, again and again."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
        self.correlation_id = 0

    def api_versions(self) -> None:
        self.correlation_id += 1
        body = b"\x08hostile\x020\x00"  # client software name and version, no tags
        frame = request_frame(API_VERSIONS_KEY, 3, body, self.correlation_id)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size, correlation_id = struct.unpack(">ii", _read_exactly(self.sock, 8))
        assert correlation_id == self.correlation_id
        reply = _read_exactly(self.sock, size - 4)
        assert reply[:2] == b"\x00\x00", "ApiVersions answered with an error"

    def close(self) -> None:
        self.sock.close()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        assert chunk, "the broker closed a well-behaved client's connection"
        out += chunk
    return bytes(out)


@pytest.fixture(scope="module")
def bystander(address: tuple[str, int]) -> Iterator[Bystander]:
    client = Bystander(address)
    client.api_versions()
    yield client
    client.close()


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.INFO)
    yield
    found = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert found == []


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _pieces(key: int) -> st.SearchStrategy[bytes]:
    """One piece of a hostile stream: a whole hostile frame, or bytes that break framing."""
    too_big = st.integers(MAX_REQUEST_BYTES + 1, 2**31 - 1) | st.integers(-(2**31), -1)
    return st.one_of(
        hostile_frames(key).map(sized),
        hostile_frames(key).flatmap(
            lambda f: st.integers(0, len(f)).map(lambda n: sized(f)[: 4 + n])
        ),  # cut short: the frame's prefix promises more than comes
        st.binary(min_size=1, max_size=256),
        st.tuples(too_big, st.binary(max_size=32)).map(lambda t: struct.pack(">i", t[0]) + t[1]),
    )


def hostile_streams(key: int) -> st.SearchStrategy[bytes]:
    """What one hostile connection sends: up to three pieces, mostly of API `key`."""
    return st.lists(_pieces(key), min_size=1, max_size=3).map(b"".join)


def send_and_half_close(address: tuple[str, int], stream: bytes) -> bytes:
    """Send `stream`, say we are done, read until the broker closes; what it answered."""
    with socket.create_connection(address, timeout=SOCKET_TIMEOUT_S) as sock:
        try:
            sock.sendall(stream)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the broker closed first: a refused frame
            return b""
        received = bytearray()
        try:
            while chunk := sock.recv(1 << 16):
                received += chunk
        except ConnectionResetError:  # closed with our bytes unread: fine
            pass
        return bytes(received)


@pytest.mark.parametrize("key", sorted(API_VERSIONS))
@settings(
    max_examples=max(EXAMPLES // 3, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_hostile_stream_costs_only_its_own_connection(
    key: int,
    data: st.DataObject,
    address: tuple[str, int],
    bystander: Bystander,
    errors: None,
) -> None:
    stream = data.draw(hostile_streams(key), label="stream")
    send_and_half_close(address, stream)  # a timeout here: the broker hung on
    bystander.api_versions()


def test_the_pump_still_serves_new_clients_after_the_fuzzing(
    address: tuple[str, int], errors: None
) -> None:
    client = Bystander(address)
    try:
        client.api_versions()
    finally:
        client.close()
    metadata = request_frame(METADATA_KEY, 1, struct.pack(">i", -1), correlation_id=5)
    answer = send_and_half_close(address, sized(metadata))
    size, correlation_id = struct.unpack_from(">ii", answer)
    assert (size, correlation_id) == (len(answer) - 4, 5)
