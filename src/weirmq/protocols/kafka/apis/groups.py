"""The group APIs: Kafka requests in, `groups.GroupCoordinator` calls, responses out.

This broker is the coordinator of every group (FindCoordinator names it for any key).
The coordinator is sans-I/O; this module gives it what it needs from the broker:

- a writer for its log, the internal topic `__consumer_offsets` (one partition, kept
  compact by the coordinator's snapshots, see `OffsetsLog`);
- answers that wait: JoinGroup and SyncGroup hand the coordinator a callback that
  resolves an asyncio future, which the dispatcher awaits;
- a timer (`GroupTimer`): one loop callback at the coordinator's next deadline
  (rebalance deadline, session expiry), moved whenever a request changes it;
- OffsetCommit answers only once its records are fsynced (group commit, like acks=all),
  so an acknowledged commit survives a crash of the machine, not only of the process.

Per-request errors from the coordinator arrive as `GroupError`, mapped to the response's
error fields; anything else is a bug and goes up to the dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..groups import consumer as kip848
from ..groups.classic import JoinRequest, JoinResult, SyncResult
from ..groups.coordinator import CommitRequest
from ..groups.errors import GroupError
from ..groups.views import PartitionLag
from ..storage.errors import StorageError
from ..wire.errors import ErrorCode, KafkaError
from ..wire.records import Record, decode_records, encode_batch
from .scan import scan_batches

if TYPE_CHECKING:
    from .core import Broker

log = logging.getLogger(__name__)

KEY_TYPE_GROUP = 0
JOIN_REQUIRES_MEMBER_ID_VERSION = 4
"""JoinGroup v4+ (KIP-394): a new dynamic member first gets MEMBER_ID_REQUIRED."""

T = TypeVar("T")


def _ms(value: Any) -> int:
    """A kio timedelta field (or a plain int) in milliseconds."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


class GroupTimer:
    """Calls the coordinator's `tick` at its next deadline; see the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._handle: asyncio.TimerHandle | None = None
        self._when_ms: int | None = None

    def poke(self) -> None:
        """Reschedule after a change; cheap when the next deadline did not move earlier."""
        deadline = self._broker.groups.next_deadline_ms()
        if deadline is None:
            self.cancel()
            return
        if self._handle is not None and self._when_ms is not None and self._when_ms <= deadline:
            return  # fires earlier than needed at worst; _fire reschedules
        self.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # tests that drive the coordinator without a loop
            return
        delay_s = max(deadline - self._broker.clock(), 0) / 1000
        self._handle = loop.call_later(delay_s, self._fire)
        self._when_ms = deadline

    def _fire(self) -> None:
        self._handle = self._when_ms = None
        try:
            self._broker.groups.tick(self._broker.clock())
        except Exception:
            log.exception("group coordinator tick failed")
        self.poke()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._when_ms = None


def _waiting(
    broker: Broker,
    start: Callable[[Callable[[T], None]], None],
    answer: Callable[[T], dict[str, Any]],
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Run `start(respond)`; answer at once if it responded, else when it does."""
    results: list[T] = []
    future: asyncio.Future[T] | None = None

    def respond(result: T) -> None:
        if future is None:
            results.append(result)
        elif not future.done():
            future.set_result(result)

    try:
        start(respond)
    finally:
        broker.group_timer.poke()
    if results:
        return answer(results[0])
    future = asyncio.get_running_loop().create_future()

    async def wait() -> dict[str, Any]:
        assert future is not None
        return answer(await future)

    return wait()


# --- FindCoordinator -----------------------------------------------------------------------


def handle_find_coordinator(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    host, port = broker.advertised
    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))
    if key_type == KEY_TYPE_GROUP:
        code, message, node = ErrorCode.none, None, broker.node_id
    else:  # transactions (1) and share groups (2) are not coordinated here yet
        code, message, node = ErrorCode.invalid_request, f"key type {key_type} is not supported", -1
    if version < 4:
        return {
            "throttle_time": 0,
            "error_code": code,
            "error_message": message,
            "node_id": node,
            "host": host if node >= 0 else "",
            "port": port if node >= 0 else -1,
        }
    return {
        "throttle_time": 0,
        "coordinators": [
            {
                "key": key,
                "node_id": node,
                "host": host if node >= 0 else "",
                "port": port if node >= 0 else -1,
                "error_code": code,
                "error_message": message,
            }
            for key in request.coordinator_keys
        ],
    }


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------


