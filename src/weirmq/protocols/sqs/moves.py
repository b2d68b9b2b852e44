"""Dead-letter queue redrive: StartMessageMoveTask, ListMessageMoveTasks,
CancelMessageMoveTask.

A task moves the messages of a dead-letter queue (a queue some queue's RedrivePolicy names)
to a destination queue, or, without one, each back to the queue it was dead-lettered from
(its record's weirmq.sqs.source header). It runs on the loop: it takes up to
`MOVE_BATCH` messages from the dead-letter queue as its own member of the queue engine
(locked while they move, so a crash midway leaves them there to move again), appends them
to their destinations as they were sent (MessageId, attributes, timestamp), waits for that
fsync, then deletes them from the dead-letter queue and waits for that fsync: a message is
never lost, and at worst (a crash between the two) moved twice. It stops when it has moved
as many messages as the queue held when it started (ApproximateNumberOfMessagesToMove), or
the queue is empty, or it is cancelled; MaxNumberOfMessagesPerSecond paces it.

At most one task runs per source queue, as SQS allows. Tasks are memory: a broker restart
ends a running task (its messages not yet moved stay in the dead-letter queue, where a new
task finds them), and the list keeps the last `TASKS_KEPT` per source.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ...broker.partition import Durability, Partition
from ...broker.shares import AckType
from ...errors import KafkaError
from ...records.batch import Record, encode_batch
from . import messages as m
from .errors import Fault, SqsError
from .model import SqsModel, SqsQueue

if TYPE_CHECKING:
    from ...broker.core import Broker

log = logging.getLogger(__name__)

MOVE_BATCH: Final = 10
MOVE_LOCK_MS: Final = 60_000
RATE_MAX: Final = 500
"""SQS's bound on MaxNumberOfMessagesPerSecond."""
TASKS_KEPT: Final = 10
"""Tasks remembered per source queue (ListMessageMoveTasks returns at most 10)."""
IDLE_PAUSE_S: Final = 0.05


