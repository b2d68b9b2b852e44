"""The share service's state log, `__share_group_state`, through a real broker on disk.

Each test drives `ShareService` as the ShareFetch and ShareAcknowledge handlers do
(a session, acquire, acknowledge) on a `Broker` over tmp_path with a manual clock, then
closes the broker and opens another on the same directory: what the second one replays
from the log is what the first one had, except that nothing is held by anyone any more
(acquired records come back AVAILABLE, with the delivery counts they had).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from weirmq.broker import shares as shares_module
from weirmq.broker.core import Broker
from weirmq.broker.scan import scan_batches
from weirmq.broker.shares import (
    SHARE_STATE_TOPIC,
    SessionPartition,
    SharePartitionView,
    ShareSession,
)
from weirmq.records.batch import decode_records
from weirmq.settings import Settings
from weirmq.testing import ManualClock, ManualTimers
from weirmq.testing.records import make_batch

QUIET = 3_600_000
SET = 0
ACCEPT, RELEASE, REJECT = 1, 2, 3


class Node:
    """One broker after another on the same data directory and clock."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.timers = ManualTimers(ManualClock())
        self.broker = self._open()

    def _open(self) -> Broker:
        settings = Settings(
            data_dir=self.data_dir,
            flush_interval_ms=QUIET,
            # below Kafka's bounds for a group's own values (45 s sessions, 5 s heartbeats,
            # 15 s locks): these tests step short ones
            group_share_min_session_timeout_ms=1,
            group_share_min_heartbeat_interval_ms=1,
            group_share_min_record_lock_duration_ms=1,
            group_share_max_record_lock_duration_ms=3_600_000,
            group_share_min_delivery_count_limit=1,
        )
        return Broker(settings, clock=self.timers.clock, timers=self.timers)

    def restart(self) -> Broker:
        self.broker.close()
        self.broker = self._open()
        return self.broker

    def close(self) -> None:
        if not self.broker.closing:
            self.broker.close()

    @property
    def now(self) -> int:
        return self.timers.clock()

    # --- driving the share service as the handlers do ---------------------------------------

    def topic(self, name: str = "t", partitions: int = 1) -> uuid.UUID:
        return self.broker.create_topic(name, partitions).topic_id

    def produce(self, count: int, topic: str = "t", partition: int = 0) -> None:
        found = self.broker.partition(topic, partition)
        assert found is not None
        found.append_internal(make_batch(count))

    def configure(self, group: str = "g", **configs: str) -> None:
        ops: list[tuple[str, int, str | None]] = [
            (name.replace("_", "."), SET, value) for name, value in configs.items()
        ]
        self.broker.group_configs.alter(group, ops, validate_only=False)

    def open(self, member: str, tid: uuid.UUID, *, group: str = "g") -> ShareSession:
        where = [SessionPartition(tid, 0)]
        return self.broker.shares.session(group, member, 0, where, [], self.now)

    def acquire(self, session: ShareSession, max_records: int = 500) -> list[tuple[int, int, int]]:
        got, errors = self.broker.shares.acquire(session, max_records, 1 << 20, self.now)
        assert errors == {}
        return [(r.first_offset, r.last_offset, r.delivery_count) for a in got for r in a.ranges]

    def ack(self, member: str, tid: uuid.UUID, first: int, last: int, kind: int) -> None:
        outcome = self.broker.shares.acknowledge(
            "g", member, tid, 0, [(first, last, [kind])], self.now
        )
        assert outcome.message is None and outcome.code == 0, outcome

    def view(self, group: str = "g") -> SharePartitionView:
        (found,) = self.broker.shares.views(group)
        return found

    def log_records(self) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """(offset, key, value) of every record of the state log from its start."""
        partition = self.broker.partition(SHARE_STATE_TOPIC, 0)
        assert partition is not None
        return [
            (offset, json.loads(key or b"null"), None if value is None else json.loads(value))
            for batch in scan_batches(partition.log, partition.log_start_offset)
            for offset, key, value in decode_records(batch)
        ]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    opened = Node(tmp_path / "data")
    yield opened
    opened.close()


def counts(view: SharePartitionView) -> tuple[int, int, int, int, int]:
    """(start offset, available, acquired, acknowledged, archived)."""
    return (
        view.start_offset,
        view.available,
        view.acquired,
        view.acknowledged,
        view.archived,
    )


