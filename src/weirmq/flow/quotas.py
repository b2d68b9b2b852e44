"""Client quotas as Kafka computes them: byte and request rates over a sliding window.

Kafka (KIP-13, KIP-124, KIP-219) measures each client's rate over `window_count` samples
of `sample_ms` each (quota.window.num = 11, quota.window.size.seconds = 1) and, when the
rate exceeds the quota, throttles the client for just long enough that its rate over the
window falls back to the quota:

    throttle_ms = (observed_rate - quota) / quota * window_ms

with `window_ms` the span the samples cover (the full window once enough time has passed;
less for a new client, so that a burst right after connecting is not under-throttled),
capped at `THROTTLE_MS_MAX`. The throttle is sent in `throttle_time_ms` and the response
is held back by it (KIP-219), so well-behaved clients back off by themselves.

A `RateMeter` keeps at most `window_count` samples: its memory does not grow with time or
traffic. `QuotaTable` keeps one meter per (client id, kind), bounded by `CLIENTS_MAX`
(the least recently seen client is forgotten first; a forgotten client starts afresh,
which at worst lets a client that hides among thousands of ids burst once).

Sans I/O: every call takes `now_ms`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

THROTTLE_MS_MAX: Final = 30_000
"""Longest throttle ever asked of a client (a client's request timeout is 30 s)."""
CLIENTS_MAX: Final = 10_000
"""Clients whose rates are kept at once."""


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    sample_ms: int = 1_000
    window_count: int = 11

    def __post_init__(self) -> None:
        if self.sample_ms <= 0 or self.window_count < 2:
            raise ValueError("a quota window needs sample_ms > 0 and at least 2 samples")


class RateMeter:
    """Amount per second over a sliding window of samples (Kafka's `Rate` over
    `SampledStat`)."""

    __slots__ = ("_first_ms", "_samples", "_window")

    def __init__(self, window: QuotaWindow, now_ms: int) -> None:
        self._window = window
        self._samples: dict[int, float] = {}
        """Sample start (ms, a multiple of sample_ms) -> amount recorded in it."""
        self._first_ms = now_ms

    def record(self, amount: float, now_ms: int) -> None:
        start = now_ms - now_ms % self._window.sample_ms
        self._samples[start] = self._samples.get(start, 0.0) + amount
        self._purge(now_ms)

    def _purge(self, now_ms: int) -> None:
        oldest = now_ms - self._window.sample_ms * self._window.window_count
        for start in [s for s in self._samples if s + self._window.sample_ms <= oldest]:
            del self._samples[start]

    def window_ms(self, now_ms: int) -> int:
        """The span the rate is measured over: the whole window, or (for a meter younger
        than it) its age, at least one sample."""
        full = self._window.sample_ms * self._window.window_count
        return max(self._window.sample_ms, min(full, now_ms - self._first_ms))

    def rate(self, now_ms: int) -> float:
        """Per second, over `window_ms`."""
        self._purge(now_ms)
        return sum(self._samples.values()) * 1000.0 / self.window_ms(now_ms)


def throttle_ms(rate: float, quota: float, window_ms: int) -> int:
    """How long a client at `rate` must pause for its rate over the window to come back
    to `quota` (Kafka's ClientQuotaManager.throttleTime); 0 within quota."""
    if quota <= 0 or rate <= quota:
        return 0
    return min(THROTTLE_MS_MAX, int((rate - quota) / quota * window_ms))


class QuotaTable:
    """Per client id and kind (produce bytes, fetch bytes, requests): a meter and its
    quota; see the module docstring."""

    def __init__(
        self,
        window: QuotaWindow | None = None,
        resolver: Callable[[str], Mapping[str, float]] | None = None,
        any_resolved: Callable[[], bool] | None = None,
    ) -> None:
        self._window = window or QuotaWindow()
        self._quotas: dict[tuple[str | None, str], float] = {}
        """(client id, or None for the default, kind) -> units per second."""
        self._resolver = resolver
        """client id -> its quota per kind, when quotas are kept elsewhere (the broker's
        store, broker/quotas.py); consulted before `set_quota`'s."""
        self._any_resolved = any_resolved
        """Whether the resolver has any quota at all (None: assume it may)."""
        self._meters: OrderedDict[tuple[str, str], RateMeter] = OrderedDict()

    def any(self) -> bool:
        """Whether any quota is set: none means nothing to measure (the fast path)."""
        if self._quotas:
            return True
        if self._resolver is None:
            return False
        return self._any_resolved is None or self._any_resolved()

    def set_quota(self, client_id: str | None, kind: str, per_second: float | None) -> None:
        """Set (or with None remove) the quota of a client id, or of every client
        without its own (client_id None)."""
        if per_second is None:
            self._quotas.pop((client_id, kind), None)
        else:
            if per_second <= 0:
                raise ValueError(f"a quota must be positive, got {per_second}")
            self._quotas[(client_id, kind)] = float(per_second)

    def quota(self, client_id: str, kind: str) -> float | None:
        if self._resolver is not None:
            resolved = self._resolver(client_id).get(kind)
            if resolved is not None:
                return resolved
        found = self._quotas.get((client_id, kind))
        return found if found is not None else self._quotas.get((None, kind))

    def quotas(self) -> dict[tuple[str | None, str], float]:
        return dict(self._quotas)

    def record(self, client_id: str, kind: str, amount: float, now_ms: int) -> int:
        """Count `amount` for the client; the throttle its quota asks now (0 without one)."""
        quota = self.quota(client_id, kind)
        if quota is None:
            return 0
        key = (client_id, kind)
        meter = self._meters.get(key)
        if meter is None:
            if len(self._meters) >= CLIENTS_MAX:
                self._meters.popitem(last=False)
            meter = self._meters[key] = RateMeter(self._window, now_ms)
        else:
            self._meters.move_to_end(key)
        meter.record(amount, now_ms)
        return throttle_ms(meter.rate(now_ms), quota, meter.window_ms(now_ms))
