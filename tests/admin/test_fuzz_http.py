"""Schema-driven fuzzing of the admin API: schemathesis against a real running server.

The server is `weirmq.testing.Broker(admin=True)`: the whole broker (Kafka listener,
storage, admin service) on its own thread and loop, with the admin API on a free port of
127.0.0.1, reached over real HTTP, exactly as a user's tool would. For every operation of
the spec, schemathesis sends the spec's examples, boundary and invalid values (wrong types,
missing or extra fields, bad path values, undocumented methods) and random valid requests.

The spec is `openapi.document()`, the very document served at ``/openapi.json`` (a test in
test_http.py checks they are equal), loaded at import: schemathesis' loader that would
fetch it from a fixture-started server (``schemathesis.pytest.from_fixture``) fails on
pytest 9.2, which no longer has the ``Node._nodeid`` attribute that loader sets.

Every response must

- not be a 5xx: nothing a request sends may break the broker;
- have a status, content type, headers and body the spec documents for that operation;
- be a 4xx when schemathesis sent data the spec says is invalid;
- be a 405 with ``Allow`` for a method the spec does not list.

Examples are bounded so the file runs in well under a minute; the topics the fuzzer
creates live in the broker's temporary data directory, which goes when it stops. The
spec's example group is made before each operation as applications make groups: a
confluent-kafka consumer commits an offset in it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from admin_support import commit_outside_a_group
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from weirmq.admin import openapi
from weirmq.broker.core import PARTITIONS_MAX
from weirmq.testing import Broker

pytestmark = pytest.mark.integration

EXAMPLES_PER_OPERATION = 50
FUZZ_PARTITIONS_MAX = 4
"""The spec allows topics of up to PARTITIONS_MAX (100 000) partitions, each a directory of
files: the fuzzer would spend its time in mkdir. Valid counts above this are lowered to it
(they stay valid, so the case is still a positive one); invalid counts are sent as they are,
and test_http.py checks the limit itself."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    unsupported_method,
]


DOCUMENT = openapi.document()
EXAMPLE_TOPIC = DOCUMENT["paths"]["/api/v1/topics/{name}"]["parameters"][0]["example"]
"""The spec's example topic name: schemathesis sends the examples first, so they must name
a topic that exists for reads, config changes and deletes to go past the 404."""
EXAMPLE_GROUP = DOCUMENT["paths"]["/api/v1/groups/{group}"]["parameters"][0]["example"]
"""Likewise, a group that exists (and has no members, so that DELETE succeeds)."""
EXAMPLE_EXCHANGE = DOCUMENT["paths"]["/api/v1/exchanges/{name}"]["parameters"][0]["example"]
"""Likewise, an exchange; its example binding leads to the example topic."""
EXAMPLE_BINDING = DOCUMENT["components"]["schemas"]["BindingRequest"]["example"]


@pytest.fixture(scope="module")
def running_broker() -> Iterator[Broker]:
    with Broker(admin=True, default_partitions=2) as broker:
        yield broker


@pytest.fixture(autouse=True)
def example_topic(running_broker: Broker) -> None:
    """(Re)create the example topic before each operation: the DELETE run removes it."""
    core = running_broker.broker

    def ensure() -> None:
        if core.topics.get(EXAMPLE_TOPIC) is None:
            core.create_topic(EXAMPLE_TOPIC, 2)

    running_broker.call(ensure)


@pytest.fixture(autouse=True)
def example_group(running_broker: Broker, example_topic: None) -> None:
    """(Re)create the example group, with an offset on the example topic, before each
    operation: the DELETE run removes it."""
    core = running_broker.broker
    if running_broker.call(core.group_view, EXAMPLE_GROUP) is None:
        bootstrap = running_broker.bootstrap_servers
        commit_outside_a_group(bootstrap, EXAMPLE_GROUP, EXAMPLE_TOPIC, {0: 0})


@pytest.fixture(autouse=True)
def example_exchange(running_broker: Broker, example_topic: None) -> None:
    """(Re)create the example exchange, bound as the example binding says, before each
    operation: the DELETE runs remove the exchange or the binding, and a DELETE of the
    example topic takes the binding with it."""
    core = running_broker.broker

    def ensure() -> None:
        if EXAMPLE_EXCHANGE not in core.exchanges.router:
            core.create_topic(EXAMPLE_EXCHANGE, 2, {"weirmq.exchange.type": "topic"})
        core.exchanges.bind(EXAMPLE_EXCHANGE, **EXAMPLE_BINDING)

    running_broker.call(ensure)


schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    # The module-scoped broker is shared by every example on purpose (that is the point).
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_every_operation_conforms_to_the_spec(
    case: schemathesis.Case, running_broker: Broker
) -> None:
    body = case.body
    if isinstance(body, dict):
        partitions = body.get("partitions")
        if type(partitions) is int and FUZZ_PARTITIONS_MAX < partitions <= PARTITIONS_MAX:
            body["partitions"] = FUZZ_PARTITIONS_MAX
    # With the token: what is fuzzed is what the API does, past the 401 a DELETE, a trim or
    # a redrive without it gets (test_console_api.py checks those refusals).
    headers = {"Authorization": f"Bearer {running_broker.admin_token}"}
    case.call_and_validate(base_url=running_broker.admin_url, checks=CHECKS, headers=headers)
