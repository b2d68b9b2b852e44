"""Framing, request headers and response prefixes, checked against kio where it can read them.

The FrameReader tests feed it the way asyncio does: every byte goes into a view returned by
`get_buffer`, and `buffer_updated` is told how much of it was written. A chunking that a
test picks is only an upper bound; the reader's own view sizes cut the stream further.
"""

from __future__ import annotations

import io
import itertools
import random
import struct
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as KioResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_tagged_field, write_unsigned_varint
from kio.static.primitive import i16, i32

from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.wire import messages
from weirmq.protocols.kafka.wire.framing import (
    BIG_INITIAL_BYTES,
    LEND_BYTES_MIN,
    SCRATCH_BYTES,
    SPARE_BYTES_MAX,
    FrameError,
    FrameReader,
    HeaderError,
    RequestHeader,
    parse_request_header,
    read_uvarint,
    response_prefix,
    skip_tagged_fields,
)

MAX_FRAME_BYTES = 1 << 20
MIN_SCRATCH_BYTES = 8192  # FrameReader's smallest allowed scratch buffer


def _body(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _is_read_only(frame: bytes | memoryview) -> bool:
    return isinstance(frame, bytes) or (isinstance(frame, memoryview) and frame.readonly)


def _feed(reader: FrameReader, data: bytes, chunks: Iterable[int] = ()) -> list[bytes | memoryview]:
    """Write `data` through `reader`'s buffers, no more than the next chunk size per call
    (the rest of `data` in one go once `chunks` runs out); returns the frames as given."""
    frames: list[bytes | memoryview] = []
    sizes = iter(chunks)
    position = 0
    while position < len(data):
        chunk = next(sizes, len(data) - position)
        while chunk > 0 and position < len(data):
            view = reader.get_buffer(-1)
            assert len(view) > 0, "a reader that offers no room can never make progress"
            n = min(len(view), chunk, len(data) - position)
            view[:n] = data[position : position + n]
            position += n
            chunk -= n
            frames.extend(reader.buffer_updated(n))
    return frames


def _chunks_from_cuts(total: int, cuts: Iterable[int]) -> list[int]:
    points = sorted({min(max(c, 0), total) for c in cuts} | {0, total})
    return [b - a for a, b in itertools.pairwise(points) if b > a]


# --- FrameReader: a stream of frames, chunked every which way ----------------------------

frame_sizes = st.one_of(
    st.integers(1, 64),
    st.integers(1, 2 * MIN_SCRATCH_BYTES),
    st.integers(SCRATCH_BYTES - 4200, SCRATCH_BYTES + 10),  # around the in-place threshold
    st.integers(SCRATCH_BYTES, 300_000),
)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(frame_sizes, min_size=1, max_size=8),
    seed=st.integers(0, 2**32),
    scratch_bytes=st.sampled_from([MIN_SCRATCH_BYTES, 10_007, SCRATCH_BYTES]),
    data=st.data(),
)
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(
    sizes: list[int], seed: int, scratch_bytes: int, data: st.DataObject
) -> None:
    bodies = [_body(size, seed + i) for i, size in enumerate(sizes)]
    stream = b"".join(_frame(b) for b in bodies)
    boundaries = [0]
    for body in bodies:
        boundaries.append(boundaries[-1] + 4 + len(body))
    near_a_boundary = st.sampled_from(boundaries).flatmap(lambda b: st.integers(b - 6, b + 6))
    cuts = data.draw(st.lists(st.one_of(st.integers(0, len(stream)), near_a_boundary), max_size=60))
    chunks = _chunks_from_cuts(len(stream), cuts)
    # The connection goes quiet after some chunks: the reader releases its buffers there.
    quiet_after = data.draw(st.sets(st.integers(0, len(chunks) - 1)))
    reader = FrameReader(MAX_FRAME_BYTES, scratch_bytes)
    frames: list[bytes | memoryview] = []
    fed = consumed = 0
    for i, chunk in enumerate(chunks):
        new = _feed(reader, stream[fed : fed + chunk])
        fed += chunk
        consumed += sum(4 + len(f) for f in new)
        frames.extend(new)
        pending = fed - consumed
        assert reader.buffered_bytes == pending
        if i in quiet_after:
            reader.release_buffers()
            assert reader.buffered_bytes == pending  # the start of a frame is kept
            assert reader.allocated_bytes == 0 or pending > 0
    assert reader.buffered_bytes == 0
    # Frames returned early must not have been overwritten by the bytes read after them.
    assert [bytes(f) for f in frames] == bodies
    assert all(_is_read_only(f) for f in frames)


