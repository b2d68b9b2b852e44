"""``weirmq groups``: list, describe and delete consumer groups through the Kafka admin API
(confluent-kafka's AdminClient), as kafka-consumer-groups.sh does.

Theory of operation: as in topics.py, each command first gathers what it reports into plain
data (exactly the ``--json`` shape of docs/cli.md), then prints that data either as JSON or
as tables, so the two outputs cannot disagree.

Everything comes from Kafka requests that any Kafka broker answers, never from WeirMQ's
internals: ListGroups for the list, DescribeGroups (ConsumerGroupDescribe for KIP-848
groups) for the members and the partitions each owns, OffsetFetch for the committed
offsets and ListOffsets for the log end offsets. The lag is computed here, log end offset
minus committed offset, as Kafka's tool computes it. The offsets and the log ends are two
requests, not one snapshot: on a busy partition the lag is a moment's estimate.

Broker errors become one line and exit code 1 (3 when no broker answers), as in every
client command; an unknown group is "group 'x' does not exist".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from weirmq.cli.clients import (
    REQUEST_TIMEOUT_S,
    Bootstrap,
    CommandError,
    admin_client,
    bootstrap_option,
    client_command_settings,
    error_for,
    json_option,
    kafka_errors,
    wait_for,
)
from weirmq.cli.output import Column, note, print_json, print_line, print_table

if TYPE_CHECKING:
    from concurrent.futures import Future

    from weirmq.cli.kafka_admin import AdminClient, ConsumerGroupDescription

T = TypeVar("T")
TopicPartitionKey = tuple[str, int]

GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
# What ListOffsets says of a partition deleted (with its topic) after the group committed
# to it: its log end is then unknown, which is not an error of the command.
GONE_PARTITION_ERRORS = frozenset(
    {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC", "_NOENT"}
)
# librdkafka's ConsumerGroupState names -> Kafka's state names (what Kafka's tools print).
STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
NONE = "-"  # how a table shows a value that does not exist, as kafka-consumer-groups.sh does


@click.group()
def groups() -> None:
    """List, describe and delete consumer groups."""


# -- list --------------------------------------------------------------------------------------


@groups.command("list", **client_command_settings())
@bootstrap_option
@json_option
def list_command(bootstrap: Bootstrap, as_json: bool) -> None:
    """List the consumer groups: type, state and number of members."""
    admin = admin_client(bootstrap)
    listings = sorted(_listings(admin, bootstrap), key=lambda listing: listing.group_id)
    members = _member_counts(admin, [listing.group_id for listing in listings], bootstrap)
    found = [
        {
            "group": listing.group_id,
            "type": type_name(listing.type),
            "state": state_name(listing.state),
            "members": members[listing.group_id],
        }
        for listing in listings
        if listing.group_id in members
    ]
    if as_json:
        print_json({"groups": found})
    elif not found:
        note("no groups")
    else:
        columns = [Column("GROUP"), Column("TYPE"), Column("STATE"), Column("MEMBERS", "right")]
        rows = [(g["group"], g["type"], g["state"], str(g["members"])) for g in found]
        print_table(columns, rows)


def _listings(admin: AdminClient, bootstrap: Bootstrap) -> list[Any]:
    from confluent_kafka import KafkaException

    doing = "cannot list groups"
    future = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S)
    result = wait_for(future, doing, bootstrap)
    if result.errors:  # a broker that did not answer its part of the list
        first = result.errors[0]
        error = first.args[0] if isinstance(first, KafkaException) else first
        raise error_for(error, doing, bootstrap)
    return list(result.valid)


def _member_counts(
    admin: AdminClient, group_ids: list[str], bootstrap: Bootstrap
) -> dict[str, int]:
    """Members of each group; a group deleted since it was listed is left out."""
    if not group_ids:
        return {}
    futures = admin.describe_consumer_groups(group_ids, request_timeout=REQUEST_TIMEOUT_S)
    counts = {}
    for group_id, future in futures.items():
        try:
            description = _wait(future, f"cannot describe group {group_id!r}", bootstrap, group_id)
        except CommandError as exc:
            if exc.error_name != GROUP_ID_NOT_FOUND:
                raise
            continue
        if state_name(description.state) != "Dead":
            counts[group_id] = len(description.members)
    return counts


# -- describe ----------------------------------------------------------------------------------


@groups.command("describe", **client_command_settings())
@click.argument("group")
@bootstrap_option
@json_option
def describe_command(group: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Show consumer group GROUP: members, offsets and lag.

    One row per partition the group has committed an offset for or owns: the committed
    offset, the log end offset, the lag and the member that owns it.
    """
    admin = admin_client(bootstrap)
    description = _describe(admin, group, bootstrap)
    members = [_member_to_json(member) for member in description.members]
    owners = {
        (tp["topic"], tp["partition"]): member["member_id"]
        for member in members
        for tp in member["assignment"]
    }
    committed = _committed(admin, group, bootstrap)
    keys = sorted(set(committed) | set(owners))
    ends = _log_ends(admin, keys, bootstrap)
    document = {
        "group": group,
        "type": type_name(description.type),
        "state": state_name(description.state),
        "protocol": description.partition_assignor or None,
        "members": members,
        "partitions": [
            _partition_to_json(key, committed.get(key), ends.get(key), owners.get(key))
            for key in keys
        ],
    }
    if as_json:
        print_json(document)
    else:
        print_description(document)


