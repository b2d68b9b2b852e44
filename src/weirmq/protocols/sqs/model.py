"""SQS queues on WeirMQ's log: what each one is, its attributes, where it lives, how it is
created, found again after a restart, changed and deleted.

A queue is a topic, so everything sent to it is on the log, replayable and readable by
Kafka clients and Spark (the record mapping is messages.py's):

    SQS                          WeirMQ
    ---------------------------  ----------------------------------------------------------
    queue Q                      topic Q, one partition, read by the share group "sqs:Q"
                                 (the queue engine, `weirmq.queues`: locks, redelivery)
    VisibilityTimeout            the lock of each receive (the engine's per-acquire lock);
                                 ChangeMessageVisibility moves one lock's deadline
    ApproximateReceiveCount      the engine's delivery count
    RedrivePolicy                the engine's delivery limit (maxReceiveCount), its dead
                                 letters copied to the target queue's topic
    MessageRetentionPeriod       the topic's retention.ms
    DelaySeconds                 the broker's delayed delivery (topic config
                                 weirmq.delay.enable=true, header weirmq.delay.ms)
    attributes, tags             the topic config weirmq.sqs.queue (JSON), with the
                                 creation and modification times

Topic names. SQS names (letters, digits, `-`, `_`, at most 80, `.fifo` for FIFO queues)
are all legal Kafka names, so a queue's topic has its name, unless a topic of that name
exists already and is not this queue (a Kafka user's topic, an AMQP queue): then it is
`<name>.sqs`, or failing that `sqs.<name>.<hash>`. `load` builds the registry from the
configs, so a lookup never re-derives a name. A topic deleted through Kafka takes its
queue with it (found out on the next lookup).

The engine's window (`WINDOW_RECORDS`, its largest) bounds what is in flight: SQS allows
120,000 messages in flight per standard queue; here a queue delivers no message more than
10,000 past its oldest unsettled one until that one is deleted or comes back. Messages
sent before a queue's oldest in-flight message are not affected.

What SQS does that WeirMQ does not: it waits 60 seconds before a deleted queue's name
may be used again (QueueDeletedRecently) and allows one PurgeQueue per 60 seconds
(PurgeQueueInProgress); local tools do neither and test suites rely on that, so WeirMQ
does neither. `Policy`, the KMS attributes and `SqsManagedSseEnabled` are kept and
returned, not enforced: the log is not encrypted at rest.

Sans I/O apart from the broker's own synchronous calls (creating a topic fsyncs
topics.json).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ...broker.configs import DELAY_ENABLE, SQS_QUEUE
from ...broker.partition import Durability
from ...broker.shares import DeadLetter, ShareConfig
from ...errors import KafkaError
from ...records.batch import Record, encode_batch
from .errors import Fault, SqsError
from .messages import moved_headers

if TYPE_CHECKING:
    from ...broker.core import Broker

log = logging.getLogger(__name__)

GROUP_PREFIX: Final = "sqs:"
MEMBER: Final = "sqs"
"""The one member every receive acquires for: SQS has no consumers, only receipt handles,
and any handle of a message in flight may delete it."""
NAME_CHARS_MAX: Final = 80
FIFO_SUFFIX: Final = ".fifo"
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_LEGAL_TOPIC: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
WINDOW_RECORDS: Final = 10_000
"""The queue engine's in-flight window (its largest); see the module docstring."""
DELIVERY_LIMIT_NONE: Final = 2**31 - 1
"""The engine's delivery limit of a queue without a RedrivePolicy: SQS redelivers a
message until its retention ends."""
MAX_RECEIVE_COUNT_MAX: Final = 1000
TAGS_MAX: Final = 50
TAG_KEY_CHARS_MAX: Final = 128
TAG_VALUE_CHARS_MAX: Final = 256
DEDUP_WINDOW_MS: Final = 300_000
"""FIFO deduplication and ReceiveRequestAttemptId: five minutes, as SQS."""
DEDUP_IDS_MAX: Final = 100_000
"""Deduplication ids one FIFO queue remembers at once (the last five minutes of sends, at
SQS's high-throughput FIFO rate of about 300 a second); past it, sends are throttled until
the oldest expire, rather than deduplicated by a forgotten window."""
TOPIC_BATCH_BYTES_MAX: Final = 2 * 1_048_576 + 65_536
"""A queue topic's max.message.bytes: a send's batch holds at most 1 MiB of bodies and
attributes (SQS's bound on a message, and on a batch's together), and its record headers
carry the attributes twice (as sent, and as plain headers for Kafka readers)."""
ATTEMPTS_MAX: Final = 1_000
"""ReceiveRequestAttemptIds one FIFO queue remembers (the oldest go first)."""

