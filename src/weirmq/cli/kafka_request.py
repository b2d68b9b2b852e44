"""Kafka requests over a plain socket, one at a time, for what no Python Kafka client sends
(DescribeClientQuotas and AlterClientQuotas, for ``weirmq quotas``).

Theory of operation:

- A request travels as a frame: an int32 size, the request header, the body. The header is
  kio's v1 (API key, version, correlation id, client id) for a non-flexible version and v2
  (the same plus tagged fields) for a flexible one; the response header is v0 (correlation
  id) or v1 (plus tagged fields). kio's class for each API and version names its header
  (``__header_schema__``), so nothing here keeps a table of versions. Bodies are kio's
  dataclasses, built from plain data by the broker's own ``wire.messages.build`` and
  written and read by ``kio.serial``.
- Framing is pure (``request_frame``, ``parse_response``): bytes in, kio values out, so
  tests need no socket. ``KafkaConnection`` only moves the bytes.
- ``KafkaConnection.open`` connects to the first bootstrap address that accepts, then asks
  ApiVersions v3, as librdkafka does. A broker that does not know v3 answers in v0 with
  UNSUPPORTED_VERSION and the range it knows (KIP-511); we ask again at the highest version
  both sides have. ``version_for`` is then the highest version of an API that both sides
  speak; with none in common the command fails with UNSUPPORTED_VERSION (exit code 1)
  instead of sending a request the broker would answer by closing the connection.
- Every wait is bounded: each connection attempt (``CONNECT_TIMEOUT_S``), each response
  (``REQUEST_TIMEOUT_S`` from the moment its request is sent, each read waiting only for
  what is left of it), the size of a response (``RESPONSE_BYTES_MAX``).
- Nothing reachable, or a server that stops answering, closes the connection, announces a
  response of an impossible size, answers another request, or sends bytes that do not
  parse as the response asked for: each is ``BrokerUnreachable`` (exit code 3) with one
  line saying which; whatever is there is not a Kafka broker we can talk to. An error code
  inside a well-formed response is data, for the caller to report.
- One request is in flight at a time; correlation ids count up from 1.

kio is imported on first use (``weirmq serve`` never imports this module anyway). In a
development venv kio registers property-test strategies with hypothesis when it can import
it, which costs most of a second per command (measured); outside a test run we hide
hypothesis while kio's phantom types load, as ``weirmq serve`` does (main.py).
"""

from __future__ import annotations

import io
import socket
import struct
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from weirmq import __version__
from weirmq.cli.clients import (
    CLIENT_ID,
    CONNECT_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    Address,
    Bootstrap,
    BrokerUnreachable,
    CommandError,
)

API_VERSIONS_KEY = 18
API_VERSIONS_ASKED = 3
"""The ApiVersions version we ask first: the newest with KIP-511's client name (librdkafka's)."""
UNSUPPORTED_VERSION = 35
RESPONSE_BYTES_MAX = 16 * 1024 * 1024
"""The largest response we read: 10,000 quota entities (the broker's bound) fit in a few MB."""
READ_CHUNK_BYTES = 1024 * 1024
SOFTWARE_NAME = "weirmq-cli"


class ProtocolError(Exception):
    """Bytes that are not the response we asked for; the message says how."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The versions of one API that one side speaks, both ends included."""

    min_version: int
    max_version: int

    def __str__(self) -> str:
        if self.min_version == self.max_version:
            return f"v{self.min_version}"
        return f"v{self.min_version}-{self.max_version}"


def common_version(ours: VersionRange, theirs: VersionRange | None) -> int | None:
    """The highest version in both ranges, or None when they do not meet."""
    if theirs is None:
        return None
    highest = min(ours.max_version, theirs.max_version)
    return highest if highest >= max(ours.min_version, theirs.min_version) else None


# -- kio ---------------------------------------------------------------------------------------


def _load_kio() -> None:
    """Load kio's phantom types without hypothesis, unless kio or hypothesis is loaded
    already (a test run): kio asks for hypothesis once, when that module loads."""
    if "kio.static._phantom" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


def request_class(api_key: int, version: int) -> type[Any]:
    """kio's request class of ``api_key`` at ``version``."""
    _load_kio()
    from kio.index import load_request_schema

    return load_request_schema(api_key, version)


def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response class of ``api_key`` at ``version``."""
    _load_kio()
    from kio.index import load_response_schema

    return load_response_schema(api_key, version)


def build_request(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    """The kio request of ``api_key`` at ``version`` from plain data (nested lists of
    mappings for nested entities); fields the version lacks are dropped, as the broker does
    with its responses (``wire.messages.build``)."""
    from weirmq.protocols.kafka.wire.messages import build

    return build(request_class(api_key, version), data)


def api_name(api_key: int, version: int) -> str:
    """``DescribeClientQuotas``: the API's name, for messages."""
    return request_class(api_key, version).__name__.removesuffix("Request")


