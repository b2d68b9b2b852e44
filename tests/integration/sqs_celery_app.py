"""The Celery app of the SQS tests, and the `celery worker` process that runs it.

`make_app(broker_url, results_dir, queue_prefix)` builds the app; the test process builds
its own (the client that sends tasks and reads results) and the worker process gets one
at import, from ``SQS_CELERY_BROKER_URL``, ``SQS_CELERY_RESULTS_DIR`` and
``SQS_CELERY_QUEUE_PREFIX``, which `Worker` sets when it starts
``celery -A sqs_celery_app worker``. Tasks are registered under fixed names, so both
sides agree on them without importing each other. (test_sqs_kombu_celery.py and
test_sqs_auth.py both run workers, hence the harness here rather than in a test module.)

The broker is WeirMQ's SQS API through kombu's SQS transport: the URL
``sqs://ACCESS_KEY:SECRET@HOST:PORT`` names the endpoint (kombu makes
``http://HOST:PORT`` of it, since ``is_secure`` is false) and the credentials it signs
with. The worker's consumer is kombu's asynchronous SQS client (requests it signs with
botocore's signer and sends with pycurl on the worker's event loop); the client's
publisher is boto3.

SQS has no fanout (kombu would need SNS for it), so the worker runs without the
bootsteps that broadcast: no remote control, mingle, gossip or heartbeat events. Results
go to files (Celery's file system backend, in the test's tmp dir): the only server the
tasks and their results touch is WeirMQ.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from celery import Celery

BROKER_URL_ENV = "SQS_CELERY_BROKER_URL"
RESULTS_DIR_ENV = "SQS_CELERY_RESULTS_DIR"
QUEUE_PREFIX_ENV = "SQS_CELERY_QUEUE_PREFIX"
ADD = "weirmq_sqs_test.add"
FLAKY = "weirmq_sqs_test.flaky"
TOUCH = "weirmq_sqs_test.touch"

# The worker's long poll (ReceiveMessage WaitTimeSeconds) and its pause after an empty
# one: short, so that a test never waits long for a task that is already queued.
WAIT_TIME_S = 1
POLLING_INTERVAL_S = 0.1

HERE = Path(__file__).resolve().parent
WORKER_START_TIMEOUT_S = 30.0
WORKER_STOP_TIMEOUT_S = 15.0
LOG_TAIL_BYTES = 6_000


def broker_url(endpoint: str, access_key: str, secret: str) -> str:
    """kombu's URL for the SQS API at `endpoint` (``http://HOST:PORT``), signing with
    these credentials. AWS secrets hold '/' and '+', hence the quoting (kombu unquotes)."""
    address = urlsplit(endpoint)
    credentials = f"{quote(access_key, safe='')}:{quote(secret, safe='')}"
    return f"sqs://{credentials}@{address.hostname}:{address.port}"


def transport_options(queue_prefix: str) -> dict[str, Any]:
    """kombu's SQS transport options, for Celery and for the kombu tests alike."""
    return {
        "region": "us-east-1",
        "is_secure": False,  # http://HOST:PORT, not https
        "wait_time_seconds": WAIT_TIME_S,
        "polling_interval": POLLING_INTERVAL_S,
        # Each test's queues are its own (kombu prepends this to every queue name).
        "queue_name_prefix": queue_prefix,
        # A failing test must not hang in botocore's retries.
        "client-config": {"retries": {"max_attempts": 1}, "connect_timeout": 5},
    }


def make_app(broker_url: str, results_dir: Path, queue_prefix: str) -> Celery:
    app = Celery("sqs_celery_app")
    app.conf.update(
        broker_url=broker_url,
        broker_transport_options=transport_options(queue_prefix),
        result_backend=f"file://{results_dir}",
        # A broker that is not there fails the worker at once instead of retrying.
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=10,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
    )

    # shared=False: the test process builds an app per test, and a shared task would be
    # registered again on each new app (a DuplicateTaskNameWarning, an error here).
    @app.task(name=ADD, shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name=FLAKY, bind=True, max_retries=3, shared=False)
    def flaky(self: Any, marker: str) -> dict[str, Any]:
        """Fails its first attempt and asks to be retried a second later; each attempt
        leaves a file in the directory `marker`, so the test sees both."""
        attempt = self.request.retries
        (Path(marker) / f"attempt-{attempt}").write_text(str(time.time()))
        if attempt == 0:
            raise self.retry(countdown=1, exc=RuntimeError("first attempt fails"))
        return {"retries": attempt, "ran_at": time.time()}

    @app.task(name=TOUCH, shared=False)
    def touch(path: str, text: str) -> str:
        """A side effect outside the result backend: writes `text` to `path`."""
        Path(path).write_text(text)
        return text

    return app


class Worker:
    """One `celery worker` process (solo pool) on this app; its output goes to a file,
    never to a pipe. Every wait on it is bounded."""

    def __init__(self, broker_url: str, results_dir: Path, prefix: str, log_path: Path) -> None:
        self.log_path = log_path
        env = dict(os.environ)
        env[BROKER_URL_ENV] = broker_url
        env[RESULTS_DIR_ENV] = str(results_dir)
        env[QUEUE_PREFIX_ENV] = prefix
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "sqs_celery_app",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            # SQS has no fanout: nothing that broadcasts between workers.
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--hostname=weirmq-sqs-test@%h",
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

    def wait_ready(self) -> None:
        """Until the worker logs "ready." (its consumer has started)."""
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while b" ready." not in self.log_path.read_bytes():
            self.check_running()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the worker was not ready within {WORKER_START_TIMEOUT_S:.0f} s; "
                    f"its log:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self) -> int | None:
        """Warm shutdown (SIGTERM); killed if it does not finish in time."""
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


if BROKER_URL_ENV in os.environ:  # the worker process
    app = make_app(
        os.environ[BROKER_URL_ENV],
        Path(os.environ[RESULTS_DIR_ENV]),
        os.environ[QUEUE_PREFIX_ENV],
    )
