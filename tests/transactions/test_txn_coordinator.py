"""The transaction coordinator, sans I/O: the state table, every request's checks, time.

`Harness` plays the part of broker/txn_service.py: it makes every state the coordinator
decides current (`apply`, as the service does once the state is logged) and completes an
end the way the service does (PREPARE_* logged, then COMPLETE_* from `completed`). It
also keeps the log as the list of states applied, so a test can replay it into a new
coordinator. (This file is not named test_coordinator.py: tests/groups has one, and test
basenames are unique across tests/.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.errors import ErrorCode
from weirmq.transactions.coordinator import (
    EPOCH_MAX,
    NO_EPOCH,
    NO_PRODUCER_ID,
    Limits,
    TransactionCoordinator,
)
from weirmq.transactions.state import (
    VALID_PREVIOUS,
    PendingOffset,
    TxnMetadata,
    TxnState,
)
from weirmq.types import TopicPartition

S = TxnState
TID = "tid"
TIMEOUT_MS = 60_000
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
FIRST_PID = 1000


@dataclass
class Harness:
    limits: Limits = field(default_factory=Limits)
    now_ms: int = 1_000
    log: list[tuple[str, TxnMetadata | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._pids = itertools.count(FIRST_PID)
        self.coord = TransactionCoordinator(self.limits, lambda: next(self._pids))

    def apply(self, meta: TxnMetadata | None) -> None:
        if meta is None:
            return
        previous = self.coord.describe(meta.transactional_id)
        if previous is not None:
            assert previous.state in VALID_PREVIOUS[meta.state], (previous.state, meta.state)
        self.log.append((meta.transactional_id, meta.copy()))
        self.coord.apply(meta)

    def init(
        self, txn_id: str = TID, pid: int = NO_PRODUCER_ID, epoch: int = NO_EPOCH
    ) -> tuple[ErrorCode, int, int]:
        result = self.coord.init_producer_id(txn_id, TIMEOUT_MS, pid, epoch, self.now_ms)
        self.apply(result.log)
        if result.abort is not None:
            self.apply(result.abort)
            self.apply(self.coord.completed(result.abort, self.now_ms))
        return result.error, result.producer_id, result.producer_epoch

    def add(self, pid: int, epoch: int, *tps: TopicPartition, txn_id: str = TID) -> ErrorCode:
        outcome = self.coord.add_partitions(txn_id, pid, epoch, tps or (TP0,), self.now_ms)
        self.apply(outcome.log)
        return outcome.error

    def prepare(self, pid: int, epoch: int, commit: bool, txn_id: str = TID) -> ErrorCode:
        """EndTxn up to PREPARE_* logged (markers not written yet)."""
        result = self.coord.end_txn(txn_id, pid, epoch, commit, self.now_ms)
        self.apply(result.prepare)
        return result.error

    def end(self, pid: int, epoch: int, commit: bool, txn_id: str = TID) -> ErrorCode:
        error = self.prepare(pid, epoch, commit, txn_id)
        self.complete(txn_id)
        return error

    def complete(self, txn_id: str = TID) -> None:
        meta = self.coord.describe(txn_id)
        if meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self.apply(self.coord.completed(meta, self.now_ms))

    def state(self, txn_id: str = TID) -> TxnMetadata:
        meta = self.coord.describe(txn_id)
        assert meta is not None
        return meta


def started() -> tuple[Harness, int, int]:
    h = Harness()
    error, pid, epoch = h.init()
    assert error is ErrorCode.none
    return h, pid, epoch


def meta_in(state: TxnState) -> TxnMetadata:
    return TxnMetadata(TID, 1, 0, -1, -1, TIMEOUT_MS, state)


# --- the state table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"), [(b, a) for b in TxnState for a in TxnState], ids=lambda s: s.name
)
def test_state_table_every_move(before: TxnState, after: TxnState) -> None:
    meta = meta_in(before)
    if before in VALID_PREVIOUS[after]:
        meta.move(after, 5)
        assert (meta.state, meta.last_update_ms) == (after, 5)
    else:
        with pytest.raises(AssertionError, match=f"{before.name} -> {after.name}"):
            meta.move(after, 5)
        assert meta.state is before


def test_state_table_is_kafkas() -> None:
    allowed = {(b, a) for a, bs in VALID_PREVIOUS.items() for b in bs}
    assert allowed == {
        (S.EMPTY, S.EMPTY),
        (S.COMPLETE_COMMIT, S.EMPTY),
        (S.COMPLETE_ABORT, S.EMPTY),
        (S.EMPTY, S.ONGOING),
        (S.ONGOING, S.ONGOING),
        (S.COMPLETE_COMMIT, S.ONGOING),
        (S.COMPLETE_ABORT, S.ONGOING),
        (S.ONGOING, S.PREPARE_COMMIT),
        (S.ONGOING, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
        (S.PREPARE_ABORT, S.COMPLETE_ABORT),
        (S.EMPTY, S.DEAD),
        (S.COMPLETE_COMMIT, S.DEAD),
        (S.COMPLETE_ABORT, S.DEAD),
    }


def test_copy_is_deep_for_partitions_and_groups() -> None:
    meta = meta_in(S.ONGOING)
    meta.partitions.add(TP0)
    meta.groups["g"] = {TP0: PendingOffset(1, 0, "")}
    twin = meta.copy()
    twin.partitions.add(TP1)
    twin.groups["g"][TP1] = PendingOffset(2, 0, "")
    twin.groups["h"] = {}
    assert meta.partitions == {TP0}
    assert meta.groups == {"g": {TP0: PendingOffset(1, 0, "")}}


# --- InitProducerId ----------------------------------------------------------------------------


def test_init_new_id() -> None:
    h = Harness()
    assert h.init() == (ErrorCode.none, FIRST_PID, 0)
    meta = h.state()
    assert (meta.state, meta.timeout_ms, meta.start_ms) == (S.EMPTY, TIMEOUT_MS, -1)
    assert (meta.last_producer_id, meta.last_producer_epoch) == (-1, -1)


def test_init_unknown_id_with_a_producer_id_is_refused() -> None:
    h = Harness()
    assert h.init(pid=5, epoch=0)[0] is ErrorCode.invalid_producer_id_mapping
    assert h.coord.describe(TID) is None


@pytest.mark.parametrize(("pid", "epoch"), [(5, NO_EPOCH), (NO_PRODUCER_ID, 0)])
def test_init_half_an_expected_producer_is_invalid(pid: int, epoch: int) -> None:
    h, _, _ = started()
    assert h.init(pid=pid, epoch=epoch)[0] is ErrorCode.invalid_request


def test_init_again_bumps_the_epoch() -> None:
    h, pid, _ = started()
    assert h.init() == (ErrorCode.none, pid, 1)
    assert h.init() == (ErrorCode.none, pid, 2)


def test_init_kip360_bump_and_its_retry() -> None:
    h, pid, epoch = started()
    assert h.init(pid=pid, epoch=epoch) == (ErrorCode.none, pid, 1)
    logged = len(h.log)
    # The answer was lost; the producer asks again with the epoch it had.
    assert h.init(pid=pid, epoch=epoch) == (ErrorCode.none, pid, 1)
    assert len(h.log) == logged, "a retry must not bump again"
    # Asking with the current pair bumps again.
    assert h.init(pid=pid, epoch=1) == (ErrorCode.none, pid, 2)


def test_init_fenced_with_wrong_pid_or_epoch() -> None:
    h, pid, _ = started()
    h.init(pid=pid, epoch=0)  # epoch 1, previous 0
    h.init(pid=pid, epoch=1)  # epoch 2, previous 1
    assert h.init(pid=pid + 1, epoch=2)[0] is ErrorCode.producer_fenced
    assert h.init(pid=pid, epoch=0)[0] is ErrorCode.producer_fenced
    assert h.init(pid=pid, epoch=3)[0] is ErrorCode.producer_fenced
    assert h.state().producer_epoch == 2


def test_init_zombie_cannot_take_its_successors_epoch() -> None:
    """A new instance (no producer id given) fences the old one; the old one's KIP-360
    InitProducerId naming its epoch must be fenced, not answered as a retry of the new
    instance's bump."""
    h, pid, epoch = started()
    assert h.init() == (ErrorCode.none, pid, 1)  # the successor
    assert h.init(pid=pid, epoch=epoch)[0] is ErrorCode.producer_fenced
    assert h.state().producer_epoch == 1


