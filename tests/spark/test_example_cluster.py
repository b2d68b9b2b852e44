"""examples/order_pipeline.py, unchanged, on a Spark standalone cluster on 127.0.0.1.

This is docs/spark.md's recipe ("A standalone cluster on one machine") run by a test: the
installed pyspark's `spark-class` starts a master and two workers (one core and 1 GB
each), and the example runs in a process of its own with `--master spark://...` against
the shared test broker (`bootstrap`), as a user would run it. Nothing of the example is
imported or patched: a cluster run must work with only the environment the docs ask for
(PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON naming this venv's Python, SPARK_LOCAL_IP).

The cluster, step by step:

    free ports ──> master (spark-class ...Master) ──> poll the master's
      http://127.0.0.1:<webui>/json/ until it is ALIVE ──> two workers (...Worker
      spark://...) ──> poll the master's /json/ until both workers are ALIVE
      ──> the example (spark-submit's driver) ──> executors on both workers ──> exit 0
      ──> master /json/: the application FINISHED; each worker's /json/ and --work-dir:
          an executor of that application ran there

What is checked, and why so. The outputs are checked as the local-master test checks
them: the example compares both sinks (the result topic and Parquet) with the revenue it
computes in plain Python and prints "... (window, region) rows, N orders, ...: as computed
from the orders" only for an exact match, so both lines must be there. That alone would
also pass on a driver that quietly ran `local[*]`, so the cluster is asked too: the
master must list the application as completed, and each worker must have run one of its
executors (in the worker's JSON and as `<app id>/<executor id>/stderr` in its work dir),
registered with the driver and ran tasks (its log at Spark's default INFO level says so).
How many tasks each ran is the scheduler's business and is not asserted: with one core
per executor, every stage of two or more tasks uses both once both have registered, and
they register seconds before the first job (the driver creates topics and produces first).

Isolation. Every port (master RPC and web UI, worker RPC and web UIs) is a free one found
here, never Spark's 7077/8080: parallel runs and a developer's own cluster must not
collide. The master's REST submission server (fixed port 6066) is turned off, as nothing
here submits through it. Work, local and log files go under the test's tmp_path; each
daemon's output goes to a file, never a pipe nobody reads.

Cleanup. Each daemon is started in a process group of its own (spark-class is a shell
script that runs the launcher and then execs java; a worker's executors are its
children), and the whole group is stopped at teardown, passing or failing: SIGTERM, then
SIGKILL after STOP_TIMEOUT_S. The example, too, runs in its own group, killed if it
outlives DEMO_TIMEOUT_S (its driver JVM is a child of its Python).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_pipeline.py"
APP_NAME = "weirmq-order-pipeline"  # the example's appName on a cluster
DEMO_ORDERS = 300  # as the local-master test: the point is the cluster, not the volume
WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"  # what one executor asks by default (spark.executor.memory)

CLUSTER_START_TIMEOUT_S = 60.0  # per step (the master; then its workers), on 2 shared cores
DEMO_TIMEOUT_S = 240.0
APP_FINISHED_TIMEOUT_S = 30.0  # the master and workers record the end asynchronously
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.5
HTTP_TIMEOUT_S = 5.0
LOG_TAIL_BYTES = 4_000


@dataclass
class Daemon:
    """One master or worker process (and its process group), with its output file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        if not self.log.exists():
            return "(no output)"
        data = self.log.read_bytes()
        prefix = b"[...]\n" if len(data) > LOG_TAIL_BYTES else b""
        return (prefix + data[-LOG_TAIL_BYTES:]).decode("utf-8", "replace")

    def stop(self) -> None:
        _stop_group(self.process)


@dataclass
class Worker:
    daemon: Daemon
    webui_port: int
    work_dir: Path


