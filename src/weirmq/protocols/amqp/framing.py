"""AMQP 0-9-1 framing: bytes to frames and back, without any I/O.

A connection's byte stream is the 8-byte protocol header the client sends first, then
frames:

    type octet | channel short | size long | payload (size bytes) | frame-end octet 0xCE

Types: 1 method, 2 content header, 3 content body, 8 heartbeat (channel 0, empty payload).
A frame's size, header and frame-end included, is bounded by the connection's frame_max:
`FRAME_MAX_BYTES` until Connection.TuneOk, the negotiated value after it.

`AmqpFramer` is the contract's `Framer` (`weirmq.protocols.contract`): it hands out the
protocol header as the first frame (whatever its bytes: judging it is the connection's
job), then one `bytes` per complete frame. It does not decode: `decode` does, with pamqp's
unmarshaller (the codec is pamqp's, never ours), in the session's turn.

A frame larger than the framer's bound is not buffered: the framer hands out its 7-byte
header alone (shorter than any real frame, which is at least 8 bytes, so it cannot be
mistaken for one) and discards the payload and frame-end as they arrive. The size being
known, the stream stays in step: the connection answers the notice with Connection.Close
501 FRAME_ERROR and can still read the client's Close-Ok behind the discarded bytes. A
client that claims 4 GiB thus costs nothing but the bytes it really sends, read and thrown
away; the connection's close timeout bounds how long that may go on.

Simple on purpose (nothing here is measured yet): received bytes are copied once into a
pending buffer and each frame once out of it. AMQP frames are small (131,072 bytes at most
by default), so the copies cost little next to pamqp's decoding.
"""

from __future__ import annotations

import struct
from typing import Final

from pamqp import base, body, commands, exceptions, frame, header, heartbeat
from pamqp import constants as spec

from ..contract import Frame
from .errors import AmqpError, ReplyCode

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
"""AMQP 0-9-1's protocol header; also our answer to a client that sent any other."""
FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
CONTENT_HEADER_FIXED_BYTES = 12
"""A content header's class id, weight and body size, before its property list."""
FRAME_END: Final = spec.FRAME_END
FRAME_OVERHEAD_BYTES: Final = FRAME_HEADER.size + 1
"""A frame's bytes besides its payload: the 7-byte header and the frame-end octet."""
RECEIVE_BYTES: Final = 64 * 1024
"""The buffer the kernel writes received bytes into (released when the connection goes
quiet, allocated again on the next read)."""
_METHOD_INDEX = struct.Struct(">I")  # class id << 16 | method id, first in a method payload
_FRAME_TYPES: Final = frozenset(
    {spec.FRAME_METHOD, spec.FRAME_HEADER, spec.FRAME_BODY, spec.FRAME_HEARTBEAT}
)

Inbound = base.Frame | header.ContentHeader | body.ContentBody | heartbeat.Heartbeat
"""A decoded frame: a method, a content header, a content body part, or a heartbeat."""
Outbound = Inbound | header.ProtocolHeader
"""What the server writes: a frame, or the protocol header refusing a client's."""


class AmqpFramer:
    """Cuts one connection's byte stream into AMQP frames; see the module docstring."""

    def __init__(self, frame_max_bytes: int, receive_bytes: int = RECEIVE_BYTES) -> None:
        assert frame_max_bytes >= spec.FRAME_MIN_SIZE and receive_bytes > 0
        self.frame_max_bytes = frame_max_bytes
        """Frames above this are discarded and reported (see the module docstring)."""
        self._receive_bytes = receive_bytes
        self._receive = bytearray()  # allocated on first use, dropped when quiet
        self._pending = bytearray()  # received, not yet returned
        self._header_seen = False
        self._skip = 0  # bytes of an oversized frame still to discard

    @property
    def missing_bytes(self) -> int:
        """Bytes the frame being received still lacks (0 between frames, before the
        header is complete, and while discarding: those bytes are never held)."""
        pending = self._pending
        if self._skip or not self._header_seen or len(pending) < FRAME_HEADER.size:
            return 0
        size = int(FRAME_HEADER.unpack_from(pending)[2]) + FRAME_OVERHEAD_BYTES
        return max(size - len(pending), 0)

    @property
    def buffered_bytes(self) -> int:
        return len(self._pending)

    def get_buffer(self, _sizehint: int = -1) -> memoryview:
        if not self._receive:
            self._receive = bytearray(self._receive_bytes)
        return memoryview(self._receive)

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        received = memoryview(self._receive)[:nbytes]
        if self._skip:
            discarded = min(self._skip, nbytes)
            self._skip -= discarded
            received = received[discarded:]
        self._pending += received
        return self._split()

    def release_buffers(self) -> int:
        released = len(self._receive)
        self._receive = bytearray()
        if not self._pending:
            self._pending = bytearray()  # a deleted prefix may leave its capacity behind
        return released

    def _split(self) -> list[Frame]:
        frames: list[Frame] = []
        pending = self._pending
        position = 0
        if not self._header_seen:
            if len(pending) < len(PROTOCOL_HEADER):
                return frames
            frames.append(bytes(pending[: len(PROTOCOL_HEADER)]))
            position = len(PROTOCOL_HEADER)
            self._header_seen = True
        while len(pending) - position >= FRAME_HEADER.size:
            size = FRAME_HEADER.unpack_from(pending, position)[2] + FRAME_OVERHEAD_BYTES
            if size > self.frame_max_bytes:
                frames.append(bytes(pending[position : position + FRAME_HEADER.size]))
                rest = size - FRAME_HEADER.size  # payload and frame-end, to discard
                here = min(rest, len(pending) - position - FRAME_HEADER.size)
                position += FRAME_HEADER.size + here
                self._skip = rest - here
                continue
            if len(pending) - position < size:
                break
            frames.append(bytes(pending[position : position + size]))
            position += size
        del pending[:position]
        return frames


