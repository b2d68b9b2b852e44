"""The broker's request handlers, driven the way a Kafka client drives them.

Every test goes through `Dispatcher.handle`: a request frame (header and body, as the
listener passes it on) goes in, and the reply is decoded with kio's response class for the
version asked for. So each test checks the decoding of the request, the handler, and the
encoding of its answer together, against what Kafka's own clients rely on: the exact error
code of every refusal, the offsets they get back, and how fetches wait.

Requests are written from plain data (`build`), the way `weirmq.wire.messages` writes
responses: one description serves every version of an API, fields a version lacks are
dropped, and fields left out take the schema's default or a zero value. By default the
tests speak the newest version of each API that still names topics by name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import io
import shutil
import struct
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import kio.index
import pytest
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from weirmq.broker.core import Broker
from weirmq.broker.partition import PRODUCER_STATE_FILE
from weirmq.protocols.kafka.dispatch import (
    API_VERSIONS,
    CloseConnection,
    Dispatcher,
    Outcome,
    Reply,
)
from weirmq.records.batch import (
    ATTR_TRANSACTIONAL,
    BatchHeader,
    Record,
    encode_batch,
    parse_header,
)
from weirmq.settings import Settings
from weirmq.storage import log as storage_log
from weirmq.storage.log import FileLog
from weirmq.storage.manager import CLEAN_SHUTDOWN_FILE
from weirmq.testing.records import make_batch, split_batches
from weirmq.types import Clock, Timers

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS_KEY, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 18, 22, 23

# The newest versions that still name topics by name (Produce v13 and Fetch v13 use ids).
LATEST = {
    PRODUCE: 12,
    FETCH: 12,
    LIST_OFFSETS: 10,
    METADATA: 12,
    API_VERSIONS_KEY: 4,
    INIT_PRODUCER_ID: 5,
    OFFSET_FOR_LEADER_EPOCH: 4,
}
CORRELATION_ID = 4242
MIB = 1 << 20
EARLIEST, LATEST_OFFSET, MAX_TIMESTAMP = -2, -1, -3


# --- building requests and reading replies --------------------------------------------------


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """The kio entity `cls` from plain data: lists of mappings become tuples of entities and
    ints become timedeltas where kio wants one. Keys the version lacks are ignored; fields
    left out take the schema's default, or a zero value when the schema has none."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if field.name in data:
            kwargs[field.name] = _converted(hint, field.metadata, data[field.name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kwargs[field.name] = _zero(hint)
    return cls(**kwargs)


def _converted(hint: Any, metadata: Mapping[str, Any], value: Any) -> Any:
    if value is None:
        return None
    if metadata.get("kafka_type", "").startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    hint = _without_none(hint)
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(element):
            return tuple(build(element, item) for item in value)
        return tuple(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build(hint, value)
    return value


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return inner
    return hint


def _zero(hint: Any) -> Any:
    """The smallest valid value of a field: null, empty, zero."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return None
    if typing.get_origin(hint) is tuple:
        return ()
    if dataclasses.is_dataclass(hint):
        return build(hint, {})
    for kind, zero in (
        (bool, False),
        (int, 0),
        (str, ""),
        (bytes, b""),
        (datetime.timedelta, datetime.timedelta(0)),
        (uuid.UUID, uuid.UUID(int=0)),
    ):
        if isinstance(hint, type) and issubclass(hint, kind):
            return zero
    raise AssertionError(f"no zero value for {hint!r}")


def raw_frame(api_key: int, version: int, body: bytes = b"", *, flexible: bool = False) -> bytes:
    """A request frame (without its size) with any header, and `body` as it is."""
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    out = io.BytesIO()
    header = header_cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=CORRELATION_ID,
        client_id="test-client",
    )
    entity_writer(header_cls)(out, header)
    return out.getvalue() + body


def request_frame(api_key: int, version: int, data: Mapping[str, Any]) -> bytes:
    """A request frame as a Kafka client writes it: header v2 for flexible versions."""
    cls = kio.index.load_request_schema(api_key, version)
    body = io.BytesIO()
    entity_writer(cls)(body, build(cls, data))
    return raw_frame(api_key, version, body.getvalue(), flexible=cls.__flexible__)


def decode_reply(api_key: int, version: int, reply: Reply | None) -> Any:
    """The response in `reply`, after checking its size, correlation id and header."""
    assert isinstance(reply, Reply), f"expected a reply, got {reply!r}"
    cls = kio.index.load_response_schema(api_key, version)
    (size,) = struct.unpack_from(">i", reply.prefix)
    assert size == reply.size - 4
    (correlation_id,) = struct.unpack_from(">i", reply.prefix, 4)
    assert correlation_id == CORRELATION_ID
    flexible_header = cls.__header_schema__.__flexible__
    assert reply.prefix[8:] == (b"\x00" if flexible_header else b"")
    body = b"".join(reply.body)
    response, end = entity_reader(cls)(body, 0)
    assert end == len(body), "trailing bytes after the response"
    return response


def resolve(outcome: Outcome) -> Reply | None:
    """The reply, waiting for it in a fresh event loop when the handler has to wait."""
    if not inspect.isawaitable(outcome):
        return outcome
    awaitable = outcome

    async def wait() -> Reply | None:
        return await awaitable

    return asyncio.run(wait())


def batch_headers(records: bytes | None) -> list[BatchHeader]:
    return [parse_header(batch) for batch in split_batches(records or b"")]


def by_topic(items: Iterable[tuple[str, int, Any]]) -> list[tuple[str, list[tuple[int, Any]]]]:
    """(topic, partition, x) triples grouped by topic, in order of first appearance."""
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for topic, partition, value in items:
        grouped.setdefault(topic, []).append((partition, value))
    return list(grouped.items())


def produce_request(
    batches: Iterable[tuple[str, int, bytes | None]],
    *,
    acks: int = 1,
    transactional_id: str | None = None,
) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": 30_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": r} for p, r in parts]}
            for topic, parts in by_topic(batches)
        ],
    }


def fetch_request(
    wanted: Iterable[tuple[str, int, int]],
    *,
    max_bytes: int = 50 * MIB,
    partition_max_bytes: int = MIB,
    min_bytes: int = 0,
    max_wait_ms: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    current_leader_epoch: int = -1,
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "fetch_offset": offset,
                        "partition_max_bytes": partition_max_bytes,
                        "current_leader_epoch": current_leader_epoch,
                    }
                    for p, offset in parts
                ],
            }
            for topic, parts in by_topic(wanted)
        ],
        "forgotten_topics_data": [],
    }


def list_offsets_request(
    wanted: Iterable[tuple[str, int, int]], *, current_leader_epoch: int = -1
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "timestamp": ts,
                        "current_leader_epoch": current_leader_epoch,
                    }
                    for p, ts in parts
                ],
            }
            for topic, parts in by_topic(wanted)
        ],
    }


def leader_epoch_request(
    wanted: Iterable[tuple[str, int, int]], *, current_leader_epoch: int = -1
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "leader_epoch": epoch,
                        "current_leader_epoch": current_leader_epoch,
                    }
                    for p, epoch in parts
                ],
            }
            for topic, parts in by_topic(wanted)
        ],
    }


def idempotent_batch(
    pid: int, epoch: int, first_seq: int, count: int = 1, ts: int = 1_000
) -> bytes:
    records = [Record(value=b"v%d" % (first_seq + i), timestamp_ms=ts + i) for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=first_seq)


def corrupted(batch: bytes) -> bytes:
    """`batch` with one byte of its last record flipped: the CRC no longer matches."""
    return batch[:-1] + bytes([batch[-1] ^ 0xFF])


# --- the client -----------------------------------------------------------------------------


class Client:
    """A broker and its dispatcher, spoken to in request frames."""

    def __init__(
        self, settings: Settings, *, clock: Clock | None = None, timers: Timers | None = None
    ) -> None:
        self.settings = settings
        self._time = {"clock": clock, "timers": timers}
        self.broker = Broker(settings, **self._time)  # type: ignore[arg-type]
        self.dispatcher = Dispatcher(self.broker)
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.broker.close()

    def restart(self) -> None:
        """A clean shutdown, then a new broker on the same data directory."""
        self.close()
        self.broker = Broker(self.settings, **self._time)  # type: ignore[arg-type]
        self.dispatcher = Dispatcher(self.broker)
        self.closed = False

    def send(self, api_key: int, data: Mapping[str, Any], version: int | None = None) -> Outcome:
        version = LATEST[api_key] if version is None else version
        return self.dispatcher.handle(request_frame(api_key, version, data))

    def call(self, api_key: int, data: Mapping[str, Any], version: int | None = None) -> Any:
        version = LATEST[api_key] if version is None else version
        return decode_reply(api_key, version, resolve(self.send(api_key, data, version)))

    def log(self, topic: str, partition: int = 0) -> FileLog:
        found = self.broker.partition_log(topic, partition)
        assert found is not None, f"no log for {topic}-{partition}"
        return found

    # One call, one partition, the partition's answer.

    def produce(
        self,
        topic: str,
        records: bytes | None,
        *,
        partition: int = 0,
        acks: int = 1,
        transactional_id: str | None = None,
        version: int | None = None,
    ) -> Any:
        request = produce_request(
            [(topic, partition, records)], acks=acks, transactional_id=transactional_id
        )
        (answer,) = produce_results(self.call(PRODUCE, request, version))
        return answer

    def fetch(self, topic: str, offset: int, *, partition: int = 0, **options: Any) -> Any:
        response = self.call(FETCH, fetch_request([(topic, partition, offset)], **options))
        assert response.error_code == ErrorCode.none
        (answer,) = fetch_results(response)
        return answer

    def list_offset(self, topic: str, timestamp: int, *, partition: int = 0, **kw: Any) -> Any:
        request = list_offsets_request([(topic, partition, timestamp)], **kw)
        (topic_answer,) = self.call(LIST_OFFSETS, request).topics
        (answer,) = topic_answer.partitions
        return answer

    def epoch_end(self, topic: str, epoch: int, *, partition: int = 0, **kw: Any) -> Any:
        request = leader_epoch_request([(topic, partition, epoch)], **kw)
        (topic_answer,) = self.call(OFFSET_FOR_LEADER_EPOCH, request).topics
        (answer,) = topic_answer.partitions
        return answer

    def metadata(self, topics: list[str] | None, version: int | None = None, **kw: Any) -> Any:
        wanted = None if topics is None else [{"name": t} for t in topics]
        return self.call(METADATA, {"topics": wanted, **kw}, version)

    def producer_id(self) -> int:
        response = self.call(INIT_PRODUCER_ID, {"transactional_id": None})
        assert response.error_code == ErrorCode.none
        assert response.producer_epoch == 0
        return int(response.producer_id)


def produce_results(response: Any) -> list[Any]:
    return [p for topic in response.responses for p in topic.partition_responses]


def fetch_results(response: Any) -> list[Any]:
    return [p for topic in response.responses for p in topic.partitions]


OpenClient = Callable[..., Client]


@pytest.fixture
def open_client(tmp_path: Path) -> Iterator[OpenClient]:
    """Opens brokers (by default on tmp_path/data) with Settings overrides; all are closed
    at the end of the test."""
    opened: list[Client] = []

    def factory(data_dir: Path | None = None, **overrides: Any) -> Client:
        client = Client(Settings(data_dir=data_dir or tmp_path / "data", **overrides))
        opened.append(client)
        return client

    yield factory
    for client in opened:
        client.close()


@pytest.fixture
def client(open_client: OpenClient) -> Client:
    return open_client()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """One broker for the tests that only touch topics of their own: opening and closing a
    broker costs a dozen fsyncs, and the version sweeps are many."""
    client = Client(Settings(data_dir=tmp_path_factory.mktemp("shared")))
    yield client
    client.close()


def reopen(client: Client, how: str, open_client: OpenClient, tmp_path: Path) -> Client:
    """A broker on `client`'s data after a clean shutdown or a crash.

    clean        close, reopen: the producer snapshot and the clean-shutdown marker are used
    no-snapshot  close, delete the producer snapshot and the marker: the log is replayed
    crash        copy the data directory while the broker runs (what a power cut leaves
                 behind, minus unflushed page cache), open a broker on the copy
    """
    if how == "clean":
        client.restart()
        return client
    data_dir = client.settings.data_dir
    if how == "no-snapshot":
        client.close()
        assert (data_dir / PRODUCER_STATE_FILE).exists(), "a clean close writes the snapshot"
        for path in [data_dir / PRODUCER_STATE_FILE, data_dir / CLEAN_SHUTDOWN_FILE]:
            path.unlink()
        return open_client(data_dir=data_dir, flush_interval_ms=client.settings.flush_interval_ms)
    assert how == "crash", how
    copy = tmp_path / "crashed"
    shutil.copytree(data_dir, copy)
    assert not (copy / CLEAN_SHUTDOWN_FILE).exists()
    assert not (copy / PRODUCER_STATE_FILE).exists()
    return open_client(data_dir=copy, flush_interval_ms=client.settings.flush_interval_ms)


RESTARTS = ["clean", "no-snapshot", "crash"]
QUIET = {"flush_interval_ms": 3_600_000}  # only acks=all and close flush; no checkpoint races


# --- ApiVersions and the dispatcher ---------------------------------------------------------


def advertised_table(response: Any) -> dict[int, tuple[int, int]]:
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}


EXPECTED_TABLE = {key: (api.min_version, api.max_version) for key, api in API_VERSIONS.items()}
ADVERTISED = [
    (key, version)
    for key, api in sorted(API_VERSIONS.items())
    for version in range(api.min_version, api.max_version + 1)
]


@pytest.mark.parametrize("version", range(5))
def test_api_versions_answers_the_table_in_every_version(shared: Client, version: int) -> None:
    response = shared.call(API_VERSIONS_KEY, {}, version)
    assert response.error_code == ErrorCode.none
    assert advertised_table(response) == EXPECTED_TABLE
    assert [int(a.api_key) for a in response.api_keys] == sorted(EXPECTED_TABLE)


def test_api_versions_table_covers_what_clients_need() -> None:
    # Kafka 4.0 removed Produce v0-v2 and Fetch v0-v3: v3 and v4 are what every client has.
    assert EXPECTED_TABLE[API_VERSIONS_KEY] == (0, 4)
    assert EXPECTED_TABLE[PRODUCE][0] <= 3 <= EXPECTED_TABLE[PRODUCE][1]
    assert EXPECTED_TABLE[FETCH][0] <= 4 <= EXPECTED_TABLE[FETCH][1]
    assert {PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID} <= set(EXPECTED_TABLE)


@pytest.mark.parametrize("flexible", [False, True])
def test_api_versions_above_the_max_gets_a_v0_answer_with_the_table(
    client: Client, flexible: bool
) -> None:
    # Newer clients send a version we do not know, with whichever header that version uses.
    reply = client.dispatcher.handle(raw_frame(API_VERSIONS_KEY, 99, b"\x00", flexible=flexible))
    assert isinstance(reply, Reply)
    assert len(reply.prefix) == 8  # response header v0: size and correlation id only
    response = decode_reply(API_VERSIONS_KEY, 0, reply)
    assert response.error_code == ErrorCode.unsupported_version
    assert advertised_table(response) == EXPECTED_TABLE


def test_api_versions_with_a_malformed_body_is_answered_invalid_request(client: Client) -> None:
    reply = client.dispatcher.handle(raw_frame(API_VERSIONS_KEY, 3, b"\xff\xff", flexible=True))
    response = decode_reply(API_VERSIONS_KEY, 3, resolve(reply))
    assert response.error_code == ErrorCode.invalid_request
    assert advertised_table(response) == EXPECTED_TABLE


# The smallest request of each API that the broker must answer (not None, not a close).
MINIMAL_REQUESTS: dict[int, dict[str, Any]] = {PRODUCE: {"acks": 1}}


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED)
def test_every_advertised_version_is_decoded_and_answered(
    shared: Client, api_key: int, version: int
) -> None:
    assert kio.index.load_request_schema(api_key, version).__version__ == version
    reply = resolve(shared.send(api_key, MINIMAL_REQUESTS.get(api_key, {}), version))
    decode_reply(api_key, version, reply)  # decodes as this version's response


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (999, 0),  # no such API
        (11, 5),  # JoinGroup: a Kafka API this broker does not speak
        (PRODUCE, 2),  # below the minimum (Kafka 4 removed Produce v0-v2)
        (PRODUCE, 13),  # above the maximum
        (FETCH, 3),
        (METADATA, 13),
    ],
)
def test_unanswerable_frames_close_the_connection(
    shared: Client, api_key: int, version: int
) -> None:
    body = io.BytesIO()
    cls = kio.index.load_request_schema(PRODUCE, 12)
    entity_writer(cls)(body, build(cls, produce_request([("unanswered", 0, make_batch())])))
    with pytest.raises(CloseConnection):
        shared.dispatcher.handle(raw_frame(api_key, version, body.getvalue()))
    assert shared.broker.topics.get("unanswered") is None  # nothing was acted upon


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03\x00",  # shorter than a request header
        raw_frame(METADATA, 12, b"\x05", flexible=True),  # body ends inside the topic array
        raw_frame(PRODUCE, 12, b"\x00\x01", flexible=True),  # truncated produce
        raw_frame(FETCH, 4, b"\x00" * 7),  # truncated fetch
    ],
    ids=["short-header", "metadata", "produce", "fetch"],
)
def test_malformed_frames_close_the_connection(shared: Client, frame: bytes) -> None:
    with pytest.raises(CloseConnection):
        shared.dispatcher.handle(frame)


# --- Metadata -------------------------------------------------------------------------------


def topic_names(response: Any) -> set[str]:
    return {t.name for t in response.topics}


def only_topic(response: Any) -> Any:
    (topic,) = response.topics
    return topic


def test_metadata_null_topics_means_every_topic(client: Client) -> None:
    client.broker.create_topic("a", 1)
    client.broker.create_topic("b", 2)
    assert topic_names(client.metadata(None)) == {"a", "b"}


def test_metadata_v0_empty_list_means_every_topic(client: Client) -> None:
    client.broker.create_topic("a", 1)
    client.broker.create_topic("b", 2)
    assert topic_names(client.metadata([], version=0)) == {"a", "b"}


@pytest.mark.parametrize("version", [1, 4, 12])
def test_metadata_v1_and_later_empty_list_means_no_topic(client: Client, version: int) -> None:
    client.broker.create_topic("a", 1)
    response = client.metadata([], version=version)
    assert response.topics == ()
    assert len(response.brokers) == 1


def test_metadata_auto_creates_with_the_default_partition_count(
    open_client: OpenClient,
) -> None:
    client = open_client(default_partitions=3)
    topic = only_topic(client.metadata(["fresh"]))
    assert topic.error_code == ErrorCode.none
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert all(p.error_code == ErrorCode.none for p in topic.partitions)
    assert client.broker.topics.get("fresh") is not None
    assert client.log("fresh", 2).log_end_offset == 0


def test_metadata_without_allow_auto_topic_creation_is_unknown_topic(client: Client) -> None:
    topic = only_topic(client.metadata(["fresh"], allow_auto_topic_creation=False))
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert topic.partitions == ()
    assert client.broker.topics.get("fresh") is None


def test_metadata_with_auto_create_disabled_is_unknown_topic(open_client: OpenClient) -> None:
    client = open_client(auto_create_topics=False)
    topic = only_topic(client.metadata(["fresh"]))
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert client.broker.topics.get("fresh") is None


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x/y", "é", "n" * 250])
@pytest.mark.parametrize("allow", [True, False])
def test_metadata_invalid_topic_names(shared: Client, name: str, allow: bool) -> None:
    topic = only_topic(shared.metadata([name], allow_auto_topic_creation=allow))
    assert topic.error_code == ErrorCode.invalid_topic_exception
    assert shared.broker.topics.get(name) is None


def test_metadata_longest_legal_name_is_created(client: Client) -> None:
    name = "n" * 249
    assert only_topic(client.metadata([name])).error_code == ErrorCode.none


def test_metadata_topic_ids_are_stable(client: Client) -> None:
    first = only_topic(client.metadata(["t"])).topic_id
    assert first != uuid.UUID(int=0)
    assert only_topic(client.metadata(["t"])).topic_id == first
    assert only_topic(client.metadata(None)).topic_id == first


def by_id(topic_id: uuid.UUID) -> dict[str, Any]:
    return {"topics": [{"topic_id": topic_id, "name": None}]}


def test_metadata_lookup_by_topic_id(client: Client) -> None:
    client.broker.create_topic("t", 2)
    topic_id = only_topic(client.metadata(["t"])).topic_id
    found = only_topic(client.call(METADATA, by_id(topic_id), 12))
    assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, "t", topic_id)
    assert len(found.partitions) == 2

    unknown = uuid.uuid4()
    missing = only_topic(client.call(METADATA, by_id(unknown), 12))
    assert (missing.error_code, missing.name) == (ErrorCode.unknown_topic_id, None)
    assert missing.topic_id == unknown


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_lookup_by_unknown_topic_id_before_v12(client: Client, version: int) -> None:
    missing = only_topic(client.call(METADATA, by_id(uuid.uuid4()), version))
    assert (missing.error_code, missing.name) == (ErrorCode.invalid_request, "")


def test_metadata_describes_this_broker_at_its_advertised_address(
    open_client: OpenClient,
) -> None:
    client = open_client(node_id=7)
    client.broker.advertised = ("kafka.example", 19092)
    response = client.metadata(["t"])
    (broker,) = response.brokers
    assert (broker.node_id, broker.host, broker.port) == (7, "kafka.example", 19092)
    assert response.controller_id == 7
    assert response.cluster_id == client.broker.cluster_id
    (partition,) = only_topic(response).partitions
    assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (7, (7,), (7,))


def test_topics_survive_a_restart(open_client: OpenClient) -> None:
    client = open_client(default_partitions=3)
    client.broker.create_topic("one", 1)
    client.metadata(["auto"])
    before = {t.name: (t.topic_id, len(t.partitions)) for t in client.metadata(None).topics}
    cluster_id = client.broker.cluster_id
    client.restart()
    after = {t.name: (t.topic_id, len(t.partitions)) for t in client.metadata(None).topics}
    assert after == before == {"one": (before["one"][0], 1), "auto": (before["auto"][0], 3)}
    assert client.broker.cluster_id == cluster_id


# --- Produce --------------------------------------------------------------------------------


def test_produce_acks_1_answers_increasing_base_offsets(client: Client) -> None:
    answers = [client.produce("t", make_batch(n)) for n in (2, 3, 1)]
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (ErrorCode.none, 0),
        (ErrorCode.none, 2),
        (ErrorCode.none, 5),
    ]
    assert all(a.log_start_offset == 0 for a in answers)
    assert client.log("t").log_end_offset == 6


def test_produce_acks_all_answers_once_the_batch_is_durable(open_client: OpenClient) -> None:
    client = open_client(**QUIET)
    client.broker.create_topic("t", 1)
    request = produce_request([("t", 0, make_batch(4))], acks=-1)
    outcome = client.send(PRODUCE, request)
    partition_log = client.log("t")
    assert inspect.isawaitable(outcome), "acks=all must wait for the fsync"
    assert partition_log.log_end_offset == 4  # appended at once, in arrival order
    assert partition_log.flushed_offset < 4  # ...but not yet durable
    (answer,) = produce_results(decode_reply(PRODUCE, LATEST[PRODUCE], resolve(outcome)))
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert partition_log.flushed_offset >= 4


@pytest.mark.parametrize("partitions", [1, 3])  # one partition is awaited, several gathered
def test_produce_acks_all_answers_storage_error_when_the_fsync_fails(
    open_client: OpenClient, monkeypatch: pytest.MonkeyPatch, partitions: int
) -> None:
    client = open_client(**QUIET)
    client.broker.create_topic("t", partitions)
    request = produce_request([("t", p, make_batch(2)) for p in range(partitions)], acks=-1)

    def failing_fsync(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("weirmq.storage.log._fsync_path", failing_fsync)
    outcome = client.send(PRODUCE, request)
    answers = produce_results(decode_reply(PRODUCE, LATEST[PRODUCE], resolve(outcome)))
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (ErrorCode.kafka_storage_error, -1)
    ] * partitions


def test_an_idempotent_retry_after_a_failed_fsync_is_written_again(
    open_client: OpenClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed batch is rolled back with the producer state that knew it: the retry is
    appended again (not answered as a duplicate of offsets that no longer exist), and what
    was durable before stays readable."""
    client = open_client(**QUIET)
    client.broker.create_topic("t", 1)
    pid = client.producer_id()
    first = client.produce("t", idempotent_batch(pid, 0, 0, 2), acks=-1)
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    failing = {"on": True}
    real = storage_log._fsync_path

    def fsync(path: str) -> None:
        if failing["on"]:
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(storage_log, "_fsync_path", fsync)
    batch = idempotent_batch(pid, 0, 2, 3)
    failed = client.produce("t", batch, acks=-1)
    assert (failed.error_code, failed.base_offset) == (ErrorCode.kafka_storage_error, -1)
    assert client.fetch("t", 0).error_code == ErrorCode.none  # the durable part is served
    assert client.log("t").log_end_offset == 2  # the undurable batch rolled back
    failing["on"] = False
    retried = client.produce("t", batch, acks=-1)
    assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
    assert client.log("t").log_end_offset == 5


def test_produce_acks_0_is_not_answered_but_appended(client: Client) -> None:
    request = produce_request([("t", 0, make_batch(3))], acks=0)
    assert client.send(PRODUCE, request) is None
    assert client.log("t").log_end_offset == 3


@pytest.mark.parametrize("acks", [2, -2])
def test_produce_invalid_acks(client: Client, acks: int) -> None:
    client.broker.create_topic("t", 1)
    answer = client.produce("t", make_batch(), acks=acks)
    assert answer.error_code == ErrorCode.invalid_required_acks
    assert client.log("t").log_end_offset == 0


def test_produce_to_an_unknown_partition(client: Client) -> None:
    client.broker.create_topic("t", 2)
    answer = client.produce("t", make_batch(), partition=2)
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert answer.base_offset == -1


def test_produce_batch_over_message_max_bytes(open_client: OpenClient) -> None:
    client = open_client(message_max_bytes=300)
    small, large = make_batch(1, size=100), make_batch(1, size=400)
    assert len(small) <= 300 < len(large)
    assert client.produce("t", large).error_code == ErrorCode.message_too_large
    assert client.log("t").log_end_offset == 0
    assert client.produce("t", small).error_code == ErrorCode.none


def test_produce_corrupt_crc(client: Client) -> None:
    answer = client.produce("t", corrupted(make_batch(2)))
    assert answer.error_code == ErrorCode.corrupt_message
    assert client.log("t").log_end_offset == 0


def test_produce_many_partitions_and_topics_each_get_their_own_answer(client: Client) -> None:
    client.broker.create_topic("a", 2)
    client.broker.create_topic("b", 1)
    client.produce("a", make_batch(5), partition=1)
    request = produce_request(
        [
            ("a", 0, make_batch(2)),
            ("a", 1, make_batch(1)),
            ("a", 7, make_batch(1)),
            ("b", 0, corrupted(make_batch(1))),
            ("c", 0, make_batch(3)),  # auto-created
        ]
    )
    response = client.call(PRODUCE, request)
    answers = {
        (t.name, int(p.index)): (p.error_code, p.base_offset)
        for t in response.responses
        for p in t.partition_responses
    }
    assert answers == {
        ("a", 0): (ErrorCode.none, 0),
        ("a", 1): (ErrorCode.none, 5),
        ("a", 7): (ErrorCode.unknown_topic_or_partition, -1),
        ("b", 0): (ErrorCode.corrupt_message, -1),
        ("c", 0): (ErrorCode.none, 0),
    }
    assert [t.name for t in response.responses] == ["a", "b", "c"]


def test_produce_auto_creates_topics(open_client: OpenClient) -> None:
    client = open_client(default_partitions=2)
    assert client.produce("new", make_batch(), partition=1).error_code == ErrorCode.none
    assert len(only_topic(client.metadata(["new"])).partitions) == 2


def test_produce_does_not_create_topics_when_auto_create_is_off(open_client: OpenClient) -> None:
    client = open_client(auto_create_topics=False)
    answer = client.produce("new", make_batch())
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert client.broker.topics.get("new") is None


def test_produce_with_a_transactional_id_and_a_plain_batch_is_written(client: Client) -> None:
    client.broker.create_topic("t", 1)
    answer = client.produce("t", make_batch(), transactional_id="tx-1")
    assert answer.error_code == ErrorCode.none
    assert client.log("t").log_end_offset == 1


def test_a_transactional_batch_outside_a_transaction_is_refused_unwritten(
    client: Client,
) -> None:
    client.broker.create_topic("t", 1)
    batch = encode_batch(
        [Record(b"v")], producer_id=5, producer_epoch=0, base_sequence=0,
        attributes=ATTR_TRANSACTIONAL,
    )  # fmt: skip
    assert client.produce("t", batch).error_code == ErrorCode.invalid_txn_state
    assert client.log("t").log_end_offset == 0


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_every_version(shared: Client, version: int) -> None:
    topic = f"produce-v{version}"
    shared.produce(topic, make_batch(2), version=version)
    answer = shared.produce(topic, make_batch(3), version=version)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2)


# --- Idempotent producers -------------------------------------------------------------------


def test_init_producer_id_gives_distinct_ids(client: Client) -> None:
    ids = [client.producer_id() for _ in range(5)]
    assert len(set(ids)) == 5
    assert all(pid >= 0 for pid in ids)


@pytest.mark.parametrize("how", ["clean", "crash"])
def test_producer_ids_are_never_reused_across_restarts(
    open_client: OpenClient, tmp_path: Path, how: str
) -> None:
    client = open_client(**QUIET)
    before = {client.producer_id() for _ in range(3)}
    client = reopen(client, how, open_client, tmp_path)
    after = {client.producer_id() for _ in range(3)}
    assert min(after) > max(before)


def test_idempotent_batches_in_sequence_are_appended(client: Client) -> None:
    pid = client.producer_id()
    assert client.produce("t", idempotent_batch(pid, 0, 0, count=2)).base_offset == 0
    assert client.produce("t", idempotent_batch(pid, 0, 2, count=3)).base_offset == 2
    assert client.produce("t", idempotent_batch(pid, 0, 5)).base_offset == 5
    assert client.log("t").log_end_offset == 6


def test_idempotent_retry_gets_the_original_offsets_and_appends_nothing(client: Client) -> None:
    pid = client.producer_id()
    first = idempotent_batch(pid, 0, 0, count=2)
    second = idempotent_batch(pid, 0, 2, count=3)
    client.produce("t", make_batch(4))  # someone else's records move the offsets
    client.produce("t", first)
    client.produce("t", second)
    for retry, original_offset in ((second, 6), (first, 4), (second, 6)):
        answer = client.produce("t", retry)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, original_offset)
    assert client.log("t").log_end_offset == 9


def test_idempotent_retry_waits_for_durability_too(open_client: OpenClient) -> None:
    client = open_client(**QUIET)
    pid = client.producer_id()
    batch = idempotent_batch(pid, 0, 0, count=2)
    client.produce("t", batch)
    answer = client.produce("t", batch, acks=-1)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert client.log("t").flushed_offset >= 2


def test_idempotent_sequence_gap_is_out_of_order(client: Client) -> None:
    pid = client.producer_id()
    client.produce("t", idempotent_batch(pid, 0, 0, count=2))
    answer = client.produce("t", idempotent_batch(pid, 0, 3))
    assert answer.error_code == ErrorCode.out_of_order_sequence_number
    assert client.log("t").log_end_offset == 2


def test_idempotent_older_epoch_is_fenced(client: Client) -> None:
    pid = client.producer_id()
    client.produce("t", idempotent_batch(pid, 0, 0))
    assert client.produce("t", idempotent_batch(pid, 1, 0)).error_code == ErrorCode.none
    answer = client.produce("t", idempotent_batch(pid, 0, 1))
    assert answer.error_code == ErrorCode.invalid_producer_epoch
    assert client.log("t").log_end_offset == 2


def test_idempotent_state_is_per_partition(client: Client) -> None:
    client.broker.create_topic("t", 2)
    pid = client.producer_id()
    client.produce("t", idempotent_batch(pid, 0, 0, count=3), partition=0)
    answer = client.produce("t", idempotent_batch(pid, 0, 0), partition=1)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)


