"""The broker under test: one we start, or one the user points us at.

`BrokerProcess` runs ``python -m weirmq serve`` as a subprocess on 127.0.0.1 (port 0, so
two runs never collide) with a fresh data directory, the admin API on as a user runs it,
and settings given only through its environment: a stray ``WEIRMQ_*`` variable in the
caller's shell must not change the figures. Its stderr goes to a file, shown if it fails.

`ExternalBroker` is any Kafka-compatible broker at ``--bootstrap``. We cannot start or
stop it, so start-up figures are not measured, and its CPU and memory are known only if
its process id is given (``--broker-pid``; it must run on this machine).

Both hand out `Window`s: the broker's CPU time (user + system, from ``/proc/PID/stat``) and
peak resident memory over a stretch of a workload. Peak memory comes from sampling
``VmRSS`` every 50 ms on a thread of this process; ``VmHWM`` would be exact but covers the
process's whole life, and a workload wants the peak of its own window.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

ANNOUNCEMENT = "weirmq: accepting Kafka connections on "
ADMIN_ANNOUNCEMENT = "weirmq: admin API and metrics on "
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SAMPLE_INTERVAL_S = 0.05
STOP_TIMEOUT_S = 15.0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (all its threads)."""
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` now."""
    # /proc/PID/statm: size resident shared text lib data dt, in pages.
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES


class Window:
    """The broker's CPU time and peak RSS between `__enter__` and `__exit__` (or `close`).

    With no pid (an external broker whose process we do not know) every figure is None.
    """

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.cpu_s: float | None = None
        self.peak_rss_bytes: int | None = None
        self.end_rss_bytes: int | None = None
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = 0.0
        self._started = 0.0

    def __enter__(self) -> Window:
        self._started = time.perf_counter()
        if self.pid is not None:
            self._cpu_start = process_cpu_s(self.pid)
            self.peak_rss_bytes = process_rss_bytes(self.pid)
            self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        assert self.pid is not None
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            try:
                rss = process_rss_bytes(self.pid)
            except OSError:  # the process is gone; the workload will say so
                return
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, rss)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.seconds = time.perf_counter() - self._started
        if self.pid is not None:
            self.cpu_s = process_cpu_s(self.pid) - self._cpu_start
            self.end_rss_bytes = process_rss_bytes(self.pid)
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, self.end_rss_bytes)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def figures(self) -> dict[str, float | None]:
        mb = 1e6
        return {
            "broker_cpu_s": self.cpu_s,
            "broker_cpu_percent": (None if self.cpu_s is None or not self.seconds
                                   else 100 * self.cpu_s / self.seconds),
            "broker_peak_rss_mb": (None if self.peak_rss_bytes is None
                                   else self.peak_rss_bytes / mb),
        }


class Target(Protocol):
    """What a workload needs from the broker under test."""

    bootstrap: str
    pid: int | None
    own: bool  # True when we started it (and may restart it per workload)

    def window(self) -> Window: ...

    def check_alive(self) -> None: ...

    def stop(self) -> None: ...


class BrokerProcess:
    """``weirmq serve`` as a subprocess with a fresh data directory under `work`."""

    own = True

    def __init__(self, work: Path, settings_env: dict[str, str] | None = None,
                 settle: bool = True) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="broker-", dir=work))
        self.log_path = self.data_dir.with_suffix(".log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
        env.update(settings_env or {})
        self.started = time.perf_counter()
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "weirmq", "serve", "--listen", "127.0.0.1:0",
                 "--admin-listen", "127.0.0.1:0",
                 "--data-dir", str(self.data_dir), "--log-level", "warning"],
                stdout=subprocess.PIPE, stderr=log, env=env, text=True,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the broker announces within a second or two
        self.announced_s = time.perf_counter() - self.started
        if not line.startswith(ANNOUNCEMENT):
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
            raise RuntimeError(f"broker did not start: {line!r}\n{self.log_tail()}")
        self.bootstrap = line.removeprefix(ANNOUNCEMENT).strip()
        self.pid: int | None = self.process.pid
        if settle:
            self._wait_for_admin()

    def _wait_for_admin(self) -> None:
        """Return once the admin API is up too.

        It starts after the Kafka port opens, importing aiohttp (~300 ms of CPU) on a
        thread: a measurement started before that would pay for it. The line comes within
        a second or two, or the process ends and the read returns at EOF.
        """
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith(ADMIN_ANNOUNCEMENT):
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"broker's admin API did not start: {line!r}\n{tail}")

    def window(self) -> Window:
        return Window(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"broker exited with {self.process.returncode}\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)


@dataclass
class ExternalBroker:
    """A broker someone else runs; `pid` (if known) lets us watch its CPU and memory."""

    bootstrap: str
    pid: int | None = None
    own = False

    def window(self) -> Window:
        return Window(self.pid)

    def check_alive(self) -> None:
        if self.pid is not None and not Path(f"/proc/{self.pid}").exists():
            raise RuntimeError(f"broker process {self.pid} is gone")

    def stop(self) -> None:
        """Not ours to stop."""
