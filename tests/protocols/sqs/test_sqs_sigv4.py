"""SigV4 verification (`weirmq.protocols.sqs.sigv4`) against botocore's own signers.

Every request here is signed by botocore (`SigV4Auth`, the header form every SDK sends,
and `SigV4QueryAuth`, presigned URLs), then taken apart as the HTTP layer sees it: the
raw path, the URL-decoded query pairs, lower-case headers with the Host the HTTP client
adds, the body bytes. botocore's clock is pinned so the tests can step ours around it.
"""

from __future__ import annotations

import datetime
import json
from typing import Any
from unittest import mock
from urllib.parse import parse_qsl, urlsplit

import botocore.auth
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode_sequence
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.protocols.sqs.errors import Fault, SqsError
from weirmq.protocols.sqs.sigv4 import CLOCK_SKEW_MAX_S, verify_sigv4

ENDPOINT = "https://sqs.us-east-1.amazonaws.com"
QUEUE_PATH = "/000000000000/orders"
ACCESS_KEY = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SECRETS = {ACCESS_KEY: SECRET}
SIGNED_AT = datetime.datetime(2026, 11, 26, 12, 0, 0)  # UTC, naive as botocore's clock is
NOW_S = SIGNED_AT.replace(tzinfo=datetime.UTC).timestamp()

MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)


def json_request(body: dict[str, Any] | None = None) -> AWSRequest:
    """A SendMessage as botocore sends it today: the JSON protocol."""
    payload = body or {"QueueUrl": ENDPOINT + QUEUE_PATH, "MessageBody": "hello"}
    return AWSRequest(
        method="POST",
        url=ENDPOINT + "/",
        data=json.dumps(payload).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS.SendMessage",
        },
    )


def query_post(**params: str) -> AWSRequest:
    """A Query SendMessage, form-encoded, to the queue's URL (as boto 2 and others do)."""
    fields = {"Action": "SendMessage", "Version": "2012-11-05", "MessageBody": "hi there"}
    return AWSRequest(
        method="POST",
        url=ENDPOINT + QUEUE_PATH,
        data={**fields, **params},
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )


def query_get(params: list[tuple[str, str]] | None = None, path: str = QUEUE_PATH) -> AWSRequest:
    """A Query ReceiveMessage with its fields in the query string."""
    fields = params or [
        ("Action", "ReceiveMessage"),
        ("MaxNumberOfMessages", "10"),
        ("AttributeName.1", "All"),
        ("MessageAttributeName.1", "héllo wörld ~*+&="),
    ]
    return AWSRequest(method="GET", url=f"{ENDPOINT}{path}?{percent_encode_sequence(fields)}")


def sign(
    request: AWSRequest,
    at: datetime.datetime = SIGNED_AT,
    secret: str = SECRET,
    service: str = "sqs",
    presign_expires_s: int | None = None,
) -> AWSRequest:
    credentials = Credentials(ACCESS_KEY, secret)
    if presign_expires_s is None:
        signer: SigV4Auth = SigV4Auth(credentials, service, "us-east-1")
    else:
        signer = SigV4QueryAuth(credentials, service, "us-east-1", expires=presign_expires_s)
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=at):
        signer.add_auth(request)
    return request


def wire(request: AWSRequest) -> dict[str, Any]:
    """The request as the HTTP layer hands it to verify_sigv4."""
    prepared = request.prepare()
    url = urlsplit(prepared.url)
    headers = {name.lower(): value for name, value in prepared.headers.items()}
    headers.setdefault("host", url.netloc)  # the HTTP client adds it; botocore signs it
    body = prepared.body or b""
    return {
        "method": prepared.method,
        "path": url.path,
        "query": parse_qsl(url.query, keep_blank_values=True),
        "headers": headers,
        "body": body.encode() if isinstance(body, str) else body,
    }


def verify(request: dict[str, Any], **overrides: Any) -> str:
    arguments = {"secrets": SECRETS, "now_s": NOW_S, "region": "us-east-1", **request}
    return verify_sigv4(**{**arguments, **overrides})


def refused(request: dict[str, Any], **overrides: Any) -> SqsError:
    with pytest.raises(SqsError) as caught:
        verify(request, **overrides)
    return caught.value


