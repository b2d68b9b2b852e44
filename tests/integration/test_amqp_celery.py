"""A Celery worker on `weirmq serve`: tasks, retries and countdowns, results over AMQP.

The worker is a real `celery -A amqp_celery_app worker` process started by the test (the
app, and why its settings are what they are, is in amqp_celery_app.py); the test process
is the Celery client, with the same app built for it. Both speak AMQP through kombu and
py-amqp, and the results come back through the `rpc://` backend (a reply queue per
client). The worker runs Celery's default bootsteps, so its remote control, mingle and
gossip run on WeirMQ too; the test waits for the worker by pinging it (remote control:
a fanout exchange and a reply queue), never by sleeping.

Countdowns and retries are checked twice. With classic queues (Celery's default) the
worker holds a delayed task itself until it is due. With quorum queues Celery 5.5+ uses
native delayed delivery instead, where the broker holds it: a chain of 28 TTL queues that
dead-letter into each other through topic exchanges and exchange-to-exchange bindings.

The worker uses the solo pool: tasks run in the process that consumes them, which is all
these tests need (the AMQP traffic is the prefork pool's), and nothing is forked.

Every wait is bounded: the ping, each `result.get(timeout=...)`, the worker's shutdown
(SIGTERM, a warm shutdown, then SIGKILL). The worker's log is in the test's tmp dir, and
its tail is in the message of any failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import amqp.exceptions
import pytest
from amqp_celery_app import ADD, BROKER_URL_ENV, FLAKY, NATIVE_DELAYED_ENV, STAMP, make_app
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = [
    pytest.mark.integration,
    # Celery's rpc result consumer can drop a client socket without closing it when the
    # garbage collector, not the test, ends it (its own leak, whichever broker it talks
    # to): the ResourceWarning that raises then is not about WeirMQ.
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

HERE = Path(__file__).resolve().parent
WORKER_START_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 15.0
WORKER_STOP_TIMEOUT_S = 15.0
LOG_TAIL_BYTES = 6_000


class Worker:
    """One `celery worker` process; its output goes to a file, never to a pipe."""

    def __init__(self, broker_url: str, log_path: Path, *, native_delayed: bool) -> None:
        self.log_path = log_path
        env = dict(os.environ)
        env[BROKER_URL_ENV] = broker_url
        env[NATIVE_DELAYED_ENV] = "1" if native_delayed else "0"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "amqp_celery_app",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            "--hostname=weirmq-test@%h",
        ]
        with log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log_path.parent,
            )

    def log_tail(self) -> str:
        data = self.log_path.read_bytes() if self.log_path.exists() else b""
        return data[-LOG_TAIL_BYTES:].decode("utf-8", "replace")

    def check_running(self) -> None:
        code = self._proc.poll()
        assert code is None, f"the worker exited with code {code}; its log:\n{self.log_tail()}"

    def stop(self) -> int | None:
        """Warm shutdown (SIGTERM), bounded; killed if it does not finish in time."""
        proc = self._proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=WORKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=WORKER_STOP_TIMEOUT_S)
                return None
        return proc.returncode


def broker_url(broker: BrokerProcess) -> str:
    assert broker.amqp is not None
    return f"amqp://guest:guest@{broker.amqp}//"


@pytest.fixture
def native_delayed() -> bool:
    """Whether the app uses native delayed delivery (quorum queues); a test that wants it
    parametrizes this name with True."""
    return False


@pytest.fixture
def client(broker: BrokerProcess, native_delayed: bool) -> Iterator[Celery]:
    app = make_app(broker_url(broker), native_delayed_delivery=native_delayed)
    try:
        yield app
    finally:
        # app.close() closes the connection pools, not the connection the rpc backend
        # opened to consume results (Celery leaves it to process exit).
        results = app.backend.result_consumer
        if getattr(results, "_connection", None) is not None:
            results.stop()
        app.close()


@pytest.fixture
def worker(
    broker: BrokerProcess, client: Celery, native_delayed: bool, tmp_path: Path
) -> Iterator[Worker]:
    """A worker that answered a ping (so every bootstep has started); stopped at
    teardown."""
    started = Worker(broker_url(broker), tmp_path / "worker.log", native_delayed=native_delayed)
    try:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while not client.control.ping(timeout=0.5):
            started.check_running()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the worker did not answer a ping within {WORKER_START_TIMEOUT_S:.0f} s; "
                    f"its log:\n{started.log_tail()}"
                )
        yield started
    finally:
        started.stop()


def result_of(result: Any, worker: Worker) -> Any:
    try:
        return result.get(timeout=RESULT_TIMEOUT_S)
    except CeleryTimeoutError:
        worker.check_running()
        raise AssertionError(
            f"no result for {result.id} within {RESULT_TIMEOUT_S:.0f} s; the worker's log:\n"
            f"{worker.log_tail()}"
        ) from None


def assert_clean_log(worker: Worker) -> None:
    log = worker.log_tail()
    assert "ERROR" not in log and "Traceback" not in log, log


def test_worker_runs_tasks_and_returns_results_over_rpc(client: Celery, worker: Worker) -> None:
    results = [client.send_task(ADD, (n, 10)) for n in range(10)]
    assert [result_of(result, worker) for result in results] == [n + 10 for n in range(10)]
    assert all(result.successful() for result in results)
    assert_clean_log(worker)


def test_a_task_that_retries_succeeds_on_its_second_attempt(client: Celery, worker: Worker) -> None:
    sent_at = time.time()
    outcome = result_of(client.send_task(FLAKY), worker)
    assert outcome["retries"] == 1
    assert outcome["ran_at"] - sent_at >= 1.0  # retry(countdown=1)
    log = worker.log_tail()
    assert "Retry in 1s: RuntimeError('first attempt fails')" in log, log
    assert_clean_log(worker)


def test_a_countdown_runs_the_task_once_it_is_due(client: Celery, worker: Worker) -> None:
    sent_at = time.time()
    delayed = client.send_task(STAMP, countdown=2)
    at_once = client.send_task(STAMP)
    ran_at_once = result_of(at_once, worker)
    ran_delayed = result_of(delayed, worker)
    # The worker holds the delayed task unacknowledged and takes the next one meanwhile.
    assert ran_at_once < ran_delayed
    assert ran_delayed - sent_at >= 2.0
    # Delayed by the worker, not by the broker: Celery set up no native delayed delivery.
    with client.connection_for_write() as connection:
        channel = connection.channel()
        with pytest.raises(amqp.exceptions.NotFound):
            channel.exchange_declare("celery_delayed_27", "topic", passive=True)
    assert_clean_log(worker)


def queued(client: Celery, queue: str) -> int:
    """How many messages `queue` holds (a passive declare)."""
    with client.connection_for_write() as connection:
        return connection.channel().queue_declare(queue, passive=True).message_count


@pytest.mark.parametrize("native_delayed", [True])
def test_native_delayed_delivery_holds_countdowns_in_the_broker(
    client: Celery, worker: Worker
) -> None:
    log = worker.log_tail()
    assert "delayed delivery" not in log.lower(), log  # set up without a complaint
    sent_at = time.time()
    delayed = client.send_task(STAMP, countdown=2)
    # 2 s is bit 1 of the delay: the message waits in celery_delayed_1 (x-message-ttl 2 s)
    # until it is dead-lettered down the chain to celery_delayed_delivery and the task
    # queue. Polled, since nothing tells a client that a queue received a message.
    deadline = time.monotonic() + 1.5
    while queued(client, "celery_delayed_1") != 1:
        assert time.monotonic() < deadline, "the delayed task never reached celery_delayed_1"
        time.sleep(0.05)
    ran_delayed = result_of(delayed, worker)
    # The TTL counts from the message's timestamp, in whole milliseconds.
    assert ran_delayed - sent_at >= 2.0 - 0.001
    assert queued(client, "celery_delayed_1") == 0
    outcome = result_of(client.send_task(FLAKY), worker)  # the retry is delayed alike
    assert outcome["retries"] == 1
    assert_clean_log(worker)
