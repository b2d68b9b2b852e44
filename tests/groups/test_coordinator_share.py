"""Share groups in the coordinator: a kind of their own, and what the share service hears.

A share group's id is taken until the group is deleted: the classic and KIP-848 APIs are
refused on it (INCONSISTENT_GROUP_PROTOCOL or GROUP_ID_NOT_FOUND, as Kafka answers), it
commits no offsets, and offsets retention never removes it. Members that leave or expire,
and the group's deletion, are told to the `ShareListener` so that the share service can
release their records and delete the group's state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import pytest

from weirmq.errors import ErrorCode
from weirmq.groups import consumer as kip848
from weirmq.groups.classic import ClassicSettings, JoinRequest
from weirmq.groups.coordinator import (
    CommitRequest,
    CoordinatorSettings,
    GroupCoordinator,
    ShareListener,
)
from weirmq.groups.errors import GroupError
from weirmq.groups.share import ShareGroupSettings

DAY_MS = 24 * 3600 * 1000
SESSION_MS = 45_000
TOPIC_ID = uuid.uuid4()
TOPICS = {"t": 2}


class Listener(ShareListener):
    """Records what the coordinator tells the share service."""

    def __init__(self) -> None:
        self.gone: list[tuple[str, list[str], int]] = []
        self.deleted: list[str] = []
        self.settings: dict[str, ShareGroupSettings] = {}

    def members_gone(self, group_id: str, member_ids: Sequence[str], now_ms: int) -> None:
        self.gone.append((group_id, list(member_ids), now_ms))

    def group_deleted(self, group_id: str) -> None:
        self.deleted.append(group_id)

    def share_settings(self, group_id: str) -> ShareGroupSettings | None:
        return self.settings.get(group_id)


class Fixture:
    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []
        self.listener = Listener()
        self.coordinator = GroupCoordinator(
            CoordinatorSettings(
                classic=ClassicSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=1),
                share=ShareGroupSettings(session_timeout_ms=SESSION_MS),
                offsets_retention_ms=7 * DAY_MS,
            ),
            self.log.extend,
            partitions_of=TOPICS.get,
            topics=self.topic_infos,
            share_listener=self.listener,
        )
        self.coordinator.finish_loading()

    def topic_infos(self) -> Mapping[str, kip848.TopicInfo]:
        return {name: kip848.TopicInfo(TOPIC_ID, count) for name, count in TOPICS.items()}


@pytest.fixture
def fx() -> Fixture:
    return Fixture()


@contextmanager
def refused(code: ErrorCode) -> Iterator[None]:
    with pytest.raises(GroupError) as caught:
        yield
    assert caught.value.code is code, caught.value


def share_join(
    c: GroupCoordinator, group: str, member: str, *, now: int = 0, epoch: int = 0
) -> int:
    result = c.share_heartbeat(
        group, member, epoch, ("t",), None, client_id="c", client_host="/h", now_ms=now
    )
    return result.member_epoch


def share_leave(c: GroupCoordinator, group: str, member: str, *, now: int = 0) -> None:
    result = c.share_heartbeat(
        group, member, -1, None, None, client_id="c", client_host="/h", now_ms=now
    )
    assert result.member_epoch == -1


def classic_join(c: GroupCoordinator, group: str) -> None:
    request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), False)
    c.join_group(group, request, 0, 1)


def commit(c: GroupCoordinator, group: str, *, member: str = "", generation: int = -1) -> None:
    request = CommitRequest(group, member, generation, None, [("t", 0, 5, -1, "")])
    c.commit_offsets(request, 0)


# --- a kind of its own ------------------------------------------------------------------------


def test_a_classic_join_on_a_share_group_is_inconsistent_group_protocol(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    with refused(ErrorCode.inconsistent_group_protocol):
        classic_join(c, "g")
    share_leave(c, "g", "m1")
    with refused(ErrorCode.inconsistent_group_protocol):
        classic_join(c, "g")  # even empty: a share group never turns into another kind
    assert c.share_group("g") is not None


def test_classic_sync_heartbeat_and_leave_on_a_share_group_are_refused(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    with refused(ErrorCode.inconsistent_group_protocol):
        c.sync_group("g", "m1", None, 1, None, None, [], 0, 2)
    with refused(ErrorCode.inconsistent_group_protocol):
        c.heartbeat("g", "m1", None, 1, 0)
    with refused(ErrorCode.inconsistent_group_protocol):
        c.leave_group("g", [("m1", None)], 0)


def test_a_consumer_group_heartbeat_on_a_share_group_is_group_id_not_found(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    request = kip848.HeartbeatRequest(
        "g", "c1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
    )
    with refused(ErrorCode.group_id_not_found):
        c.consumer_heartbeat(request, "c", "/h", 0)
    share_leave(c, "g", "m1")
    with refused(ErrorCode.group_id_not_found):
        c.consumer_heartbeat(request, "c", "/h", 0)


def test_offset_commit_to_a_share_group_is_group_id_not_found(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    with refused(ErrorCode.group_id_not_found):
        commit(c, "g")
    with refused(ErrorCode.group_id_not_found):
        commit(c, "g", member="m1", generation=1)
    assert c.committed("g") == {}
    assert fx.log == [], "nothing of a share group is written to the offsets log"


def test_a_share_heartbeat_on_a_classic_or_consumer_group_is_refused(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "classic")
    c.consumer_heartbeat(
        kip848.HeartbeatRequest(
            "consumer", "c1", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",)
        ),
        "c",
        "/h",
        0,
    )
    for group in ("classic", "consumer"):
        with refused(ErrorCode.inconsistent_group_protocol):
            share_join(c, group, "m1")
        assert c.share_group(group) is None


def test_describe_share_group_of_another_kind_or_none_is_group_id_not_found(fx: Fixture) -> None:
    c = fx.coordinator
    commit(c, "classic")
    for group in ("classic", "missing"):
        with refused(ErrorCode.group_id_not_found):
            c.describe_share_group(group)
    share_join(c, "g", "m1")
    described = c.describe_share_group("g")
    assert (described.state, [m.member_id for m in described.members]) == ("Stable", ["m1"])


def test_list_groups_shows_type_share(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "s", "m1")
    commit(c, "classic")
    assert c.list_groups() == [
        ("classic", "", "Empty", "classic"),
        ("s", "share", "Stable", "share"),
    ]


def test_describe_groups_shows_a_share_group_in_classic_terms(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    described = c.describe_group("g")
    assert described is not None
    assert (described.protocol_type, described.state) == ("share", "Stable")
    assert [m.member_id for m in described.members] == ["m1"]


def test_ensure_share_group_creates_once(fx: Fixture) -> None:
    c = fx.coordinator
    group = c.ensure_share_group("g")
    assert c.ensure_share_group("g") is group
    assert group.is_empty
    assert c.list_groups() == [("g", "share", "Empty", "share")]


def test_a_refused_first_heartbeat_leaves_no_group(fx: Fixture) -> None:
    """Kafka checks a ShareGroupHeartbeat before it looks the group up; a malformed one
    must not create an empty share group (which nothing would ever remove)."""
    c = fx.coordinator
    with refused(ErrorCode.invalid_request):
        c.share_heartbeat("g", "", 0, ("t",), None, client_id="c", client_host="/h", now_ms=0)
    with refused(ErrorCode.invalid_request):
        c.share_heartbeat("g", "m1", 0, None, None, client_id="c", client_host="/h", now_ms=0)
    assert c.list_groups() == []


def test_an_epoch_below_minus_1_is_an_invalid_request_even_without_a_group(
    fx: Fixture,
) -> None:
    c = fx.coordinator
    with refused(ErrorCode.invalid_request):
        c.share_heartbeat("g", "m1", -2, None, None, client_id="c", client_host="/h", now_ms=0)


def test_an_empty_group_id_is_invalid_group_id(fx: Fixture) -> None:
    with refused(ErrorCode.invalid_group_id):
        share_join(fx.coordinator, "", "m1")


# --- retention --------------------------------------------------------------------------------


def test_expire_offsets_never_deletes_an_empty_share_group(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    share_leave(c, "g", "m1")
    commit(c, "classic")
    assert c.expire_offsets(30 * DAY_MS) == 1  # the classic group's offset goes
    assert [group for group, *_ in c.list_groups()] == ["g"]
    assert fx.listener.deleted == []
    assert c.describe_share_group("g").state == "Empty"


# --- what the listener hears -----------------------------------------------------------------


def test_a_leaving_member_is_reported_gone(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    share_join(c, "g", "m2")
    share_leave(c, "g", "m1", now=7)
    assert fx.listener.gone == [("g", ["m1"], 7)]


def test_expired_members_are_reported_gone_at_their_session_timeout(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1", now=0)
    share_join(c, "g", "m2", now=1_000)
    assert c.next_deadline_ms() == SESSION_MS
    c.tick(SESSION_MS - 1)
    assert fx.listener.gone == []
    c.tick(SESSION_MS)
    assert fx.listener.gone == [("g", ["m1"], SESSION_MS)]
    c.tick(SESSION_MS + 1_000)
    assert fx.listener.gone[-1] == ("g", ["m2"], SESSION_MS + 1_000)
    assert c.describe_share_group("g").state == "Empty"
    c.tick(10 * SESSION_MS)
    assert len(fx.listener.gone) == 2, "nobody left to expire, nothing reported"


def test_a_heartbeat_keeps_a_member_alive(fx: Fixture) -> None:
    c = fx.coordinator
    epoch = share_join(c, "g", "m1", now=0)
    c.share_heartbeat(
        "g", "m1", epoch, None, None, client_id="c", client_host="/h", now_ms=SESSION_MS - 1
    )
    c.tick(SESSION_MS)
    assert fx.listener.gone == []


def test_deleting_an_empty_share_group_reports_it_deleted(fx: Fixture) -> None:
    c = fx.coordinator
    share_join(c, "g", "m1")
    with refused(ErrorCode.non_empty_group):
        c.delete_group("g", 0)
    assert fx.listener.deleted == []
    share_leave(c, "g", "m1")
    c.delete_group("g", 0)
    assert fx.listener.deleted == ["g"]
    assert c.list_groups() == []
    with refused(ErrorCode.group_id_not_found):
        c.describe_share_group("g")
    classic_join(c, "g")  # the id is free again
    assert c.describe_group("g") is not None


def test_the_listeners_settings_apply_to_the_group(fx: Fixture) -> None:
    c = fx.coordinator
    fx.listener.settings["g"] = ShareGroupSettings(
        session_timeout_ms=9_000, heartbeat_interval_ms=900
    )
    result = c.share_heartbeat(
        "g", "m1", 0, ("t",), None, client_id="c", client_host="/h", now_ms=0
    )
    assert result.heartbeat_interval_ms == 900
    assert c.next_deadline_ms() == 9_000
    fx.listener.settings["g"] = ShareGroupSettings(session_timeout_ms=20_000)
    again = c.share_heartbeat(
        "g", "m1", result.member_epoch, None, None, client_id="c", client_host="/h", now_ms=100
    )
    assert again.heartbeat_interval_ms == 5_000
    assert c.next_deadline_ms() == 20_100
