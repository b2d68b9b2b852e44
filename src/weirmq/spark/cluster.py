"""The driver's view of the topics: partitions, watermarks and offsets by time.

One confluent-kafka `Consumer` per reader (on the driver's Python worker), used only for
metadata, never subscribed or assigned: `list_topics` for the partitions, and batched
ListOffsets (`offsets_for_times` with Kafka's -2 earliest / -1 latest codes, or a
timestamp) for offsets, one request per question whatever the number of partitions. The
same handle commits a streaming query's progress to `kafka.group.id`, when one is set, so
that consumer-group tools show the query's lag (Spark's checkpoint stays the truth).

The handle is made on first use and never pickled: Spark pickles readers to send them to
executors, which do not need it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from weirmq.spark.options import EARLIEST, LATEST, OptionError, Subscription
from weirmq.spark.planning import Offsets, TopicPartitionKey

METADATA_TIMEOUT_S = 30.0
METADATA_ATTEMPTS = 3
METADATA_RETRY_S = 1.0


class ClusterError(RuntimeError):
    """The broker could not answer a planning question (unreachable, or refused)."""


class Cluster:
    """Metadata and offsets for a read; see the module docstring."""

    def __init__(self, client: Mapping[str, str], group_id_prefix: str = "weirmq-spark") -> None:
        self._config = dict(client)
        self._config.setdefault("group.id", f"{group_id_prefix}-{uuid.uuid4().hex[:12]}-driver")
        self._consumer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config, "_consumer": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._config = state["_config"]
        self._consumer = None

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = make_consumer(self._config)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self, subscription: Subscription) -> list[TopicPartitionKey]:
        """The partitions a subscription covers now, sorted. A `subscribe` topic that does not
        exist yet has no partitions (it is read once it appears); an `assign` partition that
        does not exist is an error. Internal topics (`__...`) match only when named.

        A topic whose metadata carries an error other than "unknown topic" (no leader yet,
        say) is asked about again, up to `METADATA_ATTEMPTS` times, then an error: taking it
        for deleted would make a stream drop it, and read it all again when it came back."""
        from confluent_kafka import KafkaError

        for attempt in range(METADATA_ATTEMPTS):
            metadata = self._call(
                lambda c: c.list_topics(timeout=METADATA_TIMEOUT_S), "list topics"
            )
            troubled = {
                name: topic.error
                for name, topic in metadata.topics.items()
                if topic.error is not None
                and topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                and _wanted(subscription, name)
            }
            if not troubled:
                break
            if attempt + 1 == METADATA_ATTEMPTS:
                shown = "; ".join(f"{name}: {error}" for name, error in sorted(troubled.items()))
                raise ClusterError(f"cannot get the partitions of {shown}")
            time.sleep(METADATA_RETRY_S)
        existing = {
            (name, p)
            for name, topic in metadata.topics.items()
            if topic.error is None and _wanted(subscription, name)
            for p in topic.partitions
        }
        if subscription.assign:
            missing = [tp for tp in subscription.assign if tp not in existing]
            if missing:
                shown = ", ".join(f"{t}-{p}" for t, p in missing)
                raise OptionError(f"assign: partition(s) {shown} do not exist")
            return list(subscription.assign)
        return sorted(existing)

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> Offsets:
        return self._list_offsets({tp: EARLIEST for tp in partitions})

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> Offsets:
        return self._list_offsets({tp: LATEST for tp in partitions})

    def for_times(
        self, timestamps: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int]:
        """The first offset whose timestamp is >= the given one, per partition; -1 where
        every record is older."""
        return self._list_offsets(timestamps)

    def commit(self, group_offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Commits offsets to this handle's `group.id` (no membership: Kafka's "simple
        consumer" commit, which an empty group accepts)."""
        from confluent_kafka import TopicPartition

        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(group_offsets.items())]
        if offsets:
            self._call(lambda c: c.commit(offsets=offsets, asynchronous=False), "commit offsets")

    def _list_offsets(self, query: Mapping[TopicPartitionKey, int]) -> Offsets:
        from confluent_kafka import TopicPartition

        if not query:
            return {}
        asked = [TopicPartition(t, p, code) for (t, p), code in sorted(query.items())]
        answers = self._call(
            lambda c: c.offsets_for_times(asked, timeout=METADATA_TIMEOUT_S), "list offsets"
        )
        out: Offsets = {}
        for answer in answers:
            if answer.error is not None:
                raise ClusterError(
                    f"cannot list offsets of {answer.topic}-{answer.partition}: {answer.error}"
                )
            out[(answer.topic, answer.partition)] = answer.offset
        return out

    def _call(self, fn: Any, what: str) -> Any:
        from confluent_kafka import KafkaException

        try:
            return fn(self.consumer)
        except KafkaException as exc:
            servers = self._config.get("bootstrap.servers")
            raise ClusterError(f"cannot {what} on {servers}: {exc.args[0]}") from None


def _wanted(subscription: Subscription, topic: str) -> bool:
    if subscription.assign:
        return any(topic == t for t, _ in subscription.assign)
    if subscription.pattern is not None and topic.startswith("__"):
        return False  # as Kafka consumers' exclude.internal.topics
    return subscription.matches(topic)


def make_producer(config: Mapping[str, str]) -> Any:
    """A confluent-kafka producer, checked like `make_consumer`."""
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(dict(config))
    except KafkaException as exc:
        raise OptionError(f"Kafka client configuration refused: {exc.args[0]}") from None


def make_consumer(config: Mapping[str, str]) -> Any:
    """A confluent-kafka consumer; a configuration librdkafka refuses (an unknown `kafka.*`
    option, say) becomes an `OptionError` naming it."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(dict(config))
    except KafkaException as exc:
        raise OptionError(f"Kafka client configuration refused: {exc.args[0]}") from None
