"""From a request frame to a response: header, version check, decode, handler, encode.

`API_VERSIONS` is the single table of what this broker speaks. ApiVersions answers from
it, and nothing outside it reaches a handler, so the broker never advertises a version it
cannot handle (a client would wait forever for an answer that never comes).

What a frame can get:

- a `Reply` (the response frame, as a prefix and a body, written in that order);
- None: Produce with acks=0 is never answered;
- an awaitable of either, when the handler has to wait (acks=all fsync, fetch long poll);
- `CloseConnection`, when the frame cannot be answered in Kafka's terms: an unknown API
  key, a version outside our range (except ApiVersions, below), or a body that does not
  parse. Kafka closes the connection in those cases too; the client reconnects and, having
  read our ApiVersions, does not send it again.

ApiVersions with a version newer than ours gets the answer every client expects: a v0
response with UNSUPPORTED_VERSION and our version table, after which the client retries
with the highest version we listed.

Every other request is admitted by `flow.admission` first, with the request's context
(client id, host) that the handler also gets: the decision's throttle is written into
the response's `throttle_time_ms` here, in one place (a handler may only ask a throttle
of its own, the controller mutation quota of KIP-599: the larger is written). A Fetch's
answer is charged to the client's consumer byte-rate quota once its size is known, and
every request's handler time to its request quota. A throttled response is held back by
its throttle (KIP-219), on the broker's timers, so that a client that ignores the field
is slowed all the same; acks=0 produces, which get no response, are not held.

A produce to a blocked resource (a topic's backlog at its bound) is not handled until
the resource unblocks; if it is still blocked at the request's timeout, the produce is
refused with the retriable REQUEST_TIMED_OUT and nothing is written
(`Dispatcher._unblocked`). Producers retry it, and are held again: a full broker slows
its producers to what its consumers take, instead of failing them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ...broker.core import Broker
from ...broker.partition import wait_any
from ...errors import ErrorCode
from ...flow.admission import Admission, Decision, Kind
from ...types import RequestContext
from ..contract import CloseConnection as CloseConnection
from ..contract import Reply as Reply
from . import requests
from .apis import admin
from .apis import groups as group_apis
from .apis import quotas as quota_apis
from .apis import share as share_apis
from .apis.fetch import handle_fetch
from .apis.metadata import handle_init_producer_id, handle_metadata
from .apis.offsets import handle_list_offsets, handle_offset_for_leader_epoch
from .apis.produce import handle_produce, refuse_produce
from .wire import fast, messages
from .wire.framing import HeaderError, parse_request_header, response_prefix

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
PUBLISH_WAIT_MAX_MS = 30_000
"""The longest a produce waits for a blocked resource, whatever timeout it asks: a
client's own request timeout is about this (librdkafka's request.timeout.ms is 30 s)."""
BLOCKED_RECHECK_MS = 100
"""How often a waiting produce looks whether its resources unblocked: the resources are
sampled once a second, and a produce goes on within this of the sample that frees it."""
FETCH_KEY = 1
_CONFORMED: set[type[Any]] = set()
"""Request classes given their absent fields already (`requests.conform`)."""
API_VERSIONS_KEY = 18
_KINDS = tuple(str(key) for key in range(100))
"""Each reply's `kind` is its API key as text, made once (the metrics name the API)."""
Handler = Callable[[Broker, Any, int, RequestContext], Any]
"""(broker, the decoded request, its version, who asks) -> a response dict, None (no
answer: acks=0) or an awaitable of either."""


class Api(NamedTuple):
    min_version: int
    max_version: int
    handler: Handler | None  # None: answered by the dispatcher itself (ApiVersions)


