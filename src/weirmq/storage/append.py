"""Turning a producer's record set into bytes ready to store: shared by every log.

Validation happens before anything is written (all or nothing); then offsets and the
leader epoch are patched into a private copy, and LogAppendTime logs get the broker's
clock stamped in. The result says where each batch starts, which the file log needs for
its sparse indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..wire.records import (
    NO_TIMESTAMP,
    BatchHeader,
    RecordListTooLargeError,
    patch_header,
    set_log_append_time,
    validate_batches,
)
from .config import LogConfig, TimestampType


class StoredBatch(NamedTuple):
    """Where a batch sits in the prepared bytes, and what the indexes need of it.

    (A NamedTuple: one is built per batch on the produce path, where it is cheaper.)
    """

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    data: bytearray
    batches: tuple[StoredBatch, ...]
    log_append_time_ms: int

    @property
    def base_offset(self) -> int:
        return self.batches[0].base_offset

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset


def prepare_append(
    records: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    leader_epoch: int,
    config: LogConfig,
    now_ms: int,
    validated: Sequence[BatchHeader] | None = None,
) -> PreparedAppend:
    """Validate and offset-stamp `records`; raises the Kafka error on bad input.

    `validated` is what `validate_batches` already returned for these very bytes with this
    log's `max_message_bytes` (the produce path validates before its idempotence check);
    passing it saves a second header walk and CRC pass over every batch."""
    headers = (
        validate_batches(records, max_batch_bytes=config.max_message_bytes)
        if validated is None
        else validated
    )
    if len(records) > config.segment_bytes:
        raise RecordListTooLargeError(
            f"{len(records)} bytes of batches do not fit a segment of {config.segment_bytes}"
        )
    data = bytearray(records)
    append_time = config.timestamp_type is TimestampType.LOG_APPEND_TIME
    batches = []
    offset = next_offset
    for header in headers:
        patch_header(data, header, offset, leader_epoch)
        max_ts = header.max_timestamp
        if append_time:
            set_log_append_time(data, header, now_ms)
            max_ts = now_ms
        last = offset + header.last_offset_delta
        batches.append(StoredBatch(header.position, offset, last, header.size, max_ts))
        offset = last + 1
    return PreparedAppend(data, tuple(batches), now_ms if append_time else NO_TIMESTAMP)