def test_two_batches_in_one_idempotent_partition_are_refused_unwritten(client: Client) -> None:
    pid = client.producer_id()
    records = idempotent_batch(pid, 0, 0) + idempotent_batch(pid, 0, 1)
    answer = client.produce("t", records)
    assert answer.error_code != ErrorCode.none
    assert client.log("t").log_end_offset == 0
    # Nothing was recorded either: the sequence still starts over.
    assert client.produce("t", idempotent_batch(pid, 0, 0)).error_code == ErrorCode.none


@pytest.mark.parametrize("kind", ["two-idempotent", "two-plain", "none"])
def test_produce_partition_must_hold_exactly_one_batch(client: Client, kind: str) -> None:
    pid = client.producer_id()
    records = {
        "two-idempotent": idempotent_batch(pid, 0, 0) + idempotent_batch(pid, 0, 1),
        "two-plain": make_batch(1) + make_batch(1),
        "none": None,
    }[kind]
    assert client.produce("t", records).error_code == ErrorCode.invalid_record
    assert client.log("t").log_end_offset == 0


@pytest.mark.parametrize("how", RESTARTS)
def test_idempotent_state_survives_restarts(
    open_client: OpenClient, tmp_path: Path, how: str
) -> None:
    client = open_client(**QUIET)
    pid = client.producer_id()
    client.produce("t", make_batch(1))
    first = idempotent_batch(pid, 0, 0, count=2)
    last = idempotent_batch(pid, 0, 2, count=3)
    assert client.produce("t", first).base_offset == 1
    assert client.produce("t", last).base_offset == 3

    client = reopen(client, how, open_client, tmp_path)
    assert client.log("t").log_end_offset == 6
    for retry, original_offset in ((last, 3), (first, 1)):
        answer = client.produce("t", retry)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, original_offset)
    assert client.log("t").log_end_offset == 6
    gap = client.produce("t", idempotent_batch(pid, 0, 6))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert client.produce("t", idempotent_batch(pid, 0, 5)).base_offset == 6


