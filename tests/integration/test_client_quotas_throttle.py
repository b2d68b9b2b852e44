"""A client quota slows a real confluent-kafka producer down: it sees the broker's
throttle (its throttle callback) and its rate stays near the quota, while another
client without a quota is not throttled.

No Python client speaks AlterClientQuotas (kafka-configs.sh would), so the quota is set
with one request built from Kafka's own schemas (kio) on a plain socket; what is under
test is the throttle a real client honours.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer, ThrottleEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols" / "kafka"))
from test_handlers import request_frame

if TYPE_CHECKING:
    from conftest import BrokerProcess

QUOTA_BYTES_PER_S = 100_000
SENT_BYTES = 600_000


def _set_producer_quota(broker: BrokerProcess, client_id: str, per_second: float) -> None:
    frame = request_frame(
        49,
        1,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                    "ops": [{"key": "producer_byte_rate", "value": per_second, "remove": False}],
                }
            ],
            "validate_only": False,
        },
    )
    host, port = broker.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        body = sock.recv(size, socket.MSG_WAITALL)
    # Response header v1 (correlation id, tagged fields), throttle, one entry whose error
    # code is the first field: 0 when applied.
    (error_code,) = struct.unpack_from(">h", body, 4 + 1 + 4 + 1)
    assert error_code == 0, error_code


def _produce(broker: BrokerProcess, client_id: str) -> tuple[float, list[int]]:
    throttles: list[int] = []
    lock = threading.Lock()

    def on_throttle(event: ThrottleEvent) -> None:
        with lock:
            throttles.append(int(event.throttle_time * 1000))

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": client_id,
            "throttle_cb": on_throttle,
            "linger.ms": 5,
        }
    )
    started = time.monotonic()
    for _ in range(SENT_BYTES // 1000):
        producer.produce("metered", b"x" * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0
    return time.monotonic() - started, throttles


def test_a_producer_over_its_quota_is_slowed_to_it(broker: BrokerProcess) -> None:
    _set_producer_quota(broker, "metered-app", QUOTA_BYTES_PER_S)
    _, free_throttles = _produce(broker, "free-app")
    assert not free_throttles
    metered_s, throttles = _produce(broker, "metered-app")
    assert throttles, "the producer was never told to slow down"
    # Enforcement, not speed: 600 KB at 100 KB/s cannot get through in much less than
    # 6 s, whatever the machine (half of it allows for the measuring window's start).
    assert metered_s > SENT_BYTES / QUOTA_BYTES_PER_S / 2
