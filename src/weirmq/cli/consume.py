"""``weirmq consume TOPIC``: print records as they arrive, like ``kcat -C``.

Theory of operation:

- Without ``--group`` the consumer ``assign()``s the partitions itself (all of them, or the
  ``--partition`` ones) at the start offset: the end by default, the beginning with
  ``--from-beginning``, or ``--offset``. librdkafka still wants a ``group.id``; ours is a
  placeholder that is never used, because nothing is committed (``enable.auto.commit``
  off).
- With ``--group`` the consumer ``subscribe()``s and lets the group assign partitions; it
  resumes at the group's committed offsets. librdkafka commits the offsets of the records
  it has handed us (auto-commit every few seconds, and a last time in ``close()``); we ask
  it for no more than ``--max-messages``, so the next run with the same group starts
  right after the last record this one printed.
- Records are printed as bytes to stdout, batch by batch, flushing after each batch so a
  pipe sees them as they come: the value per line by default, a kcat-style ``--format``,
  or JSON Lines with ``--json`` (see formats.py).
- ``--from-timestamp`` asks the broker for the first offset at or after the time in each
  partition (``offsets_for_times``, Kafka's ListOffsets by timestamp) and assigns those; a
  partition with no record that late starts at its end.
- It stops after ``--max-messages``, or with ``--exit`` once every assigned partition has
  reached its end (librdkafka's partition-EOF events), or on Ctrl-C (exit code 0: it is
  the normal way to stop following a topic), or when the reader of a pipe goes away.
- Each time a partition is read to its end, a line on stderr says so, as kcat's
  ``% Reached end of topic ...`` does (the same partition-EOF events), so a person
  watching knows the silence means "nothing new" rather than "stuck". ``--quiet`` drops it
  and the closing summary; ``--json`` drops it (scripts have the records).
- Losing every broker connection ends the run with exit code 3, so a script's ``--exit``
  run fails instead of waiting forever for a broker that has gone.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from weirmq.cli.clients import (
    REQUEST_TIMEOUT_S,
    Bootstrap,
    BrokerUnreachable,
    bootstrap_option,
    check_partitions,
    check_reachable,
    client_command_settings,
    client_config,
    error_for,
    json_option,
    kafka_errors,
    topic_metadata,
)
from weirmq.cli.formats import (
    DEFAULT_FORMAT,
    CompiledFormat,
    ConsumedRecord,
    FormatError,
    compile_format,
    record_json_line,
    render,
)
from weirmq.cli.offsets import parse_time_ms
from weirmq.cli.output import note, parsed_by, progress, progress_wanted

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

# librdkafka's logical offsets (RD_KAFKA_OFFSET_*), kept here so parsing needs no import.
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_TAIL_BASE = -2000  # RD_KAFKA_OFFSET_TAIL(n) is OFFSET_TAIL_BASE - n
# Placeholder group.id for assign-only consumers (never joins a group, never commits).
UNUSED_GROUP_ID = "weirmq-cli-unused"
# Records taken from librdkafka per call, and how long one call may wait for them: short,
# so that Ctrl-C and the stop conditions are noticed promptly.
BATCH_RECORDS_MAX = 500
POLL_S = 0.2

Printer = Callable[[ConsumedRecord], bytes]


def parse_start_offset(text: str) -> int:
    """``beginning``, ``end``, ``N`` (absolute) or ``-N`` (N records before the end) ->
    a librdkafka offset. ValueError for anything else."""
    named = {"beginning": OFFSET_BEGINNING, "end": OFFSET_END}
    if text in named:
        return named[text]
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not beginning, end, N or -N") from None
    return OFFSET_TAIL_BASE + number if number < 0 else number


@click.command("consume", **client_command_settings())
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest record.")
@click.option(
    "--offset",
    "-o",
    "start_offset",
    metavar="beginning|end|N|-N",
    callback=parsed_by(parse_start_offset),
    help="Start offset in each partition (-N: N records before the end) [default: end].",
)
@click.option(
    "--from-timestamp",
    "from_ms",
    metavar="TIME",
    callback=parsed_by(parse_time_ms),
    help="Start at the first record at or after TIME (ms since the epoch, or ISO 8601, "
    "UTC unless given).",
)
@click.option(
    "--partition",
    "-p",
    "partitions",
    type=click.IntRange(min=0),
    metavar="N",
    multiple=True,
    help="Read only this partition (repeatable) [default: all].",
)
@click.option(
    "--group",
    "-G",
    metavar="GROUP",
    help="Join consumer group GROUP: read where it left off, commit what is printed.",
)
@click.option(
    "--max-messages",
    "-c",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="Stop after this many records.",
)
@click.option(
    "--exit",
    "-e",
    "exit_at_end",
    is_flag=True,
    help="Stop once every partition has been read to its end.",
)
@click.option(
    "--format",
    "-f",
    "record_format",
    metavar="FMT",
    callback=parsed_by(compile_format, (FormatError,)),
    help="kcat-style: %t %p %o %k %s %h %T %K %S, \\n \\t [default: %s\\n].",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No notes on stderr: neither 'reached the end' nor the closing summary.",
)
@bootstrap_option
@json_option
def consume(
    topic: str,
    from_beginning: bool,
    start_offset: int | None,
    from_ms: int | None,
    partitions: tuple[int, ...],
    group: str | None,
    max_messages: int | None,
    exit_at_end: bool,
    record_format: CompiledFormat | None,
    quiet: bool,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Print the records of TOPIC as they arrive.

    By default: the value of each new record, one per line, until Ctrl-C.
    """
    _check_usage(from_beginning, start_offset, from_ms, partitions, group, record_format, as_json)
    if from_beginning:
        start_offset = OFFSET_BEGINNING
    printer = _printer(record_format, as_json)
    state = RunState(announce_end=not (quiet or as_json), exit_at_end=exit_at_end)
    consumer = _consumer(bootstrap, group, from_beginning, state)
    try:
        _start(consumer, topic, partitions, group, start_offset, from_ms, bootstrap)
        _run(consumer, printer, state, max_messages, exit_at_end, bootstrap)
    finally:
        consumer.close()
    if not quiet:
        note(f"consumed {state.count} record{'' if state.count == 1 else 's'} from {topic}")


