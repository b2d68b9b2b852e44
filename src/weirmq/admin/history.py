"""The recent traffic of the broker, for the console's overview graphs.

Theory of operation
-------------------
The broker counts bytes and records in (every append, `Broker.stats`) and out (records
Kafka's Fetch and ShareFetch hand out) as totals since it started; a graph wants rates.
`History` is fed the totals now and then (`sample`: the time and a `Totals`) and keeps,
per interval, the rates between two samples in a ring buffer of `HISTORY_SAMPLES_MAX`
entries: ten minutes at `HISTORY_INTERVAL_MS`, whatever the uptime, so its memory is
fixed. It reads no clock and sleeps nowhere; `Sampler` is the task that feeds it on the
broker's loop. The sampler runs from the broker's start, not from the admin API's: `weirmq
serve` loads the API on its first connection (`weirmq.admin.deferred`), and a person who
opens the console after an hour wants the last ten minutes, not an empty graph. So the
deferred admin service starts a sampler at once and hands its history to the API when
it loads; an admin API started on its own (tests, `weirmq.testing`) runs its own.

A total that goes down (a topic deleted takes its counters along) is a restart of that
counter, not negative traffic: the rate is then computed from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

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


class Sampler:
    """Feeds `history` what `read` gives (the time in ms and the totals) every
    `history.interval_ms`, on the running loop, from `start` to `stop`."""

    def __init__(self, history: History, read: Callable[[], tuple[int, Totals]]) -> None:
        self.history = history
        self._read = read
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Take the base of the first rates now, then sample in a task."""
        assert self._task is None, "started twice"
        self.history.sample(*self._read())
        self._task = asyncio.get_running_loop().create_task(self._run(), name="admin-history")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.history.interval_ms / 1000)
            try:
                self.history.sample(*self._read())
            except Exception:  # a bug here must not end the sampling, nor the broker
                log.exception("admin API: sampling the traffic history failed")