# name: (default, low, high) of the integer attributes
INTEGER_ATTRIBUTES: Final[Mapping[str, tuple[int, int, int]]] = {
    "DelaySeconds": (0, 0, 900),
    "MaximumMessageSize": (1_048_576, 1024, 1_048_576),
    "MessageRetentionPeriod": (345_600, 60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 0, 20),
    "VisibilityTimeout": (30, 0, 43_200),
    "KmsDataKeyReusePeriodSeconds": (300, 60, 86_400),
}
FIFO_ATTRIBUTES: Final = frozenset(
    {"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"}
)
CHOICE_ATTRIBUTES: Final[Mapping[str, tuple[str, ...]]] = {
    "SqsManagedSseEnabled": ("false", "true"),
    "ContentBasedDeduplication": ("false", "true"),
    "DeduplicationScope": ("queue", "messageGroup"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
    "FifoQueue": ("false", "true"),
}
"""The first choice is the default."""
TEXT_ATTRIBUTES: Final = frozenset(
    {"Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId"}
)
SETTABLE: Final = frozenset(
    {*INTEGER_ATTRIBUTES, *CHOICE_ATTRIBUTES, *TEXT_ATTRIBUTES} - {"FifoQueue"}
)
COMPUTED: Final = (
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
)
KNOWN: Final = frozenset({*SETTABLE, "FifoQueue", *COMPUTED})
STANDARD_SHOWN: Final = (
    "VisibilityTimeout",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds",
    "SqsManagedSseEnabled",
)
"""What GetQueueAttributes(All) shows of a standard queue besides `COMPUTED` and what was
set; a FIFO queue shows the FIFO attributes too."""


@dataclass(slots=True)
class FifoState:
    """A FIFO queue's memory (not persisted; see `SqsModel.rebuild_fifo`)."""

    dedup: OrderedDict[str, tuple[int, str, int]] = field(default_factory=OrderedDict)
    """Deduplication id -> (expiry ms, MessageId, offset), oldest first."""
    attempts: OrderedDict[str, tuple[int, list[dict[str, Any]]]] = field(
        default_factory=OrderedDict
    )
    """ReceiveRequestAttemptId -> (expiry ms, the messages it received)."""
    groups: dict[int, str] = field(default_factory=dict)
    """MessageGroupId of each offset handed out and maybe still in flight."""
    next_due: int | None = None
    """When the earliest delayed message the last receive skipped is due (ms)."""

    def expire(self, now_ms: int) -> None:
        while self.dedup and next(iter(self.dedup.values()))[0] <= now_ms:
            self.dedup.popitem(last=False)
        while self.attempts and next(iter(self.attempts.values()))[0] <= now_ms:
            self.attempts.popitem(last=False)


@dataclass(slots=True)
class SqsQueue:
    """One queue: its name, its topic, its attributes and tags; and what the broker keeps
    in memory about it (first receive times, delayed counts, FIFO's books)."""

    name: str
    topic: str
    topic_id: uuid.UUID
    attributes: dict[str, str]
    """What was set (defaults are not stored), as SQS strings."""
    tags: dict[str, str]
    created_s: int
    modified_s: int
    first_receive: dict[int, int] = field(default_factory=dict)
    """Offset -> when it was first received (ms), for messages in the engine's window."""
    delayed: dict[int, int] = field(default_factory=dict)
    """Due second -> messages sent with a delay, not yet due (counted since the start)."""
    fifo_state: FifoState | None = None

    @property
    def group_id(self) -> str:
        return GROUP_PREFIX + self.topic

    @property
    def fifo(self) -> bool:
        return self.attributes.get("FifoQueue") == "true"

    def get(self, name: str) -> str:
        """A settable attribute's value, set or default."""
        found = self.attributes.get(name)
        if found is not None:
            return found
        if name in INTEGER_ATTRIBUTES:
            return str(INTEGER_ATTRIBUTES[name][0])
        if name in CHOICE_ATTRIBUTES:
            return CHOICE_ATTRIBUTES[name][0]
        return ""

    def integer(self, name: str) -> int:
        return int(self.get(name))

    @property
    def redrive(self) -> tuple[str, int] | None:
        """(dead-letter target ARN, maxReceiveCount), when the queue has a RedrivePolicy."""
        raw = self.attributes.get("RedrivePolicy")
        if not raw:
            return None
        policy = json.loads(raw)
        return str(policy["deadLetterTargetArn"]), int(policy["maxReceiveCount"])

    def share_config(self) -> ShareConfig:
        redrive = self.redrive
        return ShareConfig(
            record_lock_duration_ms=max(1, self.integer("VisibilityTimeout") * 1000),
            delivery_count_limit=DELIVERY_LIMIT_NONE if redrive is None else redrive[1],
            max_record_locks=WINDOW_RECORDS,
            auto_offset_reset="earliest",
            retry_backoff_ms=0,
        )

    def document(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "attributes": self.attributes,
                "tags": self.tags,
                "created": self.created_s,
                "modified": self.modified_s,
            },
            sort_keys=True,
        )

    def topic_configs(self) -> dict[str, str]:
        return {
            SQS_QUEUE: self.document(),
            "retention.ms": str(self.integer("MessageRetentionPeriod") * 1000),
            "retention.bytes": "-1",
            "max.message.bytes": str(TOPIC_BATCH_BYTES_MAX),
            DELAY_ENABLE: "true",
        }

    def forget_first_receives(self, below: int) -> None:
        for offset in [o for o in self.first_receive if o < below]:
            del self.first_receive[offset]

    def count_delayed(self, now_ms: int) -> int:
        now_s = now_ms // 1000
        for due in [due for due in self.delayed if due <= now_s]:
            del self.delayed[due]
        return sum(self.delayed.values())

    def note_delayed(self, now_ms: int, delay_s: int, count: int = 1) -> None:
        due = now_ms // 1000 + delay_s
        self.delayed[due] = self.delayed.get(due, 0) + count


