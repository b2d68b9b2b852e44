"""AWS Signature Version 4: checking that a request was signed with a known secret key.

Every SQS request, JSON or Query, is signed by the client with SigV4. The client does not
send its secret: it sends an HMAC-SHA256 over a canonical form of the request, under a key
derived from the secret, and names the access key id it used. The server rebuilds the
same canonical form, derives the same key from its copy of the secret, and compares.

    canonical request   METHOD \\n canonical URI \\n canonical query string \\n
                        canonical headers (name:value\\n each) \\n signed header names \\n
                        hex SHA-256 of the payload
    string to sign      AWS4-HMAC-SHA256 \\n 20261126T120000Z \\n
                        20261126/us-east-1/sqs/aws4_request \\n hex SHA-256 of the above
    signing key         HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service),
                        "aws4_request")
    signature           hex HMAC(signing key, string to sign)

The signature travels in one of two places:

- the `Authorization` header (what every SDK sends):
  `AWS4-HMAC-SHA256 Credential=AKID/20261126/us-east-1/sqs/aws4_request,
  SignedHeaders=content-type;host;x-amz-date, Signature=<64 hex>`, with the time in
  `X-Amz-Date` (or, as the specification allows, the `Date` header);
- query parameters, for presigned URLs: `X-Amz-Algorithm`, `X-Amz-Credential`,
  `X-Amz-Date`, `X-Amz-SignedHeaders`, `X-Amz-Signature` and usually `X-Amz-Expires`;
  every query parameter but `X-Amz-Signature` is part of the canonical query string.

Canonical forms, as AWS and botocore build them. The URI is the path as sent (still
percent-encoded), with dot segments and empty segments removed, then percent-encoded once
more: SigV4 encodes paths twice for every service but S3. The query string is every
(name, value) pair percent-encoded (only `A-Za-z0-9-_.~` left as they are), sorted, joined
with `&`. A header value is trimmed, its runs of whitespace made single spaces. The
payload hash is `X-Amz-Content-SHA256` when the client sent it (`UNSIGNED-PAYLOAD`, or the
body's hash, which is then checked against the body) and otherwise the body's hash; a
presigned URL is tried with the body's hash and then with `UNSIGNED-PAYLOAD`, since
botocore signs the (empty) body and S3-style presigners sign neither.

What is refused, and with what SQS answers (its Query error codes, 403 unless said):

    no signature anywhere               MissingAuthenticationToken
    malformed header, parameters, date  IncompleteSignature (400)
    unknown access key                  InvalidClientTokenId
    wrong signature, wrong scope        SignatureDoesNotMatch
    time more than 15 min from now      SignatureDoesNotMatch ("Signature expired: ... is
                                        now earlier than ...", SQS's answer, not
                                        RequestExpired)
    presigned URL past X-Amz-Expires    RequestExpired (400, "Request has expired.")

Session tokens (`X-Amz-Security-Token`) are signed like any header or parameter and
otherwise ignored: WeirMQ has no temporary credentials to check them against.

Sans I/O: the request's parts, the secrets and the time come in; the access key id comes
out. The secret is compared only through `hmac.compare_digest`.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Final
from urllib.parse import quote

from .errors import Fault, SqsError

__all__ = ["verify_sigv4"]

ALGORITHM: Final = "AWS4-HMAC-SHA256"
SERVICE: Final = "sqs"
TERMINATOR: Final = "aws4_request"
UNSIGNED_PAYLOAD: Final = "UNSIGNED-PAYLOAD"

CLOCK_SKEW_MAX_S: Final = 15 * 60
"""How far a request's time may be from ours, either way: AWS's 15 minutes."""

PRESIGNED_EXPIRES_MAX_S: Final = 7 * 24 * 3600
"""The longest X-Amz-Expires AWS accepts: a week."""

AUTHORIZATION_CHARS_MAX: Final = 4096
"""An Authorization header is about 200 characters plus the signed header names."""

SIGNED_HEADERS_MAX: Final = 64
"""Signed header names; SDKs sign fewer than ten."""

_AMZ_DATE_FORMAT: Final = "%Y%m%dT%H%M%SZ"
_AMZ_DATE: Final = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_HEX_SHA256: Final = re.compile(r"[0-9a-fA-F]{64}")
_HEADER_PARTS: Final = ("Credential", "SignedHeaders", "Signature")
_QUERY_PARTS: Final = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)

# Text from the HTTP layer may hold lone surrogates (bytes that were not UTF-8, decoded
# with surrogateescape). Encoding them, rather than failing, makes such a request simply
# not match.
_ERRORS: Final = "surrogatepass"

_MISMATCH: Final = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)


@dataclass(frozen=True, slots=True)
class _Claim:
    """What a request says about its own signature."""

    access_key: str
    scope_date: str
    region: str
    service: str
    terminator: str
    amz_date: str
    signed_headers: tuple[str, ...]
    signature: str
    expires_s: int | None
    """X-Amz-Expires of a presigned URL; None for the header form."""
    presigned: bool


def verify_sigv4(
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    headers: Mapping[str, str],
    body: bytes,
    secrets: Mapping[str, str],
    now_s: float,
    region: str | None = None,
) -> str:
    """The access key id that signed this request, or SqsError saying why none did.

    `path` is the request target's path exactly as received (percent-encoding intact, no
    query); `query` the URL-decoded (name, value) pairs of its query string in order;
    `headers` keyed by lower-case name, repeated headers joined with ","; `secrets` maps
    access key ids to secret keys; `now_s` is the broker's clock in Unix seconds. With
    `region`, a signature scoped to another region is refused; without, any is taken.
    """
    claim = _claim(query, headers)
    _check_scope(claim, region)
    secret = secrets.get(claim.access_key)
    if secret is None:
        raise SqsError(
            Fault.INVALID_CLIENT_TOKEN_ID, "The security token included in the request is invalid."
        )
    _check_time(claim, now_s)
    key = _signing_key(secret, claim)
    canonical_query = _canonical_query(query, claim.presigned)
    for payload_hash in _payload_hashes(claim, headers, body):
        canonical = "\n".join(
            (
                method.upper(),
                _canonical_uri(path),
                canonical_query,
                _canonical_headers(claim.signed_headers, headers),
                ";".join(claim.signed_headers),
                payload_hash,
            )
        )
        expected = _hmac(key, _string_to_sign(claim, canonical)).hex()
        if hmac.compare_digest(expected.encode(), claim.signature.encode("utf-8", _ERRORS)):
            return claim.access_key
    raise SqsError(Fault.SIGNATURE_DOES_NOT_MATCH, _MISMATCH)


# --- What the request claims ----------------------------------------------------------


def _claim(query: Sequence[tuple[str, str]], headers: Mapping[str, str]) -> _Claim:
    authorization = headers.get("authorization")
    presigned = any(name == "X-Amz-Algorithm" for name, _ in query)
    if authorization is not None and presigned:
        raise _incomplete(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter "
            "or the Authorization header should be specified."
        )
    if authorization is not None:
        return _from_header(authorization, headers)
    if presigned:
        return _from_query(query)
    raise SqsError(Fault.MISSING_AUTHENTICATION_TOKEN, "Request is missing Authentication Token")


def _from_header(authorization: str, headers: Mapping[str, str]) -> _Claim:
    if len(authorization) > AUTHORIZATION_CHARS_MAX:
        raise _incomplete(f"The Authorization header is over {AUTHORIZATION_CHARS_MAX} characters.")
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _incomplete(f"Unsupported AWS 'algorithm': '{algorithm[:40]}'; use {ALGORITHM}.")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, equals, value = item.strip().partition("=")
        if not equals or name not in _HEADER_PARTS or name in parts:
            raise _incomplete(f"Authorization header has a malformed part: '{item.strip()[:80]}'.")
        parts[name] = value
    missing = [
        f"Authorization header requires '{p}' parameter." for p in _HEADER_PARTS if p not in parts
    ]
    amz_date = _header_date(headers)
    if amz_date is None:
        missing.append(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
        )
    if missing:
        raise _incomplete(" ".join(missing))
    assert amz_date is not None
    return _claim_of(
        parts["Credential"], amz_date, parts["SignedHeaders"], parts["Signature"], None, False
    )


def _from_query(query: Sequence[tuple[str, str]]) -> _Claim:
    params: dict[str, str] = {}
    for name, value in query:
        if name.startswith("X-Amz-"):
            if name in params:
                raise _incomplete(f"The query parameter {name} is given more than once.")
            params[name] = value
    if any(p not in params for p in _QUERY_PARTS):
        raise _incomplete(
            "AWS query-string parameters must include 'X-Amz-Algorithm', 'X-Amz-Credential', "
            "'X-Amz-Signature', 'X-Amz-Date', 'X-Amz-SignedHeaders'. "
            "Re-examine the query-string parameters."
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise _incomplete(f"X-Amz-Algorithm only supports '{ALGORITHM}'.")
    expires_text = params.get("X-Amz-Expires")
    expires_s = None
    if expires_text is not None:
        if re.fullmatch(r"[0-9]{1,7}", expires_text) is None or not (
            1 <= int(expires_text) <= PRESIGNED_EXPIRES_MAX_S
        ):
            raise _incomplete(
                f"X-Amz-Expires must be a number of seconds from 1 to {PRESIGNED_EXPIRES_MAX_S}."
            )
        expires_s = int(expires_text)
    return _claim_of(
        params["X-Amz-Credential"],
        params["X-Amz-Date"],
        params["X-Amz-SignedHeaders"],
        params["X-Amz-Signature"],
        expires_s,
        True,
    )


def _claim_of(
    credential: str,
    amz_date: str,
    signed_headers: str,
    signature: str,
    expires_s: int | None,
    presigned: bool,
) -> _Claim:
    scope = credential.split("/")
    if len(scope) != 5 or not all(scope):
        raise _incomplete(
            "Credential must have exactly 5 slash-delimited elements, "
            f"e.g. keyid/date/region/service/term, got '{credential[:120]}'."
        )
    if _AMZ_DATE.fullmatch(amz_date) is None:
        raise _incomplete("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\".")
    names = tuple(signed_headers.split(";"))
    if len(names) > SIGNED_HEADERS_MAX or not all(names):
        raise _incomplete(f"SignedHeaders must name 1 to {SIGNED_HEADERS_MAX} headers.")
    if "host" not in names:
        raise _incomplete("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    access_key, scope_date, region, service, terminator = scope
    return _Claim(
        access_key=access_key,
        scope_date=scope_date,
        region=region,
        service=service,
        terminator=terminator,
        amz_date=amz_date,
        signed_headers=names,
        signature=signature,
        expires_s=expires_s,
        presigned=presigned,
    )


def _header_date(headers: Mapping[str, str]) -> str | None:
    """X-Amz-Date, or the Date header (RFC 7231) in X-Amz-Date's form."""
    amz_date = headers.get("x-amz-date")
    if amz_date is not None:
        return amz_date.strip()
    date = headers.get("date")
    if date is None:
        return None
    try:
        parsed = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        raise _incomplete("The Date header is not an HTTP date.") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.astimezone(datetime.UTC).strftime(_AMZ_DATE_FORMAT)


