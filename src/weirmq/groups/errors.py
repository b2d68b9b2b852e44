"""The one operational error of the group coordinator: a refusal with its Kafka code."""

from __future__ import annotations

from ..errors import ErrorCode, KafkaError


class GroupError(KafkaError):
    """A group request refused with `code` (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, ...)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
