"""The HTTP admin API and Prometheus metrics of one broker.

- `weirmq.admin.http`: the aiohttp application (`create_app`) and the `AdminService` that
  runs it beside the Kafka listener, on the broker's own event loop;
- `weirmq.admin.deferred`: `DeferredAdminService`, which opens the admin port at start-up
  and loads `weirmq.admin.http` on its first connection (what ``weirmq serve`` runs), on
  the generic `DeferredService` that the SQS API's port uses too;
- `weirmq.admin.views`: broker state as JSON documents (what each endpoint answers);
- `weirmq.admin.openapi`: the OpenAPI document describing those endpoints;
- `weirmq.admin.metrics`: the Prometheus collector reading the broker's counters;
- `weirmq.admin.operations`: the console's endpoints (overview, connections, queues,
  message browser, produce, offsets reset, trim, redrive), with `weirmq.admin.history`
  (the traffic history's ring buffer) and `weirmq.admin.requests` (reading requests);
- `weirmq.admin.token`: the bearer token destructive requests need (standard library
  only, so the deferred service can name it before aiohttp loads).

`weirmq.admin.http` imports aiohttp and prometheus_client (~16 MB and ~0.15 s),
so this package imports it only when `AdminService` or `create_app` is asked of it, and
the broker itself never imports it: whoever runs the broker builds the service.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .http import AdminService, create_app

__all__ = ["AdminService", "create_app"]


def __getattr__(name: str) -> Any:
    """`AdminService` and `create_app`, imported from `weirmq.admin.http` on first use."""
    if name in __all__:
        return getattr(importlib.import_module("weirmq.admin.http"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
