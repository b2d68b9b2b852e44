"""The persisted state of a share-partition: a snapshot, then deltas, as plain JSON values.

Kafka's share coordinator keeps each share-partition's state in `__share_group_state` as a
ShareSnapshot (start offset and state batches) followed by ShareUpdates (state batches
that overwrite the ranges they name), compacted into a new snapshot now and then. Ours is
the same shape, one type for both, `ShareState`:

    {"start_offset": 120, "batches": [[first_offset, last_offset, state_id, delivery_count], ...]}

- The start offset: every offset below it is done (acknowledged or archived) and has no
  state any more. Replaying moves it forward only.
- Batches: inclusive offset ranges with Kafka's state ids, AVAILABLE (0), ACKNOWLEDGED
  (2) or ARCHIVED (4), and the delivery count. ACQUIRED is never persisted: a lock does not
  survive the broker, so an acquired record is written as AVAILABLE with its incremented
  delivery count, at the moment it is acquired. A restart therefore redelivers it, and
  counts the delivery that was under way: a poison message that crashes its consumer (or
  the broker) still reaches the delivery limit.
- Replay (`SharePartition.restore`) applies the snapshot, then each delta in order: its
  batches overwrite, its start offset replaces a lower one, and state below the start
  offset is dropped. An offset inside the tracked range that no batch names (there should
  be none) is AVAILABLE with no delivery yet: losing a record is worse than redelivering.

The caller decides when to write a snapshot instead of a delta (`SharePartition.snapshot`
gives one at any time); state is bounded by `max_record_locks`, so a snapshot is small.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .errors import InvalidShareStateError
from .states import RecordState

PERSISTED_STATES: Final = frozenset(
    {RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED}
)


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    """One range of offsets sharing a persisted state (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int

    def __post_init__(self) -> None:
        assert 0 <= self.first_offset <= self.last_offset, self
        assert self.state in PERSISTED_STATES, self
        assert self.delivery_count >= 0, self


@dataclass(frozen=True, slots=True)
class ShareState:
    """A snapshot of a share-partition, or one step's delta to it (same shape)."""

    start_offset: int
    batches: tuple[PersistedBatch, ...] = ()

    def to_document(self) -> dict[str, object]:
        """This state as plain JSON-serialisable values."""
        return {
            "start_offset": self.start_offset,
            "batches": [
                [b.first_offset, b.last_offset, int(b.state), b.delivery_count]
                for b in self.batches
            ],
        }

    @classmethod
    def from_document(cls, document: Mapping[str, object]) -> ShareState:
        """The state `to_document` wrote; `InvalidShareStateError` for anything else."""
        start = document.get("start_offset")
        rows = document.get("batches")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise InvalidShareStateError(f"not a share state: {document!r}")
        if not isinstance(rows, list):
            raise InvalidShareStateError(f"not a share state: {document!r}")
        return cls(start, tuple(_batch(row) for row in rows))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _batch(row: object) -> PersistedBatch:
    if not isinstance(row, list | tuple) or len(row) != 4 or not all(_is_int(v) for v in row):
        raise InvalidShareStateError(f"not a state batch: {row!r}")
    first, last, state_id, count = row
    valid_ids = {int(s) for s in PERSISTED_STATES}
    if not (0 <= first <= last and state_id in valid_ids and count >= 0):
        raise InvalidShareStateError(f"not a state batch: {row!r}")
    return PersistedBatch(first, last, RecordState(state_id), count)
