"""Topics and cluster identity, persisted in the data directory.

    weirmq-data/
        meta.properties      cluster.id and node.id (Kafka's file and keys)
        topics.json          every topic: id, partition count, configs
        producer-id-block    the end of the producer-id block in use

`topics.json` is rewritten atomically (temp file, fsync, rename, directory fsync) before
any partition directory of a new topic is created, and every change is made in memory
only once the file holding it is saved: on a full disk the change fails with
KAFKA_STORAGE_ERROR and the registry is as it was. So after a crash a topic is either
wholly known or unknown; a partition directory with no entry (it cannot happen in that
order, but a user may copy one in) is adopted as a topic rather than ignored, because
ignoring it would hide data.

Topic names follow Kafka's rules: 1 to 249 characters of ``[a-zA-Z0-9._-]``, not ``.``
or ``..``. Topic ids are random UUIDs, as in Kafka, and never change.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import ErrorCode, KafkaError
from ..storage.checkpoint import write_atomically
from ..storage.errors import storage_error

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
PRODUCER_ID_FILE = "producer-id-block"
FORMAT_VERSION = 1
MAX_NAME_CHARS = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class UnknownTopicError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class TopicExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InternalTopicError(KafkaError):
    """A client asked to create, grow or reconfigure a topic the broker owns (Kafka answers
    INVALID_REQUEST when a client tries to create its own internal log)."""

    code = ErrorCode.invalid_request


def check_topic_name(name: str) -> None:
    """Raise `InvalidTopicError` unless `name` is a legal Kafka topic name."""
    if name in ("", ".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidTopicError(f"topic name is {len(name)} characters, at most 249 allowed")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


class TopicRegistry:
    """The topics of one data directory; see the module docstring."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._load()

    def _load(self) -> None:
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return
        document = json.loads(path.read_text())
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: unknown format version {document.get('version')!r}")
        for name, entry in document["topics"].items():
            self._remember(
                Topic(name, uuid.UUID(entry["id"]), int(entry["partitions"]), entry["configs"])
            )

    def _remember(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _forget(self, name: str) -> Topic:
        topic = self._topics.pop(name)
        del self._by_id[topic.topic_id]
        return topic

    def _save(
        self,
        change: Topic | None = None,
        *,
        without: str | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        """Write topics.json as it will be with `change` made (or `without` removed), then
        make the change in memory: a write that fails (a full disk) changes nothing here
        and raises `StorageError` (`DiskFullError`)."""
        topics = dict(self._topics)
        if change is not None:
            topics[change.name] = change
        if without is not None:
            del topics[without]
        document = {
            "version": FORMAT_VERSION,
            "topics": {
                t.name: {"id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in topics.values()
            },
        }
        try:
            write_atomically(
                self.data_dir / TOPICS_FILE,
                json.dumps(document, indent=1, sort_keys=True).encode(),
                before_rename=before_commit,
            )
        except OSError as exc:
            raise storage_error(exc, f"saving {TOPICS_FILE}") from exc
        if change is not None:
            old = self._topics.get(change.name)
            if old is not None:
                self._forget(old.name)
            self._remember(change)
        if without is not None:
            self._forget(without)

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def __len__(self) -> int:
        return len(self._topics)

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> Topic:
        """Register a new topic: persisted first, then known here (`_save`)."""
        check_topic_name(name)
        assert name not in self._topics, name
        assert partitions >= 1, partitions
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs or {}))
        self._save(topic)
        return topic

    def set_configs(self, name: str, configs: Mapping[str, str]) -> Topic:
        """Replace the topic's config overrides (persisted before this returns)."""
        topic = replace(self._topics[name], configs=dict(configs))
        self._save(topic)
        return topic

    def set_partitions(self, name: str, partitions: int) -> Topic:
        """Grow the topic to `partitions` (persisted before this returns)."""
        current = self._topics[name]
        assert partitions > current.partitions, (name, partitions)
        topic = replace(current, partitions=partitions)
        self._save(topic)
        return topic

    def shrink(self, name: str, partitions: int) -> None:
        """Undo a growth whose logs could not be made, like `forget` undoes a creation."""
        topic = replace(self._topics[name], partitions=partitions)
        try:
            self._save(topic)
        except KafkaError as exc:
            log.warning("topic %r shrunk back, but %s still says more: %s", name, TOPICS_FILE, exc)
            self._forget(name)
            self._remember(topic)

    def delete(self, name: str, before_commit: Callable[[], None] | None = None) -> Topic:
        """Forget the topic (persisted before this returns); its id is never reused.

        `before_commit` runs once the new topics.json is written but not yet in place (the
        broker deletes the partitions then): a full disk refuses the deletion before
        anything is deleted."""
        topic = self._topics[name]
        self._save(without=name, before_commit=before_commit)
        return topic

    def forget(self, name: str) -> Topic | None:
        """Undo a creation whose logs could not be made: forgotten here at once, and in
        topics.json when it can be written (on a full disk it keeps the entry, and the
        next save, or the next start, which creates the missing logs, settles it)."""
        if name not in self._topics:
            return None
        try:
            return self.delete(name)
        except KafkaError as exc:
            log.warning("topic %r forgotten, but %s still names it: %s", name, TOPICS_FILE, exc)
            return self._forget(name)

    def adopt(self, partitions_by_topic: Mapping[str, int]) -> list[Topic]:
        """Register topics found on disk but missing here (see the module docstring)."""
        adopted = []
        for name, count in sorted(partitions_by_topic.items()):
            if name in self._topics:
                continue
            log.warning("adopting topic %r found on disk with %d partition(s)", name, count)
            topic = Topic(name, uuid.uuid4(), count, {})
            self._remember(topic)
            adopted.append(topic)
        if adopted:
            try:
                self._save()
            except KafkaError as exc:  # known here all the same: their data is on disk
                log.error("adopted topics not saved in %s: %s", TOPICS_FILE, exc)
        return adopted


def load_cluster_id(data_dir: Path, node_id: int) -> str:
    """The cluster id in meta.properties, created on first start (22 base64url chars, like
    Kafka's). A different node.id than the one recorded is refused: the data directory
    belongs to another broker."""
    path = data_dir / META_FILE
    properties: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                properties[key.strip()] = value.strip()
    if "cluster.id" in properties:
        recorded = int(properties.get("node.id", node_id))
        if recorded != node_id:
            raise ValueError(
                f"{path} belongs to node.id {recorded}, but this broker is node.id {node_id}"
            )
        return properties["cluster.id"]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode())
    return cluster_id


class ProducerIdAllocator:
    """Hands out producer ids that are never reused, even across crashes.

    Ids are reserved in blocks: the end of the current block is persisted before any id of
    it is handed out, so after a crash the next start begins past every id ever given.
    """

    BLOCK = 1000

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / PRODUCER_ID_FILE
        start = 0
        if self._path.exists():
            text = self._path.read_text().strip()
            if not text.isdigit():  # never guess: a wrong guess would reuse producer ids
                raise ValueError(f"{self._path}: expected a number, found {text[:40]!r}")
            start = int(text)
        self._next = start
        self._end = start

    def allocate(self) -> int:
        if self._next >= self._end:
            self._end = self._next + self.BLOCK
            write_atomically(self._path, f"{self._end}\n".encode())
        producer_id = self._next
        self._next += 1
        return producer_id