def test_idempotent_state_after_a_crash_that_follows_a_clean_restart(
    open_client: OpenClient, tmp_path: Path
) -> None:
    # The snapshot of the clean close stays behind and goes stale: after the crash it must
    # be extended by replaying the log written since, not taken as the whole truth.
    client = open_client(**QUIET)
    pid = client.producer_id()
    assert client.produce("t", idempotent_batch(pid, 0, 0, count=2)).base_offset == 0
    client.restart()
    last = idempotent_batch(pid, 0, 2, count=2)
    assert client.produce("t", last).base_offset == 2
    copy = tmp_path / "crashed"
    shutil.copytree(client.settings.data_dir, copy)
    assert (copy / PRODUCER_STATE_FILE).exists(), "the stale snapshot is there"
    crashed = open_client(data_dir=copy, **QUIET)
    answer = crashed.produce("t", last)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2)
    assert crashed.log("t").log_end_offset == 4
    gap = crashed.produce("t", idempotent_batch(pid, 0, 5))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number


# --- Fetch ----------------------------------------------------------------------------------


def fill(client: Client, topic: str, counts: Iterable[int], partition: int = 0) -> list[bytes]:
    """Produce one batch of each count; returns the batches as stored (offsets assigned)."""
    for n in counts:
        assert client.produce(topic, make_batch(n), partition=partition).error_code == 0
    return split_batches(client.log(topic, partition).read(0, 50 * MIB).records)


