"""The share group APIs (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77),
ShareFetch (78) and ShareAcknowledge (79), all at version 1, as librdkafka 2.16 and Kafka
4.1 speak them.

Membership is the coordinator's (groups/share.py through `GroupCoordinator`); delivery
state, sessions and dead letters are the broker's share service (broker/shares.py). This
adapter translates:

- ShareGroupHeartbeat: the coordinator's answer, and the share-partitions of the member's
  assignment initialised at once (so `share.auto.offset.reset=latest` starts where the log
  ended when the member joined);
- ShareFetch, in Kafka's order: the share session (epoch 0 opens one, and may carry no
  acknowledgements; -1 closes it after its acknowledgements and fetches nothing; otherwise
  the next epoch), then the acknowledgements it carries, per partition, then acquisition
  across the session's partitions up to `max_records`. If nothing was acquired, it waits
  up to `max_wait` (capped) for an append or for records released, timed out or backed
  off in the group, then tries once more per wakeup. A response names the partitions that
  have records, an acknowledgement result or an error;
- ShareAcknowledge: the acknowledgements alone, in a session that must exist.

A request that acknowledged anything is answered once the state log is fsynced (as
OffsetCommit is). Errors of the whole request (session, group or member id) are the
response's top-level error; per-partition ones are the partition's `error_code` (fetch)
or `acknowledge_error_code`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from ....broker.shares import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    SHARE_FETCH_WAIT_MAX_MS,
    AckBatch,
    AckOutcome,
    Acquired,
    SessionPartition,
    ShareSession,
    ShareSessionError,
    session_partitions,
)
from ....errors import ErrorCode
from ....groups.errors import GroupError
from ....groups.share import ShareGroupDescription, ShareMemberDescription
from ....types import RequestContext
from ..requests import (
    ShareAcknowledgeRequest,
    ShareAckTopic,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from .groups import assignment_entry, described_entry, described_error

if TYPE_CHECKING:
    from ....broker.core import Broker


# --- ShareGroupHeartbeat, ShareGroupDescribe ----------------------------------------------


def handle_share_group_heartbeat(
    broker: Broker, request: ShareGroupHeartbeatRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    subscribed = request.subscribed_topic_names
    try:
        answer = broker.groups.share_heartbeat(
            request.group_id,
            request.member_id,
            int(request.member_epoch),
            None if subscribed is None else tuple(subscribed),
            request.rack_id,
            client_id=ctx.client_id,
            client_host=ctx.host,
            now_ms=broker.clock(),
        )
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
    assignment = None
    if answer.assignment is not None:
        broker.shares.initialize(
            request.group_id,
            [
                (topic_id, p)
                for topic_id, partitions in answer.assignment.items()
                for p in partitions
            ],
        )
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": list(partitions)}
                for topic_id, partitions in sorted(
                    answer.assignment.items(), key=lambda i: str(i[0])
                )
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


def handle_share_group_describe(
    broker: Broker, request: ShareGroupDescribeRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    groups = []
    for group_id in request.group_ids:
        try:
            groups.append(_described(broker.groups.describe_share_group(group_id)))
        except GroupError as exc:
            groups.append(described_error(group_id, exc))
    return {"groups": groups}


def _described(group: ShareGroupDescription) -> dict[str, Any]:
    return described_entry(group, [_member(m) for m in group.members])


def _member(member: ShareMemberDescription) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "rack_id": member.rack_id,
        "member_epoch": member.member_epoch,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "assignment": assignment_entry(member.assignment),
    }


# --- ShareFetch, ShareAcknowledge ----------------------------------------------------------


class _Answers:
    """Per partition of a response: its fetch error, acknowledgement result, records."""

    def __init__(self) -> None:
        self.errors: dict[SessionPartition, ErrorCode] = {}
        self.acks: dict[SessionPartition, AckOutcome] = {}
        self.acquired: dict[SessionPartition, Acquired] = {}
        self.acknowledged = False
        """Whether anything was acknowledged: the answer waits for the state log's fsync."""

    def partitions(self) -> list[SessionPartition]:
        seen = dict.fromkeys([*self.errors, *self.acks, *self.acquired])
        return list(seen)


