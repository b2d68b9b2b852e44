"""RabbitMQ as the reference server of the AMQP 0-9-1 differential tests.

A differential test runs one scripted client scenario (`amqp_scenarios`) against RabbitMQ
and against WeirMQ and compares what each answered. This module starts the RabbitMQ side:
a private node from the Debian package ``rabbitmq-server`` on free loopback ports, with
its own epmd, data, config and Erlang cookie in a temporary directory, stopped at the end
with nothing left running. The node itself is `weirmq.bench.rabbitmq.RabbitNode`, which
the ``amqp`` benchmark uses too; the module docstring there says how it is isolated.

`running_rabbitmq` is the context manager; the session-scoped ``rabbitmq`` fixture in
conftest.py wraps it (a node takes ~5 s to start, so one serves the whole session, and
each test uses names of its own). Where the package is not installed, both skip with the
reason; CI installs it (`make system-deps`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from weirmq.bench.rabbitmq import RabbitNode, not_installed_reason


@contextmanager
def running_rabbitmq(directory: Path) -> Iterator[int]:
    """A RabbitMQ node accepting AMQP on 127.0.0.1; yields its port (guest/guest, vhost /).

    Skips the test if RabbitMQ is not installed. The node's files (its console output in
    ``node.log``, its logs under ``log/``) stay in a subdirectory of `directory`.
    """
    reason = not_installed_reason()
    if reason is not None:
        pytest.skip(reason)
    with RabbitNode(directory, remove_directory=False) as node:
        yield node.port
