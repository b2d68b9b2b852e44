"""Guarded resources, sampled: free disk and request memory, as flow-controller gauges.

Once a second (`RESOURCE_SAMPLE_MS`, from the server loop) the broker measures:

- **disk**: the data directory's file system (`os.statvfs`). Its gauge's level is the
  space used; the marks are set from `disk_free_min_bytes` (the floor): producers are
  throttled once free space is below twice the floor, growing to the full pressure
  throttle at the floor, where publishes are refused with KAFKA_STORAGE_ERROR (the
  protocols' "retry later": Kafka's producers retry it) until free space is back above
  1.5 times the floor (the hysteresis keeps a producer from flapping at the mark). Reads,
  offset commits and the broker's own writes go on: consumers drain the broker, and an
  operator can delete data through it.
- **memory**: bytes held by large requests being received or in flight (the connection
  pump's `queued_max_request_bytes` budget): producers are throttled from 60% of it. The
  pump itself stops reading large requests at 100% (that is the hard bound); the throttle
  makes well-behaved clients slow down before it comes to that. Small publishes are never
  held for it: they would free nothing that the large requests hold.

The file system is measured, not estimated from what the broker wrote: other programs
share it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

from ..flow.controller import FlowController
from ..flow.watermarks import Pressure, Watermarks
from ..settings import Settings
from ..storage.manager import LogManager

log = logging.getLogger(__name__)

RESOURCE_SAMPLE_MS: Final = 1_000
DISK: Final = "disk"
MEMORY: Final = "memory"


def disk_marks(total_bytes: int, floor_bytes: int) -> Watermarks | None:
    """The disk gauge's marks on used bytes; None when the file system is smaller than
    twice the floor (nothing sensible to guard)."""
    high = total_bytes - floor_bytes
    low = total_bytes - 2 * floor_bytes
    if low < 0 or high <= low:
        return None
    return Watermarks(low, high, resume=total_bytes - floor_bytes * 3 // 2)


class ResourceGuard:
    """Samples the resources into `flow`'s gauges; see the module docstring."""

    def __init__(
        self, data_dir: Path, settings: Settings, flow: FlowController, logs: LogManager
    ) -> None:
        self._data_dir = data_dir
        self._floor = settings.disk_free_min_bytes
        self._flow = flow
        self._logs = logs
        # Throttles only: the pump holds large requests itself (see flow/controller.py).
        flow.guard(MEMORY, Watermarks.of_budget(settings.queued_max_request_bytes), hold=False)

    @property
    def publish_refusal(self) -> str | None:
        """Why client publishes are refused now (free disk below `disk_free_min_bytes`),
        None when they are not: what a protocol tells its publishers (AMQP's
        Connection.Blocked). It changes only in `sample` / `disk`."""
        return self._logs.publish_refusal

    def sample(self, memory_used_bytes: int) -> None:
        self._flow.update(MEMORY, memory_used_bytes)
        try:
            stat = os.statvfs(self._data_dir)
        except OSError as exc:
            log.warning("free space of %s not measured: %s", self._data_dir, exc)
            return
        self.disk(stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize)

    def disk(self, total_bytes: int, free_bytes: int) -> None:
        """Take a measurement of the data directory's file system."""
        marks = disk_marks(total_bytes, self._floor)
        if marks is None:
            self._flow.unguard(DISK)
            self._refuse(None)
            return
        before = self._flow.gauges.get(DISK)
        was_blocked = before is not None and before.state is Pressure.BLOCKED
        self._flow.guard(DISK, marks, hold=False)
        blocked = self._flow.update(DISK, total_bytes - free_bytes) is Pressure.BLOCKED
        if blocked and not was_blocked:
            log.error(
                "free disk space of %s is %d bytes, below disk_free_min_bytes (%d): "
                "publishes are refused until it is back above %d",
                self._data_dir, free_bytes, self._floor, self._floor * 3 // 2,
            )  # fmt: skip
        elif was_blocked and not blocked:
            log.warning(
                "free disk space of %s is %d bytes: publishes resume", self._data_dir, free_bytes
            )
        self._refuse(
            f"free disk space is below disk_free_min_bytes ({self._floor} bytes)"
            if blocked
            else None
        )

    def _refuse(self, reason: str | None) -> None:
        self._logs.publish_refusal = reason
