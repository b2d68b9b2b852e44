"""Connections that produced once and then went quiet cost the broker little memory.

Each of `CONNECTIONS` raw sockets asks ApiVersions and sends one ~1 MB Produce (the size
librdkafka's and the Java client's default batching sends), then stays open and silent.
While answering, the broker's frame reader holds a 64 KiB scratch buffer and a ~1 MB
large-frame buffer per connection (kept for the connection's next large frame); once a
connection has been quiet for `BUFFER_RELEASE_IDLE_S` it lets both go. The broker's RSS,
measured before the connections open and again after they have gone quiet, must then grow
by little more than what an idle connection costs anyway (its socket, transport and
session: ~2.6 MiB per 1,000 connections that never sent anything, measured).
"""

from __future__ import annotations

import resource
import socket
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from weirmq.server.connection import BUFFER_RELEASE_IDLE_S
from weirmq.testing.records import make_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols" / "kafka"))
from test_handlers import produce_request, request_frame

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration

CONNECTIONS = 1000
TOPIC = "idle-memory"
RSS_PER_1000_BYTES_MAX = 20 * 1024 * 1024
"""What 1,000 used-then-idle connections may add to the broker's RSS: what they cost
before this bound existed was ~1 GiB (each kept its ~1 MB frame buffer); what is left is
their sockets, transports and sessions (~2.6 MiB per 1,000 when never used), plus room
for allocator slack and for the log's own growth (index entries, the producer state)."""
SETTLE_S = 2.0
"""Beyond the release period: every connection's idle timer has fired by then."""


def _sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
    body = sock.recv(size, socket.MSG_WAITALL)
    assert len(body) == size, "connection closed mid-response"
    return body


API_VERSIONS = _sized(
    request_frame(18, 3, {"client_software_name": "idle-test", "client_software_version": "1"})
)
PRODUCE = _sized(
    request_frame(0, 9, produce_request([(TOPIC, 0, make_batch(1000, size=1000))], acks=1))
)


def _use(address: tuple[str, int]) -> socket.socket:
    """A connection that asked ApiVersions and produced ~1 MB, both answered."""
    sock = socket.create_connection(address, timeout=30)
    sock.sendall(API_VERSIONS)
    _read_frame(sock)
    sock.sendall(PRODUCE)
    body = _read_frame(sock)
    # Response header v1: correlation id, then an empty tagged-field section.
    response, _ = entity_reader(load_response_schema(0, 9))(body, 5)
    error_code = response.responses[0].partition_responses[0].error_code
    assert error_code == 0, error_code
    return sock


def _raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            raise AssertionError(f"needs {wanted} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def test_connections_that_produced_once_then_idle_cost_little_memory(
    broker_factory: BrokerFactory,
) -> None:
    # The broker is started from this process and inherits its descriptor limit.
    _raise_fd_limit(2 * CONNECTIONS + 1000)
    broker = broker_factory(max_connections_per_address=CONNECTIONS + 100)
    host, port = broker.bootstrap.split(":")
    address = (host, int(port))
    # Warm up, so the measurement sees connections rather than first-use costs: the topic
    # (created by the first produce), imports done on first use, the log's first segment.
    # These connections stay open: closed, they would leave freed memory behind that
    # nothing trims, and that the connections measured would reuse unseen.
    sockets = [_use(address) for _ in range(20)]
    try:
        time.sleep(BUFFER_RELEASE_IDLE_S + SETTLE_S)
        before_bytes = broker.rss_bytes()
        started_s = time.monotonic()
        sockets += [_use(address) for _ in range(CONNECTIONS)]
        used_s = time.monotonic() - started_s
        busy_bytes = broker.rss_bytes()
        time.sleep(BUFFER_RELEASE_IDLE_S + SETTLE_S)
        idle_bytes = broker.rss_bytes()
    finally:
        for sock in sockets:
            sock.close()
    per_1000 = (idle_bytes - before_bytes) * 1000 / CONNECTIONS
    print(
        f"\nbroker RSS: {before_bytes / 2**20:.1f} MiB before; "
        f"{busy_bytes / 2**20:.1f} MiB just after {CONNECTIONS} connections each produced "
        f"~1 MB ({used_s:.1f} s); {idle_bytes / 2**20:.1f} MiB after "
        f"{BUFFER_RELEASE_IDLE_S + SETTLE_S:.0f} s idle: "
        f"{per_1000 / 2**20:.2f} MiB per 1,000 used-then-idle connections"
    )
    assert per_1000 < RSS_PER_1000_BYTES_MAX, f"{per_1000 / 2**20:.1f} MiB per 1,000"
