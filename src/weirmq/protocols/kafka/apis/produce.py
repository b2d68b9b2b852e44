"""Produce (API key 0): validate, append, answer when the durability condition holds.

Per partition, in request order and synchronously on the loop (so appends keep arrival
order, which idempotent sequences depend on):

1. find the topic (auto-created when allowed) and partition;
2. for an idempotent batch, judge its sequence (`producers.PartitionProducers.check`): a
   duplicate is answered with the offsets it got the first time and not written again;
3. append: the storage layer checks framing, CRC and sizes, then assigns offsets;
4. wake fetches waiting on the partition.

Then the answer waits for the request's acks: 0 gets no answer at all, 1 is answered at
once (the data is in the OS; the flush interval bounds its exposure), all (-1) is answered
once the group commit has fsynced the partition up to the batch (unless the topic sets
`weirmq.acks.all.fsync=false`, which answers it like acks=1). A failed fsync answers
KAFKA_STORAGE_ERROR for that partition only.

The records arrive as read-only views of the request frame (`wire.fast` decodes Produce by
hand) and go to the log without being copied: only each batch's header is rebuilt.

A produce request (v3+) carries exactly one batch per partition; Kafka refuses anything else
with INVALID_RECORD, and so do we. Validation (framing, CRC, sizes) comes before the
idempotence check, so a retry corrupted on the way is refused rather than taken for a
duplicate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from ..storage.errors import StorageError
from ..storage.log import FileLog
from ..wire.errors import ErrorCode, KafkaError
from ..wire.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, validate_batches
from .core import INTERNAL_TOPICS, Broker
from .producers import last_sequence

log = logging.getLogger(__name__)

VALID_ACKS = (0, 1, -1)
_NO_TIMESTAMP = -1


class _Outcome:
    """One partition's answer, and what must be fsynced before it is given."""

    __slots__ = ("base_offset", "error", "log_append_time_ms", "log_start_offset", "sync")

    def __init__(self) -> None:
        self.error = ErrorCode.none
        self.base_offset = -1
        self.log_append_time_ms = _NO_TIMESTAMP
        self.log_start_offset = -1
        self.sync: tuple[FileLog, int] | None = None


def handle_produce(
    broker: Broker, request: Any, version: int
) -> dict[str, Any] | Awaitable[dict[str, Any] | None] | None:
    acks = int(request.acks)
    outcomes: list[tuple[str, list[tuple[int, _Outcome]]]] = []
    for topic_data in request.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            outcome = _Outcome()
            if acks not in VALID_ACKS:
                outcome.error = ErrorCode.invalid_required_acks
            elif request.transactional_id is not None:
                outcome.error = ErrorCode.invalid_txn_state  # transactions: not yet
            else:
                _append(broker, topic_data.name, partition_data, acks, outcome)
            partitions.append((int(partition_data.index), outcome))
        outcomes.append((topic_data.name, partitions))
    if acks == 0:
        return None
    if acks == -1 and any(o.sync for _, ps in outcomes for _, o in ps):
        # Not the request: its records are views of the frame, which would then be kept
        # (and its buffer not reused, see wire.framing) until the fsync.
        return _after_sync(broker, outcomes)
    return _response(outcomes)


def _append(broker: Broker, topic_name: str, data: Any, acks: int, outcome: _Outcome) -> None:
    try:
        if topic_name in INTERNAL_TOPICS:  # the group coordinator's log is its own
            outcome.error = ErrorCode.invalid_topic_exception
            return
        broker.topic(topic_name, auto_create=True)
        partition = int(data.index)
        partition_log = broker.partition_log(topic_name, partition)
        if partition_log is None:
            outcome.error = ErrorCode.unknown_topic_or_partition
            return
        records = data.records
        if not records:
            raise _NotOneBatch("a produce request must carry exactly one batch, got none")
        outcome.log_start_offset = partition_log.log_start_offset
        tp = (topic_name, partition)
        last_offset = _append_checked(broker, tp, partition_log, records, outcome)
        outcome.log_start_offset = partition_log.log_start_offset
        if acks == -1 and broker.acks_all_fsync(topic_name):
            outcome.sync = (partition_log, last_offset + 1)
    except KafkaError as exc:
        outcome.error = exc.code
        if exc.code is ErrorCode.kafka_storage_error:
            log.error("produce to %s-%s failed: %s", topic_name, data.index, exc)


