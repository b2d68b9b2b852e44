"""``weirmq topics``: list, create, describe, alter and delete topics through the Kafka admin
API (confluent-kafka's AdminClient), as any Kafka tool would.

Theory of operation: each command first gathers what it reports into plain data (dicts and
lists, exactly the ``--json`` shape of docs/cli.md), then prints that data either as JSON or
as tables. So the two outputs cannot disagree, and the JSON is what the tests parse back.

Broker errors come back per topic, through futures; ``wait_for`` turns each into one line
and exit code 1 (3 when no broker answers). ``--if-not-exists`` and ``--if-exists`` turn the
one expected error into success, for idempotent scripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from weirmq.cli.clients import (
    REQUEST_TIMEOUT_S,
    Bootstrap,
    CommandError,
    admin_client,
    bootstrap_option,
    check_partitions,
    client_command_settings,
    json_option,
    kafka_errors,
    topic_metadata,
    wait_for,
)
from weirmq.cli.formats import parse_assignments
from weirmq.cli.offsets import parse_time_ms, parse_trim_offset
from weirmq.cli.output import (
    Column,
    note,
    parsed_by,
    plural,
    print_json,
    print_line,
    print_table,
    report_deleted,
)

if TYPE_CHECKING:
    from weirmq.cli.kafka_admin import AdminClient, ConfigEntry, TopicMetadata

UNKNOWN_TOPIC = "UNKNOWN_TOPIC_OR_PART"

# Short names for where a config value comes from (librdkafka's ConfigSource names).
CONFIG_SOURCES = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "cluster",
    "STATIC_BROKER_CONFIG": "broker config file",
    "DEFAULT_CONFIG": "default",
    "UNKNOWN_CONFIG": "unknown",
}


def _configs_callback(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> Any:
    try:
        return dict(parse_assignments(value, "--config"))
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


config_option = click.option(
    "--config",
    "configs",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_configs_callback,
    help="A topic config, e.g. retention.ms=86400000 (repeatable).",
)


@click.group()
def topics() -> None:
    """List, create, describe, alter, trim and delete topics."""


# -- list --------------------------------------------------------------------------------------


@topics.command("list", **client_command_settings())
@bootstrap_option
@json_option
def list_command(bootstrap: Bootstrap, as_json: bool) -> None:
    """List the topics and their partition counts."""
    admin = admin_client(bootstrap)
    with kafka_errors("cannot list topics", bootstrap):
        metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    found = [(name, len(topic.partitions)) for name, topic in sorted(metadata.topics.items())]
    if as_json:
        print_json({"topics": [{"name": name, "partitions": count} for name, count in found]})
    elif not found:
        note("no topics")
    else:
        rows = [(name, str(count)) for name, count in found]
        print_table([Column("TOPIC"), Column("PARTITIONS", "right")], rows)


# -- create ------------------------------------------------------------------------------------


@topics.command("create", **client_command_settings())
@click.argument("name")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="Number of partitions [default: the broker's default_partitions].",
)
@config_option
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic already exists.")
@bootstrap_option
@json_option
def create_command(
    name: str,
    partitions: int | None,
    configs: dict[str, str],
    if_not_exists: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Create topic NAME."""
    from weirmq.cli.kafka_admin import NewTopic

    admin = admin_client(bootstrap)
    # -1 asks the broker for its default partition count (KIP-464).
    new_topic = NewTopic(name, num_partitions=partitions or -1, config=configs)
    futures = admin.create_topics([new_topic], request_timeout=REQUEST_TIMEOUT_S)
    created = True
    try:
        wait_for(futures[name], f"cannot create topic {name!r}", bootstrap, name)
    except CommandError as exc:
        if not (if_not_exists and exc.error_name == "TOPIC_ALREADY_EXISTS"):
            raise
        created = False
    count = len(topic_metadata(admin, name, bootstrap).partitions)
    if as_json:
        print_json({"name": name, "created": created, "partitions": count})
    elif created:
        print_line(f"Created topic {name} with {plural(count, 'partition')}.")
    else:
        note(f"topic {name!r} already exists")


