"""``weirmq groups`` and ``weirmq consume --group`` end to end: each command runs as a user
would run it (``python -m weirmq ...`` in a subprocess) against a real broker process.

The groups are made by real clients: a confluent-kafka consumer that subscribes, reads
and commits synchronously the offsets the test chooses (auto-commit off), or ``weirmq
consume --group`` itself. Results are read back through the commands' ``--json`` output.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from test_cli import columns, failed, ok, ok_json, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

CLIENT_TIMEOUT_S = 20.0


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    # No initial rebalance delay: a lone member is assigned at once, not after 3 s.
    return broker_factory(group_initial_rebalance_delay_ms=0)


@contextmanager
def member(broker: BrokerProcess, group: str, topic: str, records: int) -> Iterator[Consumer]:
    """A consumer in ``group`` that has read ``records`` records of ``topic`` (all of them,
    so it owns every partition); it commits only when told, and leaves at the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": f"{group}-app",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        read = 0
        while read < records:
            assert time.monotonic() < deadline, f"read {read} of {records} records"
            message = consumer.poll(0.2)
            read += message is not None and message.error() is None
        yield consumer
    finally:
        consumer.close()


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(
        offsets=[TopicPartition(topic, p, offset) for p, offset in offsets.items()],
        asynchronous=False,
    )


def describe(broker: BrokerProcess, group: str) -> dict[str, Any]:
    described: dict[str, Any] = ok_json(weirmq(broker, "groups", "describe", group, "--json"))
    return described


# -- list, describe, delete --------------------------------------------------------------------


def test_list_describe_and_delete_a_group(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "topics", "create", "orders", "--partitions", "2"))
    ok(weirmq(broker, "produce", "orders", "--partition", "0", stdin=b"a\nb\nc\n"))
    ok(weirmq(broker, "produce", "orders", "--partition", "1", stdin=b"d\ne\n"))
    assert ok_json(weirmq(broker, "groups", "list", "--json")) == {"groups": []}

    with member(broker, "billing", "orders", 5) as consumer:
        commit(consumer, "orders", {0: 1})
        member_id = consumer.memberid()
        listed = ok_json(weirmq(broker, "groups", "list", "--json"))
        assert listed == {
            "groups": [{"group": "billing", "type": "classic", "state": "Stable", "members": 1}]
        }
        described = describe(broker, "billing")
        assert described == {
            "group": "billing",
            "type": "classic",
            "state": "Stable",
            "protocol": "range",
            "members": [
                {
                    "member_id": member_id,
                    "group_instance_id": None,
                    "client_id": "billing-app",
                    "host": "/127.0.0.1",
                    "assignment": [
                        {"topic": "orders", "partition": 0},
                        {"topic": "orders", "partition": 1},
                    ],
                }
            ],
            "partitions": [
                {
                    "topic": "orders",
                    "partition": 0,
                    "current_offset": 1,
                    "log_end_offset": 3,
                    "lag": 2,
                    "member_id": member_id,
                },
                {
                    "topic": "orders",
                    "partition": 1,
                    "current_offset": None,  # owned, nothing committed yet
                    "log_end_offset": 2,
                    "lag": None,
                    "member_id": member_id,
                },
            ],
        }

        text = ok(weirmq(broker, "groups", "describe", "billing"))
        header, blank, titles, *rows = text.splitlines()
        assert header == "Group billing (classic): Stable, 1 member, assignor range"
        assert blank == ""
        assert titles.split() == [
            *("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"),
            *("CONSUMER-ID", "HOST", "CLIENT-ID"),
        ]
        assert [row.split() for row in rows] == [
            ["orders", "0", "1", "3", "2", member_id, "/127.0.0.1", "billing-app"],
            ["orders", "1", "-", "2", "-", member_id, "/127.0.0.1", "billing-app"],
        ]
        # Numbers are right-aligned under their headers.
        assert columns(rows[0])[1:5] == columns(titles)[1:5]

        table = ok(weirmq(broker, "groups", "list")).splitlines()
        assert [line.split() for line in table] == [
            ["GROUP", "TYPE", "STATE", "MEMBERS"],
            ["billing", "classic", "Stable", "1"],
        ]
        refused = failed(weirmq(broker, "groups", "delete", "billing"), 1)
        assert refused.startswith("weirmq: cannot delete group 'billing': ")
        assert refused.endswith("(NON_EMPTY_GROUP)")

    # The member left when it closed: the group is empty and keeps its offset.
    described = describe(broker, "billing")
    assert (described["state"], described["members"]) == ("Empty", [])
    assert [(p["partition"], p["lag"], p["member_id"]) for p in described["partitions"]] == [
        (0, 2, None)
    ]
    assert ok(weirmq(broker, "groups", "delete", "billing")) == "Deleted group billing.\n"
    assert ok_json(weirmq(broker, "groups", "list", "--json")) == {"groups": []}
    gone = "weirmq: group 'billing' does not exist"
    assert failed(weirmq(broker, "groups", "describe", "billing"), 1) == gone
    assert failed(weirmq(broker, "groups", "describe", "billing", "--json"), 1) == gone
    assert failed(weirmq(broker, "groups", "delete", "billing", "--json"), 1) == gone


def test_a_committed_partition_whose_topic_was_deleted(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "produce", "doomed", stdin=b"x\ny\n"))
    with member(broker, "reports", "doomed", 2) as consumer:
        commit(consumer, "doomed", {0: 2})
    ok(weirmq(broker, "topics", "delete", "doomed"))

    # The topic's offsets went with it, as in Kafka; describing the group must not fail,
    # nor bring the topic back by asking for its offsets.
    assert describe(broker, "reports")["partitions"] == []
    topics = ok_json(weirmq(broker, "topics", "list", "--json"))["topics"]
    assert "doomed" not in {topic["name"] for topic in topics}
    assert ok_json(weirmq(broker, "groups", "delete", "reports", "--json")) == {
        "group": "reports",
        "deleted": True,
    }


# -- consume --group ---------------------------------------------------------------------------


def test_consume_with_a_group_commits_and_the_next_run_resumes(broker: BrokerProcess) -> None:
    ok(weirmq(broker, "produce", "numbers", stdin=b"".join(b"%d\n" % n for n in range(10))))

    def consume(*args: str) -> list[str]:
        return ok(weirmq(broker, "consume", "numbers", "--group", "tally", *args)).splitlines()

    assert consume("--from-beginning", "--max-messages", "4") == ["0", "1", "2", "3"]
    (partition,) = describe(broker, "tally")["partitions"]
    assert (partition["current_offset"], partition["lag"]) == (4, 6)
    # The group has an offset now: --from-beginning no longer applies.
    assert consume("--from-beginning", "--exit") == [str(n) for n in range(4, 10)]
    assert consume("--exit") == []
    (partition,) = describe(broker, "tally")["partitions"]
    assert (partition["current_offset"], partition["lag"]) == (10, 0)
    assert describe(broker, "tally")["state"] == "Empty"  # each run left when it ended


# -- no broker ---------------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that refuses connections: bound, so nobody else takes it, but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_broker_down_is_one_line_and_exit_3(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    for command in (("list",), ("describe", "g"), ("delete", "g")):
        result = weirmq(None, "groups", *command, "--bootstrap", address)
        assert failed(result, 3) == (
            f"weirmq: cannot reach a broker at {address} (connection refused)"
        ), command
