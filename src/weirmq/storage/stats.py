"""Latency histograms cheap enough for the hot path, read by the metrics exporter.

A histogram is a fixed list of bucket bounds (seconds, Prometheus' convention) and one
counter per bucket. `observe` is a bisect and two additions: no locks, no allocation. A
histogram is written by one thread only (the loop, or the flusher thread for fsyncs);
a reader on another thread may see a count one observation ahead of the sum, which a
scrape tolerates and which never accumulates.

It lives in `storage/` because fsync timings are taken here and storage imports nothing
above it; the broker's request timings use the same class.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""100 µs to 30 s: a produce answered from memory to a fetch that waited its full time."""


class LatencyHistogram:
    """Observations in seconds, counted per bucket (upper bounds inclusive, plus +Inf)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        assert list(bounds) == sorted(bounds), bounds
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= bound) per bucket, ending with (+inf, count)."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out
