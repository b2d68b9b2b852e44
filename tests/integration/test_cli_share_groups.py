"""`weirmq groups` on share groups (KIP-932), against a real broker: configs through Kafka's
GROUP config resource, and the share group's delivery state from the admin API, next to a
real confluent-kafka ShareConsumer holding records."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from confluent_kafka import ShareConsumer
from integration_support import Deadline
from test_cli import failed, ok, ok_json, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(admin_listen="127.0.0.1:0")


def test_configs_are_altered_and_shown_with_their_source(broker: BrokerProcess) -> None:
    ok(
        weirmq(
            broker,
            "groups",
            "alter",
            "workers",
            "--config",
            "share.delivery.count.limit=3",
            "--config",
            "errors.deadletterqueue.topic.name=dlq.jobs",
        )
    )
    shown = ok_json(weirmq(broker, "groups", "configs", "workers", "--json"))
    by_name = {entry["name"]: entry for entry in shown["configs"]}
    assert by_name["share.delivery.count.limit"] == {
        "name": "share.delivery.count.limit", "value": "3", "source": "group",
    }  # fmt: skip
    assert by_name["errors.deadletterqueue.topic.name"]["value"] == "dlq.jobs"
    assert by_name["share.record.lock.duration.ms"] == {
        "name": "share.record.lock.duration.ms", "value": "30000", "source": "default",
    }  # fmt: skip
    ok(
        weirmq(
            broker, "groups", "alter", "workers", "--delete-config", "share.delivery.count.limit"
        )
    )
    shown = ok_json(weirmq(broker, "groups", "configs", "workers", "--json"))
    assert {e["name"]: e["value"] for e in shown["configs"]}["share.delivery.count.limit"] == "5"
    line = failed(
        weirmq(broker, "groups", "alter", "workers", "--config", "share.delivery.count.limit=0"), 1
    )
    assert "INVALID_CONFIG" in line and "share.delivery.count.limit" in line
    line = failed(weirmq(broker, "groups", "alter", "workers", "--config", "no.such=1"), 1)
    assert "unknown group config 'no.such'" in line


def test_describe_and_list_show_a_share_group_and_its_records(broker: BrokerProcess) -> None:
    assert broker.admin_url is not None
    admin = ["--admin-url", broker.admin_url]
    ok(weirmq(broker, "topics", "create", "jobs", "--partitions", "1"))
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "workers",
            "client.id": "worker-app",
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe(["jobs"])
    try:
        deadline = Deadline(20, "the member to join")
        while not ok_json(weirmq(broker, "groups", "describe", "workers", "--json", *admin))[
            "members"
        ]:
            assert not list(consumer.poll(0.2))
            deadline.check()
        ok(weirmq(broker, "produce", "jobs", stdin=b"a\nb\nc\n"))
        held: list[object] = []
        deadline = Deadline(20, "three records held by the member")
        while len(held) < 3:
            held += list(consumer.poll(0.5))
            deadline.check(f"{len(held)} held")
        described = ok_json(weirmq(broker, "groups", "describe", "workers", "--json", *admin))
        assert described["type"] == "share" and described["state"] == "Stable"
        (member,) = described["members"]
        assert member["client_id"] == "worker-app"
        assert member["assignment"] == [{"topic": "jobs", "partition": 0}]
        (partition,) = described["partitions"]
        assert (partition["topic"], partition["partition"]) == ("jobs", 0)
        assert (partition["acquired"], partition["available"], partition["delivered"]) == (3, 0, 3)
        assert partition["oldest_unacknowledged_age_ms"] is not None
        table = ok(weirmq(broker, "groups", "describe", "workers", *admin))
        assert table.startswith("Group workers (share): Stable, 1 member\n")
        listed = ok_json(weirmq(broker, "groups", "list", "--json", *admin))
        assert {"group": "workers", "type": "share", "state": "Stable", "members": 1} in listed[
            "groups"
        ]
    finally:
        consumer.close()
    line = failed(weirmq(broker, "groups", "describe", "nobody", *admin), 1)
    assert "does not exist" in line
