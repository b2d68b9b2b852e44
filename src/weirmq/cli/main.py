"""Entry point of the ``weirmq`` command (a click group).

Subcommands stay thin: they parse options, build the pieces from the library packages and
hand over. ``serve`` has no server to hand over to yet (issue 3), so it refuses to run
instead of pretending, and exits with ``NOT_IMPLEMENTED_EXIT_CODE``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from weirmq import __version__

DEFAULT_DATA_DIR = "./weirmq-data"
DEFAULT_LISTEN = "127.0.0.1:9092"
# Same code click uses for usage errors: "this invocation cannot do what was asked".
NOT_IMPLEMENTED_EXIT_CODE = 2


def parse_listen(
    _ctx: click.Context | None, _param: click.Parameter | None, value: str
) -> tuple[str, int]:
    """Split ``HOST:PORT`` (or ``[IPv6]:PORT``) into a host and a port number."""
    host, sep, port_text = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise click.BadParameter(f"expected HOST:PORT with PORT in 1..65535, got {value!r}")
    return host, int(port_text)


@click.group(name="weirmq")
@click.version_option(__version__, prog_name="weirmq")
def main() -> None:
    """WeirMQ: a Kafka-wire-compatible broker for logs, routing and queues."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help="Directory holding the partition logs.",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default=DEFAULT_LISTEN,
    show_default=True,
    callback=parse_listen,
    help="Address of the Kafka listener.",
)
def serve(data_dir: Path, listen: tuple[str, int]) -> None:
    """Run a single broker (not implemented yet: exits with code 2)."""
    host, port = listen
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    click.echo(
        "weirmq serve: the Kafka server is not implemented yet (issue 3), so nothing was"
        f" started and nothing listens on {address}.\n"
        "What exists today is the storage engine (weirmq.storage), exercised by"
        f" `make test` and `make bench-storage`. Nothing was written to {data_dir}.",
        err=True,
    )
    sys.exit(NOT_IMPLEMENTED_EXIT_CODE)
