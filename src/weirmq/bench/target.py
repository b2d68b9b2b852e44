"""The broker under test: one we start, or one the user points us at.

`BrokerProcess` runs ``python -m weirmq serve`` as a subprocess on 127.0.0.1 (port 0, so
two runs never collide) with a fresh data directory, the admin API on as a user runs it,
and settings given only through its environment: a stray ``WEIRMQ_*`` variable in the
caller's shell must not change the figures. Its stderr goes to a file, shown if it fails.
It runs with Python's bytecode cache on even where the caller's shell turned it off
(``PYTHONDONTWRITEBYTECODE``): an installed package has its bytecode compiled, and without
the cache every start recompiles the ~15,000 lines `serve` imports (75-90 ms here), which
would make the start-up figure measure the compiler.

The broker says where it listens with one line per listener on stdout, the Kafka line
first and the services' lines (admin API, SQS API, AMQP) right after it, printed together
once the start can no longer fail (`weirmq.server.run`). `parse_announcement` reads one such
line; `BrokerProcess` reads its stdout's raw bytes with a deadline (`AnnouncementReader`,
never a buffered ``readline``, whose buffer ``select`` cannot see), so a broker that never
announces fails the case instead of hanging the run. The AMQP and SQS lines are looked for
only by whoever asks (`BrokerProcess.wait_for_amqp`, `wait_for_sqs`): when the broker prints
none, the absence shows as silence after the other lines, and waiting for it costs
`AMQP_ANNOUNCE_WAIT_S`.

`ExternalBroker` is any Kafka-compatible broker at ``--bootstrap``. We cannot start or
stop it, so start-up figures are not measured, and its CPU and memory are known only if
its process id is given (``--broker-pid``; it must run on this machine).

Both hand out `Window`s: the broker's CPU time (user + system, from ``/proc/PID/stat``) and
peak resident memory over a stretch of a workload. Peak memory comes from sampling
``VmRSS`` every 50 ms on a thread of this process; ``VmHWM`` would be exact but covers the
process's whole life, and a workload wants the peak of its own window.

A window of our own broker can also read the broker's own counters (``window(metrics=
True)``): its admin API serves Prometheus text at ``/metrics``, scraped just before the
window's CPU reading starts and just after it ends, so the scrapes' own CPU (a few ms,
about a second with 10,000 partitions) stays outside the figures. The difference of two
scrapes gives the Kafka requests the broker answered in the window
(``weirmq_requests_total{api=...}``), so CPU per request comes from two counts taken over
the same stretch, and a latency histogram's buckets for the window's requests alone. It
is opt-in because the admin API's first request, whichever it is, grows the broker's RSS
by some 17 MB (measured on 2 cores, Python 3.11), and that would be in every memory
figure after it: windows whose RSS is a target (idle, partitions) do not scrape. An
external broker's metrics (if any) are not ours to interpret, so its counts are None.

`histogram_quantile` estimates a quantile from cumulative bucket counts the way
Prometheus' ``histogram_quantile`` does: find the bucket where the rank falls and
interpolate linearly inside it, taking 0 as the first bucket's lower bound, and the
highest finite bound when the rank falls in the ``+Inf`` bucket. Its precision is the
bucket width: it says in which bucket the quantile lies and guesses within it.
"""

from __future__ import annotations

import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

ANNOUNCEMENT = "weirmq: accepting Kafka connections on "
ADMIN_ANNOUNCEMENT = "weirmq: admin API, metrics and console on "
AMQP_ANNOUNCEMENT = "weirmq: accepting AMQP connections on "
SQS_ANNOUNCEMENT = "weirmq: accepting SQS requests on "
ANNOUNCEMENTS = {"kafka": ANNOUNCEMENT, "admin": ADMIN_ANNOUNCEMENT, "amqp": AMQP_ANNOUNCEMENT,
                 "sqs": SQS_ANNOUNCEMENT}
URL_KINDS = ("admin", "sqs")  # announced as a base URL, not as HOST:PORT
ANNOUNCE_TIMEOUT_S = 60.0  # spawn to the Kafka line (~0.15-0.5 s here; recovery takes longer)
AMQP_ANNOUNCE_WAIT_S = 2.0  # after the other lines: every line is printed at the same moment
ANNOUNCE_LINE_BYTES_MAX = 4096  # a longer line without a newline is not an announcement
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SAMPLE_INTERVAL_S = 0.05
STOP_TIMEOUT_S = 15.0
SCRAPE_TIMEOUT_S = 30.0  # a scrape of 10,000 partitions' series takes about a second
REQUESTS_METRIC = "weirmq_requests_total"


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (all its threads)."""
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` now."""
    # /proc/PID/statm: size resident shared text lib data dt, in pages.
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES


