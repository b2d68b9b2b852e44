"""Entry point of the ``weirmq`` command (a click group).

Subcommands stay thin: they parse options, build the pieces from the library packages and
hand over. Settings come from `weirmq.broker.settings` (defaults, a TOML file, `WEIRMQ_*`
environment variables, then these flags); an unknown or invalid one stops the command
with a message naming it and exit code 2, like any other usage error.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from weirmq import __version__
from weirmq.cli.lazy import add_client_commands
from weirmq.settings import SettingsError, load_settings

USAGE_EXIT_CODE = 2
STARTUP_FAILED_EXIT_CODE = 1


@click.group(name="weirmq")
@click.version_option(__version__, prog_name="weirmq")
def main() -> None:
    """WeirMQ: a Kafka-wire-compatible broker for logs, routing and queues."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory holding the partition logs [default: ./weirmq-data].",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default=None,
    help="Address of the Kafka listener; port 0 picks a free one [default: 127.0.0.1:9092].",
)
@click.option(
    "--advertise",
    metavar="HOST:PORT",
    default=None,
    help="Address given to clients in Metadata [default: the listening address].",
)
@click.option(
    "--admin-listen",
    metavar="HOST:PORT",
    default=None,
    help="Address of the HTTP admin API and /metrics; 'off' disables it [default: 127.0.0.1:9644].",
)
@click.option(
    "--amqp-listen",
    metavar="HOST:PORT",
    default=None,
    help="Address of the AMQP 0-9-1 listener; port 0 picks a free one, 'off' disables it "
    "[default: 127.0.0.1:5672].",
)
@click.option(
    "--sqs-listen",
    metavar="HOST:PORT",
    default=None,
    help="Address of the SQS API (HTTP, for AWS SDKs); port 0 picks a free one, 'off' "
    "disables it [default: 127.0.0.1:9324].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML settings file (also WEIRMQ_CONFIG); see docs/configuration.md.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Log detail on stderr.",
)
def serve(
    data_dir: Path | None,
    listen: str | None,
    advertise: str | None,
    admin_listen: str | None,
    amqp_listen: str | None,
    sqs_listen: str | None,
    config_file: Path | None,
    log_level: str,
) -> None:
    """Run a single broker until SIGTERM or SIGINT."""
    overrides = {"data_dir": data_dir, "listen": listen, "advertise": advertise}
    if admin_listen is not None:  # "off" or "" means off; None means "not given"
        overrides["admin_listen"] = admin_listen
    if amqp_listen is not None:  # likewise
        overrides["amqp_listen"] = amqp_listen
    if sqs_listen is not None:  # likewise
        overrides["sqs_listen"] = sqs_listen
    try:
        settings = load_settings(config_file, overrides=overrides)
    except SettingsError as exc:
        click.echo(f"weirmq serve: {exc}", err=True)
        sys.exit(USAGE_EXIT_CODE)
    _skip_test_only_imports()
    from weirmq.cli.services import http_services
    from weirmq.server.run import serve as run_broker
    from weirmq.server.run import tune_malloc
    from weirmq.server.startup import StartupError
    from weirmq.storage.lock import DataDirLockedError

    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tune_malloc()
    # The admin and SQS ports open now; aiohttp and their applications load on their first
    # connection (see weirmq/admin/deferred.py), so a broker nobody asks over HTTP never
    # pays for them.
    services = http_services(settings)
    try:
        asyncio.run(run_broker(settings, services=services))
    except (OSError, DataDirLockedError, StartupError) as exc:
        # The address is taken, the data directory is unwritable, a state file in it is
        # damaged or another broker holds it: the message says what to fix, a traceback
        # would only bury it.
        click.echo(f"weirmq serve: cannot start: {exc}", err=True)
        sys.exit(STARTUP_FAILED_EXIT_CODE)
    except KeyboardInterrupt:  # a second Ctrl-C during the orderly stop
        sys.exit(130)


def _skip_test_only_imports() -> None:
    """kio registers property-test strategies at import time whenever hypothesis can be
    imported (it can in a development venv), which costs ~120 ms of start-up measured here.
    A broker process never runs property tests, so before kio is first imported we make
    hypothesis unimportable for this process only (kio then skips the registration)."""
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


# topics, groups, produce, consume, bench and exchanges: registered by name only, imported
# when one of them runs, so `weirmq serve` does not pay for building them (see lazy.py).
add_client_commands(main)
