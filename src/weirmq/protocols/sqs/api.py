"""The SQS actions: each takes the request's parameters in the JSON protocol's shape and
returns its result in that shape (the Query protocol is translated to and from it by
query.py; the HTTP layer is http.py).

Sending. A send is checked as SQS checks it (body characters, attributes, sizes, delays,
FIFO's group and deduplication ids), asked of the flow controller (`flow/`, as every
protocol's writes are), appended as one batch (a SendMessageBatch's entries that
passed their checks together), and answered once that batch is fsynced (the group commit
covers every request waiting), so a message SQS said it has is never lost. A delayed
message goes through the broker's durable delays service.

Flow control is Kafka's, told in SQS's words. A send is refused with RequestThrottled
(which the AWS SDKs retry with backoff) and not stored when a guarded resource is blocked
(free disk, a queue's backlog bound: `flow/`), or when its sender (the access key) is in
a throttle. A throttle comes from a send the flow controller admitted but asked to slow
down (the sender's produce quota, a resource between its marks): that send is stored, as
Kafka stores the request that crosses a quota, and the sender's next sends are refused
for the throttle's time, before anything of them is charged to quotas or backlogs: a
sender that waits as told gets in, and producers slow down gradually.

Receiving. A receive acquires up to MaxNumberOfMessages from the queue engine for the one
member `MEMBER`, each locked for the VisibilityTimeout, and mints each a new receipt
handle: (topic id, offset, delivery count, random), base64. A long poll (WaitTimeSeconds)
that finds nothing waits on the queue's appends and on the engine's wakeup (a message
coming back), so it returns as soon as a message can be received; at most
`long_polls_max` wait at once, and past that a receive returns what is there at once.

A FIFO queue hands out a message only when no earlier message of its MessageGroupId is in
flight: a receive reads the ready messages in order (at most `FIFO_SCAN_RECORDS`), skips
the groups that have a message in flight, and acquires the rest by offset. Sends are
deduplicated over five minutes by MessageDeduplicationId (or the body's SHA-256 with
ContentBasedDeduplication), scoped to the queue or to the group (DeduplicationScope); a
duplicate is answered with the first one's MessageId and SequenceNumber and not stored
again. The deduplication book is memory, rebuilt on start from the last five minutes of
the queue's log (which keeps at least those five minutes: model.py's `trim`). A receive
retried with the same ReceiveRequestAttemptId within five minutes gets the same messages
and handles while they are still in flight. A FIFO queue's DelaySeconds does not go
through the delays service: the message is appended at once with its due time (header
weirmq.sqs.visible.at), and a receive skips it, and the rest of its group, until then. So
the log holds every message the deduplication book needs, and the group's order holds
whatever the delay.

Deleting. A receipt handle names one delivery. Deleting with the newest handle of a
message in flight acknowledges it (the engine's ACCEPT); with the newest handle of a
message whose visibility has expired but that nobody has received since, it is dropped
(SQS deletes it too); with an older handle, nothing happens and the answer is success,
as SQS answers. Deletes are answered once the engine's state log is fsynced, so a deleted
message is never received again, even after a crash of the machine. A malformed handle,
or one of another queue, is ReceiptHandleIsInvalid.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import logging
import os
import re
import struct
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ...broker.partition import Durability, wait_any
from ...broker.shares import AckType, RecordState
from ...errors import KafkaError
from ...flow.admission import Admission, Kind
from ...records.batch import Record
from ...records.codec import encode_records
from ...storage.errors import StorageError
from ...types import RequestContext
from . import messages as m
from .errors import Fault, SqsError
from .model import (
    ATTEMPTS_MAX,
    COMPUTED,
    DEDUP_IDS_MAX,
    DEDUP_WINDOW_MS,
    FIFO_ATTRIBUTES,
    KNOWN,
    MEMBER,
    STANDARD_SHOWN,
    WINDOW_RECORDS,
    SqsModel,
    SqsQueue,
)

if TYPE_CHECKING:
    from ...broker.core import Broker

log = logging.getLogger(__name__)

BATCH_ENTRIES_MAX: Final = 10
BATCH_BYTES_MAX: Final = 1_048_576
"""SQS's bound on a SendMessageBatch's messages together."""
RECEIVE_MAX: Final = 10
WAIT_SECONDS_MAX: Final = 20
VISIBILITY_MAX_S: Final = 43_200
DELAY_MAX_S: Final = 900
READ_BYTES_MAX: Final = 12 << 20
"""One receive reads at most this much of the log (ten 1 MiB messages, whole batches)."""
FIRST_RECEIVES_MAX: Final = 2 * WINDOW_RECORDS
"""First-receive times one queue keeps before forgetting those of settled messages."""
THROTTLED_SENDERS_MAX: Final = 10_000
"""Senders in a throttle at once that are remembered (past it, a throttle goes unsaid:
the flow controller's blocked state still refuses what must not be stored)."""
FIFO_SCAN_RECORDS: Final = 1_000
"""Ready messages a FIFO receive looks through for groups with nothing in flight."""
LIST_RESULTS_MAX: Final = 1000
_BATCH_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_DEDUP_ID: Final = re.compile(r"[\x21-\x7e]{1,128}")
_HANDLE: Final = struct.Struct(">B16sQIQ")
_HANDLE_VERSION: Final = 1
SYSTEM_ATTRIBUTES: Final = frozenset(
    {
        "All",
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "SequenceNumber",
        "MessageDeduplicationId",
        "MessageGroupId",
        "AWSTraceHeader",
        "DeadLetterQueueSourceArn",
    }
)
_sequence = itertools.count()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the base URL they reached (queue URLs are made from it), the
    access key that signed it (SenderId, and the client id flow's quotas know it by), and
    their address."""

    base_url: str
    access_key: str
    peer: str


@dataclass(slots=True)
class _Entry:
    """One message of a send, checked, waiting to be appended."""

    id: str
    record: Record | None
    """None: a FIFO duplicate, answered with the first one's result, not stored."""
    result: dict[str, Any]
    delay_s: int


Handler = Callable[["SqsApi", dict[str, Any], Caller], Awaitable[dict[str, Any]]]


class SqsApi:
    """Every SQS action on one broker; see the module docstring."""

    def __init__(
        self, broker: Broker, model: SqsModel, *, message_bytes_max: int, long_polls_max: int
    ) -> None:
        self.broker = broker
        self.model = model
        self.message_bytes_max = message_bytes_max
        self.long_polls_max = long_polls_max
        self.long_polls = 0
        self.admission = Admission(broker.flow)
        self._throttled: dict[str, int] = {}
        """Access key -> until when its sends are refused (a throttle asked of a send)."""
        from .moves import MoveTasks

        self.moves = MoveTasks(broker, model)

    async def call(self, action: str, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        handler = ACTIONS.get(action)
        if handler is None:
            raise SqsError(
                Fault.INVALID_ACTION,
                f"The action {action} is not valid for this web service.",
            )
        return await handler(self, params, caller)

    def now(self) -> int:
        return self.broker.clock()

    # --- queues ------------------------------------------------------------------------------

    async def create_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        attributes = _string_map(params, "Attributes")
        tags = _string_map(params, "tags")
        queue = self.model.create(params.get("QueueName"), attributes, tags, self.now())
        if queue.fifo:
            self.rebuild_fifo(queue)
        return {"QueueUrl": self.model.url(queue, caller.base_url)}

    async def get_queue_url(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        name = _required_str(params, "QueueName")
        owner = params.get("QueueOwnerAWSAccountId")
        if owner not in (None, self.model.account_id):
            raise SqsError(Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")
        return {"QueueUrl": self.model.url(self.model.required(name), caller.base_url)}

    async def list_queues(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        prefix = params.get("QueueNamePrefix") or ""
        if not isinstance(prefix, str):
            raise _invalid_value("QueueNamePrefix", prefix)
        names = [q for q in self.model.queues() if q.name.startswith(prefix)]
        urls = [self.model.url(q, caller.base_url) for q in names]
        return _page(urls, params, "QueueUrls")

    async def delete_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        self.moves.queue_deleted(self.model.arn(queue))
        self.model.delete(queue)
        return {}

    async def purge_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        shares = self.broker.shares
        shares.purge(queue.group_id, queue.topic_id, 0, self.now())
        await shares.durable()
        return {}

    async def get_queue_attributes(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        names = _string_list(params, "AttributeNames")
        for name in names:
            if name != "All" and name not in KNOWN:
                raise SqsError(Fault.INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {name}.")
        if not names:
            return {}
        every = self.attributes(queue)
        if "All" in names:
            return {"Attributes": every}
        return {"Attributes": {name: every[name] for name in names if name in every}}

    def attributes(self, queue: SqsQueue) -> dict[str, str]:
        """Every attribute of a queue, as GetQueueAttributes(All) returns them."""
        ready, in_flight = self.broker.shares.queue_counts(queue.group_id, queue.topic_id, 0)
        delayed = queue.count_delayed(self.now())
        if queue.fifo:  # its delayed messages are on the log already (see the docstring)
            ready = max(0, ready - delayed)
        found: dict[str, str] = {
            "QueueArn": self.model.arn(queue),
            "ApproximateNumberOfMessages": str(ready),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
            "CreatedTimestamp": str(queue.created_s),
            "LastModifiedTimestamp": str(queue.modified_s),
        }
        assert set(found) == set(COMPUTED)
        shown = [*STANDARD_SHOWN, *queue.attributes]
        if queue.fifo:
            shown += ["FifoQueue", *sorted(FIFO_ATTRIBUTES)]
        for name in shown:
            found[name] = queue.get(name)
        return found

    async def set_queue_attributes(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        attributes = _string_map(params, "Attributes")
        self.model.set_attributes(queue, attributes, self.now())
        return {}

    async def tag_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        tags = _string_map(params, "Tags")
        if not tags:
            raise SqsError(Fault.MISSING_PARAMETER, "The request must contain the parameter Tags.")
        self.model.tag(queue, tags)
        return {}

    async def untag_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        keys = _string_list(params, "TagKeys")
        if not keys:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter TagKeys."
            )
        self.model.untag(queue, keys)
        return {}

    async def list_queue_tags(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        return {"Tags": dict(queue.tags)} if queue.tags else {}

    async def list_dead_letter_source_queues(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        queue = self._queue(params)
        urls = [self.model.url(q, caller.base_url) for q in self.model.dead_letter_sources(queue)]
        return _page(urls, params, "queueUrls", always=True)

    async def add_permission(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        self._queue(params)
        raise _no_permissions("AddPermission")

    async def remove_permission(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        self._queue(params)
        raise _no_permissions("RemovePermission")

    def _queue(self, params: Mapping[str, Any]) -> SqsQueue:
        return self.model.required(self.model.name_of_url(params.get("QueueUrl")))

    # --- sending -------------------------------------------------------------------------------

    async def send_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        entry = self._checked_entry(queue, params, caller, "")
        if entry.record is None:
            return entry.result
        await self._append(queue, [entry], caller)
        return entry.result

    async def send_message_batch(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        entries = _batch_entries(params, "SendMessageBatchRequestEntry")
        total = sum(
            _text_bytes(e.get("MessageBody"))
            + (m.attributes_bytes(_loose_attributes(a)) if (a := e.get("MessageAttributes")) else 0)
            for e in entries
        )
        if total > BATCH_BYTES_MAX:
            raise SqsError(
                Fault.BATCH_TOO_LONG,
                f"Batch requests cannot be longer than {BATCH_BYTES_MAX} bytes. "
                f"You have sent {total} bytes.",
            )
        successful: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        pending: list[_Entry] = []
        for raw in entries:
            try:
                entry = self._checked_entry(queue, raw, caller, str(raw["Id"]))
            except SqsError as error:
                failed.append(_failure(str(raw["Id"]), error))
                continue
            if entry.record is None:
                successful.append({"Id": entry.id, **entry.result})
            else:
                pending.append(entry)
        if pending:
            await self._append(queue, pending, caller)
            successful.extend({"Id": e.id, **e.result} for e in pending)
        order = {str(raw["Id"]): i for i, raw in enumerate(entries)}
        successful.sort(key=lambda e: order[e["Id"]])
        return {"Successful": successful, "Failed": failed}

    def _checked_entry(
        self, queue: SqsQueue, params: Mapping[str, Any], caller: Caller, entry_id: str
    ) -> _Entry:
        """One message, checked and made into its record; a FIFO duplicate comes back
        with `record` None and the first one's result."""
        body = m.check_body(params.get("MessageBody"))
        data = body.encode()
        attributes = m.check_attributes(params.get("MessageAttributes"))
        trace = _trace_header(params.get("MessageSystemAttributes"))
        size = len(data) + m.attributes_bytes(attributes)
        limit = min(queue.integer("MaximumMessageSize"), self.message_bytes_max)
        if size > limit:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                "One or more parameters are invalid. Reason: Message must be shorter than "
                f"{limit} bytes.",
            )
        delay = params.get("DelaySeconds")
        group = params.get("MessageGroupId")
        dedup = params.get("MessageDeduplicationId")
        now = self.now()
        result: dict[str, Any] = {"MD5OfMessageBody": m.md5_of_bytes(data)}
        if attributes:
            result["MD5OfMessageAttributes"] = m.md5_of_attributes(attributes)
        if trace is not None:
            result["MD5OfMessageSystemAttributes"] = m.md5_of_attributes(
                {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
            )
        if queue.fifo:
            if delay is not None:
                raise SqsError(
                    Fault.INVALID_PARAMETER_VALUE,
                    f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
                    "include parameter that is not valid for this queue type.",
                )
            delay_s = queue.integer("DelaySeconds")
            group, dedup = self._fifo_ids(queue, body, group, dedup)
            seen = self._duplicate(queue, group, dedup, now)
            if seen is not None:
                result.update(MessageId=seen[0], SequenceNumber=seen[1])
                return _Entry(entry_id, None, result, 0)
        else:
            if dedup is not None:
                raise SqsError(
                    Fault.INVALID_PARAMETER_VALUE,
                    f"Value {dedup} for parameter MessageDeduplicationId is invalid. Reason: "
                    "The request include parameter that is not valid for this queue type.",
                )
            delay_s = (
                queue.integer("DelaySeconds")
                if delay is None
                else _integer(delay, "DelaySeconds", 0, DELAY_MAX_S)
            )
            if group is not None and (not isinstance(group, str) or not _DEDUP_ID.fullmatch(group)):
                raise _invalid_value("MessageGroupId", group)
        message_id = _new_message_id()
        result["MessageId"] = message_id
        headers = m.record_headers(
            message_id,
            attributes,
            sender=caller.access_key,
            trace=trace,
            group=group,
            dedup=dedup,
            delay_ms=0 if queue.fifo else delay_s * 1000,
        )
        if group is not None and dedup is not None:  # a FIFO queue's
            sequence = f"{now:013d}{next(_sequence) % 10_000_000:07d}"
            headers.append((SEQUENCE, sequence.encode()))
            if delay_s > 0:  # on the log now, received once due (see the module docstring)
                headers.append((VISIBLE_AT, str(now + delay_s * 1000).encode()))
            result["SequenceNumber"] = sequence
            self._remember_dedup(queue, group, dedup, message_id, sequence, now)
        key = None if group is None else group.encode()
        return _Entry(entry_id, Record(data, key, tuple(headers), now), result, delay_s)

    def _fifo_ids(
        self, queue: SqsQueue, body: str, group: object, dedup: object
    ) -> tuple[str, str]:
        if group is None:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter MessageGroupId."
            )
        if not isinstance(group, str) or _DEDUP_ID.fullmatch(group) is None:
            raise _invalid_value("MessageGroupId", group)
        if dedup is None:
            if queue.get("ContentBasedDeduplication") != "true":
                raise SqsError(
                    Fault.INVALID_PARAMETER_VALUE,
                    "The queue should either have ContentBasedDeduplication enabled or "
                    "MessageDeduplicationId provided explicitly",
                )
            dedup = hashlib.sha256(body.encode()).hexdigest()
        if not isinstance(dedup, str) or _DEDUP_ID.fullmatch(dedup) is None:
            raise _invalid_value("MessageDeduplicationId", dedup)
        return group, dedup

    def _dedup_key(self, queue: SqsQueue, group: str, dedup: str) -> str:
        if queue.get("DeduplicationScope") == "messageGroup":
            return f"{group}\0{dedup}"
        return dedup

    def _duplicate(
        self, queue: SqsQueue, group: str, dedup: str, now: int
    ) -> tuple[str, str] | None:
        state = queue.fifo_state
        assert state is not None
        state.expire(now)
        found = state.dedup.get(self._dedup_key(queue, group, dedup))
        if found is None:
            if len(state.dedup) >= DEDUP_IDS_MAX:
                raise SqsError(
                    Fault.THROTTLED,
                    f"More than {DEDUP_IDS_MAX} messages were sent to this FIFO queue in five "
                    "minutes; try again later.",
                )
            return None
        return found[1], str(found[2])

    def _remember_dedup(
        self, queue: SqsQueue, group: str, dedup: str, message_id: str, sequence: str, now: int
    ) -> None:
        state = queue.fifo_state
        assert state is not None
        state.dedup[self._dedup_key(queue, group, dedup)] = (
            now + DEDUP_WINDOW_MS,
            message_id,
            int(sequence),
        )

    def _forget_dedup(self, queue: SqsQueue, entries: Sequence[_Entry]) -> None:
        """The append of these failed: a retry must not be taken for a duplicate."""
        state = queue.fifo_state
        if state is None:
            return
        for entry in entries:
            if entry.record is None:
                continue
            group = m.header(entry.record, m.GROUP) or ""
            dedup = m.header(entry.record, m.DEDUP) or ""
            state.dedup.pop(self._dedup_key(queue, group, dedup), None)

    async def _append(self, queue: SqsQueue, entries: Sequence[_Entry], caller: Caller) -> None:
        """Admit, append as one batch, and return once it is durable."""
        broker = self.broker
        partition = broker.partition(queue.topic, 0)
        if partition is None:
            raise SqsError(Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")
        try:
            self._admit(queue, entries, caller)
            batch = encode_records([entry.record for entry in entries if entry.record is not None])
            try:
                published = partition.publish(batch, Durability.FSYNCED)
            except StorageError as exc:
                raise SqsError(
                    Fault.SERVICE_UNAVAILABLE, f"The broker cannot store messages now: {exc}"
                ) from None
            except KafkaError as exc:
                raise SqsError(Fault.INTERNAL, f"The message was not stored: {exc}") from None
        except SqsError:
            self._forget_dedup(queue, entries)
            raise
        now = self.now()
        for entry in entries:
            if entry.delay_s > 0:
                queue.note_delayed(now, entry.delay_s)
        if published.durable_offset is not None:
            target = published.durable_partition or partition
            try:
                await target.durable(published.durable_offset)
            except (StorageError, OSError) as exc:
                raise SqsError(
                    Fault.SERVICE_UNAVAILABLE, f"The message was not made durable: {exc}"
                ) from None

    def _admit(self, queue: SqsQueue, entries: Sequence[_Entry], caller: Caller) -> None:
        """Flow control for one send (see the module docstring): raises RequestThrottled
        when it must not be stored; else it is stored, and when the flow controller asks a
        throttle the sender's next sends are refused for that long."""
        broker = self.broker
        refusal = broker.resources.publish_refusal
        if refusal is not None:
            raise SqsError(Fault.THROTTLED, f"The broker cannot store messages now: {refusal}")
        now = self.now()
        key = caller.access_key
        until = self._throttled.get(key)
        if until is not None:
            if until > now:
                raise SqsError(Fault.THROTTLED, f"Rate exceeded: try again in {until - now} ms.")
            del self._throttled[key]
        if broker.flow.idle:
            return
        size = sum(len(e.record.value or b"") for e in entries if e.record is not None)
        context = RequestContext(key, f"/{caller.peer}", "sqs")  # charged from here on
        decision = self.admission.admit(context, size, now, Kind.PRODUCE, [queue.topic])
        if decision.wait_for:
            names = ", ".join(sorted(decision.wait_for))
            raise SqsError(Fault.THROTTLED, f"Rate exceeded: {names} over its limit.")
        if decision.throttle_ms > 0:
            if len(self._throttled) >= THROTTLED_SENDERS_MAX:
                for stale in [k for k, t in self._throttled.items() if t <= now]:
                    del self._throttled[stale]
            if len(self._throttled) < THROTTLED_SENDERS_MAX:
                self._throttled[key] = now + decision.throttle_ms

    # --- receiving -----------------------------------------------------------------------------

    async def receive_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        count = _optional_int(params, "MaxNumberOfMessages", 1, RECEIVE_MAX, 1)
        visibility = _optional_int(
            params, "VisibilityTimeout", 0, VISIBILITY_MAX_S, queue.integer("VisibilityTimeout")
        )
        wait_s = _optional_int(
            params,
            "WaitTimeSeconds",
            0,
            WAIT_SECONDS_MAX,
            queue.integer("ReceiveMessageWaitTimeSeconds"),
        )
        # "ALL" in any case: kombu sends it, and SQS takes it.
        system = {
            "All" if name.lower() == "all" else name
            for name in (
                *_string_list(params, "AttributeNames"),
                *_string_list(params, "MessageSystemAttributeNames"),
            )
        }
        unknown = system - SYSTEM_ATTRIBUTES
        if unknown:
            raise SqsError(Fault.INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {min(unknown)}.")
        wanted = _string_list(params, "MessageAttributeNames")
        attempt = params.get("ReceiveRequestAttemptId")
        if queue.fifo and attempt is not None:
            again = self._attempt(queue, str(attempt))
            if again:
                return {"Messages": again}
        deadline = self.now() + wait_s * 1000
        lock_ms = visibility * 1000
        waiting = False
        try:
            while True:
                got = self._take(queue, count, lock_ms, system, wanted, caller)
                if got or self.broker.closing:
                    break
                if not waiting:
                    if wait_s == 0 or self.long_polls >= self.long_polls_max:
                        break
                    waiting = True
                    self.long_polls += 1
                due = queue.fifo_state.next_due if queue.fifo_state is not None else None
                if not await self._wait(queue, deadline if due is None else min(due, deadline)):
                    break
                queue = self.model.required(queue.name)  # deleted while it waited?
        finally:
            if waiting:
                self.long_polls -= 1
        if queue.fifo and attempt is not None and got:
            self._remember_attempt(queue, str(attempt), got)
        return {"Messages": got} if got else {}

    async def _wait(self, queue: SqsQueue, deadline: int) -> bool:
        """Wait for an append to the queue or a message coming back, until `deadline`;
        False once it has passed."""
        broker = self.broker
        partition = broker.partition(queue.topic, 0)
        if partition is None:
            return False
        sources = [partition, broker.shares.wakeup(queue.group_id)]
        waiter = wait_any(sources, deadline, broker.timers, broker.clock)
        if waiter is None:
            return False
        await waiter
        return True

    def _take(
        self,
        queue: SqsQueue,
        count: int,
        lock_ms: int,
        system: set[str],
        wanted: Sequence[str],
        caller: Caller,
    ) -> list[dict[str, Any]]:
        shares = self.broker.shares
        now = self.now()
        if queue.fifo:
            picked = self._fifo_pick(queue, count, now)
            if not picked:
                return []
            ranges = shares.acquire_offsets(
                queue.group_id, MEMBER, queue.topic_id, 0, [o for o, _ in picked], now, lock_ms
            )
            counts = {
                offset: r.delivery_count
                for r in ranges
                for offset in range(r.first_offset, r.last_offset + 1)
            }
            taken = [(o, counts[o], rec) for o, rec in picked if o in counts]
            state = queue.fifo_state
            assert state is not None
            for offset, _count, record in taken:
                state.groups[offset] = m.header(record, m.GROUP) or ""
        else:
            acquired = shares.acquire_one(
                queue.group_id, MEMBER, queue.topic_id, 0, count, READ_BYTES_MAX, now, lock_ms
            )
            if acquired is None:
                return []
            taken = [(o, c, rec) for o, c, rec, _producer in acquired.messages()]
        return [
            self._message(queue, offset, delivery_count, record, system, wanted, now)
            for offset, delivery_count, record in taken
        ]

    def _fifo_pick(self, queue: SqsQueue, count: int, now: int) -> list[tuple[int, Record]]:
        """Ready messages to hand out, in order, skipping groups with one in flight."""
        shares = self.broker.shares
        state = queue.fifo_state
        assert state is not None
        held: set[int] = set()
        for run in shares.held(queue.group_id, queue.topic_id, 0):
            held.update(range(run.first_offset, run.last_offset + 1))
        for offset in [o for o in state.groups if o not in held]:
            del state.groups[offset]
        blocked = set(state.groups.values())
        state.next_due = None
        partition = self.broker.partition(queue.topic, 0)
        if partition is None:
            return []
        offsets: list[int] = []
        for first, last in shares.ready_offsets(
            queue.group_id, queue.topic_id, 0, FIFO_SCAN_RECORDS
        ):
            last = min(last, partition.high_watermark - 1, first + FIFO_SCAN_RECORDS)
            offsets.extend(range(first, last + 1))
            if len(offsets) >= FIFO_SCAN_RECORDS:
                break
        picked: list[tuple[int, Record]] = []
        for offset, record in shares.read_records(queue.topic_id, 0, offsets[:FIFO_SCAN_RECORDS]):
            if record is None:
                continue
            group = m.header(record, m.GROUP) or ""
            if group in blocked:
                continue
            visible_at = _visible_at(record)
            if visible_at > now:  # delayed: it, and its group after it, wait
                blocked.add(group)
                state.next_due = min(state.next_due or visible_at, visible_at)
                continue
            picked.append((offset, record))
            if len(picked) >= count:
                break
        return picked

    def _message(
        self,
        queue: SqsQueue,
        offset: int,
        delivery_count: int,
        record: Record,
        system: set[str],
        wanted: Sequence[str],
        now: int,
    ) -> dict[str, Any]:
        first = queue.first_receive.setdefault(offset, now)
        if len(queue.first_receive) > FIRST_RECEIVES_MAX:
            queue.forget_first_receives(
                self.broker.shares.queue_start(queue.group_id, queue.topic_id, 0) or 0
            )
        body = m.body(record)
        handle = _HANDLE.pack(
            _HANDLE_VERSION,
            queue.topic_id.bytes,
            offset,
            delivery_count,
            (_ID_BASE + next(_ids)) % (1 << 64),  # distinct per receive
        )
        message: dict[str, Any] = {
            "MessageId": m.message_id(record, queue.topic_id, offset),
            "ReceiptHandle": base64.urlsafe_b64encode(handle).decode(),
            "MD5OfBody": m.md5_of_body(body),
            "Body": body,
        }
        if system:
            every = "All" in system
            found = {
                "SenderId": m.header(record, m.SENDER) or self.model.account_id,
                "SentTimestamp": str(record.timestamp_ms),
                "ApproximateReceiveCount": str(delivery_count),
                "ApproximateFirstReceiveTimestamp": str(first),
            }
            for name, header in (
                ("AWSTraceHeader", m.TRACE),
                ("MessageGroupId", m.GROUP),
                ("MessageDeduplicationId", m.DEDUP),
                ("SequenceNumber", SEQUENCE),
                ("DeadLetterQueueSourceArn", m.SOURCE),
            ):
                value = m.header(record, header)
                if value is not None:
                    found[name] = value
            message["Attributes"] = {k: v for k, v in found.items() if every or k in system}
        attributes = m.selected_attributes(m.attributes_of(record), wanted)
        if attributes:
            message["MessageAttributes"] = attributes
            message["MD5OfMessageAttributes"] = m.md5_of_attributes(attributes)
        return message

    def _attempt(self, queue: SqsQueue, attempt: str) -> list[dict[str, Any]] | None:
        """The messages a receive with this attempt id got, if all are still in flight
        (a retry of it gets them again); None to receive afresh."""
        state = queue.fifo_state
        assert state is not None
        state.expire(self.now())
        found = state.attempts.get(attempt)
        if found is None:
            return None
        for message in found[1]:
            decoded = _decode_handle(message["ReceiptHandle"])
            run = self.broker.shares.record_state(queue.group_id, queue.topic_id, 0, decoded[1])
            if run is None or run.state is not RecordState.ACQUIRED:
                return None
            if run.delivery_count != decoded[2]:
                return None
        return found[1]

    def _remember_attempt(self, queue: SqsQueue, attempt: str, got: list[dict[str, Any]]) -> None:
        state = queue.fifo_state
        assert state is not None
        state.attempts[attempt] = (self.now() + DEDUP_WINDOW_MS, got)
        state.attempts.move_to_end(attempt)
        while len(state.attempts) > ATTEMPTS_MAX:
            state.attempts.popitem(last=False)

    def rebuild_fifo(self, queue: SqsQueue) -> None:
        """Refill a FIFO queue's deduplication book from the last five minutes of its log
        (after a restart)."""
        state = queue.fifo_state
        partition = self.broker.partition(queue.topic, 0)
        if state is None or partition is None:
            return
        now = self.now()
        since = now - DEDUP_WINDOW_MS
        found_at = partition.log.offset_for_timestamp(since)
        if found_at is None:
            return
        offset = max(found_at.offset, partition.log_start_offset)
        end = partition.high_watermark
        while offset < end:
            chunk = list(range(offset, min(end, offset + 500)))
            for at, record in self.broker.shares.read_records(queue.topic_id, 0, chunk):
                if record is None or record.timestamp_ms < since:
                    continue
                group, dedup = m.header(record, m.GROUP), m.header(record, m.DEDUP)
                sequence = m.header(record, SEQUENCE)
                if group is None or dedup is None or sequence is None:
                    continue
                state.dedup[self._dedup_key(queue, group, dedup)] = (
                    record.timestamp_ms + DEDUP_WINDOW_MS,
                    m.message_id(record, queue.topic_id, at),
                    int(sequence),
                )
            offset = chunk[-1] + 1

    # --- deleting and changing visibility -----------------------------------------------------

    async def delete_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        handle = _required_str(params, "ReceiptHandle")
        error = self._delete(queue, [handle])[0]
        if error is not None:
            raise error
        await self.broker.shares.durable()
        return {}

    async def delete_message_batch(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        queue = self._queue(params)
        entries = _batch_entries(params, "DeleteMessageBatchRequestEntry")
        handles = [str(e.get("ReceiptHandle", "")) for e in entries]
        errors = self._delete(queue, handles)
        await self.broker.shares.durable()
        return _batch_result(entries, errors)

    def _delete(self, queue: SqsQueue, handles: Sequence[str]) -> list[SqsError | None]:
        """Delete what each handle names (see the module docstring); one error or None
        per handle."""
        shares = self.broker.shares
        now = self.now()
        errors: list[SqsError | None] = []
        named: list[tuple[int, int]] = []  # (offset, delivery count) of the valid handles
        for handle in handles:
            try:
                topic_id, offset, count = _decode_handle(handle)
            except SqsError as error:
                errors.append(error)
                continue
            if topic_id != queue.topic_id.bytes:
                errors.append(_invalid_handle(handle))
                continue
            errors.append(None)
            named.append((offset, count))
        states = shares.record_states(queue.group_id, queue.topic_id, 0, [o for o, _ in named])
        accept: set[int] = set()
        drop: set[int] = set()
        for (offset, count), run in zip(named, states, strict=True):
            if run is None or run.delivery_count != count:
                continue  # settled already, or received again since: nothing to do
            if run.state is RecordState.ACQUIRED:
                accept.add(offset)
            elif run.state is RecordState.AVAILABLE:
                drop.add(offset)
        if accept:
            batches = [(first, last, AckType.ACCEPT) for first, last in _runs_of(sorted(accept))]
            outcome = shares.acknowledge(queue.group_id, MEMBER, queue.topic_id, 0, batches, now)
            if outcome.message is not None and outcome.code != 0:
                log.warning("SQS queue %r: delete: %s", queue.name, outcome.message)
        if drop:
            shares.purge(queue.group_id, queue.topic_id, 0, now, offsets=sorted(drop))
        return errors

    async def change_message_visibility(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        queue = self._queue(params)
        handle = _required_str(params, "ReceiptHandle")
        if params.get("VisibilityTimeout") is None:
            raise SqsError(
                Fault.MISSING_PARAMETER,
                "The request must contain the parameter VisibilityTimeout.",
            )
        seconds = _integer(params["VisibilityTimeout"], "VisibilityTimeout", 0, VISIBILITY_MAX_S)
        error = self._change(queue, [(handle, seconds)])[0]
        if error is not None:
            raise error
        return {}

    async def change_message_visibility_batch(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        queue = self._queue(params)
        entries = _batch_entries(params, "ChangeMessageVisibilityBatchRequestEntry")
        errors: list[SqsError | None] = []
        for entry in entries:
            try:
                seconds = _integer(
                    entry.get("VisibilityTimeout", 0), "VisibilityTimeout", 0, VISIBILITY_MAX_S
                )
                handle = str(entry.get("ReceiptHandle", ""))
            except SqsError as error:
                errors.append(error)
                continue
            errors.append(self._change(queue, [(handle, seconds)])[0])
        return _batch_result(entries, errors)

    def _change(self, queue: SqsQueue, changes: Sequence[tuple[str, int]]) -> list[SqsError | None]:
        shares = self.broker.shares
        errors: list[SqsError | None] = []
        for handle, seconds in changes:
            try:
                topic_id, offset, count = _decode_handle(handle)
            except SqsError as error:
                errors.append(error)
                continue
            if topic_id != queue.topic_id.bytes:
                errors.append(_invalid_handle(handle))
                continue
            run = shares.record_state(queue.group_id, queue.topic_id, 0, offset)
            if run is None or run.state is not RecordState.ACQUIRED or run.delivery_count != count:
                errors.append(
                    SqsError(Fault.MESSAGE_NOT_INFLIGHT, "The message referred to isn't in flight.")
                )
                continue
            missed = shares.change_lock(
                queue.group_id, MEMBER, queue.topic_id, 0, [offset], seconds * 1000, self.now()
            )
            errors.append(
                SqsError(Fault.MESSAGE_NOT_INFLIGHT, "The message referred to isn't in flight.")
                if missed
                else None
            )
        return errors

    # --- message move tasks (moves.py) ---------------------------------------------------------

    async def start_message_move_task(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        return self.moves.start(params)

    async def cancel_message_move_task(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        return self.moves.cancel(params)

    async def list_message_move_tasks(
        self, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        return self.moves.listed(params)


SEQUENCE: Final = "weirmq.sqs.sequence"
"""A FIFO message's SequenceNumber (20 digits: the send's milliseconds and a counter)."""
VISIBLE_AT: Final = "weirmq.sqs.visible.at"
"""A delayed FIFO message's due time (epoch ms; see the module docstring)."""


def _visible_at(record: Record) -> int:
    text = m.header(record, VISIBLE_AT)
    try:
        return 0 if text is None else int(text)
    except ValueError:
        return 0


ACTIONS: Final[Mapping[str, Handler]] = {
    "CreateQueue": SqsApi.create_queue,
    "GetQueueUrl": SqsApi.get_queue_url,
    "ListQueues": SqsApi.list_queues,
    "DeleteQueue": SqsApi.delete_queue,
    "PurgeQueue": SqsApi.purge_queue,
    "GetQueueAttributes": SqsApi.get_queue_attributes,
    "SetQueueAttributes": SqsApi.set_queue_attributes,
    "TagQueue": SqsApi.tag_queue,
    "UntagQueue": SqsApi.untag_queue,
    "ListQueueTags": SqsApi.list_queue_tags,
    "ListDeadLetterSourceQueues": SqsApi.list_dead_letter_source_queues,
    "AddPermission": SqsApi.add_permission,
    "RemovePermission": SqsApi.remove_permission,
    "SendMessage": SqsApi.send_message,
    "SendMessageBatch": SqsApi.send_message_batch,
    "ReceiveMessage": SqsApi.receive_message,
    "DeleteMessage": SqsApi.delete_message,
    "DeleteMessageBatch": SqsApi.delete_message_batch,
    "ChangeMessageVisibility": SqsApi.change_message_visibility,
    "ChangeMessageVisibilityBatch": SqsApi.change_message_visibility_batch,
    "StartMessageMoveTask": SqsApi.start_message_move_task,
    "CancelMessageMoveTask": SqsApi.cancel_message_move_task,
    "ListMessageMoveTasks": SqsApi.list_message_move_tasks,
}
"""Action name -> handler: the whole API."""


# --- parameters ------------------------------------------------------------------------------


def _required_str(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        raise SqsError(Fault.MISSING_PARAMETER, f"The request must contain the parameter {name}.")
    if not isinstance(value, str):
        raise _invalid_value(name, value)
    return value


def _invalid_value(name: str, value: object, reason: str = "") -> SqsError:
    why = f" Reason: {reason}" if reason else ""
    return SqsError(
        Fault.INVALID_PARAMETER_VALUE, f"Value {value} for parameter {name} is invalid.{why}"
    )


def _integer(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise _invalid_value(name, value)
    try:
        number = int(str(value))
    except ValueError:
        raise _invalid_value(name, value) from None
    if not low <= number <= high:
        raise _invalid_value(name, value, f"Must be between {low} and {high}, if provided.")
    return number


def _optional_int(params: Mapping[str, Any], name: str, low: int, high: int, default: int) -> int:
    value = params.get(name)
    return default if value is None else _integer(value, name, low, high)


def _string_list(params: Mapping[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid_value(name, value)
    return value


def _string_map(params: Mapping[str, Any], name: str) -> dict[str, str]:
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid_value(name, value)
    return {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}


def _loose_attributes(raw: object) -> dict[str, dict[str, str]]:
    """Attributes for sizing a batch before each entry is checked (bad ones count 0)."""
    try:
        return m.check_attributes(raw)
    except SqsError:
        return {}


def _trace_header(raw: object) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - {"AWSTraceHeader"}:
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            "Message system attribute name is invalid: only AWSTraceHeader is supported.",
        )
    value = raw.get("AWSTraceHeader")
    if value is None:
        return None
    text = value.get("StringValue") if isinstance(value, Mapping) else None
    if not isinstance(text, str) or not text or value.get("DataType") != "String":
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            "The message system attribute AWSTraceHeader must be a non-empty String.",
        )
    return text


def _batch_entries(params: Mapping[str, Any], label: str) -> list[dict[str, Any]]:
    entries = params.get("Entries")
    if not entries:
        raise SqsError(Fault.EMPTY_BATCH, f"There should be at least one {label} in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise _invalid_value("Entries", entries)
    if len(entries) > BATCH_ENTRIES_MAX:
        raise SqsError(
            Fault.TOO_MANY_ENTRIES,
            f"Maximum number of entries per request are {BATCH_ENTRIES_MAX}. "
            f"You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or _BATCH_ID.fullmatch(entry_id) is None:
            raise SqsError(
                Fault.INVALID_BATCH_ENTRY_ID,
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SqsError(Fault.BATCH_IDS_NOT_DISTINCT, f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


def _failure(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.fault.sender,
        "Code": error.fault.legacy_code,
        "Message": error.message,
    }


def _batch_result(
    entries: Sequence[Mapping[str, Any]], errors: Sequence[SqsError | None]
) -> dict[str, Any]:
    successful = [{"Id": e["Id"]} for e, err in zip(entries, errors, strict=True) if err is None]
    failed = [
        _failure(str(e["Id"]), err)
        for e, err in zip(entries, errors, strict=True)
        if err is not None
    ]
    return {"Successful": successful, "Failed": failed}


def _page(
    items: list[str], params: Mapping[str, Any], key: str, *, always: bool = False
) -> dict[str, Any]:
    """A list answer, paginated as SQS paginates when MaxResults is given."""
    limit = params.get("MaxResults")
    token = params.get("NextToken")
    start = 0
    if token:
        try:
            start = int(base64.urlsafe_b64decode(str(token).encode()).decode())
        except (ValueError, binascii.Error):
            start = -1
        if start < 0:
            raise _invalid_value("NextToken", token)
    if limit is None:
        page = items[start : start + LIST_RESULTS_MAX]
        result: dict[str, Any] = {key: page} if page or always else {}
        return result
    size = _integer(limit, "MaxResults", 1, LIST_RESULTS_MAX)
    page = items[start : start + size]
    result = {key: page} if page or always else {}
    if start + size < len(items):
        result["NextToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return result


def _decode_handle(handle: str) -> tuple[bytes, int, int]:
    """(topic id's bytes, offset, delivery count) of a receipt handle."""
    try:
        raw = base64.urlsafe_b64decode(handle.encode())
        version, topic, offset, count, _nonce = _HANDLE.unpack(raw)
    except (ValueError, binascii.Error, struct.error):
        raise _invalid_handle(handle) from None
    if version != _HANDLE_VERSION:
        raise _invalid_handle(handle)
    return topic, offset, count


def _text_bytes(value: object) -> int:
    """A body's UTF-8 size, without encoding an ASCII one (`isascii` is a flag lookup)."""
    if not isinstance(value, str):
        return 0
    return len(value) if value.isascii() else len(value.encode())


_ID_BASE: Final = int.from_bytes(os.urandom(16), "big")
_ids = itertools.count()


def _new_message_id() -> str:
    """A version-4 UUID, unique in this process (a random base plus a counter) and across
    restarts (a new base): `uuid.uuid4` costs a system call per message."""
    return str(uuid.UUID(int=(_ID_BASE + next(_ids)) % (1 << 128), version=4))


def _runs_of(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending offsets as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset - 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _no_permissions(action: str) -> SqsError:
    return SqsError(
        Fault.UNSUPPORTED_OPERATION,
        f"{action} is not supported: WeirMQ's SQS API does not enforce queue policies.",
    )


def _invalid_handle(handle: str) -> SqsError:
    return SqsError(
        Fault.RECEIPT_HANDLE_IS_INVALID,
        f'The input receipt handle "{handle}" is not a valid receipt handle.',
    )