def handle_join_group(
    broker: Broker, request: Any, version: int
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    client_id, client_host = broker.current_client
    session_ms = _ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    join = JoinRequest(
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=client_id,
        client_host=client_host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(rebalance) if rebalance is not None else session_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=version >= JOIN_REQUIRES_MEMBER_ID_VERSION,
    )

    def start(respond: Callable[[JoinResult], None]) -> None:
        try:
            broker.groups.join_group(request.group_id, join, broker.clock(), respond)
        except GroupError as exc:
            respond(JoinResult(exc.code, member_id=request.member_id))

    return _waiting(broker, start, lambda result: _join_response(result, version))


NULLABLE_PROTOCOL_VERSION = 7
"""JoinGroup v7+ (KIP-559) may answer a null protocol; older versions need a string."""


def _join_response(result: JoinResult, version: int) -> dict[str, Any]:
    protocol = result.protocol
    if protocol is None and version < NULLABLE_PROTOCOL_VERSION:
        protocol = ""
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol,
        "leader": result.leader,
        "skip_assignment": False,
        "member_id": result.member_id,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
            for member_id, instance_id, metadata in result.members
        ],
    }


def handle_sync_group(
    broker: Broker, request: Any, version: int
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    def start(respond: Callable[[SyncResult], None]) -> None:
        try:
            broker.groups.sync_group(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                int(request.generation_id),
                getattr(request, "protocol_type", None),
                getattr(request, "protocol_name", None),
                [(a.member_id, bytes(a.assignment)) for a in request.assignments],
                broker.clock(),
                respond,
            )
        except GroupError as exc:
            respond(SyncResult(exc.code))

    return _waiting(broker, start, _sync_response)


def _sync_response(result: SyncResult) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol,
        "assignment": result.assignment,
    }


