"""The server-side assignors: examples, then properties over random groups."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set

from hypothesis import given
from hypothesis import strategies as st

from weirmq.groups.assignors import (
    ASSIGNORS,
    Assignment,
    TopicPartition,
    assign_range,
    assign_uniform,
)

TOPICS = ("a", "b", "c", "d")
MEMBERS = tuple(f"m{i}" for i in range(7))


def tps(topic: str, *partitions: int) -> set[TopicPartition]:
    return {(topic, p) for p in partitions}


def test_both_assignors_are_registered_by_their_kafka_names() -> None:
    assert dict(ASSIGNORS) == {"uniform": assign_uniform, "range": assign_range}


def test_uniform_spreads_each_topic_over_the_members() -> None:
    subscriptions = {"m1": {"a", "b"}, "m2": {"a", "b"}}

    result = assign_uniform(subscriptions, {"a": 4, "b": 4}, {})

    assert result == {"m1": tps("a", 0, 2) | tps("b", 0, 2), "m2": tps("a", 1, 3) | tps("b", 1, 3)}


def test_uniform_new_member_takes_only_the_surplus() -> None:
    current = {"m1": tps("a", 0, 1, 2), "m2": tps("a", 3, 4, 5)}
    subscriptions = {"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}

    result = assign_uniform(subscriptions, {"a": 6}, current)

    assert result["m1"] <= current["m1"] and result["m2"] <= current["m2"]
    assert [len(result[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]


def test_uniform_ignores_topics_that_do_not_exist_and_keeps_empty_members() -> None:
    result = assign_uniform({"m1": {"a", "ghost"}, "m2": {"ghost"}}, {"a": 2}, {})

    assert result == {"m1": tps("a", 0, 1), "m2": frozenset()}


def test_uniform_drops_current_partitions_that_are_gone_or_no_longer_subscribed() -> None:
    current = {"m1": tps("a", 0, 1, 7) | tps("b", 0)}

    result = assign_uniform({"m1": {"a"}}, {"a": 2, "b": 1}, current)

    assert result == {"m1": tps("a", 0, 1)}


def test_range_gives_contiguous_runs_and_keeps_co_partitioned_topics_together() -> None:
    subscriptions = {"m2": {"a", "b"}, "m1": {"a", "b"}}

    result = assign_range(subscriptions, {"a": 3, "b": 3}, {})

    assert result == {"m1": tps("a", 0, 1) | tps("b", 0, 1), "m2": tps("a", 2) | tps("b", 2)}


def test_range_counts_only_the_subscribers_of_each_topic() -> None:
    result = assign_range({"m1": {"a"}, "m2": {"a", "b"}}, {"a": 4, "b": 2}, {})

    assert result == {"m1": tps("a", 0, 1), "m2": tps("a", 2, 3) | tps("b", 0, 1)}


# -- properties ------------------------------------------------------------------------


@st.composite
def groups(
    draw: st.DrawFn, *, same_subscription: bool = False
) -> tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]]:
    partitions = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12)))
    members = draw(st.lists(st.sampled_from(MEMBERS), min_size=1, unique=True))
    # "ghost" stands for a subscribed topic that does not exist yet.
    names = st.frozensets(st.sampled_from((*TOPICS, "ghost")))
    if same_subscription:
        shared = draw(names)
        subscriptions = {member: shared for member in members}
    else:
        subscriptions = {member: draw(names) for member in members}
    # Any current assignment, even an invalid one: partitions twice, gone, unsubscribed.
    anything = st.tuples(st.sampled_from((*TOPICS, "ghost")), st.integers(0, 14))
    current = draw(st.dictionaries(st.sampled_from(MEMBERS), st.frozensets(anything)))
    return subscriptions, partitions, current


def assert_valid(
    result: Assignment, subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int]
) -> None:
    assert result.keys() == subscriptions.keys()
    owners = Counter(tp for assigned in result.values() for tp in assigned)
    assert all(count == 1 for count in owners.values()), "a partition assigned twice"
    for member, assigned in result.items():
        assert all(topic in subscriptions[member] for topic, _ in assigned)
    subscribed = set().union(*subscriptions.values())
    expected = {(t, p) for t, count in partitions.items() if t in subscribed for p in range(count)}
    assert set(owners) == expected


def loads_by_subscription(
    result: Assignment, subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int]
) -> list[list[int]]:
    """Loads of members grouped by their subscription to existing topics."""
    classes: dict[frozenset[str], list[int]] = {}
    for member, topics in subscriptions.items():
        existing = frozenset(t for t in topics if partitions.get(t, 0) > 0)
        classes.setdefault(existing, []).append(len(result[member]))
    return list(classes.values())


@given(groups())
def test_uniform_assigns_every_partition_once_and_balances_equal_subscribers(
    group: tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]],
) -> None:
    subscriptions, partitions, current = group

    result = assign_uniform(subscriptions, partitions, current)

    assert_valid(result, subscriptions, partitions)
    for loads in loads_by_subscription(result, subscriptions, partitions):
        assert max(loads) - min(loads) <= 1


@given(groups())
def test_uniform_is_deterministic_and_sticky(
    group: tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]],
) -> None:
    subscriptions, partitions, current = group
    first = assign_uniform(subscriptions, partitions, current)

    # Another insertion order of the same inputs changes nothing.
    reordered = dict(reversed(list(subscriptions.items())))
    assert assign_uniform(reordered, dict(reversed(list(partitions.items()))), current) == first
    # Nothing changed since the last assignment: nothing moves.
    assert assign_uniform(subscriptions, partitions, first) == first


@given(groups(same_subscription=True))
def test_uniform_with_one_subscription_moves_only_what_balance_requires(
    group: tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]],
) -> None:
    subscriptions, partitions, current = group
    before = assign_uniform(subscriptions, partitions, current)
    newcomer = next((m for m in MEMBERS if m not in subscriptions), None)
    if newcomer is None:
        return
    grown = {**subscriptions, newcomer: next(iter(subscriptions.values()))}

    after = assign_uniform(grown, partitions, before)

    assert_valid(after, grown, partitions)
    loads = [len(assigned) for assigned in after.values()]
    assert max(loads) - min(loads) <= 1
    floor = sum(loads) // len(grown)
    for member, assigned in before.items():
        assert len(after[member] & assigned) >= min(len(assigned), floor)


@given(groups())
def test_range_assigns_contiguous_balanced_runs_per_topic(
    group: tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]],
) -> None:
    subscriptions, partitions, current = group

    result = assign_range(subscriptions, partitions, current)

    assert_valid(result, subscriptions, partitions)
    for topic, count in partitions.items():
        subscribers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        runs = [sorted(p for t, p in result[m] if t == topic) for m in subscribers]
        # In member-id order, each run starts where the previous one ended.
        assert [p for run in runs for p in run] == list(range(count if subscribers else 0))
        sizes = [len(run) for run in runs]
        assert not sizes or max(sizes) - min(sizes) <= 1
    assert assign_range(subscriptions, partitions, {}) == result


@given(groups(same_subscription=True))
def test_range_puts_co_partitioned_topics_together(
    group: tuple[dict[str, frozenset[str]], dict[str, int], dict[str, frozenset[TopicPartition]]],
) -> None:
    subscriptions, _, current = group
    partitions = dict.fromkeys(TOPICS, 5)

    result = assign_range(subscriptions, partitions, current)

    owner = {tp: member for member, assigned in result.items() for tp in assigned}
    topics = sorted(next(iter(subscriptions.values())) - {"ghost"})
    for topic in topics[1:]:
        assert all(owner[(topic, p)] == owner[(topics[0], p)] for p in range(5))
