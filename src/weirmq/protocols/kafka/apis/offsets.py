"""ListOffsets (API key 2) and OffsetForLeaderEpoch (API key 23).

ListOffsets maps a timestamp to an offset per partition. Negative timestamps are special:

    -1 LATEST             the log end (the high watermark) for read_uncommitted, the last
                          stable offset (below the oldest open transaction) for
                          read_committed (isolation level 1, v2+)
    -2 EARLIEST           the log start
    -3 MAX_TIMESTAMP      the first record carrying the largest timestamp (v7+)
    -4 EARLIEST_LOCAL     the log start: every segment is local (v8+)
    -5 LATEST_TIERED      nothing is in remote storage: no offset (v9+, KIP-1005)
    -6 EARLIEST_PENDING_UPLOAD  nothing is ever pending upload: no offset (v11+, KIP-1023)

"No offset" is offset -1, timestamp -1: Kafka's answer for a topic without tiered
storage. v10 adds a timeout for answers that wait on remote storage (KIP-1075); every
answer here is local, so it is never waited for.

A timestamp >= 0 finds the first record whose timestamp is at least that; when there is
none the answer is offset -1, timestamp -1, as in Kafka.

OffsetForLeaderEpoch lets a consumer check that the log it was reading was not truncated
under it. A single broker's partitions have one leader epoch, 0, from offset 0: epoch 0
ends at the log end; a later epoch is unknown (-1, -1), as Kafka answers for an epoch
above its latest. A `current_leader_epoch` newer than ours is UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from typing import Any

from ....broker.core import Broker
from ....errors import ErrorCode, KafkaError
from ....types import RequestContext
from ..requests import (
    EpochPartition,
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -5, -6
UNDEFINED = -1
READ_COMMITTED = 1


def handle_list_offsets(
    broker: Broker, request: ListOffsetsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        partitions = [
            _list_one(broker, topic.name, p, int(request.isolation_level)) for p in topic.partitions
        ]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


def _list_one(
    broker: Broker, topic: str, wanted: ListOffsetsPartition, isolation: int
) -> dict[str, Any]:
    index = int(wanted.partition_index)
    answer: dict[str, Any] = {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "timestamp": UNDEFINED,
        "offset": UNDEFINED,
        "leader_epoch": -1,
    }
    partition = broker.partition(topic, index)
    if partition is None:
        answer["error_code"] = ErrorCode.unknown_topic_or_partition
        return answer
    answer["leader_epoch"] = partition.leader_epoch
    partition_log = partition.log
    if int(wanted.current_leader_epoch) > partition.leader_epoch:
        answer["error_code"] = ErrorCode.unknown_leader_epoch
        return answer
    timestamp = int(wanted.timestamp)
    try:
        if timestamp == LATEST:
            answer["offset"] = (
                partition.last_stable_offset
                if isolation == READ_COMMITTED
                else partition.high_watermark
            )
        elif timestamp in (EARLIEST, EARLIEST_LOCAL):
            answer["offset"] = partition_log.log_start_offset
        elif timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            pass  # no remote storage: no offset
        elif timestamp == MAX_TIMESTAMP:
            found = partition_log.max_timestamp_offset()
            if found is not None:
                answer["offset"], answer["timestamp"] = found.offset, found.timestamp_ms
        elif timestamp >= 0:
            found = partition_log.offset_for_timestamp(timestamp)
            if found is not None:
                answer["offset"], answer["timestamp"] = found.offset, found.timestamp_ms
        else:
            answer["error_code"] = ErrorCode.invalid_request
    except KafkaError as exc:
        answer["error_code"] = exc.code
    return answer


def handle_offset_for_leader_epoch(
    broker: Broker, request: OffsetForLeaderEpochRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        partitions = [_epoch_end(broker, topic.topic, p) for p in topic.partitions]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}


def _epoch_end(broker: Broker, topic: str, wanted: EpochPartition) -> dict[str, Any]:
    index = int(wanted.partition)
    answer: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "partition": index,
        "leader_epoch": UNDEFINED,
        "end_offset": UNDEFINED,
    }
    partition = broker.partition(topic, index)
    if partition is None:
        answer["error_code"] = ErrorCode.unknown_topic_or_partition
    elif int(wanted.current_leader_epoch) > partition.leader_epoch:
        answer["error_code"] = ErrorCode.unknown_leader_epoch
    elif partition.offline_reason is not None:
        answer["error_code"] = ErrorCode.kafka_storage_error
    elif int(wanted.leader_epoch) == partition.leader_epoch:
        # Only one epoch has ever existed, so it ends where the log ends.
        answer["leader_epoch"] = partition.leader_epoch
        answer["end_offset"] = partition.log_end_offset
    return answer
