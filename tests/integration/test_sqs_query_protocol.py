"""SQS's Query protocol over HTTP against `weirmq serve`: a real botocore client, raw GETs.

botocore speaks SQS's JSON protocol now; before late 2023 it spoke Query (form fields in,
XML out), as older SDKs, other languages' clients and hand-written scripts still do. The
client here is botocore's own, on its current SQS model switched back to the Query
protocol, with the Query names (`locationName`) that model has lost put back from moto's
model extras, plus the two moto lacks (see tests/protocols/sqs/test_sqs_query.py, which
checks the codec with the same model in-process; the few lines that build the model are
repeated here rather than imported, since test modules are not a package). botocore's
`QuerySerializer` writes the requests and its `QueryParser` reads the broker's XML, over
a real socket, signed with SigV4 as any SDK signs.

Raw requests (urllib, ElementTree) check what no SDK shows: a GET with the action in the
query string, the XML's namespace, the queue named by the path. And a message sent over
one protocol is received over the other with the same body, attributes and digests.

Waits are bounded: long polls of at most a couple of seconds, HTTP timeouts of a few.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import boto3
import botocore.config
import botocore.exceptions
import botocore.session
import pytest
from moto.core.loaders import create_loader as create_moto_loader
from moto.sqs.models import Message as MotoMessage

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

ACCOUNT = "000000000000"
XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
NS = {"sqs": XMLNS}
HTTP_TIMEOUT_S = 10.0
ACCESS_KEY = "AKIDQUERY"
SECRET = "query-secret"
# Text XML must escape, CR (which XML parsers turn into LF unless it is a reference),
# a character outside the BMP, and a JSON escape.
TRICKY = "a <b> & 'c' \"d\" ]]> \r\n\tline é 𝄞 \\u0041"

# Query names moto's extras (moto 5.x) do not restore; as in the codec's own tests.
_MISSING_FROM_MOTO = {
    "ListMessageMoveTasksResultEntryList": "ListMessageMoveTasksResultEntry",
    "MessageSystemAttributeList": "MessageSystemAttributeName",
}


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
def query_model_json() -> str:
    """botocore's SQS model, its Query names restored, speaking the Query protocol."""
    with_extras = create_moto_loader().load_service_model("sqs", "service-2")
    model = _rename_traits(copy.deepcopy(with_extras))
    model["metadata"]["protocol"] = "query"
    model["metadata"]["protocols"] = ["query"]
    for list_shape, member_name in _MISSING_FROM_MOTO.items():
        model["shapes"][list_shape]["member"]["locationName"] = member_name
    for name, operation in model["operations"].items():
        if "output" in operation:
            operation["output"]["resultWrapper"] = f"{name}Result"
    return json.dumps(model)


def query_client(
    models_dir: Path, endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET
) -> Any:
    """A botocore SQS client speaking Query to `endpoint`."""
    service_dir = models_dir / "sqs" / "2012-11-05"
    if not service_dir.exists():
        service_dir.mkdir(parents=True)
        (service_dir / "service-2.json").write_text(query_model_json())
    session = botocore.session.Session()
    session.get_component("data_loader").search_paths.insert(0, str(models_dir))
    client = session.create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )
    assert client.meta.service_model.protocol == "query"
    return client


def json_client(endpoint: str) -> Any:
    """boto3's default client (the JSON protocol)."""
    client = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )
    assert client.meta.service_model.protocol == "json"
    return client


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def query(models_dir: Path, broker: BrokerProcess) -> Any:
    return query_client(models_dir, broker.sqs_endpoint)


@pytest.fixture
def sqs(broker: BrokerProcess) -> Any:
    return json_client(broker.sqs_endpoint)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def attributes_md5(attributes: dict[str, Any]) -> str:
    """SQS's digest of message attributes, as moto (another implementation) computes it."""
    reference = MotoMessage("id", "body")
    reference.message_attributes = attributes
    return str(reference.attribute_md5)


