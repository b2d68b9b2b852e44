"""Produce (API key 0): Kafka's request shape in, `Partition.publish` per partition.

Per partition, in request order and synchronously on the loop (so appends keep arrival
order, which idempotent sequences depend on): find the topic (auto-created when allowed)
and partition, then `Partition.publish` validates, de-duplicates idempotent retries,
appends and wakes waiting fetches (broker/partition.py).

Then the answer waits for the request's acks: 0 gets no answer at all, 1 is answered at
once (`Durability.WRITTEN`), all (-1) once the group commit has fsynced the partition up
to the batch (`Durability.FSYNCED`; a topic with `weirmq.acks.all.fsync=false` answers it
like acks=1). A failed fsync answers KAFKA_STORAGE_ERROR for that partition only.

The records arrive as read-only views of the request frame (`wire.fast` decodes Produce by
hand) and go to the log without being copied: only each batch's header is rebuilt.

From v13 on (KIP-516) topics are named by id, both ways: the dispatcher has the ids
looked up (`name_topics`) before admission, which needs the names; a partition of an id no
topic has is answered UNKNOWN_TOPIC_ID (ids never auto-create a topic).

A produce request (v3+) carries exactly one batch per partition; Kafka refuses anything else
with INVALID_RECORD, and so does `publish`. A transactional batch is appended only when the
transaction coordinator knows the partition to be in its producer's open transaction
(KIP-890 part 1, `Partition.publish`); otherwise it gets the coordinator's code
(INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH for a fenced producer).

A batch holding a record due later (`weirmq.delay.ms`, `weirmq.deliver.at.ms`; see
broker/delays.py) is written to the delayed log instead: it is answered with base offset -1
(its records get offsets when they are delivered), once the delayed log is fsynced for
acks=all. A malformed delay header refuses the batch with INVALID_RECORD and its message.

A topic whose cleanup.policy holds `compact` keeps the newest record of each key, so a
record without a key has no place in it: as Kafka does (LogValidator, KIP-467), a batch
holding one is refused whole with INVALID_RECORD, every keyless record named in
`record_errors` by its index in the batch (v8+; older versions get the code alone), and
nothing is written. Only compacted topics pay for reading the keys.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from typing import Any

from ....broker import configs
from ....broker.core import INTERNAL_TOPICS, Broker
from ....broker.partition import Durability, NotOneBatchError, Partition
from ....broker.topics import Topic
from ....errors import ErrorCode, KafkaError
from ....records.batch import check_batch, decode_records
from ....storage.errors import StorageError
from ....types import RequestContext
from ..wire.fast import PartitionProduceData, ProduceRequest

log = logging.getLogger(__name__)

_DURABILITY = {0: Durability.NONE, 1: Durability.WRITTEN, -1: Durability.FSYNCED}
"""Kafka's acks values and what each asks of the partition."""
_NO_TIMESTAMP = -1


class _Outcome:
    """One partition's answer, and what must be fsynced before it is given."""

    __slots__ = (
        "base_offset",
        "error",
        "log_append_time_ms",
        "log_start_offset",
        "message",
        "record_errors",
        "sync",
    )

    def __init__(self) -> None:
        self.error = ErrorCode.none
        self.message: str | None = None
        """Why, for an error the client cannot retry (an exchange refusing the batch)."""
        self.base_offset = -1
        self.log_append_time_ms = _NO_TIMESTAMP
        self.log_start_offset = -1
        self.record_errors: list[dict[str, Any]] = []
        """KIP-467: the records that failed the batch, by index in it, and why."""
        self.sync: tuple[Partition, int] | None = None


_Outcomes = list[tuple[str, "uuid.UUID | None", list[tuple[int, _Outcome]]]]
"""Per topic in request order: its name, its id (v13+), its partitions' outcomes."""


def handle_produce(
    broker: Broker, request: ProduceRequest, version: int, ctx: RequestContext
) -> dict[str, Any] | Awaitable[dict[str, Any] | None] | None:
    acks = int(request.acks)
    durability = _DURABILITY.get(acks)
    outcomes: _Outcomes = []
    for topic_data in request.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            outcome = _Outcome()
            if durability is None:
                outcome.error = ErrorCode.invalid_required_acks
            elif not topic_data.name:  # v13+: an id no topic has (`name_topics`)
                outcome.error = ErrorCode.unknown_topic_id
            else:
                _publish(broker, topic_data.name, partition_data, durability, outcome, ctx)
            partitions.append((int(partition_data.index), outcome))
        outcomes.append((topic_data.name, topic_data.topic_id, partitions))
    if acks == 0:
        return None
    if any(o.sync for _, _, ps in outcomes for _, o in ps):
        # Not the request: its records are views of the frame, which would then be kept
        # (and its buffer not reused, see wire.framing) until the fsync.
        return _after_sync(outcomes)
    return _response(outcomes)


def name_topics(broker: Broker, request: ProduceRequest) -> None:
    """v13+: each topic's name from its id; an unknown id keeps the empty name, which
    `handle_produce` answers UNKNOWN_TOPIC_ID."""
    for topic in request.topic_data:
        found = broker.topics.by_id(topic.topic_id) if topic.topic_id is not None else None
        topic.name = "" if found is None else found.name


