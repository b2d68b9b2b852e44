"""SQS's Query protocol (form fields in, XML out), translated to and from the JSON shape.

Before botocore switched SQS to the AWS JSON 1.0 protocol (late 2023), every SDK spoke
the Query protocol, and older SDKs, other languages' clients and hand-written scripts
still do. A request is a flat list of (name, value) fields, in a form-encoded POST body
or a GET query string: `Action=SendMessage&Version=2012-11-05&QueueUrl=...`. The action
handlers take their parameters in the JSON protocol's shape, so this module translates a
field list into that shape, and a handler's JSON-shaped result into the XML document
Query clients parse. Nothing here does I/O: the HTTP layer URL-decodes the fields, and
writes the bytes returned here with `Content-Type: text/xml`.

Request names. A field's name is a dotted path through the action's input, one step per
level, in each member's Query name:

    JSON shape                                    Query fields
    --------------------------------------------  --------------------------------------
    "QueueUrl": "u"                               QueueUrl=u
    "DelaySeconds": 5                             DelaySeconds=5
    "AttributeNames": ["All", "Policy"]           AttributeName.1=All&AttributeName.2=Policy
    "Attributes": {"DelaySeconds": "5"}           Attribute.1.Name=DelaySeconds
                                                  &Attribute.1.Value=5
    "MessageAttributes":                          MessageAttribute.1.Name=a
      {"a": {"DataType": "String",                &MessageAttribute.1.Value.DataType=String
             "StringValue": "x"}}                 &MessageAttribute.1.Value.StringValue=x
    "Entries": [{"Id": "1", "MessageBody": "b"}]  SendMessageBatchRequestEntry.1.Id=1
                                                  &SendMessageBatchRequestEntry.1.MessageBody=b

Every list and map in SQS is "flattened": its elements are named after the element (the
singular `AttributeName`, `Attribute`, `Tag`, `SendMessageBatchRequestEntry`), numbered
from 1, with no wrapper level; a map entry is a key and a value under the entry's name
(`Name`/`Value`, or `Key`/`Value` for tags). Three quirks are accepted because real
clients send them:

- indexes in any order, with gaps or repeats: elements are taken in numeric index order
  (fields sharing an index make up one element; a scalar list keeps repeats in arrival
  order);
- no index at all (`AttributeName=All`, `Attribute.Name=X&Attribute.Value=Y`), the one-
  element form of SQS's oldest API, which boto 2 (and kombu's Query code path) sends; it
  counts as index 1;
- an empty list sent as the member with an empty value (`AttributeNames=`, under the JSON
  name, or `AttributeName=`), as botocore's Query serializer writes one; it decodes to [].
  (Query cannot say "empty map": an absent map and an empty one look the same.)

Scalars are text except where the JSON protocol has integers (MaxNumberOfMessages,
DelaySeconds, VisibilityTimeout, ...), which are parsed, strictly, as 32-bit integers.
Binary values (BinaryValue, BinaryListValue) are base64 in both shapes, passed through
untouched: the handler decodes them whichever protocol they came in. Authentication and
envelope fields (`Version`, `AWSAccessKeyId`, `Signature*`, `X-Amz-*`, `Timestamp`,
`Expires`, `SecurityToken`) are not parameters and are dropped; any other name the action
does not know is an error, never silently ignored.

Responses. A result is `<{Action}Response>` holding `<{Action}Result>` (absent for the
actions that return nothing: DeleteMessage, TagQueue, ...) and `<ResponseMetadata>`; the
result's members use the same Query names, flattened, in the model's order (as SQS writes
them, whatever the order of the handler's dict), so ReceiveMessage answers

    <ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">
      <ReceiveMessageResult>
        <Message><MessageId>..</MessageId>...<Body>..</Body>
          <Attribute><Name>SenderId</Name><Value>..</Value></Attribute>
          <MessageAttribute><Name>a</Name>
            <Value><StringValue>x</StringValue><DataType>String</DataType></Value>
          </MessageAttribute>
        </Message>
      </ReceiveMessageResult>
      <ResponseMetadata><RequestId>..</RequestId></ResponseMetadata>
    </ReceiveMessageResponse>

and an error is `<ErrorResponse><Error><Type>Sender|Receiver</Type><Code>{legacy code}
</Code><Message>..</Message><Detail/></Error><RequestId>..</RequestId></ErrorResponse>`.

XML 1.0 cannot carry every character, not even as a character reference: of the C0
controls only tab, LF and CR are allowed, and no surrogates, U+FFFE or U+FFFF. SQS refuses
such bodies when they are sent, but a record written by a Kafka or AMQP producer may hold
them, so `encode_query_result` raises ValueError rather than write a document no client
can parse; the handler must decide what such a message becomes. CR is written as `&#13;`
so that XML parsers do not turn it into LF. Error messages, which may quote what the
client sent, have such characters replaced with U+FFFD instead.

The table. The Query names are not in botocore's current SQS model: the switch to JSON
dropped its `locationName` traits. `_OPERATIONS` below holds, per action, the input and
output shapes with their Query names, transcribed from the last Query model (aws-sdk-go's
SQS api-2.json, which matches the SQS API reference's Query examples; only
MessageSystemAttributeNames is newer than it). The tests check the
table against botocore's current model (member names, types), against moto's SQS model
extras (which restore the Query names), and by round trips through botocore's own Query
serializer and parser.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from .errors import Fault, SqsError

__all__ = ["ACTIONS", "decode_query", "encode_query_error", "encode_query_result"]

XMLNS: Final = "http://queue.amazonaws.com/doc/2012-11-05/"
"""The namespace of every SQS Query response, still the 2012-11-05 API version."""

QUERY_FIELDS_MAX: Final = 4096
"""Fields in one request. The largest real request, a SendMessageBatch of 10 entries with
10 message attributes each, has under 400; ten times that leaves room for anything odd."""

QUERY_NAME_CHARS_MAX: Final = 256
"""Characters in one field name; the longest real one
(`SendMessageBatchRequestEntry.10.MessageAttribute.10.Value.StringListValue.NN`) has 77."""

INDEX_DIGITS_MAX: Final = 9
"""Digits in one index (`Attribute.123456789.Name`): an index is only a sort key, but
`int()` of a long digit string costs time quadratic in its length."""

_SHOWN_CHARS_MAX: Final = 100
"""How much of a client's value an error message quotes."""

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