def _small_and_large_stream() -> tuple[list[bytes], bytes]:
    # With the smallest scratch buffer, 4100, 5000 and 9000 byte frames no longer fit.
    sizes = [1, 7, 300, 4090, 4100, 5000, 9000, 2, 1]
    bodies = [_body(size, i) for i, size in enumerate(sizes)]
    return bodies, b"".join(_frame(b) for b in bodies)


def test_stream_cut_in_two_at_every_byte() -> None:
    bodies, stream = _small_and_large_stream()
    for cut in range(len(stream) + 1):
        reader = FrameReader(MAX_FRAME_BYTES, MIN_SCRATCH_BYTES)
        frames = _feed(reader, stream, [cut])
        assert [bytes(f) for f in frames] == bodies, f"cut at byte {cut}"
        assert reader.buffered_bytes == 0


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 4096, 4097])
def test_stream_fed_in_equal_chunks(chunk: int) -> None:
    bodies, stream = _small_and_large_stream()
    reader = FrameReader(MAX_FRAME_BYTES, MIN_SCRATCH_BYTES)
    frames = _feed(reader, stream, [chunk] * len(stream))
    assert [bytes(f) for f in frames] == bodies


def test_many_small_frames_arrive_in_one_read() -> None:
    bodies = [bytes([i]) * (i + 1) for i in range(200)]
    stream = b"".join(_frame(b) for b in bodies)
    reader = FrameReader(MAX_FRAME_BYTES)
    view = reader.get_buffer(-1)
    view[: len(stream)] = stream
    frames = reader.buffer_updated(len(stream))
    assert frames == bodies
    assert all(isinstance(f, bytes) for f in frames)
    assert reader.buffered_bytes == 0


def test_large_frame_is_filled_in_place() -> None:
    size = 3 * SCRATCH_BYTES
    body = _body(size, 1)
    reader = FrameReader(MAX_FRAME_BYTES)
    first = _frame(body)[:1004]
    reader.get_buffer(-1)[: len(first)] = first
    assert reader.buffer_updated(len(first)) == []
    received = 1000
    views = []
    for step in (1, 50_000, size - 50_001 - received):
        view = reader.get_buffer(-1)
        assert len(view) == size - received  # exactly the rest of the frame, no more
        view[:step] = body[received : received + step]
        received += step
        views.append(view)
        frames = reader.buffer_updated(step)
    assert len(frames) == 1
    (frame,) = frames
    assert isinstance(frame, memoryview)
    assert frame.readonly
    assert bytes(frame) == body
    assert all(frame.obj is v.obj for v in views)  # the memory we wrote into, not a copy
    with pytest.raises(TypeError):
        frame[0] = 0  # type: ignore[index]
    # Back to the scratch buffer for what follows.
    assert len(reader.get_buffer(-1)) == SCRATCH_BYTES
    assert _feed(reader, _frame(b"next")) == [b"next"]


def _feed_and_forget(reader: FrameReader, data: bytes, chunk: int) -> list[bytes]:
    """Like `_feed`, but each frame is copied and its view dropped at once, as the server
    does once a request is handled: the reader may then reuse a large frame's buffer."""
    out: list[bytes] = []
    position = 0
    while position < len(data):
        view = reader.get_buffer(-1)
        n = min(len(view), chunk, len(data) - position)
        view[:n] = data[position : position + n]
        del view
        position += n
        out.extend(bytes(frame) for frame in reader.buffer_updated(n))
    return out


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(1, 100), st.integers(SCRATCH_BYTES, 3 * BIG_INITIAL_BYTES)),
        min_size=1,
        max_size=8,
    ),
    chunk=st.integers(1000, 2 * BIG_INITIAL_BYTES),
    seed=st.integers(0, 2**32),
)
def test_frames_come_out_whole_when_large_buffers_are_reused(
    sizes: list[int], chunk: int, seed: int
) -> None:
    bodies = [_body(size, seed + i) for i, size in enumerate(sizes)]
    reader = FrameReader(MAX_FRAME_BYTES)
    assert _feed_and_forget(reader, b"".join(_frame(b) for b in bodies), chunk) == bodies
    assert reader.buffered_bytes == 0


