"""The client commands (``topics``, ``groups``, ``produce``, ``consume``, ``status``, ...),
registered on the ``weirmq`` group without importing them.

Why: ``weirmq serve`` is started by scripts and benchmarks that time it, and building the
client commands (about forty click options, the helper modules behind them) costs tens of
milliseconds that a broker never uses. So the group gets a stand-in for each command, a
``LazyCommand`` that knows only its name and where the real command lives. Click runs a
subcommand through ``make_context`` and then ``ctx.command``: the stand-in hands
``make_context`` to the real command, imported at that moment, and from then on click only
sees the real one. ``weirmq --help`` asks the stand-ins for their one-line help, which also
imports them; a help screen can afford it.

This module imports only click, and so must stay.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import click

# Where each client command lives, as "module:attribute".
CLIENT_COMMANDS = {
    "topics": "weirmq.cli.topics:topics",
    "groups": "weirmq.cli.groups:groups",
    "produce": "weirmq.cli.produce:produce",
    "consume": "weirmq.cli.consume:consume",
    "status": "weirmq.cli.status:status",
    "exchanges": "weirmq.cli.exchanges:exchanges",
    "quotas": "weirmq.cli.quotas:quotas",
    "bench": "weirmq.cli.bench:bench",
    "storage": "weirmq.cli.storage:storage",
}

EXIT_CODES_EPILOG = (
    "\b\nExit codes of the client commands (topics, groups, exchanges, quotas, produce,\n"
    "consume, status):\n"
    "  0  success\n"
    "  1  the broker answered with an error (e.g. the topic exists or does not exist,\n"
    "     an invalid config, a group that does not exist or still has members,\n"
    "     records not delivered, an unhealthy broker for status)\n"
    "  2  usage error\n"
    "  3  no broker reachable at --bootstrap"
)


class LazyCommand(click.Command):
    """Stands in for the click command at ``target`` ("module:attribute") until it is used."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name)
        self.target = target

    @functools.cached_property
    def command(self) -> click.Command:
        module_name, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command), f"{self.target} is not a click command"
        return command

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        return self.command.make_context(info_name, args, parent=parent, **extra)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.command.get_short_help_str(limit)


def add_client_commands(group: click.Group) -> None:
    """Register the client commands on ``group`` (the ``weirmq`` command)."""
    for name, target in CLIENT_COMMANDS.items():
        group.add_command(LazyCommand(name, target))
    group.epilog = EXIT_CODES_EPILOG