def test_init_while_ongoing_fences_with_an_abort() -> None:
    h, pid, epoch = started()
    assert h.add(pid, epoch, TP0, TP1) is ErrorCode.none
    result = h.coord.init_producer_id(TID, TIMEOUT_MS, NO_PRODUCER_ID, NO_EPOCH, h.now_ms)
    assert result.error is ErrorCode.concurrent_transactions
    assert result.log is None
    abort = result.abort
    assert abort is not None
    assert (abort.state, abort.producer_id, abort.producer_epoch) == (S.PREPARE_ABORT, pid, 1)
    assert abort.partitions == {TP0, TP1}
    assert h.state().state is S.ONGOING, "nothing is current before it is logged"
    h.apply(abort)
    # While the markers are written, the retry is told to wait.
    assert h.init()[0] is ErrorCode.concurrent_transactions
    h.complete()
    assert h.init() == (ErrorCode.none, pid, 2)
    # The fenced producer: its old epoch is refused everywhere.
    assert h.add(pid, epoch) is ErrorCode.producer_fenced
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.invalid_producer_epoch


def test_init_while_preparing_is_concurrent() -> None:
    h, pid, epoch = started()
    h.add(pid, epoch)
    assert h.prepare(pid, epoch, commit=True) is ErrorCode.none
    result = h.coord.init_producer_id(TID, TIMEOUT_MS, NO_PRODUCER_ID, NO_EPOCH, h.now_ms)
    assert (result.error, result.abort, result.log) == (
        ErrorCode.concurrent_transactions,
        None,
        None,
    )


