"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

In the new protocol the coordinator, not a group leader, decides who consumes what. An
assignor is a pure function of three inputs and returns the *target* assignment:

    subscriptions   member id -> topic names it subscribes to (names and resolved regexes)
    partitions      topic name -> partition count, for every topic that exists
    current         member id -> (topic, partition) pairs of the previous target

Topics that do not exist (absent from `partitions`) are ignored, every partition of a
subscribed topic goes to exactly one member subscribed to it, and every member of
`subscriptions` gets an entry (possibly empty). The same inputs always give the same
output: members, topics and partitions are visited in sorted order, never in set order.

``uniform`` (Kafka's default) balances the *number* of partitions per member and is sticky:
a member keeps what it had as far as balance allows, because every move costs a
revocation on one consumer and a cold start on another. When every member has the same
subscription (the usual case) quotas are exact: with P partitions and N members each gets
P // N, and the P % N members that already hold the most get one more, so an assignment
that is already balanced comes back unchanged. With different subscriptions the
partitions are handed out greedily (fewest candidates first, to the least loaded
candidate) and then moved one at a time from a member to a less loaded one that may take
it, while that narrows a gap of two or more. Each move lowers the sum of squared loads,
so this ends; when it ends, two members with the same subscription differ by at most one
partition (either could take any of the other's).

``range`` (Kafka's RangeAssignor) works topic by topic: the members subscribed to a topic,
sorted by member id, each get a contiguous run of its partitions, the first P % N one
more. Topics with the same partition count and the same subscribers (co-partitioned
topics) therefore land together: partition k of each goes to the same member, which is
what a join of two keyed topics needs. It ignores `current`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Set
from typing import Final, Protocol

from ..types import TopicPartition

Assignment = dict[str, frozenset[TopicPartition]]
"""Member id -> the partitions assigned to it."""


class Assignor(Protocol):
    """What a server-side assignor is: a pure function, see the module docstring."""

    def __call__(
        self,
        subscriptions: Mapping[str, Set[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, Set[TopicPartition]],
    ) -> Assignment: ...


def assign_uniform(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """Balance partition counts across members, keeping current assignments where possible."""
    wanted = _existing_subscriptions(subscriptions, partitions)
    kept = _kept(wanted, partitions, current)
    if len(set(wanted.values())) <= 1:
        result = _uniform_same_subscriptions(wanted, partitions, kept)
    else:
        result = _uniform_mixed_subscriptions(wanted, partitions, kept)
    return {member: frozenset(assigned) for member, assigned in result.items()}


def assign_range(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """Per topic, a contiguous range of partitions to each subscriber in member-id order."""
    del current  # a range assignment depends only on who subscribes to what
    wanted = _existing_subscriptions(subscriptions, partitions)
    result: dict[str, set[TopicPartition]] = {member: set() for member in wanted}
    for topic in sorted(partitions):
        subscribers = sorted(member for member, topics in wanted.items() if topic in topics)
        if not subscribers:
            continue
        base, extra = divmod(partitions[topic], len(subscribers))
        start = 0
        for index, member in enumerate(subscribers):
            count = base + (1 if index < extra else 0)
            result[member].update(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return {member: frozenset(assigned) for member, assigned in result.items()}


ASSIGNORS: Final[Mapping[str, Assignor]] = {"uniform": assign_uniform, "range": assign_range}
"""The assignors a group may name in ConsumerGroupHeartbeat's server_assignor."""


def _existing_subscriptions(
    subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int]
) -> dict[str, frozenset[str]]:
    """Each member's subscription, without topics that do not exist (yet)."""
    return {
        member: frozenset(topic for topic in topics if partitions.get(topic, 0) > 0)
        for member, topics in sorted(subscriptions.items())
    }


def _kept(
    wanted: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """What each member may keep of `current`: still subscribed, still existing, not claimed
    twice (a duplicate goes to the first member in id order)."""
    claimed: set[TopicPartition] = set()
    kept: dict[str, list[TopicPartition]] = {}
    for member, topics in wanted.items():
        keep = []
        for tp in sorted(current.get(member, ())):
            topic, partition = tp
            if topic in topics and 0 <= partition < partitions[topic] and tp not in claimed:
                claimed.add(tp)
                keep.append(tp)
        kept[member] = keep
    return kept


def _all_partitions(topics: Set[str], partitions: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in sorted(topics) for p in range(partitions[topic])]


def _uniform_same_subscriptions(
    wanted: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
    kept: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    if not wanted:
        return {}
    topics = next(iter(wanted.values()))
    everything = _all_partitions(topics, partitions)
    base, extra = divmod(len(everything), len(wanted))
    # The one-more quotas go to the members that already hold the most: fewer moves.
    by_holding = sorted(wanted, key=lambda member: (-len(kept[member]), member))
    quota = {member: base + (1 if rank < extra else 0) for rank, member in enumerate(by_holding)}
    result = {member: kept[member][: quota[member]] for member in wanted}
    taken = {tp for assigned in result.values() for tp in assigned}
    # Round robin rather than runs, so that each topic is spread over the members.
    room = deque(member for member in wanted if len(result[member]) < quota[member])
    for tp in everything:
        if tp in taken:
            continue
        member = room.popleft()
        result[member].append(tp)
        if len(result[member]) < quota[member]:
            room.append(member)
    assert not room, "quotas add up to the partition count"
    return result


def _uniform_mixed_subscriptions(
    wanted: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
    kept: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    subscribers = {
        topic: sorted(member for member, topics in wanted.items() if topic in topics)
        for topic in sorted(frozenset[str]().union(*wanted.values()))
    }
    result = {member: list(kept[member]) for member in wanted}
    taken = {tp for assigned in result.values() for tp in assigned}
    free = [tp for tp in _all_partitions(set(subscribers), partitions) if tp not in taken]
    # Partitions with the fewest candidates first: the others can still go anywhere.
    for tp in sorted(free, key=lambda tp: (len(subscribers[tp[0]]), tp)):
        member = min(subscribers[tp[0]], key=lambda m: (len(result[m]), m))
        result[member].append(tp)
    _balance(result, subscribers)
    return result


def _balance(result: dict[str, list[TopicPartition]], subscribers: Mapping[str, list[str]]) -> None:
    """Move single partitions to less loaded members until no move narrows a gap of 2+."""
    # Each move lowers the sum of squared loads by at least 2: a bound, and a proof it ends.
    moves_max = sum(len(assigned) ** 2 for assigned in result.values())
    for _ in range(moves_max + 1):
        move = _find_move(result, subscribers)
        if move is None:
            return
        tp, source, destination = move
        result[source].remove(tp)
        result[destination].append(tp)
    raise AssertionError("uniform assignor: balancing did not converge")


def _find_move(
    result: Mapping[str, list[TopicPartition]], subscribers: Mapping[str, list[str]]
) -> tuple[TopicPartition, str, str] | None:
    """The first (from the most loaded member) partition that a member with at least two
    fewer partitions may take, and the least loaded such member; None if there is none."""
    for source in sorted(result, key=lambda member: (-len(result[member]), member)):
        load = len(result[source])
        for tp in sorted(result[source], reverse=True):
            candidates = [m for m in subscribers[tp[0]] if len(result[m]) + 1 < load]
            if candidates:
                return tp, source, min(candidates, key=lambda m: (len(result[m]), m))
    return None