# OffsetCommit v10 and OffsetFetch v10 name topics by id only; the group APIs' lower
# bounds are the oldest versions kio has classes for.
# Upper bounds: Produce v13 and Fetch v13+ name topics by id only; ListOffsets v11 adds a
# tiered-storage timestamp; InitProducerId v6 is two-phase commit. None of that exists yet.
# Lower bounds of the admin APIs are the oldest versions kio has classes for; every client
# we test (librdkafka 2.x, kafka-python 3, aiokafka) speaks at least those.
API_VERSIONS: dict[int, Api] = {
    0: Api(3, 12, handle_produce),
    1: Api(4, 12, handle_fetch),
    2: Api(1, 10, handle_list_offsets),
    3: Api(0, 12, handle_metadata),
    8: Api(2, 9, group_apis.handle_offset_commit),
    9: Api(1, 9, group_apis.handle_offset_fetch),
    10: Api(0, 6, group_apis.handle_find_coordinator),
    11: Api(0, 9, group_apis.handle_join_group),
    12: Api(0, 4, group_apis.handle_heartbeat),
    13: Api(0, 5, group_apis.handle_leave_group),
    14: Api(0, 5, group_apis.handle_sync_group),
    15: Api(0, 6, group_apis.handle_describe_groups),
    16: Api(0, 5, group_apis.handle_list_groups),
    18: Api(0, 4, None),
    19: Api(2, 7, admin.handle_create_topics),
    20: Api(1, 6, admin.handle_delete_topics),
    21: Api(0, 2, admin.handle_delete_records),
    22: Api(0, 5, handle_init_producer_id),
    23: Api(2, 4, handle_offset_for_leader_epoch),
    32: Api(1, 4, admin.handle_describe_configs),
    33: Api(0, 2, admin.handle_alter_configs),
    35: Api(1, 4, admin.handle_describe_log_dirs),
    37: Api(0, 3, admin.handle_create_partitions),
    42: Api(0, 2, group_apis.handle_delete_groups),
    44: Api(0, 1, admin.handle_incremental_alter_configs),
    47: Api(0, 0, group_apis.handle_offset_delete),
    48: Api(0, 1, quota_apis.handle_describe_client_quotas),
    49: Api(0, 1, quota_apis.handle_alter_client_quotas),
    60: Api(0, 2, admin.handle_describe_cluster),
    68: Api(0, 1, group_apis.handle_consumer_group_heartbeat),
    69: Api(0, 1, group_apis.handle_consumer_group_describe),
    # Share groups (KIP-932) at version 1 only: v0 was Kafka 4.0's early access, which
    # no client we support speaks.
    76: Api(1, 1, share_apis.handle_share_group_heartbeat),
    77: Api(1, 1, share_apis.handle_share_group_describe),
    78: Api(1, 1, share_apis.handle_share_fetch),
    79: Api(1, 1, share_apis.handle_share_acknowledge),
}


Outcome = Reply | None | Awaitable[Reply | None]


def _is_flexible(api_key: int, version: int) -> bool:
    api = API_VERSIONS.get(api_key)
    if api is None or not api.min_version <= version <= api.max_version:
        return False
    return messages.request_is_flexible(api_key, version)


class Held(NamedTuple):
    """A publish the admission made wait, and what it needs to look again."""

    decision: Decision
    size: int
    topics: list[str]


