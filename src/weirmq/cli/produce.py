"""``weirmq produce TOPIC``: one record per line of stdin, like ``kcat -P``.

Theory of operation:

- stdin is read as bytes, line by line: the trailing newline is dropped and the rest is the
  value, byte for byte (``--key-separator`` splits off a key at its first occurrence).
  Every record carries the same ``--header`` pairs.
- The producer is idempotent with ``acks=all``: a record counts as delivered once the broker
  has fsynced it, and librdkafka's retries cannot write it twice.
- Memory is bounded by librdkafka's queue: when it is full, ``produce`` raises BufferError
  and we serve delivery reports until there is room, so a huge stdin only slows us down.
- Delivery reports are tallied per partition (count and offsets) and per error. At the end
  we flush, print the tally (stderr; ``--json`` puts it on stdout too) and exit with 1 if
  any record was not delivered, or 130 if Ctrl-C stopped the reading: what had been read
  is still flushed.
"""

from __future__ import annotations

import os
import stat
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import click

from weirmq.cli.clients import (
    EXIT_BROKER_ERROR,
    Bootstrap,
    CommandError,
    bootstrap_option,
    check_partitions,
    check_reachable,
    client_command_settings,
    client_config,
    json_option,
    topic_metadata,
)
from weirmq.cli.formats import parse_assignments, split_line
from weirmq.cli.output import note, print_json, progress, progress_wanted

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

EXIT_INTERRUPTED = 130  # the shell's code for "stopped by SIGINT"
# How long serving delivery reports waits when librdkafka's queue is full.
QUEUE_FULL_POLL_S = 0.1
DEFAULT_DELIVERY_TIMEOUT_S = 30.0


@dataclass
class PartitionTally:
    records: int = 0
    first_offset: int = -1
    last_offset: int = -1

    def add(self, offset: int) -> None:
        self.records += 1
        self.first_offset = offset if self.first_offset < 0 else min(self.first_offset, offset)
        self.last_offset = max(self.last_offset, offset)


@dataclass
class Tally:
    """What happened to the records: delivered per partition, failed per error."""

    sent: int = 0
    partitions: dict[int, PartitionTally] = field(default_factory=dict)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    fatal: KafkaError | None = None

    @property
    def delivered(self) -> int:
        return sum(partition.records for partition in self.partitions.values())

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.fail(error)
            return
        partition = self.partitions.setdefault(message.partition() or 0, PartitionTally())
        partition.add(message.offset() or 0)

    def fail(self, error: KafkaError) -> None:
        self.errors[(error.name(), error.str())] += 1

    def on_client_error(self, error: KafkaError) -> None:
        # Only a fatal error (e.g. the idempotent producer's state is lost) ends the run;
        # the rest, such as a dropped connection, librdkafka retries by itself.
        if error.fatal():
            self.fatal = error

    def to_json(self, topic: str) -> dict[str, Any]:
        return {
            "topic": topic,
            "records": self.sent,
            "delivered": self.delivered,
            "failed": self.failed,
            "partitions": [
                {"partition": number, **vars(tally)}
                for number, tally in sorted(self.partitions.items())
            ],
            "errors": [
                {"error": name, "message": message, "records": count}
                for (name, message), count in self.errors.most_common()
            ],
        }


