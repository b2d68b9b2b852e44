"""SigV4 signatures on WeirMQ's SQS API (`weirmq serve`), as real clients sign them.

With ``sqs_access_keys`` set (``WEIRMQ_SQS_ACCESS_KEYS=KEY:SECRET,...``, as `broker_factory`
passes settings) every request must be signed with one of those keys, and what SQS
answers otherwise is what clients get: SignatureDoesNotMatch for a wrong secret,
InvalidClientTokenId for a key nobody configured, MissingAuthenticationToken for an
unsigned request, all HTTP 403. Signed by boto3 (JSON protocol), by botocore on the Query
protocol (a header, and a presigned URL fetched with urllib), and by kombu's
asynchronous SQS client in a Celery worker, which signs its requests itself.

Without keys, signatures are not checked (as with local SQS emulators) and the access
key a request names is the sender's id: the SenderId attribute of what it sent.

The secrets have '/' and '+' in them, as AWS's do. Waits are bounded (long polls of a
couple of seconds, HTTP timeouts, the worker's start and results).
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock
from urllib.parse import urlencode

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.config
import botocore.credentials
import botocore.exceptions
import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu import Connection
from sqs_celery_app import ADD, Worker, broker_url, make_app, transport_options
from test_sqs_query_protocol import query_client

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

KEY = "AKIDWEIRMQ1"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
OTHER_KEY = "AKIDWEIRMQ2"
OTHER_SECRET = "second/secret+key"
XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
NS = {"sqs": XMLNS}
HTTP_TIMEOUT_S = 10.0
RESULT_TIMEOUT_S = 20.0


@pytest.fixture
def keyed(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker that checks signatures against two keys."""
    return broker_factory(sqs_access_keys=f"{KEY}:{SECRET},{OTHER_KEY}:{OTHER_SECRET}")


def client(endpoint: str, key: str, secret: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def refused(call: Any) -> dict[str, Any]:
    """The error response of a call that must fail."""
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call()
    return dict(raised.value.response)


def sender_of(sqs: Any, url: str) -> str:
    messages = sqs.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["SenderId"], WaitTimeSeconds=2
    )["Messages"]
    assert len(messages) == 1
    sqs.delete_message(QueueUrl=url, ReceiptHandle=messages[0]["ReceiptHandle"])
    return str(messages[0]["Attributes"]["SenderId"])