@dataclass
class StandaloneCluster:
    master: Daemon
    master_url: str
    master_webui_port: int
    workers: list[Worker]

    def master_status(self) -> dict[str, Any]:
        return _get_json(self.master_webui_port)

    def logs(self) -> str:
        daemons = [self.master, *(w.daemon for w in self.workers)]
        return "".join(
            f"\n--- {d.name} ({_describe(d.process)}) output ---\n{d.tail()}" for d in daemons
        )


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    master_port, master_webui, *worker_ports = _free_ports(2 + 2 * WORKERS)
    env = _spark_environment(tmp_path)
    daemons: list[Daemon] = []
    try:
        master = _start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(master_port)),
                *("--webui-port", str(master_webui)),
            ],
            env,
            tmp_path,
        )
        daemons.append(master)
        cluster = StandaloneCluster(master, f"spark://127.0.0.1:{master_port}", master_webui, [])
        # Workers only once the master is up: a worker that finds no master retries only
        # after 5 to 15 s, far longer than the master takes to start.
        _wait_for_master(cluster, daemons, lambda status: status.get("status") == "ALIVE")
        for number in range(1, WORKERS + 1):
            rpc_port, webui_port = worker_ports[2 * number - 2 : 2 * number]
            work_dir = tmp_path / f"worker-{number}"
            work_dir.mkdir()
            daemon = _start(
                f"worker-{number}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", "127.0.0.1", "--port", str(rpc_port)),
                    *("--webui-port", str(webui_port)),
                    *("--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY),
                    *("--work-dir", str(work_dir)),
                    cluster.master_url,
                ],
                env,
                tmp_path,
            )
            daemons.append(daemon)
            cluster.workers.append(Worker(daemon, webui_port, work_dir))
        _wait_for_master(cluster, daemons, lambda status: _alive_workers(status) == WORKERS)
        yield cluster
    finally:
        for daemon in reversed(daemons):  # workers first: the master outlives its workers
            daemon.stop()


def test_example_runs_on_a_standalone_cluster(
    spark_cluster: StandaloneCluster, bootstrap: str, tmp_path: Path
) -> None:
    work_dir = tmp_path / "work"
    command = [
        sys.executable,
        str(EXAMPLE),
        *("--master", spark_cluster.master_url),
        *("--bootstrap", bootstrap),
        *("--orders", str(DEMO_ORDERS)),
        *("--work-dir", str(work_dir)),
    ]
    returncode, output = _run_demo(command, _spark_environment(tmp_path))
    (tmp_path / "example.log").write_text(output)  # kept by pytest for a look afterwards
    failure = f"{output[-6000:]}{spark_cluster.logs()}"
    assert returncode == 0, failure
    assert f"Spark session ready on {spark_cluster.master_url} " in output, failure
    # Both sinks (the result topic and Parquet) hold every order, as computed.
    assert output.count(f"(window, region) rows, {DEMO_ORDERS} orders,") == 2, failure
    # --work-dir was used for the checkpoint (a local path every "node" here shares).
    checkpoints = list(work_dir.glob("order-pipeline-*/checkpoint"))
    assert len(checkpoints) == 1, list(work_dir.iterdir())

    app_id = _finished_app_id(spark_cluster)
    for worker in spark_cluster.workers:
        _assert_ran_an_executor(worker, app_id, spark_cluster)


# --- starting and stopping ------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (held together, so never the same one
    twice; another process may still take one before Spark binds it, which fails the
    start loudly rather than silently)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _spark_environment(tmp_path: Path) -> dict[str, str]:
    """The environment docs/spark.md asks for, for the daemons and the driver alike."""
    local_dirs = tmp_path / "spark-local"  # shuffle and block-manager files
    local_dirs.mkdir(exist_ok=True)
    conf_dir = tmp_path / "spark-conf"  # empty: no spark-defaults.conf from elsewhere
    conf_dir.mkdir(exist_ok=True)
    return {
        **os.environ,
        # The installed pyspark, not some other Spark a SPARK_HOME in the shell names.
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_CONF_DIR": str(conf_dir),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # Names in URLs and executor addresses as 127.0.0.1, never a reverse lookup of it.
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(local_dirs),
        # The REST submission server has a fixed port (6066) that parallel runs share.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def _start(name: str, arguments: list[str], env: Mapping[str, str], tmp_path: Path) -> Daemon:
    spark_class = Path(sysconfig.get_path("scripts")) / "spark-class"  # pip's, as in the docs
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(spark_class), *arguments],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=tmp_path,
            start_new_session=True,  # a process group of its own, stopped as a whole
        )
    return Daemon(name, process, log)