def test_a_released_large_frame_buffer_is_reused_for_the_next() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    first = b"\xaa" * (2 * BIG_INITIAL_BYTES)
    assert _feed_and_forget(reader, _frame(first), len(first)) == [first]
    second = _frame(_body(BIG_INITIAL_BYTES, 1))
    _feed_and_forget(reader, second[: 2 * SCRATCH_BYTES], 2 * SCRATCH_BYTES)
    view = reader.get_buffer(-1)
    # Exactly the rest of this frame, in memory that still holds the first frame's bytes
    # (a new buffer would be zeroed): no allocation, no zero-filling.
    assert len(view) == len(second) - 2 * SCRATCH_BYTES
    assert bytes(view[-10:]) == b"\xaa" * 10


def test_a_large_frame_still_referenced_is_never_overwritten() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    first_body = _body(2 * BIG_INITIAL_BYTES, 2)
    (first,) = _feed(reader, _frame(first_body))
    (second,) = _feed(reader, _frame(_body(2 * BIG_INITIAL_BYTES, 3)))
    assert isinstance(first, memoryview) and isinstance(second, memoryview)
    assert second.obj is not first.obj
    assert bytes(first) == first_body
    part = first[100:200]  # a view of a view still holds the memory
    del first
    assert len(_feed(reader, _frame(_body(BIG_INITIAL_BYTES, 4)))) == 1
    assert bytes(part) == first_body[100:200]


def test_buffers_beyond_the_spare_bound_are_not_kept() -> None:
    reader = FrameReader(4 * SPARE_BYTES_MAX)
    body = b"\xbb" * (SPARE_BYTES_MAX + 1)
    assert _feed_and_forget(reader, _frame(body), len(body)) == [body]
    second = _frame(_body(BIG_INITIAL_BYTES, 5))
    _feed_and_forget(reader, second[:100_000], 100_000)
    assert bytes(reader.get_buffer(-1)[-10:]) == bytes(10)  # a new, zeroed buffer


def test_missing_bytes_counts_down_a_large_frame() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    body = _body(3 * SCRATCH_BYTES, 6)
    data = _frame(body)
    assert reader.missing_bytes == 0
    _feed(reader, data[:1000])
    assert reader.missing_bytes == len(body) - 996
    _feed(reader, data[1000:50_000])
    assert reader.missing_bytes == len(data) - 50_000
    assert _feed(reader, data[50_000:]) == [body]
    assert reader.missing_bytes == 0


def test_a_medium_frame_that_arrived_whole_is_lent_never_overwritten() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    body = _body(LEND_BYTES_MIN + 1000, 7)
    following = _frame(_body(3000, 8))
    [frame] = _feed(reader, _frame(body) + following[:10])
    assert isinstance(frame, memoryview) and frame.readonly  # a view, not a copy
    assert reader.buffered_bytes == 10  # the next frame's start moved to another buffer
    later = [_body(LEND_BYTES_MIN + 2000, 9 + i) for i in range(3)]
    assert _feed(reader, following[10:] + b"".join(_frame(b) for b in later)) == [
        following[4:],
        *later,
    ]
    assert bytes(frame) == body  # still intact while it is held


def test_a_lent_scratch_buffer_is_taken_back_once_released() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    owners = []
    for i in range(4):
        [frame] = _feed(reader, _frame(_body(LEND_BYTES_MIN, i)))
        assert isinstance(frame, memoryview)
        owners.append(id(frame.obj))
        del frame  # handled: nothing refers to the buffer any more
    assert owners[0] == owners[2] and owners[1] == owners[3] and owners[0] != owners[1]


# --- releasing the buffers of a quiet connection ---------------------------------------------


