"""Operational errors of the storage layer, each mapped to the Kafka code a client gets."""

from __future__ import annotations

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
