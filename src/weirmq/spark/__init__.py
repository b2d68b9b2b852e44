"""WeirMQ topics as a PySpark data source: `format("weirmq")`, batch and streaming.

Spark's Kafka connector cannot be used against WeirMQ where its jar is not available, and
the name `kafka` is Spark's own, so WeirMQ ships a Python data source (Spark 4.2+'s
`pyspark.sql.datasource`) with the Kafka source's options and schema: a pipeline written
for `format("kafka")` runs with `format("weirmq")`, locally or on a cluster.

    spark.read.format("weirmq").option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "orders").load()

Installing `weirmq[spark]` registers the source with every Spark session by itself (Spark
looks for modules named `pyspark_*` with a `DefaultSource`; `pyspark_weirmq` is ours).
`register(spark)` does the same by hand, for a session whose workers cannot see that
module.

Modules: `options` (parsing and checking), `planning` (offset-range arithmetic),
`cluster` (the driver's metadata and offsets), `read` (a task's bounded read into Arrow),
`write` (a task's rows into a producer), `schema`, and `source` (the Spark classes).
docs/spark.md is the user's guide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Registers the `weirmq` format with a Spark session (idempotent)."""
    from weirmq.spark.source import WeirMQDataSource

    spark.dataSource.register(WeirMQDataSource)