def test_epoch_exhaustion_gives_a_new_producer_id() -> None:
    h, pid, _ = started()
    worn = h.state().copy()
    worn.producer_epoch = EPOCH_MAX - 1
    h.coord.replay(TID, worn)
    error, new_pid, new_epoch = h.init(pid=pid, epoch=EPOCH_MAX - 1)
    assert (error, new_epoch) == (ErrorCode.none, 0)
    assert new_pid != pid
    meta = h.state()
    assert (meta.last_producer_id, meta.last_producer_epoch) == (pid, EPOCH_MAX - 1)
    # A retry names the old pair and gets the new one; the old id is fenced otherwise.
    assert h.init(pid=pid, epoch=EPOCH_MAX - 1) == (ErrorCode.none, new_pid, 0)
    assert h.init(pid=pid, epoch=EPOCH_MAX - 2)[0] is ErrorCode.producer_fenced
    assert h.coord.check_write(pid, EPOCH_MAX - 1, TP0) is ErrorCode.invalid_txn_state
    h.add(new_pid, 0)
    assert h.coord.check_write(new_pid, 0, TP0) is ErrorCode.none


def test_fencing_abort_at_an_exhausted_epoch_keeps_the_producer_id() -> None:
    """The markers of a fencing abort are written under the transaction's producer id:
    a new id there would leave the partitions' transaction open for ever."""
    h, pid, _ = started()
    worn = h.state().copy()
    worn.producer_epoch = EPOCH_MAX - 1
    h.coord.replay(TID, worn)
    h.add(pid, EPOCH_MAX - 1)
    h.now_ms += TIMEOUT_MS + 1
    (fenced,) = h.coord.timed_out(h.now_ms)
    assert (fenced.producer_id, fenced.producer_epoch) == (pid, EPOCH_MAX)
    assert fenced.partitions == {TP0}
    h.apply(fenced)
    h.complete()
    # The next InitProducerId moves to a new id.
    error, new_pid, epoch = h.init()
    assert (error, epoch) == (ErrorCode.none, 0)
    assert new_pid != pid


