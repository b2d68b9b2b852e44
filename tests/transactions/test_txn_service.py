"""The transaction coordinator's I/O (broker/txn_service.py) on an in-process broker:
an end that a stop interrupted after PREPARE_COMMIT is finished after the restart, and a
transaction open past its timeout is aborted with a marker by the timer.

Time is a `ManualClock`; the timer's work is called directly (`tick`), as the broker's
timer would call it.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from weirmq.broker import txn_service
from weirmq.broker.core import Broker
from weirmq.broker.partition import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Durability,
    Partition,
    control_type,
)
from weirmq.broker.txn_service import TransactionService
from weirmq.errors import ErrorCode
from weirmq.records.batch import ATTR_TRANSACTIONAL, Record, encode_batch, parse_header
from weirmq.settings import Settings
from weirmq.storage import log as log_module
from weirmq.storage.errors import StorageError
from weirmq.storage.manager import BOOT_ID_FILE, CLEAN_SHUTDOWN_FILE
from weirmq.testing import ManualClock, ManualTimers
from weirmq.transactions.state import TxnMetadata, TxnState
from weirmq.types import TopicPartition

QUIET_MS = 3_600_000  # no periodic flush
TID = "tid"
TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]
TIMEOUT_MS = 5_000
STEP_TIMEOUT_S = 10.0


def open_broker(data_dir: Path, clock: ManualClock) -> Broker:
    return Broker(
        Settings(data_dir=data_dir, flush_interval_ms=QUIET_MS),
        clock=clock,
        timers=ManualTimers(clock),
    )


async def open_transaction(broker: Broker) -> tuple[int, int]:
    """A transaction over TPS with one record written to each."""
    service = broker.txns
    code, pid, epoch = await service.init_producer_id(TID, TIMEOUT_MS, -1, -1)
    assert code is ErrorCode.none
    assert await service.add_partitions(TID, pid, epoch, TPS) is ErrorCode.none
    for tp in TPS:
        partition = broker.partitions[tp]
        batch = encode_batch(
            [Record(b"v-%d" % tp.partition)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        )
        published = partition.publish(batch, Durability.FSYNCED)
        assert published.durable_offset is None  # acknowledged unfsynced: see partition.py
    return pid, epoch


async def completions(broker: Broker) -> None:
    running = list(broker.txns._completing.values())
    results = await asyncio.wait_for(asyncio.gather(*running), STEP_TIMEOUT_S)
    assert all(code is ErrorCode.none for code in results), results


def marker_at(broker: Broker, tp: TopicPartition, offset: int) -> int | None:
    batch = bytes(broker.partitions[tp].read(offset, 1 << 16).records)
    header = parse_header(memoryview(batch), 0)
    assert header.is_control and header.base_offset == offset
    return control_type(memoryview(batch)[: header.size])


def test_an_end_interrupted_after_prepare_is_completed_after_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()

    async def before_the_stop() -> int:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        # EndTxn(commit) got as far as a durable PREPARE_COMMIT, then the broker stopped.
        result = broker.txns.coordinator.end_txn(TID, pid, epoch, True, clock())
        assert result.prepare is not None
        broker.txns._log([(TID, result.prepare)])
        await broker.txns._durable()
        broker.close()
        return pid

    async def after_the_restart(pid: int) -> None:
        broker = open_broker(tmp_path, clock)
        meta = broker.txns.describe(TID)
        assert meta is not None and meta.state is TxnState.PREPARE_COMMIT
        for tp in TPS:
            assert broker.partitions[tp].last_stable_offset == 0, "still open here"
        broker.txns.tick()
        await completions(broker)
        meta = broker.txns.describe(TID)
        assert meta is not None and meta.state is TxnState.COMPLETE_COMMIT
        for tp in TPS:
            partition = broker.partitions[tp]
            assert partition.last_stable_offset == partition.high_watermark == 2
            assert marker_at(broker, tp, 1) == CONTROL_COMMIT
            assert pid not in partition.producers.ongoing
        broker.close()

    pid = asyncio.run(before_the_stop())
    asyncio.run(after_the_restart(pid))


def test_the_timer_aborts_a_transaction_past_its_timeout(tmp_path: Path) -> None:
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        clock.advance(TIMEOUT_MS)
        broker.txns.tick()
        assert broker.txns.describe(TID).state is TxnState.ONGOING  # type: ignore[union-attr]
        clock.advance(1)
        broker.txns.tick()
        await completions(broker)
        meta = broker.txns.describe(TID)
        assert meta is not None
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (
            TxnState.COMPLETE_ABORT,
            pid,
            epoch + 1,
        )
        for tp in TPS:
            partition = broker.partitions[tp]
            assert marker_at(broker, tp, 1) == CONTROL_ABORT
            assert partition.last_stable_offset == partition.high_watermark == 2
            read, aborted = partition.read_committed(0, 1 << 16)
            assert read is not None
            assert [(a.producer_id, a.first_offset) for a in aborted] == [(pid, 0)]
        # The fenced producer's commit, and its late write, are refused.
        assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced
        assert broker.txns.check_write(pid, epoch, TPS[0]) is ErrorCode.invalid_producer_epoch
        broker.close()

    asyncio.run(scenario())


def test_end_txn_is_answered_once_prepare_is_durable_and_the_next_add_waits_for_complete(
    tmp_path: Path,
) -> None:
    """EndTxn does not wait for the markers; the id's next AddPartitionsToTxn waits for the
    end to be complete and durable (a restart must not complete it again over the new
    transaction's writes), then is answered before its own record is fsynced."""
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        service = broker.txns
        assert await service.end_txn(TID, pid, epoch, True) is ErrorCode.none
        meta = service.describe(TID)
        assert meta is not None and meta.state in (
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        )
        assert await service.add_partitions(TID, pid, epoch, TPS[:1]) is ErrorCode.none
        assert not service._completing
        for tp in TPS:
            assert marker_at(broker, tp, 1) == CONTROL_COMMIT
        meta = service.describe(TID)
        assert meta is not None and meta.state is TxnState.ONGOING
        log = broker.partitions[TopicPartition("__transaction_state", 0)].log
        # Everything before the add's own record (one batch of one) is durable.
        assert log.flushed_offset == log.log_end_offset - 1
        broker.close()

    asyncio.run(scenario())


async def _lose_then_write(
    broker: Broker, pid: int, epoch: int, lost: list[TopicPartition]
) -> None:
    """Make `lost` part of the open transaction in memory only (an add the crash took
    back, as if appended and answered but never fsynced), then write to every TPS."""
    service = broker.txns
    outcome = service.coordinator.add_partitions(TID, pid, epoch, lost, broker.clock())
    assert outcome.log is not None
    service.coordinator.apply(outcome.log)
    for tp in TPS:
        partition = broker.partitions[tp]
        batch = encode_batch(
            [Record(b"w")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        )
        published = partition.publish(batch, Durability.FSYNCED)
        assert published.durable_offset is None  # acknowledged unfsynced: see partition.py


async def _fenced_after_restart(broker: Broker, pid: int, epoch: int) -> None:
    """The whole transaction was fenced at the load: aborted in every partition, and the
    producer's commit refused."""
    meta = broker.txns.describe(TID)
    assert meta is not None
    assert (meta.state, meta.producer_epoch) == (TxnState.PREPARE_ABORT, epoch + 1)
    assert meta.partitions == set(TPS)
    broker.txns.tick()
    await completions(broker)
    meta = broker.txns.describe(TID)
    assert meta is not None and meta.state is TxnState.COMPLETE_ABORT
    for tp in TPS:
        partition = broker.partitions[tp]
        assert marker_at(broker, tp, 1) == CONTROL_ABORT
        assert partition.last_stable_offset == partition.high_watermark == 2
        assert pid not in partition.producers.ongoing
    assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced


def test_a_partition_whose_add_was_lost_fences_the_whole_transaction(tmp_path: Path) -> None:
    """Ongoing {t-0} durable, the add of t-1 lost, both written: after the restart t-1's
    open transaction is an orphan, and the transaction is aborted whole, never t-0
    committed without t-1."""
    clock = ManualClock()

    async def before_the_crash() -> tuple[int, int]:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        service = broker.txns
        code, pid, epoch = await service.init_producer_id(TID, TIMEOUT_MS, -1, -1)
        assert code is ErrorCode.none
        assert await service.add_partitions(TID, pid, epoch, TPS[:1]) is ErrorCode.none
        await service._durable()
        await _lose_then_write(broker, pid, epoch, TPS[1:])
        broker.close()
        return pid, epoch

    async def after_the_restart(pid: int, epoch: int) -> None:
        broker = open_broker(tmp_path, clock)
        await _fenced_after_restart(broker, pid, epoch)
        broker.close()

    pid, epoch = asyncio.run(before_the_crash())
    asyncio.run(after_the_restart(pid, epoch))


def test_a_transaction_whose_every_add_was_lost_fences_its_producer(tmp_path: Path) -> None:
    """The transaction's whole state lost (the id is Empty in the log), its writes kept:
    aborted, and the producer fenced, so that its EndTxn(commit) is not taken for a retry
    of an end already made."""
    clock = ManualClock()

    async def before_the_crash() -> tuple[int, int]:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        code, pid, epoch = await broker.txns.init_producer_id(TID, TIMEOUT_MS, -1, -1)
        assert code is ErrorCode.none
        await _lose_then_write(broker, pid, epoch, TPS)
        broker.close()
        return pid, epoch

    async def after_the_restart(pid: int, epoch: int) -> None:
        broker = open_broker(tmp_path, clock)
        await _fenced_after_restart(broker, pid, epoch)
        broker.close()

    pid, epoch = asyncio.run(before_the_crash())
    asyncio.run(after_the_restart(pid, epoch))


# --- transactional writes acknowledged before their fsync ------------------------------------
#
# A transactional batch is answered once written (broker/partition.py); the coordinator
# fsyncs the transaction's partitions before it logs PREPARE_COMMIT, fences a transaction
# whose writes a failed fsync's roll-back took, and, after a machine's crash, every
# transaction (storage/manager.py, *Boot id*).


def fail_fsyncs_of(monkeypatch: pytest.MonkeyPatch, needle: str) -> None:
    """From now on, fsyncs of paths with a component `needle` (a partition's directory)
    fail with EIO. (A component, not a substring: pytest's base directory can be
    "pytest-1..." too.)"""
    real = log_module._fsync_path

    def failing(path: str) -> None:
        if needle in Path(path).parts:
            raise OSError(errno.EIO, "Input/output error")
        real(path)

    monkeypatch.setattr(log_module, "_fsync_path", failing)


async def fail_an_fsync_of_t1(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Partition:
    """t-1's next fsync, and every one after, fails: its log's unsynced writes (the open
    transaction's) are now to be rolled back. Returns t-1's partition."""
    partition = broker.partitions[TPS[1]]
    fail_fsyncs_of(monkeypatch, "t-1")
    with pytest.raises(StorageError):
        await partition.durable(partition.log_end_offset)
    return partition


async def _fenced(broker: Broker, pid: int, epoch: int) -> TxnMetadata:
    """The transaction was fenced: aborted with its epoch bumped, its commit refused."""
    meta = broker.txns.describe(TID)
    assert meta is not None
    assert meta.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
    assert (meta.producer_id, meta.producer_epoch) == (pid, epoch + 1)
    assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced
    return meta


def test_a_commit_is_prepared_only_once_every_partition_is_fsynced(tmp_path: Path) -> None:
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        service = broker.txns
        flushed_at_prepare: list[list[int]] = []
        log_state = service._log

        def spying_log(states: Iterable[tuple[str, TxnMetadata | None]]) -> None:
            pairs = list(states)
            if any(m is not None and m.state is TxnState.PREPARE_COMMIT for _t, m in pairs):
                flushed_at_prepare.append([broker.partitions[tp].log.flushed_offset for tp in TPS])
            log_state(pairs)

        service._log = spying_log  # type: ignore[method-assign]
        assert [broker.partitions[tp].log.flushed_offset for tp in TPS] == [0, 0]
        assert await service.end_txn(TID, pid, epoch, True) is ErrorCode.none
        assert flushed_at_prepare == [[1, 1]]  # each transactional write, before PREPARE
        await completions(broker)
        for tp in TPS:
            assert marker_at(broker, tp, 1) == CONTROL_COMMIT
        broker.close()

    asyncio.run(scenario())


def test_a_failed_fsync_before_the_commit_fences_the_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        fail_fsyncs_of(monkeypatch, "t-1")
        assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced
        meta = await _fenced(broker, pid, epoch)
        assert meta.partitions == set(TPS) or meta.state is TxnState.COMPLETE_ABORT
        assert marker_at(broker, TPS[0], 1) == CONTROL_ABORT  # the healthy partition
        monkeypatch.undo()
        broker.close()

    asyncio.run(scenario())


def test_a_roll_back_that_cuts_an_open_transaction_fences_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync of t-1 fails before the commit is asked: the partition's roll-back drops
    the acknowledged transactional write, and the transaction is fenced there and then."""
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        partition = await fail_an_fsync_of_t1(broker, monkeypatch)
        assert broker.txns.describe(TID).state is TxnState.ONGOING  # type: ignore[union-attr]
        partition.read(0, 1 << 16)  # the next touch of the log rolls it back
        assert partition.log_end_offset == 0 and pid not in partition.producers.ongoing
        await _fenced(broker, pid, epoch)
        assert marker_at(broker, TPS[0], 1) == CONTROL_ABORT
        monkeypatch.undo()
        broker.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("restart", ["process", "machine"])
def test_after_a_machine_crash_every_transaction_is_fenced(tmp_path: Path, restart: str) -> None:
    """One id with a transaction open, one whose last transaction committed. After a
    killed process (same boot, unclean) both go on: nothing acknowledged was lost. After
    a machine's crash both are fenced, since either may have lost writes acknowledged
    before their fsync (and the second, the adds that would tell)."""
    clock = ManualClock()

    async def before() -> tuple[int, int, int, int]:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        service = broker.txns
        code, done_pid, done_epoch = await service.init_producer_id("done", TIMEOUT_MS, -1, -1)
        assert code is ErrorCode.none
        assert await service.add_partitions("done", done_pid, done_epoch, TPS[:1]) is (
            ErrorCode.none
        )
        assert await service.end_txn("done", done_pid, done_epoch, True) is ErrorCode.none
        await completions(broker)
        broker.close()
        (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()  # as if killed
        if restart == "machine":
            forge_machine_restart_boot(tmp_path)
        return pid, epoch, done_pid, done_epoch

    async def after(pid: int, epoch: int, done_pid: int, done_epoch: int) -> None:
        broker = open_broker(tmp_path, clock)
        service = broker.txns
        if restart == "process":
            assert await service.end_txn(TID, pid, epoch, True) is ErrorCode.none
            await completions(broker)
            for tp in TPS:
                assert marker_at(broker, tp, 1) == CONTROL_COMMIT
            done = service.describe("done")
            assert done is not None and done.producer_epoch == done_epoch
        else:
            service.tick()
            await completions(broker)
            meta = await _fenced(broker, pid, epoch)
            assert meta.state is TxnState.COMPLETE_ABORT
            for tp in TPS:
                assert marker_at(broker, tp, 1) == CONTROL_ABORT
                partition = broker.partitions[tp]
                assert partition.last_stable_offset == partition.high_watermark
            done = service.describe("done")
            assert done is not None
            assert (done.state, done.producer_epoch) == (TxnState.COMPLETE_ABORT, done_epoch + 1)
            assert await service.end_txn("done", done_pid, done_epoch, True) is (
                ErrorCode.producer_fenced
            )
        broker.close()

    ids = asyncio.run(before())
    asyncio.run(after(*ids))


def test_a_commit_after_a_roll_back_no_one_followed_yet_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log rolled back on its own (its append or read, for another reader), and fsync
    works again by the time EndTxn comes: the commit's fsync then succeeds, but the
    coordinator follows the roll-back first, finds the write gone, and fences."""
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        partition = await fail_an_fsync_of_t1(broker, monkeypatch)
        monkeypatch.undo()
        partition.log.roll_back_unsynced()
        assert partition.log.probe_fsync()
        assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced
        await _fenced(broker, pid, epoch)
        await completions(broker)
        assert marker_at(broker, TPS[0], 1) == CONTROL_ABORT
        broker.close()

    asyncio.run(scenario())


def test_a_write_that_comes_while_the_commit_waits_is_fsynced_before_prepare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EndTxn(commit) is waiting for t-1's fsync (made slow here) when the producer's next
    batch lands in t-1, acknowledged unfsynced: PREPARE_COMMIT waits for that one too."""
    clock = ManualClock()

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        real = log_module._fsync_path

        def slow(path: str) -> None:
            if "t-1" in Path(path).parts:
                time.sleep(0.2)
            real(path)

        monkeypatch.setattr(log_module, "_fsync_path", slow)
        service = broker.txns
        at_prepare: list[list[tuple[int, int]]] = []
        log_state = service._log

        def spying_log(states: Iterable[tuple[str, TxnMetadata | None]]) -> None:
            pairs = list(states)
            if any(m is not None and m.state is TxnState.PREPARE_COMMIT for _t, m in pairs):
                logs = [broker.partitions[tp].log for tp in TPS]
                at_prepare.append([(lg.flushed_offset, lg.log_end_offset) for lg in logs])
            log_state(pairs)

        service._log = spying_log  # type: ignore[method-assign]
        end = asyncio.ensure_future(service.end_txn(TID, pid, epoch, True))
        await asyncio.sleep(0.05)  # EndTxn waits for t-1's fsync now
        late = encode_batch(
            [Record(b"late")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=1,
            attributes=ATTR_TRANSACTIONAL,
        )
        assert broker.partitions[TPS[1]].publish(late, Durability.FSYNCED).base_offset == 1
        assert await asyncio.wait_for(end, STEP_TIMEOUT_S) is ErrorCode.none
        assert at_prepare == [[(1, 1), (2, 2)]]  # the late write fsynced before PREPARE
        monkeypatch.undo()
        await completions(broker)
        assert marker_at(broker, TPS[1], 2) == CONTROL_COMMIT
        broker.close()

    asyncio.run(scenario())


def test_a_start_that_fails_before_fencing_does_not_forget_the_machine_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a machine's crash, the first start dies before the coordinator's fences are
    durable: the data directory still names the old boot, so the next start fences."""
    clock = ManualClock()

    async def before() -> tuple[int, int]:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        pid, epoch = await open_transaction(broker)
        broker.close()
        (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
        forge_machine_restart_boot(tmp_path)
        return pid, epoch

    pid, epoch = asyncio.run(before())

    def dies(_self: object) -> bool:
        raise RuntimeError("killed during the start")

    monkeypatch.setattr(TransactionService, "load", dies)
    with pytest.raises(RuntimeError):
        open_broker(tmp_path, clock)
    monkeypatch.undo()
    assert (tmp_path / BOOT_ID_FILE).read_text() == "a-boot-before-this-one\n"

    async def after() -> None:
        broker = open_broker(tmp_path, clock)
        assert broker.logs.unsynced_may_be_lost and broker.logs.boot_recorded
        assert await broker.txns.end_txn(TID, pid, epoch, True) is ErrorCode.producer_fenced
        broker.close()

    asyncio.run(after())


def forge_machine_restart_boot(data_dir: Path) -> None:
    """Record another boot's id, so that the unclean stop just made looks like a
    machine's crash."""
    (data_dir / BOOT_ID_FILE).write_text("a-boot-before-this-one\n")


def test_ends_the_broker_decides_run_at_most_max_completing_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a machine's crash every id is fenced at once. Their ends (markers, then
    COMPLETE_ABORT) run at most MAX_COMPLETING at a time; the rest wait in PREPARE_ABORT
    and start as running ones finish, with no tick needed, until all are complete."""
    monkeypatch.setattr(txn_service, "MAX_COMPLETING", 2)
    clock = ManualClock()
    ids = [f"id-{n}" for n in range(7)]

    async def before() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        for txn_id in ids:
            code, pid, epoch = await broker.txns.init_producer_id(txn_id, TIMEOUT_MS, -1, -1)
            assert code is ErrorCode.none
            assert await broker.txns.add_partitions(txn_id, pid, epoch, TPS) is ErrorCode.none
        broker.close()
        (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()  # as if killed
        forge_machine_restart_boot(tmp_path)

    async def after() -> None:
        broker = open_broker(tmp_path, clock)
        service = broker.txns
        assert all(service.describe(i).state is TxnState.PREPARE_ABORT for i in ids)  # type: ignore[union-attr]
        running: list[int] = []
        begin = service._begin_completion

        def counted(prepared: TxnMetadata) -> Any:
            started = begin(prepared)
            running.append(len(service._completing))
            return started

        monkeypatch.setattr(service, "_begin_completion", counted)
        service.tick()
        assert len(service._completing) == 2 and service._backlog
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while any(service.describe(i).state is not TxnState.COMPLETE_ABORT for i in ids):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, [service.describe(i) for i in ids]
            await asyncio.sleep(0.001)
        await completions(broker)  # the last ones log COMPLETE_ABORT, then fsync it
        assert len(running) == len(ids) and max(running) == 2
        assert not service._backlog and not service._completing
        for tp in TPS:
            partition = broker.partitions[tp]
            assert partition.last_stable_offset == partition.high_watermark
        broker.close()

    asyncio.run(before())
    asyncio.run(after())


def test_fences_past_max_completing_wait_in_prepare_abort_and_complete_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fences decided while running (lost writes, a retried doomed fence) log their abort
    at once, but start its end only while there is room; the others follow."""
    monkeypatch.setattr(txn_service, "MAX_COMPLETING", 1)
    clock = ManualClock()
    ids = ["a", "b", "c"]

    async def scenario() -> None:
        broker = open_broker(tmp_path, clock)
        broker.create_topic("t", 2)
        service = broker.txns
        epochs = {}
        for txn_id in ids:
            code, pid, epoch = await service.init_producer_id(txn_id, TIMEOUT_MS, -1, -1)
            assert code is ErrorCode.none
            assert await service.add_partitions(txn_id, pid, epoch, TPS) is ErrorCode.none
            epochs[txn_id] = (pid, epoch)
        for txn_id in ids:
            assert service._fence(txn_id, set(), "a test")
        assert len(service._completing) == 1 and service._backlog
        states = {i: service.describe(i).state for i in ids}  # type: ignore[union-attr]
        assert sorted(s.name for s in states.values()) == ["PREPARE_ABORT"] * 3
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while any(service.describe(i).state is not TxnState.COMPLETE_ABORT for i in ids):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, [service.describe(i) for i in ids]
            await asyncio.sleep(0.001)
        for txn_id, (pid, epoch) in epochs.items():
            assert await service.end_txn(txn_id, pid, epoch, True) is ErrorCode.producer_fenced
        broker.close()

    asyncio.run(scenario())
