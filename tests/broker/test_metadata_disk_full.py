"""Metadata changes on a full disk (issue 20): nothing is half-made, nothing is remembered
that is not on disk, and everything works again once space returns. The disk is made
full by injecting ENOSPC into the storage layer's writes."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from weirmq.broker.core import INTERNAL_TOPICS, Broker
from weirmq.broker.group_service import OFFSETS_TOPIC
from weirmq.errors import ErrorCode, KafkaError
from weirmq.groups.coordinator import CommitRequest
from weirmq.settings import Settings
from weirmq.storage import checkpoint, segment
from weirmq.storage.errors import DiskFullError

QUIET = 3_600_000  # no periodic flush during a test


class Disk:
    """Switches ENOSPC on and off for small-file writes and segment creation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        real_write = checkpoint._write_file
        real_create = segment.Segment.create_file

        def write_file(path: Path, data: bytes) -> None:
            if self.full:
                path.write_bytes(data[: len(data) // 2])  # a partial write, as a real disk
                raise OSError(errno.ENOSPC, "No space left on device")
            real_write(path, data)

        def create_file(seg: segment.Segment) -> None:
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            real_create(seg)

        monkeypatch.setattr(checkpoint, "_write_file", write_file)
        monkeypatch.setattr(segment.Segment, "create_file", create_file)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    opened = Broker(Settings(data_dir=tmp_path / "data", flush_interval_ms=QUIET))
    yield opened
    opened.close()


def saved_topics(broker: Broker) -> set[str]:
    return set(json.loads((broker.logs.data_dir / "topics.json").read_text())["topics"])


def tmp_files(broker: Broker) -> list[str]:
    return [name for name in os.listdir(broker.logs.data_dir) if name.endswith(".tmp")]


def commit(broker: Broker, group: str, offset: int) -> list[ErrorCode]:
    request = CommitRequest(group, "", -1, None, [("t", 0, offset, -1, None)])
    return broker.groups.commit_offsets(request, broker.clock())


def test_create_topic_on_full_disk_leaves_nothing(broker: Broker, disk: Disk) -> None:
    disk.full = True
    with pytest.raises(DiskFullError) as refused:
        broker.create_topic("t", 3)
    assert refused.value.code is ErrorCode.kafka_storage_error
    assert broker.topics.get("t") is None
    assert not any(tp.topic == "t" for tp in broker.partitions)
    assert tmp_files(broker) == []
    disk.full = False
    assert broker.create_topic("t", 3).partitions == 3
    assert saved_topics(broker) == {"t"}


def test_logs_that_cannot_be_made_undo_the_topic(broker: Broker, disk: Disk) -> None:
    real_add = broker._add_partition
    made: list[int] = []

    def add_then_fill(name: str, index: int, *rest: object) -> object:
        if index == 2:  # topics.json saved and two logs made: then the disk fills up
            disk.full = True
        made.append(index)
        return real_add(name, index, *rest)  # type: ignore[arg-type]

    broker._add_partition = add_then_fill  # type: ignore[method-assign]
    with pytest.raises(KafkaError):
        broker.create_topic("t", 4)
    assert made == [0, 1, 2]
    assert broker.topics.get("t") is None
    assert broker.logs.get("t", 0) is None and broker.logs.get("t", 1) is None
    assert not [d for d in os.listdir(broker.logs.data_dir) if d.startswith("t-")]
    disk.full = False
    broker._add_partition = real_add  # type: ignore[method-assign]
    assert broker.create_topic("t", 4).partitions == 4
    assert all(broker.partition("t", i) is not None for i in range(4))


def test_offsets_topic_created_on_a_full_disk_recovers_by_itself(
    broker: Broker, disk: Disk
) -> None:
    broker.create_topic("t", 1)
    disk.full = True
    for offset in (1, 2):  # every try fails cleanly; none leaves a topic without logs
        with pytest.raises(KafkaError) as refused:
            commit(broker, "g", offset)
        assert refused.value.code is ErrorCode.kafka_storage_error
        assert broker.topics.get(OFFSETS_TOPIC) is None
    disk.full = False
    assert commit(broker, "g", 7) == [ErrorCode.none]
    assert broker.partition(OFFSETS_TOPIC, 0) is not None
    assert OFFSETS_TOPIC in saved_topics(broker)


def test_delete_topic_on_full_disk_deletes_nothing(broker: Broker, disk: Disk) -> None:
    broker.create_topic("t", 2)
    disk.full = True
    with pytest.raises(DiskFullError):
        broker.delete_topic("t")
    assert broker.topics.get("t") is not None
    assert broker.partition("t", 0) is not None and broker.partition("t", 1) is not None
    assert saved_topics(broker) == {"t"}
    assert tmp_files(broker) == []
    disk.full = False
    broker.delete_topic("t")
    assert broker.topics.get("t") is None and saved_topics(broker) == set()


def test_config_change_and_growth_on_full_disk_change_nothing(broker: Broker, disk: Disk) -> None:
    broker.create_topic("t", 1)
    disk.full = True
    with pytest.raises(DiskFullError):
        broker.alter_topic_configs("t", {"retention.ms": "1000"})
    with pytest.raises(DiskFullError):
        broker.create_partitions("t", 3)
    topic = broker.topics.get("t")
    assert topic is not None and topic.partitions == 1 and topic.configs == {}
    assert broker.partition("t", 1) is None


def test_broker_stops_and_starts_with_a_full_disk(tmp_path: Path, disk: Disk) -> None:
    settings = Settings(data_dir=tmp_path / "data", flush_interval_ms=QUIET)
    broker = Broker(settings)
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    assert partition is not None
    from weirmq.records.batch import Record, encode_batch

    partition.append_internal(encode_batch([Record(b"v", None, (), 0)]))
    disk.full = True
    broker.close()  # writes nothing it cannot, and leaves no temp file
    assert tmp_files(broker) == []
    reopened = Broker(settings)  # starts although nothing can be written
    try:
        found = reopened.partition("t", 0)
        assert found is not None and found.log.log_end_offset == 1
        assert found.read(0, 1 << 20).records
    finally:
        reopened.close()


@pytest.mark.parametrize("name", sorted(INTERNAL_TOPICS))
def test_internal_topics_are_protected(broker: Broker, name: str) -> None:
    if broker.topics.get(name) is None:
        broker.create_topic(name, 1, {"cleanup.policy": "compact"})
    with pytest.raises(KafkaError) as deleting:
        broker.delete_records(name, 0, -1)
    assert deleting.value.code is ErrorCode.invalid_topic_exception
    with pytest.raises(KafkaError) as growing:
        broker.create_partitions(name, 2)
    assert growing.value.code is ErrorCode.invalid_request
    with pytest.raises(KafkaError) as altering:
        broker.alter_topic_configs(name, {"cleanup.policy": "delete"})
    assert altering.value.code is ErrorCode.invalid_request
    with pytest.raises(KafkaError) as replacing:
        broker.replace_topic_configs(name, {"retention.ms": "1"})
    assert replacing.value.code is ErrorCode.invalid_request
    with pytest.raises(KafkaError) as dropping:
        broker.delete_topic(name)
    assert dropping.value.code is ErrorCode.invalid_topic_exception


def test_metadata_never_auto_creates_an_internal_topic(broker: Broker) -> None:
    with pytest.raises(KafkaError) as refused:
        broker.topic(OFFSETS_TOPIC, auto_create=True)
    assert refused.value.code is ErrorCode.unknown_topic_or_partition
    assert broker.topics.get(OFFSETS_TOPIC) is None
