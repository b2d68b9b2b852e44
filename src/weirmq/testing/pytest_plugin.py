"""The ``weirmq_broker`` pytest fixture, registered through the ``pytest11`` entry point.

Installing weirmq makes this plugin load in every pytest run of that environment, so this
module imports nothing heavy: the broker is imported when a test first asks for the
fixture.

``weirmq_broker`` is session-scoped: one broker (about a tenth of a second to start) serves
every test of the run, which is what tests of Kafka clients usually want; give each test its
own topic names. A test that needs a broker of its own (other settings, a restart) uses
``weirmq.testing.Broker`` directly, as a context manager.

The fixture's broker starts its groups' first rebalance at once
(``group_initial_rebalance_delay_ms=0``, `FIXTURE_SETTINGS`): a broker waits 3 s by
default, as Kafka does, so that consumers starting together cause one rebalance, which in
a test only makes every first poll of a group slower. To test with a delay, override the
fixture in a ``conftest.py`` (``yield from`` a ``Broker(...)`` of your settings) or use a
``Broker`` of your own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .broker import Broker

FIXTURE_SETTINGS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0}
"""What the fixture's broker sets apart from the defaults (see the module docstring)."""


@pytest.fixture(scope="session")
def weirmq_broker() -> Iterator[Broker]:
    """A running in-process WeirMQ broker: ``weirmq_broker.bootstrap_servers``."""
    with Broker(**FIXTURE_SETTINGS) as broker:
        yield broker
