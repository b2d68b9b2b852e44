"""Fixtures shared by the storage tests: a steppable clock and log factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from weirmq.storage import segment as segment_module
from weirmq.storage.config import LogConfig
from weirmq.storage.handles import HandleCache
from weirmq.storage.interface import PartitionLog
from weirmq.storage.log import FileLog
from weirmq.storage.memory import MemoryLog
from weirmq.testing import ManualClock

LogFactory = Callable[..., PartitionLog]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def handles() -> Iterator[HandleCache]:
    cache = HandleCache(max_open=8)
    yield cache
    cache.close()


@pytest.fixture
def recovered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The log paths of the segments re-validated (`Segment.recover`) during the test."""
    paths: list[str] = []
    real = segment_module.Segment.recover

    def spy(self: segment_module.Segment) -> str | None:
        paths.append(self.log_path)
        return real(self)

    monkeypatch.setattr(segment_module.Segment, "recover", spy)
    return paths


@pytest.fixture(params=["memory", "file"])
def make_log(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock, handles: HandleCache
) -> LogFactory:
    """Builds a log of the parametrized kind: every test using it runs against both."""
    counter = iter(range(1_000_000))

    def factory(config: LogConfig | None = None) -> PartitionLog:
        config = config or LogConfig()
        if request.param == "memory":
            return MemoryLog(config, clock=clock)
        return FileLog(tmp_path / f"t-{next(counter)}", config, handles=handles, clock=clock)

    return factory
