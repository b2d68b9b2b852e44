"""``weirmq produce TOPIC``: one record per line of stdin (or ``--file``), like ``kcat -P``.

Theory of operation:

- The input is read as bytes, line by line: the trailing newline is dropped and the rest is
  the value, byte for byte (``--key-separator`` splits off a key at its first occurrence).
  Every record carries the same ``--header`` pairs and, with ``--timestamp``, the same
  timestamp (else librdkafka stamps each with the time it is produced).
- By default the producer is idempotent with ``acks=all``: a record counts as delivered
  once the broker has fsynced it, and librdkafka's retries cannot write it twice.
  ``--acks 1`` or ``0`` trade that for latency; idempotence needs ``acks=all``, so it is
  off then. ``--compression`` is librdkafka's ``compression.type``: batches are compressed
  by the client and stored so by the broker.
- Memory is bounded by librdkafka's queue: when it is full, ``produce`` raises BufferError
  and we serve delivery reports until there is room, so a huge stdin only slows us down.
- Delivery reports are tallied per partition (count and offsets) and per error. At the end
  we flush, print the tally (stderr; ``--json`` puts it on stdout too) and exit with 1 if
  any record was not delivered, or 130 if Ctrl-C stopped the reading: what had been read
  is still flushed. With ``acks=0`` the broker answers nothing, so offsets are unknown
  (-1) and "delivered" means "sent".
- A progress bar (stderr, terminals only) follows the bytes read when the input is a file
  of at least LARGE_INPUT_BYTES, and counts bytes with a spinner when it is a pipe.
"""

from __future__ import annotations

import os
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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
from weirmq.cli.offsets import parse_time_ms
from weirmq.cli.output import note, parsed_by, print_json, progress, progress_wanted

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

EXIT_INTERRUPTED = 130  # the shell's code for "stopped by SIGINT"
# How long serving delivery reports waits when librdkafka's queue is full.
QUEUE_FULL_POLL_S = 0.1
DEFAULT_DELIVERY_TIMEOUT_S = 30.0
# A file this large gets a progress bar (on a terminal); a smaller one is read in a blink.
LARGE_INPUT_BYTES = 1 << 20
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "1", "0")


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
    bytes_sent: int = 0  # keys and values, before compression
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

    def to_json(self, topic: str, settings: ProduceSettings) -> dict[str, Any]:
        return {
            "topic": topic,
            "records": self.sent,
            "bytes": self.bytes_sent,
            "delivered": self.delivered,
            "failed": self.failed,
            "acks": settings.acks,
            "compression": settings.compression,
            "partitions": [
                {"partition": number, **vars(tally)}
                for number, tally in sorted(self.partitions.items())
            ],
            "errors": [
                {"error": name, "message": message, "records": count}
                for (name, message), count in self.errors.most_common()
            ],
        }


@dataclass(frozen=True, slots=True)
class ProduceSettings:
    """How the records are sent (the options that become producer settings)."""

    acks: str = "all"
    compression: str = "none"
    timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S

    def producer_config(self) -> dict[str, Any]:
        """librdkafka settings: idempotent only with acks=all (librdkafka refuses less)."""
        return {
            "acks": self.acks,
            "enable.idempotence": self.acks == "all",
            "compression.type": self.compression,
            "message.timeout.ms": int(self.timeout_s * 1000),
        }


def summary(topic: str, tally: Tally, settings: ProduceSettings) -> str:
    """The closing line: ``produced 3 records (15 B) to orders (partition 0: offsets 0-2)``."""
    count = _records(tally.delivered)
    where = _where(tally, settings)
    size = human_bytes(tally.bytes_sent)
    return f"produced {count} ({size}) to {topic}{where}"


def _where(tally: Tally, settings: ProduceSettings) -> str:
    if not tally.partitions:
        return ""
    if settings.acks == "0":
        return f" ({_partitions(len(tally.partitions))}; acks=0: offsets unknown)"
    if len(tally.partitions) > SUMMARY_PARTITIONS_MAX:
        return f" ({_partitions(len(tally.partitions))})"
    spans = ", ".join(
        f"{number}: offsets {t.first_offset}-{t.last_offset}"
        if t.records > 1
        else f"{number}: offset {t.first_offset}"
        for number, t in sorted(tally.partitions.items())
    )
    return f" (partition {spans})"


