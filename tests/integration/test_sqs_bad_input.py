"""Bad input to every SQS action gets SQS's error, never a 500.

Each action is sent, over the JSON protocol as botocore frames it (but by hand, so that
types botocore would refuse to serialize reach the broker), every parameter it knows with
values of every wrong type and a few hostile shapes; and raw malformed requests (not JSON,
an unknown target, an unknown Query action, a body over the limit). The answer must be a
4xx with SQS's JSON error (`__type` and the `x-amzn-query-error` header botocore reads),
and the broker must still serve a well-formed request afterwards.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest

from weirmq.testing import Broker

pytestmark = pytest.mark.integration

WRONG_VALUES: list[Any] = [
    None,
    "",
    "x" * 300,
    -1,
    2**40,
    1.5,
    True,
    [],
    [1, {"a": None}],
    {},
    {"Name": 1, "Value": [None]},
]


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(sqs=True, sqs_request_bytes_max=2 * 1024 * 1024) as running:
        yield running


def post(endpoint: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        endpoint + "/",
        data=body,
        method="POST",
        headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.0"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def assert_sqs_error(status: int, headers: dict[str, str], body: bytes) -> None:
    assert 400 <= status < 500, (status, body[:300])
    document = json.loads(body)
    assert document["__type"].startswith("com.amazonaws.sqs#"), document
    assert document["message"]
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["x-amzn-query-error"].endswith(";Sender")


def actions() -> dict[str, list[str]]:
    model = botocore.session.get_session().get_service_model("sqs")
    return {
        name: list(model.operation_model(name).input_shape.members)
        for name in model.operation_names
        if model.operation_model(name).input_shape is not None
    }


def test_every_parameter_of_every_action_with_wrong_values(broker: Broker) -> None:
    endpoint = broker.sqs_endpoint
    assert endpoint is not None
    status, _, body = post(
        endpoint, "AmazonSQS.CreateQueue", json.dumps({"QueueName": "bad-input"}).encode()
    )
    assert status == 200, body
    url = json.loads(body)["QueueUrl"]
    answered = 0
    for action, members in sorted(actions().items()):
        for member in members:
            for value in WRONG_VALUES:
                params: dict[str, Any] = {"QueueUrl": url, member: value}
                status, headers, body = post(
                    endpoint, f"AmazonSQS.{action}", json.dumps(params).encode()
                )
                if status == 200:  # some wrong-looking values are fine (an empty prefix)
                    continue
                assert_sqs_error(status, headers, body)
                answered += 1
    assert answered > 500  # most of them were refused, each with SQS's error
    status, _, body = post(endpoint, "AmazonSQS.ListQueues", b"{}")
    assert status == 200 and url in json.loads(body)["QueueUrls"]


@pytest.mark.parametrize(
    ("target", "body"),
    [
        ("AmazonSQS.SendMessage", b"{not json"),
        ("AmazonSQS.SendMessage", b"[1, 2]"),
        ("AmazonSQS.NoSuchAction", b"{}"),
        ("SomethingElse.SendMessage", b"{}"),
        ("AmazonSQS.SendMessage", b"\xff\xfe\x00"),
    ],
)
def test_malformed_json_requests(broker: Broker, target: str, body: bytes) -> None:
    assert broker.sqs_endpoint is not None
    assert_sqs_error(*post(broker.sqs_endpoint, target, body))


def test_a_body_over_the_limit_is_refused_and_the_broker_goes_on(broker: Broker) -> None:
    assert broker.sqs_endpoint is not None
    status, _, body = post(broker.sqs_endpoint, "AmazonSQS.ListQueues", b" " * (3 * 1024 * 1024))
    assert status == 413, body[:200]
    assert json.loads(body)["__type"] == "com.amazonaws.sqs#RequestEntityTooLarge"
    status, _, _ = post(broker.sqs_endpoint, "AmazonSQS.ListQueues", b"{}")
    assert status == 200


def test_query_requests_with_bad_fields(broker: Broker) -> None:
    assert broker.sqs_endpoint is not None
    for query in (
        "Action=NoSuchThing",
        "Version=2012-11-05",
        "Action=ReceiveMessage&QueueUrl=x&MaxNumberOfMessages=abc",
        "Action=SendMessage&MessageAttribute.1.Name=a",
        "Action=ListQueues&MaxResults=99999999999999999999",
    ):
        request = urllib.request.Request(f"{broker.sqs_endpoint}/?{query}")
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=30)
        assert 400 <= raised.value.code < 500, query
        assert b"<ErrorResponse" in raised.value.read()
