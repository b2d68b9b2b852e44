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
(``groups config``, ``groups alter``, ``groups configs``) are Kafka's
IncrementalAlterConfigs and DescribeConfigs on the GROUP resource.

Broker errors become one line and exit code 1 (3 when no broker answers), as in every
client command; an unknown group is "group 'x' does not exist".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    check_partitions,
    client_command_settings,
    error_for,
    json_option,
    kafka_errors,
    topic_metadata,
    wait_for,
)
from weirmq.cli.offsets import (
    PartitionFacts,
    PlanError,
    Reset,
    ResetTarget,
    TopicSelection,
    parse_time_ms,
    parse_topic_selection,
    plan_resets,
    plan_to_json,
)
from weirmq.cli.output import (
    Column,
    note,
    parsed_by,
    plural,
    print_json,
    print_line,
    print_table,
    progress,
    progress_wanted,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from weirmq.cli.kafka_admin import AdminClient, ConsumerGroupDescription, OffsetSpec

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
    """List, describe, reset the offsets of and delete consumer groups."""


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


# -- reset-offsets -----------------------------------------------------------------------------

# Above this many partitions a reset draws a progress bar while it lists their offsets.
RESET_PROGRESS_PARTITIONS_MIN = 50
# What OffsetCommit answers for a group that got members between our check and the commit.
ACTIVE_GROUP_ERRORS = frozenset(
    {"UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "NON_EMPTY_GROUP"}
)


def _selections_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    try:
        return [parse_topic_selection(text) for text in value]
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@groups.command("reset-offsets", **client_command_settings())
@click.argument("group")
@click.option("--to-earliest", is_flag=True, help="To the oldest offset of each partition.")
@click.option("--to-latest", is_flag=True, help="To the end of each partition (skip everything).")
@click.option(
    "--to-timestamp",
    "to_timestamp",
    metavar="TIME",
    callback=parsed_by(parse_time_ms),
    help="To the first record at or after TIME (ms since the epoch, or ISO 8601, "
    "UTC unless given).",
)
@click.option(
    "--to-offset",
    type=click.IntRange(min=0),
    metavar="N",
    help="To offset N (clamped to the partition's earliest and latest).",
)
@click.option(
    "--shift-by", type=int, metavar="N", help="By N from the committed offset (negative: back)."
)
@click.option(
    "--topic",
    "selections",
    metavar="TOPIC[:P,P...]",
    multiple=True,
    callback=_selections_callback,
    help="Reset this topic, all its partitions or the ones named (repeatable).",
)
@click.option(
    "--all-topics", is_flag=True, help="Reset every partition the group has committed offsets for."
)
@click.option("--dry-run", is_flag=True, help="Only show the plan (the default).")
@click.option("--execute", is_flag=True, help="Apply the plan.")
@bootstrap_option
@json_option
def reset_offsets_command(
    group: str,
    to_earliest: bool,
    to_latest: bool,
    to_timestamp: int | None,
    to_offset: int | None,
    shift_by: int | None,
    selections: list[TopicSelection],
    all_topics: bool,
    dry_run: bool,
    execute: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Move the committed offsets of group GROUP (shows the plan; --execute applies it).

    As kafka-consumer-groups.sh --reset-offsets (rpk group seek): the group must have no
    members, so stop its consumers first. A group that does not exist yet gets the
    offsets, which is how a new group is made to start somewhere.
    """
    target = _reset_target(to_earliest, to_latest, to_timestamp, to_offset, shift_by)
    if bool(selections) == all_topics:
        raise click.UsageError("give --topic TOPIC[:P,P...] (repeatable) or --all-topics")
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute cannot be used together")
    admin = admin_client(bootstrap)
    _check_inactive(admin, group, bootstrap)
    committed = _committed(admin, group, bootstrap)
    if all_topics:
        keys = _committed_keys(admin, group, committed, bootstrap)
    else:
        keys = _selected_keys(admin, selections, bootstrap)
    facts = _partition_facts(admin, keys, committed, target, bootstrap)
    try:
        plan = plan_resets(target, facts)
    except PlanError as exc:
        raise CommandError(str(exc)) from None
    if execute:
        _apply(admin, group, plan, bootstrap)
    _report_resets(group, target, plan, execute, as_json)


def _reset_target(
    to_earliest: bool,
    to_latest: bool,
    to_timestamp: int | None,
    to_offset: int | None,
    shift_by: int | None,
) -> ResetTarget:
    given = [
        ResetTarget("earliest") if to_earliest else None,
        ResetTarget("latest") if to_latest else None,
        ResetTarget("timestamp", to_timestamp) if to_timestamp is not None else None,
        ResetTarget("offset", to_offset) if to_offset is not None else None,
        ResetTarget("shift", shift_by) if shift_by is not None else None,
    ]
    chosen = [target for target in given if target is not None]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-timestamp, --to-offset, "
            "--shift-by"
        )
    return chosen[0]


def _check_inactive(admin: AdminClient, group: str, bootstrap: Bootstrap) -> None:
    """CommandError if the group has members: they would commit over the reset (Kafka's
    tool refuses too). A group that does not exist is fine: it gets the offsets."""
    futures = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
    try:
        description = wait_for(futures[group], f"cannot describe group {group!r}", bootstrap)
    except CommandError as exc:
        if exc.error_name == GROUP_ID_NOT_FOUND:
            return
        if SHARE_GROUP_REFUSAL in str(exc):
            raise CommandError(
                f"group {group!r} is a share group: it has no offsets to reset"
            ) from None
        raise
    if description.members:
        raise _active_group(group, len(description.members), state_name(description.state))


def _active_group(group: str, members: int | None, state: str | None) -> CommandError:
    has = f"has {members} active member{'' if members == 1 else 's'}" if members else "is active"
    during = f" ({state})" if state else ""
    return CommandError(
        f"group {group!r} {has}{during}: offsets can only be reset while it has no members; "
        "stop its consumers first",
        "NON_EMPTY_GROUP",
    )


def _committed_keys(
    admin: AdminClient, group: str, committed: dict[TopicPartitionKey, int], bootstrap: Bootstrap
) -> list[TopicPartitionKey]:
    """--all-topics: the partitions with committed offsets that still exist."""
    if not committed:
        raise CommandError(
            f"group {group!r} has no committed offsets: name the topics with --topic"
        )
    existing = _existing(admin, committed, bootstrap)
    gone = sorted(set(committed) - set(existing))
    if gone:
        names = ", ".join(f"{topic}-{partition}" for topic, partition in gone)
        note(f"skipped partitions that no longer exist: {names}")
    return sorted(existing)


def _selected_keys(
    admin: AdminClient, selections: list[TopicSelection], bootstrap: Bootstrap
) -> list[TopicPartitionKey]:
    """--topic: every partition of each topic, or the ones named (which must exist)."""
    keys: set[TopicPartitionKey] = set()
    for selection in selections:
        existing = topic_metadata(admin, selection.topic, bootstrap).partitions
        wanted = selection.partitions if selection.partitions is not None else existing
        check_partitions(selection.topic, wanted, existing)
        keys.update((selection.topic, number) for number in wanted)
    return sorted(keys)


def _partition_facts(
    admin: AdminClient,
    keys: list[TopicPartitionKey],
    committed: dict[TopicPartitionKey, int],
    target: ResetTarget,
    bootstrap: Bootstrap,
) -> dict[TopicPartitionKey, PartitionFacts]:
    """Earliest and latest offsets of each partition (and the offset at the time, for
    --to-timestamp): ListOffsets requests all in flight at once."""
    from weirmq.cli.kafka_admin import at_time, earliest, latest

    specs = [earliest, latest]
    if target.strategy == "timestamp":
        specs.append(lambda: at_time(target.value))
    enabled = progress_wanted() and len(keys) >= RESET_PROGRESS_PARTITIONS_MIN
    with progress("listing offsets", enabled=enabled, total=len(keys) * len(specs)) as advance:
        found = [_list_offsets(admin, keys, spec, bootstrap, advance) for spec in specs]
    return {
        key: PartitionFacts(
            earliest=found[0][key],
            latest=found[1][key],
            committed=committed.get(key),
            at_time=found[2][key] if len(found) > 2 else None,
        )
        for key in keys
    }


def _list_offsets(
    admin: AdminClient,
    keys: list[TopicPartitionKey],
    spec: Callable[[], OffsetSpec],
    bootstrap: Bootstrap,
    advance: Callable[[float], None],
) -> dict[TopicPartitionKey, int]:
    from confluent_kafka import TopicPartition

    wanted = {TopicPartition(topic, partition): spec() for topic, partition in keys}
    futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
    found = {}
    for tp, future in futures.items():
        doing = f"cannot list the offsets of topic {tp.topic!r}"
        found[tp.topic, tp.partition] = wait_for(future, doing, bootstrap, tp.topic).offset
        advance(1)
    return found


def _apply(admin: AdminClient, group: str, plan: list[Reset], bootstrap: Bootstrap) -> None:
    """Commit the new offsets (OffsetCommit as an admin, outside any generation)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if not plan:
        return
    offsets = [TopicPartition(reset.topic, reset.partition, reset.new) for reset in plan]
    request = [ConsumerGroupTopicPartitions(group, offsets)]
    futures = admin.alter_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)
    doing = f"cannot reset the offsets of group {group!r}"
    try:
        result = wait_for(futures[group], doing, bootstrap)
    except CommandError as exc:
        if exc.error_name in ACTIVE_GROUP_ERRORS:
            raise _active_group(group, None, None) from None
        raise
    for tp in result.topic_partitions or []:
        if tp.error is None:
            continue
        if tp.error.name() in ACTIVE_GROUP_ERRORS:
            raise _active_group(group, None, None)
        raise error_for(tp.error, f"{doing} on {tp.topic}-{tp.partition}", bootstrap, tp.topic)


def _report_resets(
    group: str, target: ResetTarget, plan: list[Reset], executed: bool, as_json: bool
) -> None:
    if as_json:
        print_json(plan_to_json(group, target, plan, executed))
    elif plan:
        print_table(
            [
                Column("TOPIC"),
                Column("PARTITION", "right"),
                Column("CURRENT-OFFSET", "right"),
                Column("NEW-OFFSET", "right"),
            ],
            [(r.topic, str(r.partition), _or_none(r.current), str(r.new)) for r in plan],
        )
    where = f"{plural(len(plan), 'partition')} to {target.describe()}"
    if executed:
        note(f"reset group {group} on {where}")
    else:
        note(f"dry run: would reset group {group} on {where}; --execute applies it")


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

    if not (configs or deleted):
        raise click.UsageError("nothing to alter: give --config or --delete-config")
    try:
        wanted = dict(parse_assignments(configs, "--config"))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    _alter_configs(group, wanted, deleted, bootstrap)
    if as_json:
        print_json({"group": group, "set": wanted, "deleted": list(deleted)})
        return
    changes = [f"{key}={value}" for key, value in wanted.items()]
    changes += [f"{key} back to its default" for key in deleted]
    print_line(f"Altered group {group}: {', '.join(changes)}.")


def _alter_configs(
    group: str, wanted: dict[str, str], deleted: tuple[str, ...], bootstrap: Bootstrap
) -> None:
    """IncrementalAlterConfigs on the GROUP resource: SET `wanted`, DELETE `deleted`."""
    from weirmq.cli.kafka_admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in wanted.items()
    ] + [ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE) for key in deleted]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = admin_client(bootstrap)
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    wait_for(future, f"cannot alter the configs of group {group!r}", bootstrap, group)


@groups.command("configs", **client_command_settings())
@click.argument("group")
@bootstrap_option
@json_option
def configs_command(group: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Show the configs of group GROUP: each value and where it comes from."""
    _show_configs(group, bootstrap, as_json)


def _show_configs(group: str, bootstrap: Bootstrap, as_json: bool) -> None:
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
