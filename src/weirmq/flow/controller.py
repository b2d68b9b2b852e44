"""The flow controller: one decision per request from every guarded resource and quota.

Guarded resources are `watermarks.Gauge`s, named: the broker's memory held by requests in
flight ("memory"), free disk per data directory ("disk"), each opted-in topic's backlog
("backlog:TOPIC"). The broker measures each level and `update`s it; the controller keeps
no clock and measures nothing itself.

A request asks `decide(ctx, kind, size_bytes, now_ms, topics)`:

- every quota of the client (`quotas.QuotaTable`: produce and fetch bytes, requests) is
  charged, and asks a throttle (Kafka's formula);
- a publish (kind PRODUCE) also feels the pressure of the memory gauge, the disk gauge and
  the backlog gauges of the topics it writes: the highest ratio r gives a throttle of
  r * `PRESSURE_THROTTLE_MS_MAX`, so producers slow down smoothly as a resource fills;
  once admitted, its size is added to those backlogs at once (the next sample measures
  them afresh), so a backlog blocks as soon as admitted publishes reach its bound, not a
  sample later: it exceeds the bound by at most the publish that crossed it;
- a publish to a blocked resource must wait: the decision names the blocked gauges
  (`wait_for`), and the adapter waits until they unblock (or refuses the publish with
  its protocol's retriable error when that would outlast the request's timeout). A
  gauge guarded with `hold=False` throttles but never makes publishes wait: free disk
  (the storage layer refuses publishes at once: waiting for an operator to free space
  would only hold memory for nothing) and request memory (the connection pump bounds it
  by not reading large requests; holding small publishes would free none of what, say,
  slow senders' partial frames hold, and would let them stop every producer).

Reads, group traffic and admin requests are never blocked by pressure (consumers are what
drains a backlog); only quotas throttle them.

The decision's throttle is the largest asked; Kafka sends it as `throttle_time_ms` and
holds the response back by it (KIP-219), AMQP will turn it into Connection.Blocked and
Unblocked, SQS into its throttling error.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ..types import RequestContext
from .quotas import QuotaTable
from .watermarks import Gauge, Pressure, Watermarks

PRESSURE_THROTTLE_MS_MAX: Final = 1_000
"""The throttle of a resource just below its high mark: long enough to slow a producer
several-fold, short enough that it notices an improvement within a second."""


class Kind(enum.Enum):
    PRODUCE = "produce"
    FETCH = "fetch"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Decision:
    throttle_ms: int = 0
    wait_for: frozenset[str] = field(default_factory=frozenset)
    """Blocked gauges a publish must wait for (empty: go ahead)."""
    reason: str | None = None
    """The gauge or quota that asked the throttle, for logs and metrics."""


ADMIT: Final = Decision()


class FlowController:
    """See the module docstring."""

    def __init__(self, quotas: QuotaTable | None = None) -> None:
        self.quotas = quotas or QuotaTable()
        self.gauges: dict[str, Gauge] = {}
        self.not_holding: set[str] = set()
        """Gauges whose blocked state only throttles publishes, never holds them."""
        self._pressed: set[str] = set()
        """Gauges not FREE: kept up to date so that `idle` costs no loop per request."""
        self.throttled_requests = 0
        self.throttle_ms_total = 0
        self.refused_publishes = 0
        """Publishes refused after waiting their whole timeout for a blocked resource."""

    # --- the resources ------------------------------------------------------------------

    def guard(self, name: str, marks: Watermarks, *, hold: bool = True) -> Gauge:
        """Guard a resource (or give an existing one new marks); `hold`: whether its
        blocked state makes publishes wait (see the module docstring)."""
        if hold:
            self.not_holding.discard(name)
        else:
            self.not_holding.add(name)
        gauge = self.gauges.get(name)
        if gauge is None:
            gauge = self.gauges[name] = Gauge(name, marks)
        else:
            gauge.marks = marks
        return gauge

    def unguard(self, name: str) -> None:
        self.gauges.pop(name, None)
        self.not_holding.discard(name)
        self._pressed.discard(name)

    def update(self, name: str, level: int) -> Pressure:
        """A resource's new level; its state after it."""
        state = self.gauges[name].update(level)
        if state is Pressure.FREE:
            self._pressed.discard(name)
        else:
            self._pressed.add(name)
        return state

    def blocked(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset(
            n for n in names if (g := self.gauges.get(n)) and g.state is Pressure.BLOCKED
        )

    # --- deciding -----------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No quota, and every guarded resource free: every request is admitted as it is
        (the fast path: nothing to measure)."""
        return not self.quotas.any() and not self._pressed and not self._backlogs

    @property
    def _backlogs(self) -> bool:
        """Some topic's backlog is guarded: publishes are charged to it as they come, so
        even a free one is not idle (a fast producer would overshoot between samples)."""
        return len(self.gauges) > self._resources

    @property
    def _resources(self) -> int:
        """The broker-wide gauges guarded; every other gauge is a topic's backlog."""
        return ("memory" in self.gauges) + ("disk" in self.gauges)

    def decide(
        self,
        ctx: RequestContext,
        kind: Kind,
        size_bytes: int,
        now_ms: int,
        topics: Iterable[str] = (),
    ) -> Decision:
        throttle, reason = 0, None
        charges: list[tuple[str, float]] = [] if not self.quotas.any() else [("request", 1.0)]
        if charges and kind is Kind.PRODUCE:
            charges.append(("produce_bytes", float(size_bytes)))
        elif charges and kind is Kind.FETCH:
            charges.append(("fetch_bytes", 0.0))  # charged with the answer's size, after
        if charges:
            charges.append(("request_time", 0.0))  # charged after handling: `handled`
        for quota_kind, amount in charges:
            asked = self.quotas.record(ctx.client_id, quota_kind, amount, now_ms)
            if asked > throttle:
                throttle, reason = asked, f"quota {quota_kind}"
        wait_for: frozenset[str] = frozenset()
        if kind is Kind.PRODUCE:
            topics = list(topics)
            names = ["memory", "disk", *(f"backlog:{t}" for t in topics)]
            pressed = [g for n in names if (g := self.gauges.get(n)) is not None]
            for gauge in pressed:
                asked = int(gauge.ratio * PRESSURE_THROTTLE_MS_MAX)
                if asked > throttle:
                    throttle, reason = asked, gauge.name
            wait_for = frozenset(
                g.name
                for g in pressed
                if g.state is Pressure.BLOCKED and g.name not in self.not_holding
            )
            if not wait_for:
                self._charge(topics, size_bytes)
        if throttle:
            self.throttled_requests += 1
            self.throttle_ms_total += throttle
        if not throttle and not wait_for:
            return ADMIT
        return Decision(throttle, wait_for, reason)

    def still_blocked(
        self, wait_for: Iterable[str], size_bytes: int, topics: Iterable[str]
    ) -> frozenset[str]:
        """A waiting publish looks again: the gauges of `wait_for` still blocked, or none,
        and then it goes ahead and is charged as `decide` charges an admitted one (so the
        publishes released by one sample do not all pile onto the backlog at once)."""
        blocked = self.blocked(wait_for)
        if not blocked:
            self._charge(topics, size_bytes)
        return blocked

    def _charge(self, topics: Iterable[str], size_bytes: int) -> None:
        """An admitted publish counts in its topics' backlogs at once: the bound then holds
        between two samples (the next sample measures them afresh)."""
        for topic in topics:
            name = f"backlog:{topic}"
            if (backlog := self.gauges.get(name)) is not None:
                self.update(name, backlog.level + size_bytes)

    def handled(self, ctx: RequestContext, elapsed_ms: float, now_ms: int) -> None:
        """A request of `ctx`'s took `elapsed_ms` of handler time (Kafka's request quota
        is a share of handler time: its throttle applies from the client's next request)."""
        self.quotas.record(ctx.client_id, "request_time", elapsed_ms, now_ms)

    def ratios(self) -> Mapping[str, float]:
        """Each guarded resource's throttle ratio, for metrics."""
        return {name: gauge.ratio for name, gauge in sorted(self.gauges.items())}
