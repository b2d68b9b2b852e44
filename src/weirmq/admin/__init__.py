"""The HTTP admin API and Prometheus metrics of one broker.

- `weirmq.admin.http`: the aiohttp application (`create_app`) and the `AdminService` that
  runs it beside the Kafka listener, on the broker's own event loop;
- `weirmq.admin.views`: broker state as JSON documents (what each endpoint answers);
- `weirmq.admin.openapi`: the OpenAPI document describing those endpoints;
- `weirmq.admin.metrics`: the Prometheus collector reading the broker's counters.

Importing this package imports aiohttp and prometheus_client (a few hundred ms), which is
why the broker itself never imports it: whoever runs the broker builds the service.
"""

from .http import AdminService, create_app

__all__ = ["AdminService", "create_app"]
