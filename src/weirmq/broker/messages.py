"""Single records in and out of a partition, for people: the admin API's message browser,
its "produce one message" and its dead-letter redrive.

The broker's own paths handle whole batches (Fetch hands them out as they are stored,
Produce appends them as they came); a person wants records. This module is the thin layer
between: `read_records` reads whole batches through `Partition.read` (the read path every
fetch takes, bounded in bytes) and decodes their records, whatever their codec
(`records.batch.decode_full_records` decompresses, within the broker's bound on a
decompressed batch); `encode_records` makes the uncompressed batch that
`Partition.publish` takes, so a record written here is routed, delayed and made durable as
a produced one is; `key_partition` is Kafka's default partitioner, so a keyed record lands
where a Kafka producer would put it.

The admin API may not import `weirmq.records` (tests/test_import_rules.py), hence this
module in the broker rather than there.
"""

from __future__ import annotations

from collections.abc import Sequence

from murmurhash2 import murmurhash2

from ..records.batch import (
    HEADER_BYTES,
    Record,
    decode_full_records,
    encode_batch,
    parse_header,
)
from .exchanges import MURMUR2_SEED
from .partition import Partition

__all__ = ["Record", "encode_records", "key_partition", "read_records"]


def read_records(
    partition: Partition, offset: int, limit: int, max_bytes: int
) -> tuple[list[tuple[int, Record]], int]:
    """Up to `limit` records from `offset` (at least the log start, at most the high
    watermark), in batches read up to `max_bytes` (the first batch whole even when larger,
    as Fetch does); and the offset to read next. Control batches are skipped."""
    assert limit > 0 and max_bytes > 0
    start = max(offset, partition.log_start_offset)
    end = partition.high_watermark
    if start >= end:
        return [], end
    data = memoryview(partition.read(start, max_bytes).records)
    found: list[tuple[int, Record]] = []
    next_offset = start
    position = 0
    while position + HEADER_BYTES <= len(data) and len(found) < limit:
        header = parse_header(data, position)
        if position + header.size > len(data):
            break  # a partial batch at the end of the read
        if not header.is_control:
            for record_offset, record in decode_full_records(
                data[position : position + header.size]
            ):
                if record_offset < start:
                    continue  # the batch holding `start` begins before it
                found.append((record_offset, record))
                next_offset = record_offset + 1
                if len(found) == limit:
                    break
        if len(found) < limit:
            next_offset = max(next_offset, header.last_offset + 1)
        position += header.size
    return found, min(next_offset, end)


def encode_records(records: Sequence[Record]) -> bytes:
    """One uncompressed batch of `records`, without a producer id (as the console or a
    redrive writes: no idempotence to keep)."""
    return encode_batch(records)


def key_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: murmur2 of the key."""
    assert partitions > 0
    return (murmurhash2(key, MURMUR2_SEED) & 0x7FFFFFFF) % partitions
