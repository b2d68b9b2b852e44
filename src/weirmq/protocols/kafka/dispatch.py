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

Every answer carrying an error code (at the top level, or for a partition or resource) is
logged at DEBUG with the client id, API, version and error names, and counted by API and
code in `BrokerStats.kafka_request_errors` (`error_codes`; a Produce or Fetch answer
without errors costs one truth test per partition, ~0.2 us, measured).

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
from .apis import admin, cluster
from .apis import groups as group_apis
from .apis import quotas as quota_apis
from .apis import share as share_apis
from .apis import transactions as txn_apis
from .apis.fetch import handle_fetch
from .apis.metadata import handle_init_producer_id, handle_metadata
from .apis.offsets import handle_list_offsets, handle_offset_for_leader_epoch
from .apis.produce import handle_produce, name_topics, refuse_produce
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
# Upper bounds are Kafka 4.2's where no replication or transaction is involved: Produce
# v13 and Fetch v13+ name topics by id (KIP-516), Fetch v15-18 add follower state in tags,
# ListOffsets v11 the tiered-storage timestamps (no remote storage: no offset).
# InitProducerId v6 is two-phase commit (KIP-939), which does not exist yet; EndTxn v5 and
# TxnOffsetCommit v5 are KIP-890 part 2 (apis/transactions.py says why they are left out).
# Lower bounds of the admin APIs are the oldest versions kio has classes for; every client
# we test (librdkafka 2.x, kafka-python 3, aiokafka) speaks at least those.
API_VERSIONS: dict[int, Api] = {
    0: Api(3, 13, handle_produce),
    1: Api(4, 18, handle_fetch),
    2: Api(1, 11, handle_list_offsets),
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
    24: Api(0, 5, txn_apis.handle_add_partitions_to_txn),
    25: Api(0, 4, txn_apis.handle_add_offsets_to_txn),
    26: Api(0, 4, txn_apis.handle_end_txn),
    28: Api(0, 4, txn_apis.handle_txn_offset_commit),
    23: Api(2, 4, handle_offset_for_leader_epoch),
    32: Api(1, 4, admin.handle_describe_configs),
    33: Api(0, 2, admin.handle_alter_configs),
    34: Api(1, 2, cluster.handle_alter_replica_log_dirs),
    35: Api(1, 4, admin.handle_describe_log_dirs),
    37: Api(0, 3, admin.handle_create_partitions),
    42: Api(0, 2, group_apis.handle_delete_groups),
    43: Api(0, 2, cluster.handle_elect_leaders),
    44: Api(0, 1, admin.handle_incremental_alter_configs),
    45: Api(0, 1, cluster.handle_alter_partition_reassignments),
    46: Api(0, 0, cluster.handle_list_partition_reassignments),
    47: Api(0, 0, group_apis.handle_offset_delete),
    48: Api(0, 1, quota_apis.handle_describe_client_quotas),
    49: Api(0, 1, quota_apis.handle_alter_client_quotas),
    55: Api(0, 2, cluster.handle_describe_quorum),
    60: Api(0, 2, admin.handle_describe_cluster),
    61: Api(0, 0, txn_apis.handle_describe_producers),
    65: Api(0, 0, txn_apis.handle_describe_transactions),
    66: Api(0, 2, txn_apis.handle_list_transactions),
    68: Api(0, 1, group_apis.handle_consumer_group_heartbeat),
    69: Api(0, 1, group_apis.handle_consumer_group_describe),
    74: Api(0, 1, cluster.handle_list_config_resources),
    75: Api(0, 0, cluster.handle_describe_topic_partitions),
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
            reply = self._api_versions(
                frame, header.correlation_id, version, header.body_offset, header.client_id
            )
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
            if version >= fast.PRODUCE_FIRST_TOPIC_ID:  # topics by id: admission needs names
                name_topics(self.broker, request)
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
            self._count_errors(key, version, ctx, result)
            reply = _reply(key, version, header.correlation_id, result, throttle_ms)
            self._observe(key, started, ctx)
            return reply if throttle_ms <= 0 else self._held(reply, throttle_ms)
        return self._finish(result, key, version, header.correlation_id, started, throttle_ms, ctx)

    def _count_errors(
        self, key: int, version: int, ctx: RequestContext, result: dict[str, Any]
    ) -> None:
        """A response carrying error codes is logged (DEBUG) and counted by API and code
        (`BrokerStats.kafka_request_errors`), once per distinct code; see `error_codes`."""
        codes = error_codes(key, result)
        if codes:
            self._refused(key, version, ctx.client_id, codes)

    def _refused(self, key: int, version: int, client_id: str, codes: set[int]) -> None:
        counts = self.broker.stats.kafka_request_errors
        for code in codes:
            counts[key, code] = counts.get((key, code), 0) + 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s v%d from client %r answered %s",
                messages.api_name(key),
                version,
                client_id,
                ", ".join(sorted(_error_name(code) for code in codes)),
            )

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
        self._count_errors(key, version, ctx, result)
        reply = _reply(key, version, correlation_id, result, throttle_ms)
        self._observe(key, started, ctx)
        if throttle_ms > 0:
            return await self._held(reply, throttle_ms)
        return reply

    def _api_versions(
        self,
        frame: bytes | memoryview,
        correlation_id: int,
        version: int,
        offset: int,
        client_id: str | None,
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
        if error is not ErrorCode.none:
            self._refused(API_VERSIONS_KEY, version, client_id or "", {int(error)})
        data = {
            "error_code": error,
            "api_keys": [
                {"api_key": key, "min_version": a.min_version, "max_version": a.max_version}
                for key, a in sorted(API_VERSIONS.items())
            ],
        }
        return _reply(API_VERSIONS_KEY, version, correlation_id, data, 0)


def error_codes(key: int, result: dict[str, Any]) -> set[int] | None:
    """The non-zero error codes of a response, top level and nested (per topic, partition,
    resource), or None when there are none.

    Produce and Fetch, the hot path, look only where their schemas have codes (top level
    for Fetch; per partition for both), with one truth test per partition: an answer
    without errors costs a loop over its partitions and no allocation. Every other
    answer is walked whole, every `error_code` (and `..._error_code`) at any depth."""
    found: set[int] | None = None
    if key == PRODUCE_KEY:
        for topic in result["responses"]:
            for partition in topic["partition_responses"]:
                if partition["error_code"]:
                    found = found or set()
                    found.add(int(partition["error_code"]))
        return found
    if key == FETCH_KEY:
        if result["error_code"]:
            found = {int(result["error_code"])}
        for topic in result["responses"]:
            for partition in topic["partitions"]:
                if partition["error_code"]:
                    found = found or set()
                    found.add(int(partition["error_code"]))
        return found
    walked: set[int] = set()
    _walk(result, walked)
    return walked or None


def _walk(node: dict[str, Any], found: set[int]) -> None:
    for name, value in node.items():
        if isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, dict):
                    _walk(item, found)
        elif isinstance(value, dict):
            _walk(value, found)
        elif value and name.endswith("error_code"):  # also ShareFetch's acknowledge_...
            found.add(int(value))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


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


_UNTHROTTLED = frozenset({55})
"""APIs whose response has no throttle_time_ms (DescribeQuorum, a KRaft RPC)."""


def _reply(
    key: int, version: int, correlation_id: int, data: dict[str, Any], throttle_ms: int
) -> Reply:
    if key not in _UNTHROTTLED:
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
