"""``weirmq quotas`` without a real broker: option parsing and the entities and requests
built from them, the request frames, version negotiation, and every failure the command
must turn into one line and an exit code.

The broker side is a ``FakeBroker`` on a local socket that reads our frames with the
broker's own decoder (``weirmq.protocols.kafka.wire``: kio's native reader behind a bounds
check, not the writer that produced them) and answers what each test tells it to, well
formed or not. The real broker and a real throttled client are in
tests/integration/test_cli_quotas.py.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import click
import kio.index
import pytest
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from weirmq.cli.clients import (
    EXIT_BROKER_ERROR,
    EXIT_UNREACHABLE,
    BrokerUnreachable,
    parse_bootstrap,
)
from weirmq.cli.kafka_request import (
    KafkaConnection,
    ProtocolError,
    VersionRange,
    build_request,
    common_version,
    parse_response,
    request_frame,
    software_version,
)
from weirmq.cli.main import main
from weirmq.cli.quotas import (
    ALTER_VERSIONS,
    CLIENT_ID,
    DESCRIBE_VERSIONS,
    USER,
    Component,
    alter_entity,
    alter_request,
    describe_filter,
    entity_choice,
    entity_text,
    parse_additions,
    quota_number,
)
from weirmq.protocols.kafka.wire import messages
from weirmq.protocols.kafka.wire.framing import parse_request_header, response_prefix

API_VERSIONS, DESCRIBE, ALTER = 18, 48, 49
USAGE = 2
POLL_S = 0.05
BROKER_VERSIONS = {API_VERSIONS: (0, 4), DESCRIBE: (0, 1), ALTER: (0, 1)}


# -- options -> entities and requests -----------------------------------------------------------


def test_one_choice_per_entity_type() -> None:
    assert entity_choice(CLIENT_ID, "app", False) == Component(CLIENT_ID, "exact", "app")
    assert entity_choice(USER, None, True) == Component(USER, "default")
    assert entity_choice(USER, None, False, True) == Component(USER, "any")
    assert entity_choice(USER, None, False) is None
    with pytest.raises(click.UsageError, match="--client-id and --client-id-default"):
        entity_choice(CLIENT_ID, "app", True)
    with pytest.raises(click.UsageError, match="--user-default and --user-any"):
        entity_choice(USER, None, True, True)


def test_describe_without_options_asks_for_everything() -> None:
    assert describe_filter([None, None]) == {"components": [], "strict": False}


def test_describe_with_options_is_strict_like_kafka_configs() -> None:
    request = describe_filter([Component(USER, "default"), Component(CLIENT_ID, "exact", "app")])
    assert request == {
        "components": [
            {"entity_type": "user", "match_type": 1, "match": None},
            {"entity_type": "client-id", "match_type": 0, "match": "app"},
        ],
        "strict": True,
    }
    any_client = describe_filter([None, Component(CLIENT_ID, "any")])
    assert any_client["components"] == [
        {"entity_type": "client-id", "match_type": 2, "match": None}
    ]


def test_alter_entity_puts_the_user_first_and_null_for_default() -> None:
    entity = alter_entity([Component(USER, "exact", "alice"), Component(CLIENT_ID, "default")])
    assert entity == (("user", "alice"), ("client-id", None))
    assert entity_text(entity) == "user alice, client-id <default>"
    with pytest.raises(click.UsageError, match="which quotas"):
        alter_entity([None, None])


def test_alter_request_sets_and_removes() -> None:
    request = alter_request(
        (("client-id", "app"),), {"producer_byte_rate": 1048576.0}, ["consumer_byte_rate"], True
    )
    assert request == {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "app"}],
                "ops": [
                    {"key": "producer_byte_rate", "value": 1048576.0, "remove": False},
                    {"key": "consumer_byte_rate", "value": 0.0, "remove": True},
                ],
            }
        ],
        "validate_only": True,
    }


def test_values_must_be_numbers_and_nothing_more() -> None:
    # As kafka-configs.sh: a number is all the client checks; keys, signs and ranges are
    # the broker's to refuse.
    assert parse_additions(["producer_byte_rate=1e6", "made_up=-3", "x=1", "x=2"]) == {
        "producer_byte_rate": 1_000_000.0,
        "made_up": -3.0,
        "x": 2.0,
    }
    with pytest.raises(ValueError, match="producer_byte_rate=fast: the value is not a number"):
        parse_additions(["producer_byte_rate=fast"])
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        parse_additions(["producer_byte_rate"])


def test_quota_numbers_print_whole_when_whole() -> None:
    assert quota_number(1048576.0) == 1048576
    assert isinstance(quota_number(1048576.0), int)
    assert quota_number(150.5) == 150.5


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["alter", "--add", "producer_byte_rate=1"], "which quotas?"),
        (["alter", "--client-id", "app"], "nothing to alter"),
        (["alter", "--client-id", "app", "--add", "producer_byte_rate=fast"], "not a number"),
        (["alter", "--client-id", "", "--add", "producer_byte_rate=1"], "--client-id-default"),
        (["alter", "--user", "u", "--user-default", "--delete", "x"], "cannot go together"),
        (["alter", "--client-id-any", "--add", "producer_byte_rate=1"], "No such option"),
        (["describe", "--client-id", "a", "--client-id-any"], "cannot go together"),
        (["describe", "--bootstrap", "nowhere"], "is not HOST:PORT"),
    ],
)
def test_usage_errors_exit_2_before_any_connection(args: list[str], complaint: str) -> None:
    result = CliRunner().invoke(main, ["quotas", *args], env={"WEIRMQ_BOOTSTRAP": "127.0.0.1:1"})
    assert result.exit_code == USAGE, result.output
    assert complaint in result.output


# -- frames ------------------------------------------------------------------------------------


def test_kio_has_every_version_we_offer() -> None:
    for api_key, ours in ((DESCRIBE, DESCRIBE_VERSIONS), (ALTER, ALTER_VERSIONS)):
        for version in range(ours.min_version, ours.max_version + 1):
            assert kio.index.load_request_schema(api_key, version).__api_key__ == api_key


@pytest.mark.parametrize(("version", "flexible"), [(0, False), (1, True)])
def test_request_frames_decode_with_the_brokers_decoder(version: int, flexible: bool) -> None:
    request = build_request(DESCRIBE, version, describe_filter([None, Component(CLIENT_ID, "any")]))
    frame = request_frame(request, correlation_id=7, client_id="cli")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header = parse_request_header(frame[4:], messages.request_is_flexible)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        DESCRIBE,
        version,
        7,
        "cli",
    )
    # Header v2 (flexible) ends with an empty tagged-field section, v1 with the client id.
    assert frame[4 + 8 + 2 + 3 : 4 + header.body_offset] == (b"\x00" if flexible else b"")
    decoded = messages.decode_request(DESCRIBE, version, frame[4:], header.body_offset)
    assert decoded.strict is True
    assert [(c.entity_type, c.match_type, c.match) for c in decoded.components] == [
        ("client-id", 2, None)
    ]


def test_a_response_must_answer_our_request_and_end_where_it_ends() -> None:
    cls = kio.index.load_response_schema(ALTER, 1)
    body = messages.encode(messages.build_response(ALTER, 1, {"throttle_time": 0, "entries": []}))
    payload = struct.pack(">i", 5) + b"\x00" + body
    assert parse_response(cls, 5, payload).entries == ()
    with pytest.raises(ProtocolError, match="an answer to request 5 instead of 6"):
        parse_response(cls, 6, payload)
    with pytest.raises(ProtocolError, match="2 bytes after the AlterClientQuotasResponse"):
        parse_response(cls, 5, payload + b"??")
    with pytest.raises(ProtocolError, match="no AlterClientQuotasResponse v1"):
        parse_response(cls, 5, payload[:-3])


def test_version_ranges_meet_at_their_highest_common_version() -> None:
    assert common_version(VersionRange(0, 1), VersionRange(0, 4)) == 1
    assert common_version(VersionRange(0, 3), VersionRange(1, 2)) == 2
    assert common_version(VersionRange(0, 1), VersionRange(2, 3)) is None
    assert common_version(VersionRange(0, 1), None) is None


def test_software_version_is_what_kip_511_allows() -> None:
    version = software_version()
    assert version
    assert all(c.isascii() and (c.isalnum() or c in "-.") for c in version)


# -- a fake broker -----------------------------------------------------------------------------

Answer = dict[str, Any] | bytes | None
"""Response data to encode, raw bytes to send as they are, or None to close."""


@dataclass
class FakeBroker:
    """A Kafka server on 127.0.0.1 in a thread: it decodes every request with the broker's
    own wire codec, answers ApiVersions from ``versions`` (in v0 with UNSUPPORTED_VERSION
    for a version above its own, as Kafka does) and every other request with ``answer``."""

    answer: Callable[[int, int, Any], Answer] = lambda key, version, request: None
    versions: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(BROKER_VERSIONS))
    seen: list[tuple[int, int, str | None, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(POLL_S)  # a closed socket does not wake a blocked accept
        self._stopped = threading.Event()
        self.bootstrap = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(10)
        self._server.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            # A client that gave up on a garbage answer may reset the connection.
            with conn, contextlib.suppress(ConnectionError):
                conn.settimeout(5)
                self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        while True:
            size_bytes = _recv(conn, 4)
            if size_bytes is None:
                return
            frame = _recv(conn, struct.unpack(">i", size_bytes)[0])
            assert frame is not None
            header = parse_request_header(frame, messages.request_is_flexible)
            key, version = header.api_key, header.api_version
            request = messages.decode_request(key, version, frame, header.body_offset)
            self.seen.append((key, version, header.client_id, request))
            answer: Answer
            if key == API_VERSIONS:
                answer = self._api_versions(version)
                if answer["error_code"] != ErrorCode.none:
                    version = 0
            else:
                answer = self.answer(key, version, request)
            if answer is None:
                return
            if isinstance(answer, dict):
                answer = _response(key, version, header.correlation_id, answer)
            conn.sendall(answer)

    def _api_versions(self, version: int) -> dict[str, Any]:
        low, high = self.versions[API_VERSIONS]
        return {
            "error_code": (
                ErrorCode.none if low <= version <= high else ErrorCode.unsupported_version
            ),
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(self.versions.items())
            ],
        }

    def sent(self) -> list[tuple[int, int]]:
        return [(key, version) for key, version, _, _ in self.seen]


def _recv(conn: socket.socket, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _response(key: int, version: int, correlation_id: int, data: dict[str, Any]) -> bytes:
    body = messages.encode(messages.build_response(key, version, {"throttle_time": 0, **data}))
    flexible = messages.response_header_is_flexible(key, version)
    return response_prefix(correlation_id, len(body), flexible_header=flexible) + body


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    yield broker
    broker.close()


def quotas(fake: FakeBroker, *args: str) -> Any:
    return CliRunner().invoke(main, ["quotas", *args, "--bootstrap", fake.bootstrap])


def one_line(result: Any, code: int) -> str:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    return str(result.stderr).removeprefix("weirmq: ").removesuffix("\n")


DESCRIBED = {
    "error_code": ErrorCode.none,
    "error_message": None,
    "entries": [
        {
            "entity": [{"entity_type": "client-id", "entity_name": "app"}],
            "values": [{"key": "producer_byte_rate", "value": 1048576.0}],
        },
        {
            "entity": [
                {"entity_type": "client-id", "entity_name": None},
                {"entity_type": "user", "entity_name": "alice"},
            ],
            "values": [
                {"key": "request_percentage", "value": 150.5},
                {"key": "consumer_byte_rate", "value": 2e6},
            ],
        },
    ],
}


# -- describe and alter against the fake --------------------------------------------------------


def test_describe_prints_a_table_or_json(fake: FakeBroker) -> None:
    fake.answer = lambda key, version, request: DESCRIBED
    result = quotas(fake, "describe")
    assert result.exit_code == 0, result.output
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["USER", "CLIENT-ID", "QUOTA", "VALUE"],
        ["-", "app", "producer_byte_rate", "1048576"],
        ["alice", "<default>", "consumer_byte_rate", "2000000"],
        ["alice", "<default>", "request_percentage", "150.5"],
    ]
    assert json.loads(quotas(fake, "describe", "--json").stdout) == {
        "quotas": [
            {"entity": {"client-id": "app"}, "values": {"producer_byte_rate": 1048576}},
            {
                "entity": {"user": "alice", "client-id": None},
                "values": {"consumer_byte_rate": 2000000, "request_percentage": 150.5},
            },
        ]
    }
    # ApiVersions v3 first, then the highest DescribeClientQuotas both speak, as weirmq-cli.
    assert fake.sent() == [(API_VERSIONS, 3), (DESCRIBE, 1)] * 2
    assert {client_id for _, _, client_id, _ in fake.seen} == {"weirmq-cli"}


def test_entity_types_we_do_not_set_are_shown_too(fake: FakeBroker) -> None:
    # A Kafka broker also keeps quotas on IP addresses (KIP-612).
    ip_entry = {
        "entity": [{"entity_type": "ip", "entity_name": "10.0.0.1"}],
        "values": [{"key": "connection_creation_rate", "value": 10.0}],
    }
    fake.answer = lambda key, version, request: {**DESCRIBED, "entries": [ip_entry]}
    result = quotas(fake, "describe")
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["USER", "CLIENT-ID", "IP", "QUOTA", "VALUE"],
        ["-", "-", "10.0.0.1", "connection_creation_rate", "10"],
    ]
    assert json.loads(quotas(fake, "describe", "--json").stdout)["quotas"] == [
        {"entity": {"ip": "10.0.0.1"}, "values": {"connection_creation_rate": 10}}
    ]


def test_describe_of_nothing_says_so_on_stderr(fake: FakeBroker) -> None:
    fake.answer = lambda key, version, request: {**DESCRIBED, "entries": []}
    result = quotas(fake, "describe", "--client-id", "nobody")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no quotas match" in result.stderr
    request = fake.seen[-1][3]
    assert request.strict is True
    assert [(c.entity_type, c.match_type, c.match) for c in request.components] == [
        ("client-id", 0, "nobody")
    ]


def test_a_describe_error_is_exit_1_with_the_brokers_message(fake: FakeBroker) -> None:
    fake.answer = lambda key, version, request: {
        "error_code": ErrorCode.invalid_request,
        "error_message": "unknown entity type 'ip'",
        "entries": None,
    }
    line = one_line(quotas(fake, "describe"), EXIT_BROKER_ERROR)
    assert line == "cannot describe quotas: unknown entity type 'ip' (INVALID_REQUEST)"


def test_alter_sends_one_entry_and_reports_it(fake: FakeBroker) -> None:
    def answer(key: int, version: int, request: Any) -> Answer:
        (entry,) = request.entries
        entity = [
            {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity
        ]
        return {
            "entries": [{"error_code": ErrorCode.none, "error_message": None, "entity": entity}]
        }

    fake.answer = answer
    args = ("alter", "--user-default", "--client-id", "app", "--add", "producer_byte_rate=1048576")
    result = quotas(fake, *args, "--delete", "consumer_byte_rate")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "Altered the quotas of user <default>, client-id app: producer_byte_rate=1048576,"
        " consumer_byte_rate removed.\n"
    )
    _, version, _, request = fake.seen[-1]
    assert version == 1
    assert request.validate_only is False
    (entry,) = request.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [
        ("user", None),
        ("client-id", "app"),
    ]
    assert [(op.key, op.value, op.remove) for op in entry.ops] == [
        ("producer_byte_rate", 1048576.0, False),
        ("consumer_byte_rate", 0.0, True),
    ]
    validated = quotas(fake, *args, "--validate-only", "--json")
    assert json.loads(validated.stdout) == {
        "entity": {"user": None, "client-id": "app"},
        "set": {"producer_byte_rate": 1048576},
        "deleted": [],
        "validate_only": True,
    }
    assert fake.seen[-1][3].validate_only is True


def test_a_refused_alteration_is_exit_1_with_the_brokers_message(fake: FakeBroker) -> None:
    fake.answer = lambda key, version, request: {
        "entries": [
            {
                "error_code": ErrorCode.invalid_request,
                "error_message": "unknown or unsupported quota key 'bogus'",
                "entity": [{"entity_type": "client-id", "entity_name": "app"}],
            }
        ]
    }
    line = one_line(quotas(fake, "alter", "--client-id", "app", "--add", "bogus=1"), 1)
    assert line == (
        "cannot alter the quotas of client-id app: unknown or unsupported quota key 'bogus'"
        " (INVALID_REQUEST)"
    )


# -- versions ----------------------------------------------------------------------------------


def test_an_older_broker_is_asked_in_versions_it_knows(fake: FakeBroker) -> None:
    fake.versions = {API_VERSIONS: (0, 2), DESCRIBE: (0, 0)}
    fake.answer = lambda key, version, request: DESCRIBED
    result = quotas(fake, "describe", "--json")
    assert result.exit_code == 0, result.output
    # v3 is answered in v0 with UNSUPPORTED_VERSION and the range; then v2, then v0 of 48
    # (not flexible: request header v1).
    assert fake.sent() == [(API_VERSIONS, 3), (API_VERSIONS, 2), (DESCRIBE, 0)]


def test_a_broker_without_the_api_is_exit_1_without_asking(fake: FakeBroker) -> None:
    fake.versions = {API_VERSIONS: (0, 3), ALTER: (2, 3)}
    line = one_line(quotas(fake, "describe"), EXIT_BROKER_ERROR)
    assert line == (
        f"the broker at {fake.bootstrap} cannot answer DescribeClientQuotas v0-1"
        " (it does not speak it) (UNSUPPORTED_VERSION)"
    )
    line = one_line(quotas(fake, "alter", "--user", "u", "--delete", "x"), EXIT_BROKER_ERROR)
    assert "cannot answer AlterClientQuotas v0-1 (it speaks v2-3)" in line
    assert fake.sent() == [(API_VERSIONS, 3)] * 2


# -- failures: exit code 3 ---------------------------------------------------------------------


def test_no_broker_is_exit_3(unused_port: int) -> None:
    result = CliRunner().invoke(main, ["quotas", "describe", "-b", f"127.0.0.1:{unused_port}"])
    line = one_line(result, EXIT_UNREACHABLE)
    assert line == f"cannot reach a broker at 127.0.0.1:{unused_port} (connection refused)"
    both = f"127.0.0.1:{unused_port},[::1]:{unused_port}"
    result = CliRunner().invoke(main, ["quotas", "describe", "-b", both])
    assert one_line(result, EXIT_UNREACHABLE).startswith(f"cannot reach any broker of {both} (")


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A port that refuses connections: bound, so nobody else takes it, but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (None, "closed the connection instead of answering DescribeClientQuotas"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "a response size of 1213486160 bytes"),
        (struct.pack(">i", -1), "a response size of -1 bytes"),
        (struct.pack(">ii", 5, 99) + b"\x00", "an answer to request 99 instead of 2"),
        (struct.pack(">ii", 7, 2) + b"\x00\x00\x00", "no DescribeClientQuotasResponse v1"),
    ],
)
def test_garbage_is_exit_3_in_one_line(fake: FakeBroker, answer: Answer, complaint: str) -> None:
    fake.answer = lambda key, version, request: answer
    line = one_line(quotas(fake, "describe"), EXIT_UNREACHABLE)
    assert complaint in line
    assert line.startswith(f"the broker at {fake.bootstrap}") or line.startswith(
        f"the server at {fake.bootstrap} does not answer as a Kafka broker"
    )


def test_every_wait_is_bounded(fake: FakeBroker) -> None:
    silence = threading.Event()

    def answer(key: int, version: int, request: Any) -> Answer:
        silence.wait(10)
        return None

    fake.answer = answer
    bootstrap = parse_bootstrap(fake.bootstrap)
    try:
        with (
            KafkaConnection.open(bootstrap, request_timeout_s=0.2) as connection,
            pytest.raises(BrokerUnreachable, match="no answer to DescribeClientQuotas"),
        ):
            connection.request(DESCRIBE, 1, {"components": [], "strict": False})
    finally:
        silence.set()
