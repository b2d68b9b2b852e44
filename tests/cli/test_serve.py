"""`weirmq serve` as a user runs it: the announcement, settings precedence, errors, signals.

Each test starts the real command as a subprocess on 127.0.0.1 and talks to it with a real
Kafka client where it needs one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration

ANNOUNCEMENT = "weirmq: accepting Kafka connections on "


class Served(subprocess.Popen[str]):
    """The command, with stderr going to a file (a pipe nobody reads could fill up and
    block the broker's logging) that `stderr_text` reads back."""

    stderr_path: Path

    def stderr_text(self) -> str:
        return self.stderr_path.read_text()


def spawn(log_dir: Path, args: list[str], env: dict[str, str] | None = None) -> Served:
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    # The admin API's default port is fixed (9644): off unless a test asks for it, so that
    # a broker running elsewhere on this machine cannot make these tests fail.
    clean_env["WEIRMQ_ADMIN_LISTEN"] = "off"
    # The same for AMQP's (5672): a free port, so that a RabbitMQ here changes nothing.
    clean_env["WEIRMQ_AMQP_LISTEN"] = "127.0.0.1:0"
    # And the SQS API's (9324).
    clean_env["WEIRMQ_SQS_LISTEN"] = "127.0.0.1:0"
    stderr_path = log_dir / f"serve-{time.time_ns()}.log"
    with stderr_path.open("w") as stderr:
        process = Served(
            [sys.executable, "-m", "weirmq", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**clean_env, **(env or {})},
        )
    process.stderr_path = stderr_path
    return process


def announced(process: Served) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(ANNOUNCEMENT), (line, process.stderr_text())
    return line.removeprefix(ANNOUNCEMENT).strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: Served, signum: int = signal.SIGTERM) -> tuple[int, float]:
    started = time.monotonic()
    process.send_signal(signum)
    try:
        code = process.wait(timeout=10)
    finally:
        process.kill()
        process.communicate()  # closes the pipe
    return code, time.monotonic() - started


def test_announces_the_bound_address_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process = spawn(tmp_path, ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")])
    try:
        address = announced(process)
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        producer = Producer({"bootstrap.servers": address, "acks": "all"})
        producer.produce("greetings", value=b"hello")
        assert producer.flush(10) == 0
    finally:
        code, took_s = stop(process)
    assert code == 0
    assert took_s < 5
    data = tmp_path / "data"
    assert (data / ".clean-shutdown").exists()
    assert "greetings 0 1" in (data / "recovery-point-offset-checkpoint").read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_finishes_a_waiting_fetch_and_exits_within_5_s(tmp_path: Path, signum: int) -> None:
    process = spawn(tmp_path, ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path)])
    try:
        address = announced(process)
        producer = Producer({"bootstrap.servers": address})
        producer.produce("waiting", value=b"x")
        assert producer.flush(10) == 0
        consumer = Consumer(
            {"bootstrap.servers": address, "group.id": "unused", "fetch.wait.max.ms": 30000}
        )
        consumer.assign([TopicPartition("waiting", 0, 1)])  # at the end: a long poll waits
        assert consumer.poll(1.0) is None
    finally:
        code, took_s = stop(process, signum)
    assert code == 0
    assert took_s < 5


def test_flags_override_environment_which_overrides_the_file(tmp_path: Path) -> None:
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    config = tmp_path / "weirmq.toml"
    config.write_text(f'listen = "127.0.0.1:{file_port}"\ndata_dir = "{tmp_path / "d"}"\n')
    cases = [
        ([], {}, file_port),
        ([], {"WEIRMQ_LISTEN": f"127.0.0.1:{env_port}"}, env_port),
        (["--listen", f"127.0.0.1:{flag_port}"], {"WEIRMQ_LISTEN": f"127.0.0.1:{env_port}"},
         flag_port),
    ]
    for flags, env, expected in cases:
        process = spawn(tmp_path, ["--config", str(config), *flags], env)
        try:
            assert announced(process) == f"127.0.0.1:{expected}"
        finally:
            assert stop(process)[0] == 0


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        ([], {"WEIRMQ_MAX_REQUEST_BYTES": "lots"}, "max_request_bytes"),
        ([], {"WEIRMQ_NO_SUCH_THING": "1"}, "no_such_thing"),
        (["--listen", "nowhere"], {}, "listen"),
        (["--config", "/nonexistent/weirmq.toml"], {}, "/nonexistent/weirmq.toml"),
    ],
)
def test_bad_settings_are_refused_by_name(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    process = spawn(tmp_path, ["--data-dir", str(tmp_path), *args], env)
    out, _ = process.communicate(timeout=30)
    err = process.stderr_text()
    assert process.returncode == 2
    assert named in err
    assert out == ""


def test_an_address_in_use_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = spawn(tmp_path, ["--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path)])
        out, _ = process.communicate(timeout=30)
    err = process.stderr_text()
    assert process.returncode == 1
    assert "cannot start" in err
    assert out == ""


def test_advertised_address_is_what_metadata_returns(tmp_path: Path) -> None:
    process = spawn(tmp_path,
        ["--listen", "127.0.0.1:0", "--advertise", "broker.example:19092",
         "--data-dir", str(tmp_path)]
    )
    try:
        address = announced(process)
        from confluent_kafka.admin import AdminClient

        metadata = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
        (broker,) = metadata.brokers.values()
        assert (broker.host, broker.port) == ("broker.example", 19092)
    finally:
        assert stop(process)[0] == 0


ADMIN_ANNOUNCEMENT = "weirmq: admin API, metrics and console on "


def test_the_admin_api_is_announced_after_the_kafka_listener(tmp_path: Path) -> None:
    process = spawn(
        tmp_path, ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                   "--data-dir", str(tmp_path)]
    )  # fmt: skip
    try:
        announced(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(ADMIN_ANNOUNCEMENT), (line, process.stderr_text())
        url = line.removeprefix(ADMIN_ANNOUNCEMENT).split()[0]  # then where the token is
        with urllib.request.urlopen(url + "/api/v1/health", timeout=10) as response:
            assert json.loads(response.read())["status"] == "ok"
    finally:
        code, took_s = stop(process)
    assert code == 0 and took_s < 5


def test_an_admin_address_in_use_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = spawn(
            tmp_path, ["--listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{port}",
                       "--data-dir", str(tmp_path)]
        )  # fmt: skip
        process.communicate(timeout=30)
    assert process.returncode == 1
    assert "cannot start" in process.stderr_text()
    assert (tmp_path / ".clean-shutdown").exists()  # the broker it had opened closed cleanly


@pytest.mark.parametrize("value", ["nowhere", "127.0.0.1:99999"])
def test_a_bad_admin_address_is_refused_by_name(tmp_path: Path, value: str) -> None:
    process = spawn(tmp_path, ["--admin-listen", value, "--data-dir", str(tmp_path)])
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "admin_listen" in process.stderr_text()
    assert out == ""
