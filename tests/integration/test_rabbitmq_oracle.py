"""RabbitMQ as the oracle of the AMQP 0-9-1 differential tests: the node works with pika, and
the scripted scenario (`amqp_scenarios.run_scenario`) observes what RabbitMQ documents.

`EXPECTED` is written from RabbitMQ's documentation and AMQP 0-9-1's, and checked here
against a real node, so it is the reference a WeirMQ run of the same scenario is compared
with (later: ``run_scenario(weirmq_port) == run_scenario(rabbitmq)``).

Every test under tests/integration is marked ``integration`` (conftest.py); where the
Debian package rabbitmq-server is not installed, these skip.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pika
import pytest
from amqp_scenarios import Observation, run_scenario

from weirmq.bench.rabbitmq import RabbitNode, not_installed_reason

PERSISTENT = "text/plain", 2  # content type, delivery mode of the scenario's messages

EXPECTED = [
    Observation("exchange.declare direct", "Exchange.DeclareOk"),
    # (the queue's name echoed, message count, consumer count)
    Observation("queue.declare durable", (True, 0, 0)),
    Observation("queue.bind k", "Queue.BindOk"),
    Observation("confirm.select", "ok"),
    Observation("publish m1, mandatory", "ack"),
    Observation("publish m2, mandatory", "ack"),
    Observation("publish m3, mandatory", "ack"),
    # A mandatory message no binding matches is returned (312 NO_ROUTE), then confirmed.
    Observation("publish unroutable, mandatory", (("returned", 312, "NO_ROUTE"),)),
    # Without mandatory it is dropped, and still confirmed.
    Observation("publish unroutable", "ack"),
    Observation("queue.declare passive", (3, 0)),
    # basic.get: the oldest message, and how many remain.
    Observation("basic.get", ((b"m1", False, *PERSISTENT, {"n": 1}), 2)),
    Observation("basic.reject, requeue", "ok"),
    # Requeued to its place at the head, flagged redelivered.
    Observation("basic.get after reject", ((b"m1", True, *PERSISTENT, {"n": 1}), 2)),
    Observation("basic.ack", "ok"),
    Observation("basic.qos prefetch 1", "ok"),
    # Acked m2, rejected m3 without requeue: dropped (no dead-letter exchange); cancelling
    # the consumer requeued nothing.
    Observation("basic.consume: ack one, reject one", (
        ((b"m2", False, *PERSISTENT, {"n": 2}), (b"m3", False, *PERSISTENT, {"n": 3})), 0)),
    Observation("queue.declare passive after consume", (0, 0)),
    Observation("basic.get on empty", None),  # Basic.GetEmpty
    # Channel errors, each closing the channel.
    Observation("queue.declare passive, missing", ("error", 404, "NOT_FOUND")),
    Observation("queue.declare not durable, mismatch", ("error", 406, "PRECONDITION_FAILED")),
    Observation("exchange.declare fanout, mismatch", ("error", 406, "PRECONDITION_FAILED")),
    Observation("basic.ack unknown tag", ("error", 406, "PRECONDITION_FAILED")),
    Observation("publish to missing exchange, confirmed", ("error", 404, "NOT_FOUND")),
    Observation("queue.delete", 0),  # messages deleted with it
    Observation("exchange.delete", "Exchange.DeleteOk"),
    Observation("queue.declare passive, deleted", ("error", 404, "NOT_FOUND")),
    Observation("connection.close", "ok"),
]


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, connection_attempts=1, socket_timeout=10, stack_timeout=10,
        blocked_connection_timeout=10))


def test_publish_with_confirms_and_get_it_back(rabbitmq: int) -> None:
    connection = connect(rabbitmq)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue  # server-named
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"hello", pika.BasicProperties(delivery_mode=2))
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"hello" and properties.delivery_mode == 2
        assert method.message_count == 0 and method.redelivered is False
        assert channel.basic_get(queue) == (None, None, None)
    finally:
        connection.close()


def test_the_scenario_observes_what_rabbitmq_documents(rabbitmq: int) -> None:
    assert run_scenario(rabbitmq) == EXPECTED


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not_installed_reason() is not None, reason=str(not_installed_reason()))
def test_a_node_stops_leaving_nothing_running(tmp_path: Path) -> None:
    with RabbitNode(tmp_path, remove_directory=False) as node:
        processes = node.process_ids
        assert set(processes) == {"epmd", "script", "vm"}
        assert all(_running(pid) for pid in processes.values())
        assert node.started_s is not None and node.started_s < 60
        port = node.port
    assert not any(_running(pid) for pid in processes.values()), processes
    assert _port_free(port)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (an exited one not yet reaped is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
