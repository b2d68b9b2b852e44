"""`weirmq bench` end to end: a --quick run completes and writes valid JSON and a PNG.

As the issue asks, nothing here asserts a timing: only that every workload ran, that every
case has its figures, and that the outputs are well formed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from weirmq.testing import Broker

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORKLOADS = ["startup", "idle", "produce", "consume", "requests", "latency", "partitions",
             "stop", "routing", "rebalance", "delay", "share", "amqp", "sqs", "transactions"]


def bench(*args: str, cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weirmq", "bench", *args], cwd=cwd, capture_output=True,
        text=True, timeout=timeout_s,
        env={k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")},
    )


def measured(document: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    cases = document["workloads"][workload]["cases"]
    assert cases, workload
    for case in cases:
        assert "error" not in case, case
    return list(cases)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_amqp(document: dict[str, Any]) -> None:
    """RabbitMQ measured (or skipped, where it is not installed); WeirMQ measured; the
    ratio wherever both were measured."""
    cases = {c["name"]: c for c in document["workloads"]["amqp"]["cases"]}
    assert len(cases) == 6
    for name, case in cases.items():
        if "skipped" in case:
            assert name.endswith(": RabbitMQ") and "rabbitmq-server" in case["skipped"], case
            continue
        assert "error" not in case, case
        assert case["messages"] > 0 and case["messages_per_s"] > 0
        assert is_number(case["broker_cpu_percent"]) and case["limit"], name
        both = name.removesuffix(": WeirMQ") + ": RabbitMQ"
        if name.endswith(": WeirMQ") and "messages_per_s" in cases[both]:
            assert case["ratio_to_rabbitmq"] == pytest.approx(
                case["messages_per_s"] / cases[both]["messages_per_s"])


@pytest.mark.slow
@pytest.mark.integration
def test_quick_run_measures_every_workload(tmp_path: Path) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    done = bench("--quick", "--json", str(out), "--plot", str(png), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert list(document["workloads"]) == WORKLOADS
    check_amqp(document)
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert document["quick"] is True and document["broker"]["kind"] == "own"

    produce = measured(document, "produce")
    assert {"1 KB acks=1 batch=60000 x1", "1 KB acks=all batch=60000 x1"} <= {
        c["name"] for c in produce}
    for case in produce + measured(document, "partitions"):
        assert case["messages"] > 0
        for key in ("mb_per_s", "broker_cpu_s_per_gb", "broker_peak_rss_mb"):
            assert is_number(case[key]) and case[key] > 0, (case["name"], key)
        assert case["limit"]
    for case in produce:  # counted by the broker (partitions does not read its metrics)
        assert case["requests"] > 0 and case["broker_cpu_us_per_request"] > 0, case["name"]
    [consume] = measured(document, "consume")
    assert consume["messages_per_s"] > 0 and consume["broker_cpu_s_per_gb"] > 0
    assert consume["requests"] > 0
    # The same data in small and in large requests: the broker counted more small ones.
    small_produce, large_produce, small_fetch, large_fetch = measured(document, "requests")
    for small, large in ((small_produce, large_produce), (small_fetch, large_fetch)):
        assert small["messages"] == large["messages"] > 0
        assert small["requests_per_gb"] > 2 * large["requests_per_gb"] > 0
        assert is_number(small["overhead_us_per_request"]), small["name"]
    [latency] = measured(document, "latency")
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"] <= latency["max_ms"]
    assert latency["measured"] > 0
    # The broker's own histogram, if it exports one; None (not an error) if it does not.
    has_histogram = latency["broker_requests"] is not None
    if has_histogram:
        assert 0 < latency["broker_p50_ms"] <= latency["broker_p99_ms"]
        assert latency["broker_p99_share"] > 0
    else:
        assert latency["broker_p50_ms"] is latency["broker_p99_share"] is None
    [stop] = measured(document, "stop")
    assert stop["partitions"] == stop["partitions_written"] == 1000
    assert stop["exit_code"] == 0 and 0 < stop["stop_s"] < 300
    [startup] = measured(document, "startup")
    assert 0 < startup["announced_ms"] <= startup["first_metadata_ms"]
    [idle] = measured(document, "idle")
    assert idle["cpu_percent"] >= 0 and idle["rss_mb"] > 0
    [rebalance] = measured(document, "rebalance")
    assert rebalance["runs"] == 1
    # The group settles only after the new member has its partitions and consumes them.
    assert (0 < rebalance["new_member_assigned_s_median"]
            <= rebalance["new_member_consuming_s_median"] <= rebalance["rebalance_s_median"])
    # Routing: every acknowledged record reached its destination (checked by the workload).
    plain, *routed = measured(document, "routing")
    assert plain["routed_per_s"] > 0 and [c["bindings"] for c in routed] == [10, 10_000]
    for case in routed:
        assert case["routed"] == case["messages"] > 0 and case["routed_per_s"] > 0
    # Share group and classic group read the same topic, every record once; the share
    # group's were all accepted (both checked by the workload), split over two members.
    shared, classic = measured(document, "share")
    for case in (shared, classic):
        assert case["records"] == sum(case["per_member"]) > 0 and case["records_per_s"] > 0
        assert len(case["per_member"]) == 2 and is_number(case["broker_cpu_us_per_record"])
    assert shared["ShareFetch_requests"] > 0 and shared["ShareAcknowledge_requests"] > 0
    assert classic["Fetch_requests"] > 0
    assert shared["ratio_to_classic"] == pytest.approx(
        shared["records_per_s"] / classic["records_per_s"])
    # Every target has its figure in a quick run except those of 10,000 partitions and of
    # 16 KB messages (and the broker's latency share, until the broker exports it).
    missing = [t["target"] for t in document["targets"] if t["measured"] is None]
    assert missing == [
        "10,000 partitions work (produce delivered, MB/s)",
        *(t["target"] for t in document["targets"] if "16 KB" in t["target"]),
        *([] if has_histogram else
          ["broker's share of that p99 (its own p99 ÷ end-to-end p99)"]),
        "clean stop with 10,000 partitions, s",
    ]
    assert [t["issue"] for t in document["targets"]] == sorted(
        t["issue"] for t in document["targets"])
    assert "targets:" in done.stdout and "1 KB acks=all batch=60000 x1" in done.stdout

    # A saved run renders again, without running anything.
    again = bench("--from", str(out), "--plot", str(tmp_path / "again.png"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == done.stdout
    assert (tmp_path / "again.png").read_bytes().startswith(PNG_SIGNATURE)
    # Our brokers' temporary directories are gone.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("weirmq-bench-")] == []


@pytest.mark.slow
@pytest.mark.integration
def test_an_external_broker_is_measured_the_same_way(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    with Broker() as broker:
        bootstrap = broker.bootstrap_servers
        done = bench("--quick", "--bootstrap", bootstrap, "--broker-pid",
                     str(os.getpid()), "--workload", "startup", "--workload", "produce",
                     "--json", str(out), cwd=tmp_path)
        core = broker.broker
        topics_left = broker.call(lambda: sorted(t.name for t in core.topics))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["broker"] == {
        "kind": "external", "bootstrap": bootstrap, "pid": os.getpid(),
        "description": f"external broker at {bootstrap}"}
    assert document["workloads"]["startup"]["cases"] == []  # we cannot start it
    for case in measured(document, "produce"):
        assert case["messages"] > 0 and is_number(case["broker_cpu_s_per_gb"])
        assert case["requests"] is None  # an external broker's metrics are not read
    # Each case's topic was deleted afterwards.
    assert [t for t in topics_left if t.startswith("bench-")] == []


def test_usage_errors_are_caught_before_a_run(tmp_path: Path) -> None:
    done = bench("--broker-pid", "1", cwd=tmp_path, timeout_s=60)
    assert done.returncode == 2 and "--broker-pid goes with --bootstrap" in done.stderr
    done = bench("--workload", "nonsense", cwd=tmp_path, timeout_s=60)
    assert done.returncode == 2 and "nonsense" in done.stderr
