"""Fetch (API key 1): read partitions from an offset, long-polling for new data.

A fetch reads every requested partition in order, within two budgets: `max_bytes` for the
whole response and `partition_max_bytes` per partition. Batches are never cut; the only
one allowed past a budget is the first batch of the first partition that has data (KIP-74),
so a consumer can always progress past a batch larger than its limits. A partition whose
next batch does not fit the remaining budget returns nothing this time.

If fewer than `min_bytes` were found and `max_wait_ms` allows, the fetch waits on every
partition it reads (`Broker.wait_for_data`) and reads again when one of them gets an
append, until enough data, the deadline, or broker shutdown. The deadline is on the
broker's clock and fires through its `Timers`, so a test steps a long poll. An error in
any partition answers at once: waiting would only delay the client's recovery.

Fetch sessions (KIP-227) are declined the standard way: a full fetch is answered with
session id 0, which tells the client that no session was created, so it keeps sending full
fetches. A full fetch naming a session (epoch 0 or -1 with a session id) is served as a
full fetch, as Kafka does after closing that session; an incremental fetch (epoch > 0) gets
FETCH_SESSION_ID_NOT_FOUND, and the client starts over with a full fetch.

Offsets outside [log start, log end] get OFFSET_OUT_OF_RANGE together with the log start
and high watermark, which the client's auto.offset.reset needs (the high watermark is
the partition's: see broker/partition.py). Every answer carries the partition's last
stable offset (below the oldest open transaction). A read_committed fetch (isolation
level 1) reads only below it, and gets the aborted transactions its batches overlap
(`Partition.read_committed`), from which the client drops aborted records; a
read_uncommitted fetch reads to the high watermark and gets none.

From v13 on (KIP-516) topics are named by id, both ways: each id is looked up once, at
the start, and a partition of an id no topic has is answered UNKNOWN_TOPIC_ID. What v15
to v18 add is for followers (their replica state, directory id and high watermark, in
tagged fields a consumer leaves out) and leader discovery (KIP-951), which a one-broker
cluster never needs: the leader never moves.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import Any

from ....broker.core import Broker
from ....errors import ErrorCode, KafkaError
from ....records.batch import count_records
from ....storage.errors import OffsetOutOfRangeError
from ....types import RequestContext, TopicPartition
from ..requests import FetchPartition, FetchRequest
from ..wire.fast import FETCH_FIRST_TOPIC_ID

FETCH_WAIT_MAX_MS = 30_000
"""Cap on a client's max_wait_ms, so a long poll never outlives typical request timeouts."""
_NO_SESSION = 0
_INITIAL_EPOCH = 0  # a full fetch that asks for a new session (closing any it names)
_FINAL_EPOCH = -1  # a full fetch without a session (closing any it names)


READ_COMMITTED = 1
"""Fetch's isolation level for read_committed (0 is read_uncommitted)."""