def _describe(admin: AdminClient, group: str, bootstrap: Bootstrap) -> ConsumerGroupDescription:
    """The group's description; CommandError if there is no such group (Kafka describes an
    unknown group as Dead; a KIP-848 broker may answer GROUP_ID_NOT_FOUND instead)."""
    futures = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
    doing = f"cannot describe group {group!r}"
    description: ConsumerGroupDescription = _wait(futures[group], doing, bootstrap, group)
    if state_name(description.state) == "Dead":
        raise CommandError(f"group {group!r} does not exist", GROUP_ID_NOT_FOUND)
    return description


def _committed(
    admin: AdminClient, group: str, bootstrap: Bootstrap
) -> dict[TopicPartitionKey, int]:
    """Every committed offset of the group (OffsetFetch for all its partitions)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    futures = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)
    doing = f"cannot fetch the offsets of group {group!r}"
    result = _wait(futures[group], doing, bootstrap, group)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions or []
        if tp.error is None and tp.offset >= 0  # librdkafka's -1001: nothing committed
    }


def _log_ends(
    admin: AdminClient, keys: Iterable[TopicPartitionKey], bootstrap: Bootstrap
) -> dict[TopicPartitionKey, int]:
    """Log end offset of each partition that still exists (ListOffsets, latest).

    A group keeps offsets of partitions that may be gone (a deleted topic); those have no
    log end. They are left out of the request, not merely tolerated in the answer:
    librdkafka fails a whole ListOffsets in which no partition has a leader.
    """
    from confluent_kafka import TopicPartition

    from weirmq.cli.kafka_admin import latest

    wanted = {TopicPartition(t, p): latest() for t, p in _existing(admin, keys, bootstrap)}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[tp.topic, tp.partition] = wait_for(future, "cannot list offsets", bootstrap).offset
        except CommandError as exc:  # deleted since the metadata was read
            if exc.error_name not in GONE_PARTITION_ERRORS:
                raise
    return ends


def _existing(
    admin: AdminClient, keys: Iterable[TopicPartitionKey], bootstrap: Bootstrap
) -> list[TopicPartitionKey]:
    with kafka_errors("cannot list topics", bootstrap):
        topics = admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics
    return [(t, p) for t, p in keys if t in topics and p in topics[t].partitions]


def _member_to_json(member: Any) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "host": member.host,
        "assignment": [
            {"topic": tp.topic, "partition": tp.partition}
            for tp in sorted(
                member.assignment.topic_partitions, key=lambda tp: (tp.topic, tp.partition)
            )
        ],
    }


def _partition_to_json(
    key: TopicPartitionKey, committed: int | None, end: int | None, owner: str | None
) -> dict[str, Any]:
    return {
        "topic": key[0],
        "partition": key[1],
        "current_offset": committed,
        "log_end_offset": end,
        "lag": end - committed if committed is not None and end is not None else None,
        "member_id": owner,
    }


def print_description(document: dict[str, Any]) -> None:
    """The ``describe`` document for people: a line about the group, then one row per
    partition (and per member that owns none), as kafka-consumer-groups.sh prints them."""
    members = document["members"]
    count = len(members)
    summary = f"{document['state']}, {count} member{'' if count == 1 else 's'}"
    if document["protocol"]:
        summary += f", assignor {document['protocol']}"
    print_line(f"Group {document['group']} ({document['type']}): {summary}")
    by_id = {member["member_id"]: member for member in members}
    rows = [_partition_row(partition, by_id) for partition in document["partitions"]]
    # Members that own nothing still get a line, as in kafka-consumer-groups.sh.
    owning = {partition["member_id"] for partition in document["partitions"]}
    rows += [
        (NONE, NONE, NONE, NONE, NONE, member["member_id"], member["host"], member["client_id"])
        for member in members
        if member["member_id"] not in owning
    ]
    if not rows:
        note(f"group {document['group']!r} has no members and no committed offsets")
        return
    print_line("")
    print_table(
        [
            Column("TOPIC"),
            Column("PARTITION", "right"),
            Column("CURRENT-OFFSET", "right"),
            Column("LOG-END-OFFSET", "right"),
            Column("LAG", "right"),
            Column("CONSUMER-ID"),
            Column("HOST"),
            Column("CLIENT-ID"),
        ],
        rows,
    )


def _partition_row(partition: dict[str, Any], members: dict[str, Any]) -> tuple[str, ...]:
    member = members.get(partition["member_id"])
    return (
        partition["topic"],
        str(partition["partition"]),
        _or_none(partition["current_offset"]),
        _or_none(partition["log_end_offset"]),
        _or_none(partition["lag"]),
        member["member_id"] if member else NONE,
        member["host"] if member else NONE,
        member["client_id"] if member else NONE,
    )


# -- delete ------------------------------------------------------------------------------------


@groups.command("delete", **client_command_settings())
@click.argument("group")
@bootstrap_option
@json_option
def delete_command(group: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Delete consumer group GROUP and its committed offsets.

    The group must have no members: stop its consumers first.
    """
    admin = admin_client(bootstrap)
    futures = admin.delete_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
    _wait(futures[group], f"cannot delete group {group!r}", bootstrap, group)
    if as_json:
        print_json({"group": group, "deleted": True})
    else:
        print_line(f"Deleted group {group}.")


# -- shared ------------------------------------------------------------------------------------


def _wait(future: Future[T], doing: str, bootstrap: Bootstrap, group: str) -> T:
    """``wait_for``, with an unknown group said plainly."""
    try:
        return wait_for(future, doing, bootstrap)
    except CommandError as exc:
        if exc.error_name != GROUP_ID_NOT_FOUND:
            raise
        raise CommandError(f"group {group!r} does not exist", GROUP_ID_NOT_FOUND) from None


def state_name(state: Any) -> str:
    """Kafka's name of a librdkafka ConsumerGroupState."""
    name = getattr(state, "name", str(state))
    return STATE_NAMES.get(name, name.title())


def type_name(group_type: Any) -> str:
    """``classic``, ``consumer`` (KIP-848) or ``unknown``."""
    return str(getattr(group_type, "name", group_type)).lower()


def _or_none(value: int | None) -> str:
    return NONE if value is None else str(value)
