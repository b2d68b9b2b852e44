"""A storm of offset commits leaves `__consumer_offsets` bounded, and the offsets right.

A real broker (`weirmq serve` in a subprocess) takes tens of thousands of offset commits
from confluent-kafka consumers: a few groups, each committing every partition of one topic
synchronously, over and over, with large commit metadata (Kafka allows up to
offset.metadata.max.bytes, 4 KiB) so that the log sees far more bytes than its bound in a
few seconds. Every commit supersedes the one before it, so the state worth keeping is one
record per (group, partition) however many commits came.

What keeps the log bounded (broker/group_service.py, storage/cleaner.py):

- the coordinator's own compaction: once the log passes `COMPACT_MIN_BYTES` (and
  `COMPACT_RATIO` x its live size) the coordinator appends a snapshot of its state and
  moves the log start to it, which deletes every whole segment below;
- the log cleaner (`cleanup.policy=compact`), which rewrites sealed segments keeping the
  newest record per key.

The offsets log's segment size is `OFFSETS_TOPIC_CONFIGS["segment.bytes"]` (8 MiB), a topic
override fixed when the broker creates the topic, and no broker setting lowers it: Kafka
has offsets.topic.segment.bytes, WeirMQ has no such setting; log.segment.bytes does not
reach a topic that overrides segment.bytes, and segment.ms (Kafka's log.roll.ms) has no
broker setting. So the test writes enough to pass the coordinator's threshold twice and
most of the way a third time (2.75 x `COMPACT_MIN_BYTES`, ~94 MB), ending with sealed
segments for the cleaner, and holds the log to what the two mechanisms promise:

- while the storm runs, the partition's size (the admin API's ``size_bytes``) never passes
  `COMPACT_MIN_BYTES` plus one segment, and comes down each time it nears it: it stops
  growing;
- at the end, the files on disk are within that bound too, and once the cleaner has been
  round (it looks every 15 s), within one segment and a MiB: far below what was written;
- the committed offsets (and their metadata) read back through the AdminClient
  (OffsetFetch) are the last ones committed, before and after a restart that replays the
  compacted log.

Bounded: ~25 000 partition commits in ~3 000 OffsetCommit requests, 15-30 s on a loaded
2-core machine; the test fails past 60 s.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import pytest
import requests
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from integration_support import Deadline, ErrorLog, create_topic

from weirmq.broker.group_service import COMPACT_MIN_BYTES, OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from weirmq.groups.coordinator import OFFSET_METADATA_MAX_BYTES
from weirmq.storage.cleaner import CleanerSettings

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "storm"
PARTITIONS = 8
GROUPS = 4
METADATA_BYTES = OFFSET_METADATA_MAX_BYTES - 96  # near Kafka's limit, with room for a tag
SEGMENT_BYTES = int(OFFSETS_TOPIC_CONFIGS["segment.bytes"])
WRITTEN_BYTES_MIN = 2 * COMPACT_MIN_BYTES + 3 * COMPACT_MIN_BYTES // 4
"""Metadata bytes the storm commits at least: past the coordinator's threshold twice, and
then most of the way to it again, so the storm ends with sealed segments for the cleaner."""
COMMITS = -(-WRITTEN_BYTES_MIN // METADATA_BYTES)  # ceiling: ~25 000 partition commits
ROUNDS = -(-COMMITS // (GROUPS * PARTITIONS))
SIZE_BOUND_BYTES = COMPACT_MIN_BYTES + SEGMENT_BYTES
"""The most the offsets log may hold at any time: the threshold, and a segment of slack
for the commits answered between crossing it and the compaction that follows."""
CLEANED_BOUND_BYTES = SEGMENT_BYTES + (1 << 20)
"""Once the cleaner has run: the active segment (never cleaned), and the sealed ones
cleaned down to one record per key (32 keys of ~4 KiB here) and their fillers."""
CLEANER_WAIT_S = CleanerSettings().backoff_ms / 1000 + 10
"""The cleaner looks at the logs every backoff_ms (15 s, no broker setting); and a pass."""
SAMPLES = 20
TEST_BUDGET_S = 60.0
CLIENT_TIMEOUT_S = 15.0
HTTP_TIMEOUT_S = 10.0


def _metadata(group: int, round_: int, partition: int) -> str:
    """Distinct per commit, so a stale value read back cannot pass for the newest."""
    tag = f"g{group}-r{round_}-p{partition}|"
    return tag + "m" * (METADATA_BYTES - len(tag))


def _offset(round_: int, partition: int) -> int:
    return 1000 * round_ + partition


def _offsets_log_size_on_disk(broker: BrokerProcess) -> int:
    directory = broker.data_dir / f"{OFFSETS_TOPIC}-0"
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def _offsets_log_size(broker: BrokerProcess) -> int:
    """`size_bytes` of the offsets partition, as the admin API reports it."""
    assert broker.admin_url is not None
    response = requests.get(
        f"{broker.admin_url}/api/v1/topics/{OFFSETS_TOPIC}/partitions/0", timeout=HTTP_TIMEOUT_S
    )
    assert response.status_code == 200, response.text
    size: int = response.json()["size_bytes"]
    return size


def _committed(bootstrap: str, group: str) -> dict[int, tuple[int, str]]:
    """(offset, metadata) per partition of `group`, read with OffsetFetch."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(CLIENT_TIMEOUT_S)
    found = {}
    for tp in result.topic_partitions:
        assert tp.error is None, f"{group} {tp.partition}: {tp.error}"
        found[tp.partition] = (tp.offset, tp.metadata)
    return found