def _append_checked(
    broker: Broker,
    tp: tuple[str, int],
    partition_log: FileLog,
    records: bytes | memoryview,
    outcome: _Outcome,
) -> int:
    """Append `records` (after the idempotence check); returns the last offset answered."""
    # Validate first (framing, CRC, sizes): a corrupted retry must get CORRUPT_MESSAGE,
    # not the original batch's offsets.
    headers = validate_batches(records, max_batch_bytes=partition_log.config.max_message_bytes)
    if len(headers) != 1:
        raise _NotOneBatch(f"a produce request must carry exactly one batch, got {len(headers)}")
    (header,) = headers
    if header.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
        raise _TransactionsUnsupported("transactional batches are not supported yet")
    if header.producer_id < 0:
        info = partition_log.append(records, leader_epoch=0, validated=headers)
        broker.appended(tp, len(records), header.records_count)
        outcome.base_offset = info.base_offset
        outcome.log_append_time_ms = info.log_append_time_ms
        return info.last_offset
    producers = broker.partition_producers(tp)
    first_seq = header.base_sequence
    last_seq = last_sequence(first_seq, header.last_offset_delta)
    duplicate = producers.check(header.producer_id, header.producer_epoch, first_seq, last_seq)
    if duplicate is not None:
        outcome.base_offset = duplicate.first_offset
        return duplicate.last_offset
    info = partition_log.append(records, leader_epoch=0, validated=headers)
    producers.record(
        header.producer_id,
        header.producer_epoch,
        first_seq,
        last_seq,
        info.base_offset,
        info.last_offset,
        broker.clock(),
    )
    broker.appended(tp, len(records), header.records_count)
    outcome.base_offset = info.base_offset
    outcome.log_append_time_ms = info.log_append_time_ms
    return info.last_offset


class _NotOneBatch(KafkaError):
    """Produce v3+ carries exactly one batch per partition (Kafka: INVALID_RECORD)."""

    code = ErrorCode.invalid_record


class _TransactionsUnsupported(KafkaError):
    code = ErrorCode.invalid_txn_state


async def _after_sync(
    broker: Broker, outcomes: list[tuple[str, list[tuple[int, _Outcome]]]]
) -> dict[str, Any]:
    pending = [o for _, ps in outcomes for _, o in ps if o.sync is not None]
    results: list[BaseException | None]
    if len(pending) == 1:
        # The usual request: one partition. Awaited here rather than through gather,
        # whose task per partition costs three more event-loop rounds per request.
        results = [await _durable(broker, pending[0])]
    else:
        results = await asyncio.gather(*(_durable(broker, o) for o in pending))
    for outcome, error in zip(pending, results, strict=True):
        if error is not None:
            log.error("fsync failed; answering KAFKA_STORAGE_ERROR: %s", error)
            outcome.error = ErrorCode.kafka_storage_error
            outcome.base_offset = -1
    return _response(outcomes)


async def _durable(broker: Broker, outcome: _Outcome) -> BaseException | None:
    """Wait for the outcome's fsync; returns the storage error that failed it, if any."""
    assert outcome.sync is not None
    try:
        await broker.durable(*outcome.sync)
    except (StorageError, OSError) as exc:
        return exc
    return None


def _response(outcomes: list[tuple[str, list[tuple[int, _Outcome]]]]) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        "index": index,
                        "error_code": o.error,
                        "base_offset": o.base_offset,
                        "log_append_time": o.log_append_time_ms,
                        "log_start_offset": o.log_start_offset,
                        "record_errors": [],
                        "error_message": None,
                    }
                    for index, o in partitions
                ],
            }
            for name, partitions in outcomes
        ],
        "throttle_time": 0,
    }
