"""What the broker counts while it works, for the metrics exporter and the admin API.

The hot paths only add to plain integers and histograms here; nothing is formatted,
locked or allocated per request. The exporter (`weirmq.admin`) reads these counters when
scraped and turns them into Prometheus families, so the cost of metrics is paid by the
scraper, not by producers and consumers.

Everything is written on the event loop's thread, except the flush histogram, which the
storage flusher thread writes (see `storage.stats`).
"""

from __future__ import annotations

from ..storage.stats import LatencyHistogram


class TopicStats:
    """Totals since the broker started, for one topic."""

    __slots__ = ("bytes_in", "bytes_out", "records_in", "records_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        """Record-batch bytes appended (duplicates of idempotent retries not counted)."""
        self.records_in = 0
        self.bytes_out = 0
        """Record-batch bytes returned by Fetch."""
        self.records_out = 0
        """Records in the batches returned by Fetch (whole batches, as sent)."""


class ApiStats:
    """Requests of one API key: how many, and how long from decode to response ready."""

    __slots__ = ("latency", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.latency = LatencyHistogram()


class BrokerStats:
    """All counters of one broker."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.apis: dict[int, ApiStats] = {}
        self.connections_open = 0
        self.connections_total = 0
        """Accepted since start."""
        self.connections_closed_for_errors = 0
        """Closed because a frame could not be answered (bad header, body, version)."""

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        return stats

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series disappear with it (a re-created one starts at 0)."""
        self.topics.pop(name, None)