def test_fencing_abort_at_epoch_max_aborts_without_a_bump() -> None:
    h, pid, _ = started()
    worn = h.state().copy()
    worn.producer_epoch = EPOCH_MAX
    h.coord.replay(TID, worn)
    h.add(pid, EPOCH_MAX)
    h.now_ms += TIMEOUT_MS + 1
    (fenced,) = h.coord.timed_out(h.now_ms)
    assert (fenced.state, fenced.producer_id, fenced.producer_epoch) == (
        S.PREPARE_ABORT,
        pid,
        EPOCH_MAX,
    )
    h.apply(fenced)
    h.complete()
    assert h.coord.check_write(pid, EPOCH_MAX, TP0) is ErrorCode.invalid_txn_state
    assert h.prepare(pid, EPOCH_MAX, commit=True) is ErrorCode.invalid_txn_state


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_init_invalid_timeout(timeout_ms: int) -> None:
    h = Harness()
    result = h.coord.init_producer_id(TID, timeout_ms, NO_PRODUCER_ID, NO_EPOCH, h.now_ms)
    assert result.error is ErrorCode.invalid_transaction_timeout
    assert h.coord.describe(TID) is None


def test_init_timeout_is_updated_by_each_init() -> None:
    h, _, _ = started()
    h.coord.init_producer_id(TID, 5_000, NO_PRODUCER_ID, NO_EPOCH, h.now_ms)
    result = h.coord.init_producer_id(TID, 5_000, NO_PRODUCER_ID, NO_EPOCH, h.now_ms)
    h.apply(result.log)
    assert h.state().timeout_ms == 5_000


def test_max_ids() -> None:
    h = Harness(limits=Limits(max_ids=2))
    assert h.init("a")[0] is ErrorCode.none
    assert h.init("b")[0] is ErrorCode.none
    assert h.init("c")[0] is ErrorCode.coordinator_not_available
    assert h.init("a")[0] is ErrorCode.none, "a known id is still served"


# --- AddPartitions, AddOffsets, TxnOffsetCommit, EndTxn -----------------------------------------


def test_add_partitions_starts_a_transaction() -> None:
    h, pid, epoch = started()
    h.now_ms = 7_000
    assert h.add(pid, epoch, TP0) is ErrorCode.none
    meta = h.state()
    assert (meta.state, meta.start_ms, meta.partitions) == (S.ONGOING, 7_000, {TP0})
    logged = len(h.log)
    h.now_ms = 8_000
    assert h.add(pid, epoch, TP0) is ErrorCode.none
    assert len(h.log) == logged, "nothing new: nothing to log"
    assert h.add(pid, epoch, TP1) is ErrorCode.none
    assert (h.state().partitions, h.state().start_ms) == ({TP0, TP1}, 7_000)


