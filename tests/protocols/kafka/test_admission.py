"""The dispatcher asks `flow.admission` once per request and stamps its throttle on the
response, whatever the API and whichever encoder (kio's or the hand-written ones) writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from test_handlers import (
    FETCH,
    METADATA,
    PRODUCE,
    Client,
    decode_reply,
    fetch_request,
    produce_request,
    request_frame,
    resolve,
)

from weirmq.flow.admission import ADMIT, Admission, Decision, Kind
from weirmq.protocols.kafka.dispatch import Dispatcher
from weirmq.settings import Settings
from weirmq.testing.records import make_batch
from weirmq.types import RequestContext

THROTTLE_MS = 250
FIND_COORDINATOR, LIST_GROUPS = 10, 16


class Throttling(Admission):
    """Throttles every request and remembers who asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[RequestContext, int, Kind, list[str]]] = []

    def admit(
        self,
        ctx: RequestContext,
        size_bytes: int,
        now_ms: int,
        kind: Kind = Kind.OTHER,
        topics: Iterable[str] = (),
    ) -> Decision:
        self.asked.append((ctx, size_bytes, kind, list(topics)))
        return Decision(throttle_ms=THROTTLE_MS)


@pytest.fixture
def throttled(tmp_path: Path) -> Iterator[tuple[Client, Throttling]]:
    client = Client(Settings(data_dir=tmp_path / "data", flush_interval_ms=3_600_000))
    admission = Throttling()
    client.dispatcher = Dispatcher(client.broker, admission)
    yield client, admission
    client.close()


def test_the_default_admission_admits_everything_at_once() -> None:
    assert Admission().admit(RequestContext("c", "/127.0.0.1"), 1 << 20, 0) is ADMIT
    assert ADMIT.throttle_ms == 0


@pytest.mark.parametrize(
    ("api_key", "version", "data"),
    [
        (METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}),
        (FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]}),
        (LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}),
        (PRODUCE, 9, produce_request([("t", 0, make_batch(2))])),  # wire.fast encodes it
        (FETCH, 12, fetch_request([("t", 0, 0)])),  # so does this one
    ],
)
def test_every_response_carries_the_admission_s_throttle(
    throttled: tuple[Client, Throttling], api_key: int, version: int, data: dict[str, object]
) -> None:
    client, admission = throttled
    client.broker.create_topic("t", 1)
    frame = request_frame(api_key, version, data)
    response = decode_reply(api_key, version, resolve(client.dispatcher.handle(frame, "/10.0.0.7")))
    assert response.throttle_time.total_seconds() * 1000 == THROTTLE_MS
    (ctx, size, kind, topics), *_ = admission.asked
    assert (ctx.client_id, ctx.host, ctx.protocol) == ("test-client", "/10.0.0.7", "kafka")
    assert size == len(frame)
    expected = {PRODUCE: (Kind.PRODUCE, ["t"]), FETCH: (Kind.FETCH, [])}
    assert (kind, topics) == expected.get(api_key, (Kind.OTHER, []))