# -- describe ----------------------------------------------------------------------------------


@topics.command("describe", **client_command_settings())
@click.argument("name")
@bootstrap_option
@json_option
def describe_command(name: str, bootstrap: Bootstrap, as_json: bool) -> None:
    """Show topic NAME: partitions, offsets, configs.

    Each partition with its earliest and latest offsets; then every config of the topic,
    those marked * differing from their default.
    """
    admin = admin_client(bootstrap)
    metadata = topic_metadata(admin, name, bootstrap)
    partitions = _partitions(admin, metadata, bootstrap)
    configs = _configs(admin, name, bootstrap)
    description = {"name": name, "partitions": partitions, "configs": configs}
    if as_json:
        print_json(description)
    else:
        _print_description(description)


def _partitions(
    admin: AdminClient, metadata: TopicMetadata, bootstrap: Bootstrap
) -> list[dict[str, Any]]:
    name = metadata.topic or ""
    earliest, latest = _offsets(admin, name, sorted(metadata.partitions), bootstrap)
    return [
        {
            "partition": number,
            "leader": partition.leader,
            "replicas": list(partition.replicas),
            "isr": list(partition.isrs),
            "earliest_offset": earliest[number],
            "latest_offset": latest[number],
        }
        for number, partition in sorted(metadata.partitions.items())
    ]


def _offsets(
    admin: AdminClient, topic: str, numbers: list[int], bootstrap: Bootstrap
) -> tuple[dict[int, int], dict[int, int]]:
    """Earliest and latest offset of each partition: two ListOffsets requests in flight."""
    from confluent_kafka import TopicPartition

    from weirmq.cli.kafka_admin import earliest, latest

    doing = f"cannot list the offsets of topic {topic!r}"
    found: list[dict[int, int]] = []
    requests = [
        admin.list_offsets(
            {TopicPartition(topic, number): spec for number in numbers},
            request_timeout=REQUEST_TIMEOUT_S,
        )
        for spec in (earliest(), latest())
    ]
    for futures in requests:
        found.append(
            {
                partition.partition: wait_for(future, doing, bootstrap, topic).offset
                for partition, future in futures.items()
            }
        )
    return found[0], found[1]


def _configs(admin: AdminClient, name: str, bootstrap: Bootstrap) -> dict[str, dict[str, Any]]:
    from weirmq.cli.kafka_admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, name)
    futures = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    entries = wait_for(future, f"cannot describe the configs of topic {name!r}", bootstrap, name)
    return {entry.name: _config_to_json(entry) for entry in sorted(entries.values(), key=_name)}


def _name(entry: ConfigEntry) -> str:
    return entry.name


def _config_to_json(entry: ConfigEntry) -> dict[str, Any]:
    from weirmq.cli.kafka_admin import ConfigSource

    return {
        "value": entry.value,
        "default": entry.is_default,
        "source": ConfigSource(entry.source).name,
        "read_only": entry.is_read_only,
        "sensitive": entry.is_sensitive,
    }


def _print_description(description: dict[str, Any]) -> None:
    partitions = description["partitions"]
    print_line(f"Topic {description['name']}: {plural(len(partitions), 'partition')}")
    print_line("")
    print_table(
        [
            Column("PARTITION", "right"),
            Column("LEADER", "right"),
            Column("REPLICAS"),
            Column("ISR"),
            Column("EARLIEST", "right"),
            Column("LATEST", "right"),
        ],
        [_partition_row(partition) for partition in partitions],
    )
    print_line("")
    configs = description["configs"]
    print_table(
        [Column(""), Column("CONFIG"), Column("VALUE"), Column("SOURCE")],
        [_config_row(name, config) for name, config in configs.items()],
    )
    if any(not config["default"] for config in configs.values()):
        print_line("")
        print_line("* not the default value")


