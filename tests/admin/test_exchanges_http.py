"""Exchanges and bindings in the admin API, and their metrics, over real HTTP.

Each test runs `weirmq.testing.Broker(admin=True)`, the whole broker on a thread of its own,
and talks to it with `requests`; records are published on the broker's loop exactly as the
Produce handler publishes them, so an exchange routes them there and then. Every answer,
refusals included, is validated against the OpenAPI document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from admin_support import bearer_of, publish
from prometheus_client.parser import text_string_to_metric_families

from weirmq.admin import errors, openapi
from weirmq.broker.configs import EXCHANGE_TYPES
from weirmq.routing import (
    BindingCycleError,
    ExchangeConflictError,
    ExchangeInUseError,
    ExchangeType,
    ExpressionError,
    InvalidBindingError,
    InvalidExchangeError,
    InvalidRoutingKeyError,
    RoutingError,
    RoutingLimitError,
    UnknownExchangeError,
    UnroutableError,
    limits,
)
from weirmq.routing.model import UNROUTABLE_POLICIES
from weirmq.testing import Broker

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 10.0
SCHEMA = schemathesis.openapi.from_dict(openapi.document())
EXCHANGES = "/api/v1/exchanges"
EXCHANGE = "/api/v1/exchanges/{name}"
BINDINGS = "/api/v1/exchanges/{name}/bindings"
UNBIND = "/api/v1/exchanges/{name}/bindings/delete"


@pytest.fixture
def running() -> Iterator[Broker]:
    with Broker(admin=True, default_partitions=2) as broker:
        broker.call(broker.broker.create_topic, "orders", 2)
        broker.call(broker.broker.create_topic, "audit", 1)
        yield broker


def call(
    broker: Broker,
    method: str,
    template: str,
    status: int,
    body: Any = None,
    *,
    name: str = "",
    query: str = "",
) -> Any:
    """`method` on `template` (its {name} filled in), checked against the spec; the JSON
    body of the answer. `body` bytes are sent as they are, anything else as JSON."""
    path = template.replace("{name}", name) + query
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body)
    response = requests.request(
        method,
        broker.admin_url + path,
        data=data,
        headers={"Content-Type": "application/json", **bearer_of(broker)},
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == status, response.text
    SCHEMA[template][method].validate_response(response)
    return response.json() if response.content else None


def refused(broker: Broker, method: str, template: str, status: int, code: str, **kw: Any) -> str:
    """`call`, expecting an error with this status and code; returns its message."""
    error = call(broker, method, template, status, **kw)["error"]
    assert error["code"] == code, error
    message: str = error["message"]
    return message


def declare(broker: Broker, status: int = 201, **body: Any) -> Any:
    return call(broker, "POST", EXCHANGES, status, body)


def bind(broker: Broker, exchange: str, status: int = 201, **body: Any) -> Any:
    return call(broker, "POST", BINDINGS, status, body, name=exchange)


def unbind(broker: Broker, exchange: str, status: int = 204, **body: Any) -> Any:
    return call(broker, "POST", UNBIND, status, body, name=exchange)


def binding(source: str, destination: str, kind: str = "topic", **fields: Any) -> dict[str, Any]:
    """A binding document as the API answers it."""
    return {
        "source": source,
        "destination": destination,
        "destination_kind": kind,
        "key": fields.get("key", ""),
        "arguments": fields.get("arguments", {}),
        "expression": fields.get("expression"),
    }


NO_STATS = {
    "routed_records": 0,
    "unroutable_records": 0,
    "alternate_records": 0,
    "failed_records": 0,
}


# --- declaring ------------------------------------------------------------------------------


def test_declaring_listing_and_describing_an_exchange(running: Broker) -> None:
    response = requests.post(
        running.admin_url + EXCHANGES,
        json={"name": "events", "type": "topic", "partitions": 3, "alternate": "fallback"},
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == 201, response.text
    SCHEMA[EXCHANGES]["POST"].validate_response(response)
    assert response.headers["Location"] == "/api/v1/exchanges/events"
    created = response.json()
    assert created == {
        "name": "events",
        "type": "topic",
        "alternate": "fallback",  # need not exist, as in RabbitMQ
        "unroutable": "drop",
        "partition_count": 3,
        "binding_count": 0,
        "bindings": [],
        "stats": NO_STATS,
        "routing_lag_records": 0,
    }
    assert call(running, "GET", EXCHANGE, 200, name="events") == created
    declare(running, name="strict", type="direct", unroutable="reject")  # default partitions

    listed = call(running, "GET", EXCHANGES, 200)["exchanges"]
    assert listed == [
        {k: v for k, v in created.items() if k not in ("bindings", "stats", "routing_lag_records")},
        {
            "name": "strict",
            "type": "direct",
            "alternate": None,
            "unroutable": "reject",
            "partition_count": 2,
            "binding_count": 0,
        },
    ]
    # An exchange is a topic: its log, with the definition as its configs (defaults left out).
    topic = requests.get(running.admin_url + "/api/v1/topics/events", timeout=HTTP_TIMEOUT_S)
    assert topic.json()["configs"] == {
        "weirmq.exchange.alternate": "fallback",
        "weirmq.exchange.type": "topic",
    }


def test_declaring_what_exists_is_idempotent(running: Broker) -> None:
    created = declare(running, name="events", type="fanout", partitions=1, unroutable="reject")
    bind(running, "events", destination="orders")
    again = declare(running, 200, name="events", type="fanout", unroutable="reject")
    assert again == {**created, "binding_count": 1, "bindings": [binding("events", "orders")]}
    # The count is compared only when given; null and a missing alternate are the same.
    declare(running, 200, name="events", type="fanout", partitions=1, unroutable="reject")
    declare(running, 200, name="events", type="fanout", alternate=None, unroutable="reject")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": "direct"}, "type"),
        ({"alternate": "elsewhere"}, "alternate"),
        ({"unroutable": "drop"}, "unroutable"),
        ({"partitions": 2}, "partitions"),
    ],
)
def test_declaring_another_definition_is_a_conflict(
    running: Broker, change: dict[str, Any], field: str
) -> None:
    definition = {"name": "events", "type": "topic", "partitions": 1, "unroutable": "reject"}
    declare(running, **definition)
    message = refused(
        running, "POST", EXCHANGES, 409, "EXCHANGE_CONFLICT", body={**definition, **change}
    )
    assert f"inequivalent arg '{field}' for exchange 'events'" in message
    exchange = call(running, "GET", EXCHANGE, 200, name="events")
    assert (exchange["type"], exchange["alternate"], exchange["partition_count"]) == (
        "topic",
        None,
        1,
    )


def test_declaring_the_name_of_a_plain_topic_is_a_conflict(running: Broker) -> None:
    body = {"name": "orders", "type": "direct"}
    message = refused(running, "POST", EXCHANGES, 409, "TOPIC_ALREADY_EXISTS", body=body)
    assert "not an exchange" in message
    assert call(running, "GET", EXCHANGES, 200) == {"exchanges": []}


BAD_DECLARATIONS: list[tuple[bytes | dict[str, Any], str]] = [
    (b"", "MALFORMED_JSON"),
    (b"{", "MALFORMED_JSON"),
    (b"[]", "INVALID_REQUEST"),
    ({"type": "topic"}, "INVALID_REQUEST"),
    ({"name": "x"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "Topic"}, "INVALID_REQUEST"),
    ({"name": "x", "type": " topic"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "queue"}, "INVALID_REQUEST"),
    ({"name": "x", "type": 1}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "alternate": ""}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "alternate": " y"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "alternate": "a b"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "alternate": 5}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "unroutable": "ignore"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "unroutable": None}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "partitions": "1"}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "bindings": []}, "INVALID_REQUEST"),
    ({"name": "x", "type": "topic", "partitions": 0}, "INVALID_PARTITIONS"),
    ({"name": "bad name", "type": "topic"}, "INVALID_TOPIC_EXCEPTION"),
    ({"name": "..", "type": "topic"}, "INVALID_TOPIC_EXCEPTION"),
]


@pytest.mark.parametrize(("body", "code"), BAD_DECLARATIONS)
def test_refused_declarations(running: Broker, body: bytes | dict[str, Any], code: str) -> None:
    refused(running, "POST", EXCHANGES, 400, code, body=body)
    assert call(running, "GET", EXCHANGES, 200) == {"exchanges": []}


# --- bindings -------------------------------------------------------------------------------


def test_binding_listing_and_unbinding(running: Broker) -> None:
    declare(running, name="events", type="topic")
    declare(running, name="eu", type="fanout")
    made = bind(running, "events", destination="orders", key="eu.#")
    assert made == binding("events", "orders", key="eu.#")
    assert bind(running, "events", 200, destination="orders", key="eu.#") == made  # once
    to_exchange = bind(running, "events", destination="eu", key="eu.*")
    assert to_exchange == binding("events", "eu", "exchange", key="eu.*")
    bind(running, "eu", destination="audit")

    listed = call(running, "GET", BINDINGS, 200, name="events")
    assert listed == {"exchange": "events", "bindings": [made, to_exchange]}
    exchange = call(running, "GET", EXCHANGE, 200, name="events")
    assert (exchange["binding_count"], exchange["bindings"]) == (2, [made, to_exchange])

    assert unbind(running, "events", destination="orders", key="eu.#") is None
    for body in ({"destination": "orders", "key": "eu.#"}, {"destination": "eu", "key": "x"}):
        refused(running, "POST", UNBIND, 404, "BINDING_NOT_FOUND", body=body, name="events")
    assert call(running, "GET", BINDINGS, 200, name="events")["bindings"] == [to_exchange]
    unbind(running, "events", destination="eu", key="eu.*")
    # An exchange with no bindings left has none to remove.
    body = {"destination": "eu", "key": "eu.*"}
    refused(running, "POST", UNBIND, 404, "BINDING_NOT_FOUND", body=body, name="events")
    assert call(running, "GET", BINDINGS, 200, name="events")["bindings"] == []


def test_a_binding_is_its_fields_with_arguments_compared_by_kind(running: Broker) -> None:
    declare(running, name="by-headers", type="headers")
    arguments = {"x-match": "any", "n": 1, "region": "eu", "flag": None}
    made = bind(running, "by-headers", destination="orders", arguments=arguments)
    assert made["arguments"] == {"flag": None, "n": 1, "region": "eu", "x-match": "any"}
    # 1.0 is the number 1; true is not.
    bind(running, "by-headers", 200, destination="orders", arguments={**arguments, "n": 1.0})
    other = bind(running, "by-headers", destination="orders", arguments={**arguments, "n": True})
    assert other["arguments"]["n"] is True
    unbind(running, "by-headers", destination="orders", arguments={**arguments, "n": 1.0})
    remaining = call(running, "GET", BINDINGS, 200, name="by-headers")["bindings"]
    assert [b["arguments"]["n"] for b in remaining] == [True]
    body = {"destination": "orders", "arguments": {**arguments, "n": 1}}
    refused(running, "POST", UNBIND, 404, "BINDING_NOT_FOUND", body=body, name="by-headers")


def test_a_content_binding_and_a_bad_expression_with_its_position(running: Broker) -> None:
    declare(running, name="by-content", type="content")
    expression = "region = 'eu' AND amount > 100"
    made = bind(running, "by-content", destination="orders", expression=expression)
    assert made["expression"] == expression
    for text, where in [
        ("region = 'eu' AND (amount > 100", "expected ')' at 31"),  # the end of the text
        ("region = = 'eu'", "at 9, found"),
    ]:
        body = {"destination": "orders", "expression": text}
        message = refused(
            running, "POST", BINDINGS, 400, "INVALID_CONFIG", body=body, name="by-content"
        )
        assert where in message, message
    unbind(running, "by-content", destination="orders", expression=expression)


def test_a_binding_that_would_close_a_cycle_is_refused(running: Broker) -> None:
    for name in ("a", "b", "c"):
        declare(running, name=name, type="fanout")
    bind(running, "a", destination="b")
    bind(running, "b", destination="c")
    body = {"destination": "a"}
    message = refused(running, "POST", BINDINGS, 400, "INVALID_CONFIG", body=body, name="c")
    assert "cycle" in message
    assert call(running, "GET", BINDINGS, 200, name="c")["bindings"] == []


BAD_BINDINGS: list[tuple[str, bytes | dict[str, Any], int, str]] = [
    ("events", b"", 400, "MALFORMED_JSON"),
    ("events", b"[1]", 400, "INVALID_REQUEST"),
    ("events", {}, 400, "INVALID_REQUEST"),
    ("events", {"destination": 1}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "key": None}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "expression": 1}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "arguments": []}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "arguments": {"a": [1]}}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "arguments": {"a": {}}}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "routing_key": "a"}, 400, "INVALID_REQUEST"),
    # A lone surrogate has no UTF-8 form; the router measures keys in UTF-8 bytes.
    ("events", {"destination": "orders", "key": "\ud800" * 70}, 400, "INVALID_REQUEST"),
    ("events", {"destination": "orders", "arguments": {"\udfff": 1}}, 400, "INVALID_REQUEST"),
    # What no binding can be: refused when bound and when unbound alike.
    ("events", {"destination": "orders", "key": "k" * 256}, 400, "INVALID_CONFIG"),
    ("events", {"destination": "orders", "key": "é" * 200}, 400, "INVALID_CONFIG"),  # 400 B
    ("events", {"destination": "orders", "arguments": {"": 1}}, 400, "INVALID_CONFIG"),
    ("by-headers", {"destination": "orders", "arguments": {"a": 1e400}}, 400, "INVALID_CONFIG"),
    (
        "by-headers",
        {"destination": "orders", "arguments": {f"h{i}": i for i in range(65)}},
        400,
        "INVALID_CONFIG",
    ),
    ("nowhere", {"destination": "orders"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("orders", {"destination": "audit"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),  # a plain topic
]


@pytest.mark.parametrize(("exchange", "body", "status", "code"), BAD_BINDINGS)
def test_refused_bindings_and_unbindings(
    running: Broker, exchange: str, body: bytes | dict[str, Any], status: int, code: str
) -> None:
    declare(running, name="events", type="topic")
    declare(running, name="by-headers", type="headers")
    bind(running, "events", destination="audit")  # so that an unbind has bindings to search
    bind(running, "by-headers", destination="audit")
    refused(running, "POST", BINDINGS, status, code, body=body, name=exchange)
    refused(running, "POST", UNBIND, status, code, body=body, name=exchange)
    for name in ("events", "by-headers"):
        bindings = call(running, "GET", BINDINGS, 200, name=name)["bindings"]
        assert bindings == [binding(name, "audit")]


# Bindings the exchange's type refuses, or to nothing: bound, they are refused; unbound,
# there is no such binding (none could have been made).
REFUSED_BY_THE_EXCHANGE: list[tuple[str, dict[str, Any], int, str]] = [
    ("events", {"destination": "orders", "expression": "a = 1"}, 400, "INVALID_CONFIG"),
    (
        "by-headers",
        {"destination": "orders", "arguments": {"x-match": "most"}},
        400,
        "INVALID_CONFIG",
    ),
    ("events", {"destination": "nowhere"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("events", {"destination": "__weirmq_routing"}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
]


@pytest.mark.parametrize(("exchange", "body", "status", "code"), REFUSED_BY_THE_EXCHANGE)
def test_bindings_an_exchange_refuses_are_never_found(
    running: Broker, exchange: str, body: dict[str, Any], status: int, code: str
) -> None:
    declare(running, name="events", type="topic")
    declare(running, name="by-headers", type="headers")
    bind(running, "events", destination="audit")
    bind(running, "by-headers", destination="audit")
    refused(running, "POST", BINDINGS, status, code, body=body, name=exchange)
    refused(running, "POST", UNBIND, 404, "BINDING_NOT_FOUND", body=body, name=exchange)


def test_reading_an_unknown_exchange_or_a_plain_topic(running: Broker) -> None:
    for name in ("nowhere", "orders"):
        for template in (EXCHANGE, BINDINGS):
            message = refused(
                running, "GET", template, 404, "UNKNOWN_TOPIC_OR_PARTITION", name=name
            )
            assert repr(name) in message
    message = refused(running, "GET", EXCHANGE, 404, "UNKNOWN_TOPIC_OR_PARTITION", name="orders")
    assert "a topic, not an exchange" in message


# --- deleting -------------------------------------------------------------------------------


def test_deleting_an_exchange(running: Broker) -> None:
    declare(running, name="events", type="topic")
    declare(running, name="eu", type="fanout")
    bind(running, "events", destination="eu", key="eu.#")
    bind(running, "eu", destination="orders")

    message = refused(
        running, "DELETE", EXCHANGE, 409, "EXCHANGE_IN_USE", name="eu", query="?if_unused=true"
    )
    assert "source of 1 binding" in message
    refused(running, "DELETE", EXCHANGE, 400, "INVALID_REQUEST", name="eu", query="?if_unused=yes")
    unbind(running, "eu", destination="orders")
    # Bindings *to* it do not make it used (RabbitMQ's rule); they go with it.
    assert call(running, "DELETE", EXCHANGE, 204, name="eu", query="?if_unused=true") is None
    assert call(running, "GET", BINDINGS, 200, name="events")["bindings"] == []
    refused(running, "GET", EXCHANGE, 404, "UNKNOWN_TOPIC_OR_PARTITION", name="eu")
    refused(running, "DELETE", EXCHANGE, 404, "UNKNOWN_TOPIC_OR_PARTITION", name="eu")
    gone = requests.get(running.admin_url + "/api/v1/topics/eu", timeout=HTTP_TIMEOUT_S)
    assert gone.status_code == 404  # its log went with it

    bind(running, "events", destination="orders")
    assert call(running, "DELETE", EXCHANGE, 204, name="events", query="?if_unused=false") is None
    assert call(running, "GET", EXCHANGES, 200) == {"exchanges": []}


def test_a_plain_topic_is_never_deleted_as_an_exchange(running: Broker) -> None:
    refused(running, "DELETE", EXCHANGE, 404, "UNKNOWN_TOPIC_OR_PARTITION", name="orders")
    assert running.call(running.broker.topics.get, "orders") is not None


def test_deleting_a_destination_topic_removes_its_bindings(running: Broker) -> None:
    declare(running, name="events", type="fanout")
    bind(running, "events", destination="orders")
    bind(running, "events", destination="audit")
    requests.delete(
        running.admin_url + "/api/v1/topics/orders",
        headers=bearer_of(running),
        timeout=HTTP_TIMEOUT_S,
    )
    assert call(running, "GET", BINDINGS, 200, name="events")["bindings"] == [
        binding("events", "audit")
    ]


def test_wrong_methods_on_exchange_routes(running: Broker) -> None:
    declare(running, name="events", type="topic")
    for method, path, allowed in [
        ("PUT", "/api/v1/exchanges", {"GET", "HEAD", "POST"}),
        ("PATCH", "/api/v1/exchanges/events", {"GET", "HEAD", "DELETE"}),
        ("DELETE", "/api/v1/exchanges/events/bindings", {"GET", "HEAD", "POST"}),
        ("GET", "/api/v1/exchanges/events/bindings/delete", {"POST"}),
    ]:
        response = requests.request(method, running.admin_url + path, timeout=HTTP_TIMEOUT_S)
        assert response.status_code == 405, (method, path)
        assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        assert set(response.headers["Allow"].split(",")) == allowed


# --- routing: counters, lag, metrics --------------------------------------------------------


def scrape(broker: Broker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of the exchange families, over HTTP."""
    text = requests.get(broker.admin_url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("weirmq_exchange_")
        for sample in family.samples
    }