@dataclass(slots=True)
class MoveTask:
    task_id: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    started_ms: int
    to_move: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str | None = None
    runner: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def handle(self) -> str:
        document = json.dumps({"taskId": self.task_id, "sourceArn": self.source_arn})
        return base64.b64encode(document.encode()).decode()

    def describe(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.status == "RUNNING":
            found["TaskHandle"] = self.handle
        if self.destination_arn is not None:
            found["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            found["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure is not None:
            found["FailureReason"] = self.failure
        return found


class MoveTasks:
    """Every message move task of one broker; see the module docstring."""

    def __init__(self, broker: Broker, model: SqsModel) -> None:
        self._broker = broker
        self._model = model
        self._tasks: dict[str, deque[MoveTask]] = {}

    def start(self, params: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = params.get("SourceArn")
        if not source_arn:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter SourceArn."
            )
        source = self._model.get(self._model.name_of_arn(source_arn, "SourceArn"))
        if source is None:
            raise SqsError(Fault.RESOURCE_NOT_FOUND, "The resource that you specified for the "
                           "SourceArn parameter doesn't exist.")  # fmt: skip
        if not self._model.dead_letter_sources(source):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                "Source queue must be configured as a Dead Letter Queue.",
            )
        destination_arn = params.get("DestinationArn")
        if destination_arn is not None:
            destination = self._model.get(
                self._model.name_of_arn(destination_arn, "DestinationArn")
            )
            if destination is None:
                raise SqsError(
                    Fault.RESOURCE_NOT_FOUND,
                    "The resource that you specified for the DestinationArn parameter "
                    "doesn't exist.",
                )
        rate = params.get("MaxNumberOfMessagesPerSecond")
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= RATE_MAX
        ):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Value {rate} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: "
                f"Must be between 1 and {RATE_MAX}.",
            )
        tasks = self._tasks.setdefault(source_arn, deque(maxlen=TASKS_KEPT))
        if any(task.status in ("RUNNING", "CANCELLING") for task in tasks):
            raise SqsError(
                Fault.UNSUPPORTED_OPERATION,
                "There is already a task running. Only one active task is allowed for a source "
                "queue arn at a given time.",
            )
        ready, in_flight = self._broker.shares.queue_counts(source.group_id, source.topic_id, 0)
        task = MoveTask(
            str(uuid.uuid4()),
            source_arn,
            destination_arn,
            rate,
            self._broker.clock(),
            ready + in_flight,
        )
        tasks.appendleft(task)
        task.runner = asyncio.get_running_loop().create_task(self._run(task, source))
        return {"TaskHandle": task.handle}

    def cancel(self, params: Mapping[str, Any]) -> dict[str, Any]:
        handle = params.get("TaskHandle")
        if not handle:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter TaskHandle."
            )
        task = self._find(str(handle))
        if task is None:
            raise SqsError(Fault.RESOURCE_NOT_FOUND, "Task does not exist.")
        if task.status != "RUNNING":
            raise SqsError(Fault.UNSUPPORTED_OPERATION, "Only active tasks can be cancelled.")
        task.status = "CANCELLING"
        return {"ApproximateNumberOfMessagesMoved": task.moved}

    def listed(self, params: Mapping[str, Any]) -> dict[str, Any]:
        source_arn = params.get("SourceArn")
        if not source_arn:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter SourceArn."
            )
        source = self._model.get(self._model.name_of_arn(source_arn, "SourceArn"))
        if source is None:
            raise SqsError(Fault.RESOURCE_NOT_FOUND, "The resource that you specified for the "
                           "SourceArn parameter doesn't exist.")  # fmt: skip
        limit = params.get("MaxResults", 1)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= TASKS_KEPT:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Value {limit} for parameter MaxResults is invalid. Reason: Must be between "
                f"1 and {TASKS_KEPT}.",
            )
        tasks = [*self._tasks.get(source_arn, ())][:limit]
        return {"Results": [task.describe() for task in tasks]}

    def queue_deleted(self, arn: str) -> None:
        for task in self._tasks.pop(arn, ()):
            if task.status == "RUNNING":
                task.status = "CANCELLING"

    def _find(self, handle: str) -> MoveTask | None:
        try:
            document = json.loads(base64.b64decode(handle.encode(), validate=True))
            task_id, source_arn = str(document["taskId"]), str(document["sourceArn"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None
        for task in self._tasks.get(source_arn, ()):
            if task.task_id == task_id:
                return task
        return None

    async def _run(self, task: MoveTask, source: SqsQueue) -> None:
        member = f"sqs-move:{task.task_id}"
        shares = self._broker.shares
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            while task.status == "RUNNING" and task.moved < task.to_move:
                if self._model.get(source.name) is not source:
                    raise _Failed("The source queue was deleted.")
                if task.rate is not None:
                    due = started + task.moved / task.rate
                    if due > loop.time():
                        await asyncio.sleep(due - loop.time())
                count = min(MOVE_BATCH, task.to_move - task.moved)
                if task.rate is not None:
                    count = min(count, task.rate)
                acquired = shares.acquire_one(
                    source.group_id, member, source.topic_id, 0, count, 12 << 20,
                    self._broker.clock(), MOVE_LOCK_MS,
                )  # fmt: skip
                if acquired is None:
                    ready, _ = shares.queue_counts(source.group_id, source.topic_id, 0)
                    if ready == 0:
                        break
                    await asyncio.sleep(IDLE_PAUSE_S)
                    continue
                moving = [(o, rec) for o, _c, rec, _p in acquired.messages()]
                await self._copy(task, moving)
                batches = [(o, o, AckType.ACCEPT) for o, _ in moving]
                shares.acknowledge(
                    source.group_id, member, source.topic_id, 0, batches, self._broker.clock()
                )
                await shares.durable()
                task.moved += len(moving)
            task.status = "CANCELLED" if task.status == "CANCELLING" else "COMPLETED"
        except _Failed as failure:
            task.status, task.failure = "FAILED", str(failure)
        except Exception as exc:  # a task must end in a state, whatever went wrong
            log.exception("SQS message move task %s failed", task.task_id)
            task.status, task.failure = "FAILED", f"{type(exc).__name__}: {exc}"
        finally:
            shares.release(source.group_id, member, self._broker.clock())

    async def _copy(self, task: MoveTask, moving: list[tuple[int, Record]]) -> None:
        """Append each message to its destination and wait for the fsync."""
        by_destination: dict[str, list[Record]] = {}
        for _offset, record in moving:
            arn = task.destination_arn or m.header(record, m.SOURCE)
            if arn is None:
                raise _Failed("A message has no source queue to move it back to.")
            copy = Record(
                record.value, record.key, m.moved_headers(record, None), record.timestamp_ms
            )
            by_destination.setdefault(arn, []).append(copy)
        for arn, records in by_destination.items():
            name = self._model.name_of_arn(arn, "DestinationArn")
            queue = self._model.get(name)
            partition = None if queue is None else self._broker.partition(queue.topic, 0)
            if partition is None:
                raise _Failed(f"The destination queue {arn} does not exist.")
            await _publish(partition, records)


async def _publish(partition: Partition, records: list[Record]) -> None:
    try:
        published = partition.publish(encode_batch(records), Durability.FSYNCED)
    except KafkaError as exc:
        raise _Failed(f"Messages could not be stored: {exc}") from None
    if published.durable_offset is not None:
        await (published.durable_partition or partition).durable(published.durable_offset)


class _Failed(Exception):
    """A task cannot go on; the text is its FailureReason."""