def test_fetch_returns_whole_batches_from_the_offset(client: Client) -> None:
    stored = fill(client, "t", [5, 3, 2])
    answer = client.fetch("t", 0)
    assert answer.error_code == ErrorCode.none
    offsets = (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
    assert offsets == (10, 10, 0)
    assert answer.records == b"".join(stored)


@pytest.mark.parametrize(("offset", "first_base"), [(2, 0), (4, 0), (5, 5), (7, 5), (9, 8)])
def test_fetch_from_mid_batch_returns_the_whole_containing_batch(
    client: Client, offset: int, first_base: int
) -> None:
    fill(client, "t", [5, 3, 2])
    headers = batch_headers(client.fetch("t", offset).records)
    assert headers[0].base_offset == first_base
    assert headers[-1].last_offset == 9


def test_fetch_at_the_log_end_returns_nothing(client: Client) -> None:
    fill(client, "t", [3])
    answer = client.fetch("t", 3)
    assert (answer.error_code, answer.high_watermark, answer.records) == (ErrorCode.none, 3, b"")


@pytest.mark.parametrize("offset", [11, 1_000, -1])
def test_fetch_out_of_range_offsets(client: Client, offset: int) -> None:
    fill(client, "t", [5, 5])
    answer = client.fetch("t", offset)
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert (answer.high_watermark, answer.log_start_offset) == (10, 0)
    assert not answer.records


def test_fetch_below_the_log_start(client: Client) -> None:
    fill(client, "t", [5, 5])
    client.log("t").advance_log_start(5)
    answer = client.fetch("t", 4)
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert (answer.high_watermark, answer.log_start_offset) == (10, 5)
    assert client.fetch("t", 5).log_start_offset == 5


def test_fetch_unknown_topic_and_partition(client: Client) -> None:
    client.broker.create_topic("t", 1)
    for topic, partition in (("nope", 0), ("t", 1)):
        answer = client.fetch(topic, 0, partition=partition)
        assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert client.broker.topics.get("nope") is None  # fetch never creates topics


def test_fetch_current_leader_epoch_newer_than_ours(client: Client) -> None:
    fill(client, "t", [1])
    assert client.fetch("t", 0, current_leader_epoch=1).error_code == ErrorCode.unknown_leader_epoch
    assert client.fetch("t", 0, current_leader_epoch=0).error_code == ErrorCode.none


def fetch_many(client: Client, wanted: list[tuple[str, int, int]], **options: Any) -> list[Any]:
    response = client.call(FETCH, fetch_request(wanted, **options))
    assert response.error_code == ErrorCode.none
    return fetch_results(response)


@pytest.fixture
def two_partitions(client: Client) -> Client:
    client.broker.create_topic("t", 2)
    return client


def test_fetch_first_batch_of_first_nonempty_partition_ignores_limits(
    two_partitions: Client,
) -> None:
    client = two_partitions
    client.produce("t", make_batch(1, size=2_000), partition=1)  # p0 stays empty
    client.produce("t", make_batch(1), partition=1)
    big = split_batches(client.log("t", 1).read(0, MIB).records)[0]
    assert len(big) > 2_000
    p0, p1 = fetch_many(client, [("t", 0, 0), ("t", 1, 0)], max_bytes=500, partition_max_bytes=500)
    assert (p0.error_code, p0.records) == (ErrorCode.none, b"")
    assert p1.error_code == ErrorCode.none
    assert p1.records == big  # whole, and alone: the next batch is over the limits


def test_fetch_later_partition_whose_batch_does_not_fit_returns_nothing(
    two_partitions: Client,
) -> None:
    client = two_partitions
    (first,) = fill(client, "t", [20], partition=0)
    fill(client, "t", [20], partition=1)
    p0, p1 = fetch_many(client, [("t", 0, 0), ("t", 1, 0)], max_bytes=len(first) + 50)
    assert p0.records == first
    assert (p1.error_code, p1.records, p1.high_watermark) == (ErrorCode.none, b"", 20)


def test_fetch_partition_max_bytes_limits_each_partition(two_partitions: Client) -> None:
    client = two_partitions
    stored = fill(client, "t", [5, 5, 5], partition=0)
    other = fill(client, "t", [5], partition=1)
    size = len(stored[0])
    assert all(len(b) == size for b in [*stored, *other])
    p0, p1 = fetch_many(
        client, [("t", 0, 0), ("t", 1, 0)], partition_max_bytes=2 * size + size // 2
    )
    assert p0.records == stored[0] + stored[1]
    assert p1.records == other[0]


def test_fetch_max_bytes_limits_the_whole_response(two_partitions: Client) -> None:
    client = two_partitions
    stored = fill(client, "t", [5, 5, 5], partition=0)
    fill(client, "t", [5], partition=1)
    size = len(stored[0])
    p0, p1 = fetch_many(client, [("t", 0, 0), ("t", 1, 0)], max_bytes=2 * size + size // 2)
    assert p0.records == stored[0] + stored[1]
    assert p1.records == b""


def test_fetch_reports_out_of_range_after_the_budget_is_used(two_partitions: Client) -> None:
    client = two_partitions
    (first,) = fill(client, "t", [20], partition=0)
    fill(client, "t", [1], partition=1)
    _p0, p1 = fetch_many(client, [("t", 0, 0), ("t", 1, 99)], max_bytes=len(first))
    assert p1.error_code == ErrorCode.offset_out_of_range


def test_fetch_waits_max_wait_when_nothing_arrives(client: Client) -> None:
    fill(client, "t", [2])
    frame = request_frame(FETCH, 12, fetch_request([("t", 0, 2)], min_bytes=1, max_wait_ms=200))

    async def scenario() -> tuple[float, Reply | None]:
        started = time.monotonic()
        outcome = client.dispatcher.handle(frame)
        assert inspect.isawaitable(outcome), "a fetch short of min_bytes must wait"
        reply = await outcome
        return time.monotonic() - started, reply

    elapsed, reply = asyncio.run(scenario())
    (answer,) = fetch_results(decode_reply(FETCH, 12, reply))
    assert 0.18 <= elapsed < 2
    assert (answer.error_code, answer.records, answer.high_watermark) == (ErrorCode.none, b"", 2)


def test_fetch_returns_early_when_a_produce_arrives(client: Client) -> None:
    fill(client, "t", [2])
    fetch = request_frame(FETCH, 12, fetch_request([("t", 0, 2)], min_bytes=1, max_wait_ms=10_000))
    produce = request_frame(PRODUCE, 12, produce_request([("t", 0, make_batch(3))]))

    async def scenario() -> tuple[float, Reply | None]:
        started = time.monotonic()
        outcome = client.dispatcher.handle(fetch)
        assert inspect.isawaitable(outcome)
        waiting = asyncio.ensure_future(outcome)
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert isinstance(client.dispatcher.handle(produce), Reply)
        reply = await asyncio.wait_for(waiting, 5)
        return time.monotonic() - started, reply

    elapsed, reply = asyncio.run(scenario())
    (answer,) = fetch_results(decode_reply(FETCH, 12, reply))
    assert elapsed < 2
    assert answer.high_watermark == 5
    assert [(h.base_offset, h.last_offset) for h in batch_headers(answer.records)] == [(2, 4)]


def test_fetch_keeps_waiting_until_min_bytes_or_the_deadline(client: Client) -> None:
    fill(client, "t", [2])
    fetch = request_frame(FETCH, 12, fetch_request([("t", 0, 2)], min_bytes=MIB, max_wait_ms=300))
    produce = request_frame(PRODUCE, 12, produce_request([("t", 0, make_batch(1))]))

    async def scenario() -> tuple[float, Reply | None]:
        started = time.monotonic()
        outcome = client.dispatcher.handle(fetch)
        assert inspect.isawaitable(outcome)
        waiting = asyncio.ensure_future(outcome)
        await asyncio.sleep(0.05)
        client.dispatcher.handle(produce)  # less than min_bytes: the fetch keeps waiting
        reply = await asyncio.wait_for(waiting, 5)
        return time.monotonic() - started, reply

    elapsed, reply = asyncio.run(scenario())
    (answer,) = fetch_results(decode_reply(FETCH, 12, reply))
    assert 0.28 <= elapsed < 2
    assert [h.base_offset for h in batch_headers(answer.records)] == [2]


def test_fetch_with_enough_data_does_not_wait(client: Client) -> None:
    fill(client, "t", [2])
    outcome = client.send(FETCH, fetch_request([("t", 0, 0)], min_bytes=1, max_wait_ms=10_000))
    assert isinstance(outcome, Reply)


def test_fetch_with_an_error_does_not_wait(client: Client) -> None:
    outcome = client.send(
        FETCH, fetch_request([("missing", 0, 0)], min_bytes=1, max_wait_ms=10_000)
    )
    assert isinstance(outcome, Reply)


@pytest.mark.parametrize("epoch", [1, 7])
def test_fetch_incremental_with_an_unknown_session_id(client: Client, epoch: int) -> None:
    fill(client, "t", [1])
    response = client.call(FETCH, fetch_request([("t", 0, 0)], session_id=12, session_epoch=epoch))
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    assert response.session_id == 0


@pytest.mark.parametrize("epoch", [0, -1])
def test_fetch_sessionless_full_fetches_are_served_with_session_id_0(
    client: Client, epoch: int
) -> None:
    fill(client, "t", [1])
    response = client.call(FETCH, fetch_request([("t", 0, 0)], session_epoch=epoch))
    assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
    assert fetch_results(response)[0].high_watermark == 1


@pytest.mark.parametrize("epoch", [1, 5])
def test_fetch_incremental_epoch_without_a_session(client: Client, epoch: int) -> None:
    fill(client, "t", [1])
    response = client.call(FETCH, fetch_request([("t", 0, 0)], session_id=0, session_epoch=epoch))
    # Kafka looks session 0 up, does not find it, and answers FETCH_SESSION_ID_NOT_FOUND.
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    assert response.session_id == 0


@pytest.mark.parametrize(
    ("session_id", "epoch", "code"),
    [
        (12, 0, ErrorCode.none),
        (12, -1, ErrorCode.none),
        (0, 3, ErrorCode.fetch_session_id_not_found),
    ],
)
def test_fetch_session_codes_as_kafka(
    client: Client, session_id: int, epoch: int, code: ErrorCode
) -> None:
    fill(client, "t", [1])
    request = fetch_request([("t", 0, 0)], session_id=session_id, session_epoch=epoch)
    response = client.call(FETCH, request)
    assert (response.error_code, response.session_id) == (code, 0)


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_every_version(shared: Client, version: int) -> None:
    topic = f"fetch-v{version}"
    stored = fill(shared, topic, [2, 3])
    response = shared.call(FETCH, fetch_request([(topic, 0, 3)]), version)
    (answer,) = fetch_results(response)
    assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, 5)
    assert answer.records == stored[1]


# --- ListOffsets ----------------------------------------------------------------------------


def write_timestamped(client: Client, topic: str) -> None:
    """Offsets 0-2 at 1000, 9000, 1002 (not in order, as producers' clocks allow), then
    3-4 at 2000, 2001."""
    for timestamps in ((1000, 9000, 1002), (2000, 2001)):
        batch = encode_batch([Record(b"x", timestamp_ms=ts) for ts in timestamps])
        assert client.produce(topic, batch).error_code == ErrorCode.none


@pytest.fixture
def timestamped(client: Client) -> Client:
    """`client` with topic t written by `write_timestamped`."""
    write_timestamped(client, "t")
    return client


def test_list_offsets_earliest_and_latest(timestamped: Client) -> None:
    client = timestamped
    assert client.list_offset("t", EARLIEST).offset == 0
    assert client.list_offset("t", LATEST_OFFSET).offset == 5
    client.log("t").advance_log_start(3)
    assert client.list_offset("t", EARLIEST).offset == 3


def test_list_offsets_max_timestamp(timestamped: Client) -> None:
    answer = timestamped.list_offset("t", MAX_TIMESTAMP)
    assert (answer.error_code, answer.offset, answer.timestamp) == (ErrorCode.none, 1, 9000)


@pytest.mark.parametrize(
    ("timestamp", "offset", "found_ts"),
    [
        (0, 0, 1000),
        (1000, 0, 1000),
        (1001, 1, 9000),  # the first record at or after the time, in offset order
        (9000, 1, 9000),
        (9001, -1, -1),  # after the last: no offset
    ],
)
def test_list_offsets_by_timestamp(
    timestamped: Client, timestamp: int, offset: int, found_ts: int
) -> None:
    answer = timestamped.list_offset("t", timestamp)
    assert (answer.error_code, answer.offset, answer.timestamp) == (
        ErrorCode.none,
        offset,
        found_ts,
    )


def test_list_offsets_by_timestamp_in_order(client: Client) -> None:
    client.produce("t", make_batch(3, ts=1_000))  # 1000, 1001, 1002
    client.produce("t", make_batch(2, ts=2_000))  # 2000, 2001
    found = {ts: client.list_offset("t", ts).offset for ts in (999, 1001, 1500, 2001, 2002)}
    assert found == {999: 0, 1001: 1, 1500: 3, 2001: 4, 2002: -1}


def test_list_offsets_unknown_topic_and_partition(client: Client) -> None:
    client.broker.create_topic("t", 1)
    for topic, partition in (("t", 1), ("nope", 0)):
        answer = client.list_offset(topic, LATEST_OFFSET, partition=partition)
        assert answer.error_code == ErrorCode.unknown_topic_or_partition


def test_list_offsets_current_leader_epoch_newer_than_ours(timestamped: Client) -> None:
    answer = timestamped.list_offset("t", LATEST_OFFSET, current_leader_epoch=1)
    assert answer.error_code == ErrorCode.unknown_leader_epoch


@pytest.mark.parametrize("version", range(1, 11))
def test_list_offsets_every_version(shared: Client, version: int) -> None:
    name = f"list-offsets-v{version}"
    write_timestamped(shared, name)
    request = list_offsets_request([(name, 0, EARLIEST), (name, 0, LATEST_OFFSET), (name, 0, 1500)])
    (topic,) = shared.call(LIST_OFFSETS, request, version).topics
    assert [(p.error_code, p.offset) for p in topic.partitions] == [
        (ErrorCode.none, 0),
        (ErrorCode.none, 5),
        (ErrorCode.none, 1),
    ]


# --- OffsetForLeaderEpoch -------------------------------------------------------------------


def test_offset_for_leader_epoch_0_ends_at_the_log_end(client: Client) -> None:
    fill(client, "t", [4, 3])
    answer = client.epoch_end("t", 0)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 7)


def test_offset_for_leader_epoch_unknown_epoch(client: Client) -> None:
    fill(client, "t", [4])
    answer = client.epoch_end("t", 5)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, -1, -1)


def test_offset_for_leader_epoch_current_leader_epoch_newer_than_ours(client: Client) -> None:
    fill(client, "t", [4])
    answer = client.epoch_end("t", 0, current_leader_epoch=1)
    assert answer.error_code == ErrorCode.unknown_leader_epoch


def test_offset_for_leader_epoch_unknown_partition(client: Client) -> None:
    client.broker.create_topic("t", 1)
    assert client.epoch_end("t", 0, partition=3).error_code == ErrorCode.unknown_topic_or_partition
    assert client.epoch_end("nope", 0).error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("version", range(2, 5))
def test_offset_for_leader_epoch_every_version(shared: Client, version: int) -> None:
    name = f"leader-epoch-v{version}"
    fill(shared, name, [4])
    request = leader_epoch_request([(name, 0, 0)])
    (topic,) = shared.call(OFFSET_FOR_LEADER_EPOCH, request, version).topics
    (answer,) = topic.partitions
    assert (answer.error_code, answer.end_offset) == (ErrorCode.none, 4)
