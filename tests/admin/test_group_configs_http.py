"""Group configs over HTTP: ``GET`` and ``PATCH /api/v1/groups/{group}/configs``.

Most tests serve `create_app` around a real `Broker` on a temporary data directory with
aiohttp's test server and client, as test_http.py does for the topic configs these
endpoints mirror; every answer is validated against the OpenAPI document. One test runs
the whole broker (`weirmq.testing.Broker(admin=True)`) and holds the HTTP API and a Kafka
client (confluent-kafka's AdminClient, the CLI's path) to one store and one set of rules:
what one sets the other reads, and both refuse a value outside the broker's bounds with
the same message. The last test checks that the fuzz test (test_fuzz_http.py) has the new
operations among those it fuzzes, and that the spec's example change is one the broker
takes, so the fuzzer's first case goes past the refusals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import requests
import schemathesis
from admin_support import bearer, make_broker
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from weirmq.admin import create_app, openapi
from weirmq.broker.core import Broker
from weirmq.broker.group_configs import GROUP_CONFIGS, GROUP_CONFIGS_BY_NAME
from weirmq.testing import Broker as RunningBroker

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
KAFKA_TIMEOUT_S = 15.0
Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
PATH = "/api/v1/groups/{group}/configs"
SCHEMA = schemathesis.openapi.from_dict(openapi.document())
GROUP_CONFIG_SOURCE = 8  # Kafka's ConfigSource.GROUP_CONFIG; librdkafka's enum lacks it


def run(
    broker: Broker,
    scenario: Callable[[Client], Awaitable[None]],
    *,
    with_token: bool = True,
) -> None:
    """Serve `broker`'s admin application and run `scenario` against it."""

    async def main() -> None:
        app = create_app(broker)
        headers = bearer(app) if with_token else {}
        async with TestClient(TestServer(app), headers=headers) as client:
            await scenario(client)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))


async def conforming(response: aiohttp.ClientResponse, method: str) -> Any:
    """The JSON body of `response`, after checking it against the spec's `method PATH`."""
    content = await response.read()
    prepared = requests.Request(method, str(response.url)).prepare()
    checked = schemathesis.Response(
        status_code=response.status,
        headers={name: response.headers.getall(name) for name in response.headers},
        content=content,
        request=prepared,
        elapsed=0.0,
        verify=False,
    )
    SCHEMA[PATH][method].validate_response(checked)
    return json.loads(content)


async def get_configs(client: Client, group: str) -> Any:
    response = await client.get(PATH.format(group=quote(group, safe="")))
    assert response.status == 200, await response.text()
    return await conforming(response, "GET")


async def patch(client: Client, group: str, body: bytes | dict[str, Any]) -> aiohttp.ClientResponse:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.patch(PATH.format(group=quote(group, safe="")), data=data, headers=JSON)


async def refused(response: aiohttp.ClientResponse, method: str, status: int, code: str) -> str:
    assert response.status == status, await response.text()
    body = await conforming(response, method)
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    return message


def by_name(document: Any) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in document["configs"]}


# --- reading --------------------------------------------------------------------------------


def test_a_group_nobody_configured_has_every_config_at_its_default(tmp_path: Path) -> None:
    # One broker setting off its default: the group's value comes from it.
    broker = make_broker(tmp_path / "data", group_share_delivery_count_limit=7)

    async def scenario(client: Client) -> None:
        document = await get_configs(client, "not-yet-a-group")
        assert document["group"] == "not-yet-a-group"
        configs = by_name(document)
        assert list(configs) == sorted(c.name for c in GROUP_CONFIGS)
        limit = configs["share.delivery.count.limit"]
        assert (limit["value"], limit["source"]) == ("7", "static_broker_config")
        lock = configs["share.record.lock.duration.ms"]
        assert (lock["value"], lock["source"], lock["type"]) == ("30000", "default_config", "INT")
        for entry in configs.values():
            assert (entry["read_only"], entry["sensitive"]) == (False, False)
            assert entry["documentation"] == GROUP_CONFIGS_BY_NAME[entry["name"]].documentation

    try:
        run(broker, scenario)
    finally:
        broker.close()
    assert list(broker.group_configs.groups()) == []  # reading stores nothing


