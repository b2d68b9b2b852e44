"""Consumer groups with confluent-kafka (librdkafka 2.16) against a real broker process.

Members join and leave a group while a producer writes all along, with the classic protocol
(eager and cooperative assignors) and with KIP-848's ``group.protocol=consumer``; a member
killed with SIGKILL loses its partitions to the others once its session expires; a static
member comes back to its own partitions without disturbing anyone; committed offsets are
where a new member resumes, and the AdminClient lists, describes, deletes and edits groups.

Every member commits synchronously after processing each batch, so the group promises
at-least-once delivery across any rebalance: see ``GroupTracker`` for what is checked while
the test runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from group_member import confluent_member
from integration_support import (
    ADMIN_TIMEOUT_S,
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    GROUP_SETTINGS,
    ContinuousProducer,
    Deadline,
    GroupTracker,
    MemberThread,
    assert_every_record_consumed,
    committed_offsets,
    create_topic,
    first_offsets,
    member_config,
    produce_per_partition,
    run_join_leave,
    subscribed_consumer,
    wait_for_group,
    wait_stable_and_reading,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

PARTITIONS = 6
SCENARIO_BUDGET_S = 90
GROUP_MEMBER_SCRIPT = Path(__file__).resolve().parent / "group_member.py"
CLASSIC = {
    "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": CLASSIC_HEARTBEAT_INTERVAL_MS,
}
CONSUMER_PROTOCOL = {"group.protocol": "consumer"}

# confluent-kafka's Python AdminClient has no delete_consumer_group_offsets (OffsetDelete):
# kafka-python's admin client sends it. kafka-python 3.0 loads its protocol schemas with a
# deprecated importlib.resources call; ignore exactly that (see test_python_clients.py).
KAFKA_PYTHON_RESOURCE_WARNINGS = r"(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=KAFKA_PYTHON_RESOURCE_WARNINGS, category=DeprecationWarning
    )
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition


@pytest.fixture
def group_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(**GROUP_SETTINGS)


def thread_member_starter(
    bootstrap: str, group: str, topic: str, tracker: GroupTracker, **config: object
) -> Any:
    def start(name: str, **extra: object) -> MemberThread:
        settings = member_config(bootstrap, group, **{"client.id": name, **config, **extra})
        body = confluent_member(name, topic, settings, tracker)
        return MemberThread(name, body, tracker).start()

    return start


def join_leave_scenario(broker: BrokerProcess, group: str, **config: object) -> None:
    """Three members join one by one, two leave one by one, the last reads the rest."""
    topic = f"{group}-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    tracker = GroupTracker()
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS).start()
    start = thread_member_starter(broker.bootstrap, group, topic, tracker, **config)
    deadline = Deadline(SCENARIO_BUDGET_S, f"join/leave scenario of {group}")

    deliveries = run_join_leave(tracker, producer, start, members=3, deadline=deadline)

    assert_every_record_consumed(tracker, deliveries)
    end_offsets = deliveries.count_by_partition()
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == end_offsets


# -- (a) classic protocol, eager and cooperative --------------------------------------------------


@pytest.mark.parametrize(
    "strategy", [None, "cooperative-sticky"], ids=["range-roundrobin", "cooperative-sticky"]
)
def test_classic_members_join_and_leave_while_producing(
    group_broker: BrokerProcess, strategy: str | None
) -> None:
    assignor = {} if strategy is None else {"partition.assignment.strategy": strategy}
    join_leave_scenario(group_broker, f"classic-{strategy or 'default'}", **CLASSIC, **assignor)


# -- (c) KIP-848 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", [None, "range"], ids=["default-assignor", "range"])
def test_consumer_protocol_members_join_and_leave_while_producing(
    group_broker: BrokerProcess, assignor: str | None
) -> None:
    remote = {} if assignor is None else {"group.remote.assignor": assignor}
    join_leave_scenario(
        group_broker, f"kip848-{assignor or 'default'}", **CONSUMER_PROTOCOL, **remote
    )


# -- (b) a member killed with SIGKILL -------------------------------------------------------------


class MemberProcess:
    """``group_member.py`` in its own process; its JSON events go to ``events`` and to the
    live tracker as they are read."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        config: dict[str, object],
        log_dir: Path,
        tracker: GroupTracker,
        events: list[dict[str, Any]],
    ) -> None:
        self.name = name
        self._tracker = tracker
        self._events = events
        self._stderr_path = log_dir / f"{name}.stderr"
        command = [
            sys.executable,
            str(GROUP_MEMBER_SCRIPT),
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--name",
            name,
            *(arg for key, value in config.items() for arg in ("--set", f"{key}={value}")),
        ]
        with self._stderr_path.open("wb") as stderr:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
            )
        assert self._proc.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout,), name=f"{name}-reader", daemon=True
        )
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            event = json.loads(line)
            self._events.append(event)
            self._tracker.apply(event)

    def kill(self) -> None:
        """SIGKILL; from now on the member holds nothing (it can no longer read)."""
        self.halt()
        event = {"kind": "released", "member": self.name, "data": "killed"}
        self._events.append({**event, "at_ns": time.monotonic_ns()})
        self._tracker.apply(event)

    def leave(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the member closes its consumer and exits with 0."""
        self._proc.terminate()
        try:
            code = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.halt()
            raise AssertionError(f"{self.name} still closing after {timeout_s:.0f} s") from None
        self._finish()
        assert code == 0, f"{self.name} exited with {code}: {self.stderr_tail()}"

    def halt(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self._finish()

    def _finish(self) -> None:
        """Once the process is gone: read the rest of its events, close the pipe."""
        self._reader.join(10)
        assert self._proc.stdout is not None
        self._proc.stdout.close()

    def stderr_tail(self) -> str:
        return self._stderr_path.read_bytes()[-3000:].decode("utf-8", "replace")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_killed_member_partitions_move_to_the_others(
    group_broker: BrokerProcess, tmp_path: Path, protocol: str
) -> None:
    broker = group_broker
    group, topic = f"killed-{protocol}", f"killed-{protocol}-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    config = CLASSIC if protocol == "classic" else CONSUMER_PROTOCOL
    deadline = Deadline(SCENARIO_BUDGET_S, f"SIGKILL of a {protocol} member")
    # Events of different processes reach the test out of order, so the live tracker only
    # answers "who holds what"; the promises are checked on a replay in time order.
    tracker = GroupTracker(strict=False)
    events: list[dict[str, Any]] = []
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS).start()
    members = [
        MemberProcess(
            f"member-{n}", broker.bootstrap, group, topic, dict(config), tmp_path, tracker, events
        )
        for n in range(3)
    ]
    try:
        names = [m.name for m in members]
        wait_stable_and_reading(tracker, names, PARTITIONS, deadline)
        victim, survivors = members[1], [members[0], members[2]]
        victim_partitions = tracker.holdings()[victim.name]
        victim.kill()
        victim_last = {p: -1 for p in victim_partitions}
        for partition, offset, _ in tracker.consumed_by(victim.name):
            if partition in victim_last:
                victim_last[partition] = max(victim_last[partition], offset)

        # Nothing to wait for but the broker expiring the victim's session.
        wait_stable_and_reading(tracker, [m.name for m in survivors], PARTITIONS, deadline)

        def read_past_victim() -> bool:
            last = dict.fromkeys(victim_partitions, -1)
            for member in survivors:
                for partition, offset, _ in tracker.consumed_by(member.name):
                    if partition in last:
                        last[partition] = max(last[partition], offset)
            return all(last[p] > victim_last[p] for p in victim_partitions)

        wait_for_group(
            tracker, read_past_victim, deadline, f"survivors reading {victim_partitions}"
        )
        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(
            tracker, lambda: tracker.seqs() >= produced, deadline, "survivors reading the rest"
        )
        for member in survivors:
            member.leave(deadline.remaining())
    finally:
        for member in members:
            member.halt()
        producer.halt()

    # A commit the victim made just before dying may be unknown to the test, so where the
    # survivors resume is not checked here (test_classic_members_join_and_leave... does).
    replay = GroupTracker(check_resume=False)
    for event in sorted(events, key=lambda e: e["at_ns"]):
        replay.apply(event)
    assert_every_record_consumed(replay, deliveries)


# -- (d) static membership ------------------------------------------------------------------------


def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(
    group_broker: BrokerProcess,
) -> None:
    broker = group_broker
    group, topic = "static", "static-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    tracker = GroupTracker()
    # The restarted member is back long before the broker would give up on it.
    static = {**CLASSIC, "session.timeout.ms": 30_000}
    start = thread_member_starter(broker.bootstrap, group, topic, tracker, **static)
    deadline = Deadline(SCENARIO_BUDGET_S, "restart of a static member")
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS).start()
    members: list[MemberThread] = []
    try:
        for n in range(3):
            members.append(start(f"static-{n}", **{"group.instance.id": f"static-{n}"}))
            wait_stable_and_reading(tracker, [m.name for m in members], PARTITIONS, deadline)
        # The last to join: it did not lead the group's first assignment.
        restarted, others = members[2], members[:2]
        partitions_before = tracker.holdings()[restarted.name]
        others_before = {m.name: tracker.history(m.name) for m in others}

        restarted.leave(deadline.remaining())  # a static member's close sends no LeaveGroup
        members.remove(restarted)
        members.append(start("static-2-again", **{"group.instance.id": "static-2"}))
        names = [m.name for m in members]
        # With eager assignors a rebalance revokes every member before anyone gets an
        # assignment: had the rejoin caused one, the others' histories would show it now.
        wait_stable_and_reading(tracker, names, PARTITIONS, deadline)
        assert tracker.holdings()["static-2-again"] == partitions_before
        assert tracker.history("static-2-again") == [("assigned", tuple(sorted(partitions_before)))]
        assert {m.name: tracker.history(m.name) for m in others} == others_before

        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(tracker, lambda: tracker.seqs() >= produced, deadline, "reading the rest")
        assert {m.name: tracker.history(m.name) for m in others} == others_before
        for member in members:
            member.leave(deadline.remaining())
    finally:
        for member in members:
            member.halt()
        producer.halt()

    assert_every_record_consumed(tracker, deliveries)


# -- (e) committed offsets and the AdminClient ----------------------------------------------------

RECORDS_PER_PARTITION = 30
OFFSET_PARTITIONS = 3


def read_from_group(
    consumer: Consumer, wanted: dict[int, int], deadline: Deadline
) -> dict[int, list[int]]:
    """Poll until the offsets read on each partition reach ``wanted[p]`` (the end offset)."""
    offsets: dict[int, list[int]] = {p: [] for p in wanted}

    def done() -> bool:
        return all((offsets[p][-1] + 1 if offsets[p] else -1) >= end for p, end in wanted.items())

    while not done():
        deadline.check(f"reading up to {wanted}, read so far {offsets}")
        for message in consumer.consume(num_messages=500, timeout=0.2):
            error = message.error()
            assert error is None, f"{error.name()}: {error.str()}"
            offsets.setdefault(message.partition(), []).append(message.offset())
    return offsets


def wait_assigned(consumer: Consumer, partitions: int, deadline: Deadline) -> None:
    """Poll (serving the rebalance callbacks) until the consumer holds every partition."""
    while len(consumer.assignment()) < partitions:
        deadline.check(f"assignment of {partitions} partitions, have {consumer.assignment()}")
        for message in consumer.consume(num_messages=1, timeout=0.1):
            assert message.error() is None, message.error()


def test_new_member_resumes_exactly_after_the_last_commit(group_broker: BrokerProcess) -> None:
    broker = group_broker
    group, topic = "resume", "resume-topic"
    create_topic(broker.bootstrap, topic, OFFSET_PARTITIONS)
    produce_per_partition(broker.bootstrap, topic, OFFSET_PARTITIONS, RECORDS_PER_PARTITION)
    ends = dict.fromkeys(range(OFFSET_PARTITIONS), RECORDS_PER_PARTITION)
    deadline = Deadline(60, "commit, close, resume")

    first = subscribed_consumer(broker.bootstrap, group, topic)
    try:
        read_from_group(first, ends, deadline)
        # The last commit counts, even when it goes back (partition 0: 20, then 12).
        commits = [{0: 20, 1: 10, 2: 3}, {0: 12, 1: 17}]
        for offsets in commits:
            request = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            result = first.commit(offsets=request, asynchronous=False)
            assert [tp.error for tp in result] == [None] * len(offsets), result
        last = {0: 12, 1: 17, 2: 3}
        seen = first.committed([TopicPartition(topic, p) for p in range(OFFSET_PARTITIONS)], 10)
        assert {tp.partition: tp.offset for tp in seen} == last
    finally:
        first.close()

    assert committed_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS) == last
    second = subscribed_consumer(broker.bootstrap, group, topic)
    try:
        read = read_from_group(second, ends, deadline)
    finally:
        second.close()
    assert read == {p: list(range(last[p], RECORDS_PER_PARTITION)) for p in last}


def admin_client(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def describe(admin: AdminClient, group: str) -> ConsumerGroupDescription | KafkaError:
    try:
        return admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]


def delete_group(admin: AdminClient, group: str) -> KafkaError | None:
    try:
        admin.delete_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]
    return None


def listed_groups(admin: AdminClient, **filters: object) -> dict[str, Any]:
    result = admin.list_consumer_groups(**filters).result(ADMIN_TIMEOUT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing for listing in result.valid}


def assignment_of(description: ConsumerGroupDescription) -> dict[str, set[int]]:
    return {
        m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
        for m in description.members
    }


def test_admin_lists_describes_and_deletes_a_classic_group(group_broker: BrokerProcess) -> None:
    broker = group_broker
    group, topic = "described", "described-topic"
    create_topic(broker.bootstrap, topic, OFFSET_PARTITIONS)
    deliveries = produce_per_partition(
        broker.bootstrap, topic, OFFSET_PARTITIONS, RECORDS_PER_PARTITION
    )
    produced = set(deliveries.where)
    admin = admin_client(broker)
    tracker = GroupTracker()
    start = thread_member_starter(broker.bootstrap, group, topic, tracker, **CLASSIC)
    deadline = Deadline(60, "admin calls on a classic group")
    member = start("described-member")
    try:
        wait_for_group(
            tracker, lambda: tracker.seqs() >= produced, deadline, "the member reading it all"
        )
        listing = listed_groups(admin)[group]
        assert listing.state == ConsumerGroupState.STABLE
        assert getattr(listing, "type", None) == ConsumerGroupType.CLASSIC
        assert not listing.is_simple_consumer_group
        description = describe(admin, group)
        assert isinstance(description, ConsumerGroupDescription), description
        assert description.state == ConsumerGroupState.STABLE
        assert not description.is_simple_consumer_group
        assert description.partition_assignor == "range"
        assert assignment_of(description) == {"described-member": set(range(OFFSET_PARTITIONS))}
        refused = delete_group(admin, group)
        assert refused is not None and refused.code() == KafkaError.NON_EMPTY_GROUP, refused
        member.leave(deadline.remaining())
    finally:
        member.halt()
    assert_every_record_consumed(tracker, deliveries)

    description = describe(admin, group)
    assert isinstance(description, ConsumerGroupDescription), description
    assert description.state == ConsumerGroupState.EMPTY
    assert description.members == []
    assert listed_groups(admin)[group].state == ConsumerGroupState.EMPTY
    ends = deliveries.count_by_partition()
    assert committed_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS) == ends

    assert delete_group(admin, group) is None
    assert group not in listed_groups(admin)
    after = committed_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS)
    assert after == dict.fromkeys(range(OFFSET_PARTITIONS), OFFSET_INVALID)
    gone = describe(admin, group)
    assert (
        isinstance(gone, ConsumerGroupDescription) and gone.state == ConsumerGroupState.DEAD
    ) or (isinstance(gone, KafkaError) and gone.code() == KafkaError.GROUP_ID_NOT_FOUND), gone
    again = delete_group(admin, group)
    assert again is not None and again.code() == KafkaError.GROUP_ID_NOT_FOUND, again


@pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_RESOURCE_WARNINGS}:DeprecationWarning")
def test_admin_alters_and_deletes_committed_offsets(group_broker: BrokerProcess) -> None:
    broker = group_broker
    group, topic = "altered", "altered-topic"
    create_topic(broker.bootstrap, topic, OFFSET_PARTITIONS)
    produce_per_partition(broker.bootstrap, topic, OFFSET_PARTITIONS, RECORDS_PER_PARTITION)
    admin = admin_client(broker)
    deadline = Deadline(60, "alter and delete committed offsets")

    altered = {0: 5, 1: 9, 2: 12}
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p, o) for p, o in altered.items()]
    )
    result = admin.alter_consumer_group_offsets([request])[group].result(ADMIN_TIMEOUT_S)
    assert {tp.partition: (tp.offset, tp.error) for tp in result.topic_partitions} == {
        p: (o, None) for p, o in altered.items()
    }
    assert committed_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS) == altered
    assert first_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS, deadline) == altered

    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        # While a member is subscribed to the topic, its offsets cannot be deleted.
        active = subscribed_consumer(broker.bootstrap, group, topic)
        try:
            wait_assigned(active, OFFSET_PARTITIONS, deadline)
            refused = kafka_admin.delete_group_offsets(group, [KafkaTopicPartition(topic, 1)])
        finally:
            active.close()
        assert {tp.partition: error.__name__ for tp, error in refused.items()} == {
            1: "GroupSubscribedToTopicError"
        }
        deleted = kafka_admin.delete_group_offsets(group, [KafkaTopicPartition(topic, 1)])
        assert {tp.partition: error.__name__ for tp, error in deleted.items()} == {1: "NoError"}
    finally:
        kafka_admin.close()

    remaining = {0: 5, 1: OFFSET_INVALID, 2: 12}
    assert committed_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS) == remaining
    # Without a committed offset, partition 1 starts where auto.offset.reset=earliest says.
    expected_start = {0: 5, 1: 0, 2: 12}
    assert first_offsets(broker.bootstrap, group, topic, OFFSET_PARTITIONS, deadline) == (
        expected_start
    )


def test_admin_describes_a_consumer_protocol_group(group_broker: BrokerProcess) -> None:
    broker = group_broker
    group, topic = "described-kip848", "described-kip848-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    admin = admin_client(broker)
    tracker = GroupTracker()
    start = thread_member_starter(broker.bootstrap, group, topic, tracker, **CONSUMER_PROTOCOL)
    deadline = Deadline(60, "admin calls on a KIP-848 group")
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS).start()
    members = [start("kip848-a"), start("kip848-b")]
    try:
        names = [m.name for m in members]
        wait_stable_and_reading(tracker, names, PARTITIONS, deadline)
        last: list[object] = []

        def described_as_held() -> bool:
            description = describe(admin, group)
            last[:] = [description]
            return (
                isinstance(description, ConsumerGroupDescription)
                and description.state == ConsumerGroupState.STABLE
                and assignment_of(description) == tracker.holdings()
            )

        wait_for_group(tracker, described_as_held, deadline, f"description {last}")
        (description,) = last
        assert isinstance(description, ConsumerGroupDescription)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == "uniform"
        assert not description.is_simple_consumer_group
        assert group in listed_groups(admin, types={ConsumerGroupType.CONSUMER})
        assert group not in listed_groups(admin, types={ConsumerGroupType.CLASSIC})
        refused = delete_group(admin, group)
        assert refused is not None and refused.code() == KafkaError.NON_EMPTY_GROUP, refused

        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(tracker, lambda: tracker.seqs() >= produced, deadline, "reading the rest")
        for member in members:
            member.leave(deadline.remaining())
    finally:
        for member in members:
            member.halt()
        producer.halt()
    assert_every_record_consumed(tracker, deliveries)

    description = describe(admin, group)
    assert isinstance(description, ConsumerGroupDescription), description
    assert description.state == ConsumerGroupState.EMPTY
    assert description.members == []
    assert delete_group(admin, group) is None
    assert group not in listed_groups(admin)