class SqsModel:
    """The registry of one broker's SQS queues; see the module docstring."""

    def __init__(self, broker: Broker, *, region: str, account_id: str) -> None:
        self._broker = broker
        self.region = region
        self.account_id = account_id
        self._queues: dict[str, SqsQueue] = {}
        self.load()

    # --- the registry ----------------------------------------------------------------------

    def load(self) -> None:
        """Find the SQS queues in the topics' configs."""
        for topic in list(self._broker.topics):
            raw = topic.configs.get(SQS_QUEUE, "")
            if not raw:
                continue
            try:
                doc = json.loads(raw)
                queue = SqsQueue(
                    str(doc["name"]),
                    topic.name,
                    topic.topic_id,
                    {str(k): str(v) for k, v in dict(doc.get("attributes") or {}).items()},
                    {str(k): str(v) for k, v in dict(doc.get("tags") or {}).items()},
                    int(doc.get("created", 0)),
                    int(doc.get("modified", 0)),
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("topic %r: its SQS queue record is unreadable: %s", topic.name, exc)
                continue
            self._remember(queue)

    def _remember(self, queue: SqsQueue) -> None:
        self._queues[queue.name] = queue
        if queue.fifo and queue.fifo_state is None:
            queue.fifo_state = FifoState()
        shares = self._broker.shares
        shares.set_queue_config(queue.group_id, queue.share_config())
        shares.set_dead_letter_handler(
            queue.group_id, lambda pairs: self._dead_letter(queue, pairs)
        )

    def _forget(self, queue: SqsQueue) -> None:
        if self._queues.get(queue.name) is queue:
            del self._queues[queue.name]
        self._broker.shares.set_queue_config(queue.group_id, None)
        self._broker.shares.set_dead_letter_handler(queue.group_id, None)

    def get(self, name: str) -> SqsQueue | None:
        queue = self._queues.get(name)
        if queue is None:
            return None
        topic = self._broker.topics.get(queue.topic)
        if topic is None or topic.topic_id != queue.topic_id:
            self._forget(queue)  # its topic was deleted through Kafka
            return None
        return queue

    def queues(self) -> Iterator[SqsQueue]:
        for name in sorted(self._queues):
            queue = self.get(name)
            if queue is not None:
                yield queue

    def required(self, name: str) -> SqsQueue:
        queue = self.get(name)
        if queue is None:
            raise SqsError(Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")
        return queue

    # --- names, URLs, ARNs -------------------------------------------------------------------

    def arn(self, queue: SqsQueue | str) -> str:
        name = queue if isinstance(queue, str) else queue.name
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def url(self, queue: SqsQueue, base: str) -> str:
        """The queue's URL at `base` (scheme and host the client reached)."""
        return f"{base}/{self.account_id}/{queue.name}"

    def name_of_url(self, url: object) -> str:
        """The queue name in a QueueUrl (any host: clients reach the broker by many
        names); the account must be this broker's."""
        if not isinstance(url, str) or not url:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter QueueUrl."
            )
        path = url.split("://", 1)[-1]
        parts = [part for part in path.split("?", 1)[0].split("/")[1:] if part]
        if len(parts) == 2 and parts[0] == self.account_id:
            return parts[1]
        if len(parts) == 1:  # `/name`, as some local tools allow
            return parts[0]
        raise SqsError(Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")

    def name_of_arn(self, arn: object, parameter: str) -> str:
        if isinstance(arn, str):
            parts = arn.split(":")
            ours = parts[:3] == ["arn", "aws", "sqs"] and parts[4:5] == [self.account_id]
            if len(parts) == 6 and ours and parts[5]:
                return parts[5]
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"Value {arn} for parameter {parameter} is invalid. Reason: not the ARN of "
            "a queue of this broker.",
        )

    # --- creating, changing, deleting --------------------------------------------------------

    def create(
        self, name: object, attributes: Mapping[str, str], tags: Mapping[str, str], now_ms: int
    ) -> SqsQueue:
        """The queue `name`, created now with these attributes, or the existing one when
        the attributes given equal its own (else QueueNameExists)."""
        if not isinstance(name, str) or not name:
            raise SqsError(
                Fault.MISSING_PARAMETER, "The request must contain the parameter QueueName."
            )
        fifo_name = name.endswith(FIFO_SUFFIX)
        stem = name[: -len(FIFO_SUFFIX)] if fifo_name else name
        if _NAME.fullmatch(stem) is None or len(name) > NAME_CHARS_MAX:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                "Can only include alphanumeric characters, hyphens, or underscores. "
                "1 to 80 in length",
            )
        fifo = attributes.get("FifoQueue", "false") == "true"
        if fifo != fifo_name:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                "or underscores, must end with .fifo suffix and be 1 to 80 in length."
                if fifo
                else "Can only include alphanumeric characters, hyphens, or underscores. "
                "1 to 80 in length",
            )
        checked = self.check_attributes(attributes, fifo=fifo, creating=True)
        found = self.get(name)
        if found is not None:
            for key, value in checked.items():
                if found.get(key) != value:
                    raise SqsError(
                        Fault.QUEUE_NAME_EXISTS,
                        f"A queue already exists with the same name and a different value "
                        f"for attribute {key}",
                    )
            return found
        _check_tags(tags)
        now_s = now_ms // 1000
        queue = SqsQueue(
            name, self._free_topic(name), uuid.UUID(int=0), checked, dict(tags), now_s, now_s
        )
        self._check_redrive(queue, checked)
        try:
            topic = self._broker.create_topic(queue.topic, 1, queue.topic_configs())
        except KafkaError as exc:
            raise SqsError(Fault.INTERNAL, f"The queue's topic was not created: {exc}") from None
        queue.topic_id = topic.topic_id
        self._remember(queue)
        return queue

    def set_attributes(self, queue: SqsQueue, attributes: Mapping[str, str], now_ms: int) -> None:
        checked = self.check_attributes(attributes, fifo=queue.fifo, creating=False)
        self._check_redrive(queue, checked)
        updated = dict(queue.attributes)
        for key, value in checked.items():
            if value == "" and key in TEXT_ATTRIBUTES:
                updated.pop(key, None)  # an empty policy removes it, as SQS does
            else:
                updated[key] = value
        self._store(queue, updated, queue.tags, now_ms)

    def tag(self, queue: SqsQueue, tags: Mapping[str, str]) -> None:
        _check_tags(tags)
        merged = {**queue.tags, **tags}
        if len(merged) > TAGS_MAX:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE, f"Too many tags added for queue {queue.name}."
            )
        self._store(queue, queue.attributes, merged, None)

    def untag(self, queue: SqsQueue, keys: Sequence[str]) -> None:
        self._store(
            queue, queue.attributes, {k: v for k, v in queue.tags.items() if k not in keys}, None
        )

    def _store(
        self,
        queue: SqsQueue,
        attributes: dict[str, str],
        tags: dict[str, str],
        now_ms: int | None,
    ) -> None:
        changed = SqsQueue(
            queue.name,
            queue.topic,
            queue.topic_id,
            attributes,
            tags,
            queue.created_s,
            queue.modified_s if now_ms is None else now_ms // 1000,
        )
        try:
            self._broker.alter_topic_configs(queue.topic, changed.topic_configs())
        except KafkaError as exc:
            raise SqsError(Fault.INTERNAL, f"The queue was not changed: {exc}") from None
        queue.attributes, queue.tags, queue.modified_s = attributes, tags, changed.modified_s
        self._broker.shares.set_queue_config(queue.group_id, queue.share_config())

    def delete(self, queue: SqsQueue) -> None:
        try:
            self._broker.delete_topic(queue.topic)
        except KafkaError as exc:
            if self._broker.topics.get(queue.topic) is not None:
                raise SqsError(Fault.INTERNAL, f"The queue was not deleted: {exc}") from None
        self._forget(queue)

    def check_attributes(
        self, attributes: Mapping[str, str], *, fifo: bool, creating: bool
    ) -> dict[str, str]:
        """Queue attributes as SQS checks them; returns them normalized."""
        checked: dict[str, str] = {}
        for key, value in attributes.items():
            if not isinstance(value, str):
                value = str(value)
            if key == "FifoQueue":
                if not creating:
                    raise SqsError(
                        Fault.INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {key}."
                    )  # only at creation
                value = value.lower()
                if value not in ("true", "false"):
                    raise _invalid_attribute(key, value)
                if value == "true":
                    checked[key] = value
                continue
            if key not in SETTABLE:
                raise SqsError(Fault.INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {key}.")
            if key in FIFO_ATTRIBUTES and not fifo:
                raise SqsError(Fault.INVALID_ATTRIBUTE_NAME, f"Unknown Attribute {key}.")
            if key in INTEGER_ATTRIBUTES:
                _, low, high = INTEGER_ATTRIBUTES[key]
                try:
                    number = int(value)
                except ValueError:
                    raise _invalid_attribute(key, value) from None
                if not low <= number <= high:
                    raise _invalid_attribute(key, value)
                checked[key] = str(number)
            elif key in CHOICE_ATTRIBUTES:
                choices = CHOICE_ATTRIBUTES[key]
                match = next((c for c in choices if c.lower() == value.lower()), None)
                if match is None:
                    raise _invalid_attribute(key, value)
                checked[key] = match
            elif key == "RedrivePolicy":
                checked[key] = self._redrive_policy(value)
            elif key == "RedriveAllowPolicy":
                checked[key] = _redrive_allow_policy(value)
            elif key == "Policy":
                if value:
                    try:
                        json.loads(value)
                    except ValueError:
                        raise _invalid_attribute(key, value) from None
                checked[key] = value
            else:
                checked[key] = value
        return checked

    def _redrive_policy(self, value: str) -> str:
        if value == "":
            return ""
        try:
            policy = json.loads(value)
            target = policy["deadLetterTargetArn"]
            count = int(policy["maxReceiveCount"])
        except (ValueError, KeyError, TypeError):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                "Value "
                + value
                + " for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a "
                "dictionary or is missing deadLetterTargetArn and maxReceiveCount.",
            ) from None
        if not 1 <= count <= MAX_RECEIVE_COUNT_MAX:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Value {value} for parameter RedrivePolicy is invalid. Reason: Invalid value "
                f"for maxReceiveCount: {count}, valid values are from 1 to "
                f"{MAX_RECEIVE_COUNT_MAX} both inclusive.",
            )
        self.name_of_arn(target, "RedrivePolicy")
        return json.dumps(
            {"deadLetterTargetArn": target, "maxReceiveCount": count}, separators=(",", ":")
        )

    def _check_redrive(self, queue: SqsQueue, checked: Mapping[str, str]) -> None:
        """The dead-letter target exists, is of the same kind, and allows this source."""
        raw = checked.get("RedrivePolicy")
        if not raw:
            return
        target_arn = json.loads(raw)["deadLetterTargetArn"]
        target = self.get(self.name_of_arn(target_arn, "RedrivePolicy"))
        if target is None:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Value {raw} for parameter RedrivePolicy is invalid. Reason: Dead-letter "
                f"target does not exist.",
            )
        if target.fifo != (checked.get("FifoQueue") == "true" or queue.fifo):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Value {raw} for parameter RedrivePolicy is invalid. Reason: Dead-letter "
                "target must be of the same type (standard or FIFO) as the source.",
            )
        allow = target.attributes.get("RedriveAllowPolicy")
        if allow:
            policy = json.loads(allow)
            permission = policy.get("redrivePermission")
            allowed = permission == "allowAll" or (
                permission == "byQueue" and self.arn(queue) in policy.get("sourceQueueArns", [])
            )
            if not allowed:
                raise SqsError(
                    Fault.INVALID_PARAMETER_VALUE,
                    f"Value {raw} for parameter RedrivePolicy is invalid. Reason: Queue "
                    f"{self.arn(queue)} is not allowed to use {target_arn} as its dead-letter "
                    "queue (its RedriveAllowPolicy).",
                )

    def dead_letter_sources(self, queue: SqsQueue) -> list[SqsQueue]:
        arn = self.arn(queue)
        return [q for q in self.queues() if q.redrive is not None and q.redrive[0] == arn]

    # --- dead letters, trimming ---------------------------------------------------------------

    def _dead_letter(
        self, queue: SqsQueue, pairs: Sequence[tuple[DeadLetter, Record | None]]
    ) -> None:
        """Copy a queue's dead letters (messages received maxReceiveCount times) to its
        dead-letter queue, as they were sent (MessageId, attributes, timestamp), with the
        source's ARN for a redrive back."""
        redrive = queue.redrive
        records = [record for _letter, record in pairs if record is not None]
        if redrive is None or not records:
            return
        target = self.get(self.name_of_arn(redrive[0], "RedrivePolicy"))
        partition = None if target is None else self._broker.partition(target.topic, 0)
        if target is None or partition is None:
            log.warning(
                "SQS queue %r: %d messages reached maxReceiveCount but the dead-letter queue "
                "%s does not exist; they are dropped, as SQS drops them",
                queue.name, len(records), redrive[0],
            )  # fmt: skip
            return
        source = self.arn(queue)
        copies = [Record(r.value, r.key, moved_headers(r, source), r.timestamp_ms) for r in records]
        try:
            partition.publish(encode_batch(copies), Durability.FSYNCED)
        except KafkaError as exc:
            log.error(
                "SQS queue %r: %d dead letters not copied to %r: %s",
                queue.name, len(copies), target.name, exc,
            )  # fmt: skip

    def trim(self) -> None:
        """Move each queue's log start up to its oldest unsettled message, so that segments
        of deleted messages go (a queue forgets what was deleted, as SQS does), and forget
        the first-receive times below it."""
        broker = self._broker
        for queue in list(self.queues()):
            partition = broker.partition(queue.topic, 0)
            start = broker.shares.queue_start(queue.group_id, queue.topic_id, 0)
            if partition is None or start is None:
                continue
            queue.forget_first_receives(start)
            if queue.fifo:  # its deduplication book is rebuilt from the last five minutes
                recent = partition.log.offset_for_timestamp(broker.clock() - DEDUP_WINDOW_MS)
                start = min(start, partition.high_watermark if recent is None else recent.offset)
            if start > partition.log_start_offset:
                try:
                    broker.delete_records(queue.topic, 0, start)
                except KafkaError as exc:
                    log.warning("SQS queue %r not trimmed: %s", queue.name, exc)

    def _free_topic(self, name: str) -> str:
        topics = self._broker.topics
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        for candidate in (name, f"{name}.sqs", f"sqs.{name}.{digest}"):
            free = topics.get(candidate) is None and topics.pending(candidate) is None
            if _LEGAL_TOPIC.fullmatch(candidate) and free and not candidate.startswith("__"):
                return candidate
        raise SqsError(Fault.INTERNAL, f"No topic name is free for queue {name}.")


