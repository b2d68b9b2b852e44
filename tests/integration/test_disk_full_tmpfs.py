"""A real broker on a real, small file system that fills up (issue 20, "disk full").

The data directory lives on an 8 MiB tmpfs mounted for the test (CI runs as root). A
filler file takes the remaining space; then every write path must answer
KAFKA_STORAGE_ERROR (produce, CreateTopics, the first OffsetCommit, which has to create
`__consumer_offsets`), earlier data must stay readable, the broker must stop cleanly
(exit 0, no stray ``.tmp`` files) and start again with the disk still full, and once the
filler is removed publishing, creating topics and committing resume without a restart.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess

TOPIC = "orders"
EARLIER = 40


def _mount_tmpfs(where: Path) -> str | None:
    """Mount an 8 MiB tmpfs at `where`; the reason it could not be, or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    reason = _mount_tmpfs(mount_point)
    if reason is not None:
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def disk_broker(small_disk: Path, tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(small_disk / "data", tmp_path / "logs")
    try:
        yield broker.start()
    finally:
        broker.close()


def fill(disk: Path) -> Path:
    """Take every free byte of `disk` with one file; returns it."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    for size in (4096, 512, 1):  # the last partial chunk
        try:
            with filler.open("ab", buffering=0) as out:
                while True:
                    out.write(b"\0" * size)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def produce(bootstrap: str, values: list[bytes], **config: object) -> list[KafkaError | None]:
    """Send `values` with acks=all and no retries; each one's delivery error (or None)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "message.timeout.ms": 10_000,
            "enable.idempotence": False,
            **config,
        }
    )
    errors: list[KafkaError | None] = []
    for value in values:
        producer.produce(TOPIC, value, partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(20) == 0
    return errors


def read_all(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(200):
            message = consumer.poll(0.2)
            if message is None:
                if len(values) >= expected:
                    break
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values


def commit(bootstrap: str, group: str, offset: int) -> int:
    """Commit `offset` for the group on partition 0; the error code (0: committed)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        committed = consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
    except KafkaException as exc:
        return int(exc.args[0].code())
    finally:
        consumer.close()
    assert committed is not None
    error = committed[0].error
    return 0 if error is None else int(error.code())


def committed_offset(bootstrap: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
    finally:
        consumer.close()
    return int(found.offset)


def create_topic(bootstrap: str, name: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def stray_tmp_files(data_dir: Path) -> list[Path]:
    return [p for p in data_dir.rglob("*.tmp")]


def test_full_disk_refuses_writes_serves_reads_and_recovers(
    disk_broker: BrokerProcess, small_disk: Path
) -> None:
    bootstrap = disk_broker.bootstrap
    assert create_topic(bootstrap, TOPIC) == 0
    earlier = [b"earlier-%03d" % i for i in range(EARLIER)]
    assert produce(bootstrap, earlier) == [None] * EARLIER

    filler = fill(small_disk)

    refused = produce(bootstrap, [b"x" * 2000 for _ in range(5)])
    assert {e.code() if e else None for e in refused} == {KafkaError.KAFKA_STORAGE_ERROR}
    assert create_topic(bootstrap, "while-full") == KafkaError.KAFKA_STORAGE_ERROR
    # No group has committed yet: this commit must create __consumer_offsets and cannot.
    assert commit(bootstrap, "g", 10) == KafkaError.KAFKA_STORAGE_ERROR
    assert commit(bootstrap, "g", 11) == KafkaError.KAFKA_STORAGE_ERROR
    assert read_all(bootstrap, EARLIER) == earlier

    # Stop and start with the disk still full: a clean exit, nothing half-written left.
    assert disk_broker.stop() == 0, disk_broker.stderr_tail()
    assert stray_tmp_files(disk_broker.data_dir) == []
    disk_broker.start()
    bootstrap = disk_broker.bootstrap
    assert read_all(bootstrap, EARLIER) == earlier  # consumers can drain a full broker
    assert commit(bootstrap, "g", 12) == KafkaError.KAFKA_STORAGE_ERROR

    filler.unlink()  # space returns: everything resumes in the running broker

    later = [b"later-%03d" % i for i in range(10)]
    assert produce(bootstrap, later) == [None] * 10
    assert read_all(bootstrap, EARLIER + 10) == earlier + later
    assert create_topic(bootstrap, "after-full") == 0
    assert commit(bootstrap, "g", 42) == 0
    assert committed_offset(bootstrap, "g") == 42

    assert disk_broker.stop() == 0, disk_broker.stderr_tail()
    assert stray_tmp_files(disk_broker.data_dir) == []
    stderr = (disk_broker.log_dir / "broker-1.stderr").read_text()
    stderr += disk_broker.stderr_tail(1_000_000)
    assert "Traceback" not in stderr, stderr


def test_internal_topics_are_refused_to_admin_clients(disk_broker: BrokerProcess) -> None:
    bootstrap = disk_broker.bootstrap
    assert create_topic(bootstrap, TOPIC) == 0
    assert commit(bootstrap, "g", 1) == 0  # the broker makes __consumer_offsets
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert create_topic(bootstrap, "__consumer_offsets") == KafkaError.INVALID_REQUEST
    deleting = admin.delete_records([TopicPartition("__consumer_offsets", 0, -1)])
    with pytest.raises(KafkaException) as refused:
        next(iter(deleting.values())).result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert committed_offset(bootstrap, "g") == 1


def _take_all_but(disk: Path, filler: Path, free_bytes: int) -> None:
    """Grow the filler file until the file system has `free_bytes` left (zeros written,
    so tmpfs really allocates them)."""
    stat = os.statvfs(disk)
    grow = stat.f_bavail * stat.f_frsize - free_bytes
    with filler.open("ab", buffering=0) as out:
        while grow > 0:
            grow -= out.write(b"\0" * min(grow, 1 << 20))


def test_below_the_free_space_floor_publishes_are_refused_then_resume(
    small_disk: Path, tmp_path: Path
) -> None:
    """The floor (`disk_free_min_bytes`) refuses publishes before the disk is full, with
    KAFKA_STORAGE_ERROR; reads go on; publishing resumes by itself once space is back."""
    floor = 2 << 20  # 2 MiB of the 8 MiB file system
    broker = BrokerProcess(
        small_disk / "data", tmp_path / "logs", env={"WEIRMQ_DISK_FREE_MIN_BYTES": str(floor)}
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)
        assert produce(broker.bootstrap, [b"before"])[0] is None
        filler = small_disk / "filler"
        _take_all_but(small_disk, filler, floor // 2)  # below the floor
        refused: list[KafkaError | None] = []
        for _ in range(100):  # measured once a second: wait for the broker to notice
            refused = produce(broker.bootstrap, [b"refused"])
            if refused[0] is not None:  # (a KafkaError must not be compared with None)
                break
            time.sleep(0.1)
        assert refused[0] is not None
        assert refused[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        assert read_all(broker.bootstrap, 1)[0] == b"before"
        os.truncate(filler, 0)  # space is back
        resumed: list[KafkaError | None] = []
        for _ in range(100):
            resumed = produce(broker.bootstrap, [b"after"])
            if resumed[0] is None:
                break
            time.sleep(0.1)
        assert resumed[0] is None
        assert "Traceback" not in broker.stderr_tail()
    finally:
        broker.close()
