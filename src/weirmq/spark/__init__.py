"""WeirMQ topics as a PySpark data source: `format("weirmq")`, batch and streaming.

Spark's Kafka connector cannot be used against WeirMQ where its jar is not available, and
the name `kafka` is Spark's own, so WeirMQ ships a Python data source (Spark 4.2+'s
`pyspark.sql.datasource`) with the Kafka source's options and schema: a pipeline written
for `format("kafka")` runs with `format("weirmq")`, locally or on a cluster.

    spark.read.format("weirmq").option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "orders").load()

Installing weirmq with the `spark` extra registers the source with every Spark session by
itself (Spark looks for modules named `pyspark_*` with a `DefaultSource`; `pyspark_weirmq`
is ours). `register(spark)` does the same by hand, in one session. Either way the tasks
import this package wherever they run: on a cluster, weirmq must be installed in the
Python of the driver and of every worker, and `PYSPARK_PYTHON` must name it
(docs/spark.md, "Running on a cluster").

Modules: `options` (parsing and checking), `planning` (offset-range arithmetic),
`cluster` (the driver's metadata and offsets), `read` (a task's bounded read into Arrow),
`write` (a task's rows into a producer), `schema`, and `source` (the Spark classes).
docs/spark.md is the user's guide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Registers the `weirmq` format in `spark`, this session only (idempotent).

    For a driver where Spark does not find the source by itself (weirmq imported from a
    source tree rather than installed, so there is no `pyspark_weirmq` on Spark's Python
    path). It does not replace installing weirmq: every executor imports `weirmq.spark` to
    run the reader and the writer, so the package must be installed in the Python the
    executors start (`PYSPARK_PYTHON`) on every worker.
    """
    from weirmq.spark.source import WeirMQDataSource

    spark.dataSource.register(WeirMQDataSource)
