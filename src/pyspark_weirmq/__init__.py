"""Makes `format("weirmq")` available in every Spark session without registering it.

Spark 4 imports the modules named `pyspark_*` it finds on the Python path and registers
their `DefaultSource`. The source itself is `weirmq.spark`.
"""

from weirmq.spark.source import WeirMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
