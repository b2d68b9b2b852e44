"""The benchmark's arithmetic: percentiles, which side was the limit, the targets, the
rendering of partial and failed runs. No broker here; the end-to-end run is in
test_bench_suite.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from weirmq.bench import report
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


def sample_document() -> dict[str, Any]:
    def produce(name: str, mb: float, cpu_gb: float) -> dict[str, Any]:
        return {"name": name, "mb_per_s": mb, "messages_per_s": mb * 1000,
                "broker_cpu_s_per_gb": cpu_gb, "client_cpu_percent": [50.0], "limit": "client"}

    def partitions(count: int, mb: float, rss: float) -> dict[str, Any]:
        return {"name": f"{count} partitions default", "partitions": count, "mode": "default",
                "mb_per_s": mb, "broker_peak_rss_mb": rss}

    return {
        "started": "2026-11-21T00:00:00",
        "machine": {"cpu_count": 2, "python": "3.11"},
        "broker": {"description": "test"},
        "workloads": {
            "startup": {"cases": [{"name": "startup", "announced_ms": 300.0}]},
            "idle": {"cases": [{"name": "idle", "cpu_percent": 0.1, "rss_mb": 50.0}]},
            "produce": {"cases": [produce("1 KB acks=1 x1", 200.0, 2.5),
                                  produce("1 KB acks=all x1", 90.0, 3.0)]},
            "consume": {"cases": [{"name": "1 KB x10", "value_bytes": 1024, "mb_per_s": 400.0,
                                   "broker_cpu_s_per_gb": 1.0}]},
            "latency": {"cases": [{"name": "5000 msg/s", "p50_ms": 1.0, "p99_ms": 6.0,
                                   "p999_ms": 9.0, "max_ms": 12.0}]},
            "partitions": {"cases": [partitions(10, 200.0, 60.0), partitions(1000, 150.0, 70.0),
                                     {"name": "10000 partitions default",
                                      "error": "RuntimeError: boom"}]},
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
