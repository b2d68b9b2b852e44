"""The integration harness's SQS API (conftest.BrokerProcess): on a free port by default,
found from the broker's announcement line, kept across a restart, and absent when off.

What answers on that port is the SQS adapter's business (its own tests); these check
only what every SQS test stands on: that the harness knows where the port is, and that
the broker it starts never takes SQS's default port, 9324.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration

CONNECT_TIMEOUT_S = 10.0


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def test_the_sqs_api_is_on_a_free_port_and_found_from_its_line(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    assert broker.sqs is not None
    host, port = broker.sqs
    assert host == "127.0.0.1" and port not in (0, 9324)
    assert broker.sqs_endpoint == f"http://127.0.0.1:{port}"
    assert accepts(host, port)
    broker.restart()  # a client holding the endpoint finds it again
    assert broker.sqs == (host, port)
    assert accepts(host, port)


def test_the_sqs_api_can_be_off(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(sqs_listen="off")
    assert broker.sqs is None
    assert broker.stdout_path is not None
    assert b"SQS" not in broker.stdout_path.read_bytes()
    with pytest.raises(AssertionError, match="SQS API is off"):
        _ = broker.sqs_endpoint