def test_routing_counters_in_the_api_and_the_metrics(running: Broker) -> None:
    declare(running, name="events", type="topic", partitions=1, alternate="fallback")
    declare(running, name="fallback", type="fanout", partitions=1)
    declare(running, name="lonely", type="direct", partitions=1)
    bind(running, "events", destination="orders", key="eu.#")
    bind(running, "events", destination="audit", key="*.de")
    bind(running, "fallback", destination="audit")
    core = running.broker

    # eu.de: two copies; eu.fr: one; us.ny: none of its own, one through the alternate.
    running.call(publish, core, "events", ["eu.de", "eu.fr", "us.ny"])
    running.call(publish, core, "lonely", ["nobody", "listens"])

    events = call(running, "GET", EXCHANGE, 200, name="events")
    assert events["stats"] == {
        "routed_records": 4,
        "unroutable_records": 0,
        "alternate_records": 1,
        "failed_records": 0,
    }
    assert events["routing_lag_records"] == 0  # routed before the producer is answered
    lonely = call(running, "GET", EXCHANGE, 200, name="lonely")
    assert lonely["stats"] == {**NO_STATS, "unroutable_records": 2}
    assert call(running, "GET", EXCHANGE, 200, name="fallback")["stats"] == NO_STATS
    topics = requests.get(running.admin_url + "/api/v1/topics", timeout=HTTP_TIMEOUT_S).json()
    records = {topic["name"]: topic["records"] for topic in topics["topics"]}
    assert (records["orders"], records["audit"], records["events"]) == (2, 2, 3)

    samples = scrape(running)
    for exchange, routed, unroutable, alternate in [
        ("events", 4, 0, 1),
        ("fallback", 0, 0, 0),
        ("lonely", 0, 2, 0),
    ]:
        labels = (("exchange", exchange),)
        assert samples["weirmq_exchange_routed_records_total", labels] == routed
        assert samples["weirmq_exchange_unroutable_records_total", labels] == unroutable
        assert samples["weirmq_exchange_alternate_records_total", labels] == alternate
        assert samples["weirmq_exchange_failed_records_total", labels] == 0
        assert samples["weirmq_exchange_routing_lag_records", labels] == 0

    call(running, "DELETE", EXCHANGE, 204, name="lonely")
    assert not any(labels == (("exchange", "lonely"),) for _, labels in scrape(running))