@pytest.fixture
def tid(node: Node) -> uuid.UUID:
    topic_id = node.topic()
    node.configure(share_auto_offset_reset="earliest")
    return topic_id


# --- what survives a restart --------------------------------------------------------------------


def test_acknowledged_state_survives_close_and_reopen(node: Node, tid: uuid.UUID) -> None:
    node.produce(6)
    session = node.open("m1", tid)
    assert node.acquire(session) == [(0, 5, 1)]
    node.ack("m1", tid, 0, 1, ACCEPT)
    node.ack("m1", tid, 3, 3, REJECT)
    node.ack("m1", tid, 4, 5, ACCEPT)
    before = counts(node.view())
    assert before == (2, 0, 1, 2, 1)
    node.restart()
    assert counts(node.view()) == (2, 1, 0, 2, 1)
    again = node.open("m2", tid)
    assert node.acquire(again) == [(2, 2, 2)], "only the record never acknowledged"


def test_acquired_records_come_back_available_with_their_delivery_count(
    node: Node, tid: uuid.UUID
) -> None:
    node.configure(weirmq_share_retry_backoff_ms="0")
    node.produce(3)
    session = node.open("m1", tid)
    assert node.acquire(session) == [(0, 2, 1)]
    node.ack("m1", tid, 0, 2, RELEASE)
    assert node.acquire(session) == [(0, 2, 2)]
    node.restart()
    view = node.view()
    assert (view.available, view.acquired) == (3, 0)
    assert node.acquire(node.open("m2", tid)) == [(0, 2, 3)]


def test_the_share_group_and_its_configs_are_back_after_a_restart(
    node: Node, tid: uuid.UUID
) -> None:
    node.configure(share_record_lock_duration_ms="7000")
    node.produce(1)
    node.acquire(node.open("m1", tid))
    node.restart()
    group = node.broker.groups.share_group("g")
    assert group is not None and group.is_empty
    assert node.broker.shares.lock_duration_ms("g") == 7_000
    assert list(node.broker.shares.groups()) == ["g"]


def test_the_delivery_limit_holds_across_a_restart(node: Node, tid: uuid.UUID) -> None:
    node.configure(share_delivery_count_limit="2", weirmq_share_retry_backoff_ms="0")
    node.produce(1)
    session = node.open("m1", tid)
    assert node.acquire(session) == [(0, 0, 1)]
    node.ack("m1", tid, 0, 0, RELEASE)
    assert node.acquire(session) == [(0, 0, 2)]
    node.restart()  # the second delivery was never acknowledged
    assert node.acquire(node.open("m1", tid)) == []
    assert counts(node.view())[0] == 1, "archived at the limit, not delivered a third time"


# --- snapshots and compaction ---------------------------------------------------------------


def test_a_snapshot_replaces_the_deltas_every_snapshot_every(
    node: Node, tid: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shares_module, "SNAPSHOT_EVERY", 3)
    node.produce(10)
    session = node.open("m1", tid)
    for offset in range(8):
        assert node.acquire(session, max_records=1) == [(offset, offset, 1)]
        node.ack("m1", tid, offset, offset, ACCEPT)
    kinds = [value["snapshot"] for _, key, value in node.log_records() if value is not None]
    assert kinds[0] is True, "a new share-partition is written whole first"
    assert kinds.count(True) >= 2
    runs, deltas = [], 0
    for is_snapshot in kinds:
        if is_snapshot:
            runs.append(deltas)
            deltas = 0
        else:
            deltas += 1
    runs.append(deltas)
    assert max(runs) <= 2, f"more than SNAPSHOT_EVERY - 1 deltas in a row: {kinds}"
    before = counts(node.view())
    assert before[0] == 8
    node.restart()
    assert counts(node.view()) == before
    assert node.acquire(node.open("m1", tid)) == [(8, 9, 1)]