SUMMARY_PARTITIONS_MAX = 4  # more than this: the summary gives their number only


def _partitions(count: int) -> str:
    return f"{count} partition" if count == 1 else f"{count} partitions"


def human_bytes(count: int) -> str:
    """``15 B``, ``1.5 kB``, ``48.2 MB`` (powers of 1000, as rich's progress shows)."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


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
    "--file",
    "-F",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    metavar="PATH",
    default=None,
    help="Read the lines from this file instead of stdin ('-' is stdin).",
)
@click.option(
    "--timestamp",
    "timestamp_ms",
    metavar="TIME",
    callback=parsed_by(parse_time_ms),
    help="Timestamp of every record: ms since the epoch or ISO 8601 [default: now].",
)
@click.option(
    "--acks",
    type=click.Choice(ACKS),
    default="all",
    show_default=True,
    help="Acknowledgement the broker gives: all (idempotent, fsynced), 1, or 0 (none).",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(COMPRESSIONS),
    default="none",
    show_default=True,
    help="Compression of the record batches.",
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
    input_path: str | None,
    timestamp_ms: int | None,
    acks: str,
    compression: str,
    timeout_s: float,
    bootstrap: Bootstrap,
    as_json: bool,
) -> None:
    """Send each line of stdin (or --file) to TOPIC as one record.

    The trailing newline of each line is dropped; the rest is the value. The topic is
    created if it does not exist and the broker auto-creates topics.
    """
    settings = ProduceSettings(acks=acks, compression=compression, timeout_s=timeout_s)
    producer, tally = _producer(bootstrap, settings)
    _check_topic(producer, topic, partition, bootstrap)
    extra: dict[str, Any] = {"headers": headers} if headers else {}
    if partition is not None:
        extra["partition"] = partition
    if timestamp_ms is not None:
        extra["timestamp"] = timestamp_ms
    interrupted = False
    with _input(input_path) as source, _progress(source) as advance:
        try:
            for line in source:
                key, value = split_line(line, key_separator)
                _send(producer, tally, topic, key, value, extra)
                advance(len(line))
        except KeyboardInterrupt:
            interrupted = True
    _flush(producer, tally, timeout_s)
    _report(topic, tally, settings, as_json)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if tally.failed or tally.sent != tally.delivered:
        sys.exit(EXIT_BROKER_ERROR)


def _producer(bootstrap: Bootstrap, settings: ProduceSettings) -> tuple[Producer, Tally]:
    from confluent_kafka import Producer

    check_reachable(bootstrap)
    tally = Tally()
    config = {**settings.producer_config(), "error_cb": tally.on_client_error}
    return Producer(client_config(bootstrap, config)), tally


@contextmanager
def _input(path: str | None) -> Iterator[IO[bytes]]:
    """The lines to send: stdin, or the --file (closed at the end)."""
    if path is None or path == "-":
        yield sys.stdin.buffer
        return
    try:
        source = open(path, "rb")  # noqa: SIM115 (closed below, after the reading)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path!r}: {exc.strerror}") from None
    with source:
        yield source


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


def _progress(source: IO[bytes]) -> AbstractContextManager[Callable[[float], None]]:
    """Bytes read against the size, when the input is a large file; bytes read with a
    spinner when it is a pipe. Not when the input is the terminal (someone typing lines
    needs no bar), nor for a small file (read before a bar could be seen)."""
    enabled = progress_wanted() and not source.isatty()
    try:
        info = os.fstat(source.fileno())
    except (OSError, ValueError):  # not a real file descriptor (e.g. under a test runner)
        return progress("producing", enabled=False)
    if stat.S_ISREG(info.st_mode):
        large = info.st_size >= LARGE_INPUT_BYTES
        return progress("producing", enabled=enabled and large, total=info.st_size, unit="bytes")
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
    tally.bytes_sent += len(value) + (len(key) if key is not None else 0)
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


def _report(topic: str, tally: Tally, settings: ProduceSettings, as_json: bool) -> None:
    if as_json:
        print_json(tally.to_json(topic, settings))
    if not tally.failed:
        note(summary(topic, tally, settings))
        return
    note(f"records not delivered to {topic}: {tally.failed} of {tally.sent}")
    for (name, message), count in tally.errors.most_common():
        note(f"  {_records(count)}: {message} ({name})")


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"
