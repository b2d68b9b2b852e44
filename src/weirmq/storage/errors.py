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
