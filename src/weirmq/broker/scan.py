"""Reading a partition log batch by batch from an offset to its end (start-up replays)."""

from __future__ import annotations

from collections.abc import Iterator

from ..records.batch import HEADER_BYTES, BatchHeader, parse_header
from ..storage.log import FileLog

_SCAN_CHUNK_BYTES = 1 << 20


def scan_batches(partition_log: FileLog, start: int) -> Iterator[memoryview]:
    """Every whole batch from the one holding `start` to the log end, in order."""
    offset = max(start, partition_log.log_start_offset)
    while offset < partition_log.log_end_offset:
        chunk = memoryview(partition_log.read(offset, _SCAN_CHUNK_BYTES).records)
        position = 0
        while position + HEADER_BYTES <= len(chunk):
            header = parse_header(chunk, position)
            if position + header.size > len(chunk):
                break  # only part of this batch was read; the next read starts at it
            yield chunk[position : position + header.size]
            position += header.size
            offset = header.base_offset + header.last_offset_delta + 1
        if position == 0:
            break


def scan_batch_headers(partition_log: FileLog, start: int) -> Iterator[BatchHeader]:
    """Headers of every batch from the one holding `start` to the log end, in order."""
    for batch in scan_batches(partition_log, start):
        yield parse_header(batch)
