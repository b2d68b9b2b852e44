"""SQS's Query protocol (`weirmq.protocols.sqs.query`), checked with botocore's own code.

botocore's SQS model speaks JSON now and has lost the Query names (`locationName`), so
the model the checks use is botocore's current one with the Query names put back from
moto's SQS model extras (moto serves SQS over Query too), plus the few that moto lacks,
taken from the last Query model (aws-sdk-go's SQS api-2.json) and listed in
`_MISSING_FROM_MOTO`. With the protocol set to "query", botocore's `QuerySerializer`
writes requests exactly as a Query SDK sends them, and its `QueryParser` reads our XML
exactly as a Query SDK reads it.

Requests are serialized, form-encoded and URL-decoded as on the wire; responses are
parsed from our bytes. Every action, every member: once with a sample that fills every
member, then with hypothesis. Last, a whole botocore client on that model talks to the
codec through SigV4 verification, as an old SDK would talk to the broker.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import string
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import botocore.session
import pytest
from botocore.awsrequest import (
    AWSPreparedRequest,
    AWSResponse,
    create_request_object,
    prepare_request_dict,
)
from botocore.exceptions import ClientError
from botocore.loaders import Loader
from botocore.model import OperationModel, ServiceModel, Shape
from botocore.parsers import create_parser
from botocore.serialize import create_serializer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.core.loaders import create_loader as create_moto_loader

from weirmq.protocols.sqs import query
from weirmq.protocols.sqs.errors import Fault, SqsError
from weirmq.protocols.sqs.query import (
    ACTIONS,
    XMLNS,
    decode_query,
    encode_query_error,
    encode_query_result,
)
from weirmq.protocols.sqs.sigv4 import verify_sigv4

ENDPOINT = "https://sqs.us-east-1.amazonaws.com"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/000000000000/orders"

# Query names moto's extras (moto 5.x) do not restore, from aws-sdk-go's last Query model
# of SQS; MessageSystemAttributeNames is newer than any Query model, and its singular is
# what kombu's Query code path sends.
_MISSING_FROM_MOTO = {
    "ListMessageMoveTasksResultEntryList": "ListMessageMoveTasksResultEntry",
    "MessageSystemAttributeList": "MessageSystemAttributeName",
}


# --- The Query model ------------------------------------------------------------------


def _rename_traits(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            ("locationName" if key == "locationNameForQueryCompatibility" else key): (
                _rename_traits(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_rename_traits(item) for item in value]
    return value


@functools.cache
def query_model() -> ServiceModel:
    """botocore's SQS model, its Query names restored, speaking the Query protocol."""
    return ServiceModel(query_model_dict(), "sqs")


def query_model_dict() -> dict[str, Any]:
    with_extras = create_moto_loader().load_service_model("sqs", "service-2")
    model = _rename_traits(copy.deepcopy(with_extras))
    model["metadata"]["protocol"] = "query"
    model["metadata"]["protocols"] = ["query"]
    for list_shape, member_name in _MISSING_FROM_MOTO.items():
        member = model["shapes"][list_shape]["member"]
        assert "locationName" not in member, f"moto now names {list_shape}: drop the overlay"
        member["locationName"] = member_name
    for name, operation in model["operations"].items():
        if "output" in operation:
            # Every Query response wraps its result in <{Action}Result>.
            operation["output"]["resultWrapper"] = f"{name}Result"
    return model


def operation(action: str) -> OperationModel:
    return query_model().operation_model(action)