def code_of(raised: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(raised.value.response["Error"]["Code"])


ATTRIBUTES: dict[str, Any] = {
    "colour": {"DataType": "String", "StringValue": "blue <&>"},
    "count": {"DataType": "Number", "StringValue": "42"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "kind": {"DataType": "String.custom", "StringValue": "x"},
}


# --- queues ----------------------------------------------------------------------------------


def test_queue_lifecycle_attributes_and_tags(query: Any, broker: BrokerProcess) -> None:
    requests: list[Any] = []
    query.meta.events.register("before-send.sqs", lambda request, **_: requests.append(request))
    queue = name("qlife")
    url = query.create_queue(
        QueueName=queue,
        Attributes={"VisibilityTimeout": "40", "DelaySeconds": "1"},
        tags={"team": "core", "env": "test"},
    )["QueueUrl"]
    assert url == f"{broker.sqs_endpoint}/{ACCOUNT}/{queue}"
    assert query.get_queue_url(QueueName=queue)["QueueUrl"] == url
    assert query.list_queues(QueueNamePrefix=queue)["QueueUrls"] == [url]
    found = query.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert found["VisibilityTimeout"] == "40"
    assert found["DelaySeconds"] == "1"
    assert found["QueueArn"] == f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}"
    assert found["ApproximateNumberOfMessages"] == "0"
    query.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "5"})
    some = query.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"]
    )
    assert some["Attributes"] == {"VisibilityTimeout": "5", "DelaySeconds": "1"}
    assert query.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "env": "test"}
    query.tag_queue(QueueUrl=url, Tags={"owner": "me <&>"})
    query.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert query.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "owner": "me <&>"}
    query.delete_queue(QueueUrl=url)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.get_queue_url(QueueName=queue)
    assert code_of(raised) == "AWS.SimpleQueueService.NonExistentQueue"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # The code is what botocore maps to the modeled exception.
    with pytest.raises(query.exceptions.QueueDoesNotExist):
        query.send_message(QueueUrl=url, MessageBody="x")
    # Every request went as a Query SDK sends it: form fields, no JSON target.
    assert len(requests) == 13
    for request in requests:
        assert request.headers["Content-Type"].startswith(b"application/x-www-form-urlencoded")
        assert "X-Amz-Target" not in request.headers
        body = request.body.encode() if isinstance(request.body, str) else request.body
        assert body.startswith(b"Action=")


def test_list_queues_pages(query: Any) -> None:
    prefix = name("qpage")
    urls = sorted(query.create_queue(QueueName=f"{prefix}-{i}")["QueueUrl"] for i in range(5))
    seen: list[str] = []
    token = None
    for _ in range(5):  # bounded: 3 pages expected
        page = query.list_queues(
            QueueNamePrefix=prefix, MaxResults=2, **({"NextToken": token} if token else {})
        )
        assert len(page["QueueUrls"]) <= 2
        seen += page["QueueUrls"]
        token = page.get("NextToken")
        if not token:
            break
    assert sorted(seen) == urls


def test_errors_as_query_clients_see_them(query: Any) -> None:
    url = query.create_queue(QueueName=name("qerr"))["QueueUrl"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "43201"})
    assert code_of(raised) == "InvalidAttributeValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.get_queue_attributes(QueueUrl=url, AttributeNames=["NoSuchThing"])
    assert code_of(raised) == "InvalidAttributeName"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.create_queue(QueueName="bad name!")
    assert code_of(raised) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert code_of(raised) == "ReceiptHandleIsInvalid"
    assert raised.value.response["Error"]["Type"] == "Sender"


# --- messages --------------------------------------------------------------------------------