# --- Checks before the signature ------------------------------------------------------


def _check_scope(claim: _Claim, region: str | None) -> None:
    problem = None
    if claim.scope_date != claim.amz_date[:8]:
        problem = (
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{claim.scope_date[:20]}' != '{claim.amz_date[:8]}', "
            f"from '{claim.amz_date}'."
        )
    elif region is not None and claim.region != region:
        problem = f"Credential should be scoped to a valid region, not '{claim.region[:40]}'."
    elif claim.service != SERVICE:
        problem = f"Credential should be scoped to correct service: '{SERVICE}'."
    elif claim.terminator != TERMINATOR:
        problem = (
            f"Credential should be scoped with a valid terminator: '{TERMINATOR}', "
            f"not '{claim.terminator[:40]}'."
        )
    if problem is not None:
        raise SqsError(Fault.SIGNATURE_DOES_NOT_MATCH, problem)


def _check_time(claim: _Claim, now_s: float) -> None:
    signed_s = _unix_s(claim.amz_date)
    if signed_s - now_s > CLOCK_SKEW_MAX_S:
        raise SqsError(
            Fault.SIGNATURE_DOES_NOT_MATCH,
            f"Signature not yet current: {claim.amz_date} is still later than "
            f"{_amz(now_s + CLOCK_SKEW_MAX_S)} ({_amz(now_s)} + 15 min.)",
        )
    if claim.expires_s is not None:
        if now_s > signed_s + claim.expires_s:
            raise SqsError(Fault.REQUEST_EXPIRED, "Request has expired.")
    elif now_s - signed_s > CLOCK_SKEW_MAX_S:
        raise SqsError(
            Fault.SIGNATURE_DOES_NOT_MATCH,
            f"Signature expired: {claim.amz_date} is now earlier than "
            f"{_amz(now_s - CLOCK_SKEW_MAX_S)} ({_amz(now_s)} - 15 min.)",
        )