def test_release_with_nothing_buffered_drops_every_buffer() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    assert reader.allocated_bytes == 0  # nothing before the first read
    assert reader.release_buffers() == 0
    large = _body(2 * BIG_INITIAL_BYTES, 1)
    medium = _body(LEND_BYTES_MIN, 2)
    stream = _frame(b"small") + _frame(large) + _frame(medium)
    assert _feed_and_forget(reader, stream, len(stream)) == [b"small", large, medium]
    # A scratch buffer, the one lent for the medium frame, the large frame's spare.
    held = reader.allocated_bytes
    assert held == 2 * SCRATCH_BYTES + len(large)
    assert reader.release_buffers() == held
    assert reader.allocated_bytes == 0
    assert reader.release_buffers() == 0
    # As good as new: frames of every kind come out whole after a release.
    assert _feed_and_forget(reader, stream, 10_000) == [b"small", large, medium]


def test_release_keeps_the_start_of_a_frame() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    body = _body(3000, 3)
    data = _frame(b"first") + _frame(body)
    assert _feed(reader, data[:100]) == [b"first"]
    reader.release_buffers()
    assert reader.buffered_bytes == 100 - 9
    assert reader.allocated_bytes == SCRATCH_BYTES  # the scratch buffer holds it
    assert _feed(reader, data[100:]) == [body]
    reader.release_buffers()
    assert reader.allocated_bytes == 0


def test_release_keeps_a_large_frame_being_received() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    body = _body(3 * BIG_INITIAL_BYTES, 4)
    data = _frame(body)
    _feed(reader, data[:300_000])
    reader.release_buffers()
    assert reader.buffered_bytes == 300_000
    assert reader.allocated_bytes == 2 * BIG_INITIAL_BYTES  # its own buffer, grown once
    assert _feed(reader, data[300_000:]) == [body]


def test_frames_still_held_stay_intact_after_a_release() -> None:
    """The reader drops its buffers, but a frame handed out still views one of them: the
    view keeps that memory alive, and no later frame is read into it."""
    reader = FrameReader(MAX_FRAME_BYTES)
    medium_body = _body(LEND_BYTES_MIN + 100, 5)
    large_body = _body(2 * BIG_INITIAL_BYTES, 6)
    [medium] = _feed(reader, _frame(medium_body))
    [large] = _feed(reader, _frame(large_body))
    assert isinstance(medium, memoryview) and isinstance(large, memoryview)
    reader.release_buffers()
    assert reader.allocated_bytes == 0
    later = [_body(size, 7 + i) for i, size in enumerate([LEND_BYTES_MIN, 2 * BIG_INITIAL_BYTES])]
    stream = b"".join(_frame(b) for b in later * 3)
    assert _feed_and_forget(reader, stream, 50_000) == later * 3
    assert bytes(medium) == medium_body
    assert bytes(large) == large_body


def test_frame_that_just_fits_the_scratch_buffer_is_returned_as_bytes() -> None:
    reader = FrameReader(MAX_FRAME_BYTES, MIN_SCRATCH_BYTES)
    body = _body(MIN_SCRATCH_BYTES - 4, 2)
    frames = _feed(reader, _frame(body))
    assert frames == [body]
    assert isinstance(frames[0], bytes)


def test_small_frame_waiting_at_the_end_of_scratch_is_moved_to_the_front() -> None:
    reader = FrameReader(MAX_FRAME_BYTES, MIN_SCRATCH_BYTES)
    # Fill the scratch buffer but for 100 bytes with one frame plus the start of the next.
    filler = _body(MIN_SCRATCH_BYTES - 100 - 4, 3)
    second = _body(3000, 4)
    data = _frame(filler) + _frame(second)[:10]
    assert _feed(reader, data) == [filler]
    assert reader.buffered_bytes == 10
    view = reader.get_buffer(-1)
    assert len(view) == MIN_SCRATCH_BYTES - 10  # compacted: the 10 bytes moved to the front
    assert _feed(reader, _frame(second)[10:]) == [second]


def test_buffered_bytes_counts_partial_frames() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    assert reader.buffered_bytes == 0
    data = _frame(b"abc") + _frame(b"defgh")
    for i in range(1, len(data) + 1):
        reader.get_buffer(-1)[:1] = data[i - 1 : i]
        frames = reader.buffer_updated(1)
        expected = {7: 0, len(data): 0}.get(i, i if i < 7 else i - 7)
        assert reader.buffered_bytes == expected, f"after {i} bytes"
        assert frames == ([b"abc"] if i == 7 else [b"defgh"] if i == len(data) else [])


