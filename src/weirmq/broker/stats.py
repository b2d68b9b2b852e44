"""What the broker counts while it works, for the metrics exporter and the admin API.

The hot paths only add to plain integers and histograms here; nothing is formatted,
locked or allocated per request. The exporter (`weirmq.admin`) reads these counters when
scraped and turns them into Prometheus families, so the cost of metrics is paid by the
scraper, not by producers and consumers.

Everything is written on the event loop's thread, except the flush histogram, which the
storage flusher thread writes (see `storage.stats`).
"""

from __future__ import annotations

from collections.abc import Callable

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


REQUEST_LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""25 µs up: a small request answered from memory takes tens of microseconds, and the
broker's share of a millisecond of end-to-end latency must be readable."""


class RequestLatency(LatencyHistogram):
    """Seconds from a request's frame being read to its reply being handed to the socket,
    for one protocol (the connection pump observes it; `weirmq.server.connection`)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(REQUEST_LATENCY_BUCKETS_S)


class ApiStats:
    """Requests of one API key: how many, and how long from decode to response ready."""

    __slots__ = ("latency", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.latency = LatencyHistogram()


DELAY_LATENESS_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
)  # fmt: skip
"""1 ms up: the goal is delivery within 100 ms of the due time, so resolution is there."""


class DelayStats:
    """Delayed delivery (`weirmq.broker.delays`): totals since start, and what is pending."""

    __slots__ = ("delivered", "diverted", "dropped", "lateness", "pending")

    def __init__(self) -> None:
        self.diverted = 0
        """Records produced with a future due time, written to the delayed log."""
        self.pending = 0
        """Records in the delayed log not yet delivered (counted from the index at start)."""
        self.delivered = 0
        """Records appended to their topics when due."""
        self.dropped = 0
        """Records whose topic (or partition) was deleted before they were due."""
        self.lateness = LatencyHistogram(DELAY_LATENESS_BUCKETS_S)
        """Seconds from each delivered record's due time to its append."""


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
        self.connections_open_by_protocol: dict[str, int] = {}
        """Open connections of each protocol the connection pump serves ("kafka", "amqp"),
        by the adapter's name; `connections_open` is their sum."""
        self.connection_gauges: dict[str, Callable[[], int]] = {}
        """Open connections of a protocol served elsewhere, read when asked: the SQS API's
        aiohttp server registers how many it holds while it runs."""
        self.delays = DelayStats()
        self.request_latencies: dict[tuple[str, str], RequestLatency] = {}
        """By (protocol, kind of request): frame read to reply written. Kafka's kinds are
        API keys as text ("0" is Produce)."""
        self.kafka_request_errors: dict[tuple[int, int], int] = {}
        """Kafka requests answered with an error, by (API key, error code): a request
        counts once for each distinct code in its answer (top level or per resource).
        Numbers, not names: the exporter names them when scraped."""

    def connections_by_protocol(self) -> dict[str, int]:
        """Open connections per protocol, whoever counts them."""
        found = dict(self.connections_open_by_protocol)
        for protocol, gauge in self.connection_gauges.items():
            found[protocol] = found.get(protocol, 0) + gauge()
        return found

    def request_latency(self, protocol: str, kind: str) -> RequestLatency:
        histogram = self.request_latencies.get((protocol, kind))
        if histogram is None:
            histogram = self.request_latencies[protocol, kind] = RequestLatency()
        return histogram

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
