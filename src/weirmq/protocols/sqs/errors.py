"""SQS's errors, and the one exception that carries them.

SQS names each error twice. The JSON protocol (what botocore speaks since 2023) answers
`{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": ...}` with the header
`x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender`; botocore reads the
header (SQS's `awsQueryCompatible` trait) and raises the *legacy* code, the one the Query
protocol (form posts, XML) has always answered with and the one applications catch
(`e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"`). So each
`Fault` below is (JSON type, legacy code, HTTP status, the sender's fault or ours), taken
from the SQS API reference; a handler raises `SqsError(Fault.X, "what was wrong")` and the
HTTP layer writes it in the protocol the request came in.

Throttling is `RequestThrottled`: botocore's retry handlers (legacy and standard modes)
count it as a throttling error and retry with backoff, which is how back-pressure slows an
SQS producer.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class _Fault(NamedTuple):
    json_type: str
    legacy_code: str
    status: int
    sender: bool


class Fault(_Fault, enum.Enum):
    """Every error WeirMQ's SQS API answers with: (JSON type, legacy code, status, sender)."""

    # Request-level, any action.
    MISSING_PARAMETER = ("MissingParameter", "MissingParameter", 400, True)
    INVALID_PARAMETER_VALUE = ("InvalidParameterValue", "InvalidParameterValue", 400, True)
    INVALID_PARAMETER_COMBINATION = (
        "InvalidParameterCombination", "InvalidParameterCombination", 400, True
    )  # fmt: skip
    INVALID_ACTION = ("InvalidAction", "InvalidAction", 400, True)
    UNKNOWN_OPERATION = ("UnknownOperationException", "InvalidAction", 400, True)
    SERIALIZATION = ("SerializationException", "MalformedQueryString", 400, True)
    INVALID_ADDRESS = ("InvalidAddress", "InvalidAddress", 404, True)
    INVALID_SECURITY = ("InvalidSecurity", "InvalidSecurity", 403, True)
    ACCESS_DENIED = ("AccessDenied", "AccessDenied", 403, True)
    INVALID_CLIENT_TOKEN_ID = ("InvalidClientTokenId", "InvalidClientTokenId", 403, True)
    SIGNATURE_DOES_NOT_MATCH = ("SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, True)
    INCOMPLETE_SIGNATURE = ("IncompleteSignature", "IncompleteSignature", 400, True)
    MISSING_AUTHENTICATION_TOKEN = (
        "MissingAuthenticationToken", "MissingAuthenticationToken", 403, True
    )  # fmt: skip
    REQUEST_EXPIRED = ("RequestExpired", "RequestExpired", 400, True)
    REQUEST_TOO_LARGE = ("RequestEntityTooLarge", "RequestEntityTooLarge", 413, True)
    THROTTLED = ("RequestThrottled", "RequestThrottled", 400, True)
    OVER_LIMIT = ("OverLimit", "OverLimit", 403, True)
    INTERNAL = ("InternalError", "InternalError", 500, False)
    SERVICE_UNAVAILABLE = ("ServiceUnavailable", "ServiceUnavailable", 503, False)
    # Queues.
    QUEUE_DOES_NOT_EXIST = (
        "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400, True
    )  # fmt: skip
    QUEUE_NAME_EXISTS = ("QueueNameExists", "QueueAlreadyExists", 400, True)
    QUEUE_DELETED_RECENTLY = (
        "QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently", 400, True
    )  # fmt: skip
    PURGE_IN_PROGRESS = (
        "PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403, True
    )  # fmt: skip
    INVALID_ATTRIBUTE_NAME = ("InvalidAttributeName", "InvalidAttributeName", 400, True)
    INVALID_ATTRIBUTE_VALUE = ("InvalidAttributeValue", "InvalidAttributeValue", 400, True)
    UNSUPPORTED_OPERATION = (
        "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400, True
    )  # fmt: skip
    # Messages.
    INVALID_MESSAGE_CONTENTS = ("InvalidMessageContents", "InvalidMessageContents", 400, True)
    RECEIPT_HANDLE_IS_INVALID = ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404, True)
    INVALID_ID_FORMAT = ("InvalidIdFormat", "InvalidIdFormat", 400, True)
    MESSAGE_NOT_INFLIGHT = (
        "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400, True
    )  # fmt: skip
    # Batches.
    EMPTY_BATCH = ("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, True)
    TOO_MANY_ENTRIES = (
        "TooManyEntriesInBatchRequest",
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        400,
        True,
    )
    BATCH_IDS_NOT_DISTINCT = (
        "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, True
    )  # fmt: skip
    BATCH_TOO_LONG = (
        "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400, True
    )  # fmt: skip
    INVALID_BATCH_ENTRY_ID = (
        "InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400, True
    )  # fmt: skip
    # Message move tasks, tags.
    RESOURCE_NOT_FOUND = ("ResourceNotFoundException", "ResourceNotFoundException", 404, True)


class SqsError(Exception):
    """An SQS error answer: `fault` says which, `message` says why, for a person."""

    def __init__(self, fault: Fault, message: str) -> None:
        super().__init__(message)
        self.fault = fault
        self.message = message

    def __repr__(self) -> str:
        return f"SqsError({self.fault.name}, {self.message!r})"