# --- What the broker announces ----------------------------------------------------------------


def parse_announcement(line: str) -> tuple[str, str] | None:
    """``("kafka" | "admin" | "amqp" | "sqs", address)`` for an announcement line, else None.

    The address is the first word after the prefix (a remark after it is ignored):
    ``HOST:PORT`` (``[v6]:PORT``) for the listeners, the base URL without a trailing slash
    for the admin API and the SQS API.
    """
    for kind, prefix in ANNOUNCEMENTS.items():
        if line.startswith(prefix):
            words = line.removeprefix(prefix).split()
            if not words:
                return None
            return kind, words[0].rstrip("/") if kind in URL_KINDS else words[0]
    return None


class AnnouncementReader:
    """Complete lines out of bytes read from the broker's stdout, and their announcements.

    `feed` takes whatever `os.read` returned and gives back the lines it completed (a
    line may arrive in pieces); `found` keeps the first address of each kind seen. A
    line longer than `ANNOUNCE_LINE_BYTES_MAX` cannot be one: it is dropped up to its
    newline, so memory stays bounded and its tail is not taken for a line of its own.
    """

    def __init__(self) -> None:
        self.found: dict[str, str] = {}
        self.lines: list[str] = []  # every complete line so far, for error messages
        self._partial = b""
        self._dropping = False  # inside an overlong line, until its newline

    def feed(self, data: bytes) -> list[str]:
        *complete, partial = (self._partial + data).split(b"\n")
        if self._dropping and complete:  # the overlong line ends in this piece
            complete.pop(0)
            self._dropping = False
        self._partial = b"" if self._dropping else partial
        if len(self._partial) > ANNOUNCE_LINE_BYTES_MAX:
            self._partial, self._dropping = b"", True
        lines = [raw.decode("utf-8", "replace") for raw in complete]
        self.lines += lines
        for line in lines:
            parsed = parse_announcement(line)
            if parsed is not None:
                self.found.setdefault(*parsed)
        return lines

    def read_until(self, fd: int, kinds: Sequence[str], deadline: float) -> bool:
        """Read `fd` until every kind in `kinds` is found (True), or until end of file or
        `deadline` (a ``time.monotonic()`` value) comes first (False)."""
        while not all(kind in self.found for kind in kinds):
            wait_s = deadline - time.monotonic()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                return False
            data = os.read(fd, 65536)
            if not data:
                return False
            self.feed(data)
        return True


# --- The broker's metrics ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of Prometheus text: a series name, its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r"\\.", lambda m: _ESCAPES.get(m[0], m[0]), value)


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and blank lines skipped)."""
    samples = []
    for line in text.splitlines():
        match = None if line.startswith("#") else _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        pairs = {k: _unescape(v) for k, v in _LABEL.findall(labels or "")}
        samples.append(Sample(name, pairs, float(value)))
    return samples


def metric_total(samples: Sequence[Sample], name: str, **labels: str) -> float | None:
    """The sum of the series called `name` that carry `labels`; None if there is none."""
    values = [s.value for s in samples
              if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None


Buckets = list[tuple[float, float]]  # (upper bound "le", cumulative count), by bound


def histogram_buckets(samples: Sequence[Sample], name: str, **labels: str) -> Buckets | None:
    """The cumulative buckets of histogram `name` over the series carrying `labels`.

    Series that differ in other labels are added bucket by bucket (what Prometheus' ``sum
    by (le)`` does), so the figure covers them all. None if the histogram is absent.
    """
    counts: dict[float, float] = {}
    for s in samples:
        if s.name != f"{name}_bucket" or "le" not in s.labels:
            continue
        if all(s.labels.get(k) == v for k, v in labels.items()):
            le = float(s.labels["le"])  # float() reads "+Inf" too
            counts[le] = counts.get(le, 0.0) + s.value
    return sorted(counts.items()) or None


def bucket_deltas(before: Buckets | None, after: Buckets | None) -> Buckets | None:
    """The buckets of the observations made between two scrapes (same bounds in both)."""
    if before is None or after is None:
        return None
    earlier = dict(before)
    return [(le, count - earlier.get(le, 0.0)) for le, count in after]


def histogram_quantile(q: float, buckets: Buckets | None) -> float | None:
    """The `q` quantile (0-1) of cumulative `buckets`, as Prometheus estimates it.

    None when nothing was observed or the buckets cannot say (no ``+Inf`` bucket, fewer
    than two buckets), where Prometheus would answer NaN.
    """
    assert 0 <= q <= 1, q
    if not buckets or len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:  # in the +Inf bucket: the highest finite bound
        return buckets[-2][0]
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def scrape_metrics(admin_url: str) -> list[Sample]:
    """The samples the broker's admin API serves at ``/metrics`` now."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=SCRAPE_TIMEOUT_S) as response:
        return parse_metrics(response.read().decode())


