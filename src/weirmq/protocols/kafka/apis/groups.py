"""The group APIs: Kafka requests in, `groups.GroupCoordinator` calls, responses out.

This broker is the coordinator of every group and every transactional id (FindCoordinator
names it for any key of key type 0, 1 or 2).
The coordinator is sans-I/O, and its log and timer are broker services
(broker/group_service.py); this adapter adds what is Kafka's:

- answers that wait: a JoinGroup or SyncGroup takes a ticket from the broker's
  `GroupReplies` and hands it to the coordinator, which returns every reply the step
  produced (this request's and other members' it released); all are delivered here, in
  one place (`_waiting`). This request's own answer, if among them, is returned at once;
  otherwise the dispatcher awaits the ticket's future. LeaveGroup delivers the replies
  its departures produced (a rebalance completing for the members that stay), and
  ConsumerGroupHeartbeat those of an online upgrade (the classic members' waiting joins
  and syncs, answered REBALANCE_IN_PROGRESS);
- after every call that can move the coordinator's next deadline, the broker's
  `GroupTimer` is poked;
- OffsetCommit answers only once its records are fsynced (group commit, like acks=all),
  so an acknowledged commit survives a crash of the machine, not only of the process;
- Kafka's shapes: the coordinator describes groups in typed views (groups/views.py), and
  the response entries (field names, error codes, authorized operations, how an unknown
  group looks) are made here.

Per-request errors from the coordinator arrive as `GroupError`, mapped to the response's
error fields; anything else is a bug and goes up to the dispatcher.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ....errors import ErrorCode, KafkaError
from ....groups import consumer as kip848
from ....groups.classic import (
    GroupResult,
    JoinReply,
    JoinRequest,
    JoinResult,
    LeaveOutcome,
    Replies,
    SyncReply,
    SyncResult,
)
from ....groups.coordinator import CommitRequest
from ....groups.errors import GroupError
from ....groups.records import OffsetValue
from ....groups.share import ShareGroupDescription
from ....groups.views import (
    AssignedTopic,
    ClassicDescription,
    ConsumerGroupDescription,
    ConsumerMemberDescription,
)
from ....transactions.state import TxnState
from ....types import RequestContext
from ..requests import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchTopic,
    SyncGroupRequest,
)
from .metadata import AUTHORIZED_OPERATIONS_OMITTED

if TYPE_CHECKING:
    from ....broker.core import Broker

log = logging.getLogger(__name__)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2
"""A share-partition's coordinator (key "group:topicId:partition"): this broker too."""
JOIN_REQUIRES_MEMBER_ID_VERSION = 4
"""JoinGroup v4+ (KIP-394): a new dynamic member first gets MEMBER_ID_REQUIRED."""
MEMBER_TYPE_CLASSIC = 0
"""ConsumerGroupDescribe v1's member_type of a classic member of a consumer group (one
that stayed in it through an online upgrade, or joined it with JoinGroup)."""
MEMBER_TYPE_CONSUMER = 1
"""ConsumerGroupDescribe v1's member_type of a member that speaks KIP-848's protocol."""


def _ms(value: datetime.timedelta) -> int:
    """A kio timedelta field in milliseconds."""
    return int(value.total_seconds() * 1000)


