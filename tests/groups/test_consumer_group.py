"""The KIP-848 consumer group state machine, driven by simulated consumers and a manual clock.

After every call `Sim.check` asserts the safety invariants: no partition held by two
members on the coordinator's side, none owned by two consumers on the clients' side.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.errors import ErrorCode
from weirmq.groups.consumer import (
    TRANSITIONS,
    ConsumerGroup,
    ConsumerGroupSettings,
    GroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    Partition,
    TopicInfo,
)
from weirmq.groups.errors import GroupError
from weirmq.groups.views import AssignedTopic, GroupView, MemberView

SESSION_MS = 45_000
HEARTBEAT_MS = 5_000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"weirmq:{name}")


def tp(name: str, *partitions: int) -> frozenset[Partition]:
    return frozenset((topic_id(name), p) for p in partitions)


def by_topic(partitions: frozenset[Partition]) -> dict[uuid.UUID, tuple[int, ...]]:
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return {topic: tuple(ps) for topic, ps in grouped.items()}


def flat(assignment: Mapping[uuid.UUID, tuple[int, ...]] | None) -> frozenset[Partition]:
    assert assignment is not None
    return frozenset((topic, p) for topic, ps in assignment.items() for p in ps)


@dataclass
class Client:
    """A well-behaved consumer unless `revokes` is False (then it never gives anything up)."""

    member_id: str = ""
    instance_id: str | None = None
    names: tuple[str, ...] | None = ("orders",)
    regex: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int = 30_000
    revokes: bool = True
    epoch: int = 0
    owned: frozenset[Partition] = field(default_factory=frozenset)
    given: frozenset[Partition] = field(default_factory=frozenset)
    """The last assignment received."""


class Sim:
    def __init__(
        self,
        partitions: Mapping[str, int] | None = None,
        settings: ConsumerGroupSettings | None = None,
    ) -> None:
        self.now_ms = 1_000
        counts = {"orders": 6} if partitions is None else partitions
        self.topics = {name: TopicInfo(topic_id(name), count) for name, count in counts.items()}
        counter = itertools.count(1)
        self.group = ConsumerGroup(
            "g", settings=settings, new_member_id=lambda: f"m{next(counter)}"
        )
        self.clients: dict[str, Client] = {}

    def set_partitions(self, name: str, count: int) -> None:
        self.topics = {**self.topics, name: TopicInfo(topic_id(name), count)}

    def join(self, name: str, **fields: object) -> HeartbeatResponse:
        self.clients[name] = Client(**fields)  # type: ignore[arg-type]
        return self.beat(name)

    def request(self, client: Client) -> HeartbeatRequest:
        # Like librdkafka: the first heartbeat is full, later ones only say what changed
        # (here: always the owned partitions, which a real client sends when they change).
        joining = client.epoch == 0
        return HeartbeatRequest(
            group_id="g",
            member_id=client.member_id,
            member_epoch=client.epoch,
            instance_id=client.instance_id,
            rebalance_timeout_ms=client.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=client.names if joining else None,
            subscribed_topic_regex=client.regex if joining else None,
            server_assignor=client.assignor if joining else None,
            topic_partitions=by_topic(client.owned),
        )

    def beat(self, name: str, **overrides: object) -> HeartbeatResponse:
        client = self.clients[name]
        request = replace(self.request(client), **overrides)  # type: ignore[arg-type]
        response = self.group.heartbeat(
            request, topics=self.topics, now_ms=self.now_ms, client_id=name, client_host="/10.0.0.1"
        )
        client.member_id, client.epoch = response.member_id, response.member_epoch
        if response.assignment is not None:
            client.given = flat(response.assignment)
            client.owned = client.given if client.revokes else client.owned | client.given
        self.check()
        return response

    def leave(self, name: str, epoch: int = -1) -> HeartbeatResponse:
        client = self.clients[name]
        response = self.beat(name, member_epoch=epoch)
        # A consumer revokes everything before it leaves.
        client.owned = frozenset()
        if epoch == -1:
            del self.clients[name]
        return response

    def expire(self) -> list[str]:
        removed = self.group.expire(self.now_ms)
        for name, client in list(self.clients.items()):
            if client.member_id in removed:
                del self.clients[name]
        self.check()
        return removed

    def tick(self, ms: int = 1_000) -> None:
        self.now_ms += ms

    def assigned(self, name: str) -> frozenset[Partition]:
        member = self.group.member(self.clients[name].member_id)
        assert member is not None
        return member.assigned

    def state(self, name: str) -> MemberState:
        member = self.group.member(self.clients[name].member_id)
        assert member is not None
        return member.state

    def check(self) -> None:
        group = self.group
        held: dict[Partition, str] = {}
        for member in group.members:
            for partition in member.held:
                assert partition not in held, f"{partition}: {held[partition]} and {member}"
                held[partition] = member.member_id
            assert member.member_epoch <= group.group_epoch
            assert member.assigned.isdisjoint(member.pending_revocation)
        owned: dict[Partition, str] = {}
        for name, client in self.clients.items():
            for partition in client.owned:
                assert partition not in owned, f"{partition} owned by {owned[partition]}, {name}"
                owned[partition] = name
        assert group.assignment_epoch == group.group_epoch, "targets are computed at once"

    def settled(self) -> bool:
        group = self.group
        if not self.clients:
            return group.state is GroupState.EMPTY
        return group.state is GroupState.STABLE and all(
            client.epoch == group.group_epoch and client.owned == self.assigned(name)
            for name, client in self.clients.items()
        )

    def converge(self, rounds_max: int = 10) -> int:
        """Rounds of heartbeats (at least one: the group learns of new topics only so)
        until the group is Stable and every consumer owns what the coordinator thinks."""
        for rounds in range(1, rounds_max + 1):
            self.tick()
            for name in sorted(self.clients):
                if self.clients[name].epoch >= 0:
                    self.beat(name)
            if self.settled():
                return rounds
        raise AssertionError(f"not converged after {rounds_max} rounds: {self.group.members}")


def error_of(call: object) -> ErrorCode:
    assert callable(call)
    with pytest.raises(GroupError) as caught:
        call()
    return caught.value.code


ORDERS_ALL = tp("orders", 0, 1, 2, 3, 4, 5)


# -- joining and converging ------------------------------------------------------------


def test_first_member_joins_and_gets_every_partition() -> None:
    sim = Sim()

    response = sim.join("a")

    assert response == HeartbeatResponse("m1", 1, HEARTBEAT_MS, by_topic(ORDERS_ALL))
    assert sim.group.state is GroupState.STABLE
    assert (sim.group.group_epoch, sim.group.assignment_epoch) == (1, 1)
    assert sim.group.assignor_name == "uniform"


def test_second_member_waits_until_the_first_has_revoked() -> None:
    sim = Sim()
    sim.join("a")
    sim.tick()

    joined = sim.join("b")

    # b's target is held by a: b gets nothing yet but moves to the new epoch.
    assert (joined.member_id, joined.member_epoch, joined.assignment) == ("m2", 2, {})
    assert sim.state("b") is MemberState.UNRELEASED_PARTITIONS
    assert sim.group.state is GroupState.RECONCILING
    assert sim.group.target("m1") == tp("orders", 0, 1, 2)
    assert sim.group.target("m2") == tp("orders", 3, 4, 5)
    assert sim.beat("b").assignment is None  # still nothing released

    revoke = sim.beat("a")
    assert (revoke.member_epoch, flat(revoke.assignment)) == (1, tp("orders", 0, 1, 2))
    assert sim.state("a") is MemberState.UNREVOKED_PARTITIONS
    member = sim.group.member("m1")
    assert member is not None and member.pending_revocation == tp("orders", 3, 4, 5)

    revoked = sim.beat("a")  # now reports owning only 0-2
    assert (revoked.member_epoch, revoked.assignment) == (2, None)
    assert sim.state("a") is MemberState.STABLE

    released = sim.beat("b")
    assert (released.member_epoch, flat(released.assignment)) == (2, tp("orders", 3, 4, 5))
    assert sim.group.view().state == "Stable"
    assert sim.settled()


def test_three_members_join_one_after_another_and_converge() -> None:
    sim = Sim()
    for name in ("a", "b", "c"):
        sim.join(name)
        sim.converge()

    assert sim.group.group_epoch == 3
    assert [len(sim.assigned(name)) for name in ("a", "b", "c")] == [2, 2, 2]
    assert frozenset().union(*(sim.assigned(name) for name in "abc")) == ORDERS_ALL


def test_members_joining_together_converge_to_a_balanced_assignment() -> None:
    sim = Sim({"orders": 7})
    for name in "abcd":
        sim.join(name)

    sim.converge()

    assert sorted(len(sim.assigned(name)) for name in "abcd") == [1, 2, 2, 2]


def test_v1_client_chooses_its_own_member_id() -> None:
    sim = Sim()

    response = sim.join("a", member_id="4f1c3c1e-own-id")

    assert response.member_id == "4f1c3c1e-own-id"
    assert sim.group.member("4f1c3c1e-own-id") is not None


def test_heartbeat_without_change_sends_no_assignment() -> None:
    sim = Sim()
    sim.join("a")
    sim.tick()

    response = sim.beat("a")

    assert response == HeartbeatResponse("m1", 1, HEARTBEAT_MS, None)
    assert sim.group.group_epoch == 1


def test_full_heartbeat_gets_the_assignment_again() -> None:
    sim = Sim()
    sim.join("a")

    response = sim.beat("a", rebalance_timeout_ms=30_000, subscribed_topic_names=("orders",))

    assert flat(response.assignment) == ORDERS_ALL
    assert sim.group.group_epoch == 1


def test_rejoin_with_epoch_zero_keeps_the_member_and_resends_its_assignment() -> None:
    sim = Sim()
    sim.join("a")
    a = sim.clients["a"]
    a.epoch, a.owned = 0, frozenset()  # say a lost track and rejoins, keeping its id

    response = sim.beat("a")

    assert (response.member_id, response.member_epoch) == ("m1", 1)
    assert flat(response.assignment) == ORDERS_ALL
    assert sim.group.group_epoch == 1


# -- leaving and expiring --------------------------------------------------------------


def test_member_leaves_and_the_other_takes_everything() -> None:
    sim = Sim()
    sim.join("a")
    sim.join("b")
    sim.converge()

    response = sim.leave("b")

    assert response == HeartbeatResponse("m2", -1, 0, None)
    assert sim.group.member("m2") is None
    assert sim.group.group_epoch == 3
    sim.converge()
    assert sim.assigned("a") == ORDERS_ALL


def test_last_member_leaving_empties_the_group() -> None:
    sim = Sim()
    sim.join("a")

    sim.leave("a")

    assert sim.group.state is GroupState.EMPTY and sim.group.is_empty
    assert sim.group.next_deadline_ms() is None


def test_silent_member_is_expired_after_the_session_timeout() -> None:
    sim = Sim()
    sim.join("a")
    sim.join("b")
    sim.converge()
    last_beat_ms = sim.now_ms
    epoch = sim.group.group_epoch

    for _ in range(8):  # a keeps heartbeating, b has gone quiet
        sim.tick(HEARTBEAT_MS)
        sim.beat("a")
        assert sim.expire() == []
    assert sim.group.next_deadline_ms() == last_beat_ms + SESSION_MS
    sim.tick(SESSION_MS - 8 * HEARTBEAT_MS)

    assert sim.expire() == ["m2"]
    assert sim.group.group_epoch == epoch + 1
    sim.converge()
    assert sim.assigned("a") == ORDERS_ALL


def test_member_that_does_not_revoke_is_removed_after_its_rebalance_timeout() -> None:
    sim = Sim()
    sim.join("a", rebalance_timeout_ms=10_000, revokes=False)
    sim.join("b")
    sim.beat("a")
    assert sim.state("a") is MemberState.UNREVOKED_PARTITIONS
    assert sim.group.next_deadline_ms() == sim.now_ms + 10_000

    for _ in range(9):  # a heartbeats but keeps everything; b waits
        sim.tick(1_000)
        sim.beat("a")
        sim.beat("b")
        assert sim.expire() == []
        assert sim.assigned("b") == frozenset()
    sim.tick(1_000)

    assert sim.expire() == ["m1"]
    sim.converge()
    assert sim.assigned("b") == ORDERS_ALL


def test_static_member_away_keeps_its_partitions_and_takes_them_back() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")
    sim.join("b", instance_id="host-b")
    sim.converge()
    epoch = sim.group.group_epoch
    reserved = sim.assigned("a")

    away = sim.leave("a", epoch=-2)

    assert away == HeartbeatResponse("m1", -2, 0, None)
    assert sim.group.group_epoch == epoch
    assert sim.group.state is GroupState.RECONCILING
    sim.tick()
    assert sim.beat("b").assignment is None  # a's partitions stay reserved
    assert sim.assigned("b").isdisjoint(reserved)

    # a restarts: a new process, a new member id, the same instance id.
    sim.clients["a"] = Client(member_id="a-restarted", instance_id="host-a")
    back = sim.beat("a")

    assert (back.member_id, back.member_epoch) == ("a-restarted", epoch)
    assert flat(back.assignment) == reserved
    assert sim.group.group_epoch == epoch
    assert sim.group.member("m1") is None
    assert sim.group.view().state == "Stable"


def test_static_member_rejoining_with_an_empty_member_id_gets_a_new_one() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")
    sim.leave("a", epoch=-2)
    sim.clients["a"] = Client(instance_id="host-a")

    back = sim.beat("a")

    assert (back.member_id, back.member_epoch) == ("m2", 1)
    assert flat(back.assignment) == ORDERS_ALL


def test_static_member_away_too_long_is_removed() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")
    sim.join("b", instance_id="host-b")
    sim.converge()
    epoch = sim.group.group_epoch
    sim.leave("a", epoch=-2)
    left_ms = sim.now_ms

    removed: list[str] = []
    while not removed:
        sim.tick(HEARTBEAT_MS)
        sim.beat("b")
        removed = sim.expire()

    assert removed == ["m1"]
    assert left_ms + SESSION_MS <= sim.now_ms < left_ms + SESSION_MS + HEARTBEAT_MS
    assert sim.group.group_epoch == epoch + 1
    sim.converge()
    assert sim.assigned("b") == ORDERS_ALL


def test_static_member_changing_its_subscription_on_rejoin_bumps_the_epoch() -> None:
    sim = Sim({"orders": 2, "payments": 2})
    sim.join("a", instance_id="host-a")
    sim.leave("a", epoch=-2)
    sim.clients["a"] = Client(instance_id="host-a", names=("payments",))

    back = sim.beat("a")

    assert sim.group.group_epoch == 2
    # It must first report that it no longer owns its old partitions: it never did.
    assert flat(back.assignment) == tp("payments", 0, 1)


# -- refusals --------------------------------------------------------------------------


def test_instance_id_in_use_is_unreleased() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")

    code = error_of(lambda: sim.join("intruder", instance_id="host-a"))

    assert code is ErrorCode.unreleased_instance_id


def test_instance_id_of_another_member_is_fenced() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")
    sim.join("b", instance_id="host-b")
    b = sim.clients["b"]

    code = error_of(lambda: sim.beat("b", instance_id="host-a", member_epoch=b.epoch))

    assert code is ErrorCode.fenced_instance_id
    assert sim.leave("b", epoch=-2).member_epoch == -2  # b itself still may


def test_unknown_instance_id_is_an_unknown_member() -> None:
    sim = Sim()
    sim.join("a")

    code = error_of(lambda: sim.beat("a", instance_id="host-x"))

    assert code is ErrorCode.unknown_member_id


def test_unknown_member_id_is_refused() -> None:
    sim = Sim()
    sim.join("a")

    assert error_of(lambda: sim.beat("a", member_id="ghost")) is ErrorCode.unknown_member_id
    assert error_of(lambda: sim.beat("a", member_id="ghost", member_epoch=-1)) is (
        ErrorCode.unknown_member_id
    )


def test_greater_or_older_epoch_is_fenced() -> None:
    sim = Sim()
    sim.join("a")
    sim.join("b")
    sim.converge()  # a went 1 -> 2, b is at 2

    assert error_of(lambda: sim.beat("a", member_epoch=3)) is ErrorCode.fenced_member_epoch
    assert error_of(lambda: sim.beat("b", member_epoch=1)) is ErrorCode.fenced_member_epoch


def test_previous_epoch_after_a_lost_response_gets_the_assignment_again() -> None:
    sim = Sim()
    sim.join("a")
    sim.join("b")
    sim.beat("a")  # told to revoke 3-5
    sim.beat("a")  # revoked: now at epoch 2, but say that response was lost
    a = sim.clients["a"]
    assert (a.epoch, sim.group.member("m1").previous_member_epoch) == (2, 1)  # type: ignore[union-attr]

    response = sim.beat("a", member_epoch=1)

    assert (response.member_epoch, flat(response.assignment)) == (2, tp("orders", 0, 1, 2))
    # Only with a subset of its assignment, and only with its owned partitions.
    stale = by_topic(ORDERS_ALL)
    code = error_of(lambda: sim.beat("a", member_epoch=1, topic_partitions=stale))
    assert code is ErrorCode.fenced_member_epoch
    code = error_of(lambda: sim.beat("a", member_epoch=1, topic_partitions=None))
    assert code is ErrorCode.fenced_member_epoch


def test_unsupported_assignor_is_refused() -> None:
    sim = Sim()

    code = error_of(lambda: sim.join("a", assignor="sticky"))

    assert code is ErrorCode.unsupported_assignor
    assert sim.group.is_empty


def test_group_refuses_new_members_beyond_its_size() -> None:
    sim = Sim(settings=ConsumerGroupSettings(max_size=1))
    sim.join("a", instance_id="host-a")

    assert error_of(lambda: sim.join("b")) is ErrorCode.group_max_size_reached
    # A static member taking its own place does not grow the group.
    sim.clients.pop("b")
    sim.leave("a", epoch=-2)
    sim.clients["a"] = Client(instance_id="host-a")
    assert sim.beat("a").member_epoch == 1


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"rebalance_timeout_ms": -1}, ErrorCode.invalid_request),
        ({"subscribed_topic_names": None}, ErrorCode.invalid_request),
        ({"topic_partitions": {topic_id("orders"): (0,)}}, ErrorCode.invalid_request),
        ({"instance_id": ""}, ErrorCode.invalid_request),
        ({"rack_id": ""}, ErrorCode.invalid_request),
        ({"member_epoch": -3}, ErrorCode.invalid_request),
        ({"member_epoch": 4}, ErrorCode.invalid_request),  # no member id
        ({"member_epoch": -2}, ErrorCode.invalid_request),  # not static
        ({"subscribed_topic_regex": "orders("}, ErrorCode.invalid_regular_expression),
    ],
)
def test_malformed_heartbeats_are_refused(changes: dict[str, object], code: ErrorCode) -> None:
    sim = Sim()
    sim.clients["a"] = Client()

    assert error_of(lambda: sim.beat("a", **changes)) is code
    assert sim.group.is_empty


# -- what bumps the group epoch ------------------------------------------------------


def test_new_partitions_of_a_subscribed_topic_bump_the_epoch() -> None:
    sim = Sim()
    sim.join("a")
    sim.set_partitions("orders", 8)

    response = sim.beat("a")

    assert sim.group.group_epoch == 2
    assert (response.member_epoch, flat(response.assignment)) == (2, tp("orders", *range(8)))


def test_unsubscribed_topics_do_not_bump_the_epoch() -> None:
    sim = Sim()
    sim.join("a")
    sim.set_partitions("audit", 3)

    sim.beat("a")

    assert sim.group.group_epoch == 1


def test_topic_appearing_later_is_assigned_then() -> None:
    sim = Sim()
    sim.join("a", names=("orders", "payments"))
    sim.set_partitions("payments", 2)

    response = sim.beat("a")

    assert flat(response.assignment) == ORDERS_ALL | tp("payments", 0, 1)


def test_deleted_topic_is_revoked() -> None:
    sim = Sim({"orders": 2, "payments": 2})
    sim.join("a", names=("orders", "payments"))
    sim.topics = {"orders": sim.topics["orders"]}

    response = sim.beat("a")

    assert flat(response.assignment) == tp("orders", 0, 1)
    sim.converge()
    assert sim.assigned("a") == tp("orders", 0, 1)


def test_regex_subscription_picks_up_a_new_topic() -> None:
    sim = Sim({"logs-a": 2, "other": 1})
    sim.join("a", names=None, regex="logs-.*")
    assert sim.assigned("a") == tp("logs-a", 0, 1)
    sim.set_partitions("logs-b", 1)
    sim.set_partitions("xlogs-c", 1)  # fullmatch, not search

    response = sim.beat("a")

    assert sim.group.group_epoch == 2
    assert flat(response.assignment) == tp("logs-a", 0, 1) | tp("logs-b", 0)


def test_clearing_the_regex_and_naming_topics_moves_the_subscription() -> None:
    sim = Sim({"logs-a": 2, "other": 1})
    sim.join("a", names=None, regex="logs-.*")

    sim.beat("a", subscribed_topic_regex="", subscribed_topic_names=("other",))
    sim.converge()

    assert sim.assigned("a") == tp("other", 0)
    member = sim.group.member("m1")
    assert member is not None and member.subscribed_topic_regex is None


def test_range_assignor_chosen_by_the_members() -> None:
    sim = Sim({"a": 3, "b": 3})
    sim.join("x", names=("a", "b"), assignor="range")
    sim.join("y", names=("a", "b"), assignor="range")

    sim.converge()

    assert sim.group.assignor_name == "range"
    assert sim.assigned("x") == tp("a", 0, 1) | tp("b", 0, 1)
    assert sim.assigned("y") == tp("a", 2) | tp("b", 2)
    assert sim.group.view().protocol == "range"


def test_switching_assignor_bumps_the_epoch() -> None:
    sim = Sim()
    sim.join("a")

    sim.beat("a", server_assignor="range")

    assert (sim.group.assignor_name, sim.group.group_epoch) == ("range", 2)


def test_reordered_subscription_is_no_change() -> None:
    sim = Sim({"orders": 1, "payments": 1})
    sim.join("a", names=("orders", "payments"))

    sim.beat("a", subscribed_topic_names=("payments", "orders", "orders"))

    assert sim.group.group_epoch == 1


# -- offsets, describe, view, delete ----------------------------------------------------


def test_offset_requests_must_come_from_a_current_member() -> None:
    sim = Sim()
    sim.join("a")
    group = sim.group

    assert group.validate_commit("m1", 1) is ErrorCode.none
    assert group.validate_commit("m1", 2) is ErrorCode.stale_member_epoch
    assert group.validate_commit("m1", 0) is ErrorCode.stale_member_epoch
    assert group.validate_commit("ghost", 1) is ErrorCode.unknown_member_id
    assert group.validate_fetch("m1", 1) is ErrorCode.none
    assert group.validate_fetch("m1", 5) is ErrorCode.stale_member_epoch
    assert group.validate_fetch("ghost", 1) is ErrorCode.unknown_member_id


def test_describe_shows_epochs_members_and_both_assignments() -> None:
    sim = Sim()
    sim.join("a", instance_id="host-a")
    sim.join("b")

    described = sim.group.describe()

    assert (described.group_id, described.state) == ("g", "Reconciling")
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.assignor == "uniform"
    a, b = described.members
    assert (a.member_id, a.instance_id, a.client_id, a.member_epoch) == ("m1", "host-a", "a", 1)
    assert (b.member_id, b.instance_id, b.client_id, b.member_epoch) == ("m2", None, "b", 2)
    assert a.subscribed_topic_names == ("orders",)
    assert a.subscribed_topic_regex is None
    orders = topic_id("orders")
    assert a.assignment == (AssignedTopic(orders, "orders", (0, 1, 2, 3, 4, 5)),)
    assert a.target_assignment == (AssignedTopic(orders, "orders", (0, 1, 2)),)
    assert b.assignment == ()
    assert b.target_assignment == (AssignedTopic(orders, "orders", (3, 4, 5)),)


def test_view_shows_what_each_member_holds() -> None:
    sim = Sim()
    sim.join("a")
    sim.join("b")
    sim.beat("a")  # a must revoke 3-5 but has not reported it yet

    view = sim.group.view()

    orders = [("orders", p) for p in range(6)]
    assert view == GroupView(
        group_id="g",
        kind="consumer",
        state="Reconciling",
        protocol_type="consumer",
        protocol="uniform",
        generation=2,
        members=(
            MemberView("m1", None, "a", "/10.0.0.1", tuple(orders)),
            MemberView("m2", None, "b", "/10.0.0.1", ()),
        ),
    )


def test_only_an_empty_group_can_be_deleted_and_a_dead_one_refuses_everything() -> None:
    sim = Sim()
    sim.join("a")
    assert error_of(sim.group.delete) is ErrorCode.non_empty_group
    sim.leave("a")

    sim.group.delete()

    assert sim.group.state is GroupState.DEAD
    assert sim.group.expire(sim.now_ms + 10 * SESSION_MS) == []
    assert error_of(lambda: sim.join("b")) is ErrorCode.group_id_not_found
    assert error_of(sim.group.delete) is ErrorCode.group_id_not_found
    assert error_of(sim.group.describe) is ErrorCode.group_id_not_found


def test_transition_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(GroupState)
    assert not TRANSITIONS[GroupState.DEAD].leads_to
    for row in TRANSITIONS.values():
        assert row.leads_to <= set(GroupState)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="assignors"):
        ConsumerGroupSettings(assignors=("sticky",))
    with pytest.raises(ValueError, match="max_size"):
        ConsumerGroupSettings(max_size=0)


# -- random schedules ------------------------------------------------------------------

NAMES = tuple("abcde")

actions = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(NAMES)),
    st.tuples(st.just("beat"), st.sampled_from(NAMES)),
    st.tuples(st.just("beat"), st.sampled_from(NAMES)),
    st.tuples(st.just("leave"), st.sampled_from(NAMES)),
    st.tuples(st.just("away"), st.sampled_from(NAMES)),
    st.tuples(st.just("stubborn"), st.sampled_from(NAMES)),
    st.tuples(st.just("tick"), st.integers(0, 20_000)),
    st.tuples(st.just("grow"), st.sampled_from(("orders", "payments"))),
)


def apply(sim: Sim, action: tuple[str, object]) -> None:
    kind, arg = action
    client = sim.clients.get(str(arg))
    if kind == "join" and (client is None or client.epoch == -2):
        # Even names are static members; an away one comes back as a new process.
        instance_id = f"host-{arg}" if NAMES.index(str(arg)) % 2 == 0 else None
        names = ("orders", "payments") if str(arg) in "ab" else ("orders",)
        sim.join(str(arg), instance_id=instance_id, names=names, rebalance_timeout_ms=15_000)
    elif kind == "beat" and client is not None and client.epoch >= 0:
        sim.beat(str(arg))
    elif kind == "leave" and client is not None and client.epoch >= 0:
        sim.leave(str(arg))
    elif kind == "away" and client is not None and client.epoch >= 0 and client.instance_id:
        sim.leave(str(arg), epoch=-2)
    elif kind == "stubborn" and client is not None:
        client.revokes = not client.revokes
    elif kind == "tick":
        assert isinstance(arg, int)
        sim.tick(arg)
        sim.expire()
    elif kind == "grow":
        info = sim.topics.get(str(arg))
        sim.set_partitions(str(arg), min(12, (info.partitions if info else 0) + 1))


@settings(max_examples=150, deadline=None)
@given(st.lists(actions, max_size=60))
def test_random_schedules_never_double_assign_and_always_converge(
    schedule: list[tuple[str, object]],
) -> None:
    sim = Sim({"orders": 4})
    for action in schedule:
        apply(sim, action)

    # Calm returns: everyone behaves and comes back, and the group must settle.
    for name, client in list(sim.clients.items()):
        client.revokes, client.owned = True, client.given  # a stubborn one finally revokes
        if client.epoch == -2:
            sim.clients[name] = Client(instance_id=client.instance_id, names=client.names)
            sim.beat(name)
    sim.converge(rounds_max=6)

    held = [sim.assigned(name) for name in sim.clients]
    assert all(
        sim.group.target(sim.clients[name].member_id) == sim.assigned(name) for name in sim.clients
    )
    if any(client.names == ("orders",) for client in sim.clients.values()):
        assert frozenset().union(*held) >= tp("orders", *range(sim.topics["orders"].partitions))
    same = [len(sim.assigned(n)) for n, c in sim.clients.items() if c.names == ("orders",)]
    assert not same or max(same) - min(same) <= 1
