"""The operational errors of share groups, each with the Kafka code a client is answered.

An acknowledgement of a record the member does not hold (never acquired, acquired by
someone else, already acknowledged, lock expired) is Kafka's INVALID_RECORD_STATE, answered
per acknowledgement batch: the other batches of the request still apply. A malformed
batch (offsets out of order, a types list of the wrong length) is an invalid request. A
configuration out of its bounds is `invalid_config`; a persisted share state that cannot
be read back is a storage error, since the records it describes cannot be served.
"""

from __future__ import annotations

from ..errors import ErrorCode, KafkaError


class ShareError(KafkaError):
    """A share-group request refused; the base of this package's errors."""

    code = ErrorCode.invalid_request


class InvalidRecordStateError(ShareError):
    """An event that the record state table does not allow in the state it arrived in."""

    code = ErrorCode.invalid_record_state


class InvalidAcknowledgementError(ShareError):
    """An acknowledgement batch that is malformed in itself (range, types, their count)."""


class InvalidShareConfigError(ShareError):
    """A `ShareConfig` value outside its bounds."""

    code = ErrorCode.invalid_config


class InvalidShareStateError(ShareError):
    """A persisted snapshot or delta that does not decode to a share state."""

    code = ErrorCode.kafka_storage_error