# --- Accepted -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [json_request(), query_post(), query_get(), query_get(path="/000000000000/a%20b/./c//d")],
    ids=["json-post", "query-post", "query-get", "odd-path"],
)
def test_botocore_signed_requests_are_accepted(request_: AWSRequest) -> None:
    request = wire(sign(request_))
    assert request["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert verify(request) == ACCESS_KEY
    assert verify(request, region=None) == ACCESS_KEY


def test_the_date_header_instead_of_x_amz_date() -> None:
    request = json_request()
    request.headers["Date"] = "placeholder: botocore rewrites it"
    request = wire(sign(request))
    assert "x-amz-date" not in request["headers"]
    assert verify(request) == ACCESS_KEY


def test_headers_nobody_signed_may_change() -> None:
    request = wire(sign(json_request()))
    request["headers"]["x-forwarded-for"] = "10.0.0.1"
    request["headers"]["user-agent"] = "something else"
    assert verify(request) == ACCESS_KEY


def test_an_unsigned_payload() -> None:
    request = json_request()
    request.context["payload_signing_enabled"] = False  # what botocore does over HTTPS
    request = wire(sign(request))
    assert request["headers"]["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert verify(request) == ACCESS_KEY
    # The signature then covers no body: TLS is what protects it.
    assert verify({**request, "body": b"{}"}) == ACCESS_KEY


def test_a_declared_payload_hash_must_be_the_bodys() -> None:
    request = json_request()
    request.headers["X-Amz-Content-SHA256"] = "0" * 64
    error = refused(wire(sign(request)))
    assert error.fault is Fault.SIGNATURE_DOES_NOT_MATCH
    assert "x-amz-content-sha256" in error.message


@pytest.mark.parametrize("request_", [query_get(), query_post()], ids=["get", "post"])
def test_presigned_urls(request_: AWSRequest) -> None:
    request = wire(sign(request_, presign_expires_s=300))
    assert "authorization" not in request["headers"]
    assert dict(request["query"])["X-Amz-Expires"] == "300"
    assert verify(request) == ACCESS_KEY
    assert verify(request, now_s=NOW_S + 300) == ACCESS_KEY
    expired = refused(request, now_s=NOW_S + 301)
    assert (expired.fault, expired.message) == (Fault.REQUEST_EXPIRED, "Request has expired.")
    tampered = [
        (name, "0" * 64 if name == "X-Amz-Signature" else value) for name, value in request["query"]
    ]
    assert refused({**request, "query": tampered}).fault is Fault.SIGNATURE_DOES_NOT_MATCH
    unsigned = [(name, value) for name, value in request["query"] if name != "X-Amz-Signature"]
    assert refused({**request, "query": unsigned}).fault is Fault.INCOMPLETE_SIGNATURE
    both = {**request, "headers": {**request["headers"], "authorization": "AWS4-HMAC-SHA256 x"}}
    assert refused(both).fault is Fault.INCOMPLETE_SIGNATURE


def test_presigned_payloads() -> None:
    # botocore signs the body's hash (empty here): a body added later does not pass.
    request = wire(sign(query_get(), presign_expires_s=60))
    assert refused({**request, "body": b"extra"}).message == MISMATCH
    # S3-style presigners sign UNSIGNED-PAYLOAD, and say so nowhere in the request.
    unsigned = query_get()
    unsigned.context["payload_signing_enabled"] = False
    request = wire(sign(unsigned, presign_expires_s=60))
    assert verify(request) == ACCESS_KEY
    assert verify({**request, "body": b"extra"}) == ACCESS_KEY


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1), st.text()), max_size=6),
    st.binary(max_size=200),
    st.integers(-CLOCK_SKEW_MAX_S, CLOCK_SKEW_MAX_S),
)
def test_any_signed_request(query: list[tuple[str, str]], body: bytes, skew_s: int) -> None:
    # Names of the presigned form would make it a presigned URL.
    query = [(name, value) for name, value in query if not name.startswith("X-Amz-")]
    request = AWSRequest(
        method="POST",
        url=f"{ENDPOINT}{QUEUE_PATH}?{percent_encode_sequence(query)}" if query else ENDPOINT,
        data=body,
        headers={"Content-Type": "application/octet-stream"},
    )
    signed = wire(sign(request))
    assert verify(signed, now_s=NOW_S + skew_s) == ACCESS_KEY
    if body:
        flipped = bytes([body[0] ^ 1]) + body[1:]
        assert refused({**signed, "body": flipped}).fault is Fault.SIGNATURE_DOES_NOT_MATCH


# --- Refused --------------------------------------------------------------------------


def test_a_tampered_body() -> None:
    request = wire(sign(json_request()))
    error = refused({**request, "body": request["body"].replace(b"hello", b"hellO")})
    assert (error.fault, error.message) == (Fault.SIGNATURE_DOES_NOT_MATCH, MISMATCH)


def test_tampered_path_query_method_and_signed_headers() -> None:
    request = wire(sign(query_get()))
    assert refused({**request, "path": "/000000000000/other"}).message == MISMATCH
    query = [*request["query"], ("WaitTimeSeconds", "20")]
    assert refused({**request, "query": query}).message == MISMATCH
    assert refused({**request, "method": "POST"}).message == MISMATCH
    headers = {**request["headers"], "host": "elsewhere.example"}
    assert refused({**request, "headers": headers}).message == MISMATCH
    json_signed = wire(sign(json_request()))
    headers = {**json_signed["headers"], "x-amz-target": "AmazonSQS.DeleteQueue"}
    assert refused({**json_signed, "headers": headers}).message == MISMATCH