def serialize(action: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fields a Query SDK sends for `params`, as the HTTP layer decodes them."""
    serializer = create_serializer("query", include_validation=True)
    request_dict = serializer.serialize_to_request(params, operation(action))
    prepare_request_dict(request_dict, endpoint_url=ENDPOINT)
    body = create_request_object(request_dict).prepare().body
    text = body.decode() if isinstance(body, bytes) else body
    return parse_qsl(text, keep_blank_values=True, strict_parsing=True)


def parse(action: str | None, body: bytes, status: int = 200) -> dict[str, Any]:
    """What a Query SDK makes of our response."""
    shape = operation(action).output_shape if action is not None else None
    response = {"body": body, "headers": {}, "status_code": status}
    parsed = create_parser("query").parse(response, shape)
    # What botocore adds from the HTTP response, not from our document.
    parsed["ResponseMetadata"].pop("HTTPStatusCode")
    parsed["ResponseMetadata"].pop("HTTPHeaders")
    return parsed


# --- Values in the JSON shape ---------------------------------------------------------


def to_json_shape(value: Any, shape: Shape) -> Any:
    """`value` as the JSON protocol carries it: blobs as base64 text; and, since Query
    cannot say "empty map" and a Query SDK leaves empty lists out of what it parses,
    with those dropped (see `drop_empty_lists`)."""
    kind = shape.type_name
    if kind == "blob":
        return base64.b64encode(value).decode()
    if kind == "list":
        return [to_json_shape(item, shape.member) for item in value]
    if kind == "map":
        return {key: to_json_shape(item, shape.value) for key, item in value.items()}
    if kind == "structure":
        return {
            name: to_json_shape(item, shape.members[name])
            for name, item in value.items()
            if not (shape.members[name].type_name == "map" and not item)
        }
    return value


def drop_empty_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: drop_empty_lists(item) for key, item in value.items() if item != []}
    if isinstance(value, list):
        return [drop_empty_lists(item) for item in value]
    return value


TRICKY_TEXT = "a <b> & 'c' \"d\" ]]> \r\n\tcr\rlf é 𝄞 \ufffd"


def full_sample(shape: Shape, name: str = "") -> Any:
    """A value for `shape` with every member present: two list elements, two map entries,
    and text that needs escaping."""
    kind = shape.type_name
    if kind == "structure":
        return {member: full_sample(sub, member) for member, sub in shape.members.items()}
    if kind == "list":
        return [full_sample(shape.member, name), full_sample(shape.member, name + "2")]
    if kind == "map":
        return {
            f"{name}-1": full_sample(shape.value),
            f"{name}-2 {TRICKY_TEXT}": full_sample(shape.value),
        }
    if kind == "string":
        return shape.enum[-1] if shape.enum else f"{name} {TRICKY_TEXT}"
    if kind == "integer":
        return -(2**31)
    if kind == "long":
        return 2**53 + 1
    if kind == "boolean":
        return name != "SenderFault2"
    assert kind == "blob", kind
    return bytes(range(0, 256, 17))


# XML 1.0's characters: of the C0 controls only tab, LF and CR; no surrogates, U+FFFE, U+FFFF.
NOT_XML = "".join(chr(code) for code in range(0x20) if chr(code) not in "\t\n\r") + "\ufffe\uffff"
XML_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters=NOT_XML))


def strategy(shape: Shape) -> st.SearchStrategy[Any]:
    """Any value of `shape` (required members always present), XML-legal text."""
    kind = shape.type_name
    if kind == "structure":
        required = set(shape.required_members)
        members = {name: strategy(sub) for name, sub in shape.members.items()}
        return st.fixed_dictionaries(
            {name: value for name, value in members.items() if name in required},
            optional={name: value for name, value in members.items() if name not in required},
        )
    if kind == "list":
        return st.lists(strategy(shape.member), max_size=3)
    if kind == "map":
        return st.dictionaries(XML_TEXT, strategy(shape.value), max_size=3)
    if kind == "string":
        return st.sampled_from(shape.enum) if shape.enum else XML_TEXT
    if kind == "integer":
        return st.integers(-(2**31), 2**31 - 1)
    if kind == "long":
        return st.integers(-(2**63), 2**63 - 1)
    if kind == "boolean":
        return st.booleans()
    assert kind == "blob", kind
    return st.binary(max_size=12)


def action_and(which: str) -> st.SearchStrategy[tuple[str, Any]]:
    """An action, and a value of its input or output shape."""
    actions = sorted(action for action in ACTIONS if getattr(operation(action), which) is not None)
    return st.sampled_from(actions).flatmap(
        lambda action: st.tuples(st.just(action), strategy(getattr(operation(action), which)))
    )


# --- The table against the model ------------------------------------------------------


def test_actions_are_botocores() -> None:
    current = Loader().load_service_model("sqs", "service-2")
    assert frozenset(current["operations"]) == ACTIONS
    assert len(ACTIONS) == 23


def _check(node: Any, shape: Shape, member: str, where: str) -> None:
    """`node` (of query's table) against `shape`, the model's shape of `member`."""
    kind = shape.type_name
    if isinstance(node, query._Scalar):
        assert node.value == kind, where
    elif isinstance(node, query._Struct):
        assert kind == "structure", where
        assert list(node.members) == list(shape.members), where
        for name, sub in shape.members.items():
            _check(node.members[name], sub, name, f"{where}.{name}")
    elif isinstance(node, query._List):
        assert kind == "list", where
        assert shape.serialization.get("flattened"), where
        # As botocore's QuerySerializer names the elements of a flattened list.
        item_name = shape.member.serialization.get("name") or shape.serialization.get(
            "name", member
        )
        assert node.item_name == item_name, where
        _check(node.item, shape.member, item_name, f"{where}[]")
    else:
        assert isinstance(node, query._Map), where
        assert kind == "map", where
        assert shape.serialization.get("flattened"), where
        assert node.entry_name == shape.serialization.get("name", member), where
        assert node.key_name == shape.key.serialization.get("name", "key"), where
        assert node.value_name == shape.value.serialization.get("name", "value"), where
        assert shape.key.type_name == "string", where
        _check(node.value, shape.value, node.value_name, f"{where}{{}}")


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_table_matches_the_model(action: str) -> None:
    table = query._OPERATIONS[action]
    model = operation(action)
    _check(table.input, model.input_shape, "", f"{action} input")
    if model.output_shape is None:
        assert table.output is None
    else:
        assert table.output is not None
        _check(table.output, model.output_shape, "", f"{action} output")


# --- Requests -------------------------------------------------------------------------


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_every_member_of_every_request(action: str) -> None:
    shape = operation(action).input_shape
    params = full_sample(shape)
    fields = serialize(action, params)
    assert decode_query(fields) == (action, to_json_shape(params, shape))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(action_and("input_shape"))
def test_any_request(case: tuple[str, Any]) -> None:
    action, params = case
    fields = serialize(action, params)
    assert decode_query(fields) == (action, to_json_shape(params, operation(action).input_shape))


def test_integers_are_ints() -> None:
    fields = serialize(
        "ReceiveMessage",
        {"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 0},
    )
    _, params = decode_query(fields)
    assert params["MaxNumberOfMessages"] == 10 and type(params["MaxNumberOfMessages"]) is int
    assert params["WaitTimeSeconds"] == 0


def test_a_send_message_as_the_api_reference_shows_it() -> None:
    # The shape of the SQS API reference's Query example, with its envelope fields.
    wire = (
        "Action=SendMessage&MessageBody=This+is+a+test+message"
        "&MessageAttribute.1.Name=my_attribute_name_1"
        "&MessageAttribute.1.Value.StringValue=my_attribute_value_1"
        "&MessageAttribute.1.Value.DataType=String"
        "&MessageAttribute.2.Name=my_attribute_name_2"
        "&MessageAttribute.2.Value.StringValue=my_attribute_value_2"
        "&MessageAttribute.2.Value.DataType=String"
        "&Expires=2020-10-18T22%3A52%3A43PST&Version=2012-11-05"
        "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20201018%2Fus-east-1%2Fsqs"
        "&AWSAccessKeyId=AKID&SignatureVersion=2&SignatureMethod=HmacSHA256"
        "&Signature=abc%3D&Timestamp=2020-10-18T22%3A52%3A43Z&SecurityToken=t"
        "&QueueUrl=https%3A%2F%2Fsqs.us-east-2.amazonaws.com%2F123456789012%2FMyQueue"
    )
    assert decode_query(parse_qsl(wire, keep_blank_values=True)) == (
        "SendMessage",
        {
            "MessageBody": "This is a test message",
            "MessageAttributes": {
                "my_attribute_name_1": {
                    "StringValue": "my_attribute_value_1",
                    "DataType": "String",
                },
                "my_attribute_name_2": {
                    "StringValue": "my_attribute_value_2",
                    "DataType": "String",
                },
            },
            "QueueUrl": "https://sqs.us-east-2.amazonaws.com/123456789012/MyQueue",
        },
    )


def test_indexes_are_sorted_numerically_with_gaps_and_repeats() -> None:
    fields = [
        ("Action", "SendMessageBatch"),
        ("SendMessageBatchRequestEntry.10.Id", "ten"),
        ("SendMessageBatchRequestEntry.2.MessageBody", "b2"),
        ("SendMessageBatchRequestEntry.10.MessageBody", "b10"),
        ("SendMessageBatchRequestEntry.2.Id", "two"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.3.Value.DataType", "Number"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.3.Name", "z"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.3.Value.StringValue", "3"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.1.Name", "a"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType", "String"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringListValue.2", "y"),
        ("SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringListValue.1", "x"),
        ("SendMessageBatchRequestEntry.2.DelaySeconds", "0"),
        ("QueueUrl", QUEUE_URL),
    ]
    action, params = decode_query(fields)
    assert action == "SendMessageBatch"
    assert params == {
        "Entries": [
            {
                "Id": "two",
                "MessageBody": "b2",
                "DelaySeconds": 0,
                "MessageAttributes": {
                    "a": {"DataType": "String", "StringListValues": ["x", "y"]},
                    "z": {"DataType": "Number", "StringValue": "3"},
                },
            },
            {"Id": "ten", "MessageBody": "b10"},
        ],
        "QueueUrl": QUEUE_URL,
    }
    assert list(params["Entries"][0]["MessageAttributes"]) == ["a", "z"]
    repeated = [
        ("Action", "GetQueueAttributes"),
        ("QueueUrl", QUEUE_URL),
        ("AttributeName.3", "Policy"),
        ("AttributeName.1", "QueueArn"),
        ("AttributeName.3", "DelaySeconds"),
    ]
    assert decode_query(repeated)[1]["AttributeNames"] == ["QueueArn", "Policy", "DelaySeconds"]


def test_the_one_element_legacy_forms() -> None:
    # What boto 2 (and kombu's Query code path) send: no index at all.
    get = [("Action", "GetQueueAttributes"), ("QueueUrl", QUEUE_URL), ("AttributeName", "All")]
    assert decode_query(get)[1] == {"QueueUrl": QUEUE_URL, "AttributeNames": ["All"]}
    set_ = [
        ("Action", "SetQueueAttributes"),
        ("QueueUrl", QUEUE_URL),
        ("Attribute.Name", "VisibilityTimeout"),
        ("Attribute.Value", "60"),
    ]
    assert decode_query(set_)[1] == {
        "QueueUrl": QUEUE_URL,
        "Attributes": {"VisibilityTimeout": "60"},
    }


def test_empty_lists() -> None:
    for marker in ("AttributeNames", "AttributeName"):
        fields = [("Action", "GetQueueAttributes"), ("QueueUrl", QUEUE_URL), (marker, "")]
        assert decode_query(fields)[1] == {"QueueUrl": QUEUE_URL, "AttributeNames": []}
    fields = serialize("SendMessageBatch", {"QueueUrl": QUEUE_URL, "Entries": []})
    assert ("Entries", "") in fields
    assert decode_query(fields)[1] == {"QueueUrl": QUEUE_URL, "Entries": []}


def test_the_queue_url_may_be_left_to_the_path() -> None:
    assert decode_query([("Action", "DeleteQueue")]) == ("DeleteQueue", {})


# --- Requests SQS refuses -------------------------------------------------------------


def refused(fields: list[tuple[str, str]]) -> SqsError:
    with pytest.raises(SqsError) as caught:
        decode_query(fields)
    return caught.value


def test_missing_and_unknown_actions() -> None:
    error = refused([("QueueUrl", QUEUE_URL)])
    assert error.fault is Fault.MISSING_PARAMETER
    assert error.message == "The request must contain the parameter Action."
    error = refused([("Action", "SendMessages")])
    assert error.fault is Fault.INVALID_ACTION
    assert error.message == "The action SendMessages is not valid for this endpoint."
    assert refused([("Action", "x" * 10_000)]).message.endswith(
        "... is not valid for this endpoint."
    )
    assert refused([("Action", "DeleteQueue"), ("Action", "PurgeQueue")]).fault is (
        Fault.INVALID_PARAMETER_VALUE
    )


INTEGER_MEMBERS = [
    ("ChangeMessageVisibility", "VisibilityTimeout"),
    ("ListDeadLetterSourceQueues", "MaxResults"),
    ("ListMessageMoveTasks", "MaxResults"),
    ("ListQueues", "MaxResults"),
    ("ReceiveMessage", "MaxNumberOfMessages"),
    ("ReceiveMessage", "VisibilityTimeout"),
    ("ReceiveMessage", "WaitTimeSeconds"),
    ("SendMessage", "DelaySeconds"),
    ("StartMessageMoveTask", "MaxNumberOfMessagesPerSecond"),
    ("SendMessageBatch", "SendMessageBatchRequestEntry.1.DelaySeconds"),
    (
        "ChangeMessageVisibilityBatch",
        "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout",
    ),
]


@pytest.mark.parametrize(("action", "name"), INTEGER_MEMBERS)
@pytest.mark.parametrize("bad", ["ten", "", "1.5", "+1", " 1", "1_0", "٣", "2147483648", "9" * 40])
def test_bad_integers(action: str, name: str, bad: str) -> None:
    error = refused([("Action", action), (name, bad)])
    assert error.fault is Fault.INVALID_PARAMETER_VALUE
    assert error.message.startswith(f"Value {bad[:100]} for parameter {name} is invalid. Reason: ")


@pytest.mark.parametrize(("action", "name"), INTEGER_MEMBERS)
def test_good_integers(action: str, name: str) -> None:
    _, params = decode_query([("Action", action), (name, "-2147483648")])
    while not isinstance(params, int):
        params = next(iter(params.values())) if isinstance(params, dict) else params[0]
    assert params == -(2**31)


@pytest.mark.parametrize(
    "name",
    [
        "MessageBodies",
        "messagebody",
        "QueueUrl.1",
        "MessageAttribute.1.Colour",
        "MessageAttribute.1.Value.Colour",
        "MessageAttribute.1.Value",
        "MessageAttributes.1.Name",
        "MessageAttributes",
        "MessageAttribute.x.y.Name",
        "MessageSystemAttribute.1.Value.StringListValue.1.Deeper",
        "",
        ".",
        "a" * 300,
    ],
)
def test_unknown_parameters(name: str) -> None:
    valid = [
        ("Action", "SendMessage"),
        ("QueueUrl", QUEUE_URL),
        ("MessageAttribute.1.Name", "a"),
        ("MessageAttribute.1.Value.DataType", "String"),
        ("MessageSystemAttribute.1.Name", "AWSTraceHeader"),
        ("MessageSystemAttribute.1.Value.DataType", "String"),
    ]
    assert decode_query(valid)[0] == "SendMessage"
    error = refused([*valid, (name, "v")])
    assert error.fault is Fault.INVALID_PARAMETER_VALUE
    assert "is not recognized for the action SendMessage." in error.message


def test_half_a_map_entry() -> None:
    base = [("Action", "TagQueue"), ("QueueUrl", QUEUE_URL)]
    error = refused([*base, ("Tag.2.Key", "team")])
    assert error.fault is Fault.MISSING_PARAMETER
    assert error.message == "The request must contain the parameter Tag.2.Value."
    error = refused([*base, ("Tag.Value", "ops")])
    assert error.message == "The request must contain the parameter Tag.1.Key."


def test_one_parameter_twice() -> None:
    same = [("Action", "DeleteQueue"), ("QueueUrl", QUEUE_URL), ("QueueUrl", QUEUE_URL)]
    assert decode_query(same) == ("DeleteQueue", {"QueueUrl": QUEUE_URL})
    error = refused([("Action", "DeleteQueue"), ("QueueUrl", "a"), ("QueueUrl", "b")])
    assert error.fault is Fault.INVALID_PARAMETER_VALUE
    assert "more than once" in error.message
    twice = [
        ("Action", "TagQueue"),
        ("Tag.1.Key", "k"), ("Tag.1.Value", "1"), ("Tag.2.Key", "k"), ("Tag.2.Value", "2"),
    ]  # fmt: skip
    assert "more than once" in refused(twice).message


def test_limits() -> None:
    many = [("Action", "ListQueues")] + [("QueueNamePrefix", "q")] * query.QUERY_FIELDS_MAX
    assert refused(many).fault is Fault.REQUEST_TOO_LARGE
    index = "1" * (query.INDEX_DIGITS_MAX + 1)
    error = refused([("Action", "UntagQueue"), (f"TagKey.{index}", "k")])
    assert error.fault is Fault.INVALID_PARAMETER_VALUE
    assert decode_query([("Action", "UntagQueue"), ("TagKey.999999999", "k")])[1] == {
        "TagKeys": ["k"]
    }


# --- Responses ------------------------------------------------------------------------


def expected_from(action: str, result: Any, request_id: str) -> dict[str, Any]:
    shape = operation(action).output_shape
    return {
        **drop_empty_lists(to_json_shape(result, shape)),
        "ResponseMetadata": {"RequestId": request_id},
    }


def parsed_as_json(action: str, body: bytes) -> dict[str, Any]:
    parsed = parse(action, body)
    metadata = parsed.pop("ResponseMetadata")
    return {**to_json_shape(parsed, operation(action).output_shape), "ResponseMetadata": metadata}


@pytest.mark.parametrize(
    "action", sorted(action for action in ACTIONS if operation(action).output_shape is not None)
)
def test_every_member_of_every_result(action: str) -> None:
    sample = full_sample(operation(action).output_shape)
    result = to_json_shape(sample, operation(action).output_shape)
    body = encode_query_result(action, result, "req-1")
    assert parsed_as_json(action, body) == expected_from(action, sample, "req-1")


@pytest.mark.parametrize(
    "action", sorted(action for action in ACTIONS if operation(action).output_shape is None)
)
def test_results_without_a_result_element(action: str) -> None:
    body = encode_query_result(action, {}, "req-2")
    assert (
        body
        == (
            f'<?xml version="1.0"?><{action}Response xmlns="{XMLNS}">'
            f"<ResponseMetadata><RequestId>req-2</RequestId></ResponseMetadata>"
            f"</{action}Response>"
        ).encode()
    )
    assert parse(action, body) == {"ResponseMetadata": {"RequestId": "req-2"}}
    with pytest.raises(ValueError, match="has no result"):
        encode_query_result(action, {"QueueUrl": "u"}, "req-2")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(action_and("output_shape"), st.text(string.ascii_letters + string.digits + "-", min_size=1))
def test_any_result(case: tuple[str, Any], request_id: str) -> None:
    action, sample = case
    result = to_json_shape(sample, operation(action).output_shape)
    body = encode_query_result(action, result, request_id)
    assert parsed_as_json(action, body) == expected_from(action, sample, request_id)


def test_a_send_message_result_as_sqs_writes_it() -> None:
    body = encode_query_result(
        "SendMessage",
        {"MD5OfMessageBody": "fafb00f5732ab283681e124bf8747ed1", "MessageId": "5fea7756"},
        "27daac76",
    )
    assert (
        body
        == (
            '<?xml version="1.0"?>'
            f'<SendMessageResponse xmlns="{XMLNS}"><SendMessageResult>'
            "<MD5OfMessageBody>fafb00f5732ab283681e124bf8747ed1</MD5OfMessageBody>"
            "<MessageId>5fea7756</MessageId>"
            "</SendMessageResult>"
            "<ResponseMetadata><RequestId>27daac76</RequestId></ResponseMetadata>"
            "</SendMessageResponse>"
        ).encode()
    )


def test_a_received_message() -> None:
    message = {
        "MessageId": "m-1",
        "ReceiptHandle": "r-1",
        "MD5OfBody": "d41d8cd98f00b204e9800998ecf8427e",
        "Body": "<order id='1'>&amp;</order>",
        "Attributes": {"SenderId": "AKID", "SentTimestamp": "1764000000000"},
        "MessageAttributes": {
            "colour": {"DataType": "String", "StringValue": "blue"},
            "raw": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xff").decode()},
        },
    }
    body = encode_query_result("ReceiveMessage", {"Messages": [message]}, "req-3")
    assert (
        b"<Attribute><Name>SenderId</Name><Value>AKID</Value></Attribute>" in body
        and b"<MessageAttribute><Name>colour</Name><Value><StringValue>blue</StringValue>"
        b"<DataType>String</DataType></Value></MessageAttribute>"
        in body
        and b"<Body>&lt;order id='1'&gt;&amp;amp;&lt;/order&gt;</Body>" in body
    )
    parsed = parse("ReceiveMessage", body)
    assert parsed["Messages"][0]["Body"] == message["Body"]
    assert parsed["Messages"][0]["MessageAttributes"]["raw"]["BinaryValue"] == b"\x00\xff"
    empty = encode_query_result("ReceiveMessage", {"Messages": []}, "req-4")
    assert b"<ReceiveMessageResult></ReceiveMessageResult>" in empty
    assert parse("ReceiveMessage", empty) == {"ResponseMetadata": {"RequestId": "req-4"}}


@settings(max_examples=500)
@given(XML_TEXT)
def test_any_body_comes_back_as_sent(text: str) -> None:
    message = {"MessageId": "m", "Body": text, "Attributes": {"k": text}}
    body = encode_query_result("ReceiveMessage", {"Messages": [message]}, "r")
    received = parse("ReceiveMessage", body)["Messages"][0]
    assert received["Body"] == text and received["Attributes"] == {"k": text}
    fields = serialize("SendMessage", {"QueueUrl": QUEUE_URL, "MessageBody": text})
    assert decode_query(fields)[1]["MessageBody"] == text


@pytest.mark.parametrize("char", ["\x00", "\x08", "\x0b", "\x1f", "\ufffe", "\uffff", "\ud800"])
def test_text_xml_cannot_carry(char: str) -> None:
    message = {"MessageId": "m", "Body": f"ab{char}"}
    with pytest.raises(ValueError, match=r"at offset 2 cannot be written in XML"):
        encode_query_result("ReceiveMessage", {"Messages": [message]}, "r")
    error = encode_query_error(Fault.INVALID_MESSAGE_CONTENTS, f"bad {char}", "r")
    assert parse(None, error, 400)["Error"]["Message"] == "bad \ufffd"


@pytest.mark.parametrize(
    ("action", "result", "problem"),
    [
        ("SendMessages", {}, "unknown SQS action"),
        ("SendMessage", {"Colour": "blue"}, "no member 'Colour'"),
        ("SendMessage", {"MessageId": 5}, "a string cannot be int"),
        ("ListMessageMoveTasks", {"Results": [{"StartedTimestamp": "5"}]}, "a long cannot"),
        ("ListMessageMoveTasks", {"Results": [{"StartedTimestamp": True}]}, "a long cannot"),
        ("DeleteMessageBatch", {"Failed": [{"SenderFault": 1}]}, "a boolean cannot"),
        ("ListQueues", {"QueueUrls": "https://q"}, "expected a list"),
        ("GetQueueAttributes", {"Attributes": [("k", "v")]}, "expected a mapping"),
        ("ReceiveMessage", {"Messages": ["m"]}, "expected a mapping"),
    ],
)
def test_results_that_are_bugs(action: str, result: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_query_result(action, result, "r")


def test_none_members_are_left_out() -> None:
    body = encode_query_result("ListQueues", {"QueueUrls": [QUEUE_URL], "NextToken": None}, "r")
    assert parse("ListQueues", body) == {
        "QueueUrls": [QUEUE_URL],
        "ResponseMetadata": {"RequestId": "r"},
    }


# --- Errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("fault", list(Fault))
def test_every_fault(fault: Fault) -> None:
    body = encode_query_error(fault, "It went <wrong> & stayed so.", "req-5")
    assert parse(None, body, fault.status) == {
        "Error": {
            "Type": "Sender" if fault.sender else "Receiver",
            "Code": fault.legacy_code,
            "Message": "It went <wrong> & stayed so.",
            "Detail": None,
        },
        "ResponseMetadata": {"RequestId": "req-5"},
    }


def test_an_error_as_sqs_writes_it() -> None:
    body = encode_query_error(
        Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.", "42d59b56"
    )
    assert (
        body
        == (
            '<?xml version="1.0"?>'
            f'<ErrorResponse xmlns="{XMLNS}"><Error><Type>Sender</Type>'
            "<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"
            "<Message>The specified queue does not exist.</Message><Detail/></Error>"
            "<RequestId>42d59b56</RequestId></ErrorResponse>"
        ).encode()
    )


# --- A whole Query client -------------------------------------------------------------

ACCESS_KEY = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@dataclass
class _Stream:
    body: bytes

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


Handler = Callable[[str, dict[str, Any]], Mapping[str, Any]]


def query_client(models_dir: Path, handler: Handler) -> Any:
    """A botocore SQS client speaking Query, whose requests never leave the process:
    each is checked with verify_sigv4, decoded, handed to `handler` (JSON shape in, JSON
    shape out, SqsError for an error) and answered with our XML."""
    service_dir = models_dir / "sqs" / "2012-11-05"
    service_dir.mkdir(parents=True)
    (service_dir / "service-2.json").write_text(json.dumps(query_model_dict()))
    session = botocore.session.Session()
    session.get_component("data_loader").search_paths.insert(0, str(models_dir))
    client = session.create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=ENDPOINT,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
    )

    def answer(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        url = urlsplit(request.url)
        headers = {name.lower(): _text(value) for name, value in request.headers.items()}
        headers["host"] = url.netloc
        body = request.body if isinstance(request.body, bytes) else request.body.encode()
        query_pairs = parse_qsl(url.query, keep_blank_values=True)
        secrets = {ACCESS_KEY: SECRET}
        signer = verify_sigv4(
            request.method, url.path, query_pairs, headers, body, secrets, time.time()
        )
        assert signer == ACCESS_KEY
        assert headers["content-type"].startswith("application/x-www-form-urlencoded")
        try:
            action, params = decode_query(parse_qsl(body.decode(), keep_blank_values=True))
            status, xml = 200, encode_query_result(action, handler(action, params), "req-6")
        except SqsError as error:
            status, xml = error.fault.status, encode_query_error(error.fault, error.message, "e")
        return AWSResponse(request.url, status, {"Content-Type": "text/xml"}, _Stream(xml))

    client.meta.events.register("before-send.sqs", answer)
    return client


def test_a_query_client_end_to_end(tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    message = {
        "MessageId": "m-1",
        "ReceiptHandle": "r-1",
        "MD5OfBody": hashlib.md5(b"hello").hexdigest(),
        "Body": "hello",
        "Attributes": {"ApproximateReceiveCount": "1"},
        "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "7"}},
    }

    def handler(action: str, params: dict[str, Any]) -> Mapping[str, Any]:
        calls.append((action, params))
        if action == "GetQueueUrl":
            raise SqsError(Fault.QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.")
        results: dict[str, Mapping[str, Any]] = {
            "SendMessage": {"MD5OfMessageBody": message["MD5OfBody"], "MessageId": "m-1"},
            "ReceiveMessage": {"Messages": [message]},
        }
        return results.get(action, {})

    client = query_client(tmp_path, handler)
    sent = client.send_message(
        QueueUrl=QUEUE_URL,
        MessageBody="hello",
        DelaySeconds=5,
        MessageAttributes={"n": {"DataType": "Number", "StringValue": "7"}},
    )
    assert sent["MessageId"] == "m-1"
    assert calls[-1] == (
        "SendMessage",
        {
            "QueueUrl": QUEUE_URL,
            "MessageBody": "hello",
            "DelaySeconds": 5,
            "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "7"}},
        },
    )
    received = client.receive_message(
        QueueUrl=QUEUE_URL, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    assert received["Messages"] == [message]
    assert calls[-1][1]["MessageSystemAttributeNames"] == ["All"]
    deleted = client.delete_message(QueueUrl=QUEUE_URL, ReceiptHandle="r-1")
    assert deleted["ResponseMetadata"]["RequestId"] == "req-6"
    assert calls[-1] == ("DeleteMessage", {"QueueUrl": QUEUE_URL, "ReceiptHandle": "r-1"})
    with pytest.raises(ClientError) as caught:
        client.get_queue_url(QueueName="nowhere")
    # The legacy code, which is what applications compare against.
    assert caught.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
