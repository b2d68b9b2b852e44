"""How the admin API says no: one JSON error shape, and the HTTP status of each failure.

Every failure, whatever raised it, leaves as ``{"error": {"code": ..., "message": ...}}``
with a 4xx status when the request was at fault:

- `ApiError`: raised by the handlers for requests they refuse (a body that is not JSON, a
  field of the wrong type); ``code`` is one of the upper-case names below.
- The broker's operational errors (`weirmq.wire.errors.KafkaError` subclasses) carry a Kafka
  error code; the code's name (``TOPIC_ALREADY_EXISTS``) becomes ``code`` and the status
  comes from `_STATUS_BY_KAFKA_CODE`. A Kafka code missing there is the broker's trouble,
  not the request's, so it is a 500.

This package may import only `weirmq.broker` (tests/test_import_rules.py), not
`weirmq.wire`, so a Kafka error is recognised by what it carries: a `code` that is kio's
`ErrorCode`, the enum `weirmq.wire.errors` itself is built on.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from kio.schema.errors import ErrorCode

# The codes of errors the admin API raises itself (Kafka's codes come from ErrorCode).
MALFORMED_JSON = "MALFORMED_JSON"
INVALID_REQUEST = "INVALID_REQUEST"
INTERNAL_ERROR = "INTERNAL_ERROR"
# Exchanges: a declaration that differs from the exchange declared (409), a delete with
# if_unused of an exchange bindings leave (409), an unbind of no binding (404). Named after
# the routing errors they stand for; Kafka has no code for them.
EXCHANGE_CONFLICT = "EXCHANGE_CONFLICT"
EXCHANGE_IN_USE = "EXCHANGE_IN_USE"
BINDING_NOT_FOUND = "BINDING_NOT_FOUND"
# Who may ask (see "Security" in docs/admin-api.md): a request naming a host that is not
# this API's (421: what a DNS-rebinding page sends), one from another web page's origin
# that would change something (403), a body that is not declared as JSON (415: what an
# HTML form or a "simple" cross-origin fetch sends).
HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"
ORIGIN_NOT_ALLOWED = "ORIGIN_NOT_ALLOWED"
UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
# The token (weirmq.admin.token): missing or wrong on a request that needs it (401).
UNAUTHORIZED = "UNAUTHORIZED"
# A reset of a group's offsets while it has members (409): they would overwrite it.
GROUP_NOT_EMPTY = ErrorCode.non_empty_group.name.upper()
# A publish the broker holds back (flow control: 429) or cannot store now (disk: 503).
THROTTLED = "THROTTLED"
# A trim past the log end (400), as DeleteRecords answers it.
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range.name.upper()
# Kafka's names, for the refusals the admin API makes itself before asking the broker.
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition.name.upper()
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found.name.upper()
TOPIC_ALREADY_EXISTS = ErrorCode.topic_already_exists.name.upper()

_STATUS_BY_KAFKA_CODE: dict[ErrorCode, int] = {
    ErrorCode.unknown_topic_or_partition: 404,
    ErrorCode.unknown_topic_id: 404,
    ErrorCode.topic_already_exists: 409,
    ErrorCode.invalid_topic_exception: 400,
    ErrorCode.invalid_partitions: 400,
    ErrorCode.invalid_replication_factor: 400,
    ErrorCode.invalid_config: 400,
    ErrorCode.invalid_request: 400,
    ErrorCode.policy_violation: 400,
    # Every routing error (weirmq.routing.errors) carries one of the codes above, or this
    # one for a record refused (unroutable under `reject`, a routing key too long).
    ErrorCode.invalid_record: 400,
    ErrorCode.group_id_not_found: 404,
    ErrorCode.non_empty_group: 409,
    # Writes of the message browser, the redrive and the offsets reset.
    ErrorCode.offset_out_of_range: 400,
    ErrorCode.message_too_large: 413,
    ErrorCode.record_list_too_large: 413,
    ErrorCode.corrupt_message: 400,
    ErrorCode.unknown_member_id: 409,
    ErrorCode.rebalance_in_progress: 409,
    ErrorCode.illegal_generation: 409,
    ErrorCode.kafka_storage_error: 503,
    ErrorCode.coordinator_not_available: 503,
    ErrorCode.coordinator_load_in_progress: 503,
    ErrorCode.request_timed_out: 503,
}

# aiohttp's own refusals (no route, wrong method, body too large), under names that read
# like the rest; other statuses use the standard phrase in upper case.
_CODE_BY_HTTP_STATUS: dict[int, str] = {
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
}


class ApiError(Exception):
    """A request the admin API refuses: its HTTP status, error code and message."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        assert 400 <= status <= 599, status
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        """Sent with the error (``WWW-Authenticate`` on a 401, ``Retry-After``)."""

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        return error_response(self.status, self.code, self.message, headers or self.headers)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    """The one error shape of the admin API."""
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def from_kafka_error(exc: BaseException) -> ApiError | None:
    """The HTTP answer to a broker error carrying a Kafka code, or None for anything else."""
    code = getattr(exc, "code", None)
    if not isinstance(code, ErrorCode):
        return None
    status = _STATUS_BY_KAFKA_CODE.get(code, 500)
    return ApiError(status, code.name.upper(), str(exc) or code.name)


def from_http_exception(exc: web.HTTPException) -> web.Response:
    """aiohttp's own refusal (no such route, wrong method, too large) in our JSON shape."""
    code = _CODE_BY_HTTP_STATUS.get(exc.status) or _status_name(exc.status)
    # Allow (on a 405) tells the client what would have worked; keep it.
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    return error_response(exc.status, code, _message_for(exc), headers)


def _status_name(status: int) -> str:
    try:
        return HTTPStatus(status).name
    except ValueError:
        return f"HTTP_{status}"


def _message_for(exc: web.HTTPException) -> str:
    if exc.status == 404:
        return "no such endpoint; the API is described at /openapi.json"
    if exc.status == 405:
        return f"method not allowed here; allowed: {exc.headers.get('Allow', 'none')}"
    # aiohttp's text says what was wrong ("Maximum request body size 1048576 exceeded, ...").
    return exc.text or exc.reason
