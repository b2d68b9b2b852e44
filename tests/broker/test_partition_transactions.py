"""Transactions in a partition (broker/partition.py): transactional appends checked with the
coordinator, markers, the last stable offset, read_committed reads and the aborted
transactions they carry, the rebuild of a lost index entry, and what refuses them.

The coordinator's check is replaced by a table here (`Check`), so that each rule of the
partition is tested alone; the coordinator itself is tested in tests/transactions/ and
with real clients in tests/integration/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from weirmq.broker.core import Broker
from weirmq.broker.partition import (
    Durability,
    NotOneBatchError,
    Partition,
    TransactionsUnsupportedError,
    TransactionWriteError,
)
from weirmq.errors import ErrorCode
from weirmq.records.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    Record,
    encode_batch,
    parse_header,
)
from weirmq.settings import Settings
from weirmq.storage import log as log_module
from weirmq.storage.errors import StorageError
from weirmq.storage.txnindex import AbortedTxn
from weirmq.types import TopicPartition


class Check:
    """The coordinator's answer per producer: NONE unless told otherwise."""

    def __init__(self) -> None:
        self.codes: dict[int, ErrorCode] = {}

    def __call__(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        return self.codes.get(producer_id, ErrorCode.none)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    opened = Broker(Settings(data_dir=str(tmp_path / "data")))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def check() -> Check:
    return Check()


@pytest.fixture
def partition(broker: Broker, check: Check) -> Partition:
    broker.create_topic("t", 1)
    found = broker.partition("t", 0)
    assert found is not None
    found.txn_check = check
    return found


def txn_batch(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytes:
    return encode_batch(
        [Record(b"p%d-%d" % (pid, seq + i)) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=ATTR_TRANSACTIONAL,
    )


def open_transaction(broker: Broker, txn_id: str, tp: TopicPartition) -> int:
    """A transaction of `txn_id` open on `tp`, through the coordinator (so its state is
    logged, and it is no orphan after a restart); its producer id, at epoch 0."""

    async def begin() -> int:
        code, producer_id, epoch = await broker.txns.init_producer_id(txn_id, 60_000, -1, -1)
        assert (code, epoch) == (ErrorCode.none, 0)
        assert await broker.txns.add_partitions(txn_id, producer_id, 0, [tp]) is ErrorCode.none
        return producer_id

    return asyncio.run(begin())


def plain(count: int = 1) -> bytes:
    return encode_batch([Record(b"plain") for _ in range(count)])


def offsets_of(records: bytes | memoryview) -> list[tuple[int, int, bool]]:
    """(base offset, last offset, is control) of each batch."""
    view = memoryview(records)
    found, position = [], 0
    while position < len(view):
        header = parse_header(view, position)
        found.append((header.base_offset, header.last_offset, header.is_control))
        position += header.size
    return found


def test_an_open_transaction_holds_the_last_stable_offset(partition: Partition) -> None:
    partition.publish(plain(), Durability.WRITTEN)  # 0
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)  # 1-2
    partition.publish(plain(), Durability.WRITTEN)  # 3
    partition.publish(txn_batch(7, 2), Durability.WRITTEN)  # 4-5, same transaction
    assert (partition.last_stable_offset, partition.high_watermark) == (1, 6)
    read, aborted = partition.read_committed(0, 1 << 20)
    assert read is not None and offsets_of(read.records) == [(0, 0, False)]
    assert aborted == []
    assert partition.read_committed(1, 1 << 20) == (None, [])
    assert partition.write_marker(7, 0, commit=True) == 6
    assert partition.last_stable_offset == partition.high_watermark == 7
    read, aborted = partition.read_committed(1, 1 << 20)
    assert read is not None
    assert offsets_of(read.records) == [
        (1, 2, False),
        (3, 3, False),
        (4, 5, False),
        (6, 6, True),
    ]
    assert aborted == []


def test_an_abort_is_indexed_and_handed_to_committed_readers(partition: Partition) -> None:
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)  # 0-1
    partition.publish(txn_batch(8, 0), Durability.WRITTEN)  # 2-3, another producer
    assert partition.write_marker(7, 0, commit=False) == 4
    assert partition.last_stable_offset == 2  # producer 8's transaction is still open
    read, aborted = partition.read_committed(0, 1 << 20)
    assert read is not None and offsets_of(read.records) == [(0, 1, False)]
    assert aborted == [AbortedTxn(7, 0, 4, 2)]
    partition.write_marker(8, 0, commit=True)
    read, aborted = partition.read_committed(2, 1 << 20)
    assert read is not None
    assert [o[0] for o in offsets_of(read.records)] == [2, 4, 5]
    assert aborted == [AbortedTxn(7, 0, 4, 2)]  # overlaps the range read from 2
    assert partition.read_committed(5, 1 << 20)[1] == []


def test_a_marker_for_no_open_transaction_writes_nothing(partition: Partition) -> None:
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)
    assert partition.write_marker(7, 0, commit=True) == 2
    end = partition.log_end_offset
    assert partition.write_marker(7, 0, commit=True) is None  # a retry after a crash
    assert partition.write_marker(99, 0, commit=False) is None
    assert partition.log_end_offset == end


