"""Reading the admin API's requests: path parts, query parameters and JSON bodies, each
checked for type and range before the broker sees it.

Every function here either returns a value of the type its name promises or raises
`ApiError` with a 4xx status and a message naming the field; none lets a client's mistake
reach the broker as an exception it would answer with a 500.

Numbers in a query string or a path are ASCII digits only: ``int()`` also takes "٣",
" 3", "+3" and "1_000", which no client means, and refuses more than 4,300 digits with an
error of its own; so a number is matched first and its digits counted.
"""

from __future__ import annotations

import json
import re

from aiohttp import web

from weirmq.broker.core import Broker
from weirmq.broker.group_service import GroupView
from weirmq.broker.topics import Topic

from .errors import (
    GROUP_ID_NOT_FOUND,
    INVALID_REQUEST,
    MALFORMED_JSON,
    UNAUTHORIZED,
    UNKNOWN_TOPIC_OR_PARTITION,
    ApiError,
)
from .token import AdminToken

BROKER = web.AppKey("broker", Broker)
TOKEN = web.AppKey("admin_token", AdminToken)

DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() also takes "٣", " 3" and "+3"
SIGNED_DIGITS = re.compile(r"-?[0-9]+")
PARTITION_DIGITS_MAX = 10  # more is beyond any partition (int32), and int() refuses 4300
INT64_DIGITS_MAX = 19
INT64_MAX = 2**63 - 1
_FLAGS = {"true": True, "false": False}


def require_token(request: web.Request, what: str) -> None:
    """Refuse (401) a request without the admin token in ``Authorization: Bearer``; the
    message says where the operator finds it, never what it is."""
    token = request.app[TOKEN]
    if token.matches(request.headers.get("Authorization")):
        return
    given = "a wrong token" if "Authorization" in request.headers else "no token"
    raise ApiError(
        401,
        UNAUTHORIZED,
        f"{what} needs the admin token (Authorization: Bearer TOKEN) and the request has "
        f"{given}; the token is in {token.source}",
        headers={"WWW-Authenticate": 'Bearer realm="weirmq admin"'},
    )


def topic_of(request: web.Request) -> Topic:
    """The topic named in the path (``{name}``); 404 when there is none."""
    name = request.match_info["name"]
    topic = request.app[BROKER].topics.get(name)
    if topic is None:
        raise ApiError(404, UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return topic


def group_of(request: web.Request) -> GroupView:
    """The group named in the path (``{group}``); 404 when there is none."""
    group_id = request.match_info["group"]
    view = request.app[BROKER].group_view(group_id)
    if view is None:
        raise ApiError(404, GROUP_ID_NOT_FOUND, f"unknown group {group_id!r}")
    return view


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter, false when absent; only ``true`` and ``false`` (what
    OpenAPI clients send), so a typo is refused rather than read as false."""
    text = request.query.get(name, "false")
    if text not in _FLAGS:
        raise ApiError(400, INVALID_REQUEST, f"{name!r} must be true or false, not {text!r}")
    return _FLAGS[text]


def query_int(
    request: web.Request, name: str, *, minimum: int = 0, maximum: int = INT64_MAX
) -> int | None:
    """An integer query parameter in [minimum, maximum], or None when absent."""
    text = request.query.get(name)
    if text is None:
        return None
    pattern = SIGNED_DIGITS if minimum < 0 else DIGITS
    digits = text.lstrip("-")
    if pattern.fullmatch(text) is None or len(digits) > INT64_DIGITS_MAX:
        raise ApiError(400, INVALID_REQUEST, f"{name!r} must be an integer, not {text!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ApiError(
            400, INVALID_REQUEST, f"{name!r} must be from {minimum} to {maximum}, not {value}"
        )
    return value


def partition_index(topic: Topic, value: int) -> int:
    """`value` as a partition of `topic`; 404 when the topic has no such partition (the
    number itself was a number: its type and sign are the caller's to check)."""
    if not 0 <= value < topic.partitions:
        raise ApiError(
            404,
            UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}, not {value}",
        )
    return value


def check_unicode(text: str) -> None:
    """JSON can carry a lone surrogate ("\\ud800"), which is no character and has no
    UTF-8 form; the broker measures keys and names in UTF-8 bytes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ApiError(
            400, INVALID_REQUEST, "a string holds a lone surrogate (\\ud800 to \\udfff), not text"
        ) from None


async def json_object(request: web.Request, allowed: frozenset[str]) -> dict[str, object]:
    """The body as a JSON object with no fields outside `allowed` (a misspelt field is an
    error, not silently ignored). Raises 413 past the application's body limit (aiohttp
    does)."""
    raw = await request.read()
    if not raw.strip():
        raise ApiError(400, MALFORMED_JSON, "the request needs a JSON object as its body")
    try:
        value = json.loads(raw)
    except RecursionError:  # "[[[[..." a megabyte deep
        raise ApiError(400, MALFORMED_JSON, "the body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for non-UTF text
        raise ApiError(400, MALFORMED_JSON, f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ApiError(400, INVALID_REQUEST, "the body must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ApiError(
            400,
            INVALID_REQUEST,
            f"unknown field(s) {', '.join(map(repr, unknown))}; "
            f"expected {', '.join(map(repr, sorted(allowed)))}",
        )
    return value


def string(body: dict[str, object], key: str) -> str:
    """A required string field, checked to be text (no lone surrogate)."""
    value = body.get(key)
    if not isinstance(value, str):
        raise ApiError(400, INVALID_REQUEST, f"{key!r} is required and must be a string")
    check_unicode(value)
    return value


def optional_int(
    body: dict[str, object], key: str, *, minimum: int = -INT64_MAX - 1, maximum: int = INT64_MAX
) -> int | None:
    """An integer field in [minimum, maximum] (JSON's true is not 1), or None if absent
    (null is refused: a client sending it means something, and the API does not guess)."""
    if key not in body:
        return None
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, INVALID_REQUEST, f"{key!r} must be an integer")
    if not minimum <= value <= maximum:
        raise ApiError(
            400, INVALID_REQUEST, f"{key!r} must be from {minimum} to {maximum}, not {value}"
        )
    return value


def optional_bool(body: dict[str, object], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ApiError(400, INVALID_REQUEST, f"{key!r} must be true or false")
    return value