# Fields that authenticate or frame a request rather than parameterise the action.
_ENVELOPE_NAMES: Final = frozenset(
    {"Version", "AWSAccessKeyId", "Timestamp", "Expires", "SecurityToken"}
)
_ENVELOPE_PREFIXES: Final = ("Signature", "X-Amz-")  # Signature, SignatureVersion, ...


# --- The table ------------------------------------------------------------------------


class _Scalar(enum.Enum):
    """A leaf of a shape, by its type in botocore's model."""

    STRING = "string"
    INTEGER = "integer"
    LONG = "long"
    BOOLEAN = "boolean"
    BLOB = "blob"  # base64 text in the JSON shape and on the Query wire alike


@dataclass(frozen=True, slots=True)
class _List:
    """A flattened list: its elements are `{item_name}.N`, N from 1."""

    item_name: str
    item: _Node


@dataclass(frozen=True, slots=True)
class _Map:
    """A flattened map: entry N is `{entry_name}.N.{key_name}` and `....{value_name}`."""

    entry_name: str
    key_name: str
    value_name: str
    value: _Node


@dataclass(frozen=True, slots=True)
class _Struct:
    """A structure: its members by JSON name, in the model's order."""

    members: Mapping[str, _Node]
    wire: Mapping[str, str] = field(default_factory=dict)
    """First name on the wire -> JSON name: each member's Query name, and also, for a
    list or map whose Query name differs, its JSON name (only as an empty-list marker)."""


_Node: TypeAlias = _Scalar | _List | _Map | _Struct


def _wire_name(node: _List | _Map) -> str:
    return node.item_name if isinstance(node, _List) else node.entry_name


def _struct(**members: _Node) -> _Struct:
    wire: dict[str, str] = {}
    for name, node in members.items():
        names = {name, _wire_name(node)} if isinstance(node, _List | _Map) else {name}
        for wire_name in names:
            assert wire.setdefault(wire_name, name) == name, f"{wire_name} names two members"
    return _Struct(members, wire)


