"""Hostile requests of every API and version against a broker process, then real clients.

`test_fuzz.py` storms a broker with random frames and a handful of request kinds beside
live clients. This test covers the rest: the frames of
`tests/protocols/kafka/test_hostile_requests.py` (every API and version the dispatcher
advertises, written by kio then cut short, bit-flipped, overwritten or given -1 lengths;
garbage bodies behind valid headers; garbage frames; length prefixes over the limit or
negative; frames cut short), each on a connection of its own, against a `weirmq serve`
process. Afterwards:

- the broker is running, and a confluent-kafka produce/consume round trip works;
- a bystander connection opened before the garbage has been answered all along;
- the broker's log holds no ERROR line and no traceback: every bad request was the
  client's mistake, answered with an error or a closed connection (logged at INFO).

Hypothesis draws the frames (`HOSTILE_EXAMPLES` per API, 60 by default, a few seconds in
all); a failure prints the frames that caused it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The frames are the in-process fuzz test's; its directory is on sys.path only when pytest
# collects it, so this test puts it there for runs of tests/integration alone.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols" / "kafka"))
from test_fuzz import fresh_client_round_trip
from test_hostile_connections import (
    MAX_REQUEST_BYTES,
    Bystander,
    hostile_streams,
    send_and_half_close,
)
from test_hostile_requests import EXAMPLES

from weirmq.protocols.kafka.dispatch import API_VERSIONS

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration


def test_hostile_requests_of_every_api_leave_the_broker_serving(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(
        auto_create_topics=False, max_request_bytes=MAX_REQUEST_BYTES, default_partitions=1
    )
    address = ("127.0.0.1", broker.port)
    bystander = Bystander(address)
    bystander.api_versions()
    sent = 0

    @settings(
        max_examples=EXAMPLES * len(API_VERSIONS) // 4,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(st.sampled_from(sorted(API_VERSIONS)).flatmap(hostile_streams))
    def storm(stream: bytes) -> None:
        nonlocal sent
        send_and_half_close(address, stream)
        sent += 1
        if sent % 50 == 0:
            bystander.api_versions()

    try:
        storm()
        bystander.api_versions()
    finally:
        bystander.close()
    assert broker.running, f"the broker died: {broker.describe()}"
    # Auto-creation is off (the garbage's random names would make topics): the round
    # trip's topic is created first.
    fresh_client_round_trip_with_topic(broker.bootstrap)
    assert broker.running
    log = broker.stderr_path.read_text(errors="replace") if broker.stderr_path else ""
    bad = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
    assert bad == [], "\n".join(bad[:20])


def fresh_client_round_trip_with_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("after-storm", 1)])
    for future in futures.values():
        future.result(30)
    fresh_client_round_trip(bootstrap)