# --- changing -------------------------------------------------------------------------------


def test_set_and_delete_change_the_group_and_what_it_runs_with(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        change = {
            "set": {
                "share.delivery.count.limit": "3",
                "share.record.lock.duration.ms": "60000",
                "consumer.session.timeout.ms": "50000",
            }
        }
        response = await patch(client, "billing", change)
        assert response.status == 200, await response.text()
        document = await conforming(response, "PATCH")
        assert document == await get_configs(client, "billing")
        configs = by_name(document)
        for name, value in change["set"].items():
            assert (configs[name]["value"], configs[name]["source"]) == (value, "group_config")
        # Incremental: what is not named keeps its value; a deleted one its default.
        response = await patch(client, "billing", {"delete": ["share.delivery.count.limit"]})
        configs = by_name(await conforming(response, "PATCH"))
        limit = configs["share.delivery.count.limit"]
        assert (limit["value"], limit["source"]) == ("5", "default_config")
        assert configs["share.record.lock.duration.ms"]["value"] == "60000"
        # An empty change changes nothing; deleting what is not set is no error (Kafka).
        for nothing in ({}, {"delete": ["share.isolation.level"]}):
            response = await patch(client, "billing", nothing)
            assert response.status == 200
            assert by_name(await conforming(response, "PATCH")) == configs
        # Other groups are untouched.
        other = by_name(await get_configs(client, "payroll"))
        assert other["share.record.lock.duration.ms"]["source"] == "default_config"

    run(broker, scenario)
    assert broker.group_configs.overrides("billing") == {
        "consumer.session.timeout.ms": "50000",
        "share.record.lock.duration.ms": "60000",
    }
    assert broker.group_configs.share_config("billing").record_lock_duration_ms == 60000
    assert broker.group_configs.consumer_timeouts("billing") == (50000, 5000)


def test_a_change_is_on_disk_when_answered(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "data")

    async def scenario(client: Client) -> None:
        response = await patch(client, "a/b c", {"set": {"share.auto.offset.reset": "earliest"}})
        assert response.status == 200, await response.text()

    try:
        run(broker, scenario)
    finally:
        broker.close()
    again = make_broker(tmp_path / "data")
    try:
        assert again.group_configs.overrides("a/b c") == {"share.auto.offset.reset": "earliest"}
    finally:
        again.close()


BAD_CHANGES: list[tuple[bytes | dict[str, Any], str, str]] = [
    (b"", "MALFORMED_JSON", "JSON object"),
    (b"{", "MALFORMED_JSON", "not valid JSON"),
    (b"[]", "INVALID_REQUEST", "JSON object"),
    ({"set": {"share.delivery.count.limit": 3}}, "INVALID_REQUEST", "string values"),
    ({"set": ["share.delivery.count.limit"]}, "INVALID_REQUEST", "string values"),
    ({"delete": "share.delivery.count.limit"}, "INVALID_REQUEST", "array of strings"),
    ({"sett": {"share.delivery.count.limit": "3"}}, "INVALID_REQUEST", "unknown field"),
    # The broker's own refusals: unknown name, bad value, Kafka's range of the config.
    ({"set": {"retention.ms": "1"}}, "INVALID_CONFIG", "unknown group config 'retention.ms'"),
    ({"set": {"share.delivery.count.limit": "many"}}, "INVALID_CONFIG", "invalid value"),
    ({"set": {"share.auto.offset.reset": "middle"}}, "INVALID_CONFIG", "invalid value"),
    # The broker's bounds (group.share.max.delivery.count.limit is 10 by default).
    (
        {"set": {"share.delivery.count.limit": "11"}},
        "INVALID_CONFIG",
        "less than or equal to group.share.max.delivery.count.limit (10)",
    ),
    (
        {"set": {"consumer.session.timeout.ms": "1000"}},
        "INVALID_CONFIG",
        "greater than or equal to group.consumer.min.session.timeout.ms (45000)",
    ),
    (
        {"set": {"streams.num.standby.replicas": "3"}},
        "INVALID_CONFIG",
        "group.streams.max.standby.replicas",
    ),
    # Both set and deleted: which would win is not for the API to guess.
    (
        {"set": {"share.isolation.level": "read_committed"}, "delete": ["share.isolation.level"]},
        "INVALID_CONFIG",
        "appears twice",
    ),
    # All or nothing: the good half of a refused change is not applied either.
    (
        {"set": {"share.delivery.count.limit": "4", "share.record.lock.duration.ms": "1"}},
        "INVALID_CONFIG",
        "group.share.min.record.lock.duration.ms",
    ),
]


@pytest.mark.parametrize(("body", "code", "says"), BAD_CHANGES)
def test_refused_changes_change_nothing(
    broker: Broker, body: bytes | dict[str, Any], code: str, says: str
) -> None:
    broker.group_configs.alter(
        "billing", [("share.delivery.count.limit", 0, "6")], validate_only=False
    )

    async def scenario(client: Client) -> None:
        before = await get_configs(client, "billing")
        message = await refused(await patch(client, "billing", body), "PATCH", 400, code)
        assert says in message
        assert await get_configs(client, "billing") == before

    run(broker, scenario)
    assert broker.group_configs.overrides("billing") == {"share.delivery.count.limit": "6"}


def test_a_heartbeat_interval_must_stay_below_the_session_timeout(tmp_path: Path) -> None:
    # Bounds that let the interval reach the timeout, so that this rule is what refuses.
    broker = make_broker(tmp_path / "data", group_share_max_heartbeat_interval_ms=60_000)
    change = {"set": {"share.heartbeat.interval.ms": "45000"}}

    async def scenario(client: Client) -> None:
        message = await refused(
            await patch(client, "billing", change), "PATCH", 400, "INVALID_CONFIG"
        )
        assert message == (
            "share.heartbeat.interval.ms (45000) must be below share.session.timeout.ms (45000)"
        )
        change["set"]["share.session.timeout.ms"] = "50000"  # together, they are fine
        assert (await patch(client, "billing", change)).status == 200

    try:
        run(broker, scenario)
    finally:
        broker.close()


# --- who may ask ----------------------------------------------------------------------------


def test_on_loopback_a_change_needs_no_token_as_a_topic_config_change(broker: Broker) -> None:
    async def scenario(client: Client) -> None:
        await get_configs(client, "billing")
        change = {"set": {"share.delivery.count.limit": "3"}}
        response = await patch(client, "billing", change)
        assert response.status == 200, await response.text()
        # What guards every change guards this one: a foreign page, a non-JSON body.
        foreign = {**JSON, "Origin": "http://evil.example"}
        response = await client.patch(PATH.format(group="billing"), json=change, headers=foreign)
        await refused(response, "PATCH", 403, "ORIGIN_NOT_ALLOWED")
        response = await client.patch(
            PATH.format(group="billing"),
            data=json.dumps(change).encode(),
            headers={"Content-Type": "text/plain"},
        )
        await refused(response, "PATCH", 415, "UNSUPPORTED_MEDIA_TYPE")

    run(broker, scenario, with_token=False)
    assert broker.group_configs.overrides("billing") == {"share.delivery.count.limit": "3"}


def test_beyond_loopback_reading_and_changing_need_the_token(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "data", admin_listen="0.0.0.0:0")
    change = {"set": {"share.delivery.count.limit": "3"}}

    async def scenario(client: Client) -> None:
        path = PATH.format(group="billing")
        await refused(await client.get(path), "GET", 401, "UNAUTHORIZED")
        response = await client.patch(path, json=change)
        message = await refused(response, "PATCH", 401, "UNAUTHORIZED")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "beyond loopback" in message
        wrong = {"Authorization": "Bearer nope"}
        await refused(
            await client.patch(path, json=change, headers=wrong), "PATCH", 401, "UNAUTHORIZED"
        )
        assert broker.group_configs.overrides("billing") == {}
        auth = bearer(client.app)
        assert (await client.patch(path, json=change, headers=auth)).status == 200
        assert (await client.get(path, headers=auth)).status == 200

    try:
        run(broker, scenario, with_token=False)
    finally:
        broker.close()
    assert broker.group_configs.overrides("billing") == {"share.delivery.count.limit": "3"}


# --- one store with the Kafka API -----------------------------------------------------------


def test_http_and_kafkas_admin_client_share_the_configs_and_the_rules() -> None:
    with RunningBroker(admin=True) as running:
        url = running.admin_url + PATH.format(group="workers")
        headers = {"Authorization": f"Bearer {running.admin_token}"}
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})

        # Set over HTTP, read with DescribeConfigs.
        change = {"set": {"share.record.lock.duration.ms": "20000"}}
        response = requests.patch(url, json=change, headers=headers, timeout=TIMEOUT_S)
        assert response.status_code == 200, response.text
        SCHEMA[PATH]["PATCH"].validate_response(response)
        described = _describe(admin, "workers")
        lock = described["share.record.lock.duration.ms"]
        assert (lock.value, int(lock.source)) == ("20000", GROUP_CONFIG_SOURCE)

        # Set with IncrementalAlterConfigs (what `weirmq groups alter --config` sends),
        # read over HTTP.
        _alter(admin, "workers", "share.delivery.count.limit", "4")
        response = requests.get(url, headers=headers, timeout=TIMEOUT_S)
        SCHEMA[PATH]["GET"].validate_response(response)
        configs = by_name(response.json())
        assert configs["share.delivery.count.limit"]["value"] == "4"
        assert configs["share.record.lock.duration.ms"]["value"] == "20000"
        assert {name: entry.value for name, entry in _describe(admin, "workers").items()} == {
            name: entry["value"] for name, entry in configs.items()
        }

        # Out of the broker's bounds: the same refusal both ways.
        bad = {"share.record.lock.duration.ms": "90000"}
        response = requests.patch(url, json={"set": bad}, headers=headers, timeout=TIMEOUT_S)
        assert response.status_code == 400
        http_error = response.json()["error"]
        with pytest.raises(KafkaException) as kafka_refusal:
            _alter(admin, "workers", *next(iter(bad.items())))
        kafka_error = kafka_refusal.value.args[0]
        assert http_error["code"] == kafka_error.name() == "INVALID_CONFIG"
        assert http_error["message"] == kafka_error.str()
        assert _describe(admin, "workers")["share.record.lock.duration.ms"].value == "20000"


