"""``weirmq groups``: list, describe, alter and delete groups through the Kafka admin API
(confluent-kafka's AdminClient), as kafka-consumer-groups.sh and kafka-share-groups.sh do.

Theory of operation: as in topics.py, each command first gathers what it reports into plain
data (exactly the ``--json`` shape of docs/cli.md), then prints that data either as JSON or
as tables, so the two outputs cannot disagree.

Everything comes from Kafka requests that any Kafka broker answers, never from WeirMQ's
internals: ListGroups for the list, DescribeGroups (ConsumerGroupDescribe for KIP-848
groups) for the members and the partitions each owns, OffsetFetch for the committed
offsets and ListOffsets for the log end offsets. The lag is computed here, log end offset
minus committed offset, as Kafka's tool computes it. The offsets and the log ends are two
requests, not one snapshot: on a busy partition the lag is a moment's estimate.

Share groups (KIP-932) are the exception: librdkafka has no ShareGroupDescribe (its
ListGroups asks for consumer and classic groups only, and DescribeGroups refuses a share
group), so they are listed and described from the broker's admin API (``--admin-url``),
which shows their delivery state per partition too. ``groups list`` includes them only
when given ``--admin-url``: the default address could be another broker's. Group configs
(``groups alter``, ``groups configs``) are Kafka's IncrementalAlterConfigs and
DescribeConfigs on the GROUP resource.

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
    admin_request,
    admin_url_option,
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
GROUP_CONFIG_SOURCE = 8
SHARE_GROUP_REFUSAL = "(share)"
"""How librdkafka's DescribeGroups refusal names a share group ("GroupId g is not a
consumer group (share).")."""
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
@click.option("--admin-url", default=None, envvar="WEIRMQ_ADMIN_URL", metavar="URL",
              help="The broker's admin API: share groups are listed only from it.")  # fmt: skip
@json_option
def list_command(bootstrap: Bootstrap, admin_url: str | None, as_json: bool) -> None:
    """List the groups: type, state and number of members (share groups with
    --admin-url)."""
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
    if admin_url is not None:
        found = sorted(found + _share_groups(admin_url), key=lambda group: group["group"])
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


def _share_groups(admin_url: str) -> list[dict[str, Any]]:
    """The share groups, from the admin API."""
    listed = admin_request(admin_url, "GET", "/api/v1/groups")
    return [
        {
            "group": group["group_id"],
            "type": "share",
            "state": group["state"],
            "members": group["member_count"],
        }
        for group in listed["groups"]
        if group["kind"] == "share"
    ]


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
@admin_url_option("share groups are described from it")
@json_option
def describe_command(group: str, bootstrap: Bootstrap, admin_url: str, as_json: bool) -> None:
    """Show group GROUP: members, offsets and lag.

    One row per partition the group has committed an offset for or owns: the committed
    offset, the log end offset, the lag and the member that owns it. For a share group,
    one row per partition it reads: its records by delivery state.
    """
    admin = admin_client(bootstrap)
    try:
        description = _describe(admin, group, bootstrap)
    except CommandError as exc:
        if SHARE_GROUP_REFUSAL not in str(exc):
            raise
        _describe_share(group, admin_url, as_json)
        return
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


