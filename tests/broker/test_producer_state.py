"""Idempotent producers across restarts: the data directory's producer-state file.

A clean stop writes every partition's producer state into one file once the logs are
durable, before the clean-shutdown marker; a start restores each partition from its entry
(or from the per-partition file of older versions) and replays only the log after it. A
snapshot that does not match the log is ignored and the whole log replayed instead, and
a stop cut short anywhere leaves a directory the broker starts from with nothing lost.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from weirmq.broker import partition as partition_module
from weirmq.broker.core import Broker
from weirmq.broker.partition import (
    PRODUCER_SNAPSHOT_FILE,
    PRODUCER_STATE_FILE,
    Durability,
    Partition,
)
from weirmq.broker.producers import OutOfOrderSequenceError, PartitionProducers
from weirmq.records.batch import BatchHeader, Record, encode_batch
from weirmq.settings import Settings
from weirmq.storage.log import FileLog
from weirmq.storage.manager import CLEAN_SHUTDOWN_FILE
from weirmq.storage.state_file import decode_states, encode_states

QUIET = 3_600_000  # no periodic flush: only the stop writes files


def open_broker(data_dir: Path) -> Broker:
    return Broker(Settings(data_dir=data_dir, flush_interval_ms=QUIET))


def idempotent(pid: int, first_seq: int, count: int = 1) -> bytes:
    records = [Record(value=b"v%d" % (first_seq + i)) for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=first_seq)


def the(broker: Broker, topic: str, index: int) -> Partition:
    found = broker.partition(topic, index)
    assert found is not None
    return found


def fill(broker: Broker, topic: str, partitions: int, pid: int) -> dict[int, tuple[bytes, int]]:
    """Two batches per partition; returns each partition's last batch and its offset."""
    last = {}
    for p in range(partitions):
        partition = the(broker, topic, p)
        partition.publish(idempotent(pid, 0, count=2), Durability.WRITTEN)
        batch = idempotent(pid, 2, count=p % 3 + 1)
        last[p] = (batch, partition.publish(batch, Durability.WRITTEN).base_offset)
    return last


