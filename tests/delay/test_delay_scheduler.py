"""Delayed delivery in a whole broker on manual time: due order, never early, restarts,
kills at every point, idempotent producers, refusals."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from weirmq.broker.configs import InvalidConfigError
from weirmq.broker.core import Broker
from weirmq.broker.delays import DELAYED_OFFSET_HEADER, DELAYED_TOPIC, InvalidDelayError
from weirmq.broker.partition import Durability, Partition
from weirmq.broker.producers import OutOfOrderSequenceError
from weirmq.broker.scan import scan_batches
from weirmq.records.batch import Record, decode_full_records, encode_batch
from weirmq.settings import Settings
from weirmq.testing.clock import ManualClock, ManualTimers

QUIET = 3_600_000  # no periodic flush: the test says when logs are fsynced
START = 1_700_000_000_000


class Node:
    """A broker on manual time, re-openable on its data directory."""

    def __init__(self, data: Path, now_ms: int = START) -> None:
        self.data = data
        self.timers = ManualTimers(ManualClock(now_ms))
        self.broker = Broker(
            Settings(data_dir=data, flush_interval_ms=QUIET),
            clock=self.timers.clock,
            timers=self.timers,
        )

    @property
    def now(self) -> int:
        return self.timers.clock.now_ms

    def partition(self, topic: str = "t", index: int = 0) -> Partition:
        found = self.broker.partition(topic, index)
        assert found is not None
        return found

    def produce(self, *records: Record, topic: str = "t", index: int = 0, **batch: int) -> int:
        encoded = encode_batch(list(records), **batch)
        return self.partition(topic, index).publish(encoded, Durability.WRITTEN).base_offset

    def sync(self) -> None:
        """Fsync every log (what the group committer does soon after a delivery)."""
        for partition in list(self.broker.partitions.values()):
            self.broker.logs.sync(partition.log).result(10)

    def step(self, ms: int) -> None:
        """Advance time, fsyncing after every timer so that deliveries are confirmed."""
        end = self.now + ms
        while self.timers.pending and self.timers.pending[0] <= end:
            self.timers.advance(max(0, self.timers.pending[0] - self.now))
            self.sync()
        self.timers.advance(end - self.now)

    def values(self, topic: str = "t", index: int = 0) -> list[bytes | None]:
        return [record.value for record in self.records(topic, index)]

    def records(self, topic: str = "t", index: int = 0) -> list[Record]:
        partition = self.partition(topic, index)
        found = []
        for batch in scan_batches(partition.log, partition.log_start_offset):
            found += [record for _, record in decode_full_records(batch)]
        return found

    def close(self) -> None:
        self.broker.close()

    def crash_image(self, to: Path) -> Path:
        """What a kill -9 now would leave: the files as they are (page cache survives)."""
        shutil.copytree(self.data, to)
        (to / ".lock").unlink(missing_ok=True)
        return to


DELAYS_ON = {"weirmq.delay.enable": "true"}
"""Delayed delivery is per topic, off by default."""


def delayed(value: bytes, delay_ms: int, now_ms: int, *extra: tuple[str, bytes]) -> Record:
    headers = (("weirmq.delay.ms", str(delay_ms).encode()), *extra)
    return Record(value, None, headers, now_ms)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    opened = Node(tmp_path / "data")
    opened.broker.create_topic("t", 1, DELAYS_ON)
    yield opened
    opened.close()


def test_records_arrive_in_due_order_never_early(node: Node) -> None:
    delays = [50, 0, 300, 10, 300, 120, 10]
    for number, delay in enumerate(delays):
        offset = node.produce(delayed(b"%d" % number, delay, node.now))
        assert offset == (0 if delay == 0 else -1)  # a delay of 0 is no delay
    assert node.values() == [b"1"]  # nothing else is appended before its time
    due = {b"%d" % n: START + d for n, d in enumerate(delays)}
    seen: list[bytes | None] = []
    for _ in range(400):
        node.step(1)
        seen = node.values()
        assert all(due[v] <= node.now for v in seen if v is not None), "delivered early"
        assert set(seen) >= {v for v, d in due.items() if d < node.now}, "not delivered"
    # Due order; ties (two at 10, two at 300) in produce order.
    assert seen == [b"1", b"3", b"6", b"0", b"5", b"2", b"4"]


def test_delivered_records_keep_key_headers_and_timestamp(node: Node) -> None:
    node.produce(
        Record(b"v", b"k", (("weirmq.delay.ms", b"5"), ("h", b"1")), START - 3000),
        Record(b"w", None, (), START - 2000),
    )
    node.step(5)
    first, second = node.records()
    assert (first.value, first.key, first.timestamp_ms) == (b"w", None, START - 2000)
    assert second.key == b"k" and second.timestamp_ms == START - 3000
    assert second.headers == (
        ("weirmq.delay.ms", b"5"),
        ("h", b"1"),
        (DELAYED_OFFSET_HEADER, b"0:0"),
    )


def test_a_batch_whose_delays_are_past_is_published_as_usual(node: Node) -> None:
    past = Record(b"p", None, (("weirmq.deliver.at.ms", b"1000"),), START)
    assert node.produce(past) == 0
    assert node.broker.partition(DELAYED_TOPIC, 0) is None


def test_a_malformed_delay_refuses_the_batch_and_writes_nothing(node: Node) -> None:
    bad = Record(b"x", None, (("weirmq.delay.ms", b"-1"),), START)
    with pytest.raises(InvalidDelayError, match="non-negative"):
        node.produce(Record(b"ok", None, (), START), bad)
    assert node.values() == []
    assert node.broker.partition(DELAYED_TOPIC, 0) is None


def test_an_exchange_cannot_enable_delays(node: Node) -> None:
    with pytest.raises(InvalidConfigError, match="not exchanges"):
        node.broker.create_topic("x", 1, {"weirmq.exchange.type": "fanout", **DELAYS_ON})
    node.broker.create_topic("x", 1, {"weirmq.exchange.type": "fanout"})
    with pytest.raises(InvalidConfigError, match="not exchanges"):
        node.broker.alter_topic_configs("x", DELAYS_ON)


def test_a_topic_without_delays_enabled_delivers_at_once(node: Node) -> None:
    node.broker.create_topic("plain", 1)
    node.produce(delayed(b"now", 60_000, START), topic="plain")
    assert node.partition("plain").log_end_offset == 1
    assert node.broker.stats.delays.pending == 0


def test_the_delayed_log_start_follows_delivery(node: Node) -> None:
    node.produce(delayed(b"a", 10, START))
    node.produce(delayed(b"b", 1000, START))
    node.produce(delayed(b"c", 20, START))
    node.step(30)
    log = node.partition(DELAYED_TOPIC)
    assert (log.log_start_offset, log.log_end_offset) == (1, 3)  # b still waits at 1
    node.step(1000)
    assert log.log_start_offset == 3
    assert node.broker.stats.delays.pending == 0
    assert node.broker.stats.delays.delivered == 3


def test_a_deleted_topic_drops_its_delayed_records(node: Node) -> None:
    node.broker.create_topic("gone", 1, DELAYS_ON)
    node.produce(delayed(b"x", 10, START), topic="gone")
    node.produce(delayed(b"y", 10, START))
    node.broker.delete_topic("gone")
    node.step(20)
    assert node.values() == [b"y"]
    assert node.broker.stats.delays.dropped == 1


def test_a_tick_delivers_a_bounded_number_then_the_rest(node: Node) -> None:
    from weirmq.broker import delays

    total = delays.TICK_RECORDS_MAX * 2 + 5
    node.produce(*(delayed(b"%d" % n, 10, START) for n in range(total)))
    node.timers.clock.advance(10)
    assert node.broker.delays.tick(node.now)  # more is due
    assert len(node.values()) == delays.TICK_RECORDS_MAX
    node.step(1)
    assert node.values() == [b"%d" % n for n in range(total)]


def test_pending_records_survive_a_clean_restart(tmp_path: Path) -> None:
    first = Node(tmp_path / "data")
    first.broker.create_topic("t", 2, DELAYS_ON)
    first.produce(delayed(b"a", 100, START), index=1)
    first.produce(delayed(b"b", 50, START))
    first.step(60)
    assert first.values() == [b"b"]
    first.close()
    second = Node(tmp_path / "data", START + 70)
    assert second.values(index=1) == []
    second.step(29)
    assert second.values(index=1) == []  # not early after a restart either
    second.step(1)
    assert second.values(index=1) == [b"a"]
    assert second.values() == [b"b"]
    second.close()


def test_a_kill_at_any_point_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """Images of the data directory at every step (what a kill -9 leaves), each restarted:
    every record is delivered exactly once in the end."""
    live = Node(tmp_path / "data")
    live.broker.create_topic("t", 1, DELAYS_ON)
    images = []
    expected = []
    for number in range(6):
        value = b"%d" % number
        expected.append(value)
        live.produce(delayed(value, 10 * (number % 3), live.now))
        images.append(live.crash_image(tmp_path / f"kill-{len(images)}"))
        live.timers.advance(7)  # delivers, and leaves deliveries unconfirmed (no fsync)
        images.append(live.crash_image(tmp_path / f"kill-{len(images)}"))
    live.step(100)
    assert sorted(live.values()) == sorted(expected)
    live.close()
    for image in images:
        restarted = Node(image, live.now)
        restarted.step(100)
        values = restarted.values()
        assert len(values) == len(set(values)), f"{image.name}: delivered twice: {values}"
        produced = {v for v in expected if int(v) <= int(image.name.split("-")[1]) // 2}
        assert set(values) == produced, image.name
        restarted.close()


def test_a_lost_index_is_rebuilt_from_the_delayed_log(tmp_path: Path) -> None:
    first = Node(tmp_path / "data")
    first.broker.create_topic("t", 1, DELAYS_ON)
    first.produce(delayed(b"a", 10, START))
    first.produce(delayed(b"b", 40, START))
    first.step(20)
    first.close()
    for leftover in (tmp_path / "data").glob("delayed-index.sqlite*"):
        leftover.unlink()
    second = Node(tmp_path / "data", START + 20)
    second.step(40)
    assert second.values() == [b"a", b"b"]
    second.close()


def test_an_idempotent_producer_stays_in_sequence_across_diverted_batches(node: Node) -> None:
    pid = {"producer_id": 7, "producer_epoch": 0}
    assert node.produce(Record(b"0", None, (), START), base_sequence=0, **pid) == 0
    assert node.produce(delayed(b"1", 10, START), base_sequence=1, **pid) == -1
    assert node.produce(delayed(b"2", 10, START), base_sequence=2, **pid) == -1
    # A retry of a diverted batch is a duplicate: answered, not written again.
    retry = node.partition().publish(
        encode_batch([delayed(b"1", 10, START)], base_sequence=1, **pid), Durability.WRITTEN
    )
    assert retry.duplicate and retry.base_offset == -1
    with pytest.raises(OutOfOrderSequenceError):
        node.produce(Record(b"x", None, (), START), base_sequence=5, **pid)
    assert node.produce(Record(b"3", None, (), START), base_sequence=3, **pid) == 1
    assert node.produce(delayed(b"4", 10, START), base_sequence=4, **pid) == -1
    node.step(10)
    assert node.values() == [b"0", b"3", b"1", b"2", b"4"]


def test_an_idempotent_producer_stays_in_sequence_across_a_restart(tmp_path: Path) -> None:
    pid = {"producer_id": 9, "producer_epoch": 0}
    first = Node(tmp_path / "data")
    first.broker.create_topic("t", 1, DELAYS_ON)
    first.produce(Record(b"0", None, (), START), base_sequence=0, **pid)
    first.produce(delayed(b"1", 10, START), base_sequence=1, **pid)
    image = first.crash_image(tmp_path / "killed")
    first.close()
    for directory in (tmp_path / "data", image):
        node = Node(directory, START + 1)
        retry = node.partition().publish(
            encode_batch([delayed(b"1", 10, START)], base_sequence=1, **pid), Durability.WRITTEN
        )
        assert retry.duplicate, directory.name
        assert node.produce(Record(b"2", None, (), START), base_sequence=2, **pid) == 1
        node.step(20)
        assert node.values() == [b"0", b"2", b"1"], directory.name
        node.close()
