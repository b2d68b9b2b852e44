"""Kafka's framing and request/response headers, without any I/O.

Every Kafka request and response travels as a frame: a 4-byte big-endian signed size, then
that many bytes. A request frame opens with a header:

    api_key int16 | api_version int16 | correlation_id int32 | client_id nullable string
    [ tagged fields ]            (header v2: only when the request version is flexible)

and a response frame with the correlation id of the request it answers, followed by an
empty tagged-field section (a single 0 byte) when the response is flexible (header v1).
ApiVersions responses always use header v0, whatever their version: a client must be able
to read the answer before it knows which versions the broker speaks.

`FrameReader` has the shape of `asyncio.BufferedProtocol` (`get_buffer` and
`buffer_updated`) so the server can hand the kernel our own memory and nothing is copied
twice. Small frames are read many at a time into one scratch buffer and sliced out of it;
a frame larger than the scratch buffer gets its own buffer, filled in place by the kernel,
which grows (256 KiB, then doubling) as the bytes arrive rather than being reserved whole
when the size prefix is read: what a client claims costs nothing until it is sent. A size
that is negative, zero or over the limit is a `FrameError`: the connection cannot be
resynchronised after a bad size, so the caller closes it.

Producers send large frames back to back (librdkafka's default batching makes ~1 MB
Produce requests), and a fresh buffer for each costs more than receiving it: `bytearray(n)`
zero-fills, and growing copies what came so far. Measured with 1 KB records, that zeroing
and copying was ~10% of the broker's CPU per GB produced. So the buffer of a large frame
(up to `SPARE_BYTES_MAX`, which bounds what an idle connection keeps) is kept and reused
for the connection's next large frame, but only once nothing refers to it any more: a
frame handed out is a view of that memory, and its bytes must never change under whoever
still holds it (see `_take_spare`).

Medium frames (`LEND_BYTES_MIN` up to the scratch buffer's size: the ~60 KB Produce
requests of a producer with a smaller `batch.size`) usually arrive whole in the scratch
buffer. Copying each out cost about as much as the rest of the framing, so such a frame is
handed out as a view of the scratch buffer, which is then lent: the reader continues in a
second scratch buffer (moving over the few bytes of a frame not yet complete), and takes
the first one back once nothing refers to it, the same check as for large frames. A
connection thus keeps at most two scratch buffers.

All this memory is kept for the frames to come, which an idle connection may never send:
at up to ~2 MiB a connection, 10,000 connections that produced once would hold gigabytes.
So the connection pump calls `release_buffers` once a connection has gone quiet, and the
reader drops every buffer that holds no byte received and not yet returned; the next
bytes allocate afresh, as on a new connection. Dropping a buffer that a frame handed out
still views frees nothing under it: the view holds a reference, and the memory goes with
the last one.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass

SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_CORRELATION = struct.Struct(">i")

SCRATCH_BYTES = 64 * 1024
"""Frames up to this size are read in bulk into one reused buffer."""
LEND_BYTES_MIN = 16 * 1024
"""A frame of at least this size that arrived whole in the scratch buffer is handed out as
a view of it rather than copied, and the reader moves on to another scratch buffer (see
the module docstring)."""
_MIN_ROOM = 4096
"""Compact the scratch buffer when less than this is left to read into."""
BIG_INITIAL_BYTES = 256 * 1024
"""First allocation for a frame larger than the scratch buffer (it doubles from there)."""
SPARE_BYTES_MAX = 2 * 1024 * 1024
"""A large frame's buffer up to this size is kept for the connection's next large frame:
room for the ~1 MB Produce requests of librdkafka's and the Java client's defaults."""
# The references `sys.getrefcount(spare)` sees when only `_take_spare` holds the buffer:
# its local variable and the call's own argument.
_UNREFERENCED = 2


class FrameError(Exception):
    """The byte stream is not Kafka framing any more: close the connection."""


class FrameReader:
    """Splits a byte stream into frames; see the module docstring."""

    def __init__(self, max_frame_bytes: int, scratch_bytes: int = SCRATCH_BYTES) -> None:
        assert max_frame_bytes > 0 and scratch_bytes >= 2 * _MIN_ROOM
        self.max_frame_bytes = max_frame_bytes
        self._scratch_bytes = scratch_bytes
        # Allocated on first use: a connection that never sends costs no buffer, and many
        # connections opened at once (a burst from the accept backlog) cost little.
        self._scratch = bytearray()
        self._start = 0  # first unconsumed byte in the scratch buffer
        self._end = 0  # one past the last received byte in the scratch buffer
        self._big: bytearray | None = None  # the body of one large frame, being filled
        self._big_filled = 0
        self._big_size = 0  # the size the large frame's prefix announced
        self._spare: bytearray | None = None  # the last large frame's buffer, for reuse
        self._lent: bytearray | None = None  # a scratch buffer frames may still view

    @property
    def missing_bytes(self) -> int:
        """Bytes of the large frame being filled that have not arrived yet (0 if none):
        nothing can be returned before they are all there."""
        return self._big_size - self._big_filled if self._big is not None else 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames."""
        if self._big is not None:  # its 4 size bytes are consumed but the frame is pending
            return 4 + self._big_filled
        return self._end - self._start

    @property
    def allocated_bytes(self) -> int:
        """The size of the buffers this reader holds, whether or not they hold data."""
        buffers = (self._scratch, self._lent, self._spare, self._big)
        return sum(len(buffer) for buffer in buffers if buffer is not None)

    def release_buffers(self) -> int:
        """Drop every buffer that holds no received byte still to be returned: the scratch
        buffer unless it holds the start of a frame, the lent one, the spare one (a large
        frame being received keeps its buffer). Returns the bytes dropped. Frames handed
        out stay intact: a view keeps its buffer alive, whatever the reader drops. Not
        between `get_buffer` and `buffer_updated`: bytes written into a dropped buffer
        would be lost."""
        released = 0
        if self._start == self._end:
            released += len(self._scratch)
            self._scratch = bytearray()
            self._start = self._end = 0
        for buffer in (self._lent, self._spare):
            if buffer is not None:
                released += len(buffer)
        self._lent = self._spare = None
        return released

    def get_buffer(self, _sizehint: int = -1) -> memoryview:
        """Memory the next received bytes should be written into."""
        if self._big is not None:
            if self._big_filled == len(self._big):  # grown as the bytes actually arrive
                grown = bytearray(min(self._big_size, 2 * len(self._big)))
                grown[: self._big_filled] = self._big
                self._big = grown
            # A reused buffer can be longer than this frame: never read past its end.
            return memoryview(self._big)[self._big_filled : self._big_size]
        if not self._scratch:
            self._scratch = bytearray(self._scratch_bytes)
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._scratch) - self._end < _MIN_ROOM:
            pending = self._end - self._start
            self._scratch[:pending] = self._scratch[self._start : self._end]
            self._start, self._end = 0, pending
        return memoryview(self._scratch)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes | memoryview]:
        """Account for `nbytes` written into the last buffer; returns the completed frames
        (bodies without the size prefix, read-only). Raises `FrameError` on a bad size."""
        frames: list[bytes | memoryview] = []
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_size:
                return frames
            frames.append(memoryview(self._big)[: self._big_size].toreadonly())
            if len(self._big) <= SPARE_BYTES_MAX:
                self._spare = self._big
            self._big, self._big_filled = None, 0
            return frames
        self._end += nbytes
        self._split(frames)
        return frames

    def _split(self, frames: list[bytes | memoryview]) -> None:
        scratch = self._scratch
        lent = False
        while self._end - self._start >= 4:
            (size,) = SIZE.unpack_from(scratch, self._start)
            if size <= 0 or size > self.max_frame_bytes:
                raise FrameError(
                    f"frame size {size} outside 1..{self.max_frame_bytes} "
                    "(socket.request.max.bytes)"
                )
            body = self._start + 4
            if self._end - body >= size:
                if size >= LEND_BYTES_MIN:
                    frames.append(memoryview(scratch)[body : body + size].toreadonly())
                    lent = True
                else:
                    frames.append(bytes(scratch[body : body + size]))
                self._start = body + size
                continue
            if size > len(scratch) - _MIN_ROOM:
                # Too large for the scratch buffer: give it a buffer of its own, which
                # starts small and doubles as bytes arrive, so that 4 bytes claiming
                # 100 MiB cost 256 KiB, not 100 MiB, until the client really sends them.
                first = min(size, BIG_INITIAL_BYTES)
                self._big = self._take_spare(first) or bytearray(first)
                self._big_size = size
                have = self._end - body
                self._big[:have] = scratch[body : self._end]
                self._big_filled = have
                self._start = self._end = 0
            break
        if lent:
            self._lend_scratch()

    def _lend_scratch(self) -> None:
        """Continue in another scratch buffer: frames handed out view this one."""
        pending = self._end - self._start
        lent, self._lent = self._lent, None
        if lent is None or sys.getrefcount(lent) > _UNREFERENCED:
            lent = bytearray(self._scratch_bytes)
        lent[:pending] = self._scratch[self._start : self._end]
        self._lent, self._scratch = self._scratch, lent
        self._start, self._end = 0, pending

    def _take_spare(self, min_bytes: int) -> bytearray | None:
        """The last large frame's buffer, if it holds `min_bytes` and nothing refers to it
        any more; else None.

        The frame handed out is a memoryview of that buffer, and every view keeps a
        reference to it, so a count of references above our own says that someone (a
        request being handled, a reply waiting in a queue, a traceback) may still read the
        old frame: then it is left to them and a new buffer is allocated."""
        spare, self._spare = self._spare, None
        if spare is None or len(spare) < min_bytes or sys.getrefcount(spare) > _UNREFERENCED:
            return None
        return spare


