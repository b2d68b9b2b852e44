"""Offsets and times as the everyday commands take them, and the plan of an offset reset:
pure functions, no client, no broker (``groups reset-offsets``, ``topics trim``,
``consume --from-timestamp`` and ``exchanges replay`` use them).

Theory of operation:

- A time on the command line is milliseconds since the epoch or an ISO 8601 time (UTC
  unless it names a zone): what Kafka's tools take, and what a person can type.
- ``--topic orders`` means every partition of the topic, ``--topic orders:0,2`` the named
  ones, as kafka-consumer-groups.sh reads it.
- A reset is planned before anything is changed, from four facts per partition: the
  committed offset (if any), the earliest and latest offsets, and for ``--to-timestamp``
  the offset ListOffsets found for the time. Like Kafka's tool, a target outside
  [earliest, latest] is clamped into it (a consumer would otherwise hit
  OFFSET_OUT_OF_RANGE and fall back to its auto.offset.reset), and a time later than every
  record lands on the latest offset. The plan is a list of `Reset` rows; the command prints
  it, and applies it only with ``--execute``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Strategy = Literal["earliest", "latest", "timestamp", "offset", "shift"]
TopicPartitionKey = tuple[str, int]


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise).
    ValueError says what was expected."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
            "(e.g. 2024-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise ValueError(f"{text!r} is before 1970")
    return millis


def format_time_ms(millis: int) -> str:
    """``1704067200000`` -> ``2024-01-01T00:00:00.000Z`` (for notes and tables)."""
    moment = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """One ``--topic`` option: a topic, and its partitions or None for all of them."""

    topic: str
    partitions: tuple[int, ...] | None = None


def parse_topic_selection(text: str) -> TopicSelection:
    """``orders`` -> all partitions; ``orders:0,2`` -> partitions 0 and 2."""
    topic, colon, numbers = text.rpartition(":")
    if not colon:
        if not text:
            raise ValueError("the topic name is empty")
        return TopicSelection(text)
    if not topic:
        raise ValueError(f"{text!r}: the topic name is empty")
    parts = [part.strip() for part in numbers.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"{text!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...]")
    return TopicSelection(topic, tuple(sorted({int(part) for part in parts})))


def parse_trim_offset(text: str) -> int:
    """``--before`` of ``topics trim``: an offset, or ``end`` (everything; DeleteRecords'
    -1, the high watermark)."""
    if text == "end":
        return -1
    if not text.isdigit():
        raise ValueError(f"{text!r} is not an offset (a number, or end)")
    return int(text)


# -- the plan of a reset -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where ``reset-offsets`` sends the group: the option given, and its number
    (the offset, the shift or the time in ms; 0 for earliest and latest)."""

    strategy: Strategy
    value: int = 0

    def json_value(self) -> int | None:
        return None if self.strategy in ("earliest", "latest") else self.value

    def describe(self) -> str:
        if self.strategy == "timestamp":
            return f"the first record at or after {format_time_ms(self.value)}"
        if self.strategy == "offset":
            return f"offset {self.value}"
        if self.strategy == "shift":
            return f"the committed offset {self.value:+d}"
        return f"the {self.strategy} offset"


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What the plan needs to know of one partition."""

    earliest: int
    latest: int
    committed: int | None = None
    at_time: int | None = None  # ListOffsets for --to-timestamp: -1 when no record is that late


@dataclass(frozen=True, slots=True)
class Reset:
    """One row of the plan."""

    topic: str
    partition: int
    current: int | None
    new: int

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.current,
            "new_offset": self.new,
        }


class PlanError(ValueError):
    """A reset that cannot be planned (e.g. shifting a partition with nothing committed)."""


def new_offset(target: ResetTarget, facts: PartitionFacts) -> int:
    """Where one partition goes, clamped into [earliest, latest]."""
    if target.strategy == "earliest":
        wanted = facts.earliest
    elif target.strategy == "latest":
        wanted = facts.latest
    elif target.strategy == "offset":
        wanted = target.value
    elif target.strategy == "timestamp":
        assert facts.at_time is not None, "--to-timestamp needs the offset found for the time"
        wanted = facts.latest if facts.at_time < 0 else facts.at_time
    else:
        if facts.committed is None:
            raise PlanError("it has no committed offset to shift")
        wanted = facts.committed + target.value
    return min(max(wanted, facts.earliest), facts.latest)


def plan_resets(
    target: ResetTarget, facts: Mapping[TopicPartitionKey, PartitionFacts]
) -> list[Reset]:
    """The plan: one row per partition, sorted by topic and partition."""
    plan = []
    for (topic, partition), known in sorted(facts.items()):
        try:
            offset = new_offset(target, known)
        except PlanError as exc:
            raise PlanError(f"cannot shift partition {topic}-{partition}: {exc}") from None
        plan.append(Reset(topic, partition, known.committed, offset))
    return plan


def plan_to_json(
    group: str, target: ResetTarget, plan: Sequence[Reset], executed: bool
) -> dict[str, object]:
    """The ``--json`` document of ``groups reset-offsets`` (docs/cli.md)."""
    return {
        "group": group,
        "reset": {"to": target.strategy, "value": target.json_value()},
        "executed": executed,
        "partitions": [reset.to_json() for reset in plan],
    }