def _check_usage(
    from_beginning: bool,
    start_offset: int | None,
    from_ms: int | None,
    partitions: tuple[int, ...],
    group: str | None,
    record_format: CompiledFormat | None,
    as_json: bool,
) -> None:
    starts = [from_beginning, start_offset is not None, from_ms is not None]
    if sum(starts) > 1:
        raise click.UsageError(
            "--from-beginning, --offset and --from-timestamp cannot be used together"
        )
    if group and (partitions or start_offset is not None or from_ms is not None):
        raise click.UsageError(
            "with --group the group assigns partitions and offsets "
            "(weirmq groups reset-offsets moves a group's offsets)"
        )
    if record_format is not None and as_json:
        raise click.UsageError("--format and --json cannot be used together")


def _printer(record_format: CompiledFormat | None, as_json: bool) -> Printer:
    if as_json:
        return record_json_line
    return functools.partial(render, record_format or compile_format(DEFAULT_FORMAT))


@dataclass
class RunState:
    """What the loop tracks: records printed, partitions at their end, a lost broker; and
    whether to say so on stderr when a partition is read to its end."""

    announce_end: bool = True
    exit_at_end: bool = False
    count: int = 0
    at_end: set[int] = field(default_factory=set)
    lost: KafkaError | None = None

    def on_client_error(self, error: KafkaError) -> None:
        # librdkafka reconnects by itself after one dropped connection; all of them down,
        # or a fatal error, means nobody is serving us any more.
        if error.name() == "_ALL_BROKERS_DOWN" or error.fatal():
            self.lost = error


def _consumer(
    bootstrap: Bootstrap,
    group: str | None,
    from_beginning: bool,
    state: RunState,
) -> Consumer:
    from confluent_kafka import Consumer

    check_reachable(bootstrap)
    settings = {
        "group.id": group or UNUSED_GROUP_ID,
        "enable.auto.commit": bool(group),
        # Where a group without committed offsets starts (and where an out-of-range
        # --offset lands).
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        # Partition-EOF events: what --exit waits for, and what the end notes announce.
        "enable.partition.eof": state.exit_at_end or state.announce_end,
        "error_cb": state.on_client_error,
    }
    return Consumer(client_config(bootstrap, settings))