@dataclass(frozen=True, slots=True)
class _Operation:
    input: _Struct
    output: _Struct | None
    """None for the actions whose response has no Result element."""


_S = _Scalar.STRING
_INT = _Scalar.INTEGER
_LONG = _Scalar.LONG
_BOOL = _Scalar.BOOLEAN
_BLOB = _Scalar.BLOB

# botocore has two value shapes (MessageAttributeValue, MessageSystemAttributeValue) with
# the same members and Query names; one node serves both.
_ATTRIBUTE_VALUE = _struct(
    StringValue=_S,
    BinaryValue=_BLOB,
    StringListValues=_List("StringListValue", _S),
    BinaryListValues=_List("BinaryListValue", _BLOB),
    DataType=_S,
)
_QUEUE_ATTRIBUTES = _Map("Attribute", "Name", "Value", _S)
_TAGS = _Map("Tag", "Key", "Value", _S)
_MESSAGE_ATTRIBUTES = _Map("MessageAttribute", "Name", "Value", _ATTRIBUTE_VALUE)
_SYSTEM_ATTRIBUTES = _Map("MessageSystemAttribute", "Name", "Value", _ATTRIBUTE_VALUE)
_MESSAGE_TO_SEND: Final[dict[str, _Node]] = {
    "MessageBody": _S,
    "DelaySeconds": _INT,
    "MessageAttributes": _MESSAGE_ATTRIBUTES,
    "MessageSystemAttributes": _SYSTEM_ATTRIBUTES,
    "MessageDeduplicationId": _S,
    "MessageGroupId": _S,
}
_MESSAGE = _struct(
    MessageId=_S,
    ReceiptHandle=_S,
    MD5OfBody=_S,
    Body=_S,
    Attributes=_Map("Attribute", "Name", "Value", _S),
    MD5OfMessageAttributes=_S,
    MessageAttributes=_MESSAGE_ATTRIBUTES,
)
_BATCH_ERRORS = _List(
    "BatchResultErrorEntry", _struct(Id=_S, SenderFault=_BOOL, Code=_S, Message=_S)
)
_QUEUE_URLS = _List("QueueUrl", _S)
_MOVE_TASK = _struct(
    TaskHandle=_S,
    Status=_S,
    SourceArn=_S,
    DestinationArn=_S,
    MaxNumberOfMessagesPerSecond=_INT,
    ApproximateNumberOfMessagesMoved=_LONG,
    ApproximateNumberOfMessagesToMove=_LONG,
    FailureReason=_S,
    StartedTimestamp=_LONG,
)

