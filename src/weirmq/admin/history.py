"""The recent traffic of the broker, for the console's overview graphs.

Theory of operation
-------------------
The broker counts bytes and records in (every append, `Broker.stats`) and out (records
Kafka's Fetch and ShareFetch hand out) as totals since it started; a graph wants rates.
`History` is fed the totals now and then (`sample`: the time and a `Totals`) and keeps,
per interval, the rates between two samples in a ring buffer of `HISTORY_SAMPLES_MAX`
entries: ten minutes at `HISTORY_INTERVAL_MS`, whatever the uptime, so its memory is
fixed. It reads no clock and sleeps nowhere: `weirmq.admin.http.AdminService` runs the
task that feeds it on the broker's loop, started and stopped with the admin API (which
`weirmq serve` loads on its first connection: the history starts then).

A total that goes down (a topic deleted takes its counters along) is a restart of that
counter, not negative traffic: the rate is then computed from zero.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

HISTORY_INTERVAL_MS = 2_000
"""Between two samples: fine enough for a graph a person watches."""
HISTORY_SAMPLES_MAX = 300
"""Samples kept: ten minutes at `HISTORY_INTERVAL_MS`; each is six numbers."""


@dataclass(frozen=True, slots=True)
class Totals:
    """The broker's counters at one moment (since it started)."""

    bytes_in: int
    bytes_out: int
    records_in: int
    records_out: int
    connections: int
    """Open now (a level, not a total)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """Rates over the interval ending at `at_ms`."""

    at_ms: int
    bytes_in_per_s: float
    bytes_out_per_s: float
    messages_in_per_s: float
    messages_out_per_s: float
    connections: int


class History:
    """A ring buffer of `Sample` (see the module docstring)."""

    def __init__(
        self, interval_ms: int = HISTORY_INTERVAL_MS, samples_max: int = HISTORY_SAMPLES_MAX
    ) -> None:
        assert interval_ms > 0 and samples_max > 0
        self.interval_ms = interval_ms
        self._samples: deque[Sample] = deque(maxlen=samples_max)
        self._last: tuple[int, Totals] | None = None

    def sample(self, now_ms: int, totals: Totals) -> Sample | None:
        """Take the totals at `now_ms`; returns the sample they complete (None for the
        first, or when the clock has not moved forward)."""
        last, self._last = self._last, (now_ms, totals)
        if last is None:
            return None
        then_ms, before = last
        elapsed_ms = now_ms - then_ms
        if elapsed_ms <= 0:
            self._last = last  # keep the older base: a rate needs time to pass
            return None
        seconds = elapsed_ms / 1000
        sample = Sample(
            at_ms=now_ms,
            bytes_in_per_s=_rate(before.bytes_in, totals.bytes_in, seconds),
            bytes_out_per_s=_rate(before.bytes_out, totals.bytes_out, seconds),
            messages_in_per_s=_rate(before.records_in, totals.records_in, seconds),
            messages_out_per_s=_rate(before.records_out, totals.records_out, seconds),
            connections=totals.connections,
        )
        self._samples.append(sample)
        return sample

    def samples(self) -> list[Sample]:
        """Oldest first."""
        return list(self._samples)


def _rate(before: int, now: int, seconds: float) -> float:
    delta = now - before if now >= before else now  # a counter that restarted from zero
    return delta / seconds