class _Partition:
    __slots__ = (
        "aborted",
        "error",
        "high_watermark",
        "index",
        "last_stable_offset",
        "log_start_offset",
        "records",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = ErrorCode.none
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.records: bytes | memoryview = b""
        self.aborted: list[dict[str, int]] | None = None


def handle_fetch(
    broker: Broker, request: FetchRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    session_epoch = int(request.session_epoch)
    if session_epoch not in (_INITIAL_EPOCH, _FINAL_EPOCH):
        # An incremental fetch: whatever its session id, we hold no such session.
        return _top_level_error(ErrorCode.fetch_session_id_not_found)
    if version >= FETCH_FIRST_TOPIC_ID:
        _name_topics(broker, request)
    result, found_bytes, failed = _read_all(broker, request)
    max_wait_ms = min(int(request.max_wait.total_seconds() * 1000), FETCH_WAIT_MAX_MS)
    if failed or found_bytes >= int(request.min_bytes) or max_wait_ms <= 0 or broker.closing:
        return _response(broker, result)
    return _long_poll(broker, request, broker.clock() + max_wait_ms)


def _name_topics(broker: Broker, request: FetchRequest) -> None:
    """Each topic's name from its id; an unknown id keeps the empty name (`_read_one`)."""
    for topic in request.topics:
        found = broker.topics.by_id(topic.topic_id) if topic.topic_id is not None else None
        topic.topic = "" if found is None else found.name


async def _long_poll(broker: Broker, request: FetchRequest, deadline_ms: int) -> dict[str, Any]:
    tps = [
        TopicPartition(t.topic, int(p.partition))
        for t in request.topics
        if t.topic
        for p in t.partitions
    ]
    while True:
        waiting = broker.wait_for_data(tps, deadline_ms)
        if waiting is not None:
            await waiting
        result, found_bytes, failed = _read_all(broker, request)
        done = failed or found_bytes >= int(request.min_bytes)
        if done or waiting is None or broker.clock() >= deadline_ms or broker.closing:
            return _response(broker, result)


_Read = list[tuple[str, uuid.UUID | None, list["_Partition"]]]
"""Per topic in request order, its name, its id (v13+) and its partitions' answers."""


def _read_all(broker: Broker, request: FetchRequest) -> tuple[_Read, int, bool]:
    budget = int(request.max_bytes)
    committed = int(request.isolation_level) == READ_COMMITTED
    found = 0
    failed = False
    result = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            partition = _Partition(int(wanted.partition))
            limit = min(int(wanted.partition_max_bytes), budget - found)
            if topic.topic:
                _read_one(
                    broker,
                    topic.topic,
                    wanted,
                    partition,
                    limit,
                    first=found == 0,
                    committed=committed,
                )
            else:  # v13+, an id no topic has
                partition.error = ErrorCode.unknown_topic_id
            found += len(partition.records)
            failed = failed or partition.error is not ErrorCode.none
            partitions.append(partition)
        result.append((topic.topic, topic.topic_id, partitions))
    return result, found, failed


def _read_one(
    broker: Broker,
    topic: str,
    wanted: FetchPartition,
    partition: _Partition,
    limit: int,
    *,
    first: bool,
    committed: bool,
) -> None:
    found = broker.partition(topic, partition.index)
    if found is None:
        partition.error = ErrorCode.unknown_topic_or_partition
        return
    current_epoch = int(wanted.current_leader_epoch)
    if current_epoch > found.leader_epoch:
        partition.error = ErrorCode.unknown_leader_epoch
        return
    start, end = found.log_start_offset, found.high_watermark
    partition.high_watermark, partition.log_start_offset = end, start
    partition.last_stable_offset = found.last_stable_offset
    offset = int(wanted.fetch_offset)
    if not start <= offset <= end:  # checked before the byte budget, as Kafka does
        partition.error = ErrorCode.offset_out_of_range
        return
    if limit <= 0 and not first:
        return
    try:
        if committed:
            read, aborted = found.read_committed(offset, max(limit, 1))
            if read is None:
                return  # nothing stable yet past `offset`
            partition.aborted = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted
            ]
        else:
            read = found.read(offset, max(limit, 1))
    except OffsetOutOfRangeError:
        partition.error = ErrorCode.offset_out_of_range
        return
    except KafkaError as exc:
        partition.error = exc.code
        return
    records = read.records
    if len(records) > limit and not first:
        return  # its first batch does not fit what is left; it comes in a later fetch
    partition.records = records  # written to the socket as is, never copied
    partition.high_watermark = found.high_watermark
    partition.last_stable_offset = found.last_stable_offset
    partition.log_start_offset = read.log_start_offset


def _top_level_error(code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "session_id": 0, "responses": []}


def _count_out(broker: Broker, result: _Read) -> None:
    for topic, _topic_id, partitions in result:
        sent = [p.records for p in partitions if p.records]
        if sent:
            stats = broker.stats.topic(topic)
            stats.bytes_out += sum(len(r) for r in sent)
            stats.records_out += sum(count_records(r) for r in sent)


def _response(broker: Broker, result: _Read) -> dict[str, Any]:
    _count_out(broker, result)
    return {
        "error_code": ErrorCode.none,
        "session_id": _NO_SESSION,
        "responses": [
            {
                "topic": topic,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": p.index,
                        "error_code": p.error,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": p.aborted,
                        "preferred_read_replica": -1,
                        "records": p.records,
                    }
                    for p in partitions
                ],
            }
            for topic, topic_id, partitions in result
        ],
    }
