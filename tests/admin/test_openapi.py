"""The OpenAPI document: valid OpenAPI 3.0, and in step with the routes actually served."""

from __future__ import annotations

import json
from typing import Any

import schemathesis

from weirmq.admin import create_app, openapi
from weirmq.broker.core import Broker
from weirmq.settings import SETTING_SPECS

METHODS = {"get", "post", "put", "patch", "delete"}


def test_the_document_is_valid_openapi_and_schemathesis_loads_it() -> None:
    document = openapi.document()
    assert document["openapi"].startswith("3.0.")
    json.dumps(document)  # plain JSON data, nothing Python-only
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()  # against the OpenAPI 3.0 meta-schema; raises on any problem
    operations = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert ("POST", "/api/v1/topics") in operations
    assert ("POST", "/api/v1/exchanges/{name}/bindings/delete") in operations
    assert len(operations) == 33


def test_every_route_is_documented_and_every_documented_route_exists(broker: Broker) -> None:
    app = create_app(broker)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
        and route.method != "HEAD"  # aiohttp adds HEAD to GET
        and route.resource.canonical.startswith(("/api/", "/openapi.json", "/metrics"))
    }  # the console's pages (/, /console/...) are files for browsers, not API operations
    documented = {
        (method, path)
        for path, item in openapi.document()["paths"].items()
        for method in item
        if method in METHODS
    }
    assert served == documented


def test_every_reference_resolves_and_every_schema_is_used() -> None:
    document = openapi.document()
    schemas = document["components"]["schemas"]
    referenced = set(_references(document))
    assert referenced <= set(schemas), referenced - set(schemas)
    assert set(schemas) <= referenced, set(schemas) - referenced


def test_objects_in_responses_are_closed_and_fully_required() -> None:
    # additionalProperties false and every property required: a field added to a response
    # without being described here fails the fuzz test instead of slipping through.
    request_bodies = {
        "CreateTopic",
        "AlterConfigs",
        "DeclareExchange",
        "BindingRequest",
        "ReplayRequest",
        "ProduceRequest",
        "OffsetsResetRequest",
        "TrimRequest",
        "RedriveRequest",
    }
    for name, schema in openapi.document()["components"]["schemas"].items():
        if name in request_bodies:
            continue
        for obj in _objects(schema):
            assert obj.get("additionalProperties") is False, name
            assert set(obj["required"]) == set(obj["properties"]), name


def test_the_settings_schema_follows_the_settings_table() -> None:
    settings = openapi.document()["components"]["schemas"]["Settings"]
    assert list(settings["properties"]) == [spec.name for spec in SETTING_SPECS]
    node_id = settings["properties"]["node_id"]
    assert (node_id["type"], node_id["minimum"], node_id["maximum"]) == ("integer", 0, 2**31 - 1)
    admin_listen = settings["properties"]["admin_listen"]  # None when turned off
    assert (admin_listen["type"], admin_listen["nullable"]) == ("string", True)
    assert settings["properties"]["auto_create_topics"]["type"] == "boolean"


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _references(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _references(value)]
    return []


def _objects(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """`schema` and every object schema nested in its properties and array items."""
    found = [schema] if schema.get("type") == "object" and "properties" in schema else []
    children = list(schema.get("properties", {}).values())
    if "items" in schema:
        children.append(schema["items"])
    for child in children:
        found += _objects(child)
    return found
