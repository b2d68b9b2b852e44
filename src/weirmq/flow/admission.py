"""The one admission decision every request passes through, whatever its protocol.

A protocol adapter asks `Admission.admit` once per request, before handling it, and
turns the `Decision` into its own signal: Kafka stamps `throttle_time_ms` on the response
(and the client waits that long before its next request to this broker), AMQP will send
Connection.Blocked, SQS a throttling error. Because every adapter asks here, back-pressure
is one policy with one set of limits rather than one per protocol.

Sans I/O: the decision takes the request's context, its size and the time, and returns
what must happen; it never sleeps, blocks or reads a clock.

Today the policy admits everything at once (`ADMIT`): this is the seam. Quotas (bytes per
second per client, memory held by requests in flight, disk headroom) come with the
back-pressure issue, as a policy behind this same call.
"""

from __future__ import annotations

from typing import NamedTuple

from ..types import RequestContext


class Decision(NamedTuple):
    """Handle the request, then ask the client to hold off for `throttle_ms` (Kafka's
    throttle_time_ms). Refusing outright comes with the quotas."""

    throttle_ms: int = 0


ADMIT = Decision()
"""Handle at once, no throttle."""


class Admission:
    """The admission policy; see the module docstring."""

    def admit(self, ctx: RequestContext, size_bytes: int, now_ms: int) -> Decision:
        """Decide for one request of `size_bytes` from `ctx` at `now_ms`."""
        return ADMIT