def refuse_produce(request: ProduceRequest, code: ErrorCode, message: str) -> dict[str, Any] | None:
    """The answer to a produce refused as a whole, before anything was written: every
    partition gets `code` (None for acks=0, which gets no answer)."""
    if int(request.acks) == 0:
        return None
    outcomes: _Outcomes = []
    for topic_data in request.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            outcome = _Outcome()
            outcome.error, outcome.message = code, message
            partitions.append((int(partition_data.index), outcome))
        outcomes.append((topic_data.name, topic_data.topic_id, partitions))
    return _response(outcomes)


def _publish(
    broker: Broker,
    topic_name: str,
    data: PartitionProduceData,
    durability: Durability,
    outcome: _Outcome,
    ctx: RequestContext,
) -> None:
    try:
        if topic_name in INTERNAL_TOPICS:  # the group coordinator's log is its own
            outcome.error = ErrorCode.invalid_topic_exception
            return
        topic = broker.topic(topic_name, auto_create=True, client_id=ctx.client_id)
        partition = broker.partition(topic_name, int(data.index))
        if partition is None:
            outcome.error = ErrorCode.unknown_topic_or_partition
            return
        records = data.records
        if not records:
            raise NotOneBatchError("a produce request must carry exactly one batch, got none")
        if _compacted(broker, topic) and _refuse_keyless(topic_name, data, records, outcome):
            return
        outcome.log_start_offset = partition.log_start_offset
        published = partition.publish(records, durability)
        outcome.base_offset = published.base_offset
        outcome.log_append_time_ms = published.log_append_time_ms
        outcome.log_start_offset = published.log_start_offset
        if published.durable_offset is not None:
            # A batch diverted to the delayed log is durable when that log is.
            synced = published.durable_partition or partition
            outcome.sync = (synced, published.durable_offset)
    except KafkaError as exc:
        outcome.error = exc.code
        if not exc.retriable:
            outcome.message = str(exc) or None
        if exc.code is ErrorCode.kafka_storage_error:
            log.error("produce to %s-%s failed: %s", topic_name, data.index, exc)


def _compacted(broker: Broker, topic: Topic) -> bool:
    return "compact" in configs.effective(broker.settings, topic.configs, "cleanup.policy")


KEYLESS_SHOWN_MAX = 3
"""How many record errors the partition's error message quotes (Kafka's number)."""


def _refuse_keyless(
    topic: str, data: PartitionProduceData, records: bytes | memoryview, outcome: _Outcome
) -> bool:
    """Whether the batch holds a record without a key, for a compacted topic: then the
    outcome says so (INVALID_RECORD, a record error per keyless record). A batch that does
    not even parse is left to `Partition.publish`, which refuses it precisely."""
    if isinstance(check_batch(records, 0, len(records)), str):
        return False
    where = f"{topic}-{int(data.index)}"
    message = f"Compacted topic cannot accept message without key in topic partition {where}."
    keyless = [
        {"batch_index": index, "batch_index_error_message": message}
        for index, (_offset, key, _value) in enumerate(decode_records(records))
        if key is None
    ]
    if not keyless:
        return False
    outcome.error = ErrorCode.invalid_record
    outcome.record_errors = keyless
    shown = ", ".join(
        f"{e['batch_index']}: {e['batch_index_error_message']}" for e in keyless[:KEYLESS_SHOWN_MAX]
    )
    outcome.message = (
        f"One or more records have been rejected due to {len(keyless)} record errors in "
        f"total, and only showing the first {KEYLESS_SHOWN_MAX} errors at most: [{shown}]"
    )
    return True


async def _after_sync(outcomes: _Outcomes) -> dict[str, Any]:
    pending = [o for _, _, ps in outcomes for _, o in ps if o.sync is not None]
    results: list[BaseException | None]
    if len(pending) == 1:
        # The usual request: one partition. Awaited here rather than through gather,
        # whose task per partition costs three more event-loop rounds per request.
        results = [await _durable(pending[0])]
    else:
        results = await asyncio.gather(*(_durable(o) for o in pending))
    for outcome, error in zip(pending, results, strict=True):
        if error is not None:
            log.error("fsync failed; answering KAFKA_STORAGE_ERROR: %s", error)
            outcome.error = ErrorCode.kafka_storage_error
            outcome.base_offset = -1
    return _response(outcomes)


async def _durable(outcome: _Outcome) -> BaseException | None:
    """Wait for the outcome's fsync; returns the storage error that failed it, if any."""
    assert outcome.sync is not None
    partition, offset = outcome.sync
    try:
        await partition.durable(offset)
    except (StorageError, OSError) as exc:
        return exc
    return None


def _response(outcomes: _Outcomes) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": name,
                "topic_id": topic_id,
                "partition_responses": [
                    {
                        "index": index,
                        "error_code": o.error,
                        "base_offset": o.base_offset,
                        "log_append_time": o.log_append_time_ms,
                        "log_start_offset": o.log_start_offset,
                        "record_errors": o.record_errors,
                        "error_message": o.message,
                    }
                    for index, o in partitions
                ],
            }
            for name, topic_id, partitions in outcomes
        ],
    }