def decode(raw: Frame, frame_max_bytes: int) -> tuple[int, Inbound]:
    """The channel and the frame in `raw` (one frame the framer cut, not the protocol
    header). Raises `AmqpError`: 501 FRAME_ERROR for a frame that breaks the framing
    (too large, a bad type or frame-end), 540 NOT_IMPLEMENTED for a method no AMQP 0-9-1
    peer knows, 502 SYNTAX_ERROR for arguments that do not decode."""
    frame_type, channel, size = FRAME_HEADER.unpack_from(raw)
    total = size + FRAME_OVERHEAD_BYTES
    if len(raw) == FRAME_HEADER.size or total > frame_max_bytes:
        raise _frame_error(f"frame of {total} bytes is larger than frame_max {frame_max_bytes}")
    if raw[-1] != FRAME_END:
        raise _frame_error(f"frame-end octet {raw[-1]:#04x}, expected {FRAME_END:#04x}")
    if frame_type not in _FRAME_TYPES:
        raise _frame_error(f"unknown frame type {frame_type}")
    if frame_type == spec.FRAME_HEARTBEAT:
        if size:
            raise _frame_error(f"heartbeat frame with a {size}-byte payload")
        return channel, heartbeat.Heartbeat()
    if frame_type == spec.FRAME_BODY and not size:
        # An empty body frame is legal (RabbitMQ takes it), but pamqp refuses any frame
        # without a payload; a body has nothing to decode anyway.
        return channel, body.ContentBody(b"")
    if frame_type == spec.FRAME_METHOD:
        _check_method_known(raw)
    try:
        _, _, value = frame.unmarshal(bytes(raw))
    except Exception as exc:  # pamqp raises more than UnmarshalingException on garbage
        reason = exc.args[1] if isinstance(exc, exceptions.UnmarshalingException) else exc
        raise AmqpError(ReplyCode.SYNTAX_ERROR, f"cannot decode frame: {reason}", 0, 0) from exc
    assert not isinstance(value, header.ProtocolHeader)  # the type byte ruled it out
    if frame_type == spec.FRAME_HEADER:
        # The property list as the client encoded it, kept with the message: stored as it
        # is, it comes back byte for byte (pamqp re-encoding would narrow 64-bit floats
        # and ints, and refuse some values it decoded), and costs nothing to encode.
        value.property_bytes = bytes(raw[FRAME_HEADER.size + CONTENT_HEADER_FIXED_BYTES : -1])  # type: ignore[union-attr]
    return channel, value


def _check_method_known(raw: Frame) -> None:
    if len(raw) < FRAME_OVERHEAD_BYTES + _METHOD_INDEX.size:
        raise AmqpError(ReplyCode.SYNTAX_ERROR, "method frame without a method id", 0, 0)
    (index,) = _METHOD_INDEX.unpack_from(raw, FRAME_HEADER.size)
    if index not in commands.INDEX_MAPPING:
        class_id, method_id = index >> 16, index & 0xFFFF
        raise AmqpError(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method class {class_id} method {method_id}",
            class_id,
            method_id,
        )


def _frame_error(explanation: str) -> AmqpError:
    return AmqpError(ReplyCode.FRAME_ERROR, explanation, 0, 0)


def encode(channel: int, value: Outbound) -> bytes:
    """One frame's bytes (or the protocol header's), by pamqp's marshaller."""
    return frame.marshal(value, channel)


def body_frames(content: bytes | memoryview, frame_max_bytes: int) -> list[body.ContentBody]:
    """A message body cut into body frames that fit `frame_max_bytes` (an empty body has
    none: its content header says size 0)."""
    step = frame_max_bytes - FRAME_OVERHEAD_BYTES
    return [
        body.ContentBody(bytes(content[start : start + step]))
        for start in range(0, len(content), step)
    ]