def test_text_that_was_not_utf8() -> None:
    # Bytes that were not UTF-8 reach us as lone surrogates (surrogateescape): no crash.
    request = wire(sign(json_request()))
    headers = {**request["headers"], "x-amz-target": "AmazonSQS.\udcff"}
    assert refused({**request, "headers": headers}).message == MISMATCH
    auth = request["headers"]["authorization"]
    bad_signature = replace_authorization(request, auth[:-4] + "\udcff\ud800é")
    assert refused(bad_signature).message == MISMATCH
    assert refused({**request, "path": "/\udcff", "query": [("\ud800", "é")]}).message == MISMATCH


def test_a_wrong_secret() -> None:
    error = refused(wire(sign(json_request(), secret="not the secret")))
    assert (error.fault, error.message) == (Fault.SIGNATURE_DOES_NOT_MATCH, MISMATCH)


def test_an_unknown_access_key() -> None:
    error = refused(wire(sign(json_request())), secrets={"AKIDOTHER": SECRET})
    assert error.fault is Fault.INVALID_CLIENT_TOKEN_ID
    assert error.message == "The security token included in the request is invalid."


def test_no_signature() -> None:
    request = wire(json_request())
    error = refused(request)
    assert error.fault is Fault.MISSING_AUTHENTICATION_TOKEN


def replace_authorization(request: dict[str, Any], authorization: str) -> dict[str, Any]:
    return {**request, "headers": {**request["headers"], "authorization": authorization}}


@pytest.mark.parametrize(
    "mangle",
    [
        lambda auth: "",
        lambda auth: "AWS AKIDEXAMPLE:c2lnbmF0dXJl",  # Signature Version 2
        lambda auth: auth.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"),
        lambda auth: auth.split(",")[0],
        lambda auth: auth.replace("Signature=", "Sig="),
        lambda auth: auth + ", Signature=" + "0" * 64,
        lambda auth: auth.replace("Credential=AKIDEXAMPLE/", "Credential="),
        lambda auth: auth.replace("SignedHeaders=", "SignedHeaders=;"),
        lambda auth: auth.replace("SignedHeaders=content-type;host;", "SignedHeaders="),
        lambda auth: auth + " " * 5000,
    ],
    ids=[
        "empty", "sigv2", "sigv4a", "credential-only", "misnamed", "repeated",
        "four-part-scope", "empty-header-name", "host-unsigned", "too-long",
    ],
)  # fmt: skip
def test_malformed_authorization(mangle: Any) -> None:
    request = wire(sign(json_request()))
    error = refused(replace_authorization(request, mangle(request["headers"]["authorization"])))
    assert error.fault is Fault.INCOMPLETE_SIGNATURE, error.message


@pytest.mark.parametrize(
    "date", [None, "20261126", "2026-11-26T12:00:00Z", "20261399T120000Z", "20261126T256000Z"]
)
def test_malformed_or_missing_date(date: str | None) -> None:
    request = wire(sign(json_request()))
    headers = {name: value for name, value in request["headers"].items() if name != "x-amz-date"}
    if date is not None:
        headers["x-amz-date"] = date
    error = refused({**request, "headers": headers})
    assert error.fault in (Fault.INCOMPLETE_SIGNATURE, Fault.SIGNATURE_DOES_NOT_MATCH)
    if date is None:
        assert "'X-Amz-Date' or a 'Date' header" in error.message


def test_an_old_or_future_date() -> None:
    request = wire(sign(json_request()))
    assert verify(request, now_s=NOW_S + CLOCK_SKEW_MAX_S) == ACCESS_KEY
    assert verify(request, now_s=NOW_S - CLOCK_SKEW_MAX_S) == ACCESS_KEY
    old = refused(request, now_s=NOW_S + CLOCK_SKEW_MAX_S + 60)
    assert old.fault is Fault.SIGNATURE_DOES_NOT_MATCH
    assert old.message == (
        "Signature expired: 20261126T120000Z is now earlier than 20261126T120100Z "
        "(20261126T121600Z - 15 min.)"
    )
    future = refused(request, now_s=NOW_S - CLOCK_SKEW_MAX_S - 60)
    assert future.fault is Fault.SIGNATURE_DOES_NOT_MATCH
    assert future.message.startswith("Signature not yet current: 20261126T120000Z")


def test_the_scope() -> None:
    request = wire(sign(json_request()))
    error = refused(request, region="eu-west-1")
    assert error.fault is Fault.SIGNATURE_DOES_NOT_MATCH
    assert error.message == "Credential should be scoped to a valid region, not 'us-east-1'."
    error = refused(wire(sign(json_request(), service="sns")))
    assert error.message == "Credential should be scoped to correct service: 'sqs'."
    auth = request["headers"]["authorization"]
    error = refused(replace_authorization(request, auth.replace("/20261126/", "/20261125/")))
    assert error.message.startswith("Date in Credential scope does not match")
    error = refused(replace_authorization(request, auth.replace("aws4_request", "aws5_request")))
    assert error.message.startswith("Credential should be scoped with a valid terminator")
