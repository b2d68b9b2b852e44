"""The admin API's endpoints for a person at the console: the overview, connections,
queues, the message browser, producing one message, resetting a group's offsets, trimming
a topic and redriving a dead-letter topic.

Theory of operation
-------------------
Each handler runs on the broker's loop and goes through the path a client's request of
the same kind takes, so the rules that hold for clients hold here:

- browsing reads whole batches through `Partition.read` (as Fetch does), at most
  `BROWSE_READ_BYTES_MAX` per request, and decodes them in any codec
  (`weirmq.broker.messages`); the records shown stop at `BROWSE_LIMIT_MAX` and at
  `BROWSE_PAYLOAD_BYTES_MAX` of keys, values and headers (at least one record is shown),
  so one answer stays small whatever the topic holds;
- producing appends one batch with `Partition.publish` at `Durability.FSYNCED`, what a
  Kafka produce with acks=all does (exchanges route it, a delay header delays it) and
  answers once the group commit has fsynced it; a resource the flow controller holds
  publishes back for is a 429 with ``Retry-After``, a disk the broker cannot write a 503;
- an offsets reset commits through `GroupCoordinator.commit_offsets`, OffsetCommit's own
  path, as a commit from outside the group (generation -1), and answers once the offsets
  log is fsynced. Like kafka-consumer-groups.sh it refuses a group with members (409):
  they would commit over it at once;
- a trim is DeleteRecords (`Broker.delete_records`), checkpointed before the answer;
- a redrive copies records with `Partition.publish` (fsynced), then trims the source up to
  what was copied: a crash in between copies some records twice and loses none. It moves
  at most `REDRIVE_RECORDS_MAX` records per call, reading `REDRIVE_READ_BYTES_MAX` at a
  time and yielding to the loop between reads, and says how many remain.

Which of these need the token (`weirmq.admin.token`) is decided here for what only the
body says (a dry run needs none), and by `weirmq.admin.http` for the rest.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from weirmq.broker.core import INTERNAL_TOPICS, Broker, Partition
from weirmq.broker.group_service import CommitRequest
from weirmq.broker.messages import Record, encode_records, key_partition, read_records
from weirmq.broker.partition import Durability, Published
from weirmq.broker.topics import Topic
from weirmq.types import TopicPartition

from . import views
from .errors import (
    GROUP_ID_NOT_FOUND,
    GROUP_NOT_EMPTY,
    INVALID_REQUEST,
    OFFSET_OUT_OF_RANGE,
    THROTTLED,
    UNKNOWN_TOPIC_OR_PARTITION,
    ApiError,
)
from .history import History, Totals
from .requests import (
    BROKER,
    INT64_MAX,
    check_unicode,
    json_object,
    optional_bool,
    optional_int,
    partition_index,
    query_int,
    require_token,
    string,
    topic_of,
)

HISTORY = web.AppKey("history", History)

BROWSE_LIMIT_DEFAULT = 20
BROWSE_LIMIT_MAX = 100
"""Records one browse answers at most."""
BROWSE_READ_BYTES_MAX = 1 << 20
"""Bytes of batches one browse reads (the first batch whole even when larger, as Fetch)."""
BROWSE_PAYLOAD_BYTES_MAX = 1 << 20
"""Bytes of keys, values and header values one browse answers (at least one record):
each is sent twice (base64 and text), so the answer stays within a few MiB."""
PRODUCE_HEADERS_MAX = 100
"""Headers of one produced message at most."""
REDRIVE_RECORDS_MAX = 100_000
"""Records one redrive moves at most; the answer says how many remain."""
REDRIVE_READ_BYTES_MAX = 1 << 20
"""Bytes of the source read at a time; the loop serves others between two reads."""
REDRIVE_BATCH_BYTES_MAX = 512 * 1024
"""A copy batch holds about this many bytes of records at most (under the default
max.message.bytes of 1 MiB)."""
RETRY_AFTER_S = 1
"""What a throttled publish is told to wait (``Retry-After``)."""
INT32_MAX = 2**31 - 1
RECORD_OVERHEAD_BYTES = 24
"""A record's varints and attributes, roughly, for sizing copy batches."""

