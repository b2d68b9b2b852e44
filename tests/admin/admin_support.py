"""Helpers of the admin API tests: brokers on temporary data directories, and their data.

The broker is `weirmq.broker.core.Broker` itself, built directly (no listener, no thread):
the admin application reads it on whatever loop the test runs, as it reads it on the
broker's own loop in production.
"""

from __future__ import annotations

from pathlib import Path

from weirmq.broker.core import Broker
from weirmq.broker.settings import Settings
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

SEGMENT_BYTES = 1024
"""The smallest segment size settings allow, so a few batches make several segments."""


def make_broker(data_dir: Path, clock: ManualClock | None = None, **settings: object) -> Broker:
    return Broker(
        Settings(data_dir=data_dir, default_partitions=2, **settings),  # type: ignore[arg-type]
        clock=clock,
    )


def produce(broker: Broker, topic: str, partition: int, batches: int, records: int = 3) -> int:
    """Append `batches` batches of `records` records, as the Produce handler does (append,
    then tell the broker); returns the bytes appended."""
    log = broker.partition_log(topic, partition)
    assert log is not None
    appended = 0
    for _ in range(batches):
        batch = make_batch(records, size=100)
        log.append(batch)
        broker.appended((topic, partition), len(batch), records)
        appended += len(batch)
    return appended


def broker_with_an_offline_partition(data_dir: Path) -> Broker:
    """A broker whose partition ("damaged", 0) is offline: a segment in the middle of its
    log went missing while the broker was down, which recovery refuses to paper over."""
    first = make_broker(data_dir, segment_bytes=SEGMENT_BYTES)
    first.create_topic("damaged", 1)
    log = first.partition_log("damaged", 0)
    assert log is not None
    for _ in range(3):  # each ~600-byte batch fills most of a 1 KiB segment: 3 segments
        log.append(make_batch(1, size=600))
    assert log.segment_count == 3
    middle = log.segments[1].log_path
    first.close()
    Path(middle).unlink()
    return make_broker(data_dir, segment_bytes=SEGMENT_BYTES)