def _expected(group: int, last_round: int) -> dict[int, tuple[int, str]]:
    return {p: (_offset(last_round, p), _metadata(group, last_round, p)) for p in range(PARTITIONS)}


def test_a_commit_storm_leaves_the_offsets_log_bounded(broker_factory: BrokerFactory) -> None:
    deadline = Deadline(TEST_BUDGET_S, "commit storm")
    broker = broker_factory(admin_listen="127.0.0.1:0", amqp_listen="off", sqs_listen="off")
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    errors = ErrorLog()
    consumers = [
        Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"storm-{g}",
                "enable.auto.commit": False,
                "error_cb": errors.error_cb,
            }
        )
        for g in range(GROUPS)
    ]
    sizes: list[int] = []
    written = 0
    try:
        sample_every = max(1, ROUNDS // SAMPLES)
        for round_ in range(ROUNDS):
            for g, consumer in enumerate(consumers):
                offsets = [
                    TopicPartition(TOPIC, p, _offset(round_, p), metadata=_metadata(g, round_, p))
                    for p in range(PARTITIONS)
                ]
                consumer.commit(offsets=offsets, asynchronous=False)
                written += PARTITIONS * METADATA_BYTES
            if round_ % sample_every == 0:
                sizes.append(_offsets_log_size(broker))
                deadline.check(f"round {round_} of {ROUNDS}")
    finally:
        for consumer in consumers:
            consumer.close()
    assert errors.snapshot() == []
    last_round = ROUNDS - 1

    # Bounded all along: the log stopped growing at the coordinator's threshold.
    assert written >= WRITTEN_BYTES_MIN
    assert max(sizes) <= SIZE_BOUND_BYTES, sizes
    # Compacted at least twice: the size came down from near the threshold.
    drops = sum(1 for before, after in itertools.pairwise(sizes) if after < before)
    assert drops >= 2, sizes
    # A fraction of what was written, whatever the point of the cycle the storm ended at;
    # and once the cleaner has been round, about one segment: far below it.
    assert _offsets_log_size(broker) <= SIZE_BOUND_BYTES < written / 2
    assert _offsets_log_size_on_disk(broker) <= SIZE_BOUND_BYTES
    cleaned = Deadline(
        min(CLEANER_WAIT_S, deadline.remaining()), "the cleaner bringing the log to a segment"
    )
    while _offsets_log_size_on_disk(broker) > CLEANED_BOUND_BYTES:
        cleaned.check(f"{_offsets_log_size_on_disk(broker)} bytes on disk")
        time.sleep(0.2)
    assert _offsets_log_size(broker) <= CLEANED_BOUND_BYTES
    assert written > 8 * CLEANED_BOUND_BYTES  # far below what was written

    # The newest commit of every partition survived the compactions ...
    for g in range(GROUPS):
        assert _committed(broker.bootstrap, f"storm-{g}") == _expected(g, last_round)
    # ... and so does the log on disk: a restart replays it into the same offsets.
    broker.restart()
    for g in range(GROUPS):
        assert _committed(broker.bootstrap, f"storm-{g}") == _expected(g, last_round)
    deadline.check("after the restart")