class Window:
    """The broker's CPU time and peak RSS between `__enter__` and `__exit__` (or `close`).

    With no pid (an external broker whose process we do not know) every figure is None.
    With an `admin_url`, the broker's metrics are scraped on either side of the window
    (see the module docstring); without one, `requests` and `histogram` are None.
    """

    def __init__(self, pid: int | None, admin_url: str | None = None) -> None:
        self.pid = pid
        self.admin_url = admin_url
        self.metrics_before: list[Sample] | None = None
        self.metrics_after: list[Sample] | None = None
        self.cpu_s: float | None = None
        self.peak_rss_bytes: int | None = None
        self.end_rss_bytes: int | None = None
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = 0.0
        self._started = 0.0

    def __enter__(self) -> Window:
        if self.admin_url is not None:  # before the CPU reading: the scrape is not the load's
            self.metrics_before = scrape_metrics(self.admin_url)
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
        if self.admin_url is not None:
            self.metrics_after = scrape_metrics(self.admin_url)

    def requests(self, api: str) -> int | None:
        """Kafka requests of `api` ("Produce", "Fetch") the broker answered in the window."""
        if self.metrics_before is None or self.metrics_after is None:
            return None
        before = metric_total(self.metrics_before, REQUESTS_METRIC, api=api)
        after = metric_total(self.metrics_after, REQUESTS_METRIC, api=api)
        return None if before is None or after is None else round(after - before)

    def histogram(self, name: str, **labels: str) -> Buckets | None:
        """Histogram `name`'s cumulative buckets for the observations in the window."""
        if self.metrics_before is None or self.metrics_after is None:
            return None
        return bucket_deltas(histogram_buckets(self.metrics_before, name, **labels),
                             histogram_buckets(self.metrics_after, name, **labels))

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
    admin_url: str | None  # ours: its admin API, whose metrics count requests

    def window(self, metrics: bool = False) -> Window:
        """A measurement window; with `metrics`, one that scrapes the broker's metrics."""
        ...

    def check_alive(self) -> None: ...

    def stop(self) -> None: ...


AMQP_LISTEN_SETTING = "amqp_listen"
SQS_LISTEN_SETTING = "sqs_listen"


def amqp_listen_env() -> dict[str, str]:
    """The AMQP listener on a free loopback port, as the admin API's, if this build has
    the setting: its default (5672) would clash with any other broker on the machine, a
    RabbitMQ among them. Empty for a build without it (an unknown ``WEIRMQ_`` variable
    stops the broker from starting)."""
    return _free_port_env(AMQP_LISTEN_SETTING)


def sqs_listen_env() -> dict[str, str]:
    """The SQS API on a free loopback port, as `amqp_listen_env` does for AMQP: its
    default (9324) would clash with any other broker, or SQS server, on the machine."""
    return _free_port_env(SQS_LISTEN_SETTING)


def _free_port_env(setting: str) -> dict[str, str]:
    from weirmq.settings import SPECS_BY_NAME

    spec = SPECS_BY_NAME.get(setting)
    return {} if spec is None else {spec.env_var: "127.0.0.1:0"}