_OPERATIONS: Final[Mapping[str, _Operation]] = {
    "AddPermission": _Operation(
        _struct(
            QueueUrl=_S,
            Label=_S,
            AWSAccountIds=_List("AWSAccountId", _S),
            Actions=_List("ActionName", _S),
        ),
        None,
    ),
    "CancelMessageMoveTask": _Operation(
        _struct(TaskHandle=_S), _struct(ApproximateNumberOfMessagesMoved=_LONG)
    ),
    "ChangeMessageVisibility": _Operation(
        _struct(QueueUrl=_S, ReceiptHandle=_S, VisibilityTimeout=_INT), None
    ),
    "ChangeMessageVisibilityBatch": _Operation(
        _struct(
            QueueUrl=_S,
            Entries=_List(
                "ChangeMessageVisibilityBatchRequestEntry",
                _struct(Id=_S, ReceiptHandle=_S, VisibilityTimeout=_INT),
            ),
        ),
        _struct(
            Successful=_List("ChangeMessageVisibilityBatchResultEntry", _struct(Id=_S)),
            Failed=_BATCH_ERRORS,
        ),
    ),
    "CreateQueue": _Operation(
        _struct(QueueName=_S, Attributes=_QUEUE_ATTRIBUTES, tags=_TAGS), _struct(QueueUrl=_S)
    ),
    "DeleteMessage": _Operation(_struct(QueueUrl=_S, ReceiptHandle=_S), None),
    "DeleteMessageBatch": _Operation(
        _struct(
            QueueUrl=_S,
            Entries=_List("DeleteMessageBatchRequestEntry", _struct(Id=_S, ReceiptHandle=_S)),
        ),
        _struct(
            Successful=_List("DeleteMessageBatchResultEntry", _struct(Id=_S)),
            Failed=_BATCH_ERRORS,
        ),
    ),
    "DeleteQueue": _Operation(_struct(QueueUrl=_S), None),
    "GetQueueAttributes": _Operation(
        _struct(QueueUrl=_S, AttributeNames=_List("AttributeName", _S)),
        _struct(Attributes=_QUEUE_ATTRIBUTES),
    ),
    "GetQueueUrl": _Operation(
        _struct(QueueName=_S, QueueOwnerAWSAccountId=_S), _struct(QueueUrl=_S)
    ),
    "ListDeadLetterSourceQueues": _Operation(
        _struct(QueueUrl=_S, NextToken=_S, MaxResults=_INT),
        _struct(queueUrls=_QUEUE_URLS, NextToken=_S),
    ),
    "ListMessageMoveTasks": _Operation(
        _struct(SourceArn=_S, MaxResults=_INT),
        _struct(Results=_List("ListMessageMoveTasksResultEntry", _MOVE_TASK)),
    ),
    "ListQueueTags": _Operation(_struct(QueueUrl=_S), _struct(Tags=_TAGS)),
    "ListQueues": _Operation(
        _struct(QueueNamePrefix=_S, NextToken=_S, MaxResults=_INT),
        _struct(QueueUrls=_QUEUE_URLS, NextToken=_S),
    ),
    "PurgeQueue": _Operation(_struct(QueueUrl=_S), None),
    "ReceiveMessage": _Operation(
        _struct(
            QueueUrl=_S,
            AttributeNames=_List("AttributeName", _S),
            # Added after the switch to JSON, so no Query model names it; the clients
            # that send it in a Query (kombu's Query code path, for one) use the
            # singular, as for AttributeName.
            MessageSystemAttributeNames=_List("MessageSystemAttributeName", _S),
            MessageAttributeNames=_List("MessageAttributeName", _S),
            MaxNumberOfMessages=_INT,
            VisibilityTimeout=_INT,
            WaitTimeSeconds=_INT,
            ReceiveRequestAttemptId=_S,
        ),
        _struct(Messages=_List("Message", _MESSAGE)),
    ),
    "RemovePermission": _Operation(_struct(QueueUrl=_S, Label=_S), None),
    "SendMessage": _Operation(
        _struct(QueueUrl=_S, **_MESSAGE_TO_SEND),
        _struct(
            MD5OfMessageBody=_S,
            MD5OfMessageAttributes=_S,
            MD5OfMessageSystemAttributes=_S,
            MessageId=_S,
            SequenceNumber=_S,
        ),
    ),
    "SendMessageBatch": _Operation(
        _struct(
            QueueUrl=_S,
            Entries=_List("SendMessageBatchRequestEntry", _struct(Id=_S, **_MESSAGE_TO_SEND)),
        ),
        _struct(
            Successful=_List(
                "SendMessageBatchResultEntry",
                _struct(
                    Id=_S,
                    MessageId=_S,
                    MD5OfMessageBody=_S,
                    MD5OfMessageAttributes=_S,
                    MD5OfMessageSystemAttributes=_S,
                    SequenceNumber=_S,
                ),
            ),
            Failed=_BATCH_ERRORS,
        ),
    ),
    "SetQueueAttributes": _Operation(_struct(QueueUrl=_S, Attributes=_QUEUE_ATTRIBUTES), None),
    "StartMessageMoveTask": _Operation(
        _struct(SourceArn=_S, DestinationArn=_S, MaxNumberOfMessagesPerSecond=_INT),
        _struct(TaskHandle=_S),
    ),
    "TagQueue": _Operation(_struct(QueueUrl=_S, Tags=_TAGS), None),
    "UntagQueue": _Operation(_struct(QueueUrl=_S, TagKeys=_List("TagKey", _S)), None),
}

ACTIONS: Final[frozenset[str]] = frozenset(_OPERATIONS)
"""Every SQS action, by the name a Query request gives as `Action`."""