def test_buffered_bytes_of_a_large_frame_in_progress() -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    _feed(reader, _frame(_body(2 * SCRATCH_BYTES, 5))[:5000])
    # 5000 bytes received (size prefix and part of the body), none returned.
    assert reader.buffered_bytes == 5000


@pytest.mark.parametrize(
    "size", [0, -1, -2, -(2**31), MAX_FRAME_BYTES + 1, 2**31 - 1], ids=lambda s: f"size={s}"
)
def test_bad_frame_size_is_a_frame_error_as_soon_as_it_is_read(size: int) -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    with pytest.raises(FrameError):
        _feed(reader, struct.pack(">i", size))  # no body needed to know it is bad


@pytest.mark.parametrize("size", [0, -1, MAX_FRAME_BYTES + 1])
def test_bad_frame_size_after_good_frames_and_split_across_reads(size: int) -> None:
    reader = FrameReader(MAX_FRAME_BYTES)
    data = _frame(b"ok") + struct.pack(">i", size)
    assert _feed(reader, data[:8]) == [b"ok"]
    with pytest.raises(FrameError):
        _feed(reader, data[8:])


def test_frame_of_exactly_the_maximum_size_is_accepted() -> None:
    reader = FrameReader(100)
    body = _body(100, 6)
    assert _feed(reader, _frame(body), [1] * 104) == [body]


def test_maximum_applies_to_large_frames_too() -> None:
    reader = FrameReader(4 * SCRATCH_BYTES)
    assert _feed(reader, _frame(b"\x01" * (4 * SCRATCH_BYTES))) == [b"\x01" * (4 * SCRATCH_BYTES)]
    with pytest.raises(FrameError):
        _feed(reader, struct.pack(">i", 4 * SCRATCH_BYTES + 1))


# --- request headers ---------------------------------------------------------------------


def _never_flexible(_api_key: int, _version: int) -> bool:
    return False


def _always_flexible(_api_key: int, _version: int) -> bool:
    return True


def _v1_header(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        return head + struct.pack(">h", -1)
    return head + struct.pack(">h", len(client_id)) + client_id


def _tagged_fields(fields: Sequence[tuple[int, bytes]]) -> bytes:
    out = io.BytesIO()
    write_unsigned_varint(out, len(fields))  # type: ignore[arg-type]
    for tag, value in fields:
        write_tagged_field(out, tag, lambda buf, v: buf.write(v), value)  # type: ignore[arg-type]
    return out.getvalue()


def test_v1_header() -> None:
    frame = _v1_header(3, 1, 42, b"my-client") + b"BODY"
    header = parse_request_header(frame, _never_flexible)
    assert header == RequestHeader(3, 1, 42, "my-client", len(frame) - 4)
    assert frame[header.body_offset :] == b"BODY"


def test_v1_header_with_null_and_empty_client_id() -> None:
    frame = _v1_header(18, 0, -7, None)
    assert parse_request_header(frame, _never_flexible) == RequestHeader(18, 0, -7, None, 10)
    frame = _v1_header(18, 0, 2**31 - 1, b"")
    assert parse_request_header(frame, _never_flexible) == RequestHeader(18, 0, 2**31 - 1, "", 10)


def test_v2_header_skips_tagged_fields() -> None:
    tags = _tagged_fields([(0, b"zero"), (7, b""), (300, b"\x80" * 200)])
    frame = _v1_header(1, 12, 5, "clïent".encode()) + tags + b"BODY"
    header = parse_request_header(frame, _always_flexible)
    assert header == RequestHeader(1, 12, 5, "clïent", len(frame) - 4)


def test_header_parses_from_a_memoryview() -> None:
    frame = _v1_header(1, 12, 5, None) + _tagged_fields([(1, b"x")]) + b"BODY"
    view = memoryview(bytearray(frame)).toreadonly()
    assert parse_request_header(view, _always_flexible) == parse_request_header(
        frame, _always_flexible
    )


def test_is_flexible_is_asked_about_the_header_api_and_version() -> None:
    asked: list[tuple[int, int]] = []

    def is_flexible(api_key: int, version: int) -> bool:
        asked.append((api_key, version))
        return True

    parse_request_header(_v1_header(22, 4, 1, b"c") + b"\x00", is_flexible)
    assert asked == [(22, 4)]


@settings(max_examples=300, deadline=None)
@given(
    api_key=st.integers(-(2**15), 2**15 - 1),
    version=st.integers(-(2**15), 2**15 - 1),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=40)),
    tags=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=200)), max_size=5),
    body=st.binary(max_size=50),
)
def test_any_header_parses_and_every_truncation_is_a_header_error(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    tags: list[tuple[int, bytes]],
    body: bytes,
) -> None:
    for flexible, tail in ((False, b""), (True, _tagged_fields(tags))):
        raw_client = None if client_id is None else client_id.encode()
        header_bytes = _v1_header(api_key, version, correlation_id, raw_client) + tail
        is_flexible = _always_flexible if flexible else _never_flexible
        header = parse_request_header(header_bytes + body, is_flexible)
        assert header == RequestHeader(
            api_key, version, correlation_id, client_id, len(header_bytes)
        )
        for end in range(len(header_bytes)):
            with pytest.raises(HeaderError):
                parse_request_header(header_bytes[:end], is_flexible)


