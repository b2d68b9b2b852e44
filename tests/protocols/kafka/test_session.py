"""Kafka's side of the pump's contract: framing errors become `CloseConnection`, and every
frame reaches the dispatcher with the client's host as Kafka shows it."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from weirmq.protocols.contract import CloseConnection, Reply
from weirmq.protocols.kafka.session import KafkaAdapter, KafkaFramer, KafkaSession
from weirmq.protocols.kafka.wire.framing import FrameError


class RecordingDispatcher:
    def __init__(self) -> None:
        self.calls: list[tuple[bytes, str]] = []

    def handle(self, frame: Any, peer_host: str = "") -> Reply:
        self.calls.append((bytes(frame), peer_host))
        return Reply(b"answer", [])


class Handle:
    peer = "127.0.0.1:50312"
    write_paused = False

    def __init__(self, peer_host: str) -> None:
        self.peer_host = peer_host

    def send(self, reply: Reply) -> None:
        raise AssertionError("Kafka never sends unasked")

    def close(self, reason: str) -> None:
        raise AssertionError("not expected")


def feed(framer: KafkaFramer, data: bytes) -> list[Any]:
    buffer = framer.get_buffer(-1)
    buffer[: len(data)] = data
    return framer.buffer_updated(len(data))


def test_the_framer_cuts_frames_and_refuses_bad_sizes_with_close_connection() -> None:
    framer = KafkaAdapter(RecordingDispatcher()).new_framer(100)
    assert [bytes(f) for f in feed(framer, struct.pack(">i", 3) + b"abc")] == [b"abc"]
    with pytest.raises(CloseConnection, match=r"outside 1\.\.100") as raised:
        feed(framer, struct.pack(">i", 101))
    assert isinstance(raised.value.__cause__, FrameError)


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "/127.0.0.1"), ("", "")])
def test_the_session_hands_each_frame_to_the_dispatcher_with_the_host(
    host: str, shown: str
) -> None:
    dispatcher = RecordingDispatcher()
    session = KafkaAdapter(dispatcher).new_session(Handle(host))
    assert isinstance(session, KafkaSession)
    assert session.handle(b"frame") == Reply(b"answer", [])
    session.writing_resumed()
    session.closed()
    assert dispatcher.calls == [(b"frame", shown)]
