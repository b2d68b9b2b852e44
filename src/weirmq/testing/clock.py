"""A clock that moves only when told to: inject it wherever WeirMQ takes a `clock`."""

from __future__ import annotations


class ManualClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        assert ms >= 0, "time does not go backwards"
        self.now_ms += ms