def _describe(admin: AdminClient, group: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.GROUP, group)
    (future,) = admin.describe_configs([resource], request_timeout=KAFKA_TIMEOUT_S).values()
    found: dict[str, Any] = future.result(timeout=KAFKA_TIMEOUT_S)
    return found


def _alter(admin: AdminClient, group: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    futures = admin.incremental_alter_configs([resource], request_timeout=KAFKA_TIMEOUT_S)
    (future,) = futures.values()
    future.result(timeout=KAFKA_TIMEOUT_S)


# --- the fuzz test --------------------------------------------------------------------------


def test_the_fuzz_test_fuzzes_both_operations_starting_from_a_change_that_is_taken(
    broker: Broker,
) -> None:
    import test_fuzz_http

    fuzzed = {result.ok().label for result in test_fuzz_http.schema.get_all_operations()}
    assert {f"GET {PATH}", f"PATCH {PATH}"} <= fuzzed
    document = test_fuzz_http.DOCUMENT
    assert document["paths"][PATH] == openapi.document()["paths"][PATH]
    group = document["paths"][PATH]["parameters"][0]["example"]
    body = document["paths"][PATH]["patch"]["requestBody"]["content"]["application/json"]
    example = body["example"]

    async def scenario(client: Client) -> None:
        response = await patch(client, group, example)
        assert response.status == 200, await response.text()
        await conforming(response, "PATCH")

    run(broker, scenario)