# --- the error mapping and the spec ---------------------------------------------------------


ROUTING_ERRORS: list[tuple[RoutingError, int]] = [
    (UnknownExchangeError("x"), 404),
    (ExchangeConflictError("x"), 400),
    (ExchangeInUseError("x"), 400),
    (InvalidExchangeError("x"), 400),
    (InvalidBindingError("x"), 400),
    (ExpressionError("x", 3), 400),
    (BindingCycleError("x"), 400),
    (RoutingLimitError("x"), 400),
    (InvalidRoutingKeyError("x"), 400),
    (UnroutableError("x"), 400),
]


@pytest.mark.parametrize(("error", "status"), ROUTING_ERRORS)
def test_every_routing_error_is_the_requests_fault(error: RoutingError, status: int) -> None:
    # The handlers refuse conflicts and in-use deletes themselves, with a 409; a routing
    # error that reaches the middleware is a request the router refused.
    answer = errors.from_kafka_error(error)
    assert answer is not None and answer.status == status


def test_every_routing_error_is_in_that_list() -> None:
    assert {type(error) for error, _ in ROUTING_ERRORS} == _subclasses(RoutingError)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found))


def test_the_spec_follows_the_routing_core() -> None:
    # Written out in openapi.py and http.py (admin/ may not import routing/); kept here.
    assert set(EXCHANGE_TYPES) == {kind.value for kind in ExchangeType}
    unroutable = openapi.document()["components"]["schemas"]["DeclareExchange"]["properties"]
    assert set(unroutable["unroutable"]["enum"]) == UNROUTABLE_POLICIES
    assert openapi.BINDING_KEY_CHARS_MAX == limits.BINDING_KEY_MAX_BYTES
    assert openapi.BINDING_ARGUMENTS_MAX == limits.BINDING_ARGUMENTS_MAX
    assert openapi.ARGUMENT_VALUE_CHARS_MAX == limits.ARGUMENT_VALUE_MAX_CHARS
    assert openapi.EXPRESSION_CHARS_MAX == limits.EXPRESSION_MAX_CHARS