def _payload_hashes(claim: _Claim, headers: Mapping[str, str], body: bytes) -> tuple[str, ...]:
    """The payload hashes the client may have signed, most likely first."""
    body_hash = hashlib.sha256(body).hexdigest()
    declared = headers.get("x-amz-content-sha256")
    if declared is None:
        return (body_hash, UNSIGNED_PAYLOAD) if claim.presigned else (body_hash,)
    declared = declared.strip()
    if declared == UNSIGNED_PAYLOAD:
        return (declared,)
    if _HEX_SHA256.fullmatch(declared) is None:
        raise _incomplete("x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a SHA-256 hex digest.")
    if declared.lower() != body_hash:
        raise SqsError(
            Fault.SIGNATURE_DOES_NOT_MATCH,
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    return (declared,)


# --- Canonical forms ------------------------------------------------------------------


def _canonical_uri(path: str) -> str:
    return quote(_remove_dot_segments(path), safe="/~", errors=_ERRORS)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986's dot-segment removal, dropping empty segments too (as AWS does)."""
    if not path:
        return "/"
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment and segment != ".":
            segments.append(segment)
    first = "/" if path.startswith("/") else ""
    last = "/" if path.endswith("/") and segments else ""
    return first + "/".join(segments) + last


def _canonical_query(query: Sequence[tuple[str, str]], presigned: bool) -> str:
    pairs = sorted(
        (quote(name, safe="-_.~", errors=_ERRORS), quote(value, safe="-_.~", errors=_ERRORS))
        for name, value in query
        if not (presigned and name == "X-Amz-Signature")
    )
    return "&".join(f"{name}={value}" for name, value in pairs)


def _canonical_headers(names: Sequence[str], headers: Mapping[str, str]) -> str:
    # A signed header that is absent canonicalises as empty, so the signature fails.
    return "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in names)


def _string_to_sign(claim: _Claim, canonical_request: str) -> str:
    scope = f"{claim.scope_date}/{claim.region}/{claim.service}/{claim.terminator}"
    digest = hashlib.sha256(canonical_request.encode("utf-8", _ERRORS)).hexdigest()
    return f"{ALGORITHM}\n{claim.amz_date}\n{scope}\n{digest}"


def _signing_key(secret: str, claim: _Claim) -> bytes:
    key = _hmac(f"AWS4{secret}".encode("utf-8", _ERRORS), claim.scope_date)
    for part in (claim.region, claim.service, claim.terminator):
        key = _hmac(key, part)
    return key


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode("utf-8", _ERRORS), hashlib.sha256).digest()


# --- Small things ---------------------------------------------------------------------


def _unix_s(amz_date: str) -> float:
    try:
        parsed = datetime.datetime.strptime(amz_date, _AMZ_DATE_FORMAT)
    except ValueError:
        raise _incomplete(f"X-Amz-Date {amz_date} is not a valid date.") from None
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def _amz(unix_s: float) -> str:
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).strftime(_AMZ_DATE_FORMAT)


def _incomplete(message: str) -> SqsError:
    return SqsError(Fault.INCOMPLETE_SIGNATURE, message)
