"""Time that moves only when a test says so: a clock and a timer service on it.

Inject both into a `weirmq.broker.core.Broker` (`Broker(settings, clock=clock,
timers=timers)`) and every deadline the broker has (fetch long polls, group sessions and
rebalances, later locks, delays and throttles) fires when the test calls
`timers.advance(ms)`, in deadline order, never on its own. A test of a 30-second session
timeout takes microseconds and cannot be flaky.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class ManualClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        assert ms >= 0, "time does not go backwards"
        self.now_ms += ms


class ManualTimer:
    """One scheduled callback of `ManualTimers`."""

    __slots__ = ("callback", "cancelled", "deadline_ms")

    def __init__(self, deadline_ms: int, callback: Callable[[], None]) -> None:
        self.deadline_ms = deadline_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    """`weirmq.types.Timers` on a `ManualClock`: callbacks run only in `advance`/`run_due`.

    A timer whose deadline has already come when it is set still waits for the next
    `advance` or `run_due`, so a callback never runs inside the code that scheduled it
    (as with the loop's timers)."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self._heap: list[tuple[int, int, ManualTimer]] = []
        self._order = itertools.count()  # ties fire in the order they were set

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> ManualTimer:
        timer = ManualTimer(deadline_ms, callback)
        heapq.heappush(self._heap, (deadline_ms, next(self._order), timer))
        return timer

    @property
    def pending(self) -> list[int]:
        """Deadlines of the timers not yet fired or cancelled, soonest first."""
        return sorted(t.deadline_ms for _, _, t in self._heap if not t.cancelled)

    def advance(self, ms: int) -> int:
        """Move the clock by `ms`, running every timer due on the way at its own time (the
        clock reads each timer's deadline while it runs). Returns how many ran."""
        assert ms >= 0, "time does not go backwards"
        end = self.clock.now_ms + ms
        ran = 0
        while self._heap and self._heap[0][0] <= end:
            deadline, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.clock.now_ms = max(self.clock.now_ms, deadline)
            timer.callback()
            ran += 1
        self.clock.now_ms = end
        return ran

    def run_due(self) -> int:
        """Run the timers due now without moving the clock."""
        return self.advance(0)