def check_dedup(broker: Broker, topic: str, pid: int, last: dict[int, tuple[bytes, int]]) -> None:
    """Every partition still knows `pid`: a retry of its last batch gets the original
    offsets and writes nothing, a gap is refused, the next batch is appended."""
    for p, (batch, offset) in last.items():
        partition = the(broker, topic, p)
        end = partition.log_end_offset
        retry = partition.publish(batch, Durability.WRITTEN)
        assert (retry.duplicate, retry.base_offset) == (True, offset)
        assert partition.log_end_offset == end
        next_seq = 2 + p % 3 + 1
        with pytest.raises(OutOfOrderSequenceError):
            partition.publish(idempotent(pid, next_seq + 1), Durability.WRITTEN)
        assert partition.publish(idempotent(pid, next_seq), Durability.WRITTEN).base_offset == end


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Per partition directory, the offset its producer state was replayed from at start."""
    starts: dict[str, int] = {}
    real = partition_module.scan_batch_headers

    def spy(partition_log: FileLog, start: int) -> Iterator[BatchHeader]:
        starts[partition_log.directory.name] = start
        return real(partition_log, start)

    monkeypatch.setattr(partition_module, "scan_batch_headers", spy)
    return starts


def test_a_clean_restart_keeps_every_partitions_producers(
    tmp_path: Path, replays: dict[str, int]
) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("t", 200)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 200, pid)
    ends = {f"t-{p}": the(broker, "t", p).log_end_offset for p in range(200)}
    broker.close()
    assert (tmp_path / PRODUCER_STATE_FILE).exists()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert not list(tmp_path.glob(f"*/{PRODUCER_SNAPSHOT_FILE}"))  # one file, not 200

    again = open_broker(tmp_path)
    assert {name: start for name, start in replays.items() if name.startswith("t-")} == ends
    check_dedup(again, "t", pid, last)
    again.close()


def test_the_per_partition_files_of_older_versions_are_still_read(
    tmp_path: Path, replays: dict[str, int]
) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("t", 4)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 4, pid)
    old_files = {
        p: the(broker, "t", p).producers.snapshot(the(broker, "t", p).log_end_offset)
        for p in range(4)
    }
    ends = {f"t-{p}": the(broker, "t", p).log_end_offset for p in range(4)}
    broker.close()
    # What an older version leaves: a snapshot in each partition directory, none beside.
    (tmp_path / PRODUCER_STATE_FILE).unlink()
    for p, data in old_files.items():
        (tmp_path / f"t-{p}" / PRODUCER_SNAPSHOT_FILE).write_bytes(data)

    again = open_broker(tmp_path)
    assert {name: start for name, start in replays.items() if name.startswith("t-")} == ends
    check_dedup(again, "t", pid, last)
    again.close()


def test_the_data_directorys_entry_wins_over_an_old_partition_file(
    tmp_path: Path, replays: dict[str, int]
) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("t", 1)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 1, pid)
    broker.close()
    stale = PartitionProducers().snapshot(0)  # an old file: nobody had written yet
    (tmp_path / "t-0" / PRODUCER_SNAPSHOT_FILE).write_bytes(stale)
    again = open_broker(tmp_path)
    assert replays["t-0"] == the(again, "t", 0).log_end_offset
    check_dedup(again, "t", pid, last)
    again.close()


def _beyond_the_log(entry: bytes) -> bytes:
    return entry[:16] + PartitionProducers().snapshot(1_000)  # covers records never written


def _damaged(entry: bytes) -> bytes:
    return entry[:-1] + bytes([entry[-1] ^ 0x01])  # its own CRC no longer matches


@pytest.mark.parametrize("change", [_beyond_the_log, _damaged])
def test_a_snapshot_that_does_not_match_the_log_is_ignored(
    tmp_path: Path, replays: dict[str, int], change: Callable[[bytes], bytes]
) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("t", 2)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 2, pid)
    broker.close()
    path = tmp_path / PRODUCER_STATE_FILE
    states = decode_states(path.read_bytes())
    states[("t", 0)] = change(states[("t", 0)])  # the file stays whole, one entry is wrong
    path.write_bytes(encode_states(states))

    again = open_broker(tmp_path)
    assert replays["t-0"] == 0  # the whole log: the state comes from it alone
    assert replays["t-1"] == the(again, "t", 1).log_end_offset
    check_dedup(again, "t", pid, last)
    again.close()


def test_a_deleted_topics_snapshot_is_not_applied_to_its_successor(
    tmp_path: Path, replays: dict[str, int]
) -> None:
    # The new topic's log reaches past the old snapshot's offset, so only the topic id
    # tells them apart; applying the old state would mix two producers' histories.
    broker = open_broker(tmp_path)
    broker.create_topic("t", 1)
    old_pid = broker.producer_ids.allocate()
    fill(broker, "t", 1, old_pid)
    broker.close()
    broker = open_broker(tmp_path)  # the file now holds the old topic's state
    broker.delete_topic("t")
    broker.create_topic("t", 1)
    new_pid = broker.producer_ids.allocate()
    partition = the(broker, "t", 0)
    for seq in range(0, 10, 2):
        partition.publish(idempotent(new_pid, seq, count=2), Durability.WRITTEN)
    crashed = tmp_path.with_name(tmp_path.name + "-crashed")
    shutil.copytree(tmp_path, crashed)  # a crash: the stale file stays, no marker
    broker.close()

    again = open_broker(crashed)
    assert replays["t-0"] == 0
    producers = the(again, "t", 0).producers
    assert old_pid not in producers and new_pid in producers
    again.close()


def _crash_image(broker: Broker, image: Path) -> None:
    shutil.copytree(broker.settings.data_dir, image)


def _after_the_logs_are_flushed(broker: Broker, image: Path) -> None:
    broker.logs.flush_for_close()
    _crash_image(broker, image)


def _after_everything_but_the_marker(broker: Broker, image: Path) -> None:
    broker.close()
    _crash_image(broker, image)
    (image / CLEAN_SHUTDOWN_FILE).unlink()


@pytest.mark.parametrize(
    "interrupted", [_after_the_logs_are_flushed, _after_everything_but_the_marker]
)
@pytest.mark.parametrize("stale", [False, True], ids=["first-stop", "after-a-clean-restart"])
def test_a_stop_interrupted_midway_recovers(
    tmp_path: Path, interrupted: Callable[[Broker, Path], None], stale: bool
) -> None:
    data = tmp_path / "data"
    broker = open_broker(data)
    broker.create_topic("t", 20)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 20, pid)
    if stale:  # the file of that stop stays behind, older than the log
        broker.close()
        broker = open_broker(data)
        for p in range(20):
            batch = idempotent(pid, 2 + p % 3 + 1, count=2)
            last[p] = (batch, the(broker, "t", p).publish(batch, Durability.WRITTEN).base_offset)
    ends = {p: the(broker, "t", p).log_end_offset for p in range(20)}
    image = tmp_path / "image"
    interrupted(broker, image)
    broker.close()

    again = open_broker(image)
    assert {p: the(again, "t", p).log_end_offset for p in range(20)} == ends
    for p, (batch, offset) in last.items():
        retry = the(again, "t", p).publish(batch, Durability.WRITTEN)
        assert (retry.duplicate, retry.base_offset) == (True, offset)
    again.close()


def test_a_kill_at_any_step_of_a_stop_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kill -9 keeps the page cache: the directory as it is at each step of the stop (each
    # fsync and rename) is what the next start finds. Every one must start, with every
    # record and every producer's retries still answered.
    data = tmp_path / "data"
    broker = open_broker(data)
    broker.create_topic("t", 6)
    pid = broker.producer_ids.allocate()
    last = fill(broker, "t", 6, pid)
    broker.close()  # a first stop, so that an older file exists too
    broker = open_broker(data)
    for p in range(6):
        batch = idempotent(pid, 2 + p % 3 + 1)
        last[p] = (batch, the(broker, "t", p).publish(batch, Durability.WRITTEN).base_offset)
    ends = {p: the(broker, "t", p).log_end_offset for p in range(6)}

    images: list[Path] = []
    lock = threading.Lock()
    real_fsync, real_replace = os.fsync, os.replace

    def image_then(real: Callable[..., None]) -> Callable[..., None]:
        def step(*args: object) -> None:
            with lock:
                images.append(tmp_path / f"kill-{len(images)}")
                shutil.copytree(data, images[-1])
            real(*args)

        return step

    monkeypatch.setattr(os, "fsync", image_then(real_fsync))
    monkeypatch.setattr(os, "replace", image_then(real_replace))
    broker.close()
    monkeypatch.undo()
    assert len(images) >= 5  # logs, temp files, renames, directory, marker

    for image in images:
        again = open_broker(image)
        assert {p: the(again, "t", p).log_end_offset for p in range(6)} == ends, image.name
        for p, (batch, offset) in last.items():
            retry = the(again, "t", p).publish(batch, Durability.WRITTEN)
            assert (retry.duplicate, retry.base_offset) == (True, offset), image.name
        again.close()