def _describe_share(group: str, admin_url: str, as_json: bool) -> None:
    try:
        found = admin_request(admin_url, "GET", f"/api/v1/groups/{_quoted(group)}")
    except CommandError as exc:
        if exc.error_name != GROUP_ID_NOT_FOUND:
            raise
        raise CommandError(
            f"share group {group!r} is not known to the admin API at {admin_url}; "
            "set --admin-url to the admin API of the broker at --bootstrap",
            GROUP_ID_NOT_FOUND,
        ) from None
    if found.get("kind") != "share":
        raise CommandError(
            f"the admin API at {admin_url} knows {group!r} as a {found.get('kind')} group; "
            "set --admin-url to the admin API of the broker at --bootstrap"
        )
    document = {
        "group": group,
        "type": "share",
        "state": found["state"],
        "members": [
            {
                "member_id": member["member_id"],
                "client_id": member["client_id"],
                "host": member["client_host"],
                "assignment": member["assignment"],
            }
            for member in found["members"]
        ],
        "partitions": [dict(partition) for partition in found["share_partitions"]],
    }
    if as_json:
        print_json(document)
        return
    members = document["members"]
    count = len(members)
    print_line(
        f"Group {group} (share): {document['state']}, {count} member{'' if count == 1 else 's'}"
    )
    if document["partitions"]:
        print_line("")
        print_table(
            [
                Column("TOPIC"),
                Column("PARTITION", "right"),
                Column("START-OFFSET", "right"),
                Column("LOG-END-OFFSET", "right"),
                Column("AVAILABLE", "right"),
                Column("ACQUIRED", "right"),
                Column("DEAD-LETTERED", "right"),
                Column("OLDEST-UNACKED-MS", "right"),
            ],
            [
                (
                    p["topic"],
                    str(p["partition"]),
                    str(p["start_offset"]),
                    str(p["high_watermark"]),
                    str(p["available"]),
                    str(p["acquired"]),
                    str(p["dead_lettered"]),
                    _or_none(p["oldest_unacknowledged_age_ms"]),
                )
                for p in document["partitions"]
            ],
        )
    if members:
        print_line("")
        print_table(
            [Column("CONSUMER-ID"), Column("HOST"), Column("CLIENT-ID"), Column("ASSIGNMENT")],
            [
                (
                    m["member_id"],
                    m["host"],
                    m["client_id"],
                    ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]) or NONE,
                )
                for m in members
            ],
        )


def _quoted(group: str) -> str:
    import urllib.parse

    return urllib.parse.quote(group, safe="")


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


# -- configs -----------------------------------------------------------------------------------


@groups.command("alter", **client_command_settings())
@click.argument("group")
@click.option("--config", "configs", metavar="KEY=VALUE", multiple=True,
              help="A group config, e.g. share.delivery.count.limit=3 (repeatable).")  # fmt: skip
@click.option("--delete-config", "deleted", metavar="KEY", multiple=True,
              help="Return a config to its default (repeatable).")  # fmt: skip
@bootstrap_option
@json_option
def alter_command(
    group: str, configs: tuple[str, ...], deleted: tuple[str, ...], bootstrap: Bootstrap,
    as_json: bool,
) -> None:  # fmt: skip
    """Change the configs of group GROUP (it need not exist yet).

    Configs change incrementally: the ones not named keep their values. See
    docs/queues.md for the share group configs (lock duration, delivery limit, dead-letter
    topic, ...).
    """
    from weirmq.cli.formats import parse_assignments
    from weirmq.cli.kafka_admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    if not (configs or deleted):
        raise click.UsageError("nothing to alter: give --config or --delete-config")
    try:
        wanted = dict(parse_assignments(configs, "--config"))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in wanted.items()
    ] + [ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE) for key in deleted]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = admin_client(bootstrap)
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    wait_for(future, f"cannot alter the configs of group {group!r}", bootstrap, group)
    if as_json:
        print_json({"group": group, "set": wanted, "deleted": list(deleted)})
        return
    changes = [f"{key}={value}" for key, value in wanted.items()]
    changes += [f"{key} back to its default" for key in deleted]
    print_line(f"Altered group {group}: {', '.join(changes)}.")


@groups.command("configs", **client_command_settings())
@click.argument("group")
@bootstrap_option
@json_option
def configs_command(group: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Show the configs of group GROUP: each value and where it comes from."""
    from weirmq.cli.kafka_admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.GROUP, group)
    admin = admin_client(bootstrap)
    futures = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    found = wait_for(future, f"cannot describe the configs of group {group!r}", bootstrap, group)
    entries = [
        {"name": entry.name, "value": entry.value, "source": _source_name(entry.source)}
        for entry in sorted(found.values(), key=lambda entry: entry.name)
    ]
    if as_json:
        print_json({"group": group, "configs": entries})
        return
    print_table(
        [Column("CONFIG"), Column("VALUE"), Column("SOURCE")],
        [(e["name"], e["value"] if e["value"] is not None else NONE, e["source"]) for e in entries],
    )


def _source_name(source: Any) -> str:
    """Where a value comes from, in `topics describe`'s words; ``group`` for the group's
    own value (Kafka's GROUP_CONFIG, 8, for which librdkafka's enum has no name)."""
    from weirmq.cli.kafka_admin import ConfigSource
    from weirmq.cli.topics import CONFIG_SOURCES

    number = int(getattr(source, "value", source))
    if number == GROUP_CONFIG_SOURCE:
        return "group"
    try:
        name = ConfigSource(number).name
    except ValueError:
        return str(number)
    return CONFIG_SOURCES.get(name, name.lower())


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