class BrokerProcess:
    """``weirmq serve`` as a subprocess with a fresh data directory under `work`."""

    own = True

    def __init__(self, work: Path, settings_env: dict[str, str] | None = None,
                 settle: bool = True) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="broker-", dir=work))
        self.log_path = self.data_dir.with_suffix(".log")
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("WEIRMQ_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(amqp_listen_env())
        env.update(sqs_listen_env())
        env.update(settings_env or {})
        self.started = time.perf_counter()
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "weirmq", "serve", "--listen", "127.0.0.1:0",
                 "--admin-listen", "127.0.0.1:0",
                 "--data-dir", str(self.data_dir), "--log-level", "warning"],
                stdout=subprocess.PIPE, stderr=log, env=env,
            )
        assert self.process.stdout is not None
        self._stdout_fd = self.process.stdout.fileno()
        self._announced = AnnouncementReader()
        deadline = time.monotonic() + ANNOUNCE_TIMEOUT_S
        if not self._announced.read_until(self._stdout_fd, ["kafka"], deadline):
            lines, tail = self._announced.lines, self.log_tail()
            self.stop()
            raise RuntimeError(f"broker did not announce its Kafka listener within "
                               f"{ANNOUNCE_TIMEOUT_S:.0f} s: {lines!r}\n{tail}")
        self.announced_s = time.perf_counter() - self.started
        self.bootstrap = self._announced.found["kafka"]
        self.pid: int | None = self.process.pid
        self.admin_url: str | None = None
        """The admin API's base URL ("http://host:port"), once it is up."""
        if settle:
            self._wait_for_admin(deadline)

    def _wait_for_admin(self, deadline: float) -> None:
        """Return once the admin API's port is open too (its line comes with the Kafka
        one; the API itself loads on its first connection)."""
        if not self._announced.read_until(self._stdout_fd, ["admin"], deadline):
            lines, tail = self._announced.lines, self.log_tail()
            self.stop()
            raise RuntimeError(f"broker's admin API did not start: {lines!r}\n{tail}")
        self.admin_url = self._announced.found["admin"]

    @property
    def amqp_address(self) -> str | None:
        """``HOST:PORT`` of the AMQP listener, if the broker has announced one so far."""
        return self._announced.found.get("amqp")

    def wait_for_amqp(self, timeout_s: float = AMQP_ANNOUNCE_WAIT_S) -> str | None:
        """The AMQP listener's ``HOST:PORT``, or None if the broker announces none.

        Its line comes with the others, so a broker that has printed them and then nothing
        for `timeout_s` has no AMQP listener.
        """
        self._announced.read_until(self._stdout_fd, ["amqp"], time.monotonic() + timeout_s)
        return self.amqp_address

    def wait_for_sqs(self, timeout_s: float = AMQP_ANNOUNCE_WAIT_S) -> str | None:
        """The SQS API's base URL (``http://HOST:PORT``), or None if the broker announces
        none; its line comes with the others, as the AMQP one does (`wait_for_amqp`)."""
        self._announced.read_until(self._stdout_fd, ["sqs"], time.monotonic() + timeout_s)
        return self._announced.found.get("sqs")

    def window(self, metrics: bool = False) -> Window:
        return Window(self.pid, self.admin_url if metrics else None)

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

    def stop_timed(self, timeout_s: float) -> tuple[float, int | None]:
        """SIGTERM, then the seconds until the process exits, and its exit code.

        The wait is on a pidfd, so the figure is the exit itself rather than the next turn
        of a polling loop. A broker still running after `timeout_s` is killed, and its exit
        code is None; `stop` cleans up afterwards either way.
        """
        assert self.process.poll() is None, "the broker is not running"
        pidfd = os.pidfd_open(self.process.pid)
        try:
            start = time.perf_counter()
            self.process.send_signal(signal.SIGTERM)
            exited, _, _ = select.select([pidfd], [], [], timeout_s)
            seconds = time.perf_counter() - start
        finally:
            os.close(pidfd)
        if not exited:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
            return seconds, None
        return seconds, self.process.wait(STOP_TIMEOUT_S)


@dataclass
class ExternalBroker:
    """A broker someone else runs; `pid` (if known) lets us watch its CPU and memory."""

    bootstrap: str
    pid: int | None = None
    own = False
    admin_url: str | None = None  # its metrics are not ours to read

    def window(self, metrics: bool = False) -> Window:
        return Window(self.pid)

    def check_alive(self) -> None:
        if self.pid is not None and not Path(f"/proc/{self.pid}").exists():
            raise RuntimeError(f"broker process {self.pid} is gone")

    def stop(self) -> None:
        """Not ours to stop."""
