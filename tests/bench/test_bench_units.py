"""The benchmark's arithmetic: percentiles, which side was the limit, the broker's metrics
(request counts, histogram quantiles), the per-request overhead, the targets, the
rendering of partial and failed runs. No broker here; the end-to-end run is in
test_bench_suite.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from weirmq.bench import report, workloads
from weirmq.bench.target import (
    Window,
    bucket_deltas,
    histogram_buckets,
    histogram_quantile,
    metric_total,
    parse_metrics,
)
from weirmq.bench.workers import percentiles
from weirmq.bench.workloads import limit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1000, 0, -1))  # 1..1000, unsorted
    assert percentiles(values, [50, 99, 99.9, 100]) == [500, 990, 999, 1000]
    assert percentiles([7], [0, 50, 100]) == [7, 7, 7]
    assert percentiles([], [50]) == [0]


@pytest.mark.parametrize(
    ("broker", "clients", "expected"),
    [
        (95.0, [40.0], "broker"),
        (50.0, [105.0], "client"),
        (95.0, [100.0], "cores (broker and clients share the machine)"),
        (80.0, [55.0, 50.0], "cores (broker and clients share the machine)"),
        (40.0, [30.0, 10.0], "neither (waiting on round trips or fsync)"),
        (None, [100.0], "client"),
        (None, [20.0], "unknown (broker CPU not visible)"),
    ],
)
def test_the_limit_is_read_from_cpu_use(broker: float | None, clients: list[float],
                                        expected: str) -> None:
    assert limit(broker, clients, cores=2) == expected


# --- The broker's metrics ---------------------------------------------------------------------

SCRAPE = """\
# HELP weirmq_requests_total Kafka requests answered, by API.
# TYPE weirmq_requests_total counter
weirmq_requests_total{api="Produce"} 1200.0
weirmq_requests_total{api="Fetch"} 35.0
weirmq_uptime_seconds 3.5
weirmq_topic_bytes_in_total{topic="a \\"quoted\\" \\\\ name"} 7.0
weirmq_request_latency_seconds_bucket{protocol="kafka",le="0.001"} 10.0
weirmq_request_latency_seconds_bucket{protocol="kafka",le="0.002"} 30.0
weirmq_request_latency_seconds_bucket{protocol="kafka",le="0.005"} 90.0
weirmq_request_latency_seconds_bucket{protocol="kafka",le="+Inf"} 100.0
weirmq_request_latency_seconds_bucket{protocol="amqp",le="0.001"} 5.0
weirmq_request_latency_seconds_bucket{protocol="amqp",le="+Inf"} 5.0
weirmq_request_latency_seconds_count{protocol="kafka"} 100.0
weirmq_request_latency_seconds_sum{protocol="kafka"} 0.25
"""


def test_a_scrape_is_parsed_into_samples() -> None:
    samples = parse_metrics(SCRAPE)
    assert metric_total(samples, "weirmq_requests_total", api="Produce") == 1200
    assert metric_total(samples, "weirmq_requests_total") == 1235  # every API
    assert metric_total(samples, "weirmq_requests_total", api="Nope") is None
    assert metric_total(samples, "weirmq_uptime_seconds") == 3.5
    [quoted] = [s for s in samples if s.name == "weirmq_topic_bytes_in_total"]
    assert quoted.labels == {"topic": 'a "quoted" \\ name'}


def test_histogram_buckets_are_read_per_label_set() -> None:
    samples = parse_metrics(SCRAPE)
    assert histogram_buckets(samples, "weirmq_request_latency_seconds", protocol="kafka") == [
        (0.001, 10), (0.002, 30), (0.005, 90), (float("inf"), 100)]
    # Without the protocol label, series are added bucket by bucket (sum by le).
    assert histogram_buckets(samples, "weirmq_request_latency_seconds") == [
        (0.001, 15), (0.002, 30), (0.005, 90), (float("inf"), 105)]
    assert histogram_buckets(samples, "weirmq_missing_seconds") is None


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    buckets = [(0.001, 10.0), (0.002, 30.0), (0.005, 90.0), (float("inf"), 100.0)]
    # rank 50 falls in (0.002, 0.005], 20 of its 60 observations in: a third of the way.
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.003)
    # The first bucket starts at 0.
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.0005)
    assert histogram_quantile(0.3, buckets) == pytest.approx(0.002)  # a bucket's edge
    # A rank in the +Inf bucket: the highest finite bound, as Prometheus answers.
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.005)
    assert histogram_quantile(1.0, buckets) == pytest.approx(0.005)
    # Nothing observed, no +Inf bucket, or no buckets: Prometheus' NaN, None here.
    assert histogram_quantile(0.5, [(0.001, 0.0), (float("inf"), 0.0)]) is None
    assert histogram_quantile(0.5, [(0.001, 3.0), (0.002, 3.0)]) is None
    assert histogram_quantile(0.5, None) is None


def test_the_window_quantile_comes_from_bucket_deltas() -> None:
    before = [(0.001, 1000.0), (0.002, 1000.0), (0.005, 1000.0), (float("inf"), 1000.0)]
    after = [(0.001, 1010.0), (0.002, 1030.0), (0.005, 1090.0), (float("inf"), 1100.0)]
    window = bucket_deltas(before, after)
    assert window == [(0.001, 10), (0.002, 30), (0.005, 90), (float("inf"), 100)]
    # The 1,000 earlier observations, all under 1 ms, would have put the p50 there.
    assert histogram_quantile(0.5, after) == pytest.approx(0.001 * 550 / 1010)
    assert histogram_quantile(0.5, window) == pytest.approx(0.003)
    assert bucket_deltas(None, after) is None and bucket_deltas(before, None) is None


def test_a_window_counts_requests_between_its_scrapes() -> None:
    window = Window(None)
    assert window.requests("Produce") is None  # no metrics: an external broker
    window.metrics_before = parse_metrics(SCRAPE)
    window.metrics_after = parse_metrics(SCRAPE.replace("} 1200.0", "} 1957.0")
                                         .replace('le="+Inf"} 100.0', 'le="+Inf"} 104.0'))
    assert window.requests("Produce") == 757 and window.requests("Fetch") == 0
    buckets = window.histogram("weirmq_request_latency_seconds", protocol="kafka")
    assert buckets is not None and buckets[-1] == (float("inf"), 4)
    assert window.histogram("weirmq_missing_seconds") is None


def test_per_request_overhead_is_the_cpu_difference_over_the_request_difference() -> None:
    # Issue 17's figures: 2.18 s/GB at 60 KB batches (~16,700 requests/GB) against 0.64 s/GB
    # at 1 MB batches (~1,000 requests/GB): about 98 µs a request.
    small = {"broker_cpu_s_per_gb": 2.18, "requests_per_gb": 16_700.0}
    large = {"broker_cpu_s_per_gb": 0.64, "requests_per_gb": 1_000.0}
    assert report.per_request_overhead_us(small, large) == pytest.approx(1.54 / 15_700 * 1e6)
    # Same CPU per GB whatever the request size: no overhead.
    assert report.per_request_overhead_us({**small, "broker_cpu_s_per_gb": 0.64},
                                          large) == pytest.approx(0)
    # Nothing to divide by, or a figure missing (an external broker counts no requests).
    assert report.per_request_overhead_us(small, {**large, "requests_per_gb": 16_700.0}) is None
    assert report.per_request_overhead_us({**small, "requests_per_gb": None}, large) is None
    assert report.per_request_overhead_us(None, large) is None


def test_the_quick_plans_keep_what_the_targets_compare() -> None:
    names = [workloads.produce_case_name(*case) for case in workloads.produce_plan(True)]
    for name in ("1 KB acks=1 x1", "1 KB acks=all x1", "1 KB acks=1 batch=60000 x1",
                 "1 KB acks=all batch=60000 x1"):
        assert name in names
    full = [workloads.produce_case_name(*case) for case in workloads.produce_plan(False)]
    assert "16 KB acks=all batch=60000 x1" in full and "100 B acks=1 batch=60000 x1" not in full
    quick = workloads.partitions_plan(True)
    assert {("default", 10), ("default", 1000), ("round-robin", 1000)} <= set(quick)
    assert len(quick) <= 4
    # The report's name for the small batch is the workloads' size.
    assert report.SMALL_BATCH_BYTES == workloads.SMALL_REQUEST_BYTES


# --- Targets and rendering ---------------------------------------------------------------------


def sample_document() -> dict[str, Any]:
    def produce(name: str, mb: float, cpu_gb: float, value_bytes: int = 1024,
                batch: int | None = None) -> dict[str, Any]:
        acks = "all" if "acks=all" in name else "1"
        return {"name": name, "mb_per_s": mb, "messages_per_s": mb * 1000,
                "value_bytes": value_bytes, "acks": acks, "producers": 1, "batch_size": batch,
                "broker_cpu_s_per_gb": cpu_gb, "client_cpu_percent": [50.0], "limit": "client"}

    def partitions(count: int, mb: float, rss: float, cpu_gb: float = 1.5,
                   mode: str = "default") -> dict[str, Any]:
        return {"name": f"{count} partitions {mode}", "partitions": count, "mode": mode,
                "mb_per_s": mb, "broker_peak_rss_mb": rss, "broker_cpu_s_per_gb": cpu_gb}

    def requests(name: str, api: str, request_bytes: int | None, cpu_gb: float,
                 per_gb: float) -> dict[str, Any]:
        return {"name": name, "api": api, "request_bytes": request_bytes,
                "broker_cpu_s_per_gb": cpu_gb, "requests_per_gb": per_gb}

    return {
        "started": "2026-11-21T00:00:00",
        "machine": {"cpu_count": 2, "python": "3.11"},
        "broker": {"description": "test"},
        "workloads": {
            "startup": {"cases": [{"name": "startup", "announced_ms": 300.0}]},
            "idle": {"cases": [{"name": "idle", "cpu_percent": 0.1, "rss_mb": 50.0}]},
            "produce": {"cases": [produce("1 KB acks=1 x1", 200.0, 2.5),
                                  produce("1 KB acks=all x1", 90.0, 3.0),
                                  produce("1 KB acks=1 batch=60000 x1", 100.0, 5.0,
                                          batch=60000),
                                  produce("1 KB acks=all batch=60000 x1", 90.0, 3.6,
                                          batch=60000)]},
            "consume": {"cases": [{"name": "1 KB x10", "value_bytes": 1024, "mb_per_s": 400.0,
                                   "broker_cpu_s_per_gb": 1.0}]},
            "requests": {"cases": [
                requests("produce batch.size=60000", "Produce", 60000, 2.18, 16_700.0),
                requests("produce default (1 MB)", "Produce", None, 0.64, 1_000.0),
                requests("fetch fetch.max.bytes=60000", "Fetch", 60000, 0.9, 16_700.0),
                requests("fetch default (1 MB)", "Fetch", None, 0.6, 1_000.0)]},
            "latency": {"cases": [{"name": "5000 msg/s", "p50_ms": 1.0, "p99_ms": 6.0,
                                   "p999_ms": 9.0, "max_ms": 12.0, "broker_p99_ms": 1.5,
                                   "broker_p99_share": 0.25}]},
            "partitions": {"cases": [partitions(10, 200.0, 60.0), partitions(1000, 150.0, 70.0),
                                     {"name": "10000 partitions default",
                                      "error": "RuntimeError: boom"},
                                     partitions(1000, 90.0, 70.0, 3.0, "round-robin")]},
            "stop": {"cases": [{"name": "10000 partitions", "partitions": 10_000,
                                "stop_s": 1.5}]},
            "rebalance": {"cases": [{"name": "consumer-hb500", "rebalance_s_median": 0.5,
                                     "leave_s_median": 0.3}]},
        },
    }


def test_targets_come_from_the_runs_own_figures() -> None:
    by_name = {t["target"]: t for t in report.targets(sample_document())}
    acks = by_name["produce 1 KB: acks=all / acks=1 throughput"]
    assert acks["measured"] == pytest.approx(0.45) and acks["met"] is False
    scaling = by_name["1,000 partitions / 10 partitions throughput"]
    assert scaling["measured"] == pytest.approx(0.75) and scaling["met"] is False
    assert by_name["broker RSS at 1,000 partitions, MB"]["met"] is True
    # A failed 10,000-partition case is a miss, with the reason kept.
    ten_k = by_name["10,000 partitions work (produce delivered, MB/s)"]
    assert ten_k["met"] is False and ten_k["note"] == "RuntimeError: boom"
    assert by_name["end-to-end p99 at 5,000 msg/s of 1 KB, acks=1, ms"]["met"] is False
    assert by_name["start-up, ms"]["met"] is True
    assert by_name["idle CPU, % of one core"]["met"] is True
    cpu = by_name["broker CPU per GB produced, 1 KB, acks=all (librdkafka defaults), s"]
    assert cpu["measured"] == 3.0 and cpu["met"] is None  # a figure, not a pass/fail


def test_issue_17_targets_come_from_the_runs_own_figures() -> None:
    every = report.targets(sample_document())
    assert {t["issue"] for t in every} == {6, 17, 18, 19, 22, 24}
    by_name = {t["target"]: t for t in every if t["issue"] == 17}
    produce = by_name["produce: broker CPU per request beyond the per-byte cost, µs"]
    assert produce["measured"] == pytest.approx(1.54 / 15_700 * 1e6) and produce["met"] is False
    fetch = by_name["fetch: broker CPU per request beyond the per-byte cost, µs"]
    assert fetch["measured"] == pytest.approx(0.3 / 15_700 * 1e6) and fetch["met"] is True
    batch = "batch.size=60000: broker CPU/GB ÷ the same at default 1 MB batches"
    assert by_name[f"produce 1 KB acks=1, {batch}"]["measured"] == pytest.approx(2.0)
    assert by_name[f"produce 1 KB acks=1, {batch}"]["met"] is False
    assert by_name[f"produce 1 KB acks=all, {batch}"]["measured"] == pytest.approx(1.2)
    assert by_name[f"produce 1 KB acks=all, {batch}"]["met"] is True
    acks = by_name["produce 1 KB: acks=all ÷ acks=1 throughput at batch.size=60000"]
    assert acks["measured"] == pytest.approx(0.9) and acks["met"] is True
    # No 16 KB cases in this run: not measured, not a pass.
    assert by_name[f"produce 16 KB acks=1, {batch}"]["met"] is None
    spread = by_name["1,000 partitions: round-robin ÷ default (sticky) partitioner, broker CPU/GB"]
    assert spread["measured"] == pytest.approx(2.0) and spread["met"] is False
    p99 = by_name["end-to-end p99 at 5,000 msg/s of 1 KB, acks=1, ms (on a quiet machine)"]
    assert p99["measured"] == 6.0 and p99["met"] is False
    share = by_name["broker's share of that p99 (its own p99 ÷ end-to-end p99)"]
    assert share["measured"] == 0.25 and share["met"] is None  # shown, not judged
    assert by_name["start-up to accepting connections, ms"]["met"] is False
    assert by_name["idle RSS, MB"]["met"] is False
    stop = by_name[report.STOP_TARGET]
    assert stop["measured"] == 1.5 and stop["met"] is True


def test_a_stop_that_failed_is_a_missed_target() -> None:
    document = sample_document()
    document["workloads"]["stop"]["cases"] = [
        {"name": "10000 partitions", "error": "RuntimeError: still running 300 s after "
                                              "SIGTERM: killed"}]
    [stop] = [t for t in report.targets(document) if t["target"] == report.STOP_TARGET]
    assert stop["met"] is False and "still running" in stop["note"]


def test_targets_without_figures_are_not_measured() -> None:
    assert all(t["measured"] is None and t["met"] is None
               for t in report.targets({"workloads": {}}))


def test_rendering_shows_failures_and_skips(tmp_path: Path) -> None:
    document = sample_document()
    document["workloads"]["rebalance"]["cases"].append(
        {"name": "consumer-hb-default", "skipped": "needs a broker setting"})
    document["targets"] = report.targets(document)
    text = report.render(document)
    assert "10000 partitions default: FAILED: RuntimeError: boom" in text
    assert "consumer-hb-default: skipped: needs a broker setting" in text
    assert "MISSED" in text and "met" in text
    # The targets come in one table per issue, in order.
    assert text.index("  issue 6:") < text.index("  issue 17:")


def test_a_document_saved_before_issue_17_still_renders() -> None:
    document = sample_document()
    document["targets"] = [{k: v for k, v in t.items() if k != "issue"}
                           for t in report.targets(document) if t["issue"] == 6]
    text = report.render(document)
    assert "issue 6:" not in text and "start-up, ms" in text


@pytest.mark.parametrize("workloads", [None, ["produce"], []])
def test_the_plot_is_a_png_whatever_was_measured(tmp_path: Path,
                                                 workloads: list[str] | None) -> None:
    document = sample_document()
    if workloads is not None:
        document["workloads"] = {k: v for k, v in copy.deepcopy(document["workloads"]).items()
                                 if k in workloads}
    document["targets"] = report.targets(document)
    path = tmp_path / "plot.png"
    report.plot(document, path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_issue_18_targets_compare_routed_with_plain_records_per_second() -> None:
    document = {"workloads": {"routing": {"cases": [
        {"name": "plain", "routed_per_s": 200_000.0},
        {"name": "topic exchange, 10 bindings", "routed_per_s": 110_000.0},
        {"name": "topic exchange, 10,000 bindings", "routed_per_s": 70_000.0},
    ]}}}  # fmt: skip
    by_name = {t["target"]: t for t in report.targets(document) if t["issue"] == 18}
    ten = by_name["routed ÷ plain records/s, topic exchange with 10 bindings"]
    assert ten["measured"] == pytest.approx(0.55) and ten["met"] is True
    many = by_name["routed ÷ plain records/s, topic exchange with 10,000 bindings"]
    assert many["measured"] == pytest.approx(0.35) and many["met"] is False
    assert all(t["met"] is None for t in report.targets({}) if t["issue"] == 18)


def test_issue_19_targets_take_the_worst_delay_case() -> None:
    document = {"workloads": {"delay": {"cases": [
        {"name": "1000/s delayed", "lateness_p99_ms": 8, "early": 0},
        {"name": "5000/s delayed", "lateness_p99_ms": 120, "early": 0},
        {"name": "broken", "error": "RuntimeError: boom"},
    ]}}}
    by_name = {t["target"]: t for t in report.targets(document) if t["issue"] == 19}
    p99 = by_name["delay lateness p99 ms (worst case)"]
    assert p99["measured"] == 120 and p99["met"] is False
    assert by_name["delayed records delivered early"]["met"] is True
    assert all(t["met"] is None for t in report.targets({}) if t["issue"] == 19)


def test_issue_19_share_target_is_share_over_classic_records_per_s() -> None:
    assert (report.SHARE_CASE, report.CLASSIC_CASE) == (workloads.SHARE_CASE,
                                                        workloads.CLASSIC_CASE)
    document = {"workloads": {"share": {"cases": [
        {"name": report.SHARE_CASE, "records_per_s": 60_000, "broker_cpu_us_per_record": 16.5},
        {"name": report.CLASSIC_CASE, "records_per_s": 400_000, "broker_cpu_us_per_record": 1.1},
    ]}}}
    by_name = {t["target"]: t for t in report.targets(document) if t["issue"] == 19}
    ratio = by_name["share-group consume (explicit ack, 2 consumers) ÷ classic group, records/s"]
    assert ratio["measured"] == pytest.approx(0.15) and ratio["met"] is False
    assert ratio["goal"] == ">= 0.3"
    share_cpu = by_name["share-group consume: broker CPU per record, µs"]
    assert share_cpu["measured"] == 16.5 and share_cpu["met"] is None  # shown, not judged
    assert by_name["classic-group consume: broker CPU per record, µs"]["measured"] == 1.1
    # A failed share case is not measured, never met; nor is a run without the workload.
    document["workloads"]["share"]["cases"][0] = {"name": report.SHARE_CASE,
                                                  "error": "RuntimeError: boom"}
    again = {t["target"]: t for t in report.targets(document) if t["issue"] == 19}
    assert again[ratio["target"]]["measured"] is None and again[ratio["target"]]["met"] is None
    assert all(t["measured"] is None for t in report.targets({}) if t["issue"] == 19)


def test_issue_24_target_is_transactional_over_idempotent_produce() -> None:
    assert (report.TXN_CASE, report.TRANSACTION_MESSAGES) == (
        workloads.TXN_CASE,
        workloads.TRANSACTION_MESSAGES,
    )
    document = {"workloads": {"transactions": {"cases": [
        {"name": workloads.IDEMPOTENT_CASE, "messages_per_s": 50_000},
        {"name": report.TXN_CASE, "messages_per_s": 45_000, "ratio_to_idempotent": 0.9},
    ]}}}
    (target,) = [t for t in report.targets(document) if t["issue"] == 24]
    assert (target["measured"], target["goal"], target["met"]) == (0.9, ">= 0.8", True)
    (missing,) = [t for t in report.targets({}) if t["issue"] == 24]
    assert missing["measured"] is None and missing["met"] is None


def test_share_records_fill_every_partition_alike() -> None:
    for quick in (True, False):
        assert workloads.share_records(quick) % workloads.SHARE_PARTITIONS == 0
    assert workloads.share_records(True) < workloads.share_records(False)
