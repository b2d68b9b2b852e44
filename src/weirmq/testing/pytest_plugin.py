"""The ``weirmq_broker`` pytest fixture, registered through the ``pytest11`` entry point.

Installing weirmq makes this plugin load in every pytest run of that environment, so this
module imports nothing heavy: the broker is imported when a test first asks for the
fixture.

``weirmq_broker`` is session-scoped: one broker (about a tenth of a second to start) serves
every test of the run, which is what tests of Kafka clients usually want; give each test its
own topic names. A test that needs a broker of its own (other settings, a restart) uses
``weirmq.testing.Broker`` directly, as a context manager.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .broker import Broker


@pytest.fixture(scope="session")
def weirmq_broker() -> Iterator[Broker]:
    """A running in-process WeirMQ broker: ``weirmq_broker.bootstrap_servers``."""
    with Broker() as broker:
        yield broker
