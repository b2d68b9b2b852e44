"""The broker's timer service on the asyncio loop (`weirmq.types.Timers`).

Deadlines are milliseconds on the broker's one clock; the loop's own timer needs a delay,
so a deadline becomes `loop.call_later(deadline - clock())`. If the wall clock jumps, a
timer fires early or late by the jump, as Kafka's do; whoever is called re-reads the
clock and reschedules if its deadline has not come (the group coordinator's `tick` and a
fetch long poll both do).

The loop is the one running when `call_at` is called, so a broker built outside a loop
(tests that drive the coordinator directly) schedules nothing until it runs in one: a
`Timer` that was never scheduled is returned instead, which tests using
`weirmq.testing.ManualTimers` never see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..types import Clock, Timer


class _Unscheduled:
    """No running loop: nothing to cancel."""

    def cancel(self) -> None:
        pass


UNSCHEDULED = _Unscheduled()
"""Returned when no loop runs: the caller should schedule again later."""


class LoopTimers:
    """`Timers` on the running asyncio loop; see the module docstring."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> Timer:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return UNSCHEDULED
        delay_s = max(deadline_ms - self._clock(), 0) / 1000
        return loop.call_later(delay_s, callback)