def test_transactional_writes_need_the_coordinators_word(
    partition: Partition, check: Check
) -> None:
    check.codes[7] = ErrorCode.invalid_producer_epoch
    with pytest.raises(TransactionWriteError) as refused:
        partition.publish(txn_batch(7, 0), Durability.WRITTEN)
    assert refused.value.code is ErrorCode.invalid_producer_epoch
    partition.txn_check = None
    with pytest.raises(TransactionWriteError) as refused:
        partition.publish(txn_batch(8, 0), Durability.WRITTEN)
    assert refused.value.code is ErrorCode.invalid_txn_state
    assert partition.log_end_offset == 0


def test_control_batches_and_transactions_without_a_producer_are_refused(
    partition: Partition,
) -> None:
    control = encode_batch(
        [Record(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x01")],
        producer_id=7,
        producer_epoch=0,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )
    with pytest.raises(NotOneBatchError, match="control"):
        partition.publish(control, Durability.WRITTEN)
    anonymous = encode_batch([Record(b"v")], attributes=ATTR_TRANSACTIONAL)
    with pytest.raises(NotOneBatchError, match="producer id"):
        partition.publish(anonymous, Durability.WRITTEN)
    assert partition.log_end_offset == 0


def test_an_exchanges_topic_refuses_transactional_writes(broker: Broker, check: Check) -> None:
    broker.create_topic("x", 1)
    found = broker.partition("x", 0)
    assert found is not None
    found.txn_check = check

    class Router:
        def plan(self, records: bytes | memoryview) -> None:
            return None

        def deliver(self, plan: object, base_offset: int) -> None:
            pass

    found.router = Router()
    with pytest.raises(TransactionsUnsupportedError):
        found.publish(txn_batch(7, 0), Durability.WRITTEN)


def test_open_transactions_and_lost_abort_entries_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = Broker(Settings(data_dir=str(data)))
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.txn_check = Check()
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)  # 0-1
    partition.write_marker(7, 0, commit=False)  # 2
    pid = open_transaction(broker, "left-open", TopicPartition("t", 0))
    partition.publish(txn_batch(pid, 0), Durability.WRITTEN)  # 3-4, left open
    broker.close()
    for index in (data / "t-0").glob("*.txnindex"):
        index.unlink()  # as if the crash came before the index entry was written
    (data / "producer-state-snapshot").unlink(missing_ok=True)  # replay the whole log
    reopened = Broker(Settings(data_dir=str(data)))
    try:
        again = reopened.partition("t", 0)
        assert again is not None
        assert again.producers.ongoing == {pid: 3}
        assert again.last_stable_offset == 3
        read, aborted = again.read_committed(0, 1 << 20)
        assert read is not None
        assert aborted == [AbortedTxn(7, 0, 2, 3)]
    finally:
        reopened.close()


def test_a_clean_stop_keeps_open_transactions_in_the_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = Broker(Settings(data_dir=str(data)))
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.publish(plain(), Durability.WRITTEN)
    pid = open_transaction(broker, "left-open", TopicPartition("t", 0))
    partition.publish(txn_batch(pid, 0), Durability.WRITTEN)
    broker.close()
    reopened = Broker(Settings(data_dir=str(data)))
    try:
        again = reopened.partition("t", 0)
        assert again is not None
        assert (again.producers.ongoing, again.last_stable_offset) == ({pid: 1}, 1)
    finally:
        reopened.close()


def test_compression_type_rewrites_batches_in_its_codec(broker: Broker) -> None:
    broker.create_topic("z", 1, {"compression.type": "zstd"})
    found = broker.partition("z", 0)
    assert found is not None
    published = found.publish(plain(5), Durability.WRITTEN)
    assert (published.base_offset, published.last_offset) == (0, 4)
    stored = found.read(0, 1 << 20).records
    assert parse_header(memoryview(stored)).attributes & 0x07 == 4  # zstd


def test_a_damaged_abort_index_is_rebuilt_from_the_whole_log(tmp_path: Path) -> None:
    """A `.txnindex` found damaged at open is dropped; the producer state is then replayed
    from the log's start, ignoring the clean stop's snapshot, so the abort comes back."""
    data = tmp_path / "data"
    broker = Broker(Settings(data_dir=str(data)))
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.txn_check = Check()
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)  # 0-1
    partition.write_marker(7, 0, commit=False)  # 2
    partition.publish(plain(), Durability.WRITTEN)  # 3
    broker.close()  # a clean stop: the snapshot covers the whole log
    (index,) = (data / "t-0").glob("*.txnindex")
    index.write_bytes(b"\x00\x07garbage")
    reopened = Broker(Settings(data_dir=str(data)))
    try:
        again = reopened.partition("t", 0)
        assert again is not None and again.log.txn_index_dropped
        assert again.read_committed(0, 1 << 20)[1] == [AbortedTxn(7, 0, 2, 3)]
    finally:
        reopened.close()