def _partition_row(partition: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(partition["partition"]),
        str(partition["leader"]),
        ",".join(map(str, partition["replicas"])),
        ",".join(map(str, partition["isr"])),
        str(partition["earliest_offset"]),
        str(partition["latest_offset"]),
    )


def _config_row(name: str, config: dict[str, Any]) -> tuple[str, ...]:
    if config["sensitive"]:
        value = "(sensitive)"
    else:
        value = "(null)" if config["value"] is None else config["value"]
    source = CONFIG_SOURCES.get(config["source"], config["source"].lower())
    return ("" if config["default"] else "*", name, value, source)


# -- alter -------------------------------------------------------------------------------------


@topics.command("alter", **client_command_settings())
@click.argument("name")
@config_option
@click.option(
    "--delete-config",
    "deleted",
    metavar="KEY",
    multiple=True,
    help="Return a config to its default (repeatable).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="Raise the number of partitions to this (it can only grow).",
)
@bootstrap_option
@json_option
def alter_command(
    name: str,
    configs: dict[str, str],
    deleted: tuple[str, ...],
    partitions: int | None,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Change the configs or the partition count of topic NAME.

    Configs change incrementally: the ones not named keep their values.
    """
    if not (configs or deleted or partitions):
        raise click.UsageError("nothing to alter: give --config, --delete-config or --partitions")
    admin = admin_client(bootstrap)
    if configs or deleted:
        _alter_configs(admin, name, configs, deleted, bootstrap)
    if partitions:
        _raise_partitions(admin, name, partitions, bootstrap)
    if as_json:
        print_json(
            {"name": name, "set": configs, "deleted": list(deleted), "partitions": partitions}
        )
    else:
        print_line(f"Altered topic {name}: {_changes(configs, deleted, partitions)}.")


def _alter_configs(
    admin: AdminClient,
    name: str,
    configs: dict[str, str],
    deleted: tuple[str, ...],
    bootstrap: Bootstrap,
) -> None:
    from weirmq.cli.kafka_admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in configs.items()
    ] + [ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE) for key in deleted]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    wait_for(future, f"cannot alter the configs of topic {name!r}", bootstrap, name)


def _raise_partitions(admin: AdminClient, name: str, count: int, bootstrap: Bootstrap) -> None:
    from weirmq.cli.kafka_admin import NewPartitions

    new_partitions = [NewPartitions(name, count)]
    futures = admin.create_partitions(new_partitions, request_timeout=REQUEST_TIMEOUT_S)
    wait_for(futures[name], f"cannot raise the partitions of topic {name!r}", bootstrap, name)


def _changes(configs: dict[str, str], deleted: tuple[str, ...], partitions: int | None) -> str:
    changes = [f"{key}={value}" for key, value in configs.items()]
    changes += [f"{key} back to its default" for key in deleted]
    if partitions:
        changes.append(f"{plural(partitions, 'partition')}")
    return ", ".join(changes)


# -- trim --------------------------------------------------------------------------------------


@topics.command("trim", **client_command_settings())
@click.argument("name")
@click.option(
    "--before",
    "before_offset",
    metavar="OFFSET|end",
    callback=parsed_by(parse_trim_offset),
    help="Delete the records below OFFSET in each chosen partition (end: all).",
)
@click.option(
    "--before-timestamp",
    "before_ms",
    metavar="TIME",
    callback=parsed_by(parse_time_ms),
    help="Delete the records older than TIME (ms since the epoch, or ISO 8601, UTC unless given).",
)
@click.option(
    "--partition",
    "-p",
    "partitions",
    type=click.IntRange(min=0),
    metavar="N",
    multiple=True,
    help="Trim only this partition (repeatable) [default: all].",
)
@bootstrap_option
@json_option
def trim_command(
    name: str,
    before_offset: int | None,
    before_ms: int | None,
    partitions: tuple[int, ...],
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Delete the oldest records of topic NAME, up to an offset or a time.

    Kafka's DeleteRecords (kafka-delete-records.sh): each partition's start (its low
    watermark) moves up; the records below it are gone for every reader. Runs at once,
    without asking.
    """
    if (before_offset is None) == (before_ms is None):
        raise click.UsageError("give --before OFFSET or --before-timestamp TIME")
    admin = admin_client(bootstrap)
    existing = topic_metadata(admin, name, bootstrap).partitions
    check_partitions(name, partitions, existing)
    chosen = sorted(set(partitions)) if partitions else sorted(existing)
    previous, _ = _offsets(admin, name, chosen, bootstrap)
    if before_ms is not None:
        targets = _offsets_at(admin, name, chosen, before_ms, bootstrap)
    else:
        assert before_offset is not None
        targets = dict.fromkeys(chosen, before_offset)
    low = _delete_records(admin, name, targets, bootstrap)
    rows = [
        {"partition": n, "previous_low_watermark": previous[n], "low_watermark": low[n]}
        for n in chosen
    ]
    if as_json:
        print_json({"name": name, "partitions": rows})
        return
    print_table(
        [
            Column("PARTITION", "right"),
            Column("OLD-LOW-WATERMARK", "right"),
            Column("NEW-LOW-WATERMARK", "right"),
        ],
        [
            (str(r["partition"]), str(r["previous_low_watermark"]), str(r["low_watermark"]))
            for r in rows
        ],
    )
    deleted = sum(max(0, low[n] - previous[n]) for n in chosen)
    note(f"trimmed topic {name}: {plural(deleted, 'offset')} deleted")


def _offsets_at(
    admin: AdminClient, topic: str, numbers: list[int], timestamp_ms: int, bootstrap: Bootstrap
) -> dict[int, int]:
    """The first offset at or after the time in each partition; DeleteRecords' -1 (the
    end: every record is older) where none is that late."""
    from confluent_kafka import TopicPartition

    from weirmq.cli.kafka_admin import at_time

    wanted = {TopicPartition(topic, number): at_time(timestamp_ms) for number in numbers}
    futures = admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
    doing = f"cannot list the offsets of topic {topic!r}"
    found = {}
    for tp, future in futures.items():
        offset = wait_for(future, doing, bootstrap, topic).offset
        found[tp.partition] = offset if offset >= 0 else -1
    return found


def _delete_records(
    admin: AdminClient, topic: str, targets: dict[int, int], bootstrap: Bootstrap
) -> dict[int, int]:
    """DeleteRecords; the new low watermark of each partition."""
    from confluent_kafka import TopicPartition

    request = [TopicPartition(topic, number, offset) for number, offset in targets.items()]
    futures = admin.delete_records(request, request_timeout=REQUEST_TIMEOUT_S)
    low = {}
    for tp, future in futures.items():
        doing = f"cannot trim partition {tp.partition} of topic {topic!r} before offset {tp.offset}"
        if tp.offset < 0:
            doing = f"cannot trim partition {tp.partition} of topic {topic!r}"
        try:
            low[tp.partition] = wait_for(future, doing, bootstrap, topic).low_watermark
        except CommandError as exc:
            if exc.error_name == "OFFSET_OUT_OF_RANGE":
                raise CommandError(
                    f"{doing}: the partition ends before that offset (--before end trims "
                    "everything)",
                    exc.error_name,
                ) from None
            raise
    return low


# -- delete ------------------------------------------------------------------------------------


@topics.command("delete", **client_command_settings())
@click.argument("name")
@click.option("--if-exists", is_flag=True, help="Succeed if there is no such topic.")
@bootstrap_option
@json_option
def delete_command(name: str, if_exists: bool, bootstrap: Bootstrap, as_json: bool) -> None:
    """Delete topic NAME and all its records."""
    admin = admin_client(bootstrap)
    futures = admin.delete_topics([name], request_timeout=REQUEST_TIMEOUT_S)
    deleted = True
    try:
        wait_for(futures[name], f"cannot delete topic {name!r}", bootstrap, name)
    except CommandError as exc:
        if not (if_exists and exc.error_name == UNKNOWN_TOPIC):
            raise
        deleted = False
    report_deleted("topic", name, deleted, as_json)
