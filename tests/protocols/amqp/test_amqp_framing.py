"""The AMQP framer and frame decoder, fed as asyncio feeds a `BufferedProtocol`.

Streams are built with pamqp's encoder; each chunking writes into the views `get_buffer`
returns (a chunk larger than the view is cut further), so the framer sees the stream as
the kernel would hand it over.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import pytest
from amqp_support import marshal
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, header, heartbeat

from weirmq.protocols.amqp.errors import AmqpError, ReplyCode
from weirmq.protocols.amqp.framing import (
    FRAME_OVERHEAD_BYTES,
    PROTOCOL_HEADER,
    AmqpFramer,
    Outbound,
    body_frames,
    decode,
)

FRAME_MAX = 4096


def feed(framer: AmqpFramer, data: bytes, chunks: Iterable[int]) -> list[bytes]:
    """Write `data` through the framer in chunks of (at most) the given sizes, then the
    rest in one go; returns every frame handed out."""
    frames: list[bytes] = []
    position = 0
    sizes = [*chunks, len(data)]
    for size in sizes:
        while size > 0 and position < len(data):
            view = framer.get_buffer(-1)
            n = min(size, len(view), len(data) - position)
            view[:n] = data[position : position + n]
            frames.extend(bytes(f) for f in framer.buffer_updated(n))
            position += n
            size -= n
    assert position == len(data)
    return frames


def stream(values: Sequence[tuple[int, Outbound]]) -> tuple[bytes, list[bytes]]:
    encoded = [marshal(channel, value) for channel, value in values]
    return PROTOCOL_HEADER + b"".join(encoded), [PROTOCOL_HEADER, *encoded]


def _frames() -> st.SearchStrategy[tuple[int, Outbound]]:
    channels = st.integers(min_value=1, max_value=2047)
    methods = st.sampled_from(
        [
            commands.Channel.Open(),
            commands.Basic.Publish(exchange="x", routing_key="k"),
            commands.Queue.Declare(queue="q", durable=True),
            commands.Basic.Ack(delivery_tag=7, multiple=True),
        ]
    )
    bodies = st.binary(max_size=FRAME_MAX - FRAME_OVERHEAD_BYTES).map(body.ContentBody)
    headers = st.integers(0, 10_000).map(
        lambda size: header.ContentHeader(
            body_size=size,
            properties=commands.Basic.Properties(content_type="text/plain", headers={"a": 1}),
        )
    )
    return st.one_of(
        st.tuples(channels, st.one_of(methods, bodies, headers)),
        st.just((0, heartbeat.Heartbeat())),
    )


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(_frames(), max_size=12),
    chunks=st.lists(st.integers(min_value=1, max_value=5000), max_size=40),
)
def test_any_chunking_yields_the_same_frames(
    values: list[tuple[int, Outbound]], chunks: list[int]
) -> None:
    data, expected = stream(values)
    framer = AmqpFramer(FRAME_MAX, receive_bytes=1024)

    frames = feed(framer, data, chunks)

    assert frames == expected
    assert framer.buffered_bytes == 0 and framer.missing_bytes == 0
    decoded = [decode(f, FRAME_MAX) for f in frames[1:]]
    assert [channel for channel, _ in decoded] == [channel for channel, _ in values]
    assert [type(v) for _, v in decoded] == [type(v) for _, v in values]


@settings(max_examples=100, deadline=None)
@given(
    oversize=st.integers(min_value=1, max_value=100_000),
    chunks=st.lists(st.integers(min_value=1, max_value=3000), max_size=60),
)
def test_an_oversized_frame_is_reported_and_skipped_and_the_stream_stays_in_step(
    oversize: int, chunks: list[int]
) -> None:
    big = marshal(3, body.ContentBody(b"x" * (FRAME_MAX - FRAME_OVERHEAD_BYTES + oversize)))
    after = marshal(0, commands.Connection.CloseOk())
    framer = AmqpFramer(FRAME_MAX, receive_bytes=1024)

    frames = feed(framer, PROTOCOL_HEADER + big + after, chunks)

    assert frames == [PROTOCOL_HEADER, big[:7], after]
    with pytest.raises(AmqpError) as caught:
        decode(frames[1], FRAME_MAX)
    assert caught.value.code is ReplyCode.FRAME_ERROR
    assert f"frame of {len(big)} bytes is larger than frame_max {FRAME_MAX}" in str(caught.value)


def test_the_protocol_header_is_handed_out_first_whatever_it_says() -> None:
    framer = AmqpFramer(FRAME_MAX)
    assert feed(framer, b"GET / HTTP", [3, 3]) == [b"GET / HT"]


def test_missing_and_buffered_bytes_describe_a_partial_frame() -> None:
    framer = AmqpFramer(FRAME_MAX)
    frame = marshal(1, body.ContentBody(b"y" * 1000))
    assert feed(framer, PROTOCOL_HEADER + frame[:5], []) == [PROTOCOL_HEADER]
    assert (framer.buffered_bytes, framer.missing_bytes) == (5, 0)  # size not known yet
    assert feed(framer, frame[5:100], []) == []
    assert (framer.buffered_bytes, framer.missing_bytes) == (100, len(frame) - 100)
    assert feed(framer, frame[100:], []) == [frame]
    assert (framer.buffered_bytes, framer.missing_bytes) == (0, 0)


def test_while_discarding_nothing_is_held_or_awaited() -> None:
    framer = AmqpFramer(FRAME_MAX)
    claim = struct.pack(">BHI", 3, 1, 2**32 - 9)  # a 4 GiB body frame
    assert feed(framer, PROTOCOL_HEADER + claim + b"z" * 50_000, []) == [PROTOCOL_HEADER, claim]
    assert (framer.buffered_bytes, framer.missing_bytes) == (0, 0)


def test_release_buffers_drops_the_receive_buffer_but_keeps_a_partial_frame() -> None:
    framer = AmqpFramer(FRAME_MAX, receive_bytes=2048)
    frame = marshal(0, commands.Connection.CloseOk())
    feed(framer, PROTOCOL_HEADER + frame[:4], [])
    assert framer.release_buffers() == 2048
    assert framer.release_buffers() == 0
    assert feed(framer, frame[4:], []) == [frame]


@pytest.mark.parametrize(
    ("raw", "code", "words"),
    [
        (marshal(0, commands.Connection.CloseOk())[:-1] + b"\x00", 501, "frame-end octet"),
        (struct.pack(">BHI", 9, 0, 1) + b"x\xce", 501, "unknown frame type 9"),
        (struct.pack(">BHI", 8, 0, 2) + b"xx\xce", 501, "heartbeat frame with a 2-byte payload"),
        (struct.pack(">BHIHH", 1, 1, 4, 50, 99) + b"\xce", 540, "class 50 method 99"),
        (struct.pack(">BHIHH", 1, 1, 5, 10, 11) + b"\x00\xce", 502, "cannot decode"),
        (struct.pack(">BHI", 1, 1, 2) + b"\x00\x14\xce", 502, "without a method id"),
        (struct.pack(">BHI", 2, 1, 3) + b"\x00\x3c\x00\xce", 502, "cannot decode"),
        (b"\x03\x00\x01\x00\x00\x20\x00", 501, "larger than frame_max"),
    ],
)
def test_decode_refuses_what_is_not_a_frame(raw: bytes, code: int, words: str) -> None:
    with pytest.raises(AmqpError) as caught:
        decode(raw, FRAME_MAX)
    assert caught.value.code == code
    assert words in str(caught.value)


def test_unknown_method_ids_are_named_in_the_error() -> None:
    with pytest.raises(AmqpError) as caught:
        decode(struct.pack(">BHIHH", 1, 1, 4, 50, 99) + b"\xce", FRAME_MAX)
    assert (caught.value.class_id, caught.value.method_id) == (50, 99)


def test_decode_reads_what_pamqp_wrote() -> None:
    publish = commands.Basic.Publish(exchange="amq.topic", routing_key="a.b", mandatory=True)
    channel, value = decode(marshal(5, publish), FRAME_MAX)
    assert channel == 5 and isinstance(value, commands.Basic.Publish)
    assert (value.exchange, value.routing_key, value.mandatory) == ("amq.topic", "a.b", True)


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 10_000])
def test_body_frames_fit_frame_max(size: int) -> None:
    content = bytes(range(256)) * (size // 256 + 1)
    parts = body_frames(content[:size], FRAME_MAX)
    assert b"".join(p.value for p in parts) == content[:size]
    assert all(len(marshal(1, p)) <= FRAME_MAX for p in parts)
    assert len(parts) == -(-size // (FRAME_MAX - FRAME_OVERHEAD_BYTES))
