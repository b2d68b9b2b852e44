"""Operational errors of the storage layer, each mapped to the Kafka code a client gets."""

from __future__ import annotations

import errno

from ..errors import ErrorCode, KafkaError


class StorageError(KafkaError):
    """The disk failed us (I/O error, full disk, corrupt data): KAFKA_STORAGE_ERROR."""

    code = ErrorCode.kafka_storage_error


class DiskFullError(StorageError):
    """A write failed for lack of space; nothing of the failed append was kept."""


class LogOfflineError(StorageError):
    """The partition was taken offline (corrupt data found); it serves nothing until repaired."""


class DamagedRangeError(StorageError):
    """The offset lies in a damaged range of an otherwise served log (`FileLog.damage`):
    flushed bytes that fail their checks, or flushed offsets whose bytes are missing.

    CORRUPT_MESSAGE, not KAFKA_STORAGE_ERROR, because of what clients do with each in a
    Fetch or ListOffsets answer: Kafka's Java consumer and librdkafka treat
    KAFKA_STORAGE_ERROR as "this replica is unavailable, find the leader again" and retry
    in silence, so a consumer stuck on a damaged range would simply hang. CORRUPT_MESSAGE
    reaches the application (librdkafka: a consumer error event naming the offset; Java:
    a KafkaException from poll), which can then seek past the range. It is what Kafka
    itself answers when a fetch meets a corrupt record. It stays a `StorageError` so that
    the broker's own readers (producer-state replay, routing, the delayed log) stop on it
    as they stop on any other storage failure."""

    code = ErrorCode.corrupt_message


class OffsetOutOfRangeError(KafkaError):
    """The offset is below the log start or above the log end."""

    code = ErrorCode.offset_out_of_range


def storage_error(exc: OSError, what: str) -> StorageError:
    """The operational error for an OSError met while doing `what` ("saving topics.json"):
    `DiskFullError` for ENOSPC and EDQUOT, `StorageError` for anything else."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(f"disk full {what}")
    return StorageError(f"I/O error {what}: {exc}")


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) says the disk is full."""
    while exc is not None:
        if isinstance(exc, DiskFullError):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False