def handle_share_fetch(
    broker: Broker, request: ShareFetchRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    shares = broker.shares
    group_id, member_id = request.group_id or "", request.member_id or ""
    epoch = int(request.share_session_epoch)
    now = broker.clock()
    acks = [t for t in request.topics if any(p.acknowledgement_batches for p in t.partitions)]
    if epoch == INITIAL_EPOCH and acks:
        return _fetch_error(
            ErrorCode.invalid_request, "a request opening a share session cannot acknowledge"
        )
    added = session_partitions(
        (t.topic_id, [p.partition_index for p in t.partitions]) for t in request.topics
    )
    forgotten = session_partitions(
        (t.topic_id, t.partitions) for t in request.forgotten_topics_data
    )
    try:
        session = shares.session(group_id, member_id, epoch, added, forgotten, now)
    except ShareSessionError as exc:
        return _fetch_error(exc.code, str(exc))
    answers = _Answers()
    _acknowledge(broker, session, acks, answers)
    if epoch == FINAL_EPOCH:
        shares.close_session(session, broker.clock())
        return _finish(broker, group_id, answers, fetch=True)
    max_records = max(1, int(request.max_records))
    max_bytes = max(1, int(request.max_bytes))
    _acquire(broker, session, answers, max_records, max_bytes)
    max_wait_ms = min(int(request.max_wait.total_seconds() * 1000), SHARE_FETCH_WAIT_MAX_MS)
    if answers.acquired or max_wait_ms <= 0 or broker.closing:
        return _finish(broker, group_id, answers, fetch=True)
    return _long_poll(
        broker, session, answers, max_records, max_bytes, broker.clock() + max_wait_ms
    )


async def _long_poll(
    broker: Broker,
    session: ShareSession,
    answers: _Answers,
    max_records: int,
    max_bytes: int,
    deadline_ms: int,
) -> dict[str, Any]:
    if answers.acknowledged:
        await broker.shares.durable()
    while True:
        waiting = broker.shares.wait(session.group_id, session, deadline_ms)
        if waiting is None:
            break
        await waiting
        _acquire(broker, session, answers, max_records, max_bytes)
        if answers.acquired or broker.clock() >= deadline_ms or broker.closing:
            break
    return _response(broker, session.group_id, answers)


def _acquire(
    broker: Broker, session: ShareSession, answers: _Answers, max_records: int, max_bytes: int
) -> None:
    acquired, errors = broker.shares.acquire(session, max_records, max_bytes, broker.clock())
    answers.errors.update(errors)
    for got in acquired:
        answers.acquired[SessionPartition(got.topic_id, got.partition)] = got
        topic = broker.topics.by_id(got.topic_id)
        if topic is not None:
            stats = broker.stats.topic(topic.name)
            stats.bytes_out += len(got.records)
            stats.records_out += sum(r.last_offset - r.first_offset + 1 for r in got.ranges)


def _acknowledge(
    broker: Broker, session: ShareSession, topics: Sequence[ShareAckTopic], answers: _Answers
) -> None:
    now = broker.clock()
    for topic in topics:
        if topic.topic_id is None:
            continue
        for partition in topic.partitions:
            if not partition.acknowledgement_batches:
                continue
            batches: list[AckBatch] = [
                (int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types])
                for b in partition.acknowledgement_batches
            ]
            where = SessionPartition(topic.topic_id, int(partition.partition_index))
            outcome = broker.shares.acknowledge(
                session.group_id, session.member_id, where.topic_id, where.partition, batches, now
            )
            answers.acks[where] = outcome
            answers.acknowledged = True


def _finish(
    broker: Broker, group_id: str, answers: _Answers, *, fetch: bool
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    build = _response if fetch else _ack_response
    if not answers.acknowledged:
        return build(broker, group_id, answers)

    async def after_durable() -> dict[str, Any]:
        await broker.shares.durable()
        return build(broker, group_id, answers)

    return after_durable()


def _leader(broker: Broker) -> dict[str, Any]:
    return {"leader_id": broker.node_id, "leader_epoch": 0}


def _by_topic(answers: _Answers) -> dict[uuid.UUID, list[SessionPartition]]:
    grouped: dict[uuid.UUID, list[SessionPartition]] = {}
    for where in answers.partitions():
        grouped.setdefault(where.topic_id, []).append(where)
    return grouped


def _response(broker: Broker, group_id: str, answers: _Answers) -> dict[str, Any]:
    responses = []
    for topic_id, partitions in _by_topic(answers).items():
        entries = []
        for where in partitions:
            ack = answers.acks.get(where, AckOutcome())
            got = answers.acquired.get(where)
            entries.append(
                {
                    "partition_index": where.partition,
                    "error_code": answers.errors.get(where, ErrorCode.none),
                    "error_message": None,
                    "acknowledge_error_code": ack.code,
                    "acknowledge_error_message": ack.message,
                    "current_leader": _leader(broker),
                    "records": b"" if got is None else bytes(got.records),
                    "acquired_records": (
                        []
                        if got is None
                        else [
                            {
                                "first_offset": r.first_offset,
                                "last_offset": r.last_offset,
                                "delivery_count": r.delivery_count,
                            }
                            for r in got.ranges
                        ]
                    ),
                }
            )
        responses.append({"topic_id": topic_id, "partitions": entries})
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": broker.shares.lock_duration_ms(group_id),
        "responses": responses,
        "node_endpoints": [],
    }


def _fetch_error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout": 0,
        "responses": [],
        "node_endpoints": [],
    }


def handle_share_acknowledge(
    broker: Broker, request: ShareAcknowledgeRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    group_id, member_id = request.group_id or "", request.member_id or ""
    epoch = int(request.share_session_epoch)
    try:
        session = broker.shares.check_session(group_id, member_id, epoch)
    except ShareSessionError as exc:
        return {
            "error_code": exc.code,
            "error_message": str(exc),
            "responses": [],
            "node_endpoints": [],
        }
    answers = _Answers()
    _acknowledge(broker, session, request.topics, answers)
    if epoch == FINAL_EPOCH:
        broker.shares.close_session(session, broker.clock())
    return _finish(broker, group_id, answers, fetch=False)


def _ack_response(broker: Broker, group_id: str, answers: _Answers) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": where.partition,
                        "error_code": answers.acks.get(where, AckOutcome()).code,
                        "error_message": answers.acks.get(where, AckOutcome()).message,
                        "current_leader": _leader(broker),
                    }
                    for where in partitions
                ],
            }
            for topic_id, partitions in _by_topic(answers).items()
        ],
        "node_endpoints": [],
    }