class Dispatcher:
    """Turns request frames into replies for one broker."""

    def __init__(self, broker: Broker, admission: Admission | None = None) -> None:
        self.broker = broker
        self.admission = admission or Admission(broker.flow)
        """Asked once per request; its throttle is stamped on the response (`_reply`)."""

    def handle(self, frame: bytes | memoryview, peer_host: str = "") -> Outcome:
        try:
            header = parse_request_header(frame, _is_flexible)
        except HeaderError as exc:
            raise CloseConnection(f"bad request header: {exc}") from exc
        key, version = header.api_key, header.api_version
        started = time.perf_counter()
        if key == API_VERSIONS_KEY:
            reply = self._api_versions(frame, header.correlation_id, version, header.body_offset)
            self._observe(key, started)
            return reply
        api = API_VERSIONS.get(key)
        if api is None or api.handler is None:
            raise CloseConnection(f"unsupported API key {key}")
        if not api.min_version <= version <= api.max_version:
            raise CloseConnection(
                f"API key {key} version {version} outside {api.min_version}..{api.max_version}"
            )
        request: Any
        try:
            if key == PRODUCE_KEY:  # hand-written: its records stay views of the frame
                request = fast.decode_produce_request(version, frame, header.body_offset)
            elif key == FETCH_KEY:  # hand-written: one pass, no tree of kio classes
                request = fast.decode_fetch_request(version, frame, header.body_offset)
            else:
                request = messages.decode_request(key, version, frame, header.body_offset)
                if type(request) not in _CONFORMED:  # once per class: see requests.py
                    requests.conform(key, type(request))
                    _CONFORMED.add(type(request))
        except messages.DecodeError as exc:
            raise CloseConnection(str(exc)) from exc
        ctx = RequestContext(header.client_id or "", peer_host, "kafka")
        if key == PRODUCE_KEY:
            kind, topics = Kind.PRODUCE, [t.name for t in request.topic_data]
        else:
            kind, topics = (Kind.FETCH if key == FETCH_KEY else Kind.OTHER), []
        decision = self.admission.admit(ctx, len(frame), self.broker.clock(), kind, topics)
        throttle_ms = decision.throttle_ms
        if decision.wait_for:  # only a publish waits: see flow/controller.py
            held = Held(decision, len(frame), topics)
            return self._unblocked(
                held, api, request, version, header.correlation_id, ctx, started, throttle_ms
            )
        result = api.handler(self.broker, request, version, ctx)
        if result is None:
            self._observe(key, started, ctx)
            return None
        if isinstance(result, dict):
            throttle_ms = max(throttle_ms, self._fetched(key, ctx, result), _asked(result))
            reply = _reply(key, version, header.correlation_id, result, throttle_ms)
            self._observe(key, started, ctx)
            return reply if throttle_ms <= 0 else self._held(reply, throttle_ms)
        return self._finish(result, key, version, header.correlation_id, started, throttle_ms, ctx)

    def _fetched(self, key: int, ctx: RequestContext, result: dict[str, Any]) -> int:
        """A Fetch's answer charged to the client's consumer byte rate; its throttle."""
        if key != FETCH_KEY:
            return 0
        size = sum(len(p["records"]) for topic in result["responses"] for p in topic["partitions"])
        return self.admission.fetched(ctx, size, self.broker.clock()) if size else 0

    async def _unblocked(
        self,
        held: Held,
        api: Api,
        request: Any,
        version: int,
        correlation_id: int,
        ctx: RequestContext,
        started: float,
        throttle_ms: int,
    ) -> Reply | None:
        """A produce that must wait for blocked resources (a full memory budget, a topic's
        backlog at its bound): handled once they unblock, or refused with the retriable
        REQUEST_TIMED_OUT, nothing written, when they stay blocked until the request's own
        timeout (capped by `PUBLISH_WAIT_MAX_MS`). The time waited counts against the
        throttle: the client has been slowed down by it already."""
        broker = self.broker
        began = broker.clock()
        deadline = began + min(max(int(request.timeout_ms), 0), PUBLISH_WAIT_MAX_MS)
        blocked = held.decision.wait_for
        while blocked and not broker.closing:
            now = broker.clock()
            until = min(deadline, now + BLOCKED_RECHECK_MS)
            waiting = wait_any([], until, broker.timers, broker.clock)
            if waiting is None:
                break
            await waiting
            blocked = self.admission.still_blocked(held.decision, held.size, held.topics)
        throttle_ms = max(0, throttle_ms - (broker.clock() - began))
        pending: Any
        if blocked:
            broker.flow.refused_publishes += 1
            pending = refuse_produce(
                request,
                ErrorCode.request_timed_out,
                f"the broker is holding publishes back ({', '.join(sorted(blocked))} at its "
                "limit) and still was at the request's timeout; retry later",
            )
        else:
            assert api.handler is not None  # handle() only gets here with one
            pending = api.handler(broker, request, version, ctx)
        if not isinstance(pending, dict) and pending is not None:
            pending = await pending
        return await self._finish(
            _ready(pending), PRODUCE_KEY, version, correlation_id, started, throttle_ms, ctx
        )

    def _held(self, reply: Reply, throttle_ms: int) -> Awaitable[Reply]:
        """The reply, once `throttle_ms` has passed on the broker's clock (KIP-219)."""
        broker = self.broker
        deadline_ms = broker.clock() + throttle_ms

        async def held() -> Reply:
            waiting = wait_any([], deadline_ms, broker.timers, broker.clock)
            if waiting is not None and not broker.closing:
                await waiting
            return reply

        return held()

    def _observe(self, key: int, started: float, ctx: RequestContext | None = None) -> None:
        stats = self.broker.stats.api(key)
        stats.requests += 1
        elapsed = time.perf_counter() - started
        stats.latency.observe(elapsed)
        if ctx is not None:
            self.admission.handled(ctx, elapsed * 1000, self.broker.clock())

    async def _finish(
        self,
        pending: Awaitable[dict[str, Any] | None],
        key: int,
        version: int,
        correlation_id: int,
        started: float,
        throttle_ms: int,
        ctx: RequestContext,
    ) -> Reply | None:
        result = await pending
        if result is None:
            self._observe(key, started, ctx)
            return None
        throttle_ms = max(throttle_ms, self._fetched(key, ctx, result), _asked(result))
        reply = _reply(key, version, correlation_id, result, throttle_ms)
        self._observe(key, started, ctx)
        if throttle_ms > 0:
            return await self._held(reply, throttle_ms)
        return reply

    def _api_versions(
        self, frame: bytes | memoryview, correlation_id: int, version: int, offset: int
    ) -> Reply:
        api = API_VERSIONS[API_VERSIONS_KEY]
        error = ErrorCode.none
        if version > api.max_version or version < api.min_version:
            version, error = 0, ErrorCode.unsupported_version
        else:
            try:
                messages.decode_request(API_VERSIONS_KEY, version, frame, offset)
            except messages.DecodeError:
                error = ErrorCode.invalid_request
        data = {
            "error_code": error,
            "api_keys": [
                {"api_key": key, "min_version": a.min_version, "max_version": a.max_version}
                for key, a in sorted(API_VERSIONS.items())
            ],
        }
        return _reply(API_VERSIONS_KEY, version, correlation_id, data, 0)