def test_an_open_transaction_no_coordinator_state_covers_is_aborted_at_start(
    tmp_path: Path,
) -> None:
    """A crash can lose AddPartitionsToTxn's record (it is answered before its fsync) while
    the transaction's data survives: at the next start, that orphan is aborted so that the
    partition's last stable offset moves on."""
    data = tmp_path / "data"
    broker = Broker(Settings(data_dir=str(data)))
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.txn_check = Check()  # no coordinator state for producer 7 at all
    partition.publish(txn_batch(7, 0), Durability.WRITTEN)  # 0-1
    partition.publish(plain(), Durability.WRITTEN)  # 2
    assert partition.last_stable_offset == 0
    broker.close()
    reopened = Broker(Settings(data_dir=str(data)))
    try:
        again = reopened.partition("t", 0)
        assert again is not None
        assert again.producers.ongoing == {}
        assert again.last_stable_offset == again.high_watermark == 4  # the marker at 3
        assert again.read_committed(0, 1 << 20)[1] == [AbortedTxn(7, 0, 3, 4)]
    finally:
        reopened.close()


def test_a_transactional_write_is_acknowledged_without_waiting_for_an_fsync(
    partition: Partition,
) -> None:
    """Its commit fsyncs it (broker/txn_service.py); a plain acks=all write waits."""
    published = partition.publish(txn_batch(7, 0), Durability.FSYNCED)
    assert published.durable_offset is None
    retry = partition.publish(txn_batch(7, 0), Durability.FSYNCED)
    assert retry.duplicate and retry.durable_offset is None
    published = partition.publish(plain(), Durability.FSYNCED)
    assert published.durable_offset == published.last_offset + 1
    # Until the data directory records this boot (or after a failed fsync), a machine's
    # crash could go unnoticed: transactional writes then wait for their fsync too.
    partition.logs.boot_recorded = False
    published = partition.publish(txn_batch(7, 2), Durability.FSYNCED)
    assert published.durable_offset == published.last_offset + 1


def test_a_roll_back_reports_the_open_transactions_it_cut(
    partition: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Producer 7's transaction is durable, 8's has a write past the last good fsync: the
    roll-back after a failed fsync reports 8 alone, whichever path (here the log's own
    append, under a marker) made it."""
    lost: list[tuple[TopicPartition, list[int]]] = []
    partition.txn_lost = lambda tp, pids: lost.append((tp, pids))
    partition.publish(txn_batch(7, 0), Durability.FSYNCED)
    partition.publish(txn_batch(8, 0), Durability.FSYNCED)
    asyncio.run(partition.durable(partition.log_end_offset))
    partition.publish(txn_batch(8, 2), Durability.FSYNCED)
    assert partition.log_end_offset == 6
    real = log_module._fsync_path

    def failing(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "_fsync_path", failing)
    with pytest.raises(StorageError):
        asyncio.run(partition.durable(partition.log_end_offset))
    monkeypatch.setattr(log_module, "_fsync_path", real)
    partition.log.roll_back_unsynced()  # the log alone, as its own append or read would
    assert partition.log.probe_fsync()  # fsync works again: appends resume
    assert partition.log_end_offset == 4 and lost == []
    assert partition.write_marker(7, 0, commit=False) == 4  # the partition catches up first
    assert lost == [(partition.tp, [8])]
    assert set(partition.producers.ongoing) == {8}  # its durable first write still open