_PRODUCE_FIELDS = frozenset({"value", "key", "partition", "headers"})
_RESET_FIELDS = frozenset({"to", "value", "topic", "partitions", "dry_run"})
_RESET_TARGETS = ("earliest", "latest", "timestamp", "offset", "shift")
_NEEDS_VALUE = frozenset({"timestamp", "offset", "shift"})
_TRIM_FIELDS = frozenset({"partition", "before_offset"})
_REDRIVE_FIELDS = frozenset({"to", "dry_run"})
_round_robin = itertools.count()


# --- overview, connections, queues ----------------------------------------------------------


async def get_overview(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    return web.json_response(views.overview(broker, request.app[HISTORY]))


async def get_connections(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    return web.json_response({"connections": views.connections_document(broker)})


async def list_queues(request: web.Request) -> web.Response:
    return web.json_response({"queues": views.queue_rows(request.app[BROKER])})


def read_totals(broker: Broker) -> tuple[int, Totals]:
    """The time and the broker's counters: what a `History` is fed."""
    return broker.clock(), views.totals(broker)


# --- browsing and producing -----------------------------------------------------------------


async def browse_messages(request: web.Request) -> web.Response:
    broker, topic = request.app[BROKER], topic_of(request)
    index = partition_index(topic, query_int(request, "partition", maximum=INT32_MAX) or 0)
    limit = query_int(request, "limit", minimum=1, maximum=BROWSE_LIMIT_MAX)
    limit = BROWSE_LIMIT_DEFAULT if limit is None else limit
    offset = query_int(request, "offset")
    timestamp = query_int(request, "timestamp")
    if offset is not None and timestamp is not None:
        raise ApiError(400, INVALID_REQUEST, "give 'offset' or 'timestamp', not both")
    partition = _partition(broker, topic, index)
    start, end = partition.log_start_offset, partition.high_watermark
    if timestamp is not None:
        found = partition.log.offset_for_timestamp(timestamp)
        first = end if found is None else found.offset
    elif offset is None:
        first = max(start, end - limit)
    else:
        first = min(max(offset, start), end)
    records, next_offset = read_records(partition, first, limit, BROWSE_READ_BYTES_MAX)
    shown, next_offset = _within_budget(records, next_offset)
    return web.json_response(
        {
            "topic": topic.name,
            "partition": index,
            "log_start_offset": start,
            "log_end_offset": end,
            "next_offset": next_offset,
            "messages": [views.message_document(o, r) for o, r in shown],
        }
    )


def _within_budget(
    records: list[tuple[int, Record]], next_offset: int
) -> tuple[list[tuple[int, Record]], int]:
    """The first records whose payloads fit `BROWSE_PAYLOAD_BYTES_MAX` (at least one), and
    the offset to read next."""
    used = 0
    for index, (offset, record) in enumerate(records):
        used += _record_bytes(record)
        if used > BROWSE_PAYLOAD_BYTES_MAX and index > 0:
            return records[:index], offset
    return records, next_offset


def _record_bytes(record: Record) -> int:
    size = len(record.key or b"") + len(record.value or b"")
    return size + sum(len(name) + len(value or b"") for name, value in record.headers)


async def produce_message(request: web.Request) -> web.Response:
    broker, topic = request.app[BROKER], topic_of(request)
    body = await json_object(request, _PRODUCE_FIELDS)
    value = string(body, "value").encode()
    key_text = body.get("key")
    if key_text is not None and not isinstance(key_text, str):
        raise ApiError(400, INVALID_REQUEST, "'key' must be a string or null")
    key = None if key_text is None else _text(key_text).encode()
    headers = _headers(body)
    chosen = optional_int(body, "partition", minimum=0, maximum=INT32_MAX)
    _check_writable(topic)
    if chosen is not None:
        index = partition_index(topic, chosen)
    elif key is not None:
        index = key_partition(key, topic.partitions)
    else:
        index = next(_round_robin) % topic.partitions
    partition = _partition(broker, topic, index)
    _check_flow(broker, [topic.name])
    record = Record(value, key, headers, broker.clock())
    published = partition.publish(encode_records([record]), Durability.FSYNCED)
    await _durable(partition, published)
    offset = published.base_offset if published.base_offset >= 0 else None
    return web.json_response(
        {"topic": topic.name, "partition": index, "offset": offset}, status=201
    )


def _headers(body: dict[str, object]) -> tuple[tuple[str, bytes | None], ...]:
    value = body.get("headers", {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ApiError(400, INVALID_REQUEST, "'headers' must be an object of string values")
    if len(value) > PRODUCE_HEADERS_MAX:
        raise ApiError(
            400, INVALID_REQUEST, f"'headers' holds more than {PRODUCE_HEADERS_MAX} headers"
        )
    return tuple((_text(name), _text(text).encode()) for name, text in value.items())


def _text(text: str) -> str:
    check_unicode(text)
    return text


def _check_writable(topic: Topic) -> None:
    if topic.name in INTERNAL_TOPICS:  # as Produce answers: the broker writes these itself
        raise ApiError(
            400, "INVALID_TOPIC_EXCEPTION", f"{topic.name!r} is internal: only the broker writes it"
        )


def _check_flow(broker: Broker, topics: Sequence[str]) -> None:
    """Refuse a publish the broker would not take from a client now: a disk it cannot
    write (503), or a resource the flow controller holds publishes back for (429)."""
    refusal = broker.resources.publish_refusal
    if refusal is not None:
        raise ApiError(503, THROTTLED, f"the broker cannot store messages now: {refusal}")
    names = ["memory", "disk", *(f"backlog:{name}" for name in topics)]
    blocked = sorted(broker.flow.blocked(names) - broker.flow.not_holding)
    if blocked:
        raise ApiError(
            429,
            THROTTLED,
            f"the broker is holding publishes back ({', '.join(blocked)} at its limit); "
            "retry later",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )


async def _durable(partition: Partition, published: Published) -> None:
    """Return once what `published` wrote is fsynced (at once when it needs no fsync)."""
    if published.durable_offset is None:
        return
    target = published.durable_partition or partition
    try:
        await target.durable(published.durable_offset)
    except OSError as exc:  # StorageError carries its Kafka code and is answered as such
        raise ApiError(503, THROTTLED, f"the write was not made durable: {exc}") from None


def _partition(broker: Broker, topic: Topic, index: int) -> Partition:
    partition = broker.partition(topic.name, index)
    if partition is None:  # the registry knows it, the storage layer has no log for it
        raise ApiError(404, UNKNOWN_TOPIC_OR_PARTITION, f"{topic.name}-{index} has no log open")
    return partition


# --- offsets reset --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Reset:
    to: str
    value: int | None
    topic: str | None
    partitions: frozenset[int] | None
    dry_run: bool


async def reset_offsets(request: web.Request) -> web.Response:
    broker, group_id = request.app[BROKER], request.match_info["group"]
    check_unicode(group_id)
    wanted = _reset_request(await json_object(request, _RESET_FIELDS))
    if not wanted.dry_run:
        require_token(request, "resetting a group's offsets")
    view = broker.group_view(group_id)
    if view is None and wanted.topic is None:
        raise ApiError(404, GROUP_ID_NOT_FOUND, f"unknown group {group_id!r}")
    if view is not None and view.kind == "share":
        raise ApiError(
            400, INVALID_REQUEST, f"group {group_id!r} is a share group: it has no offsets"
        )
    if view is not None and view.members:
        raise ApiError(
            409,
            GROUP_NOT_EMPTY,
            f"group {group_id!r} has {len(view.members)} active member(s); stop its "
            "consumers first (they would commit over the new offsets)",
        )
    targets = _reset_targets(broker, group_id, wanted)
    if not wanted.dry_run and targets:
        await _commit(broker, group_id, [(t, p, new) for t, p, _current, new in targets])
    return web.json_response(
        {
            "group": group_id,
            "dry_run": wanted.dry_run,
            "partitions": [
                {"topic": t, "partition": p, "current": current, "new": new}
                for t, p, current, new in targets
            ],
        }
    )


def _reset_request(body: dict[str, object]) -> _Reset:
    to = body.get("to")
    if to not in _RESET_TARGETS:
        raise ApiError(
            400, INVALID_REQUEST, f"'to' must be one of {', '.join(map(repr, _RESET_TARGETS))}"
        )
    assert isinstance(to, str)
    value = optional_int(body, "value", minimum=-INT64_MAX, maximum=INT64_MAX)
    if to in _NEEDS_VALUE and value is None:
        raise ApiError(400, INVALID_REQUEST, f"'to': {to!r} needs an integer 'value'")
    if to in ("timestamp", "offset") and value is not None and value < 0:
        raise ApiError(400, INVALID_REQUEST, f"'value' of {to!r} must be at least 0")
    topic = string(body, "topic") if "topic" in body else None
    partitions = body.get("partitions")
    if "partitions" in body and (
        not isinstance(partitions, list)
        or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= INT32_MAX
            for p in partitions
        )
    ):
        raise ApiError(400, INVALID_REQUEST, "'partitions' must be an array of integers >= 0")
    return _Reset(
        to,
        value,
        topic,
        frozenset(partitions) if isinstance(partitions, list) else None,
        optional_bool(body, "dry_run"),
    )


def _reset_targets(
    broker: Broker, group_id: str, wanted: _Reset
) -> list[tuple[str, int, int | None, int]]:
    """(topic, partition, committed offset or None, new offset), sorted: the group's
    committed partitions that the filters keep, or, when a topic is named and the group
    has none of it, every partition of that topic (that the filters keep)."""
    committed = broker.groups.committed(group_id)
    chosen = [tp for tp in committed if wanted.topic is None or tp.topic == wanted.topic]
    if wanted.topic is not None:
        topic = broker.topics.get(wanted.topic)
        if topic is None:
            raise ApiError(404, UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {wanted.topic!r}")
        for index in sorted(wanted.partitions or ()):
            partition_index(topic, index)
        if not chosen:
            chosen = [TopicPartition(topic.name, p) for p in range(topic.partitions)]
    if wanted.partitions is not None:
        chosen = [tp for tp in chosen if tp.partition in wanted.partitions]
    found = []
    for tp in sorted(chosen):
        partition = broker.partition(tp.topic, tp.partition)
        if partition is None:
            continue  # its topic is gone: nothing to reset to
        current = committed.get(tp)
        found.append((tp.topic, tp.partition, current, _new_offset(partition, current, wanted)))
    return found


def _new_offset(partition: Partition, current: int | None, wanted: _Reset) -> int:
    start, end = partition.log_start_offset, partition.high_watermark
    value = wanted.value or 0
    if wanted.to == "earliest":
        new = start
    elif wanted.to == "latest":
        new = end
    elif wanted.to == "offset":
        new = value
    elif wanted.to == "timestamp":
        found = partition.log.offset_for_timestamp(value)
        new = end if found is None else found.offset
    else:  # shift: from the committed offset, or the log end (auto.offset.reset=latest)
        new = (end if current is None else current) + value
    return min(max(new, start), end)


async def _commit(broker: Broker, group_id: str, offsets: list[tuple[str, int, int]]) -> None:
    """Commit as OffsetCommit does, from outside the group, and wait for the fsync."""
    commit = CommitRequest(group_id, "", -1, None, [(t, p, o, -1, None) for t, p, o in offsets])
    end_before = broker.offsets_log.end_offset()
    codes = broker.groups.commit_offsets(commit, broker.clock())
    failed = [(offsets[i], code) for i, code in enumerate(codes) if code.value != 0]
    if failed:
        (topic, index, _offset), code = failed[0]
        raise ApiError(
            409, code.name.upper(), f"the commit of {topic}-{index} was refused: {code.name}"
        )
    end_after = broker.offsets_log.end_offset()
    if end_after != end_before:
        await broker.offsets_log.durable(end_after)


# --- trim and redrive -----------------------------------------------------------------------


async def trim(request: web.Request) -> web.Response:
    require_token(request, "trimming a topic")
    broker, topic = request.app[BROKER], topic_of(request)
    body = await json_object(request, _TRIM_FIELDS)
    before = optional_int(body, "before_offset", minimum=-1, maximum=INT64_MAX)
    if before is None:
        raise ApiError(400, INVALID_REQUEST, "'before_offset' is required (-1: the log end)")
    chosen = optional_int(body, "partition", minimum=0, maximum=INT32_MAX)
    indexes = range(topic.partitions) if chosen is None else [partition_index(topic, chosen)]
    _check_writable(topic)
    partitions = [_partition(broker, topic, index) for index in indexes]
    for partition in partitions:
        if before > partition.high_watermark:
            raise ApiError(
                400,
                OFFSET_OUT_OF_RANGE,
                f"{partition.tp.topic}-{partition.tp.partition} ends at offset "
                f"{partition.high_watermark}; cannot delete records before {before}",
            )
    result = [
        {"partition": p.tp.partition, "log_start_offset": _trim_one(broker, p, before)}
        for p in partitions
    ]
    return web.json_response({"topic": topic.name, "partitions": result})


def _trim_one(broker: Broker, partition: Partition, before: int) -> int:
    """DeleteRecords of one partition; a log start already past `before` stays."""
    if 0 <= before <= partition.log_start_offset:
        return partition.log_start_offset
    return broker.delete_records(partition.tp.topic, partition.tp.partition, before)


async def redrive(request: web.Request) -> web.Response:
    require_token(request, "redriving a topic")
    broker, source = request.app[BROKER], topic_of(request)
    body = await json_object(request, _REDRIVE_FIELDS)
    target_name = string(body, "to")
    dry_run = optional_bool(body, "dry_run")
    target = broker.topics.get(target_name)
    if target is None:
        raise ApiError(404, UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {target_name!r}")
    if target.name == source.name:
        raise ApiError(400, INVALID_REQUEST, "'to' must be another topic than the source")
    _check_writable(source)
    _check_writable(target)
    sources = [_partition(broker, source, index) for index in range(source.partitions)]
    waiting = sum(p.high_watermark - p.log_start_offset for p in sources)
    if dry_run:
        return web.json_response(
            {"moved": min(waiting, REDRIVE_RECORDS_MAX), "from": source.name, "to": target.name,
             "remaining": max(0, waiting - REDRIVE_RECORDS_MAX), "dry_run": True}
        )  # fmt: skip
    moved = 0
    for partition in sources:
        if moved >= REDRIVE_RECORDS_MAX:
            break
        moved += await _redrive_partition(broker, partition, target, REDRIVE_RECORDS_MAX - moved)
    remaining = sum(p.high_watermark - p.log_start_offset for p in sources)
    return web.json_response(
        {"moved": moved, "from": source.name, "to": target.name, "remaining": remaining,
         "dry_run": False}
    )  # fmt: skip


async def _redrive_partition(broker: Broker, source: Partition, target: Topic, budget: int) -> int:
    """Copy up to `budget` records of `source` into `target` (fsynced), then trim the
    source past them; returns how many were moved."""
    offset, end = source.log_start_offset, source.high_watermark
    moved = 0
    pending: list[tuple[Partition, Published]] = []
    while offset < end and moved < budget:
        _check_flow(broker, [target.name])
        records, offset = read_records(
            source, offset, min(budget - moved, REDRIVE_RECORDS_MAX), REDRIVE_READ_BYTES_MAX
        )
        if not records:
            break
        for index, batch in _copies(source, target, records):
            partition = _partition(broker, target, index)
            published = partition.publish(encode_records(batch), Durability.FSYNCED)
            pending.append((partition, published))
        moved += len(records)
        await asyncio.sleep(0)  # one read at a time: others are served in between
    for partition, published in pending:
        await _durable(partition, published)
    if moved:
        broker.delete_records(source.tp.topic, source.tp.partition, offset)
    return moved


def _copies(
    source: Partition, target: Topic, records: list[tuple[int, Record]]
) -> list[tuple[int, list[Record]]]:
    """The records grouped into copy batches per target partition: a keyed record where
    Kafka's partitioner puts it, others in the source's partition number (modulo the
    target's count); each batch at most ~`REDRIVE_BATCH_BYTES_MAX`."""
    by_partition: dict[int, list[list[Record]]] = {}
    sizes: dict[int, int] = {}
    for _offset, record in records:
        if record.key is not None:
            index = key_partition(record.key, target.partitions)
        else:
            index = source.tp.partition % target.partitions
        size = _record_bytes(record) + RECORD_OVERHEAD_BYTES
        batches = by_partition.setdefault(index, [[]])
        if batches[-1] and sizes.get(index, 0) + size > REDRIVE_BATCH_BYTES_MAX:
            batches.append([])
            sizes[index] = 0
        batches[-1].append(record)
        sizes[index] = sizes.get(index, 0) + size
    return [(index, batch) for index, batches in by_partition.items() for batch in batches]
