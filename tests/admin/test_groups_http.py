"""Consumer groups in the admin API and the metrics, made by real confluent-kafka clients.

Each test runs `weirmq.testing.Broker(admin=True)`, the whole broker on a thread of its own,
and makes its groups the way applications do: consumers subscribe, read, and commit
synchronously the offsets the test chooses (auto-commit is off), so every committed offset
and lag below is exact. Every HTTP answer is validated against the OpenAPI document, so
the group schemas are held to what the API really returns, members and all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from admin_support import (
    bearer_of,
    commit,
    commit_outside_a_group,
    group_member,
    produce_records,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

from weirmq.admin import openapi
from weirmq.groups.classic import State as ClassicState
from weirmq.groups.consumer import GroupState as ConsumerState
from weirmq.testing import Broker

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 10.0
SCHEMA = schemathesis.openapi.from_dict(openapi.document())


@pytest.fixture
def running() -> Iterator[Broker]:
    # No initial rebalance delay: a lone member is assigned at once.
    with Broker(admin=True, group_initial_rebalance_delay_ms=0, default_partitions=2) as broker:
        broker.call(broker.broker.create_topic, "orders", 2)
        produce_records(broker.bootstrap_servers, "orders", {0: 5, 1: 3})
        yield broker


def call(broker: Broker, method: str, path: str, template: str, status: int) -> Any:
    """`method path` (documented as `template`), checked against the spec; its JSON body."""
    response = requests.request(
        method, broker.admin_url + path, headers=bearer_of(broker), timeout=HTTP_TIMEOUT_S
    )
    assert response.status_code == status, response.text
    SCHEMA[template][method].validate_response(response)
    return response.json() if response.content else None


def get_group(broker: Broker, group_id: str, status: int = 200) -> Any:
    return call(broker, "GET", f"/api/v1/groups/{group_id}", "/api/v1/groups/{group}", status)


def delete_group(broker: Broker, group_id: str, status: int) -> Any:
    return call(broker, "DELETE", f"/api/v1/groups/{group_id}", "/api/v1/groups/{group}", status)


def list_groups(broker: Broker) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = call(broker, "GET", "/api/v1/groups", "/api/v1/groups", 200)[
        "groups"
    ]
    return groups


def scrape(broker: Broker, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels: value} of one metric family, scraped over HTTP."""
    text = requests.get(broker.admin_url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    for found in text_string_to_metric_families(text):
        if found.name == family:
            return {tuple(sorted(s.labels.items())): s.value for s in found.samples}
    raise AssertionError(f"no {family} in the scrape")


# --- a classic group, from its first member to its deletion ---------------------------------


def test_a_classic_group_with_a_member_commits_and_lag(running: Broker) -> None:
    bootstrap = running.bootstrap_servers
    with group_member(bootstrap, "billing", "orders", 8, **{"client.id": "billing-app"}) as member:
        commit(member, "orders", {0: 5, 1: 1})  # partition 0 read to its end, 1 not
        member_id = member.memberid()

        (listed,) = list_groups(running)
        assert listed["generation"] >= 1  # each (re)join is a generation; one at least
        assert {**listed, "generation": 1} == {
            "group_id": "billing",
            "kind": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
            "protocol": "range",  # librdkafka's default assignor: range, then roundrobin
            "generation": 1,
            "member_count": 1,
            "lag": 2,
        }
        detail = get_group(running, "billing")
        assert {k: detail[k] for k in listed} == listed
        assert detail["members"] == [
            {
                "member_id": member_id,
                "group_instance_id": None,
                "client_id": "billing-app",
                "client_host": "/127.0.0.1",
                "assignment": [
                    {"topic": "orders", "partition": 0},
                    {"topic": "orders", "partition": 1},
                ],
            }
        ]
        assert detail["partitions"] == [
            partition_lag(0, committed=5, end=5, lag=0, member_id=member_id),
            partition_lag(1, committed=1, end=3, lag=2, member_id=member_id),
        ]
        error = delete_group(running, "billing", 409)["error"]
        assert error["code"] == "NON_EMPTY_GROUP"

    # close() left the group: it is empty, and keeps its offsets until deleted.
    wait_until(lambda: get_group(running, "billing")["state"] == "Empty", "empty")
    detail = get_group(running, "billing")
    assert (detail["member_count"], detail["members"], detail["lag"]) == (0, [], 2)
    assert [p["member_id"] for p in detail["partitions"]] == [None, None]
    assert delete_group(running, "billing", 204) is None
    assert get_group(running, "billing", 404)["error"]["code"] == "GROUP_ID_NOT_FOUND"
    assert delete_group(running, "billing", 404)["error"]["code"] == "GROUP_ID_NOT_FOUND"
    assert list_groups(running) == []
    assert running.call(running.broker.group_lag, "billing") == []  # the offsets went too


def partition_lag(
    partition: int, *, committed: int | None, end: int | None, lag: int | None, member_id: Any
) -> dict[str, Any]:
    return {
        "topic": "orders",
        "partition": partition,
        "committed_offset": committed,
        "log_end_offset": end,
        "lag": lag,
        "member_id": member_id,
    }


def test_a_kip848_consumer_group(running: Broker) -> None:
    bootstrap = running.bootstrap_servers
    with group_member(bootstrap, "audit", "orders", 8, **{"group.protocol": "consumer"}) as member:
        commit(member, "orders", {0: 2})
        detail = get_group(running, "audit")
        assert (detail["kind"], detail["state"], detail["protocol"]) == (
            "consumer",
            "Stable",
            "uniform",  # the broker's assignor, as in Kafka
        )
        assert [m["member_id"] for m in detail["members"]] == [member.memberid()]
        assert detail["partitions"] == [
            partition_lag(0, committed=2, end=5, lag=3, member_id=member.memberid()),
            partition_lag(1, committed=None, end=3, lag=None, member_id=member.memberid()),
        ]
        assert detail["lag"] == 3  # only partitions with a committed offset count


def test_offsets_without_members_and_a_topic_that_went(running: Broker) -> None:
    bootstrap = running.bootstrap_servers
    running.call(running.broker.create_topic, "doomed", 1)
    commit_outside_a_group(bootstrap, "reports", "orders", {1: 3})
    commit_outside_a_group(bootstrap, "reports", "doomed", {0: 0})
    (listed,) = list_groups(running)
    assert (listed["state"], listed["protocol_type"], listed["protocol"]) == ("Empty", "", "")
    assert listed["lag"] == 0
    running.call(running.broker.delete_topic, "doomed")

    partitions = get_group(running, "reports")["partitions"]
    # Deleting a topic deletes the groups' offsets of it, as Kafka does.
    assert [(p["topic"], p["log_end_offset"], p["lag"]) for p in partitions] == [
        ("orders", 3, 0),
    ]


def test_a_group_id_needing_escapes(running: Broker) -> None:
    commit_outside_a_group(running.bootstrap_servers, "a/b c?", "orders", {0: 1})
    assert get_group(running, "a%2Fb%20c%3F")["group_id"] == "a/b c?"
    delete_group(running, "a%2Fb%20c%3F", 204)


# --- metrics --------------------------------------------------------------------------------


def test_group_metrics(running: Broker) -> None:
    bootstrap = running.bootstrap_servers
    commit_outside_a_group(bootstrap, "idle", "orders", {0: 1})
    with group_member(bootstrap, "busy", "orders", 8) as member:
        commit(member, "orders", {1: 2})
        assert scrape(running, "weirmq_consumer_group_members") == {
            (("group", "busy"),): 1,
            (("group", "idle"),): 0,
        }
        # Only partitions with a committed offset and a log: busy has none on partition 0.
        assert scrape(running, "weirmq_consumer_group_lag") == {
            (("group", "busy"), ("partition", "1"), ("topic", "orders")): 1,
            (("group", "idle"), ("partition", "0"), ("topic", "orders")): 4,
        }
        assert scrape(running, "weirmq_consumer_groups") == {
            (("state", "Empty"),): 1,
            (("state", "Stable"),): 1,
        }
    wait_until(lambda: get_group(running, "busy")["state"] == "Empty", "empty")
    assert scrape(running, "weirmq_consumer_groups") == {(("state", "Empty"),): 2}
    delete_group(running, "idle", 204)
    assert scrape(running, "weirmq_consumer_group_members") == {(("group", "busy"),): 0}


# --- the spec -------------------------------------------------------------------------------


def test_the_spec_names_every_state_a_group_can_be_in() -> None:
    # Written out in openapi.py (admin/ may not import groups/); kept in step here.
    states = {state.value for state in (*ClassicState, *ConsumerState)}
    assert set(openapi.GROUP_STATES) == states
