"""bench/spark.py runs every case end to end on a small topic, in the shared session, and
reports a figure for each (no timing assertions: the benchmark's cases check their own
row counts, and a wrong count raises)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_spark", REPO_ROOT / "bench" / "spark.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_spark"] = module
    spec.loader.exec_module(module)
    return module


def test_every_case_runs_and_reports(spark: Any, tmp_path: Path) -> None:
    bench_spark = load_bench()
    broker = bench_spark.BrokerProcess(tmp_path)
    try:
        bench = bench_spark.Bench(spark, broker, tmp_path, 2_000, 2, {})
        bench.source = bench.topics.create("source", 2)
        bench.with_headers = bench.topics.create("headers", 2)
        fill = {
            "no headers": bench.topics.fill(bench.source, 2_000, 2, False),
            "2 headers": bench.topics.fill(bench.with_headers, 2_000, 2, True),
        }
        results = bench_spark.run_cases(bench, bench_spark.CASES, 1, lambda step: None)
        bench.topics.close()
    finally:
        broker.stop()
    assert set(results) == set(bench_spark.LABELS)
    for name, result in results.items():
        assert result["rows"] == 2_000, name
        assert result["rows_s"] > 0, name
    params = {
        "rows": 2_000,
        "partitions": 2,
        "repeat": 1,
        "kafka": {},
        "fill": fill,
        "master": spark.sparkContext.master,
        "spark": spark.version,
        "java": "17",
        "librdkafka": "2",
        "load_before": "0",
        "load_after": "0",
        "session_start_s": 0.0,
    }
    table = bench_spark.report(results, params, bench_spark.machine_info())
    assert all(label in table for label in bench_spark.LABELS.values())