# -- frames ------------------------------------------------------------------------------------


def request_frame(request: Any, correlation_id: int, client_id: str = CLIENT_ID) -> bytes:
    """The frame of kio request ``request``, size prefix included."""
    from kio.serial import entity_writer

    cls = type(request)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = io.BytesIO()
    out.write(b"\0\0\0\0")  # the size, filled in below
    entity_writer(header_cls)(out, header)
    entity_writer(cls)(out, request)
    frame = out.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def parse_response(cls: type[Any], correlation_id: int, payload: bytes) -> Any:
    """The response in ``payload`` (a frame without its size) as kio's ``cls``, after
    checking its correlation id; ProtocolError if it is not that."""
    from kio.serial import entity_reader

    body_offset = _check_header(cls, correlation_id, payload)
    try:
        response, size = entity_reader(cls)(payload, body_offset)
    except Exception as exc:  # kio raises several types for malformed input
        raise ProtocolError(f"no {cls.__name__} v{cls.__version__}: {exc}") from None
    trailing = len(payload) - body_offset - size
    if trailing:
        raise ProtocolError(f"{trailing} bytes after the {cls.__name__}")
    return response


def _check_header(cls: type[Any], correlation_id: int, payload: bytes) -> int:
    """Where the body starts, after a response header with ``correlation_id``."""
    from kio.serial import entity_reader

    try:
        header, size = entity_reader(cls.__header_schema__)(payload, 0)
    except Exception as exc:
        raise ProtocolError(f"no response header: {exc}") from None
    if header.correlation_id != correlation_id:
        raise ProtocolError(
            f"an answer to request {header.correlation_id} instead of {correlation_id}"
        )
    return int(size)  # kio's readers return what they read and its size


def parse_api_versions(version: int, correlation_id: int, payload: bytes) -> Any:
    """An ApiVersions response. With UNSUPPORTED_VERSION the broker writes it in v0,
    whatever version was asked (KIP-511); its error code comes first in every version."""
    body_offset = _check_header(response_class(API_VERSIONS_KEY, 0), correlation_id, payload)
    if payload[body_offset : body_offset + 2] == struct.pack(">h", UNSUPPORTED_VERSION):
        version = 0
    return parse_response(response_class(API_VERSIONS_KEY, version), correlation_id, payload)