def _waiting(
    broker: Broker,
    step: Callable[[int], Replies],
    answer: Callable[[GroupResult], dict[str, Any]],
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Run the coordinator `step` under a new ticket and deliver every reply it produced;
    answer at once if one was for this ticket (no event loop needed), else when the
    ticket's reply is delivered (by a later request, the group timer or shutdown)."""
    replies = broker.group_replies
    ticket = replies.ticket()
    try:
        produced = step(ticket)
    finally:
        broker.group_timer.poke()
    own = replies.deliver(produced, own=ticket)
    if own is not None:
        return answer(own)
    future = replies.wait(ticket)

    async def wait() -> dict[str, Any]:
        try:
            return answer(await future)
        finally:
            # Answered, or cancelled with the connection: a later reply is dropped.
            replies.cancel(ticket)

    return wait()


# --- FindCoordinator -----------------------------------------------------------------------


def handle_find_coordinator(
    broker: Broker, request: FindCoordinatorRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    host, port = broker.advertised
    key_type = int(request.key_type)
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE):
        code, message, node = ErrorCode.none, None, broker.node_id
    else:
        code, message, node = ErrorCode.invalid_request, f"key type {key_type} is not supported", -1
    if version < 4:
        return {
            "error_code": code,
            "error_message": message,
            "node_id": node,
            "host": host if node >= 0 else "",
            "port": port if node >= 0 else -1,
        }
    return {
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
    broker: Broker, request: JoinGroupRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    client_id, client_host = ctx.client_id, ctx.host
    session_ms = _ms(request.session_timeout)
    rebalance = request.rebalance_timeout
    join = JoinRequest(
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        client_id=client_id,
        client_host=client_host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(rebalance) if rebalance is not None else session_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=version >= JOIN_REQUIRES_MEMBER_ID_VERSION,
    )

    def step(ticket: int) -> Replies:
        try:
            return broker.groups.join_group(request.group_id, join, broker.clock(), ticket)
        except GroupError as exc:
            return [JoinReply(ticket, JoinResult(exc.code, member_id=request.member_id))]

    return _waiting(broker, step, lambda result: _join_response(result, version))


NULLABLE_PROTOCOL_VERSION = 7
"""JoinGroup v7+ (KIP-559) may answer a null protocol; older versions need a string."""


def _join_response(result: GroupResult, version: int) -> dict[str, Any]:
    assert isinstance(result, JoinResult), result
    protocol = result.protocol
    if protocol is None and version < NULLABLE_PROTOCOL_VERSION:
        protocol = ""
    return {
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
    broker: Broker, request: SyncGroupRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    def step(ticket: int) -> Replies:
        try:
            return broker.groups.sync_group(
                request.group_id,
                request.member_id,
                request.group_instance_id,
                int(request.generation_id),
                request.protocol_type,
                request.protocol_name,
                [(a.member_id, bytes(a.assignment)) for a in request.assignments],
                broker.clock(),
                ticket,
            )
        except GroupError as exc:
            return [SyncReply(ticket, SyncResult(exc.code))]

    return _waiting(broker, step, _sync_response)


def _sync_response(result: GroupResult) -> dict[str, Any]:
    assert isinstance(result, SyncResult), result
    return {
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol,
        "assignment": result.assignment,
    }


def handle_heartbeat(
    broker: Broker, request: HeartbeatRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    try:
        code = broker.groups.heartbeat(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            int(request.generation_id),
            broker.clock(),
        )
    except GroupError as exc:
        code = exc.code
    broker.group_timer.poke()
    return {"error_code": code}


def handle_leave_group(
    broker: Broker, request: LeaveGroupRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    # v0-2 name one member (and get a top-level error), v3+ a list: see requests.py.
    members: list[tuple[str, str | None, str | None]] = (
        [(request.member_id, None, None)]
        if version < 3
        else [(m.member_id, m.group_instance_id, m.reason) for m in request.members]
    )
    for member_id, _instance, reason in members:
        log.info("group %r: member %r leaves (%s)", request.group_id, member_id, reason or "-")
    try:
        left = broker.groups.leave_group(
            request.group_id, [(m, i) for m, i, _ in members], broker.clock()
        )
        top = ErrorCode.none
    except GroupError as exc:
        left, top = LeaveOutcome((exc.code,) * len(members), ()), exc.code
    broker.group_replies.deliver(left.replies)
    broker.group_timer.poke()
    codes = left.codes
    if version < 3:
        top = codes[0]
    return {
        "error_code": top,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": code}
            for (m, i, _), code in zip(members, codes, strict=True)
        ],
    }


# --- offsets -------------------------------------------------------------------------------


def handle_offset_commit(
    broker: Broker, request: OffsetCommitRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    offsets = [
        (
            topic.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(p.committed_leader_epoch),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    commit = CommitRequest(
        request.group_id,
        request.member_id,
        int(request.generation_id_or_member_epoch),
        request.group_instance_id,
        offsets,
    )
    end_before = broker.offsets_log.end_offset()
    try:
        codes = broker.groups.commit_offsets(commit, broker.clock())
    except GroupError as exc:
        codes = [exc.code] * len(offsets)
    except KafkaError as exc:  # the offsets log refused the append (disk full, offline)
        log.error("group %r: offsets not committed: %s", request.group_id, exc)
        codes = [_commit_failure(exc)] * len(offsets)
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
                partition["error_code"] = _commit_failure(exc)
    return response


def _commit_failure(exc: KafkaError) -> ErrorCode:
    """The code of a commit the offsets log refused: KAFKA_STORAGE_ERROR when the disk
    failed (full, I/O error; the client retries and succeeds once it clears), else
    COORDINATOR_NOT_AVAILABLE."""
    if exc.code is ErrorCode.kafka_storage_error:
        return ErrorCode.kafka_storage_error
    return ErrorCode.coordinator_not_available


def _commit_response(request: OffsetCommitRequest, codes: list[ErrorCode]) -> dict[str, Any]:
    it = iter(codes)
    return {
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


def handle_offset_fetch(
    broker: Broker, request: OffsetFetchRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    stable = bool(request.require_stable)
    if version < 8:
        wanted = request.topics
        topics, code = _fetch_group(broker, request.group_id, wanted, None, stable)
        return {"topics": topics, "error_code": code}
    groups = []
    for group in request.groups:
        member_id = group.member_id
        member = (member_id, int(group.member_epoch)) if member_id else None
        topics, code = _fetch_group(broker, group.group_id, group.topics, member, stable)
        groups.append({"group_id": group.group_id, "topics": topics, "error_code": code})
    return {"groups": groups}


def _fetch_group(
    broker: Broker,
    group_id: str,
    wanted: Sequence[OffsetFetchTopic] | None,
    member: tuple[str, int] | None,
    require_stable: bool,
) -> tuple[list[dict[str, Any]], ErrorCode]:
    asked = None if wanted is None else [(t.name, list(t.partition_indexes)) for t in wanted]
    try:
        found = broker.groups.fetch_offsets(group_id, asked, member=member)
    except GroupError as exc:
        return [], exc.code
    pending = _pending_offsets(broker, group_id) if require_stable else frozenset()
    topics = [
        {
            "name": topic,
            "partitions": [
                _fetched(partition, None, ErrorCode.unstable_offset_commit)
                if (topic, partition) in pending
                else _fetched(partition, value, ErrorCode.none)
                for partition, value in partitions
            ],
        }
        for topic, partitions in found
    ]
    return topics, ErrorCode.none


def _fetched(partition: int, value: OffsetValue | None, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "committed_offset": value.offset if value else -1,
        "committed_leader_epoch": value.leader_epoch if value else -1,
        "metadata": value.metadata if value else "",
        "error_code": code,
    }


TXN_UNSETTLED = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


def _pending_offsets(broker: Broker, group_id: str) -> frozenset[tuple[str, int]]:
    """The group's partitions an open or ending transaction has offsets for (KIP-447): a
    consumer asking with require_stable waits for the transaction's outcome (it retries
    UNSTABLE_OFFSET_COMMIT) rather than starting from an offset about to move."""
    return frozenset(
        (tp.topic, tp.partition)
        for meta in broker.txns.transactions()
        if meta.state in TXN_UNSETTLED
        for tp in meta.groups.get(group_id, ())
    )


def handle_offset_delete(
    broker: Broker, request: OffsetDeleteRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    asked = [(t.name, [int(p.partition_index) for p in t.partitions]) for t in request.topics]
    try:
        result = broker.groups.delete_offsets(request.group_id, asked)
    except GroupError as exc:
        return {"error_code": exc.code, "topics": []}
    except KafkaError as exc:
        log.error("group %r: offsets not deleted: %s", request.group_id, exc)
        return {"error_code": ErrorCode.coordinator_not_available, "topics": []}
    return {
        "error_code": ErrorCode.none,
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


def handle_describe_groups(
    broker: Broker, request: DescribeGroupsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    described = []
    for group_id in request.groups:
        try:
            group = broker.groups.describe_group(group_id)
        except GroupError as exc:
            described.append(_dead_group(group_id, exc.code))
            continue
        # Kafka describes a group it does not know as Dead, without an error.
        entry = _dead_group(group_id, ErrorCode.none) if group is None else _classic_entry(group)
        described.append(entry)
    return {"groups": described}


def _classic_entry(group: ClassicDescription) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state,
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata,
                "member_assignment": m.assignment,
            }
            for m in group.members
        ],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _dead_group(group_id: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": "Dead",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def handle_list_groups(
    broker: Broker, request: ListGroupsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    states = {s.lower() for s in request.states_filter or ()}
    types = {t.lower() for t in request.types_filter or ()}
    try:
        listed = broker.groups.list_groups()
    except GroupError as exc:
        return {"error_code": exc.code, "groups": []}
    return {
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


def handle_delete_groups(
    broker: Broker, request: DeleteGroupsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
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
    return {"results": results}


# --- KIP-848 -------------------------------------------------------------------------------


def handle_consumer_group_heartbeat(
    broker: Broker, request: ConsumerGroupHeartbeatRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    client_id, client_host = ctx.client_id, ctx.host
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
        subscribed_topic_regex=request.subscribed_topic_regex,
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
            "error_code": exc.code,
            "error_message": str(exc),
            "member_id": request.member_id or None,
            "member_epoch": -1,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    finally:
        broker.group_timer.poke()
    # An online upgrade answers the classic members' waiting joins and syncs.
    broker.group_replies.deliver(answer.released)
    assignment = None
    if answer.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": list(partitions)}
                for topic_id, partitions in sorted(answer.assignment.items(), key=_by_id)
            ]
        }
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _by_id(item: tuple[uuid.UUID, Any]) -> str:
    return str(item[0])


def handle_consumer_group_describe(
    broker: Broker, request: ConsumerGroupDescribeRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    groups = []
    for group_id in request.group_ids:
        try:
            groups.append(_consumer_group_entry(broker.groups.describe_consumer_group(group_id)))
        except GroupError as exc:
            groups.append(described_error(group_id, exc))
    return {"groups": groups}


def described_error(group_id: str, exc: GroupError) -> dict[str, Any]:
    """A group ConsumerGroupDescribe or ShareGroupDescribe could not describe."""
    return {
        "error_code": exc.code,
        "error_message": str(exc),
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _consumer_group_entry(group: ConsumerGroupDescription) -> dict[str, Any]:
    return described_entry(group, [_consumer_member(m) for m in group.members])


def described_entry(
    group: ConsumerGroupDescription | ShareGroupDescription, members: list[dict[str, Any]]
) -> dict[str, Any]:
    """A group ConsumerGroupDescribe or ShareGroupDescribe describes (the two responses
    share this shape; their members differ)."""
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor,
        "members": members,
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _consumer_member(member: ConsumerMemberDescription) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "member_epoch": member.member_epoch,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "assignment": assignment_entry(member.assignment),
        "target_assignment": assignment_entry(member.target_assignment),
        "member_type": MEMBER_TYPE_CLASSIC if member.classic else MEMBER_TYPE_CONSUMER,
    }


def assignment_entry(topics: tuple[AssignedTopic, ...]) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": t.topic_id, "topic_name": t.topic, "partitions": list(t.partitions)}
            for t in topics
        ]
    }