@pytest.mark.parametrize("request_kind", ["add_partitions", "add_offsets", "txn_offset", "end"])
def test_producer_checks(request_kind: str) -> None:
    """Unknown id, wrong producer id, old epoch, newer epoch, markers being written."""
    h, pid, epoch = started()
    h.add(pid, epoch)
    h.coord.add_offsets(TID, pid, epoch, "g", h.now_ms)

    def ask(txn_id: str, p: int, e: int) -> ErrorCode:
        c, now = h.coord, h.now_ms
        if request_kind == "add_partitions":
            return c.add_partitions(txn_id, p, e, [TP1], now).error
        if request_kind == "add_offsets":
            return c.add_offsets(txn_id, p, e, "g2", now).error
        if request_kind == "txn_offset":
            return c.txn_offset_commit(txn_id, p, e, "g", {TP0: PendingOffset(1, 0, "")}, now).error
        return c.end_txn(txn_id, p, e, True, now).error

    assert ask("other", pid, epoch) is ErrorCode.invalid_producer_id_mapping
    assert ask(TID, pid + 1, epoch) is ErrorCode.invalid_producer_id_mapping
    assert ask(TID, pid, epoch + 1) is ErrorCode.producer_fenced
    h.add(pid, epoch, TP0)
    assert h.prepare(pid, epoch, commit=False) is ErrorCode.none
    expected = ErrorCode.concurrent_transactions
    if request_kind == "end":  # an abort is being completed: a commit cannot be
        expected = ErrorCode.invalid_txn_state
    assert ask(TID, pid, epoch) is expected
    h.complete()
    h.init()  # a new instance: the epoch moves on
    assert ask(TID, pid, epoch) is ErrorCode.producer_fenced


def test_add_no_partitions_opens_nothing() -> None:
    h, pid, epoch = started()
    outcome = h.coord.add_partitions(TID, pid, epoch, [], h.now_ms)
    assert (outcome.error, outcome.log) == (ErrorCode.none, None)
    assert h.state().state is S.EMPTY


def test_add_partitions_limit() -> None:
    h = Harness(limits=Limits(max_partitions=2))
    _, pid, epoch = h.init()
    assert h.add(pid, epoch, TP0, TP1) is ErrorCode.none
    assert h.add(pid, epoch, TopicPartition("t", 2)) is ErrorCode.invalid_request
    assert h.state().partitions == {TP0, TP1}


def test_add_offsets_and_txn_offset_commit() -> None:
    h, pid, epoch = started()
    offsets = {TP0: PendingOffset(5, 2, "m")}
    commit = h.coord.txn_offset_commit
    # Before AddOffsetsToTxn (no transaction, then a transaction without the group).
    assert commit(TID, pid, epoch, "g", offsets, h.now_ms).error is ErrorCode.invalid_txn_state
    h.add(pid, epoch)
    assert commit(TID, pid, epoch, "g", offsets, h.now_ms).error is ErrorCode.invalid_txn_state
    added = h.coord.add_offsets(TID, pid, epoch, "g", h.now_ms)
    assert added.error is ErrorCode.none and added.log is not None
    h.apply(added.log)
    again = h.coord.add_offsets(TID, pid, epoch, "g", h.now_ms)
    assert (again.error, again.log) == (ErrorCode.none, None)
    outcome = commit(TID, pid, epoch, "g", offsets, h.now_ms)
    assert outcome.error is ErrorCode.none
    assert h.state().groups == {"g": {}}, "nothing is current before it is logged"
    h.apply(outcome.log)
    assert h.state().groups == {"g": offsets}
    assert h.end(pid, epoch, commit=True) is ErrorCode.none
    assert (h.state().state, h.state().groups) == (S.COMPLETE_COMMIT, {})


def test_add_offsets_starts_a_transaction() -> None:
    h, pid, epoch = started()
    outcome = h.coord.add_offsets(TID, pid, epoch, "g", 42)
    assert outcome.log is not None
    assert (outcome.log.state, outcome.log.start_ms) == (S.ONGOING, 42)


