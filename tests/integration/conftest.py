"""A real broker in a subprocess for the integration tests, and the fixtures that start it.

Theory of operation: ``BrokerProcess`` runs ``python -m weirmq serve --listen
127.0.0.1:PORT --data-dir DIR`` exactly as a user would. Port 0 lets the kernel pick a free
port; the broker announces the port it got with one line on stdout, which is the only
contract the harness relies on to know the broker is ready. stdout and stderr go to files
in the test's tmp dir, never to pipes: a pipe nobody reads fills up and blocks the broker
in the middle of a test. Every start gets its own pair of files, so the stderr of a run
that crashed is still there after a restart.

The AMQP listener is started on a free port too (``--amqp-listen 127.0.0.1:0``, never
RabbitMQ's 5672, so that parallel brokers, and a RabbitMQ on the machine, do not collide);
its announcement line gives ``BrokerProcess.amqp``. So is the SQS API (``--sqs-listen
127.0.0.1:0``, never its default 9324): ``BrokerProcess.sqs`` and ``sqs_endpoint``, from
its line.

Brokers created through the fixtures are always killed at teardown. When a test fails, the
tail of each broker's stderr (and how the process ended) is attached to the pytest report;
the data directories of passing tests are deleted, those of failing tests are kept.

Every test under ``tests/integration`` is marked ``integration`` by the collection hook
below, so ``pytest -m "not integration"`` skips real sockets and subprocesses.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 10.0
STDERR_TAIL_BYTES = 8_000
ENV_PREFIX = "WEIRMQ_"
STARTUP_LINE = re.compile(
    rb"^weirmq: accepting Kafka connections on (?P<host>[^\s]+):(?P<port>\d+)$", re.M
)
ADMIN_LINE = re.compile(
    rb"^weirmq: admin API, metrics and console on (?P<url>http://[^\s]+)"
    rb" \(token for changes (?:in|from) (?P<token>[^\n]+)\)$",
    re.M,
)
AMQP_LINE = re.compile(
    rb"^weirmq: accepting AMQP connections on (?P<host>[^\s]+):(?P<port>\d+)$", re.M
)
# An IPv6 host is announced in brackets; the group holds it without them.
SQS_LINE = re.compile(
    rb"^weirmq: accepting SQS requests on http://(?:\[(?P<v6>[^\]\s]+)\]|(?P<host>[^\s:]+))"
    rb":(?P<port>\d+)$",
    re.M,
)
HERE = Path(__file__).resolve().parent


class BrokerProcess:
    """One ``weirmq serve`` subprocess bound to a data directory.

    ``start()`` blocks until the broker has printed its startup line. After a first start
    on port 0, the port the broker got is kept, so ``restart()`` comes back on the same
    address and a client that is still running can reconnect to it.
    """

    def __init__(
        self,
        data_dir: Path,
        log_dir: Path,
        *,
        port: int = 0,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        admin_listen: str = "off",
        amqp_listen: str = "127.0.0.1:0",
        sqs_listen: str = "127.0.0.1:0",
    ) -> None:
        self.admin_listen = admin_listen
        self.admin_url: str | None = None
        self.amqp_listen = amqp_listen
        self.amqp: str | None = None
        """HOST:PORT of the AMQP listener as announced (None when it is off). After a
        first start on port 0 it is kept, so `restart` comes back on the same address."""
        self.sqs_listen = sqs_listen
        self.sqs: tuple[str, int] | None = None
        """(host, port) of the SQS API as announced (the host without brackets; None when
        it is off), kept for `restart` as `amqp` is."""
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.port = port
        self.extra_env = dict(env or {})
        self.startup_timeout_s = startup_timeout_s
        self.starts = 0
        self.stderr_path: Path | None = None
        self.stdout_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed_by_harness = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        """Start the broker and wait for its startup line (fails the test if none comes)."""
        assert not self.running, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.stdout_path = self.log_dir / f"broker-{self.starts}.stdout"
        self.stderr_path = self.log_dir / f"broker-{self.starts}.stderr"
        command = [
            sys.executable,
            "-m",
            "weirmq",
            "serve",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--data-dir",
            str(self.data_dir),
            # Brokers of parallel tests must not fight over the admin port; the admin
            # API's own tests start it on a free port.
            "--admin-listen",
            self.admin_listen,
            "--amqp-listen",
            self.amqp or self.amqp_listen,
            # Never 9324: parallel brokers (and another SQS server here) would collide.
            "--sqs-listen",
            self._sqs_address() or self.sqs_listen,
        ]
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self._environment(),
                cwd=self.log_dir,
            )
        self._killed_by_harness = False
        self.port = self._wait_for_startup_line()
        return self

    def kill(self) -> None:
        """SIGKILL: the broker gets no chance to flush or close anything."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._killed_by_harness = True
        proc.kill()
        proc.wait(timeout=KILL_TIMEOUT_S)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Ask for a graceful stop with ``sig`` and return the exit code.

        A broker still running after ``timeout_s`` is killed and the test fails.
        """
        proc = self._proc
        assert proc is not None, "broker never started"
        if proc.poll() is not None:
            return proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(
                f"broker did not exit within {timeout_s:.0f} s of {sig.name}; stderr tail:\n"
                f"{self.stderr_tail()}",
                pytrace=False,
            )

    def restart(self) -> BrokerProcess:
        """Start again on the same data directory and the same port (after kill or stop)."""
        if self.running:
            self.stop()
        return self.start()

    def close(self) -> None:
        """Make sure the process is gone (teardown)."""
        self.kill()

    # -- observation -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.port, "broker not started"
        return f"127.0.0.1:{self.port}"

    @property
    def sqs_endpoint(self) -> str:
        """``http://HOST:PORT`` of the SQS API, an AWS SDK's ``endpoint_url``."""
        address = self._sqs_address()
        assert address is not None, "the SQS API is off or the broker never started"
        return f"http://{address}"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "broker never started"
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def rss_bytes(self) -> int:
        """Resident set size of the broker process, from /proc/PID/status (VmRSS)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+)\s+kB$", status, re.M)
        assert match is not None, f"no VmRSS in /proc/{self.pid}/status"
        return int(match.group(1)) * 1024

    def stderr_tail(self, max_bytes: int = STDERR_TAIL_BYTES) -> str:
        """The end of the current run's stderr (empty before the first start)."""
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        data = self.stderr_path.read_bytes()
        prefix = b"[...]\n" if len(data) > max_bytes else b""
        return (prefix + data[-max_bytes:]).decode("utf-8", "replace")

    def describe(self) -> str:
        """How the process stands, for failure reports."""
        if self._proc is None:
            return "never started"
        code = self._proc.poll()
        if code is None:
            state = "running"
        elif self._killed_by_harness:
            state = "killed by the harness"
        else:
            state = f"exited by itself with code {code}"
        return f"pid {self._proc.pid}, start #{self.starts}, {state}, data dir {self.data_dir}"

    # -- internals ---------------------------------------------------------------------------

    def _sqs_address(self) -> str | None:
        """`sqs` as HOST:PORT (an IPv6 host in brackets), or None."""
        if self.sqs is None:
            return None
        host, port = self.sqs
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _environment(self) -> dict[str, str]:
        # Settings inherited from the developer's shell would make runs differ between
        # machines: only the ones the test asks for reach the broker.
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env.update(self.extra_env)
        env["PYTHONFAULTHANDLER"] = "1"  # a hard crash leaves a traceback in stderr
        return env

    def _wait_for_startup_line(self) -> int:
        """The Kafka port, once announced (and the admin API's, when it is on)."""
        proc = self._proc
        assert proc is not None and self.stdout_path is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            stdout = self.stdout_path.read_bytes()
            match = STARTUP_LINE.search(stdout)
            admin = ADMIN_LINE.search(stdout)
            amqp = AMQP_LINE.search(stdout)
            sqs = SQS_LINE.search(stdout)
            if (
                match is not None
                and (self.admin_listen == "off" or admin is not None)
                and (self.amqp_listen == "off" or amqp is not None)
                and (self.sqs_listen == "off" or sqs is not None)
            ):
                self.admin_url = admin.group("url").decode() if admin else None
                if amqp is not None:
                    self.amqp = f"{amqp.group('host').decode()}:{amqp.group('port').decode()}"
                if sqs is not None:
                    host = sqs.group("v6") or sqs.group("host")
                    self.sqs = (host.decode(), int(sqs.group("port")))
                return int(match.group("port"))
            code = proc.poll()
            if code is not None:
                pytest.fail(
                    f"broker exited with code {code} before accepting connections "
                    f"(start #{self.starts}); stderr tail:\n{self.stderr_tail()}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                self.kill()
                stdout = self.stdout_path.read_bytes()[-2_000:].decode("utf-8", "replace")
                pytest.fail(
                    f"broker printed no startup line within {self.startup_timeout_s:.0f} s "
                    f"(start #{self.starts}); stdout: {stdout!r}; stderr tail:\n"
                    f"{self.stderr_tail()}",
                    pytrace=False,
                )
            time.sleep(0.02)


def broker_env(**settings: object) -> dict[str, str]:
    """``default_partitions=4`` -> ``{"WEIRMQ_DEFAULT_PARTITIONS": "4"}``."""
    return {ENV_PREFIX + name.upper(): str(value) for name, value in settings.items()}


# -- pytest wiring ----------------------------------------------------------------------------

BROKERS_KEY = pytest.StashKey[list[BrokerProcess]]()
REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()

BrokerFactory = Callable[..., BrokerProcess]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselection looks at the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every collected item of the session, not only this directory's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(REPORTS_KEY, {})[report.when] = report
    if report.failed:
        for number, broker in enumerate(item.stash.get(BROKERS_KEY, []), start=1):
            report.sections.append(
                (
                    f"broker {number} ({broker.describe()}) stderr tail",
                    broker.stderr_tail() or "(empty)",
                )
            )
    return report


def _test_failed(item: pytest.Item) -> bool:
    reports = item.stash.get(REPORTS_KEY, {})
    return not reports or any(r.failed for r in reports.values())


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerFactory]:
    """``broker_factory(default_partitions=4)``: start a broker with those WEIRMQ_* settings
    (``admin_listen="127.0.0.1:0"`` turns the HTTP admin API on; it is off by default;
    ``amqp_listen="off"`` turns the AMQP listener off, ``sqs_listen="off"`` the SQS API;
    both are on a free port by default).

    Each broker gets a fresh data dir in the test's tmp dir and is killed at teardown.
    """
    brokers = request.node.stash.setdefault(BROKERS_KEY, [])

    def make(
        admin_listen: str = "off",
        amqp_listen: str = "127.0.0.1:0",
        sqs_listen: str = "127.0.0.1:0",
        **settings: object,
    ) -> BrokerProcess:
        number = len(brokers) + 1
        broker = BrokerProcess(
            tmp_path / f"broker{number}" / "data",
            tmp_path / f"broker{number}" / "logs",
            env=broker_env(**settings),
            admin_listen=admin_listen,
            amqp_listen=amqp_listen,
            sqs_listen=sqs_listen,
        )
        brokers.append(broker)
        return broker.start()

    yield make
    for broker in brokers:
        broker.close()
    if not _test_failed(request.node):
        for broker in brokers:
            shutil.rmtree(broker.data_dir, ignore_errors=True)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A running broker with default settings and an empty data dir."""
    return broker_factory()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The AMQP port of a private RabbitMQ node on 127.0.0.1 (guest/guest, vhost ``/``), the
    reference server of the AMQP differential tests; one node for the whole session, so
    each test uses names of its own. Skips where the Debian package rabbitmq-server is not
    installed. See rabbitmq_support.py."""
    from rabbitmq_support import running_rabbitmq

    with running_rabbitmq(tmp_path_factory.mktemp("rabbitmq")) as port:
        yield port