# --- Requests -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    path: tuple[str, ...]
    """The name split at its dots; an omitted index is filled in as "1"."""
    value: str
    name: str
    """The name as sent, for error messages."""


def decode_query(fields: Sequence[tuple[str, str]]) -> tuple[str, dict[str, Any]]:
    """The action a Query request names, and its parameters in the JSON protocol's shape.

    `fields` are the (name, value) pairs of the form body or query string, URL-decoded, in
    the order sent. Raises SqsError: MissingParameter without an Action, InvalidAction
    for an action SQS does not have, InvalidParameterValue for a name the action does not
    know, a bad integer, or a parameter given twice with different values,
    MissingParameter for half a map entry, RequestEntityTooLarge past `QUERY_FIELDS_MAX`.
    """
    if len(fields) > QUERY_FIELDS_MAX:
        raise SqsError(
            Fault.REQUEST_TOO_LARGE,
            f"The request has {len(fields)} parameters; at most {QUERY_FIELDS_MAX} are allowed.",
        )
    action = _action(fields)
    params: list[_Field] = []
    for name, value in fields:
        if name == "Action" or name in _ENVELOPE_NAMES or name.startswith(_ENVELOPE_PREFIXES):
            continue
        if len(name) > QUERY_NAME_CHARS_MAX or not name:
            raise _unknown(_shown(name), action)
        params.append(_Field(tuple(name.split(".")), value, name))
    return action, _decode_struct(_OPERATIONS[action].input, params, 0, action)


def _action(fields: Sequence[tuple[str, str]]) -> str:
    actions = {value for name, value in fields if name == "Action"}
    if not actions:
        raise SqsError(Fault.MISSING_PARAMETER, "The request must contain the parameter Action.")
    if len(actions) > 1:
        raise _twice("Action")
    action = actions.pop()
    if action not in _OPERATIONS:
        raise SqsError(
            Fault.INVALID_ACTION, f"The action {_shown(action)} is not valid for this endpoint."
        )
    return action


def _decode(node: _Node, fields: list[_Field], depth: int, action: str) -> Any:
    """The value of one member from its fields, whose `path[depth:]` is what remains
    after the member's own name."""
    if isinstance(node, _Scalar):
        return _decode_scalar(node, fields, depth, action)
    if isinstance(node, _Struct):
        return _decode_struct(node, fields, depth, action)
    if isinstance(node, _List):
        return _decode_list(node, fields, depth, action)
    return _decode_map(node, fields, depth, action)


def _decode_struct(node: _Struct, fields: list[_Field], depth: int, action: str) -> dict[str, Any]:
    groups: dict[str, list[_Field]] = {}
    for f in fields:
        if len(f.path) <= depth:
            raise _unknown(f.name, action)
        head = f.path[depth]
        member = node.wire.get(head)
        if member is None:
            raise _unknown(f.name, action)
        if _is_misused_json_name(node.members[member], head, f, depth):
            raise _unknown(f.name, action)
        groups.setdefault(member, []).append(f)
    return {
        member: _decode(node.members[member], group, depth + 1, action)
        for member, group in groups.items()
    }


def _is_misused_json_name(target: _Node, head: str, f: _Field, depth: int) -> bool:
    """Whether `f` uses a list's or map's JSON name other than as botocore's empty-list
    marker (`AttributeNames=`): as a parent of elements it is not a Query name."""
    if not isinstance(target, _List | _Map) or head == _wire_name(target):
        return False
    return len(f.path) != depth + 1 or f.value != ""


def _decode_scalar(node: _Scalar, fields: list[_Field], depth: int, action: str) -> Any:
    for f in fields:
        if len(f.path) != depth:
            raise _unknown(f.name, action)
    values = {f.value for f in fields}
    if len(values) > 1:
        raise _twice(fields[0].name)
    return _scalar(node, fields[0].value, fields[0].name)


def _decode_list(node: _List, fields: list[_Field], depth: int, action: str) -> list[Any]:
    elements = _by_index(fields, depth)
    if isinstance(node.item, _Scalar):
        # Scalars sharing an index are all kept, in the order sent.
        return [
            _decode_scalar(node.item, [f], depth + 1, action)
            for _, group in elements
            for f in group
        ]
    return [_decode(node.item, group, depth + 1, action) for _, group in elements]


