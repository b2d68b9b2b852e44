"""Writing a Spark task's rows to WeirMQ topics: Arrow batches into a Kafka producer.

Spark hands each write task its rows as Arrow record batches (the data source is an
`DataSourceArrowWriter`), so a column comes out as one Python list with one C++ call
(`to_pylist`) and the per-row work is a single `Producer.produce`. librdkafka batches,
compresses (with `kafka.compression.type`) and pipelines the records; delivery reports are
asked for failures only (`delivery.report.only.error`), so a healthy write costs no Python
callback per record.

Guarantee: at least once, like Spark's Kafka sink. A task returns only after every one of
its records is acknowledged (`flush`), and fails if any was refused, so Spark retries it;
a retried task (or a micro-batch replayed after a crash) writes its rows again. Readers
that need exactly-once effects deduplicate on a key of their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

FLUSH_POLL_S = 1.0


class WriteError(RuntimeError):
    """Some records of a task were not acknowledged by the broker."""


def producer_config(client: Mapping[str, str], on_error: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"linger.ms": 5}
    config.update(client)
    config["on_delivery"] = on_error
    config["delivery.report.only.error"] = True
    return config


def write_batches(batches: Iterator[Any], client: Mapping[str, str], topic: str | None) -> int:
    """Produces every row of every batch; returns the number of records acknowledged."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def on_error(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    producer = Producer(producer_config(client, on_error))
    produce = producer.produce
    written = 0
    for batch in batches:
        columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = columns["value"].to_pylist()
        keys = columns["key"].to_pylist() if "key" in columns else [None] * n
        topics = [topic] * n if topic is not None else columns["topic"].to_pylist()
        partitions = columns["partition"].to_pylist() if "partition" in columns else None
        headers = columns["headers"].to_pylist() if "headers" in columns else None
        for i in range(n):
            row_topic = topics[i]
            if row_topic is None:
                raise WriteError(
                    "a row has a null topic and no `topic` option is set; every record "
                    "needs a topic"
                )
            kwargs: dict[str, Any] = {}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(row_topic, values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    # librdkafka's local queue is full: let deliveries drain, then retry.
                    producer.poll(0.05)
            if failures:
                break
        written += n
        producer.poll(0)
        if failures:
            break
    while producer.flush(FLUSH_POLL_S) > 0:
        pass
    if failures:
        shown = "; ".join(failures[:3])
        raise WriteError(f"{len(failures)} record(s) were not written: {shown}")
    return written
