"""One Spark session and one broker for every test under tests/spark.

Starting Spark costs seconds (a JVM, then Python workers on first use), so the whole run
shares one local[2] session (`spark`), as the issue asks; tests keep apart by using topics
and checkpoint directories of their own. The broker is a real WeirMQ broker in this
process (`weirmq.testing.Broker`) on 127.0.0.1; Spark's Python workers are separate
processes and reach it over TCP like any Kafka client. Its housekeeping runs every 200 ms
so that a test can see retention remove a segment.

Every test here is marked `spark` and `integration`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from weirmq.testing import Broker

_names = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from weirmq.spark.local import local_session

    session = local_session("weirmq-tests", fast_start=True)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[Broker]:
    with Broker(housekeeping_interval_ms=200, auto_create_topics=False) as broker:
        yield broker


@pytest.fixture
def bootstrap(spark_broker: Broker) -> str:
    return spark_broker.bootstrap_servers


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own (tests share the broker)."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"{base[:80]}-{next(_names)}"
