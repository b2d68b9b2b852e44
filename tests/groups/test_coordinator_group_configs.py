"""A KIP-848 group's own session timeout and heartbeat interval (its GROUP configs
consumer.session.timeout.ms and consumer.heartbeat.interval.ms), applied by the coordinator
from each member's next heartbeat."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from weirmq.groups import consumer as kip848
from weirmq.groups.coordinator import CoordinatorSettings, GroupCoordinator

TOPIC_ID = uuid.uuid4()


def make(timeouts: dict[str, tuple[int, int]]) -> GroupCoordinator:
    def topics() -> Mapping[str, kip848.TopicInfo]:
        return {"t": kip848.TopicInfo(TOPIC_ID, 2)}

    settings = CoordinatorSettings(
        consumer=kip848.ConsumerGroupSettings(
            session_timeout_ms=45_000, heartbeat_interval_ms=5_000
        )
    )
    coordinator = GroupCoordinator(
        settings,
        lambda pairs: None,
        partitions_of={"t": 2}.get,
        topics=topics,
        consumer_timeouts=lambda group_id: timeouts.get(group_id, (45_000, 5_000)),
    )
    coordinator.finish_loading()
    return coordinator


def join(c: GroupCoordinator, group: str, now_ms: int) -> kip848.HeartbeatResponse:
    request = kip848.HeartbeatRequest(
        group, "m1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
    )
    return c.consumer_heartbeat(request, "client", "/127.0.0.1", now_ms)


def members(c: GroupCoordinator, group: str) -> int:
    return len(c.describe_consumer_group(group).members)


def test_a_groups_own_session_timeout_expires_its_members() -> None:
    timeouts = {"short": (2_000, 500)}
    c = make(timeouts)
    assert join(c, "short", 0).heartbeat_interval_ms == 500
    assert join(c, "default", 0).heartbeat_interval_ms == 5_000
    c.tick(1_999)
    assert (members(c, "short"), members(c, "default")) == (1, 1)
    c.tick(2_000)
    assert (members(c, "short"), members(c, "default")) == (0, 1)
    c.tick(45_000)
    assert members(c, "default") == 0


def test_a_change_applies_from_the_next_heartbeat() -> None:
    timeouts: dict[str, tuple[int, int]] = {}
    c = make(timeouts)
    first = join(c, "g", 0)
    assert first.heartbeat_interval_ms == 5_000
    timeouts["g"] = (3_000, 1_000)
    request = kip848.HeartbeatRequest("g", first.member_id, first.member_epoch)
    assert (
        c.consumer_heartbeat(request, "client", "/127.0.0.1", 1_000).heartbeat_interval_ms == 1_000
    )
    c.tick(3_999)
    assert members(c, "g") == 1
    c.tick(4_000)  # 1_000 + the group's 3_000
    assert members(c, "g") == 0
