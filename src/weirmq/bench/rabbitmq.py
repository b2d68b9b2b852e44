"""A private RabbitMQ node: the reference AMQP 0-9-1 server for benchmarks and tests.

`RabbitNode` starts one node from the Debian package ``rabbitmq-server`` as a child of this
process, waits until it accepts AMQP connections, and stops it leaving nothing running.
The benchmark's ``amqp`` workload measures it next to WeirMQ, and the integration tests use
it as an oracle (``tests/integration/rabbitmq_support.py``); both import it from here.

Theory of operation
-------------------
- **Nothing shared with a system RabbitMQ.** Every port is a free one the kernel handed
  out on 127.0.0.1: AMQP (``listeners.tcp.default`` in a ``rabbitmq.conf`` of our own), the
  node's distribution port (``RABBITMQ_DIST_PORT``, bound to 127.0.0.1 only) and epmd's
  (``ERL_EPMD_PORT``). The node name is unique (``weirmq-<hex>@localhost``). Its data,
  logs, config, enabled-plugins file, pid file and Erlang cookie (``HOME``) live in a
  fresh directory; ``RABBITMQ_CONF_ENV_FILE`` points there too, so the machine's
  ``/etc/rabbitmq`` files never reach it, and the caller's ``RABBITMQ_*`` and ``ERL_*``
  variables are dropped. A system service on 5672 and 4369, running or not, is never
  touched, and two nodes (parallel test runs) never meet.
- **Our own epmd.** An Erlang node registers with the epmd on ``ERL_EPMD_PORT`` and starts
  one itself, as a daemon outside our process tree, when none answers there. So we start
  epmd first as our child (foreground, loopback only), and it goes when we stop it.
- **The package's own script, not the wrapper.** Debian's ``/usr/sbin/rabbitmq-server``
  is a wrapper that switches to the ``rabbitmq`` user (and its HOME) and sends output to
  ``/var/log``; we run the script it wraps, found next to the wrapper's real path, as the
  current user (root in CI), with its output in our directory.
- **Ready means AMQP works.** The node is ready when pika completes a connection to it
  (guest/guest from loopback, RabbitMQ's default), polled until `startup_timeout_s`.
  A fresh node takes ~6 s here (Erlang boot and a new Mnesia schema).
- **Stopping.** SIGTERM to the script, which stops the Erlang VM in order (RabbitMQ's
  signal handling) and exits; after `stop_timeout_s` the script's process group and the
  VM are killed. The VM's own children (``erl_child_setup``, ``inet_gethost``, the disk
  monitor's shell) run in sessions of their own, so they are noted before the stop and
  any still alive a few seconds after it are killed, each checked by its start time so a
  reused pid is never hit. Then epmd goes. The VM's pid (from RabbitMQ's pid file) is
  `pid`, so a benchmark can read the server's CPU and memory from ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

DEB_PACKAGE = "rabbitmq-server"
SERVER_SCRIPT = "rabbitmq-server"
DEBIAN_WRAPPER = "rabbitmq-script-wrapper"  # what /usr/sbin/rabbitmq-server links to
EPMD = "epmd"
LOOPBACK = "127.0.0.1"
GUEST = ("guest", "guest")  # RabbitMQ's default user, allowed from loopback only

STARTUP_TIMEOUT_S = 60.0
"""From spawning the script to a completed AMQP connection (a fresh node: ~6 s here)."""
STOP_TIMEOUT_S = 30.0
"""SIGTERM to exit; then the node is killed."""
EPMD_TIMEOUT_S = 10.0
"""For epmd to listen, and to exit."""
CHILDREN_GRACE_S = 5.0
"""How long the VM's children get to exit by themselves after the VM has gone."""
POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 2.0
"""One readiness probe's socket and handshake timeout."""
LOG_TAIL_BYTES = 64_000
LOG_TAIL_LINES = 12
LOG_LINE_CHARS = 400


class RabbitMQNotInstalled(RuntimeError):
    """The ``rabbitmq-server`` script (or epmd) is not on this machine."""


class RabbitMQStartFailed(RuntimeError):
    """The node exited, or did not accept AMQP connections in time; the message has its
    output's tail."""


def server_script() -> Path | None:
    """The package's own ``rabbitmq-server`` script, or None if it is not installed.

    Found through the PATH (``/usr/sbin`` is on root's); a Debian wrapper is followed to
    the script it runs as another user, which sits in the same directory under the same
    name. A ``rabbitmq-server`` that is not the wrapper (an upstream tarball's ``sbin``
    on the PATH) is used as it is.
    """
    found = shutil.which(SERVER_SCRIPT)
    if found is None:
        return None
    real = Path(found).resolve()
    if real.name != DEBIAN_WRAPPER:
        return real
    script = real.parent / SERVER_SCRIPT
    return script if os.access(script, os.X_OK) else None