@settings(max_examples=200, deadline=None)
@given(
    header_class=st.sampled_from([KioRequestHeaderV1, KioRequestHeaderV2]),
    data=st.data(),
    body=st.binary(max_size=50),
)
def test_header_written_by_kio(
    header_class: type[KioRequestHeaderV1 | KioRequestHeaderV2],
    data: st.DataObject,
    body: bytes,
) -> None:
    kio_header = data.draw(st.from_type(header_class))
    out = io.BytesIO()
    entity_writer(header_class)(out, kio_header)
    header_bytes = out.getvalue()
    is_flexible = _always_flexible if header_class.__flexible__ else _never_flexible
    header = parse_request_header(header_bytes + body, is_flexible)
    assert header == RequestHeader(
        kio_header.request_api_key,
        kio_header.request_api_version,
        kio_header.correlation_id,
        kio_header.client_id,
        len(header_bytes),
    )


def test_header_and_body_written_by_kio_decode_through_messages() -> None:
    request = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )
    kio_header = KioRequestHeaderV2(
        request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(9), client_id="c"
    )
    out = io.BytesIO()
    entity_writer(KioRequestHeaderV2)(out, kio_header)
    entity_writer(MetadataRequest)(out, request)
    frame = out.getvalue()
    header = parse_request_header(frame, messages.request_is_flexible)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 9)
    assert messages.decode_request(3, 12, frame, header.body_offset) == request


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "needs 10 bytes"),
        (struct.pack(">hhi", 1, 1, 1) + b"\xff", "needs 10 bytes"),
        (struct.pack(">hhih", 1, 1, 1, 5) + b"abcd", "past the end"),
        (struct.pack(">hhih", 1, 1, 1, -2), "length -2"),
        (struct.pack(">hhih", 1, 1, 1, -(2**15)), "length -32768"),
        (struct.pack(">hhih", 1, 1, 1, 2) + b"\xc3\x28", "not UTF-8"),
        (struct.pack(">hhih", 1, 1, 1, 1) + b"\x80", "not UTF-8"),
    ],
    ids=["empty", "short", "client-id-past-end", "length-2", "length-min", "bad-utf8", "lone"],
)
def test_malformed_v1_header(frame: bytes, message: str) -> None:
    with pytest.raises(HeaderError, match=message):
        parse_request_header(frame, _never_flexible)


@pytest.mark.parametrize(
    "tail",
    [
        b"",  # no tagged-field count at all
        b"\x01",  # one field promised, none there
        b"\x01\x05",  # tag without a size
        b"\x01\x05\x03ab",  # value shorter than its size
        b"\x02\x05\x00",  # second field missing
        b"\x80\x80\x80\x80\x80\x01",  # count longer than 5 bytes
    ],
)
def test_malformed_v2_tagged_fields(tail: bytes) -> None:
    with pytest.raises(HeaderError):
        parse_request_header(_v1_header(1, 12, 1, b"c") + tail, _always_flexible)


def test_huge_tagged_field_count_fails_fast() -> None:
    frame = _v1_header(1, 12, 1, None) + b"\xff\xff\xff\xff\x0f" + b"\x00\x00" * 10
    with pytest.raises(HeaderError):
        parse_request_header(frame, _always_flexible)


# --- varints and tagged fields -------------------------------------------------------------