def test_send_receive_change_visibility_delete(query: Any) -> None:
    url = query.create_queue(QueueName=name("qmsg"))["QueueUrl"]
    sent = query.send_message(QueueUrl=url, MessageBody=TRICKY, MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == md5(TRICKY)
    assert sent["MD5OfMessageAttributes"] == attributes_md5(ATTRIBUTES)
    got = query.receive_message(
        QueueUrl=url,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
        WaitTimeSeconds=2,
    )["Messages"]
    assert len(got) == 1
    message = got[0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == TRICKY
    assert message["MD5OfBody"] == md5(TRICKY)
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["SenderId"] == ACCESS_KEY
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    # In flight now; visible again at once with a visibility timeout of 0.
    assert query.receive_message(QueueUrl=url).get("Messages") is None
    query.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    again = query.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"], WaitTimeSeconds=2
    )["Messages"]
    assert [m["MessageId"] for m in again] == [sent["MessageId"]]
    assert again[0]["Attributes"] == {"ApproximateReceiveCount": "2"}
    assert "MessageAttributes" not in again[0]  # none asked for
    query.delete_message(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"])
    found = query.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert found == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }


def test_batches_and_their_partial_failures(query: Any) -> None:
    url = query.create_queue(QueueName=name("qbatch"))["QueueUrl"]
    result = query.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "one", "MessageBody": "first", "MessageAttributes": ATTRIBUTES},
            {"Id": "late", "MessageBody": "x", "DelaySeconds": 901},
            {"Id": "two", "MessageBody": "second"},
        ],
    )
    successful = {entry["Id"]: entry for entry in result["Successful"]}
    assert sorted(successful) == ["one", "two"]
    assert successful["one"]["MD5OfMessageBody"] == md5("first")
    assert successful["one"]["MD5OfMessageAttributes"] == attributes_md5(ATTRIBUTES)
    assert [entry["Id"] for entry in result["Failed"]] == ["late"]
    failed = result["Failed"][0]
    assert failed["Code"] == "InvalidParameterValue" and failed["SenderFault"] is True
    got: list[dict[str, Any]] = []
    for _ in range(5):  # bounded: a receive may return fewer than are there
        got += query.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
        ).get("Messages", [])
        if len(got) >= 2:
            break
    assert sorted(m["Body"] for m in got) == ["first", "second"]
    by_body = {m["Body"]: m for m in got}
    assert by_body["first"]["MessageAttributes"] == ATTRIBUTES
    changed = query.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": "c1",
                "ReceiptHandle": by_body["first"]["ReceiptHandle"],
                "VisibilityTimeout": 60,
            },
            {"Id": "c2", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 60},
        ],
    )
    assert [entry["Id"] for entry in changed["Successful"]] == ["c1"]
    assert [(e["Id"], e["Code"]) for e in changed["Failed"]] == [("c2", "ReceiptHandleIsInvalid")]
    deleted = query.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "d1", "ReceiptHandle": by_body["first"]["ReceiptHandle"]},
            {"Id": "d2", "ReceiptHandle": by_body["second"]["ReceiptHandle"]},
            {"Id": "d3", "ReceiptHandle": "not-a-handle"},
        ],
    )
    assert sorted(entry["Id"] for entry in deleted["Successful"]) == ["d1", "d2"]
    assert [(e["Id"], e["Code"], e["SenderFault"]) for e in deleted["Failed"]] == [
        ("d3", "ReceiptHandleIsInvalid", True)
    ]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        query.delete_message_batch(QueueUrl=url, Entries=[])
    assert code_of(raised) == "AWS.SimpleQueueService.EmptyBatchRequest"


# --- one message, both protocols -------------------------------------------------------------


def received_alike(message: dict[str, Any]) -> dict[str, Any]:
    """What both protocols must agree on (receipt handles differ by receive)."""
    return {key: value for key, value in message.items() if key != "ReceiptHandle"}