def not_installed_reason() -> str | None:
    """Why no node can be started here, or None if one can."""
    if server_script() is None:
        return (f"RabbitMQ is not installed: no {SERVER_SCRIPT} on the PATH (the Debian "
                f"package {DEB_PACKAGE}; `make system-deps` installs it as root)")
    if shutil.which(EPMD) is None:
        return f"no {EPMD} on the PATH (Erlang's, which the package {DEB_PACKAGE} brings)"
    return None


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago.

    All are held open together until every one is chosen, so they differ. Another process
    could take one before our server binds it; the server then fails to start and says so.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def config_text(amqp_port: int) -> str:
    """The node's ``rabbitmq.conf``: AMQP on loopback only, nothing else changed."""
    return f"listeners.tcp.default = {LOOPBACK}:{amqp_port}\n"


def node_environment(base: dict[str, str], directory: Path, *, node_name: str, amqp_port: int,
                     dist_port: int, epmd_port: int) -> dict[str, str]:
    """The script's environment: `base` without ``RABBITMQ_*``/``ERL_*``, plus ours."""
    env = {k: v for k, v in base.items()
           if not k.startswith(("RABBITMQ_", "ERL_")) and k != "NOTIFY_SOCKET"}
    env.update({
        "HOME": str(directory),  # the Erlang cookie goes here
        "RABBITMQ_NODENAME": node_name,
        "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": LOOPBACK,
        # The distribution listener on loopback only (it binds every address otherwise).
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "RABBITMQ_CONF_ENV_FILE": str(directory / "rabbitmq-env.conf"),  # absent: none read
        "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / "advanced.config"),  # absent
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
        "RABBITMQ_LOG_BASE": str(directory / "log"),
        "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
    })
    return env


def _start_ticks(pid: int) -> int | None:
    """A live process's start time (clock ticks after boot), or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):  # exited, not yet reaped: gone for our purposes
        return None
    return int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """Every process below `root` now, by pid, with its start time."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, int] = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        ticks = _start_ticks(pid)
        if ticks is not None and pid not in found:
            found[pid] = ticks
            todo += parents.get(pid, [])
    return found


def _wait_gone(processes: dict[int, int], timeout_s: float) -> dict[int, int]:
    """Wait until these (pid, start time) are gone; the ones still there at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {p: t for p, t in processes.items() if _start_ticks(p) == t}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _kill(processes: dict[int, int]) -> None:
    for pid, ticks in processes.items():
        if _start_ticks(pid) == ticks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def amqp_ready(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a pika connection to `host`:`port` (guest/guest) completes now."""
    import pika  # type: ignore[import-untyped]  # pika ships no type hints

    parameters = pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials(*GUEST), connection_attempts=1,
        socket_timeout=timeout_s, stack_timeout=timeout_s, blocked_connection_timeout=timeout_s)
    try:
        connection = pika.BlockingConnection(parameters)
    except pika.exceptions.AMQPError:
        return False
    connection.close()
    return True