def handle_heartbeat(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    try:
        code = broker.groups.heartbeat(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            int(request.generation_id),
            broker.clock(),
        )
    except GroupError as exc:
        code = exc.code
    broker.group_timer.poke()
    return {"throttle_time": 0, "error_code": code}


def handle_leave_group(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    if version < 3:
        members = [(request.member_id, None, None)]
    else:
        members = [(m.member_id, m.group_instance_id, m.reason) for m in request.members]
    for member_id, _instance, reason in members:
        log.info("group %r: member %r leaves (%s)", request.group_id, member_id, reason or "-")
    try:
        codes = broker.groups.leave_group(
            request.group_id, [(m, i) for m, i, _ in members], broker.clock()
        )
        top = ErrorCode.none
    except GroupError as exc:
        codes, top = [exc.code] * len(members), exc.code
    broker.group_timer.poke()
    if version < 3:
        top = codes[0]
    return {
        "throttle_time": 0,
        "error_code": top,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": code}
            for (m, i, _), code in zip(members, codes, strict=True)
        ],
    }


# --- offsets -------------------------------------------------------------------------------


def handle_offset_commit(
    broker: Broker, request: Any, version: int
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    offsets = [
        (
            topic.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    generation = getattr(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = request.generation_id
    commit = CommitRequest(
        request.group_id,
        request.member_id,
        int(generation),
        getattr(request, "group_instance_id", None),
        offsets,
    )
    end_before = broker.offsets_log.end_offset()
    try:
        codes = broker.groups.commit_offsets(commit, broker.clock())
    except GroupError as exc:
        codes = [exc.code] * len(offsets)
    except KafkaError as exc:  # the offsets log refused the append (disk full, offline)
        log.error("group %r: offsets not committed: %s", request.group_id, exc)
        codes = [ErrorCode.coordinator_not_available] * len(offsets)
    response = _commit_response(request, codes)
    end_after = broker.offsets_log.end_offset()
    if end_after == end_before:
        return response
    return _after_durable(broker, end_after, response)


async def _after_durable(broker: Broker, end: int, response: dict[str, Any]) -> dict[str, Any]:
    try:
        await broker.offsets_log.durable(end)
    except KafkaError as exc:
        log.error("offsets log fsync failed: %s", exc)
        for topic in response["topics"]:
            for partition in topic["partitions"]:
                partition["error_code"] = ErrorCode.coordinator_not_available
    return response


def _commit_response(request: Any, codes: list[ErrorCode]) -> dict[str, Any]:
    it = iter(codes)
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": next(it)}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


def handle_offset_fetch(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    if version < 8:
        wanted = request.topics
        topics, code = _fetch_group(broker, request.group_id, wanted, None)
        return {"throttle_time": 0, "topics": topics, "error_code": code}
    groups = []
    for group in request.groups:
        member_id = getattr(group, "member_id", None)
        member = (member_id, int(group.member_epoch)) if member_id else None
        topics, code = _fetch_group(broker, group.group_id, group.topics, member)
        groups.append({"group_id": group.group_id, "topics": topics, "error_code": code})
    return {"throttle_time": 0, "groups": groups}


def _fetch_group(
    broker: Broker, group_id: str, wanted: Any, member: tuple[str, int] | None
) -> tuple[list[dict[str, Any]], ErrorCode]:
    asked = None if wanted is None else [(t.name, list(t.partition_indexes)) for t in wanted]
    try:
        found = broker.groups.fetch_offsets(group_id, asked, member=member)
    except GroupError as exc:
        return [], exc.code
    topics = [
        {
            "name": topic,
            "partitions": [
                {
                    "partition_index": partition,
                    "committed_offset": value.offset if value else -1,
                    "committed_leader_epoch": value.leader_epoch if value else -1,
                    "metadata": value.metadata if value else "",
                    "error_code": ErrorCode.none,
                }
                for partition, value in partitions
            ],
        }
        for topic, partitions in found
    ]
    return topics, ErrorCode.none


def handle_offset_delete(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    asked = [(t.name, [int(p.partition_index) for p in t.partitions]) for t in request.topics]
    try:
        result = broker.groups.delete_offsets(request.group_id, asked)
    except GroupError as exc:
        return {"error_code": exc.code, "throttle_time": 0, "topics": []}
    except KafkaError as exc:
        log.error("group %r: offsets not deleted: %s", request.group_id, exc)
        return {"error_code": ErrorCode.coordinator_not_available, "throttle_time": 0, "topics": []}
    return {
        "error_code": ErrorCode.none,
        "throttle_time": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "error_code": code}
                    for partition, code in partitions
                ],
            }
            for topic, partitions in result
        ],
    }


# --- listing, describing, deleting ---------------------------------------------------------


def handle_describe_groups(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    described = []
    for group_id in request.groups:
        try:
            entry = broker.groups.describe_group(group_id)
        except GroupError as exc:
            entry = _dead_group(group_id, exc.code)
        described.append(entry)
    return {"throttle_time": 0, "groups": described}


def _dead_group(group_id: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": "Dead",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": -(2**31),
    }


def handle_list_groups(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    try:
        listed = broker.groups.list_groups()
    except GroupError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "groups": []}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": [
            {
                "group_id": group_id,
                "protocol_type": protocol_type,
                "group_state": state,
                "group_type": kind,
            }
            for group_id, protocol_type, state, kind in listed
            if (not states or state.lower() in states) and (not types or kind in types)
        ],
    }


def handle_delete_groups(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    results = []
    for group_id in request.groups_names:
        try:
            broker.groups.delete_group(group_id, broker.clock())
            code = ErrorCode.none
        except GroupError as exc:
            code = exc.code
        except KafkaError as exc:
            log.error("group %r not deleted: %s", group_id, exc)
            code = ErrorCode.coordinator_not_available
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}


# --- KIP-848 -------------------------------------------------------------------------------


def handle_consumer_group_heartbeat(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    client_id, client_host = broker.current_client
    owned = request.topic_partitions
    heartbeat = kip848.HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=(
            None
            if request.subscribed_topic_names is None
            else tuple(request.subscribed_topic_names)
        ),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        topic_partitions=(
            None
            if owned is None
            else {t.topic_id: tuple(int(p) for p in t.partitions) for t in owned}
        ),
    )
    try:
        answer = broker.groups.consumer_heartbeat(heartbeat, client_id, client_host, broker.clock())
    except GroupError as exc:
        return {
            "throttle_time": 0,
            "error_code": exc.code,
            "error_message": str(exc),
            "member_id": request.member_id or None,
            "member_epoch": -1,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    finally:
        broker.group_timer.poke()
    assignment = None
    if answer.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": list(partitions)}
                for topic_id, partitions in sorted(answer.assignment.items(), key=_by_id)
            ]
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _by_id(item: tuple[uuid.UUID, Any]) -> str:
    return str(item[0])


def handle_consumer_group_describe(broker: Broker, request: Any, version: int) -> dict[str, Any]:
    groups = []
    for group_id in request.group_ids:
        try:
            groups.append(broker.groups.describe_consumer_group(group_id))
        except GroupError as exc:
            groups.append(
                {
                    "error_code": exc.code,
                    "error_message": str(exc),
                    "group_id": group_id,
                    "group_state": "",
                    "group_epoch": -1,
                    "assignment_epoch": -1,
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": -(2**31),
                }
            )
    return {"throttle_time": 0, "groups": groups}


# --- the coordinator's log -----------------------------------------------------------------

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {
    # Retention must never delete live offsets: the coordinator compacts this log itself.
    "cleanup.policy": "compact",
    # Small segments, so that moving the log start after a snapshot frees the space.
    "segment.bytes": str(8 << 20),
}
COMPACT_MIN_BYTES = 32 << 20
"""The log is compacted only past this size, and past `COMPACT_RATIO` x its live size."""
COMPACT_RATIO = 4
BATCH_RECORDS_MAX = 512
"""Records per batch written: snapshots of many groups stay under max.message.bytes."""


class OffsetsLog:
    """The coordinator's log: the internal topic `__consumer_offsets`, partition 0.

    Created on the first write (as Kafka creates it on first use), so a broker that never
    sees a group has no such topic. Compaction: when the log has grown past
    `COMPACT_MIN_BYTES` and `COMPACT_RATIO` times the size of the last snapshot, the
    coordinator's whole state is appended as a snapshot and the log start moved to it
    (see groups/coordinator.py for why a crash midway is harmless). It runs from the
    loop after the request that crossed the threshold, never inside a write: the change
    being written is not applied to the coordinator's state until the write returns.
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._live_bytes = 0
        """Size of the last snapshot; unknown (0) until the first compaction."""
        self._compaction_scheduled = False

    def _log(self, *, create: bool) -> Any:
        broker = self._broker
        if broker.topics.get(OFFSETS_TOPIC) is None:
            if not create:
                return None
            broker.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
        return broker.partition_log(OFFSETS_TOPIC, 0)

    def load(self) -> None:
        """Replay the log into the coordinator, then open it for requests."""
        coordinator = self._broker.groups
        partition_log = self._log(create=False)
        records = 0
        if partition_log is not None and partition_log.offline_reason is None:
            now = self._broker.clock()
            try:
                for batch in scan_batches(partition_log, partition_log.log_start_offset):
                    for _offset, key, value in decode_records(batch):
                        records += 1
                        try:
                            coordinator.replay(key, value, now)
                        except ValueError as exc:
                            log.error("%s: skipping a malformed record: %s", OFFSETS_TOPIC, exc)
            except (StorageError, KafkaError) as exc:
                log.error("%s: replay stopped early: %s", OFFSETS_TOPIC, exc)
        coordinator.finish_loading()
        if records:
            log.info(
                "loaded %d group(s) from %d record(s) of %s",
                len(coordinator.groups),
                records,
                OFFSETS_TOPIC,
            )

    def write(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        """Append records (raises KafkaError when the log refuses them)."""
        partition_log = self._log(create=True)
        now = self._broker.clock()
        for start in range(0, len(pairs), BATCH_RECORDS_MAX):
            chunk = pairs[start : start + BATCH_RECORDS_MAX]
            batch = encode_batch([Record(value, key, (), now) for key, value in chunk])
            partition_log.append(batch)
            self._broker.appended((OFFSETS_TOPIC, 0), len(batch), len(chunk))
        if partition_log.size_bytes > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._live_bytes):
            self._schedule_compaction()

    def _schedule_compaction(self) -> None:
        if self._compaction_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._compaction_scheduled = True
        loop.call_soon(self.compact)

    def compact(self) -> None:
        """Append the coordinator's state as a snapshot and drop everything before it."""
        self._compaction_scheduled = True  # the snapshot's own writes schedule no other
        partition_log = self._log(create=True)
        start = partition_log.log_end_offset
        size_before = partition_log.size_bytes
        pairs = list(self._broker.groups.snapshot())
        try:
            if pairs:
                self.write(pairs)
            self._live_bytes = partition_log.size_bytes - size_before
            partition_log.advance_log_start(start)
        except KafkaError as exc:
            log.error("%s: compaction failed: %s", OFFSETS_TOPIC, exc)
            return
        finally:
            self._compaction_scheduled = False
        log.info(
            "%s compacted: %d bytes before, log start now %d",
            OFFSETS_TOPIC,
            size_before,
            start,
        )

    def end_offset(self) -> int:
        partition_log = self._log(create=False)
        return 0 if partition_log is None else int(partition_log.log_end_offset)

    async def durable(self, end: int) -> None:
        partition_log = self._log(create=False)
        if partition_log is not None:
            await self._broker.durable(partition_log, end)


def group_lag(broker: Broker, group_id: str) -> list[PartitionLag]:
    """Lag of every partition the group has committed or owns: log end - committed."""
    view = broker.groups.view(group_id)
    owners = {tp: m.member_id for m in (view.members if view else ()) for tp in m.assignment}
    committed = broker.groups.committed(group_id)
    result = []
    for topic, partition in sorted(set(committed) | set(owners)):
        partition_log = broker.partition_log(topic, partition)
        end = -1 if partition_log is None else int(partition_log.log_end_offset)
        offset = committed.get((topic, partition), -1)
        lag = end - offset if end >= 0 and offset >= 0 else None
        result.append(
            PartitionLag(topic, partition, offset, end, lag, owners.get((topic, partition)))
        )
    return result


# Re-exported for the admin API, which may import only weirmq.broker (see
# tests/test_import_rules.py): the read-only views it turns into JSON and metrics.
from ..groups.views import GroupView as GroupView  # noqa: E402
from ..groups.views import MemberView as MemberView  # noqa: E402