def _stop_group(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the process's group, SIGKILL if it is still there after STOP_TIMEOUT_S.
    The group outlives its leader (an executor whose worker died), so it is signalled
    even when the leader has exited."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _group_alive(process.pid) and time.monotonic() < deadline:
            process.poll()  # reap the leader, or it stays a zombie member of the group
            time.sleep(0.1)
        if not _group_alive(process.pid):
            break
    process.wait(timeout=STOP_TIMEOUT_S)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _describe(process: subprocess.Popen[bytes]) -> str:
    code = process.poll()
    return f"pid {process.pid}, " + ("running" if code is None else f"exited with code {code}")


def _wait_for_master(
    cluster: StandaloneCluster,
    daemons: list[Daemon],
    ready: Callable[[dict[str, Any]], bool],
) -> None:
    """Polls the master's JSON status until `ready(status)`; fails with every daemon's
    output if one exits or CLUSTER_START_TIMEOUT_S passes (counted per wait)."""
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        exited = [d.name for d in daemons if d.process.poll() is not None]
        if exited:
            pytest.fail(f"{', '.join(exited)} exited while starting:{cluster.logs()}")
        with contextlib.suppress(OSError, ValueError):  # not listening yet, or half-written
            status = cluster.master_status()
            if ready(status):
                return
        time.sleep(POLL_INTERVAL_S)
    pytest.fail(
        f"the cluster was not ready within {CLUSTER_START_TIMEOUT_S:.0f} s; the master's "
        f"last status {status.get('status')}, workers {status.get('workers')}:{cluster.logs()}"
    )


def _alive_workers(status: dict[str, Any]) -> int:
    return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")


def _run_demo(command: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Runs the example to its end (or kills its group after DEMO_TIMEOUT_S); returns its
    exit code and its stdout then stderr."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_group(process)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"the example did not finish within {DEMO_TIMEOUT_S:.0f} s:\n{stdout[-3000:]}"
            f"{stderr[-3000:]}"
        )
    finally:
        _stop_group(process)  # the driver JVM, should it outlive its Python
    return process.returncode, stdout + stderr


# --- asking the cluster ---------------------------------------------------------------------


def _get_json(webui_port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{webui_port}/json/"
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        status: dict[str, Any] = json.load(response)
    return status


def _finished_app_id(cluster: StandaloneCluster) -> str:
    """The id of the example's application, once the master lists it as completed."""
    deadline = time.monotonic() + APP_FINISHED_TIMEOUT_S
    while True:
        status = cluster.master_status()
        done = [a for a in status.get("completedapps", []) if a.get("name") == APP_NAME]
        if done:
            assert len(done) == 1, done
            assert done[0]["state"] == "FINISHED", done
            assert not [a for a in status.get("activeapps", []) if a.get("name") == APP_NAME]
            return str(done[0]["id"])
        assert time.monotonic() < deadline, (
            f"the master lists no completed {APP_NAME} after {APP_FINISHED_TIMEOUT_S:.0f} s: "
            f"active {status.get('activeapps')}, completed {status.get('completedapps')}"
            f"{cluster.logs()}"
        )
        time.sleep(POLL_INTERVAL_S)


def _assert_ran_an_executor(worker: Worker, app_id: str, cluster: StandaloneCluster) -> None:
    """The worker ran an executor of `app_id`, which reached the driver and ran tasks."""
    status = _get_json(worker.webui_port)
    ran = [
        e
        for e in status.get("executors", []) + status.get("finishedexecutors", [])
        if e.get("appid") == app_id
    ]
    assert ran, f"{worker.daemon.name} ran no executor of {app_id}: {status}{cluster.logs()}"
    logs = sorted((worker.work_dir / app_id).glob("*/stderr"))
    assert len(logs) == len(ran), (worker.work_dir, logs, ran)
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Successfully registered with driver" in text, f"{log}:\n{text[-3000:]}"
        assert re.search(r"Executor: Running task \S+ in stage", text), f"{log}:\n{text[-3000:]}"
