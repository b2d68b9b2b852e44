"""Per-topic backlog, sampled: how far a topic's consumers are behind, as a flow gauge.

A topic opts in with `weirmq.backlog.max.bytes` (broker/configs.py). Its backlog is the
bytes of log its consumers have not yet consumed, summed over its partitions, from the
consumed position of each partition to the log end. The consumed position is:

- with `weirmq.backlog.group` naming a share group (a queue): the group's share-partition
  start offset, below which every record is acknowledged or archived (the oldest
  unacknowledged record); a partition the group has not started on yet counts from the
  log start;
- naming a consumer group (classic or KIP-848): its committed offset, and the log start
  where it has committed nothing yet (its consumers have read nothing that they saved);
- naming no group: the slowest of the groups that consume the topic (those holding a
  committed offset or a share-partition of it); with none, no backlog is measured (there
  is nobody to wait for).

The level is a gauge `backlog:TOPIC` of the flow controller, with `Watermarks.of_budget`
marks on the bound: producers to the topic are throttled from 60% of it, growing to the
full pressure throttle at 100%, where their publishes wait (or are refused with a
retriable error at their timeout, see flow/admission.py) until the consumers have brought
the backlog down to 80%. Reads and commits are never held back: they are what drains it.

Bytes are counted by log position: the offset index finds the batch containing the
consumed offset to within `index.interval.bytes` (4 KiB by default), which is close enough
for a bound measured in megabytes, and costs a bisection per partition, not a read. The
sample runs once a second (`RESOURCE_SAMPLE_MS`, from the server loop), so the backlog can
overshoot its bound by what producers write in about a second before they are held back;
the flood test measures by how much.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Container, Iterator
from typing import TYPE_CHECKING, Final

from ..flow.watermarks import Watermarks
from ..storage.log import FileLog
from ..types import TopicPartition
from . import configs

if TYPE_CHECKING:
    from .core import Broker
    from .topics import Topic

GAUGE_PREFIX: Final = "backlog:"


def gauge_name(topic: str) -> str:
    return GAUGE_PREFIX + topic


def bytes_from(log: FileLog, offset: int) -> int:
    """Bytes of `log` from the batch holding `offset` to its end (to the index's grain)."""
    if offset >= log.log_end_offset:
        return 0
    segments = log.segments
    offset = max(offset, log.log_start_offset)
    first = max(bisect_right([s.base_offset for s in segments], offset) - 1, 0)
    segment = segments[first]
    position = segment.index.lookup(offset - segment.base_offset)
    return segment.size - position + sum(s.size for s in segments[first + 1 :])


class BacklogGuard:
    """Samples every opted-in topic's backlog into the broker's flow controller."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._guarded: set[str] = set()

    def sample(self) -> None:
        broker = self._broker
        flow = broker.flow
        opted = {
            topic.name: (topic.partitions, limit)
            for topic in broker.topics
            if (limit := configs.backlog_limit(topic.configs)) is not None
        }
        positions = self._positions(opted) if opted else {}
        guarded: set[str] = set()
        for topic, (partitions, (bound, group)) in opted.items():
            name = gauge_name(topic)
            flow.guard(name, Watermarks.of_budget(bound))
            flow.update(name, self.level(topic, partitions, group, positions))
            guarded.add(name)
        for name in self._guarded - guarded:
            flow.unguard(name)
        self._guarded = guarded

    def refresh(self, topic: Topic) -> None:
        """`topic` was created or its configs changed: guard it (or stop) at once, so that
        a topic that opts in is bounded from its first publish, not from the next sample."""
        limit = configs.backlog_limit(topic.configs)
        name = gauge_name(topic.name)
        if limit is None:
            if name in self._guarded:
                self._broker.flow.unguard(name)
                self._guarded.discard(name)
            return
        bound, group = limit
        positions = self._positions({topic.name})
        self._broker.flow.guard(name, Watermarks.of_budget(bound))
        self._broker.flow.update(name, self.level(topic.name, topic.partitions, group, positions))
        self._guarded.add(name)

    def level(
        self,
        topic: str,
        partitions: int,
        group: str,
        positions: dict[TopicPartition, dict[str, int]],
    ) -> int:
        """The topic's backlog in bytes; see the module docstring."""
        total = 0
        for index in range(partitions):
            partition = self._broker.partition(topic, index)
            if partition is None:
                continue
            by_group = positions.get(TopicPartition(topic, index), {})
            if group:
                position = by_group.get(group, partition.log_start_offset)
            elif by_group:
                position = min(by_group.values())
            else:
                continue
            total += bytes_from(partition.log, position)
        return total

    def _positions(self, topics: Container[str]) -> dict[TopicPartition, dict[str, int]]:
        """Per partition of `topics`, each group's consumed position: the committed offset
        of a consumer group, the start offset of a share group."""
        broker = self._broker
        positions: dict[TopicPartition, dict[str, int]] = {}
        for source in (broker.groups.committed_on(topics), broker.shares.start_offsets(topics)):
            for group_id, tp, offset in source:
                by_group = positions.setdefault(tp, {})
                by_group[group_id] = min(offset, by_group.get(group_id, offset))
        return positions

    def guarded(self) -> Iterator[str]:
        """The gauges of the topics that opted in, as of the last sample."""
        return iter(sorted(self._guarded))