class RabbitNode:
    """One private RabbitMQ node; `start()` returns once it accepts AMQP connections.

    Use it as a context manager, or call `start()` and `stop()`. `directory` is created
    under `parent` (the system's temporary directory if None) and removed by `stop()` if
    `remove_directory`; a test run keeps it, so a failure leaves the node's logs to read.
    """

    def __init__(self, parent: Path | None = None, *, remove_directory: bool = True,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 stop_timeout_s: float = STOP_TIMEOUT_S) -> None:
        # Absolute: the node runs in it, and resolves HOME and its paths from there.
        self.directory = Path(tempfile.mkdtemp(prefix="rabbitmq-", dir=parent)).resolve()
        self.remove_directory = remove_directory
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.node_name = f"weirmq-{uuid.uuid4().hex[:12]}@localhost"
        self.host = LOOPBACK
        self.port = 0
        self.pid: int | None = None  # the Erlang VM's, once started
        self.started_s: float | None = None  # spawn to a first AMQP connection
        self.log_path = self.directory / "node.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._epmd: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> RabbitNode:
        """Start epmd and the node; raise `RabbitMQNotInstalled` or `RabbitMQStartFailed`."""
        assert self._process is None, "node already started"
        began = time.monotonic()
        try:
            reason = not_installed_reason()
            script = server_script()
            if reason is not None or script is None:
                raise RabbitMQNotInstalled(reason or "no rabbitmq-server script")
            self.port, dist_port, epmd_port = free_ports(3)
            (self.directory / "rabbitmq.conf").write_text(config_text(self.port))
            (self.directory / "enabled_plugins").write_text("[].\n")
            env = node_environment(dict(os.environ), self.directory, node_name=self.node_name,
                                   amqp_port=self.port, dist_port=dist_port,
                                   epmd_port=epmd_port)
            self._start_epmd(epmd_port)
            with self.log_path.open("wb") as log:
                self._process = subprocess.Popen(
                    [str(script)], stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=env, cwd=self.directory,
                    start_new_session=True)
            self._wait_ready(began + self.startup_timeout_s)
            self.started_s = time.monotonic() - began
            self.pid = self._read_pid(began + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the node and epmd; afterwards none of their processes is left."""
        process, self._process = self._process, None
        if process is not None:
            self._stop_node(process)
        epmd, self._epmd = self._epmd, None
        if epmd is not None:
            epmd.terminate()
            try:
                epmd.wait(EPMD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                epmd.kill()
                epmd.wait(EPMD_TIMEOUT_S)
        if self.remove_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RabbitNode:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- observation -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The AMQP URL of the default vhost, as guest."""
        assert self.port, "node not started"
        return f"amqp://{GUEST[0]}:{GUEST[1]}@{self.host}:{self.port}/%2F"

    @property
    def process_ids(self) -> dict[str, int]:
        """Our processes while the node runs: ``epmd``, the ``script`` and its Erlang
        ``vm``; none of them is left after `stop`."""
        ids = {"epmd": self._epmd, "script": self._process}
        found = {name: p.pid for name, p in ids.items() if p is not None}
        return found if self.pid is None else {**found, "vm": self.pid}

    def check_alive(self) -> None:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError(f"RabbitMQ node {self.node_name} is not running\n"
                               f"{self.log_tail()}")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The end of the node's console output, each line cut to `LOG_LINE_CHARS` (an
        Erlang crash report is one line of several kilobytes)."""
        try:
            data = self.log_path.read_bytes()[-LOG_TAIL_BYTES:]
        except OSError:
            return ""
        tail = data.decode("utf-8", "replace").splitlines()[-lines:]
        return "\n".join(line if len(line) <= LOG_LINE_CHARS
                         else line[:LOG_LINE_CHARS] + " [...]" for line in tail)

    # -- internals ---------------------------------------------------------------------------

    def _start_epmd(self, port: int) -> None:
        epmd = shutil.which(EPMD)
        assert epmd is not None
        self._epmd = subprocess.Popen(
            [epmd, "-port", str(port), "-address", LOOPBACK], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + EPMD_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 1):
                return
            if self._epmd.poll() is not None or time.monotonic() > deadline:
                raise RabbitMQStartFailed(f"epmd did not listen on {LOOPBACK}:{port} within "
                                          f"{EPMD_TIMEOUT_S:.0f} s (exit {self._epmd.poll()})")
            time.sleep(0.02)

    def _wait_ready(self, deadline: float) -> None:
        process = self._process
        assert process is not None
        while not amqp_ready(self.host, self.port):
            if process.poll() is not None:
                raise RabbitMQStartFailed(
                    f"RabbitMQ node {self.node_name} exited with {process.returncode} before "
                    f"accepting connections; its output:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RabbitMQStartFailed(
                    f"RabbitMQ node {self.node_name} accepted no AMQP connection on "
                    f"{self.host}:{self.port} within {self.startup_timeout_s:.0f} s; its "
                    f"output:\n{self.log_tail()}")
            time.sleep(POLL_INTERVAL_S)

    def _read_pid(self, deadline: float) -> int | None:
        """The VM's pid from RabbitMQ's pid file (written early in its boot)."""
        path = self.directory / "rabbitmq.pid"
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                return int(path.read_text().strip())
            time.sleep(0.05)
        return None

    def _stop_node(self, process: subprocess.Popen[bytes]) -> None:
        vm: dict[int, int] = {}
        children: dict[int, int] = {}
        if self.pid is not None and (ticks := _start_ticks(self.pid)) is not None:
            vm = {self.pid: ticks}
            children = _descendants(self.pid)
        children.update({p: t for p, t in _descendants(process.pid).items() if p not in vm})
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(self.stop_timeout_s)
        # The script waits for the VM; if it was killed, the VM may still be there.
        _kill(_wait_gone(vm, CHILDREN_GRACE_S))
        _kill(_wait_gone(children, CHILDREN_GRACE_S))
        left = _wait_gone({**vm, **children}, CHILDREN_GRACE_S)
        assert not left, f"RabbitMQ processes survived SIGKILL: {sorted(left)}"
