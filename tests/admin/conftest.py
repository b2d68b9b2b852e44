"""Fixtures of the admin API tests: a broker on a temporary data directory and its clock.

The broker is closed at teardown, as `serve` would close it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_support import make_broker

from weirmq.broker.core import Broker
from weirmq.testing import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Iterator[Broker]:
    core = make_broker(tmp_path / "data", clock)
    yield core
    core.close()