def test_txn_offset_commit_limit() -> None:
    h = Harness(limits=Limits(max_offsets=2))
    _, pid, epoch = h.init()
    h.apply(h.coord.add_offsets(TID, pid, epoch, "g", h.now_ms).log)
    offsets = {TopicPartition("t", i): PendingOffset(i, 0, "") for i in range(3)}
    outcome = h.coord.txn_offset_commit(TID, pid, epoch, "g", offsets, h.now_ms)
    assert outcome.error is ErrorCode.invalid_request


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_and_its_retries(commit: bool) -> None:
    h, pid, epoch = started()
    # No transaction open: nothing to end.
    assert h.prepare(pid, epoch, commit) is ErrorCode.invalid_txn_state
    h.add(pid, epoch, TP0, TP1)
    result = h.coord.end_txn(TID, pid, epoch, commit, h.now_ms)
    assert result.error is ErrorCode.none and result.prepare is not None
    preparing = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    assert (result.prepare.state, result.prepare.partitions) == (preparing, {TP0, TP1})
    h.apply(result.prepare)
    # Markers being written: the same end is told to retry, the other one is refused.
    retry = h.coord.end_txn(TID, pid, epoch, commit, h.now_ms)
    assert (retry.error, retry.prepare) == (ErrorCode.concurrent_transactions, None)
    assert h.prepare(pid, epoch, not commit) is ErrorCode.invalid_txn_state
    h.complete()
    meta = h.state()
    done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
    assert (meta.state, meta.partitions, meta.start_ms) == (done, set(), -1)
    # A retry of the completed end succeeds with nothing to do; the other is refused.
    retry = h.coord.end_txn(TID, pid, epoch, commit, h.now_ms)
    assert (retry.error, retry.prepare) == (ErrorCode.none, None)
    assert h.prepare(pid, epoch, not commit) is ErrorCode.invalid_txn_state
    # The next transaction starts afresh.
    assert h.add(pid, epoch, TP1) is ErrorCode.none
    assert h.state().partitions == {TP1}


# --- time --------------------------------------------------------------------------------------


def test_timed_out_bumps_the_epoch_and_aborts() -> None:
    h, pid, epoch = started()
    h.now_ms = 10_000
    h.add(pid, epoch)
    h.init("other")
    assert h.coord.timed_out(10_000 + TIMEOUT_MS) == [], "not past the timeout yet"
    (fenced,) = h.coord.timed_out(10_000 + TIMEOUT_MS + 1)
    assert (fenced.state, fenced.producer_id, fenced.producer_epoch) == (
        S.PREPARE_ABORT,
        pid,
        epoch + 1,
    )
    assert fenced.partitions == {TP0}
    h.apply(fenced)
    h.complete()
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.invalid_producer_epoch
    assert h.prepare(pid, epoch, commit=True) is ErrorCode.producer_fenced
    # KIP-360: the timed-out producer asks with the epoch it had and carries on.
    assert h.init(pid=pid, epoch=epoch) == (ErrorCode.none, pid, epoch + 1)
    assert h.add(pid, epoch + 1) is ErrorCode.none


def test_expired_ids() -> None:
    h = Harness(limits=Limits(id_expiration_ms=1_000))
    _, pid, epoch = h.init("idle")
    _, pid2, epoch2 = h.init("busy")
    h.add(pid2, epoch2, txn_id="busy")
    assert h.coord.expired_ids(h.now_ms + 999) == []
    assert h.coord.expired_ids(h.now_ms + 1_000) == ["idle"]
    h.coord.replay("idle", None)
    assert h.coord.describe("idle") is None
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.invalid_txn_state
    assert h.coord.check_write(pid2, epoch2, TP0) is ErrorCode.none


def test_check_write() -> None:
    h, pid, epoch = started()
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.invalid_txn_state  # not open
    assert h.coord.check_write(pid + 7, 0, TP0) is ErrorCode.invalid_txn_state  # unknown
    h.add(pid, epoch, TP0)
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.none
    assert h.coord.check_write(pid, epoch, TP1) is ErrorCode.invalid_txn_state  # not added
    assert h.coord.check_write(pid, epoch + 1, TP0) is ErrorCode.invalid_producer_epoch
    h.prepare(pid, epoch, commit=True)
    assert h.coord.check_write(pid, epoch, TP0) is ErrorCode.invalid_txn_state