def _asked(result: dict[str, Any]) -> int:
    """A throttle the handler asked itself (the controller mutation quota of CreateTopics,
    CreatePartitions and DeleteTopics, KIP-599): stamped like the admission's."""
    return int(result.get("throttle_time", 0))


async def _ready(result: dict[str, Any] | None) -> dict[str, Any] | None:
    return result


def _encode_produce(version: int, data: dict[str, Any]) -> list[bytes | memoryview]:
    return [fast.encode_produce_response(version, data)]


# Hand-written encoders for the hot responses (wire/fast.py; byte-identical to kio's in
# tests). Measured (bench/encoders.py): 17x faster for a one-partition ProduceResponse,
# where kio's writer was ~30% of the whole cost of a small produce request.
_FAST: dict[int, Callable[[int, dict[str, Any]], list[bytes | memoryview]]] = {
    0: _encode_produce,
    1: fast.encode_fetch_response,
}


def _reply(
    key: int, version: int, correlation_id: int, data: dict[str, Any], throttle_ms: int
) -> Reply:
    data["throttle_time"] = throttle_ms  # the one place: see flow/admission.py
    encoder = _FAST.get(key)
    if encoder is not None:
        body = encoder(version, data)
    else:
        body = [messages.encode(messages.build_response(key, version, data))]
    size = sum(len(part) for part in body)
    flexible = messages.response_header_is_flexible(key, version)
    prefix = response_prefix(correlation_id, size, flexible_header=flexible)
    return Reply(prefix, body, _KINDS[key] if key < len(_KINDS) else str(key))