REPLAY = "/api/v1/exchanges/{name}/replay"


def test_replay_re_routes_what_came_before_a_binding(running: Broker) -> None:
    declare(running, name="events", type="topic", partitions=1)
    running.call(publish, running.broker, "events", ["eu.1", "us.1", "eu.2"])
    bind(running, "events", destination="audit", key="eu.*")
    running.call(publish, running.broker, "events", ["eu.3"])  # routed live
    done = call(running, "POST", REPLAY, 200, {"destination": "audit", "key": "eu.*"},
                name="events")  # fmt: skip
    assert done["ranges"] == [{"partition": 0, "start_offset": 0, "end_offset": 3}]
    assert (done["records_read"], done["records_routed"]) == (3, 2)
    assert done["binding"] == binding("events", "audit", key="eu.*")
    audit = running.call(lambda: running.broker.partition("audit", 0).log_end_offset)
    assert audit == 3  # eu.3 once, eu.1 and eu.2 once
    ranged = {"destination": "audit", "key": "eu.*", "from_offsets": {"0": 2},
              "to_offsets": {"0": 3}}  # fmt: skip
    again = call(running, "POST", REPLAY, 200, ranged, name="events")
    assert (again["records_read"], again["records_routed"]) == (1, 1)
    refused(running, "POST", REPLAY, 404, "BINDING_NOT_FOUND",
            body={"destination": "audit", "key": "nope"}, name="events")  # fmt: skip
    refused(running, "POST", REPLAY, 400, "INVALID_REQUEST",
            body={"destination": "audit", "key": "eu.*", "from_offsets": {"x": 1}},
            name="events")  # fmt: skip
