"""The one admission decision every request passes through, whatever its protocol.

A protocol adapter asks `Admission.admit` once per request, before handling it, and
turns the `Decision` into its own signal: Kafka stamps `throttle_time_ms` on the response
and holds the response back by it (KIP-219: the client waits that long before its next
request to this broker), AMQP will send Connection.Blocked, SQS a throttling error.
Because every adapter asks here, back-pressure is one policy with one set of limits
rather than one per protocol.

The policy is the broker's `controller.FlowController` (quotas, guarded resources); an
`Admission` without one admits everything at once. After handling, the adapter reports
what it learned only then: the bytes a fetch returns (`fetched`, the consumer byte-rate
quota, as Kafka charges it) and the handler time (`handled`, the request quota).

Sans I/O: the decision takes the request's context, its size and the time, and returns
what must happen; it never sleeps, blocks or reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..types import RequestContext
from .controller import ADMIT, Decision, FlowController, Kind

__all__ = ["ADMIT", "Admission", "Decision", "Kind"]


class Admission:
    """The admission policy; see the module docstring."""

    def __init__(self, controller: FlowController | None = None) -> None:
        self.controller = controller

    def admit(
        self,
        ctx: RequestContext,
        size_bytes: int,
        now_ms: int,
        kind: Kind = Kind.OTHER,
        topics: Iterable[str] = (),
    ) -> Decision:
        """Decide for one request of `size_bytes` from `ctx` at `now_ms`."""
        if self.controller is None or self.controller.idle:
            return ADMIT
        return self.controller.decide(ctx, kind, size_bytes, now_ms, topics)

    def still_blocked(
        self, decision: Decision, size_bytes: int, topics: Iterable[str]
    ) -> frozenset[str]:
        """A publish `decision` made wait looks again (the adapter's timer says when):
        the resources still blocked, or none, and then it goes ahead (and is counted)."""
        if self.controller is None:
            return frozenset()
        return self.controller.still_blocked(decision.wait_for, size_bytes, topics)

    def fetched(self, ctx: RequestContext, size_bytes: int, now_ms: int) -> int:
        """A fetch answered `size_bytes` of records: the throttle the client's consumer
        byte-rate quota asks now (0 without one)."""
        if self.controller is None or self.controller.idle:
            return 0
        return self.controller.quotas.record(ctx.client_id, "fetch_bytes", size_bytes, now_ms)

    def handled(self, ctx: RequestContext, elapsed_ms: float, now_ms: int) -> None:
        if self.controller is not None and not self.controller.idle:
            self.controller.handled(ctx, elapsed_ms, now_ms)
