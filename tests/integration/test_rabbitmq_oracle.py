"""RabbitMQ as the oracle of the AMQP 0-9-1 differential tests: the node works with pika, and
the scripted scenario (`amqp_scenarios.run_scenario`) observes what RabbitMQ documents.

`EXPECTED` is written from RabbitMQ's documentation and AMQP 0-9-1's, and checked here
against a real node, so it is the reference a WeirMQ run of the same scenario is compared
with (test_amqp_differential.py: ``run_scenario(weirmq) == run_scenario(rabbitmq)``).

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
RETURNED = (("returned", 312, "NO_ROUTE"),)  # a mandatory publish no binding matched

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
    Observation("publish unroutable, mandatory", RETURNED),
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
    # Topic exchange: `*` is one word, `#` zero or more ("urgent" matches "#.urgent");
    # the empty key has no words. Headers exchange: all/any over the binding's arguments
    # ("x-" ones are not conditions), values compared with their types (the ints 1 and 2
    # are not the strings "1" and "2"). What no binding matches is returned (mandatory).
    Observation("exchange.declare topic", "Exchange.DeclareOk"),
    Observation("exchange.declare headers", "Exchange.DeclareOk"),
    Observation("queue.declare routed", (True, 0, 0)),
    Observation("queue.bind topic eu.*", "Queue.BindOk"),
    Observation("queue.bind topic #.urgent", "Queue.BindOk"),
    Observation("queue.bind headers {'x-match': 'all', 'a': '1', 'b': '2'}", "Queue.BindOk"),
    Observation("queue.bind headers {'x-match': 'any', 'c': '3', 'd': '4'}", "Queue.BindOk"),
    Observation("publish topic 'eu.paris', mandatory", "ack"),
    Observation("publish topic 'eu', mandatory", RETURNED),
    Observation("publish topic 'eu.paris.louvre', mandatory", RETURNED),
    Observation("publish topic 'us.nyc.urgent', mandatory", "ack"),
    Observation("publish topic 'urgent', mandatory", "ack"),
    Observation("publish topic 'eu.urgent', mandatory", "ack"),  # both bindings: queued once
    Observation("publish topic '', mandatory", RETURNED),
    Observation("publish headers {'a': '1'}, mandatory", RETURNED),
    Observation("publish headers {'a': '1', 'b': '2'}, mandatory", "ack"),
    Observation("publish headers {'d': '4'}, mandatory", "ack"),
    Observation("publish headers {'a': '1', 'b': '2', 'c': '3'}, mandatory", "ack"),
    Observation("publish headers {'a': 1, 'b': 2}, mandatory", RETURNED),
    Observation("publish headers {}, mandatory", RETURNED),
    Observation("publish headers {'x-match': 'any', 'a': '1'}, mandatory", RETURNED),
    # Each routed message once, in publish order; nothing returned was queued.
    Observation("basic.get routed, all", (
        b"topic eu.paris []", b"topic us.nyc.urgent []", b"topic urgent []",
        b"topic eu.urgent []", b"headers  [('a', '1'), ('b', '2')]",
        b"headers  [('d', '4')]", b"headers  [('a', '1'), ('b', '2'), ('c', '3')]")),
    Observation("queue.delete routed", 0),
    Observation("exchange.delete topic", "Exchange.DeleteOk"),
    Observation("exchange.delete headers", "Exchange.DeleteOk"),
    # message_count counts what was published; a nacked message goes back to the head,
    # flagged redelivered; nack multiple requeues every delivery up to the tag.
    Observation("publish m4, mandatory", "ack"),
    Observation("publish m5, mandatory", "ack"),
    Observation("queue.declare passive, two published", (2, 0)),
    Observation("basic.get m4", ((b"m4", False, *PERSISTENT, {"n": 4}), 1)),
    Observation("basic.nack, requeue", "ok"),
    Observation("basic.get after nack", ((b"m4", True, *PERSISTENT, {"n": 4}), 1)),
    Observation("basic.get m5", ((b"m5", False, *PERSISTENT, {"n": 5}), 0)),
    Observation("basic.nack multiple, requeue", "ok"),
    Observation("basic.get after nack multiple", ((b"m4", True, *PERSISTENT, {"n": 4}), 1)),
    Observation("basic.reject m4, requeue", "ok"),
    Observation("queue.delete if-empty, not empty", ("error", 406, "PRECONDITION_FAILED")),
    Observation("queue.purge", 2),  # PurgeOk counts the messages purged
    Observation("queue.declare passive after purge", (0, 0)),
    # consumer_count counts consumers; if-unused refuses to delete a queue that has one,
    # and the consumer goes with the channel that error closes.
    Observation("basic.consume, then queue.declare passive", (0, 1)),
    Observation("queue.delete if-unused, in use", ("error", 406, "PRECONDITION_FAILED")),
    Observation("queue.declare passive, consumer gone with its channel", (0, 0)),
    # An exclusive queue is its connection's: 405 to any other, redeclarable by its own.
    Observation("queue.declare exclusive", (True, 0, 0)),
    Observation("queue.declare passive exclusive, other connection",
                ("error", 405, "RESOURCE_LOCKED")),
    Observation("basic.get exclusive, other connection", ("error", 405, "RESOURCE_LOCKED")),
    Observation("queue.declare exclusive again, same connection", (True, 0, 0)),
    Observation("queue.declare server-named", "amq.gen-"),
    # Closing a channel requeues its unacknowledged deliveries, flagged redelivered.
    Observation("confirm.select, new channel", "ok"),
    Observation("publish m6, mandatory", "ack"),
    Observation("basic.get m6, then channel.close", ((b"m6", False, *PERSISTENT, {"n": 6}), 0)),
    Observation("basic.get after channel.close", ((b"m6", True, *PERSISTENT, {"n": 6}), 0)),
    Observation("basic.ack m6", "ok"),
    Observation("queue.declare passive after ack", (0, 0)),
    # Channel errors, each closing the channel.
    Observation("queue.declare passive, missing", ("error", 404, "NOT_FOUND")),
    Observation("queue.declare not durable, mismatch", ("error", 406, "PRECONDITION_FAILED")),
    Observation("exchange.declare fanout, mismatch", ("error", 406, "PRECONDITION_FAILED")),
    Observation("basic.ack unknown tag", ("error", 406, "PRECONDITION_FAILED")),
    Observation("publish to missing exchange, confirmed", ("error", 404, "NOT_FOUND")),
    # Names starting with "amq." are reserved for new queues and exchanges (403); the
    # pre-declared amq.* exchanges may be redeclared as they are, never deleted.
    Observation("queue.declare reserved amq. name", ("error", 403, "ACCESS_REFUSED")),
    Observation("exchange.declare reserved amq. name", ("error", 403, "ACCESS_REFUSED")),
    Observation("exchange.declare amq.direct, equivalent", "Exchange.DeclareOk"),
    Observation("exchange.delete amq.direct", ("error", 403, "ACCESS_REFUSED")),
    Observation("exchange.declare passive, missing", ("error", 404, "NOT_FOUND")),
    Observation("queue.bind to missing exchange", ("error", 404, "NOT_FOUND")),
    Observation("basic.consume missing queue", ("error", 404, "NOT_FOUND")),
    Observation("queue.declare x-message-ttl, mismatch", ("error", 406, "PRECONDITION_FAILED")),
    # Deleting what does not exist succeeds (RabbitMQ 3.x and 4.x).
    Observation("queue.delete missing", 0),
    Observation("exchange.delete missing", "Exchange.DeleteOk"),
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