def test_replay_rebuilds_the_state_and_pending_completions() -> None:
    h, pid, epoch = started()
    h.add(pid, epoch, TP0, TP1)
    h.prepare(pid, epoch, commit=True)
    h.init("other")
    fresh = TransactionCoordinator(Limits(), lambda: 1)
    for txn_id, meta in h.log:
        fresh.replay(txn_id, meta)
    assert fresh.txns == h.coord.txns
    (pending,) = fresh.pending_completions()
    assert (pending.transactional_id, pending.state) == (TID, S.PREPARE_COMMIT)
    assert fresh.check_write(pid, epoch, TP0) is ErrorCode.invalid_txn_state


# --- random request sequences ------------------------------------------------------------------

IDS = ["a", "b", "c"]
Step = tuple[str, int, int, int, bool, int]

steps = st.tuples(
    st.sampled_from(["init", "init_kip360", "add", "offsets", "commit_offsets", "end", "tick"]),
    st.integers(0, len(IDS) - 1),  # which transactional id
    st.sampled_from([0, 0, 0, 1]),  # 1: a wrong producer id
    st.sampled_from([0, 0, 0, -1, 1]),  # added to the epoch
    st.booleans(),  # commit or abort; complete a pending end or not
    st.integers(0, 40_000),  # time passing before the step
)


def _run(h: Harness, step: Step) -> None:
    kind, which, pid_off, epoch_off, flag, wait_ms = step
    h.now_ms += wait_ms
    txn_id = IDS[which]
    meta = h.coord.describe(txn_id)
    pid = (meta.producer_id if meta else 5) + pid_off
    epoch = (meta.producer_epoch if meta else 0) + epoch_off
    c, now = h.coord, h.now_ms
    if kind == "init":
        h.init(txn_id)
    elif kind == "init_kip360" and meta is not None:
        h.init(txn_id, pid, max(epoch, 0))
    elif kind == "add":
        h.add(pid, epoch, TopicPartition("t", which), txn_id=txn_id)
    elif kind == "offsets":
        h.apply(c.add_offsets(txn_id, pid, epoch, "g", now).log)
    elif kind == "commit_offsets":
        offsets = {TP0: PendingOffset(wait_ms, 0, "")}
        h.apply(c.txn_offset_commit(txn_id, pid, epoch, "g", offsets, now).log)
    elif kind == "end":
        h.prepare(pid, epoch, flag, txn_id)
    else:
        for fenced in c.timed_out(now):
            h.apply(fenced)
        for pending in c.pending_completions():
            h.apply(c.completed(pending, now))
        for expired in c.expired_ids(now):
            h.log.append((expired, None))
            c.replay(expired, None)
    if flag and kind != "end":
        h.complete(txn_id)


def _check_invariants(h: Harness) -> None:
    c = h.coord
    mapping = {meta.producer_id: txn_id for txn_id, meta in c.txns.items()}
    assert c._by_producer == mapping, "producer id -> transactional id out of step"
    assert len(mapping) == len(c.txns), "two ids share a producer id"
    for txn_id, meta in c.txns.items():
        assert meta.transactional_id == txn_id
        assert meta.state is not S.DEAD
        assert 0 <= meta.producer_epoch <= EPOCH_MAX
        if meta.state is S.ONGOING:
            assert meta.start_ms >= 0
            assert meta.partitions or meta.groups
        if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert (meta.partitions, meta.groups, meta.start_ms) == (set(), {}, -1)
        for p in meta.partitions:
            assert c.check_write(meta.producer_id, meta.producer_epoch, p) is (
                ErrorCode.none if meta.state is S.ONGOING else ErrorCode.invalid_txn_state
            )


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=60))
def test_random_request_sequences_keep_the_invariants(sequence: list[Step]) -> None:
    h = Harness(limits=Limits(id_expiration_ms=100_000, max_timeout_ms=TIMEOUT_MS))
    for step in sequence:
        _run(h, step)  # `Harness.apply` checks every move against the table
        _check_invariants(h)
    fresh = TransactionCoordinator(h.limits, lambda: 1)
    for txn_id, meta in h.log:
        fresh.replay(txn_id, meta)
    assert fresh.txns == h.coord.txns, "replaying the log gives another state"