@given(value=st.integers(0, 2**35 - 1), prefix=st.binary(max_size=3), suffix=st.binary(max_size=3))
def test_read_uvarint_reads_what_kio_writes(value: int, prefix: bytes, suffix: bytes) -> None:
    out = io.BytesIO()
    write_unsigned_varint(out, value)  # type: ignore[arg-type]
    encoded = out.getvalue()
    assert read_uvarint(prefix + encoded + suffix, len(prefix)) == (
        value,
        len(prefix) + len(encoded),
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x00", (0, 1)),
        (b"\x7f", (127, 1)),
        (b"\x80\x01", (128, 2)),
        (b"\xff\xff\xff\xff\x0f", (2**32 - 1, 5)),
        (b"\x96\x01\xff", (150, 2)),
    ],
)
def test_read_uvarint_examples(data: bytes, expected: tuple[int, int]) -> None:
    assert read_uvarint(data, 0) == expected
    assert read_uvarint(memoryview(data), 0) == expected


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff\xff\xff", b"\x80" * 5 + b"\x01"])
def test_read_uvarint_rejects_truncated_and_overlong(data: bytes) -> None:
    with pytest.raises(HeaderError):
        read_uvarint(data, 0)


@given(
    tags=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300)), max_size=6),
    start=st.binary(max_size=4),
)
def test_skip_tagged_fields_lands_after_the_last_field(
    tags: list[tuple[int, bytes]], start: bytes
) -> None:
    section = _tagged_fields(tags)
    buf = start + section + b"REST"
    assert skip_tagged_fields(buf, len(start)) == len(start) + len(section)


# --- response prefixes ---------------------------------------------------------------------


@given(correlation_id=st.integers(-(2**31), 2**31 - 1), body=st.binary(max_size=100))
def test_response_prefix_non_flexible(correlation_id: int, body: bytes) -> None:
    prefix = response_prefix(correlation_id, len(body), flexible_header=False)
    assert len(prefix) == 8
    frame = prefix + body
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, size = entity_reader(KioResponseHeaderV0)(frame, 4)
    assert (header.correlation_id, size) == (correlation_id, 4)
    assert frame[8:] == body


@given(correlation_id=st.integers(-(2**31), 2**31 - 1), body=st.binary(max_size=100))
def test_response_prefix_flexible(correlation_id: int, body: bytes) -> None:
    prefix = response_prefix(correlation_id, len(body), flexible_header=True)
    assert len(prefix) == 9
    assert prefix[-1] == 0  # no tagged fields
    frame = prefix + body
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, size = entity_reader(KioResponseHeaderV1)(frame, 4)
    assert (header.correlation_id, size) == (correlation_id, 5)
    assert frame[9:] == body


def _response_frame(
    api_key: int, version: int, correlation_id: int, data: dict[str, object]
) -> tuple[object, bytes]:
    response = messages.build_response(api_key, version, data)
    body = messages.encode(response)
    flexible = messages.response_header_is_flexible(api_key, version)
    return response, response_prefix(correlation_id, len(body), flexible_header=flexible) + body


def _read_response_frame(
    frame: bytes, header_class: type[object], body_class: type[object]
) -> tuple[int, object]:
    """What a client does with a response frame: size, header, body, nothing left over."""
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, header_size = entity_reader(header_class)(frame, 4)
    body, body_size = entity_reader(body_class)(frame, 4 + header_size)
    assert 4 + header_size + body_size == len(frame)
    return header.correlation_id, body


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_frame_always_has_header_v0(version: int) -> None:
    data: dict[str, object] = {
        "error_code": ErrorCode.none,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time": 0,
    }
    response, frame = _response_frame(18, version, 77, data)
    body_class = messages.response_class(18, version)
    assert _read_response_frame(frame, KioResponseHeaderV0, body_class) == (77, response)


@pytest.mark.parametrize("version", range(13))
def test_metadata_response_frame_reads_back_with_kio(version: int) -> None:
    data: dict[str, object] = {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "weir",
        "controller_id": 1,
        "topics": [],
    }
    response, frame = _response_frame(3, version, -5, data)
    header_class = KioResponseHeaderV1 if version >= 9 else KioResponseHeaderV0
    body_class = messages.response_class(3, version)
    assert _read_response_frame(frame, header_class, body_class) == (-5, response)
