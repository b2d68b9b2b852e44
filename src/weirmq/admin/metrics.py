"""Prometheus metrics of one broker, computed when scraped.

Theory of operation
-------------------
The broker's hot paths never touch prometheus_client: they add to plain integers and
`LatencyHistogram`s in `broker.stats` (`weirmq.broker.stats`) and the storage layer keeps
its own sizes and offsets. `BrokerCollector` is a prometheus_client custom collector that
reads all of that when `/metrics` is scraped and builds the metric families then. So a
produce pays two additions for being measured, and a broker nobody scrapes pays nothing.

Each broker gets its own `CollectorRegistry` (`metrics_registry`), never the process-wide
default one: tests run several brokers in one process, and a second broker registering on
the global registry would either fail or report the first one's numbers. The registry also
carries prometheus_client's process collector (memory, CPU, file descriptors).

The collector runs on the event loop thread, which writes every counter it reads, so a
scrape sees a consistent picture, except the flush histogram, written by the storage
flusher thread: a scrape may see its count one observation ahead of its sum, which is
harmless and never accumulates (see `weirmq.storage.stats`). The log cleaner's numbers
(`weirmq.storage.cleaner.CleanerStats`) are written by its own thread in the same way.

Naming follows Prometheus' conventions: a ``weirmq_`` prefix, ``_total`` on counters,
base units (``_seconds``, ``_bytes``) in the name. docs/admin-api.md lists every family;
a test checks that list against what a scrape exports.

Exchanges are read at scrape time as well: their counters from `broker.exchanges.stats`,
which the routing path adds to, and their routing lag (records written to an exchange and
not routed yet, 0 but while the broker re-routes after a crash) from its describe view.

Consumer groups are read from the coordinator's views at scrape time too: a group's lag on
a partition is exported only where it is known (a committed offset and a log to compare it
with), so a group that never committed has no lag series rather than a made-up one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

from kio.schema.index import api_key_map
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from weirmq import __version__
from weirmq.broker.core import Broker
from weirmq.broker.stats import ApiStats, RequestLatency
from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.dispatch import API_VERSIONS

from .views import uptime_ms

PREFIX = "weirmq"


def metrics_registry(broker: Broker) -> CollectorRegistry:
    """A registry of its own for `broker`: its collector and the process collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The scrape body and its content type: OpenMetrics when the scraper asks for it
    in ``Accept`` (Prometheus does), else the classic text format."""
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


def api_name(api_key: int) -> str:
    """Kafka's name of an API key ("Produce", "ListOffsets"), from kio's table of them."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"Unknown{api_key}"
    return "".join(word.capitalize() for word in name.split("_"))


