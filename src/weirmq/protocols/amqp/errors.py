"""AMQP 0-9-1's reply codes, and the one exception that carries them.

AMQP has two kinds of error, and the reply code says which (the spec's "soft" and "hard"):

- a *channel* error (3xx, 4xx: 404 NOT_FOUND, 405 RESOURCE_LOCKED, 406 PRECONDITION_FAILED,
  403 ACCESS_REFUSED) closes the channel it happened on: the server sends Channel.Close,
  discards that channel's frames until Channel.CloseOk, and the rest of the connection
  carries on;
- a *connection* error (320, 402, 5xx: 501 FRAME_ERROR ... 541 INTERNAL_ERROR) closes the
  connection: Connection.Close, then nothing but Close-Ok is looked at.

A handler signals either by raising `AmqpError(code, explanation)`; the connection state
machine decides from the code which close to send, and fills in the class and method id
of the method being handled when the handler did not. The reply text follows RabbitMQ's
form, `"NOT_FOUND - no queue 'q' in vhost '/'"`: clients show it to people, and some
(pika, kombu) match on the code only, so the code must be RabbitMQ's for the same fault.
"""

from __future__ import annotations

import enum
from typing import Final


class ReplyCode(enum.IntEnum):
    """The reply codes of AMQP 0-9-1 (RabbitMQ's spelling of their names)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def hard(self) -> bool:
        """True for a connection error, False for a channel error (see the module
        docstring)."""
        return self in HARD_ERRORS


HARD_ERRORS: Final = frozenset(
    {
        ReplyCode.CONNECTION_FORCED,
        ReplyCode.INVALID_PATH,
        ReplyCode.FRAME_ERROR,
        ReplyCode.SYNTAX_ERROR,
        ReplyCode.COMMAND_INVALID,
        ReplyCode.CHANNEL_ERROR,
        ReplyCode.UNEXPECTED_FRAME,
        ReplyCode.RESOURCE_ERROR,
        ReplyCode.NOT_ALLOWED,
        ReplyCode.NOT_IMPLEMENTED,
        ReplyCode.INTERNAL_ERROR,
    }
)
"""The spec's hard errors: they close the connection, not the channel."""

REPLY_TEXT_BYTES_MAX: Final = 255
"""reply-text is a shortstr: longer texts are cut (on a character boundary)."""


class AmqpError(Exception):
    """An AMQP exception: `code` says whether it closes the channel or the connection.

    `class_id` and `method_id` name the method that failed (0 when no method did: a bad
    frame, a missed heartbeat); None lets the state machine fill in the method it was
    handling."""

    def __init__(
        self,
        code: ReplyCode,
        explanation: str,
        class_id: int | None = None,
        method_id: int | None = None,
    ) -> None:
        super().__init__(f"{code.name} - {explanation}")
        self.code = code
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def hard(self) -> bool:
        return self.code.hard

    @property
    def reply_text(self) -> str:
        """The text for Channel.Close / Connection.Close, as RabbitMQ writes it."""
        return shortstr(f"{self.code.name} - {self.explanation}")


def shortstr(text: str) -> str:
    """`text` cut to fit an AMQP shortstr (255 bytes of UTF-8)."""
    encoded = text.encode()
    if len(encoded) <= REPLY_TEXT_BYTES_MAX:
        return text
    return encoded[:REPLY_TEXT_BYTES_MAX].decode(errors="ignore")
