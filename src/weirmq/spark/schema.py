"""The rows a read returns and the columns a write takes: Spark's Kafka source schema.

Read: key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int, and (with `includeHeaders=true`) headers
array<struct<key:string,value:binary>>. Every column is nullable, as in Spark's source.

Write: value (binary or string, required), key (binary or string), topic (string),
partition (int), headers (array<struct<key:string,value:binary>>, value may be string);
other columns are ignored, as Spark's Kafka sink ignores them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from weirmq.spark.options import OptionError


@cache
def spark_schema(include_headers: bool) -> Any:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema Spark expects of a read's record batches (it checks equality)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


def check_sink_schema(schema: Any, topic_option: str | None) -> None:
    """Raises `OptionError` when a DataFrame cannot be written: no value column, a known
    column of the wrong type, or no topic from either the option or a column."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in columns:
        raise OptionError(
            "a weirmq write needs a `value` column (binary or string); the DataFrame has "
            + ", ".join(f.name for f in schema.fields)
        )
    binary_or_string = (BinaryType, StringType)
    problems = []
    for name in ("value", "key"):
        if name in columns and not isinstance(columns[name], binary_or_string):
            problems.append(f"{name} must be binary or string, not {columns[name].simpleString()}")
    if "topic" in columns and not isinstance(columns["topic"], StringType):
        problems.append(f"topic must be string, not {columns['topic'].simpleString()}")
    if "partition" in columns and not isinstance(columns["partition"], IntegerType):
        problems.append(f"partition must be int, not {columns['partition'].simpleString()}")
    if "headers" in columns:
        headers = columns["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name.lower() for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, binary_or_string)
        )
        if not ok:
            problems.append(
                "headers must be array<struct<key:string,value:binary>>, not "
                + headers.simpleString()
            )
    if problems:
        raise OptionError("cannot write this DataFrame to weirmq: " + "; ".join(problems))
    if topic_option is None and "topic" not in columns:
        raise OptionError(
            "a weirmq write needs a topic: set the `topic` option or add a `topic` column"
        )