def _error_name(code: int) -> str:
    """Kafka's name of an error code ("UNKNOWN_TOPIC_OR_PARTITION"), or the number."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class BrokerCollector(Collector):
    """Reads one broker's counters, sizes and offsets at scrape time; see the module
    docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._broker()
        yield from self._traffic()
        yield from self._requests()
        yield from self._connections()
        yield from self._partitions()
        yield self._flushes()
        yield from self._cleaner()
        yield from self._groups()
        yield from self._exchanges()
        yield from self._delays()
        yield from self._shares()
        yield from self._flow()

    def _broker(self) -> Iterator[Metric]:
        broker = self.broker
        info = GaugeMetricFamily(
            f"{PREFIX}_broker_info",
            "Always 1; the labels identify the broker.",
            labels=["version", "node_id", "cluster_id"],
        )
        info.add_metric([__version__, str(broker.node_id), broker.cluster_id], 1)
        yield info
        yield GaugeMetricFamily(
            f"{PREFIX}_uptime_seconds",
            "Seconds since the broker started.",
            value=uptime_ms(broker) / 1000,
        )
        topics = list(broker.topics)
        yield GaugeMetricFamily(f"{PREFIX}_topics", "Topics.", value=len(topics))
        yield GaugeMetricFamily(
            f"{PREFIX}_partitions",
            "Partitions of all topics.",
            value=sum(topic.partitions for topic in topics),
        )

    def _traffic(self) -> Iterator[Metric]:
        families = {
            "bytes_in": "Record-batch bytes appended to the topic (retried duplicates not "
            "counted).",
            "records_in": "Records appended to the topic.",
            "bytes_out": "Record-batch bytes returned by Fetch from the topic.",
            "records_out": "Records in the batches returned by Fetch from the topic.",
        }
        for attribute, documentation in families.items():
            family = CounterMetricFamily(
                f"{PREFIX}_topic_{attribute}", documentation, labels=["topic"]
            )
            for topic, stats in sorted(self.broker.stats.topics.items()):
                family.add_metric([topic], getattr(stats, attribute))
            yield family

    def _requests(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            f"{PREFIX}_requests", "Kafka requests answered, by API.", labels=["api"]
        )
        latency = HistogramMetricFamily(
            f"{PREFIX}_request_duration_seconds",
            "Seconds from a decoded Kafka request to its response being ready, by API.",
            labels=["api"],
        )
        observed = self.broker.stats.apis
        # Every API the broker speaks has a series from the start, at 0, so rate() and
        # alerts work from the first request on instead of after it.
        for key in sorted(set(API_VERSIONS) | set(observed)):
            stats = observed.get(key) or ApiStats()
            name = api_name(key)
            requests.add_metric([name], stats.requests)
            latency.add_metric([name], _buckets(stats.latency.cumulative()), stats.latency.sum)
        yield requests
        yield latency
        # The broker's share of what a client waits: measured by the connection pump, so it
        # includes framing, queueing behind earlier replies and the write, not only the
        # handler. The "kafka" series exists from the start, at 0.
        served = HistogramMetricFamily(
            f"{PREFIX}_request_latency_seconds",
            "Seconds from a request's frame being read to its response being handed to the "
            "socket, by protocol and request.",
            labels=["protocol", "request"],
        )
        histograms = self.broker.stats.request_latencies
        kafka = {("kafka", str(key)) for key in API_VERSIONS}
        for protocol, kind in sorted(kafka | set(histograms)):
            histogram = histograms.get((protocol, kind)) or RequestLatency()
            request = api_name(int(kind)) if protocol == "kafka" and kind.isdigit() else kind
            served.add_metric([protocol, request], _buckets(histogram.cumulative()), histogram.sum)
        yield served
        errors = CounterMetricFamily(
            f"{PREFIX}_kafka_request_errors",
            "Kafka requests answered with an error code (top level or per partition or "
            "resource), by API and error; a request counts once per distinct error.",
            labels=["api", "error"],
        )
        for (key, code), count in sorted(self.broker.stats.kafka_request_errors.items()):
            errors.add_metric([api_name(key), _error_name(code)], count)
        yield errors

    def _connections(self) -> Iterator[Metric]:
        stats = self.broker.stats
        yield GaugeMetricFamily(
            f"{PREFIX}_connections_open", "Open Kafka connections.", value=stats.connections_open
        )
        yield CounterMetricFamily(
            f"{PREFIX}_connections_accepted",
            "Kafka connections accepted.",
            value=stats.connections_total,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_connections_closed_for_errors",
            "Kafka connections closed because a request could not be answered (bad header, "
            "body or version).",
            value=stats.connections_closed_for_errors,
        )

    def _partitions(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            f"{PREFIX}_partition_size_bytes", "Bytes of the partition's log.", labels=labels
        )
        start = GaugeMetricFamily(
            f"{PREFIX}_partition_log_start_offset",
            "First offset still in the partition's log.",
            labels=labels,
        )
        end = GaugeMetricFamily(
            f"{PREFIX}_partition_log_end_offset",
            "Offset the next record appended to the partition gets (the high watermark).",
            labels=labels,
        )
        segments = GaugeMetricFamily(
            f"{PREFIX}_partition_segments", "Segment files of the partition.", labels=labels
        )
        offline = GaugeMetricFamily(
            f"{PREFIX}_partition_offline",
            "1 when the partition's log is offline (an I/O error or a damaged file).",
            labels=labels,
        )
        for (topic, partition), log in sorted(self.broker.logs.logs().items()):
            values = [topic, str(partition)]
            size.add_metric(values, log.size_bytes)
            start.add_metric(values, log.log_start_offset)
            end.add_metric(values, log.log_end_offset)
            segments.add_metric(values, log.segment_count)
            offline.add_metric(values, 0 if log.offline_reason is None else 1)
        yield from (size, start, end, segments, offline)

    def _flushes(self) -> Metric:
        histogram = self.broker.logs.committer.flush_latency
        family = HistogramMetricFamily(
            f"{PREFIX}_log_flush_duration_seconds",
            "Seconds per partition log flush (index entries and fsync).",
        )
        family.add_metric([], _buckets(histogram.cumulative()), histogram.sum)
        return family

    def _cleaner(self) -> Iterator[Metric]:
        # Written by the cleaner's thread (weirmq.storage.cleaner, *Metrics*): plain numbers,
        # so a scrape may see one cleaning's counters half added, never a torn value.
        stats = self.broker.logs.cleaner.stats
        for name, value, documentation in (
            ("cleanings", stats.cleanings, "Logs cleaned (compacted) by the log cleaner."),
            ("read_bytes", stats.bytes_read, "Bytes the log cleaner read."),
            ("written_bytes", stats.bytes_written, "Bytes the log cleaner wrote."),
            (
                "segments_swapped",
                stats.segments_swapped,
                "Rewritten segment files the log cleaner swapped in.",
            ),
        ):
            yield CounterMetricFamily(f"{PREFIX}_log_cleaner_{name}", documentation, value=value)
        yield GaugeMetricFamily(
            f"{PREFIX}_log_cleaner_last_cleaning_duration_seconds",
            "Seconds the last cleaning of a log took (0 before the first).",
            value=stats.last_cleaning_ms / 1000,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_log_cleaner_max_dirty_ratio",
            "At the log cleaner's last pass, the highest share of a compacted log not yet "
            "compacted (Kafka's max-dirty-percent, 0 to 1).",
            value=stats.max_dirty_ratio,
        )
        now_ms = self.broker.clock()
        for name, end_ms, documentation in (
            (
                "since_last_cleaning",
                stats.last_cleaning_end_ms,
                "Seconds since the log cleaner last cleaned a log (absent before the first).",
            ),
            (
                "since_last_run",
                stats.last_pass_end_ms,
                "Seconds since the log cleaner's last pass over the logs (Kafka's "
                "time-since-last-run; absent before the first).",
            ),
        ):
            family = GaugeMetricFamily(f"{PREFIX}_log_cleaner_seconds_{name}", documentation)
            if end_ms is not None:
                family.add_metric([], max(0, now_ms - end_ms) / 1000)
            yield family

    def _groups(self) -> Iterator[Metric]:
        broker = self.broker
        members = GaugeMetricFamily(
            f"{PREFIX}_consumer_group_members", "Members of the group.", labels=["group"]
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}_consumer_group_lag",
            "Log end offset of the partition minus the group's committed offset on it.",
            labels=["group", "topic", "partition"],
        )
        states: Counter[str] = Counter()
        for view in broker.group_views():
            states[view.state] += 1
            members.add_metric([view.group_id], len(view.members))
            for partition in broker.group_lag(view.group_id):
                if partition.lag is not None:
                    values = [view.group_id, partition.topic, str(partition.partition)]
                    lag.add_metric(values, partition.lag)
        groups = GaugeMetricFamily(
            f"{PREFIX}_consumer_groups", "Consumer groups, by state.", labels=["state"]
        )
        for state, count in sorted(states.items()):
            groups.add_metric([state], count)
        yield from (groups, members, lag)

    def _exchanges(self) -> Iterator[Metric]:
        labels = ["exchange"]
        counters = {
            "copies": CounterMetricFamily(
                f"{PREFIX}_exchange_routed_records",
                "Copies of records the exchange appended to destination topics (a record "
                "routed to three topics counts three).",
                labels=labels,
            ),
            "unroutable": CounterMetricFamily(
                f"{PREFIX}_exchange_unroutable_records",
                "Records written to the exchange that no binding routed, dropped.",
                labels=labels,
            ),
            "alternate": CounterMetricFamily(
                f"{PREFIX}_exchange_alternate_records",
                "Records written to the exchange that went through an alternate exchange.",
                labels=labels,
            ),
            "failed": CounterMetricFamily(
                f"{PREFIX}_exchange_failed_records",
                "Copies a destination refused (its log offline).",
                labels=labels,
            ),
        }
        lag = GaugeMetricFamily(
            f"{PREFIX}_exchange_routing_lag_records",
            "Records written to the exchange and not routed yet, over its partitions.",
            labels=labels,
        )
        exchanges = self.broker.exchanges
        for name in sorted(exchange.name for exchange in exchanges.router.exchanges()):
            view = exchanges.describe(name)
            for attribute, family in counters.items():
                family.add_metric([name], getattr(view.stats, attribute))
            lag.add_metric([name], view.lag_records)
        yield from counters.values()
        yield lag

    def _delays(self) -> Iterator[Metric]:
        stats = self.broker.stats.delays
        yield GaugeMetricFamily(
            f"{PREFIX}_delayed_records_pending",
            "Records produced with a delay and not delivered yet.",
            value=stats.pending,
        )
        for name, value, documentation in (
            ("delayed_records", stats.diverted, "Records produced with a future due time."),
            ("delayed_records_delivered", stats.delivered, "Delayed records delivered."),
            ("delayed_records_dropped", stats.dropped, "Delayed records whose topic was deleted."),
        ):
            yield CounterMetricFamily(f"{PREFIX}_{name}", documentation, value=value)
        lateness = HistogramMetricFamily(
            f"{PREFIX}_delayed_lateness_seconds",
            "Seconds from a delayed record's due time to its delivery.",
        )
        lateness.add_metric([], _buckets(stats.lateness.cumulative()), stats.lateness.sum)
        yield lateness

    def _shares(self) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        gauges = {
            name: GaugeMetricFamily(f"{PREFIX}_share_{name}_records", documentation, labels=labels)
            for name, documentation in (
                (
                    "available",
                    "Records a share group may be handed now or after their "
                    "retry backoff, up to the high watermark.",
                ),
                ("acquired", "Records locked to a member of the share group."),
                (
                    "archived",
                    "Archived records in the in-flight window (below it, every record is done).",
                ),
            )
        }
        oldest = GaugeMetricFamily(
            f"{PREFIX}_share_oldest_unacknowledged_age_seconds",
            "Age (from its timestamp) of the oldest record the share group has not "
            "acknowledged or archived.",
            labels=labels,
        )
        counters = {
            name: CounterMetricFamily(
                f"{PREFIX}_share_{name}_records", documentation, labels=labels
            )
            for name, documentation in (
                ("delivered", "Records handed to members (a redelivery counts again)."),
                ("accepted", "Records members accepted."),
                ("released", "Records members released."),
                ("rejected", "Records members rejected."),
                (
                    "dead_lettered",
                    "Records archived by a reject or the delivery limit (copied "
                    "to the dead-letter topic when the group has one).",
                ),
            )
        }
        now_ms = self.broker.clock()
        for view in self.broker.shares.views():
            values = [view.group_id, view.topic, str(view.partition)]
            gauges["available"].add_metric(values, view.available)
            gauges["acquired"].add_metric(values, view.acquired)
            gauges["archived"].add_metric(values, view.archived)
            if view.oldest_unacknowledged_ms is not None:
                age = max(0, now_ms - view.oldest_unacknowledged_ms) / 1000
                oldest.add_metric(values, age)
            for name, family in counters.items():
                family.add_metric(values, getattr(view.stats, name))
        yield from gauges.values()
        yield oldest
        yield from counters.values()

    def _flow(self) -> Iterator[Metric]:
        flow = self.broker.flow
        yield CounterMetricFamily(
            f"{PREFIX}_throttled_requests",
            "Requests answered with a throttle (a quota or a guarded resource asked one).",
            value=flow.throttled_requests,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_throttle_seconds",
            "Throttle time asked of clients, summed.",
            value=flow.throttle_ms_total / 1000,
        )
        ratio = GaugeMetricFamily(
            f"{PREFIX}_flow_throttle_ratio",
            "Per guarded resource, 0 (free) to 1 (blocked): how hard producers are slowed.",
            labels=["resource"],
        )
        for name, value in flow.ratios().items():
            ratio.add_metric([name], value)
        yield ratio
        level = GaugeMetricFamily(
            f"{PREFIX}_flow_level",
            "Per guarded resource, its level in its unit (bytes): budget use.",
            labels=["resource"],
        )
        limit = GaugeMetricFamily(
            f"{PREFIX}_flow_limit",
            "Per guarded resource, the level at which publishes are held back.",
            labels=["resource"],
        )
        for name, gauge in sorted(flow.gauges.items()):
            level.add_metric([name], gauge.level)
            limit.add_metric([name], gauge.marks.high)
        yield level
        yield limit
        yield CounterMetricFamily(
            f"{PREFIX}_refused_publishes",
            "Publishes refused after waiting their whole timeout for a blocked resource.",
            value=flow.refused_publishes,
        )


def _buckets(cumulative: list[tuple[float, int]]) -> list[tuple[str, float]]:
    """prometheus_client's bucket list: ``le`` as text, cumulative counts, ending with +Inf,
    from which it takes ``_count``, so bucket and count always agree."""
    return [(_le(bound), float(count)) for bound, count in cumulative]


def _le(bound: float) -> str:
    # prometheus_client's own formatter is untyped; these bounds need only repr and +Inf.
    return "+Inf" if math.isinf(bound) else repr(float(bound))