def test_compaction_moves_the_log_start_and_replay_gives_the_same_state(
    node: Node, tid: uuid.UUID
) -> None:
    other = node.topic("u")
    node.configure(group="h", share_auto_offset_reset="earliest")
    node.produce(6)
    node.produce(2, topic="u")
    session = node.open("m1", tid)
    node.acquire(session)
    node.ack("m1", tid, 0, 2, ACCEPT)
    node.ack("m1", tid, 4, 4, REJECT)
    other_session = node.broker.shares.session(
        "h", "m2", 0, [SessionPartition(other, 0)], [], node.now
    )
    assert node.acquire(other_session) == [(0, 1, 1)]
    before = {(v.group_id, v.topic): counts(v) for v in node.broker.shares.views()}
    end = node.log_records()[-1][0] + 1

    node.broker.shares.compact()
    partition = node.broker.partition(SHARE_STATE_TOPIC, 0)
    assert partition is not None
    assert partition.log_start_offset == end
    records = node.log_records()
    assert len(records) == 2, "one snapshot per live share-partition"
    assert all(value is not None and value["snapshot"] for _, _, value in records)

    node.restart()
    after = {(v.group_id, v.topic): counts(v) for v in node.broker.shares.views()}
    # What was acquired is available again after the restart; nothing else differs.
    assert after == {
        ("g", "t"): (3, 2, 0, 0, 1),
        ("h", "u"): (0, 2, 0, 0, 0),
    }
    assert before[("g", "t")] == (3, 0, 2, 0, 1)
    assert node.acquire(node.open("m1", tid)) == [(3, 3, 2), (5, 5, 2)]


def test_compaction_starts_by_itself_once_the_log_outgrows_its_live_size(
    node: Node, tid: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shares_module, "COMPACT_MIN_BYTES", 1)
    node.produce(4)

    async def steps() -> None:
        session = node.open("m1", tid)
        for offset in range(4):
            node.acquire(session, max_records=1)
            node.ack("m1", tid, offset, offset, ACCEPT)
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(steps())
    partition = node.broker.partition(SHARE_STATE_TOPIC, 0)
    assert partition is not None
    assert partition.log_start_offset > 0
    node.restart()
    assert counts(node.view())[0] == 4


# --- deletions ------------------------------------------------------------------------------


def test_a_deleted_topics_states_are_tombstoned(node: Node, tid: uuid.UUID) -> None:
    node.produce(3)
    session = node.open("m1", tid)
    node.acquire(session)
    node.ack("m1", tid, 0, 0, ACCEPT)
    node.broker.delete_topic("t")
    assert node.broker.shares.views("g") == []
    _, last_key, last_value = node.log_records()[-1]
    assert last_key == {"group": "g", "topic_id": str(tid), "partition": 0}
    assert last_value is None
    node.restart()
    assert list(node.broker.shares.groups()) == []
    fresh = node.topic("t")
    assert fresh != tid
    node.produce(2)
    assert node.acquire(node.open("m1", fresh)) == [(0, 1, 1)], "a new topic starts afresh"


def test_group_deletion_removes_its_state_and_configs(node: Node, tid: uuid.UUID) -> None:
    node.configure(share_record_lock_duration_ms="7000")
    node.produce(3)
    node.acquire(node.open("m1", tid))
    node.broker.delete_group("g")
    assert node.broker.shares.views("g") == []
    assert node.broker.group_configs.overrides("g") == {}
    assert node.log_records()[-1][2] is None
    node.restart()
    assert node.broker.groups.share_group("g") is None
    assert node.broker.group_configs.overrides("g") == {}
    assert node.broker.shares.views() == []
    # The group may come back; it starts from the defaults (latest).
    node.produce(1)
    assert node.acquire(node.open("m1", tid)) == []


# --- bounds -------------------------------------------------------------------------------------


def test_share_sessions_are_bounded_and_idle_ones_make_room(
    node: Node, tid: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shares_module, "SESSIONS_MAX", 2)
    node.configure(share_session_timeout_ms="1000", share_heartbeat_interval_ms="100")
    node.open("a", tid)
    node.open("b", tid)
    with pytest.raises(shares_module.ShareSessionError) as refused:
        node.open("c", tid)
    assert refused.value.code.name == "share_session_limit_reached"
    node.timers.advance(500)
    node.open("b", tid)  # reopened: b is in use again
    node.timers.advance(600)  # a is idle past the session timeout, b is not
    node.open("c", tid)
    assert node.broker.shares.session("g", "b", 1, [], [], node.now).epoch == 2
    with pytest.raises(shares_module.ShareSessionError) as gone:
        node.broker.shares.session("g", "a", 1, [], [], node.now)
    assert gone.value.code.name == "share_session_not_found"
