"""`weirmq serve` listening for AMQP 0-9-1, seen by a real client (pika) and by its operator.

The broker is a real process (`broker_factory`, AMQP on a free port) except where the test
needs to reach inside it: the in-process broker of `weirmq.testing` then stands in, running
the same `weirmq.server.run.serve`. What is checked: the handshake and a channel with
guest/guest, the announcement line (and its absence when the listener is off), the orderly
stop (each client is sent Connection.Close 320 CONNECTION_FORCED before the socket goes,
and the broker exits cleanly), a port in use failing the start in one line that names the
setting, and Connection.Blocked when free disk falls below the floor.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from weirmq.testing import Broker

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration

AMQP_ANNOUNCEMENT = "weirmq: accepting AMQP connections on "
STEP_TIMEOUT_S = 15.0


def parameters(address: str, **kwargs: Any) -> pika.ConnectionParameters:
    host, _, port = address.rpartition(":")
    kwargs.setdefault("connection_attempts", 1)
    kwargs.setdefault("socket_timeout", STEP_TIMEOUT_S)
    kwargs.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters(host, int(port), **kwargs)


def wait_until(condition: Callable[[], bool], what: str, poll: Callable[[], None]) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {STEP_TIMEOUT_S:.0f} s")
        poll()


def test_pika_connects_as_guest_opens_a_channel_and_closes(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    assert broker.amqp is not None and broker.amqp.startswith("127.0.0.1:")
    assert not broker.amqp.endswith(":5672")  # the test broker never takes RabbitMQ's port
    connection = pika.BlockingConnection(parameters(broker.amqp))
    assert connection._impl.server_properties["product"] == "WeirMQ"
    channel = connection.channel()
    assert channel.is_open
    channel.close()
    connection.close()
    assert connection.is_closed
    assert broker.stop() == 0
    stderr = broker.stderr_tail()
    assert "Traceback" not in stderr and " ERROR " not in stderr, stderr


def test_the_amqp_line_follows_the_kafka_line_and_off_prints_none(
    broker_factory: BrokerFactory,
) -> None:
    on = broker_factory(admin_listen="127.0.0.1:0")
    assert on.stdout_path is not None
    lines = on.stdout_path.read_text().splitlines()
    assert lines[0].startswith("weirmq: accepting Kafka connections on ")
    assert lines[1].startswith("weirmq: admin API, metrics and console on ")  # kept in its place
    assert lines[2] == "weirmq: accepting SQS requests on " + on.sqs_endpoint  # a service too
    assert lines[3] == AMQP_ANNOUNCEMENT + on.amqp  # last, after every service's line
    off = broker_factory(amqp_listen="off")
    assert off.amqp is None
    assert off.stdout_path is not None
    time.sleep(0.2)  # the lines are printed together; give a stray one time to show
    assert "AMQP" not in off.stdout_path.read_text()


def test_sigterm_closes_each_amqp_connection_with_320_and_exits_cleanly(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    assert broker.amqp is not None
    connection = pika.BlockingConnection(parameters(broker.amqp))
    channel = connection.channel()
    assert channel.is_open
    os.kill(broker.pid, signal.SIGTERM)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    assert caught.value.reply_code == 320
    assert "CONNECTION_FORCED" in caught.value.reply_text
    assert "shutdown" in caught.value.reply_text
    assert broker.stop() == 0  # already exiting: its code
    stderr = broker.stderr_tail()
    assert "stopped cleanly" in stderr and "Traceback" not in stderr, stderr


def serve(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`weirmq serve` run to its end (a start that fails), without the developer's
    `WEIRMQ_*` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    env["WEIRMQ_SQS_LISTEN"] = "127.0.0.1:0"  # never the SQS API's 9324 in tests
    command = [sys.executable, "-m", "weirmq", "serve", "--listen", "127.0.0.1:0"]
    command += ["--admin-listen", "off", "--data-dir", str(tmp_path / "data"), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, env=env)


def test_an_amqp_port_in_use_fails_the_start_in_one_line_naming_the_setting(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = serve(tmp_path, "--amqp-listen", address)
    assert result.returncode == 1
    assert "accepting" not in result.stdout  # neither line: the start failed
    assert "Traceback" not in result.stderr
    failure = [line for line in result.stderr.splitlines() if "cannot start" in line]
    assert failure == [
        f"weirmq serve: cannot start: the AMQP listener address {address} is already in "
        "use (another broker on this machine?); choose a free one with setting "
        "'amqp_listen': --amqp-listen, WEIRMQ_AMQP_LISTEN or the config file"
    ], result.stderr


def test_amqp_frames_larger_than_requests_are_refused_as_a_setting(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("max_request_bytes = 65536\n")
    result = serve(tmp_path, "--config", str(config))
    assert result.returncode == 2  # a usage error, before anything is opened or bound
    assert result.stderr.startswith(
        "weirmq serve: setting 'amqp_frame_max_bytes' (131072) must be at most "
        "max_request_bytes (65536)"
    ), result.stderr


# --- the in-process broker (weirmq.testing) --------------------------------------------------


def test_the_in_process_broker_leaves_amqp_off_unless_asked() -> None:
    with Broker() as broker:
        assert broker.broker.settings.amqp_listen is None  # never RabbitMQ's 5672
        with pytest.raises(RuntimeError, match="amqp=True"):
            _ = broker.amqp_address
    with Broker(amqp=True) as broker:
        connection = pika.BlockingConnection(parameters(broker.amqp_address))
        assert connection.channel().is_open
        connection.close()


def test_publishers_are_blocked_while_free_disk_is_below_the_floor() -> None:
    floor = 100 * 1024 * 1024
    total = 100 * floor
    free = {"bytes": total}

    def measure_fake_disk(core: Any) -> None:
        # The sampler measures the data directory's file system once a second; this one
        # reports what the test says instead.
        guard = core.resources
        guard.sample = lambda _memory: guard.disk(total, free["bytes"])

    with Broker(amqp=True, disk_free_min_bytes=floor) as broker:
        broker.call(measure_fake_disk, broker.broker)
        connection = pika.BlockingConnection(parameters(broker.amqp_address))
        events: list[str] = []
        connection.add_on_connection_blocked_callback(
            lambda _connection, frame: events.append(f"blocked: {frame.method.reason}")
        )
        connection.add_on_connection_unblocked_callback(
            lambda _connection, _frame: events.append("unblocked")
        )

        def poll() -> None:
            connection.process_data_events(time_limit=0.2)

        poll()
        assert events == []
        free["bytes"] = floor // 2  # below the floor: publishes are refused
        wait_until(lambda: bool(events), "Connection.Blocked", poll)
        assert events[0].startswith("blocked: low on disk: ")
        assert "disk_free_min_bytes" in events[0]
        time.sleep(1.5)  # another sample or two, still below: told once only
        poll()
        assert len(events) == 1
        free["bytes"] = 2 * floor  # back above 1.5 times the floor
        wait_until(lambda: len(events) == 2, "Connection.Unblocked", poll)
        assert events[1] == "unblocked"
        connection.close()