def test_sent_over_query_received_over_json_identically(query: Any, sqs: Any) -> None:
    url = query.create_queue(QueueName=name("qx"))["QueueUrl"]
    sent = query.send_message(QueueUrl=url, MessageBody=TRICKY, MessageAttributes=ATTRIBUTES)
    asking = {
        "QueueUrl": url,
        "MessageSystemAttributeNames": ["SenderId", "SentTimestamp"],
        "MessageAttributeNames": ["All"],
        "WaitTimeSeconds": 2,
    }
    over_json = sqs.receive_message(**asking)["Messages"]
    assert len(over_json) == 1
    message = over_json[0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == TRICKY
    assert message["MD5OfBody"] == sent["MD5OfMessageBody"] == md5(TRICKY)
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["SenderId"] == ACCESS_KEY
    # Back to visible, then the same message over Query: the same in every member.
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    over_query = query.receive_message(**asking)["Messages"]
    assert [received_alike(m) for m in over_query] == [received_alike(message)]


def test_sent_over_json_received_over_query_identically(query: Any, sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("jx"))["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody=TRICKY, MessageAttributes=ATTRIBUTES)
    message = query.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=2)[
        "Messages"
    ][0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == TRICKY
    assert message["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]


# --- raw HTTP --------------------------------------------------------------------------------


def http_get(url: str) -> tuple[int, str, bytes]:
    """(status, content type, body); an error status is an answer too. The XML's
    RequestId is checked against the x-amzn-RequestId header on the way."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        with error:
            status, headers, body = error.code, error.headers, error.read()
    request_id = next(ET.fromstring(body).iter(f"{{{XMLNS}}}RequestId")).text
    assert request_id and request_id == headers["x-amzn-RequestId"]
    return status, headers["Content-Type"], body


def test_a_raw_get_lists_queues_in_xml(sqs: Any, broker: BrokerProcess) -> None:
    queue = name("rawlist")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    query_string = urlencode(
        {"Action": "ListQueues", "Version": "2012-11-05", "QueueNamePrefix": queue}
    )
    status, content_type, body = http_get(f"{broker.sqs_endpoint}/?{query_string}")
    assert status == 200
    assert content_type.startswith("text/xml")
    root = ET.fromstring(body)
    assert root.tag == f"{{{XMLNS}}}ListQueuesResponse"
    assert [e.text for e in root.findall("sqs:ListQueuesResult/sqs:QueueUrl", NS)] == [url]
    assert root.findtext("sqs:ResponseMetadata/sqs:RequestId", namespaces=NS)


def test_a_raw_get_on_the_queue_path(sqs: Any, broker: BrokerProcess) -> None:
    queue = name("rawpath")
    sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "17"})
    fields = {
        "Action": "GetQueueAttributes",
        "Version": "2012-11-05",
        "AttributeName.1": "VisibilityTimeout",
    }
    status, _, body = http_get(f"{broker.sqs_endpoint}/{ACCOUNT}/{queue}?{urlencode(fields)}")
    assert status == 200, body
    root = ET.fromstring(body)
    attributes = {
        a.findtext("sqs:Name", namespaces=NS): a.findtext("sqs:Value", namespaces=NS)
        for a in root.findall("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    }
    assert attributes == {"VisibilityTimeout": "17"}


def test_a_raw_get_error_in_xml(broker: BrokerProcess) -> None:
    fields = {"Action": "GetQueueUrl", "Version": "2012-11-05", "QueueName": name("absent")}
    status, content_type, body = http_get(f"{broker.sqs_endpoint}/?{urlencode(fields)}")
    assert status == 400
    assert content_type.startswith("text/xml")
    root = ET.fromstring(body)
    assert root.tag == f"{{{XMLNS}}}ErrorResponse"
    assert root.findtext("sqs:Error/sqs:Type", namespaces=NS) == "Sender"
    assert (
        root.findtext("sqs:Error/sqs:Code", namespaces=NS)
        == "AWS.SimpleQueueService.NonExistentQueue"
    )
    assert root.findtext("sqs:RequestId", namespaces=NS)
    fields = {"Action": "NoSuchAction", "Version": "2012-11-05"}
    status, _, body = http_get(f"{broker.sqs_endpoint}/?{urlencode(fields)}")
    assert status == 400
    assert ET.fromstring(body).findtext("sqs:Error/sqs:Code", namespaces=NS) == ("InvalidAction")


def test_a_raw_form_post_to_the_queue_path(sqs: Any, broker: BrokerProcess) -> None:
    """The queue named by the path, not by a QueueUrl field (as old SDKs send it)."""
    queue = name("rawpost")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    form = urlencode(
        {
            "Action": "SendMessage",
            "Version": "2012-11-05",
            "MessageBody": TRICKY,
            "MessageAttribute.1.Name": "colour",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "blue <&>",
        }
    ).encode()
    request = urllib.request.Request(
        f"{broker.sqs_endpoint}/{ACCOUNT}/{queue}",
        data=form,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        assert response.status == 200
        root = ET.fromstring(response.read())
    result = root.find("sqs:SendMessageResult", NS)
    assert result is not None
    assert result.findtext("sqs:MD5OfMessageBody", namespaces=NS) == md5(TRICKY)
    colour = {"colour": ATTRIBUTES["colour"]}
    assert result.findtext("sqs:MD5OfMessageAttributes", namespaces=NS) == attributes_md5(colour)
    message_id = result.findtext("sqs:MessageId", namespaces=NS)
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=2)
    assert [(m["MessageId"], m["Body"], m["MessageAttributes"]) for m in got["Messages"]] == [
        (message_id, TRICKY, colour)
    ]