def _start(
    consumer: Consumer,
    topic: str,
    partitions: Sequence[int],
    group: str | None,
    start_offset: int | None,
    from_ms: int | None,
    bootstrap: Bootstrap,
) -> None:
    """Check that the topic (and partitions) exist, then subscribe or assign. A consumer's
    lookup never creates the topic: reading a typo says so instead."""
    from confluent_kafka import TopicPartition

    existing = sorted(topic_metadata(consumer, topic, bootstrap).partitions)
    if group:
        consumer.subscribe([topic])
        return
    check_partitions(topic, partitions, existing)
    offset = OFFSET_END if start_offset is None else start_offset
    chosen = sorted(set(partitions)) if partitions else existing
    if from_ms is not None:
        starts = _offsets_at(consumer, topic, chosen, from_ms, bootstrap)
    else:
        starts = dict.fromkeys(chosen, offset)
    consumer.assign([TopicPartition(topic, number, starts[number]) for number in chosen])


def _offsets_at(
    consumer: Consumer, topic: str, numbers: list[int], timestamp_ms: int, bootstrap: Bootstrap
) -> dict[int, int]:
    """The first offset at or after the time in each partition (the end where no record
    is that late)."""
    from confluent_kafka import TopicPartition

    with kafka_errors(f"cannot look up offsets by time in topic {topic!r}", bootstrap, topic):
        found = consumer.offsets_for_times(
            [TopicPartition(topic, number, timestamp_ms) for number in numbers],
            timeout=REQUEST_TIMEOUT_S,
        )
    starts = {}
    for tp in found:
        if tp.error is not None:
            raise error_for(tp.error, f"cannot look up offsets by time in {topic!r}", bootstrap)
        starts[tp.partition] = tp.offset if tp.offset >= 0 else OFFSET_END
    return starts


def _run(
    consumer: Consumer,
    printer: Printer,
    state: RunState,
    max_messages: int | None,
    exit_at_end: bool,
    bootstrap: Bootstrap,
) -> None:
    out = sys.stdout.buffer
    enabled = progress_wanted(data_on_stdout=True)
    with progress("consuming", enabled=enabled, total=max_messages) as advance:
        try:
            while not _done(consumer, state, max_messages, exit_at_end):
                if state.lost is not None:
                    message = f"lost the broker at {bootstrap} ({state.lost.str()})"
                    raise BrokerUnreachable(message, state.lost.name())
                wanted = BATCH_RECORDS_MAX
                if max_messages is not None:
                    wanted = min(wanted, max_messages - state.count)
                batch = consumer.consume(num_messages=wanted, timeout=POLL_S)
                printed = _print_batch(batch, printer, state, out, bootstrap)
                advance(printed)
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:
            _silence_stdout()


def _done(
    consumer: Consumer,
    state: RunState,
    max_messages: int | None,
    exit_at_end: bool,
) -> bool:
    """Whether a stop condition is met: --max-messages reached, or with --exit, every
    assigned partition at its end."""
    if max_messages is not None and state.count >= max_messages:
        return True
    if not exit_at_end:
        return False
    # The current assignment: under --group it is whatever the group gave us.
    assigned = {partition.partition for partition in consumer.assignment()}
    return bool(assigned) and assigned <= state.at_end


def _print_batch(
    batch: list[Message], printer: Printer, state: RunState, out: Any, bootstrap: Bootstrap
) -> int:
    printed = 0
    for message in batch:
        error = message.error()
        if error is not None:
            _on_error(error, message, state, bootstrap)
            continue
        out.write(printer(ConsumedRecord.from_message(message)))
        state.at_end.discard(message.partition() or 0)
        state.count += 1
        printed += 1
    out.flush()
    return printed


def _on_error(error: KafkaError, message: Message, state: RunState, bootstrap: Bootstrap) -> None:
    if error.name() == "_PARTITION_EOF":
        partition = message.partition() or 0
        if state.announce_end and partition not in state.at_end:
            _announce_end(message, state)
        state.at_end.add(partition)
        return
    topic = message.topic() or ""
    raise error_for(error, f"cannot read topic {topic!r}", bootstrap, topic)


def _announce_end(message: Message, state: RunState) -> None:
    """kcat's "% Reached end of topic orders [0] at offset 5", in our words."""
    partition, offset = message.partition(), message.offset()
    where = f"reached the end of {message.topic()} [{partition}] at offset {offset}"
    note(where if state.exit_at_end else f"{where}; waiting for new records")


def _silence_stdout() -> None:
    """The reader of our stdout has gone (``| head``): stop quietly, like any Unix filter.

    stdout is pointed at /dev/null so that Python's own flush at exit cannot fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