def software_version() -> str:
    """Our version as KIP-511 allows it (letters, digits, '-' and '.')."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-.") else "-" for c in __version__)
    return cleaned.strip("-.") or "unknown"


# -- the connection ----------------------------------------------------------------------------


def connect(
    bootstrap: Bootstrap, timeout_s: float = CONNECT_TIMEOUT_S
) -> tuple[socket.socket, Address]:
    """A TCP connection to the first bootstrap address that accepts one, and that address;
    else BrokerUnreachable naming why each failed (the words of ``clients.check_reachable``)."""
    failures = []
    for address in bootstrap.addresses:
        try:
            sock = socket.create_connection((address.host, address.port), timeout=timeout_s)
            return sock, address
        except OSError as exc:
            failures.append((address, _connect_failure(exc, address, timeout_s)))
    if len(failures) == 1:
        address, reason = failures[0]
        raise BrokerUnreachable(f"cannot reach a broker at {address} ({reason})")
    details = "; ".join(f"{address}: {reason}" for address, reason in failures)
    raise BrokerUnreachable(f"cannot reach any broker of {bootstrap} ({details})")


def _connect_failure(exc: OSError, address: Address, timeout_s: float) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, socket.gaierror):
        return f"unknown host {address.host!r}"
    return (exc.strerror or str(exc)).lower()


class KafkaConnection:
    """One connection to a broker whose API versions are known; see the module docstring.

    ``sock`` may be any connected stream socket, and ``clock`` any monotonic clock in
    seconds; ``open`` makes one from ``--bootstrap``."""

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        *,
        client_id: str = CLIENT_ID,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _load_kio()
        self._sock = sock
        self.peer = peer
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._clock = clock
        self._correlation_id = 0
        self.versions: dict[int, VersionRange] = {}
        """What the broker speaks, by API key (filled by ``negotiate``)."""

    @classmethod
    def open(cls, bootstrap: Bootstrap, **options: Any) -> KafkaConnection:
        """Connect to a bootstrap broker and learn its API versions."""
        sock, address = connect(bootstrap)
        connection = cls(sock, str(address), **options)
        try:
            connection.negotiate()
        except BaseException:
            connection.close()
            raise
        return connection

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- versions ------------------------------------------------------------------------------

    def negotiate(self) -> None:
        """Ask ApiVersions (v3, else the highest the broker names) and keep its answer."""
        response = self._api_versions(API_VERSIONS_ASKED)
        if response.error_code == UNSUPPORTED_VERSION:
            theirs = _ranges(response).get(API_VERSIONS_KEY, VersionRange(0, 0))
            version = common_version(VersionRange(0, API_VERSIONS_ASKED), theirs)
            if version is None:
                raise self.garbage(f"it speaks ApiVersions {theirs} only")
            response = self._api_versions(version)
        if response.error_code != 0:
            raise kafka_error("cannot ask the broker's API versions", response.error_code, None)
        self.versions = _ranges(response)

    def _api_versions(self, version: int) -> Any:
        request = build_request(
            API_VERSIONS_KEY,
            version,
            {"client_software_name": SOFTWARE_NAME, "client_software_version": software_version()},
        )
        correlation_id, payload = self._exchange(request, "ApiVersions")
        try:
            return parse_api_versions(version, correlation_id, payload)
        except ProtocolError as exc:
            raise self.garbage(str(exc)) from None

    def version_for(self, api_key: int, ours: VersionRange) -> int:
        """The highest version of ``api_key`` both sides speak, else CommandError
        UNSUPPORTED_VERSION."""
        theirs = self.versions.get(api_key)
        version = common_version(ours, theirs)
        if version is None:
            name = api_name(api_key, ours.max_version)
            speaks = "does not speak it" if theirs is None else f"speaks {theirs}"
            raise CommandError(
                f"the broker at {self.peer} cannot answer {name} {ours} (it {speaks})"
                " (UNSUPPORTED_VERSION)",
                "UNSUPPORTED_VERSION",
            )
        return version

    # -- requests ------------------------------------------------------------------------------

    def request(self, api_key: int, version: int, data: Mapping[str, Any]) -> Any:
        """Send one request built from ``data`` and return the broker's kio response."""
        request = build_request(api_key, version, data)
        correlation_id, payload = self._exchange(request, api_name(api_key, version))
        try:
            return parse_response(response_class(api_key, version), correlation_id, payload)
        except ProtocolError as exc:
            raise self.garbage(str(exc)) from None

    def _exchange(self, request: Any, name: str) -> tuple[int, bytes]:
        """Send ``request``; its correlation id and the response frame (without size)."""
        self._correlation_id += 1
        correlation_id = self._correlation_id
        frame = request_frame(request, correlation_id, self.client_id)
        deadline = self._clock() + self.request_timeout_s
        try:
            self._sock.settimeout(self.request_timeout_s)
            self._sock.sendall(frame)
            (size,) = struct.unpack(">i", self._read(4, deadline))
            if not 0 < size <= RESPONSE_BYTES_MAX:
                raise self.garbage(f"a response size of {size} bytes; {RESPONSE_BYTES_MAX} at most")
            return correlation_id, self._read(size, deadline)
        except TimeoutError:
            raise BrokerUnreachable(
                f"no answer to {name} from the broker at {self.peer}"
                f" within {self.request_timeout_s:g} s"
            ) from None
        except EOFError:
            raise BrokerUnreachable(
                f"the broker at {self.peer} closed the connection instead of answering {name}"
            ) from None
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise BrokerUnreachable(
                f"lost the connection to the broker at {self.peer} ({reason})"
            ) from None

    def _read(self, count: int, deadline: float) -> bytes:
        """Exactly ``count`` bytes before ``deadline``: TimeoutError, or EOFError when the
        peer closes first."""
        chunks = []
        missing = count
        while missing:
            left_s = deadline - self._clock()
            if left_s <= 0:
                raise TimeoutError
            self._sock.settimeout(left_s)
            chunk = self._sock.recv(min(missing, READ_CHUNK_BYTES))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    # -- errors --------------------------------------------------------------------------------

    def garbage(self, what: str) -> BrokerUnreachable:
        """The error for an answer that is not what a Kafka broker would send."""
        return BrokerUnreachable(
            f"the server at {self.peer} does not answer as a Kafka broker ({what})"
        )


def kafka_error(doing: str, code: int, message: str | None) -> CommandError:
    """The CommandError for error ``code`` in a response: the broker's message and Kafka's
    name for the code (``INVALID_REQUEST``)."""
    name = error_name(code)
    return CommandError(f"{doing}: {message or 'no reason given'} ({name})", name)


def error_name(code: int) -> str:
    """Kafka's name of an error code (``INVALID_REQUEST``), or ``ERROR_<code>``."""
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


def _ranges(response: Any) -> dict[int, VersionRange]:
    return {
        int(api.api_key): VersionRange(int(api.min_version), int(api.max_version))
        for api in response.api_keys
    }