@dataclass(slots=True)  # not frozen: built per request, and frozen fields cost a call each
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int
    """Where the request body starts in the frame."""


class HeaderError(Exception):
    """The frame is too short or malformed to hold a request header."""


def parse_request_header(
    frame: bytes | memoryview, is_flexible: Callable[[int, int], bool]
) -> RequestHeader:
    """Parse the header of a request frame. `is_flexible(api_key, version)` says whether
    the header carries tagged fields (header v2); it is asked only for known APIs."""
    if len(frame) < _HEADER.size:
        raise HeaderError(f"a request header needs {_HEADER.size} bytes, frame has {len(frame)}")
    api_key, api_version, correlation_id, client_len = _HEADER.unpack_from(frame, 0)
    position = _HEADER.size
    client_id: str | None = None
    if client_len >= 0:
        end = position + client_len
        if end > len(frame):
            raise HeaderError("client_id runs past the end of the frame")
        try:
            client_id = bytes(frame[position:end]).decode()
        except UnicodeDecodeError as exc:
            raise HeaderError("client_id is not UTF-8") from exc
        position = end
    elif client_len != -1:
        raise HeaderError(f"client_id length {client_len}")
    if is_flexible(api_key, api_version):
        position = skip_tagged_fields(frame, position)
    return RequestHeader(api_key, api_version, correlation_id, client_id, position)


def read_uvarint(buf: bytes | memoryview, position: int, end: int | None = None) -> tuple[int, int]:
    """An unsigned varint at `position`, within `buf[:end]`; returns (value, next position)."""
    end = len(buf) if end is None else end
    value = 0
    shift = 0
    while True:
        if position >= end:
            raise HeaderError("varint runs past the end of the frame")
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise HeaderError("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | memoryview, position: int) -> int:
    count, position = read_uvarint(buf, position)
    for _ in range(count):
        _tag, position = read_uvarint(buf, position)
        size, position = read_uvarint(buf, position)
        position += size
        if position > len(buf):
            raise HeaderError("tagged field runs past the end of the frame")
    return position


def response_prefix(correlation_id: int, body_bytes: int, *, flexible_header: bool) -> bytes:
    """Size and header of a response whose body (`body_bytes` long) follows separately,
    so a large body is never copied just to put a header in front of it."""
    if flexible_header:  # header v1: correlation id, then no tagged fields
        return SIZE.pack(5 + body_bytes) + _CORRELATION.pack(correlation_id) + b"\x00"
    return SIZE.pack(4 + body_bytes) + _CORRELATION.pack(correlation_id)