def _invalid_attribute(key: str, value: str) -> SqsError:
    return SqsError(Fault.INVALID_ATTRIBUTE_VALUE, f"Invalid value for the parameter {key}.")


def _redrive_allow_policy(value: str) -> str:
    if value == "":
        return ""
    try:
        policy = json.loads(value)
        permission = policy["redrivePermission"]
    except (ValueError, KeyError, TypeError):
        raise _invalid_attribute("RedriveAllowPolicy", value) from None
    if permission not in ("allowAll", "denyAll", "byQueue"):
        raise _invalid_attribute("RedriveAllowPolicy", value)
    sources = policy.get("sourceQueueArns")
    if permission == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= 10:
            raise _invalid_attribute("RedriveAllowPolicy", value)
    elif sources:
        raise _invalid_attribute("RedriveAllowPolicy", value)
    out: dict[str, Any] = {"redrivePermission": permission}
    if permission == "byQueue":
        out["sourceQueueArns"] = [str(arn) for arn in sources]
    return json.dumps(out, separators=(",", ":"))


def _check_tags(tags: Mapping[str, str]) -> None:
    if len(tags) > TAGS_MAX:
        raise SqsError(Fault.INVALID_PARAMETER_VALUE, "Too many tags added for queue.")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= TAG_KEY_CHARS_MAX:
            raise SqsError(Fault.INVALID_PARAMETER_VALUE, f"Tag key {key!r} is invalid.")
        if not isinstance(value, str) or len(value) > TAG_VALUE_CHARS_MAX:
            raise SqsError(Fault.INVALID_PARAMETER_VALUE, f"Tag value for {key!r} is invalid.")
