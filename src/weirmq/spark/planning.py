"""Offset ranges: the pure arithmetic of planning a read (no Kafka client, no Spark).

A read is a set of per-partition offset ranges `[start, end)`. The driver fixes every
range before a task runs (from the broker's watermarks, timestamps, and the options), and
each task reads exactly its range: a batch read or a micro-batch is therefore the same rows
however often Spark re-runs it, which is what makes checkpoint restarts exact.

- `to_json_offsets` / `from_json_offsets`: the offsets Spark journals in a streaming
  query's checkpoint, in the Kafka source's own shape (`{"topic": {"0": 42}}`; Spark wants
  JSON objects with string keys).
- `limit_rows`: `maxOffsetsPerTrigger`. The limit is shared among partitions in proportion
  to what each has waiting, by largest remainder, so a micro-batch holds exactly
  `min(limit, waiting)` offsets and N waiting offsets take exactly ceil(N / limit) batches.
- `split_ranges`: `minPartitions`. Big ranges are cut into equal pieces, in proportion to
  their size, until there are at least that many Spark partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets `[start, end)` of one partition: one Spark task's share of a read."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """`{("t", 0): 5}` -> `{"t": {"0": 5}}`, sorted so equal offsets serialize equally."""
    table: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        table.setdefault(topic, {})[str(partition)] = int(offset)
    return table


def from_json_offsets(table: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of `to_json_offsets`."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in table.items()
        for partition, offset in partitions.items()
    }


def limit_rows(start: Mapping[TopicPartitionKey, int], latest: Offsets, max_rows: int) -> Offsets:
    """End offsets that take at most `max_rows` offsets past `start` in all, shared in
    proportion to what each partition has waiting (`latest - start`).

    Partitions missing from `start` count as starting at 0 (the caller puts new partitions
    in `start` at their earliest offset before asking)."""
    waiting = {tp: max(0, end - start.get(tp, 0)) for tp, end in latest.items()}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: waiting[tp] * max_rows // total for tp in waiting}
    left = max_rows - sum(shares.values())
    # Largest remainder first; ties in partition order, so planning is deterministic.
    by_remainder = sorted(waiting, key=lambda tp: (-(waiting[tp] * max_rows % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return {tp: (start.get(tp, 0) + shares[tp] if waiting[tp] else latest[tp]) for tp in latest}


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """The non-empty ranges, cut so that there are at least `min_partitions` of them when
    the offsets allow it. Each range gets pieces in proportion to its size, rounded up (so
    the pieces add up to at least `min_partitions`), and its pieces are of (nearly) equal
    size."""
    ranges = sorted(r for r in ranges if r.size > 0)
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = min(r.size, max(1, -(-r.size * min_partitions // total)))
        step, extra = divmod(r.size, pieces)
        start = r.start
        for i in range(pieces):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
