"""examples/order_pipeline.py on the shared session and broker, checked to the cent.

The example's own functions run the pipeline on a few thousand orders, and what both sinks
hold (the result topic read back with `spark.read.format("weirmq")`, and the Parquet
files) is compared with the revenue per (window, region) that plain Python computes from
the orders produced. Comparing sorted lists, not sets, also checks that each window is
written exactly once.

Also checked: what the example's docstring says of how the stream ends. A first
availableNow run emits exactly the windows ending at or before the latest event time minus
the watermark delay (Spark runs a batch without data at the end of the run to apply the
watermark); the closing tick and a second run from the same checkpoint emit the rest, and
the tick's own window never appears.

examples/ is not a package, so the module is loaded from its path.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_pipeline.py"
ORDERS = 3_000
ORDERS_PER_BATCH_MAX = 1_000  # several micro-batches per run, as in the demo
SEED = 7
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("order_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look a class's module up in sys.modules while building it.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_revenue_per_window_and_region_in_both_sinks(
    example: ModuleType, spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    source_topic, result_topic = f"{topic_name}-orders", f"{topic_name}-revenue"
    example.create_topics(bootstrap, {source_topic: 3, result_topic: 2})
    parquet_dir, checkpoint_dir = str(tmp_path / "revenue"), str(tmp_path / "checkpoint")
    # Recent event times: the broker's time-based retention would remove old records.
    now_ms = time.time_ns() // 1_000_000
    start_ms = now_ms - now_ms % example.WINDOW_MS - example.EVENT_SPAN_MS
    orders = example.produce_orders(bootstrap, source_topic, ORDERS, SEED, start_ms)
    assert any(b.event_time_ms < a.event_time_ms for a, b in itertools.pairwise(orders)), (
        "some orders should come out of order"
    )

    def run() -> None:
        query = example.build_query(
            spark,
            bootstrap,
            source_topic,
            result_topic,
            parquet_dir,
            checkpoint_dir,
            orders_per_batch_max=ORDERS_PER_BATCH_MAX,
        )
        if not query.awaitTermination(RUN_TIMEOUT_S):
            query.stop()
            pytest.fail(f"the availableNow run did not finish within {RUN_TIMEOUT_S} s")

    def from_both_sinks() -> tuple[list[Any], list[Any]]:
        from_topic = example.read_results_from_topic(spark, bootstrap, result_topic)
        from_parquet = example.read_results_from_parquet(spark, parquet_dir)
        return example.as_rows(from_topic), example.as_rows(from_parquet)

    expected = example.expected_revenue(orders)
    assert sum(row[2] for row in expected) == ORDERS

    run()
    watermark_ms = max(o.event_time_ms for o in orders) - example.WATERMARK_DELAY_MS
    closed = [row for row in expected if row[0] + example.WINDOW_MS <= watermark_ms]
    assert 0 < len(closed) < len(expected)
    topic_rows, parquet_rows = from_both_sinks()
    assert topic_rows == closed
    assert parquet_rows == closed

    example.produce_closing_tick(bootstrap, source_topic, orders)
    run()
    topic_rows, parquet_rows = from_both_sinks()
    assert topic_rows == expected  # and so without the tick's window
    assert parquet_rows == expected
