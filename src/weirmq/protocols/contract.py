"""What a protocol adapter gives the connection pump (`weirmq.server.connection`), and what
it gets back.

The pump moves bytes; an adapter knows what they mean. They meet at four small types:

- a `Framer` per connection cuts the byte stream into frames. It has the shape of
  `asyncio.BufferedProtocol` (`get_buffer`, `buffer_updated`), so the kernel writes
  straight into the framer's memory, and says how many bytes the frame being received
  still lacks (`missing_bytes`), so the pump can sleep until a large frame is complete.
  The buffers it keeps for frames to come it drops when the pump says the connection has
  gone quiet (`release_buffers`): an idle connection holds no frame memory;
- a `Session` per connection turns each frame into what must be written back: a `Reply`
  now, nothing, or an awaitable of either when the answer has to wait (an fsync, a long
  poll). The pump writes replies in the order of the frames they answer, whatever order
  the awaitables finish in;
- the session is given a `ConnectionHandle` when it is made: the way back to its
  connection for what is not one reply per frame. An AMQP session answers some frames
  with several (or with none), and pushes frames nobody asked for (Basic.Deliver); it
  `send`s them, and they join the same ordered stream of replies. It may also stop the
  pump reading its socket for a while (`pause_reading`: a publisher blocked by
  back-pressure), and close once its last words are written (`close_after_pending`:
  AMQP's Connection.Close and CloseOk must reach the client before the socket goes);
- `CloseConnection`, raised by a framer or a session, ends this connection only: the
  stream cannot be understood any more (a bad size, an unknown request), the reason is
  logged and counted, and the broker carries on.

Nothing here does I/O or reads a clock; the pump owns the socket, the bounds (frame size,
in-flight replies, idle time) and the shutdown.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NamedTuple, Protocol

Frame = bytes | memoryview
"""One complete frame, as the framer cut it (read-only; a view may share the framer's
memory, so whoever keeps it longer than the call should not mind that)."""


class Reply(NamedTuple):
    """Bytes to write, in order: `prefix`, then each part of `body`.

    Two fields rather than one list so that the common answer (a small header and a
    small body) is joined into a single buffer by the pump, while a large part (fetched
    records) is written as it is, never copied to put a header in front of it. `prefix`
    may be empty."""

    prefix: bytes
    body: list[bytes | memoryview]
    """Written in order after `prefix`; fetched records stay uncopied in their own part."""
    kind: str = ""
    """What it answers, in the adapter's words (Kafka: the API key, "0" for Produce): the
    pump times each reply from its frame read to its write per protocol and kind."""

    @property
    def size(self) -> int:
        return len(self.prefix) + sum(len(part) for part in self.body)


Outcome = Reply | None | Awaitable[Reply | None]
"""What a frame gets: a reply now, nothing (Kafka's acks=0, most AMQP frames), or later."""


class CloseConnection(Exception):
    """The stream cannot be answered any more; close this connection (the reason is
    logged)."""


class Framer(Protocol):
    """Cuts one connection's byte stream into frames; made fresh for each connection."""

    def get_buffer(self, sizehint: int, /) -> memoryview:
        """Memory the next received bytes are written into (never empty)."""
        ...

    def buffer_updated(self, nbytes: int, /) -> list[Frame]:
        """Account for `nbytes` written into the last buffer; returns the frames now
        complete, in order. Raises `CloseConnection` when the stream is not this
        protocol's (a size out of bounds, a bad header): there is no resynchronising."""
        ...

    @property
    def missing_bytes(self) -> int:
        """Bytes the frame being received still lacks before anything can be returned
        (0 when not inside a frame whose size is known)."""
        ...

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames (the start of a frame)."""
        ...

    def release_buffers(self) -> int:
        """Drop the memory kept for frames to come, keeping only bytes received and not
        yet returned; the next bytes allocate afresh. Frames already returned stay intact.
        Returns the bytes dropped. Called when the connection has gone quiet, never
        between `get_buffer` and its `buffer_updated` (asyncio's selector loops call the
        two back to back), when the memory handed out may still be written into."""
        ...


class ConnectionHandle(Protocol):
    """A session's way back to its connection."""

    @property
    def peer(self) -> str:
        """The client's address for logs ("127.0.0.1:50312")."""
        ...

    @property
    def peer_host(self) -> str:
        """The client's host ("127.0.0.1"; "" when unknown)."""
        ...

    @property
    def write_paused(self) -> bool:
        """True while the client is not reading what we write (the transport's buffer is
        above its high-water mark). A session that pushes frames on its own stops pushing
        until `Session.writing_resumed`: `send` never refuses, so it is the session that
        bounds what it pushes."""
        ...

    def send(self, reply: Reply) -> None:
        """Write `reply` after everything already due on this connection (the replies to
        frames received so far, even those still awaited). Ignored once closing."""
        ...

    def close(self, reason: str) -> None:
        """Close the connection now (idempotent); `Session.closed` follows. Replies not yet
        handed to the socket are dropped."""
        ...

    def close_after_pending(self, reason: str) -> None:
        """Close once every reply due so far has been written: those to frames handled
        before, whatever was `send`t before, and, when called from `Session.handle`, the
        reply that call returns. From now on no frame is read or handled and `send` is
        ignored; `Session.closed` follows the close (idempotent; `close` still closes at
        once)."""
        ...

    def pause_reading(self) -> None:
        """Stop reading from the socket (the client's TCP window then closes) until
        `resume_reading`. The pump has reasons of its own to pause (replies in flight,
        memory, a client not reading, a stop): it reads only when none remains, so a
        resume never overrides them. Idempotent."""
        ...

    def resume_reading(self) -> None:
        """Withdraw this session's pause (see `pause_reading`). Idempotent."""
        ...


class Session(Protocol):
    """One connection's protocol state: what it has negotiated, who is asking."""

    def handle(self, frame: Frame, /) -> Outcome:
        """Answer one frame. Frames arrive in order, one call at a time; an awaitable
        returned here is awaited by the pump while later frames are already handled.
        Raises `CloseConnection` for a frame that cannot be answered; any other exception
        closes the connection too, logged as a bug."""
        ...

    def writing_resumed(self) -> None:
        """The client reads again (`ConnectionHandle.write_paused` went False)."""
        ...

    def closed(self) -> None:
        """The connection is gone; called once. Release what the session holds."""
        ...


class Adapter(Protocol):
    """One protocol, as the pump sees it: a framer and a session for each connection."""

    name: str
    """For logs: "kafka", "amqp"."""

    def new_framer(self, max_frame_bytes: int) -> Framer:
        """A framer refusing frames over `max_frame_bytes` (a setting the pump owns)."""
        ...

    def new_session(self, connection: ConnectionHandle) -> Session:
        """A session for a connection just accepted."""
        ...