def http(request: urllib.request.Request | str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body); an error status is an answer too."""
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def post(url: str) -> urllib.request.Request:
    return urllib.request.Request(url, data=b"", method="POST")


# --- keys configured ---------------------------------------------------------------------


def test_each_configured_key_works_and_is_the_sender(keyed: BrokerProcess) -> None:
    first = client(keyed.sqs_endpoint, KEY, SECRET)
    second = client(keyed.sqs_endpoint, OTHER_KEY, OTHER_SECRET)
    url = first.create_queue(QueueName=name("auth"))["QueueUrl"]
    first.send_message(QueueUrl=url, MessageBody="from the first key")
    assert sender_of(second, url) == KEY
    second.send_message(QueueUrl=url, MessageBody="from the second key")
    assert sender_of(first, url) == OTHER_KEY


def test_a_wrong_secret_does_not_match(keyed: BrokerProcess) -> None:
    wrong = client(keyed.sqs_endpoint, KEY, SECRET + "x")
    response = refused(wrong.list_queues)
    assert response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # Refused before anything is done: the queue is not made.
    queue = name("never")
    assert refused(lambda: wrong.create_queue(QueueName=queue))["Error"]["Code"] == (
        "SignatureDoesNotMatch"
    )
    right = client(keyed.sqs_endpoint, KEY, SECRET)
    assert "QueueUrls" not in right.list_queues(QueueNamePrefix=queue)


def test_an_unknown_key_is_an_invalid_token(keyed: BrokerProcess) -> None:
    unknown = client(keyed.sqs_endpoint, "AKIDNOBODY", SECRET)
    response = refused(unknown.list_queues)
    assert response["Error"]["Code"] == "InvalidClientTokenId"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_signature_from_twenty_minutes_ago_has_expired(keyed: BrokerProcess) -> None:
    """botocore's signer with its clock set back past SQS's 15 minutes of allowed skew."""
    earlier = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=20)
    with mock.patch("botocore.auth.get_current_datetime", return_value=earlier):
        response = refused(client(keyed.sqs_endpoint, KEY, SECRET).list_queues)
    assert response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert "Signature expired" in response["Error"]["Message"]
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_an_unsigned_json_request_is_missing_its_token(keyed: BrokerProcess) -> None:
    request = urllib.request.Request(
        keyed.sqs_endpoint + "/",
        data=b"{}",
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS.ListQueues",
        },
        method="POST",
    )
    status, headers, body = http(request)
    assert status == 403
    assert headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"
    assert json.loads(body)["__type"] == "com.amazonaws.sqs#MissingAuthenticationToken"


def test_an_unsigned_query_get_is_missing_its_token(keyed: BrokerProcess) -> None:
    fields = urlencode({"Action": "ListQueues", "Version": "2012-11-05"})
    status, _, body = http(f"{keyed.sqs_endpoint}/?{fields}")
    assert status == 403
    root = ET.fromstring(body)
    assert root.findtext("sqs:Error/sqs:Code", namespaces=NS) == "MissingAuthenticationToken"


def test_a_signed_request_altered_on_the_way_does_not_match(keyed: BrokerProcess) -> None:
    """Signed by botocore's SigV4 signer, then its body changed."""
    body = json.dumps({"QueueNamePrefix": "a"}).encode()
    request = botocore.awsrequest.AWSRequest(
        method="POST",
        url=keyed.sqs_endpoint + "/",
        data=body,
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS.ListQueues",
        },
    )
    credentials = botocore.credentials.Credentials(KEY, SECRET)
    botocore.auth.SigV4Auth(credentials, "sqs", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    signed = urllib.request.Request(request.url, data=body, headers=headers, method="POST")
    status, _, answer = http(signed)
    assert status == 200, answer
    altered = urllib.request.Request(
        request.url, data=body.replace(b'"a"', b'"b"'), headers=headers, method="POST"
    )
    status, headers_back, _ = http(altered)
    assert status == 403
    assert headers_back["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"


def test_query_clients_and_presigned_urls(keyed: BrokerProcess, tmp_path: Path) -> None:
    query = query_client(tmp_path, keyed.sqs_endpoint, KEY, SECRET)
    queue = name("qauth")
    url = query.create_queue(QueueName=queue)["QueueUrl"]
    query.send_message(QueueUrl=url, MessageBody="over query")
    assert sender_of(query, url) == KEY
    wrong = query_client(tmp_path, keyed.sqs_endpoint, KEY, "not-the-secret")
    response = refused(wrong.list_queues)
    assert response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # A presigned URL: the signature in the query string, sent by a plain HTTP client.
    # botocore signs it for the model's method, POST (as AWS checks it, a GET would not
    # match), with an empty body.
    presigned = query.generate_presigned_url(
        "list_queues", Params={"QueueNamePrefix": queue}, ExpiresIn=60
    )
    status, _, body = http(post(presigned))
    assert status == 200, body
    root = ET.fromstring(body)
    assert [e.text for e in root.findall("sqs:ListQueuesResult/sqs:QueueUrl", NS)] == [url]
    tampered = presigned.replace(f"QueueNamePrefix={queue}", "QueueNamePrefix=q")
    for wrong_request in (post(tampered), presigned):  # a parameter changed; a GET
        status, _, body = http(wrong_request)
        assert status == 403
        assert ET.fromstring(body).findtext("sqs:Error/sqs:Code", namespaces=NS) == (
            "SignatureDoesNotMatch"
        )
    expiring = query.generate_presigned_url("list_queues", ExpiresIn=1)
    time.sleep(2.0)
    status, _, body = http(post(expiring))
    assert status == 400
    assert ET.fromstring(body).findtext("sqs:Error/sqs:Code", namespaces=NS) == ("RequestExpired")


def test_kombu_signs_with_the_url_credentials(keyed: BrokerProcess) -> None:
    prefix = f"k{uuid.uuid4().hex[:8]}-"
    url = broker_url(keyed.sqs_endpoint, KEY, SECRET)
    with Connection(url, transport_options=transport_options(prefix)) as connection:
        simple = connection.SimpleQueue("signed")
        try:
            simple.put({"signed": True})
            message = simple.get(timeout=10)
            assert message.payload == {"signed": True}
            message.ack()
        finally:
            simple.close()
    wrong = broker_url(keyed.sqs_endpoint, KEY, OTHER_SECRET)
    with Connection(wrong, transport_options=transport_options(prefix)) as connection:
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            connection.SimpleQueue("signed").put({"signed": False})
        assert raised.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_a_celery_worker_signs_its_own_requests(keyed: BrokerProcess, tmp_path: Path) -> None:
    """The worker receives and deletes through kombu's asynchronous client (botocore's
    signer, pycurl); a signature of its that did not verify would leave the task unrun."""
    prefix = f"c{uuid.uuid4().hex[:8]}-"
    url = broker_url(keyed.sqs_endpoint, OTHER_KEY, OTHER_SECRET)
    results = tmp_path / "results"
    results.mkdir()
    app = make_app(url, results, prefix)
    worker = Worker(url, results, prefix, tmp_path / "worker.log")
    try:
        worker.wait_ready()
        sent = [app.tasks[ADD].delay(n, 1) for n in range(3)]
        try:
            assert [r.get(timeout=RESULT_TIMEOUT_S) for r in sent] == [1, 2, 3]
        except CeleryTimeoutError:
            worker.check_running()
            raise AssertionError(f"no results; the worker's log:\n{worker.log_tail()}") from None
        log = worker.log_tail()
        assert "ERROR" not in log and "Traceback" not in log, log
    finally:
        worker.stop()
        app.close()


# --- no keys -----------------------------------------------------------------------------


def test_without_keys_any_credentials_work_and_name_the_sender(broker: BrokerProcess) -> None:
    first = client(broker.sqs_endpoint, "AKIDANYONE", "whatever")
    second = client(broker.sqs_endpoint, "AKIDSOMEONEELSE", "anything else")
    url = first.create_queue(QueueName=name("open"))["QueueUrl"]
    first.send_message(QueueUrl=url, MessageBody="one")
    assert sender_of(second, url) == "AKIDANYONE"
    second.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "two"}])
    assert sender_of(first, url) == "AKIDSOMEONEELSE"
    fields = urlencode({"Action": "ListQueues", "Version": "2012-11-05"})
    status, _, body = http(f"{broker.sqs_endpoint}/?{fields}")  # unsigned, and fine
    assert status == 200, body
    assert url in [e.text for e in ET.fromstring(body).iter(f"{{{XMLNS}}}QueueUrl")]
