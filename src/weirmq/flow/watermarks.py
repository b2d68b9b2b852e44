"""Dual watermarks with hysteresis: how full one guarded resource is, as a throttle.

A guarded resource (memory held by requests in flight, a topic's backlog, used disk) has a
level, in its own unit, and two marks:

    level:   0 ........ low ................... high .........
    ratio:   0.0 (free)  0.0 -> 1.0 (throttled)   1.0 (blocked)

Below `low` producers go at full speed. Between the marks the throttle ratio grows
continuously from 0.0 to 1.0 with the level, so producers slow down smoothly (the
adapter turns the ratio into its signal: a Kafka throttle time, an AMQP credit, an SQS
throttling error). At `high` the resource is blocked: new publish data must wait (or is
refused with a retriable error, when it would wait longer than its request allows).

Hysteresis. A single threshold makes a resource oscillate: the producers stop, the level
dips below the mark, they all resume at once, it rises again. So the blocked state is
left only when the level falls to `resume`, below `high`; while blocked, the ratio stays
1.0. The state machine is the table `TRANSITIONS`; each `update` applies the first row
whose condition holds for the current state:

    from       to         when
    FREE       BLOCKED    level >= high
    FREE       THROTTLED  level > low
    THROTTLED  BLOCKED    level >= high
    THROTTLED  FREE       level <= low
    BLOCKED    THROTTLED  level <= resume (and > low)
    BLOCKED    FREE       level <= low

Sans I/O: the caller measures the level and passes it; nothing here reads a clock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final


class Pressure(enum.Enum):
    FREE = "free"
    THROTTLED = "throttled"
    BLOCKED = "blocked"


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The marks of one resource, in its unit (bytes, records); see the module docstring."""

    low: int
    high: int
    resume: int | None = None
    """Where a blocked resource unblocks; default halfway between low and high."""

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high:
            raise ValueError(f"watermarks need 0 <= low < high, got {self.low}, {self.high}")
        if self.resume is not None and not self.low <= self.resume < self.high:
            raise ValueError(
                f"resume must be in [low, high): {self.resume} not in [{self.low}, {self.high})"
            )

    @property
    def resume_level(self) -> int:
        return self.resume if self.resume is not None else (self.low + self.high) // 2

    @classmethod
    def of_budget(cls, budget: int, low: float = 0.6, resume: float = 0.8) -> Watermarks:
        """Marks for a budget: throttling from `low` of it, blocked at all of it,
        unblocked again at `resume` of it."""
        return cls(int(budget * low), budget, int(budget * resume))


Condition = Callable[[int, Watermarks], bool]

TRANSITIONS: Final[dict[Pressure, tuple[tuple[Pressure, Condition], ...]]] = {
    Pressure.FREE: (
        (Pressure.BLOCKED, lambda level, marks: level >= marks.high),
        (Pressure.THROTTLED, lambda level, marks: level > marks.low),
    ),
    Pressure.THROTTLED: (
        (Pressure.BLOCKED, lambda level, marks: level >= marks.high),
        (Pressure.FREE, lambda level, marks: level <= marks.low),
    ),
    Pressure.BLOCKED: (
        (Pressure.FREE, lambda level, marks: level <= marks.low),
        (Pressure.THROTTLED, lambda level, marks: level <= marks.resume_level),
    ),
}
"""Per state, in order, the states it may move to and when (the table above)."""


class Gauge:
    """One guarded resource: its marks, its last level, its state and throttle ratio."""

    __slots__ = ("level", "marks", "name", "state", "transitions")

    def __init__(self, name: str, marks: Watermarks) -> None:
        self.name = name
        self.marks = marks
        self.level = 0
        self.state = Pressure.FREE
        self.transitions = 0
        """How many times the state changed (for metrics, and tests of oscillation)."""

    def update(self, level: int) -> Pressure:
        """Take a new level; returns the state it leaves the resource in."""
        self.level = level
        for target, condition in TRANSITIONS[self.state]:
            if condition(level, self.marks):
                self.state = target
                self.transitions += 1
                break
        return self.state

    @property
    def ratio(self) -> float:
        """0.0 (free) to 1.0 (blocked): how hard to slow producers down."""
        if self.state is Pressure.BLOCKED:
            return 1.0
        if self.state is Pressure.FREE:
            return 0.0
        low, high = self.marks.low, self.marks.high
        return min(1.0, max(0.0, (self.level - low) / (high - low)))