def _decode_map(node: _Map, fields: list[_Field], depth: int, action: str) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for index, group in _by_index(fields, depth):
        keys = [f for f in group if len(f.path) > depth + 1 and f.path[depth + 1] == node.key_name]
        values = [
            f for f in group if len(f.path) > depth + 1 and f.path[depth + 1] == node.value_name
        ]
        if len(keys) + len(values) != len(group):
            stray = next(f for f in group if f not in keys and f not in values)
            raise _unknown(stray.name, action)
        prefix = ".".join((*group[0].path[:depth], str(index)))
        if not keys:
            raise _missing(f"{prefix}.{node.key_name}")
        if not values:
            raise _missing(f"{prefix}.{node.value_name}")
        key = _decode_scalar(_Scalar.STRING, keys, depth + 2, action)
        if key in entries:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"The {node.entry_name} named {_shown(key)} is given more than once.",
            )
        entries[key] = _decode(node.value, values, depth + 2, action)
    return entries


def _by_index(fields: list[_Field], depth: int) -> list[tuple[int, list[_Field]]]:
    """The fields of a list or map grouped by element, in index order.

    `path[depth]` is the index; a field without one (the one-element legacy form) gets
    index 1, and a field that ends before it with an empty value is an empty-list marker
    and contributes nothing.
    """
    groups: dict[int, list[_Field]] = {}
    for f in fields:
        if len(f.path) == depth and f.value == "":
            continue
        index_text = f.path[depth] if len(f.path) > depth else ""
        if index_text.isascii() and index_text.isdigit():
            if len(index_text) > INDEX_DIGITS_MAX:
                raise SqsError(
                    Fault.INVALID_PARAMETER_VALUE,
                    f"The index in parameter {f.name} has more than {INDEX_DIGITS_MAX} digits.",
                )
            index = int(index_text)
        else:
            index = 1
            f = _Field((*f.path[:depth], "1", *f.path[depth:]), f.value, f.name)
        groups.setdefault(index, []).append(f)
    return sorted(groups.items())


def _scalar(node: _Scalar, text: str, name: str) -> Any:
    if node is _Scalar.STRING or node is _Scalar.BLOB:
        return text
    if node is _Scalar.BOOLEAN:
        if text not in ("true", "false"):
            raise _invalid(text, name, "Must be true or false.")
        return text == "true"
    # Strict: int() would also take "+5", " 5", "5_000" and non-ASCII digits.
    if re.fullmatch(r"-?[0-9]{1,19}", text) is None:
        raise _invalid(text, name, "Must be an integer.")
    number = int(text)
    if node is _Scalar.INTEGER and not _INT32_MIN <= number <= _INT32_MAX:
        raise _invalid(text, name, "Must be a 32-bit integer.")
    return number


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS_MAX else text[:_SHOWN_CHARS_MAX] + "..."


def _unknown(name: str, action: str) -> SqsError:
    # SQS's common errors name InvalidQueryParameter for this; our Fault table has no
    # such entry, and InvalidParameterValue is what a client will handle anyway.
    return SqsError(
        Fault.INVALID_PARAMETER_VALUE,
        f"The parameter {_shown(name)} is not recognized for the action {action}.",
    )


def _twice(name: str) -> SqsError:
    return SqsError(
        Fault.INVALID_PARAMETER_VALUE,
        f"The parameter {_shown(name)} is given more than once, with different values.",
    )


def _missing(name: str) -> SqsError:
    return SqsError(Fault.MISSING_PARAMETER, f"The request must contain the parameter {name}.")


def _invalid(value: str, name: str, reason: str) -> SqsError:
    return SqsError(
        Fault.INVALID_PARAMETER_VALUE,
        f"Value {_shown(value)} for parameter {name} is invalid. Reason: {reason}",
    )


# --- Responses ------------------------------------------------------------------------

_XML_DECLARATION: Final = '<?xml version="1.0"?>'
# What XML 1.0 can carry (its production `Char`), negated.
_NOT_XML_CHAR: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ESCAPES: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})