def _headers_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    try:
        return [(name, data.encode()) for name, data in parse_assignments(value, "--header")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _separator_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value == "":
        raise click.BadParameter("the separator cannot be empty", ctx, param)
    return None if value is None else value.encode()


@click.command("produce", **client_command_settings())
@click.argument("topic")
@click.option(
    "--key-separator",
    "-K",
    metavar="SEP",
    callback=_separator_callback,
    help="Split each line into key SEP value at the first SEP (lines without one get no key).",
)
@click.option(
    "--header",
    "-H",
    "headers",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_headers_callback,
    help="A header added to every record (repeatable).",
)
@click.option(
    "--partition",
    "-p",
    type=click.IntRange(min=0),
    metavar="N",
    default=None,
    help="Send every record to this partition [default: by key, else spread].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    metavar="SECONDS",
    default=DEFAULT_DELIVERY_TIMEOUT_S,
    show_default=True,
    help="Seconds a record may take to be delivered before it counts as failed.",
)
@bootstrap_option
@json_option
def produce(
    topic: str,
    key_separator: bytes | None,
    headers: list[tuple[str, bytes]],
    partition: int | None,
    timeout_s: float,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Send each line of stdin to TOPIC as one record.

    The trailing newline of each line is dropped; the rest is the value. The topic is
    created if it does not exist and the broker auto-creates topics.
    """
    producer, tally = _producer(bootstrap, timeout_s)
    _check_topic(producer, topic, partition, bootstrap)
    stdin = sys.stdin.buffer
    extra: dict[str, Any] = {"headers": headers} if headers else {}
    if partition is not None:
        extra["partition"] = partition
    interrupted = False
    with _progress(stdin) as advance:
        try:
            for line in stdin:
                key, value = split_line(line, key_separator)
                _send(producer, tally, topic, key, value, extra)
                advance(len(line))
        except KeyboardInterrupt:
            interrupted = True
    _flush(producer, tally, timeout_s)
    _report(topic, tally, as_json)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if tally.failed or tally.sent != tally.delivered:
        sys.exit(EXIT_BROKER_ERROR)


def _producer(bootstrap: Bootstrap, timeout_s: float) -> tuple[Producer, Tally]:
    from confluent_kafka import Producer

    check_reachable(bootstrap)
    tally = Tally()
    settings = {
        "acks": "all",
        "enable.idempotence": True,
        "message.timeout.ms": int(timeout_s * 1000),
        "error_cb": tally.on_client_error,
    }
    return Producer(client_config(bootstrap, settings)), tally


def _check_topic(
    producer: Producer, topic: str, partition: int | None, bootstrap: Bootstrap
) -> None:
    """Fail before reading stdin if the records could not go anywhere: a topic that does
    not exist (and that the broker does not auto-create on this lookup), an invalid name,
    a partition the topic does not have. librdkafka would otherwise hold each record until
    its delivery timeout before failing it."""
    existing = topic_metadata(producer, topic, bootstrap).partitions
    if partition is not None:
        check_partitions(topic, [partition], existing)


def _progress(stdin: IO[bytes]) -> AbstractContextManager[Callable[[float], None]]:
    """Bytes of stdin read, when stdin is a file of known size; else a record counter.
    Not when stdin is the terminal: someone typing lines needs no bar."""
    enabled = progress_wanted() and not stdin.isatty()
    try:
        info = os.fstat(stdin.fileno())
    except (OSError, ValueError):  # not a real file descriptor (e.g. under a test runner)
        return progress("producing", enabled=False)
    if stat.S_ISREG(info.st_mode):
        return progress("producing", enabled=enabled, total=info.st_size, unit="bytes")
    return progress("producing", enabled=enabled, unit="bytes")


def _send(
    producer: Producer,
    tally: Tally,
    topic: str,
    key: bytes | None,
    value: bytes,
    extra: dict[str, Any],
) -> None:
    from confluent_kafka import KafkaException

    if tally.fatal is not None:
        raise CommandError(f"the producer stopped: {tally.fatal.str()}", tally.fatal.name())
    tally.sent += 1
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=tally.on_delivery, **extra)
            break
        except BufferError:  # librdkafka's queue is full: wait for deliveries to free it
            producer.poll(QUEUE_FULL_POLL_S)
        except KafkaException as exc:  # refused before sending, e.g. a record too large
            tally.fail(exc.args[0])
            break
    producer.poll(0)  # serve delivery reports as we go, so the tally stays current


def _flush(producer: Producer, tally: Tally, timeout_s: float) -> None:
    """Wait for every delivery report. message.timeout.ms bounds each record, so a little
    more than that bounds the whole flush."""
    left = producer.flush(timeout_s + 5.0)
    if left:
        note(f"{left} records were still waiting for an answer from the broker")


def _report(topic: str, tally: Tally, as_json: bool) -> None:
    if as_json:
        print_json(tally.to_json(topic))
    if not tally.failed:
        note(f"produced {_records(tally.delivered)} to {topic}")
        return
    note(f"records not delivered to {topic}: {tally.failed} of {tally.sent}")
    for (name, message), count in tally.errors.most_common():
        note(f"  {_records(count)}: {message} ({name})")


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"