def encode_query_result(action: str, result: Mapping[str, Any], request_id: str) -> bytes:
    """The XML document SQS answers `action` with, `result` in the JSON protocol's shape.

    Members whose value is None are left out. Raises ValueError for an unknown action, a
    member the action's result does not have, a value of the wrong type, or text XML
    cannot carry (see the module docstring): each a bug in the caller, not the client.
    """
    operation = _OPERATIONS.get(action)
    if operation is None:
        raise ValueError(f"unknown SQS action {action!r}")
    out = [_XML_DECLARATION, f'<{action}Response xmlns="{XMLNS}">']
    if operation.output is not None:
        out.append(f"<{action}Result>")
        _encode_members(operation.output, result, out, f"{action} result")
        out.append(f"</{action}Result>")
    elif any(value is not None for value in result.values()):
        raise ValueError(f"{action} has no result, but was given {sorted(result)}")
    out.append(_response_metadata(request_id))
    out.append(f"</{action}Response>")
    return "".join(out).encode()


def encode_query_error(fault: Fault, message: str, request_id: str) -> bytes:
    """The `<ErrorResponse>` document for `fault`: its legacy code, Sender or Receiver."""
    kind = "Sender" if fault.sender else "Receiver"
    return (
        f'{_XML_DECLARATION}<ErrorResponse xmlns="{XMLNS}"><Error><Type>{kind}</Type>'
        f"<Code>{_text(fault.legacy_code, 'code')}</Code>"
        f"<Message>{_text(_NOT_XML_CHAR.sub(chr(0xFFFD), message), 'message')}</Message>"
        f"<Detail/></Error><RequestId>{_text(request_id, 'request id')}</RequestId>"
        "</ErrorResponse>"
    ).encode()


def _response_metadata(request_id: str) -> str:
    request_id = _text(request_id, "request id")
    return f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"


def _encode_members(node: _Struct, value: Mapping[str, Any], out: list[str], where: str) -> None:
    # In the model's order, as SQS writes them, whatever the order of `value`.
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = [name for name in value if name not in node.members]
    if unknown:
        raise ValueError(f"{where}: no member {unknown[0]!r}")
    for name, member in node.members.items():
        member_value = value.get(name)
        if member_value is not None:
            _encode(member, member_value, name, out, f"{where}.{name}")


def _encode(node: _Node, value: Any, tag: str, out: list[str], where: str) -> None:
    """Append `value` as the element(s) `tag` names; a flattened list or map names its
    own elements instead."""
    if isinstance(node, _Scalar):
        out.append(f"<{tag}>{_scalar_text(node, value, where)}</{tag}>")
    elif isinstance(node, _Struct):
        out.append(f"<{tag}>")
        _encode_members(node, value, out, where)
        out.append(f"</{tag}>")
    elif isinstance(node, _List):
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        for item in value:
            _encode(node.item, item, node.item_name, out, where)
    else:
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {type(value).__name__}")
        for key, item in value.items():
            out.append(f"<{node.entry_name}>")
            _encode(_Scalar.STRING, key, node.key_name, out, f"{where} key")
            _encode(node.value, item, node.value_name, out, f"{where}[{key!r}]")
            out.append(f"</{node.entry_name}>")


def _scalar_text(node: _Scalar, value: Any, where: str) -> str:
    # bool is a subclass of int: an integer member given True is a bug, not 1.
    if node is _Scalar.BOOLEAN and isinstance(value, bool):
        return "true" if value else "false"
    if node in (_Scalar.INTEGER, _Scalar.LONG) and type(value) is int:
        return str(value)
    if node in (_Scalar.STRING, _Scalar.BLOB) and isinstance(value, str):
        return _text(value, where)
    raise ValueError(f"{where}: a {node.value} cannot be {type(value).__name__} {value!r:.40}")


def _text(text: str, where: str) -> str:
    bad = _NOT_XML_CHAR.search(text)
    if bad is not None:
        raise ValueError(
            f"{where}: U+{ord(bad.group()):04X} at offset {bad.start()} cannot be written in XML"
        )
    return text.translate(_ESCAPES)
