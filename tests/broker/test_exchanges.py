"""Exchanges on the log (broker/exchanges.py): declaring, binding, routing the records
published to an exchange into its destinations, and re-routing after a crash.

A crash is simulated as in test_producer_state: the data directory copied while the broker
runs is what a kill -9 leaves (the page cache survives a killed process).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from murmurhash2 import murmurhash2

from weirmq.broker import exchanges as exchanges_module
from weirmq.broker.configs import AlterOp, InvalidConfigError
from weirmq.broker.core import Broker
from weirmq.broker.exchanges import BINDINGS_CONFIG, CURSORS_FILE, binding_spec
from weirmq.broker.partition import Durability, Partition
from weirmq.broker.scan import scan_batches
from weirmq.errors import ErrorCode
from weirmq.records.batch import Record, decode_full_records, encode_batch
from weirmq.routing import Binding, UnknownExchangeError, UnroutableError
from weirmq.settings import Settings

QUIET = 3_600_000  # no periodic flush: only a stop writes the cursor file


def open_broker(data_dir: Path) -> Broker:
    return Broker(Settings(data_dir=data_dir, flush_interval_ms=QUIET))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    opened = open_broker(tmp_path / "data")
    yield opened
    opened.close()


def the(broker: Broker, topic: str, index: int = 0) -> Partition:
    found = broker.partition(topic, index)
    assert found is not None
    return found


def exchange(broker: Broker, name: str, kind: str, partitions: int = 1, **extra: str) -> None:
    configs = {"weirmq.exchange.type": kind}
    configs.update({f"weirmq.exchange.{key}": value for key, value in extra.items()})
    broker.create_topic(name, partitions, configs)


def publish(broker: Broker, topic: str, records: list[Record], index: int = 0) -> int:
    return the(broker, topic, index).publish(encode_batch(records), Durability.WRITTEN).base_offset


def contents(broker: Broker, topic: str) -> list[Record]:
    """Every record of every partition of `topic`, partition by partition."""
    found = []
    for index in range(broker.known_topic(topic).partitions):
        partition = the(broker, topic, index)
        for batch in scan_batches(partition.log, partition.log_start_offset):
            found += [record for _, record in decode_full_records(batch)]
    return found


def values(broker: Broker, topic: str) -> list[bytes | None]:
    return [record.value for record in contents(broker, topic)]


def rec(value: bytes, key: bytes | None = None, **headers: bytes) -> Record:
    return Record(value, key, tuple(headers.items()), timestamp_ms=1_700_000_000_000)


# --- routing --------------------------------------------------------------------------------


def test_a_topic_exchange_routes_by_pattern_and_keeps_records_whole(broker: Broker) -> None:
    exchange(broker, "events", "topic")
    for name in ("eu", "orders", "everything"):
        broker.create_topic(name, 1)
    broker.exchanges.bind("events", "eu", key="eu.*")
    broker.exchanges.bind("events", "orders", key="*.orders.#")
    broker.exchanges.bind("events", "everything", key="#")
    sent = [
        rec(b"1", b"eu.orders.new", trace=b"a"),
        rec(b"2", b"us.orders"),
        rec(b"3", b"eu.refunds"),
        rec(b"4", b"whatever", **{"routing-key": b"eu.orders"}),  # the header wins
    ]
    publish(broker, "events", sent)
    assert values(broker, "events") == [b"1", b"2", b"3", b"4"]  # the input log keeps all
    assert values(broker, "eu") == [b"3", b"4"]
    assert values(broker, "orders") == [b"1", b"2", b"4"]
    assert contents(broker, "everything") == sent  # key, value, headers, timestamp as sent
    stats = broker.exchanges.stats["events"]
    assert (stats.copies, stats.unroutable, stats.alternate) == (9, 0, 0)


def test_keyed_copies_follow_kafkas_partitioner_and_keyless_ones_stay_together(
    broker: Broker,
) -> None:
    exchange(broker, "fan", "fanout")
    broker.create_topic("wide", 7)
    broker.exchanges.bind("fan", "wide")
    keys = [b"k%d" % i for i in range(40)]
    publish(broker, "fan", [rec(b"v", key) for key in keys])
    for index in range(7):
        for record in contents_of_partition(broker, "wide", index):
            assert record.key is not None
            assert (murmurhash2(record.key, 0x9747B28C) & 0x7FFFFFFF) % 7 == index
    publish(broker, "fan", [rec(b"keyless-%d" % i) for i in range(10)])
    holding = [
        index
        for index in range(7)
        if any(r.key is None for r in contents_of_partition(broker, "wide", index))
    ]
    assert len(holding) == 1  # one batch's keyless records went to one partition


def contents_of_partition(broker: Broker, topic: str, index: int) -> list[Record]:
    partition = the(broker, topic, index)
    return [
        record
        for batch in scan_batches(partition.log, partition.log_start_offset)
        for _, record in decode_full_records(batch)
    ]


def test_headers_and_content_exchanges(broker: Broker) -> None:
    exchange(broker, "by-headers", "headers")
    exchange(broker, "by-content", "content")
    for name in ("eu-urgent", "any-eu", "big"):
        broker.create_topic(name, 1)
    broker.exchanges.bind(
        "by-headers", "eu-urgent", arguments={"region": "eu", "urgent": None}
    )  # all (default): region=eu and an urgent header of any value
    broker.exchanges.bind(
        "by-headers", "any-eu", arguments={"x-match": "any", "region": "eu", "zone": "eu"}
    )
    broker.exchanges.bind("by-content", "big", expression="amount > 100 AND region <> 'us'")
    records = [
        rec(b"1", region=b"eu", urgent=b""),
        rec(b"2", region=b"eu"),
        rec(b"3", zone=b"eu"),
        rec(b"4", region=b"us", urgent=b"yes"),
    ]
    publish(broker, "by-headers", records)
    assert values(broker, "eu-urgent") == [b"1"]
    assert values(broker, "any-eu") == [b"1", b"2", b"3"]
    publish(
        broker,
        "by-content",
        [rec(b"a", amount=b"150", region=b"eu"), rec(b"b", amount=b"150", region=b"us"),
         rec(b"c", amount=b"99"), rec(b"d", region=b"eu")],
    )  # fmt: skip
    assert values(broker, "big") == [b"a"]


def test_exchange_to_exchange_bindings_and_the_alternate(broker: Broker) -> None:
    exchange(broker, "front", "direct", alternate="lost")
    exchange(broker, "lost", "fanout")
    exchange(broker, "regions", "topic")
    for name in ("orders", "eu", "unrouted"):
        broker.create_topic(name, 1)
    broker.exchanges.bind("front", "orders", key="order")
    broker.exchanges.bind("front", "regions", key="eu.order")
    broker.exchanges.bind("regions", "eu", key="eu.#")
    broker.exchanges.bind("lost", "unrouted")
    publish(broker, "front", [rec(b"1", b"order"), rec(b"2", b"eu.order"), rec(b"3", b"x")])
    assert values(broker, "orders") == [b"1"]
    assert values(broker, "eu") == [b"2"]
    assert values(broker, "unrouted") == [b"3"]
    assert values(broker, "regions") == []  # routed through, never appended to
    assert broker.exchanges.stats["front"].alternate == 1


def test_unroutable_records_are_dropped_or_refuse_the_whole_batch(broker: Broker) -> None:
    exchange(broker, "lenient", "direct")
    exchange(broker, "strict", "direct", unroutable="reject")
    broker.create_topic("dest", 1)
    broker.exchanges.bind("lenient", "dest", key="a")
    broker.exchanges.bind("strict", "dest", key="a")
    publish(broker, "lenient", [rec(b"1", b"a"), rec(b"2", b"b")])
    assert broker.exchanges.stats["lenient"].unroutable == 1
    with pytest.raises(UnroutableError, match="refuses unroutable") as refused:
        publish(broker, "strict", [rec(b"3", b"a"), rec(b"4", b"b")])
    assert refused.value.code is ErrorCode.invalid_record
    assert the(broker, "strict").log_end_offset == 0  # nothing of the batch was written
    assert values(broker, "dest") == [b"1"]


def test_an_idempotent_retry_is_not_routed_twice(broker: Broker) -> None:
    exchange(broker, "x", "fanout")
    broker.create_topic("dest", 1)
    broker.exchanges.bind("x", "dest")
    pid = broker.producer_ids.allocate()
    batch = encode_batch([rec(b"once")], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert not the(broker, "x").publish(batch, Durability.WRITTEN).duplicate
    assert the(broker, "x").publish(batch, Durability.WRITTEN).duplicate
    assert values(broker, "dest") == [b"once"]


# --- definitions ----------------------------------------------------------------------------


def test_bindings_as_a_kafka_list_config(broker: Broker) -> None:
    exchange(broker, "t", "topic")
    exchange(broker, "c", "content")
    exchange(broker, "h", "headers")
    broker.create_topic("a", 1)
    broker.create_topic("b", 1)
    broker.alter_topic_configs_ops("t", [(BINDINGS_CONFIG, AlterOp.APPEND, "a?key=eu.#,b")])
    assert described(broker, "t") == "a?key=eu.#,b"
    broker.alter_topic_configs_ops("t", [(BINDINGS_CONFIG, AlterOp.SUBTRACT, "b")])
    assert described(broker, "t") == "a?key=eu.#"
    broker.alter_topic_configs_ops("t", [(BINDINGS_CONFIG, AlterOp.SET, "b?key=x,a?key=y")])
    assert described(broker, "t") == "b?key=x,a?key=y"
    broker.alter_topic_configs_ops("t", [(BINDINGS_CONFIG, AlterOp.DELETE, None)])
    assert described(broker, "t") == ""
    # An expression's commas and ampersands are escaped, so the item stays one item.
    expression = "region IN ('eu', 'uk') AND a = 1"
    spec = binding_spec(Binding("c", "a", "topic", expression=expression))
    assert "," not in spec
    broker.alter_topic_configs_ops("c", [(BINDINGS_CONFIG, AlterOp.APPEND, spec)])
    assert broker.exchanges.router.bindings("c")[0].expression == expression
    broker.alter_topic_configs_ops("h", [(BINDINGS_CONFIG, AlterOp.SET, "a?x-match=any&k=v&p")])
    [headers] = broker.exchanges.router.bindings("h")
    assert dict(headers.arguments) == {"x-match": "any", "k": "v", "p": None}
    assert described(broker, "h") == "a?k=v&p&x-match=any"


def described(broker: Broker, name: str) -> str | None:
    [entry] = [e for e in broker.describe_topic_configs(name) if e.name == BINDINGS_CONFIG]
    return entry.value


@pytest.mark.parametrize(
    ("topic", "value", "message"),
    [
        ("t", "nowhere?key=a", "no topic or exchange 'nowhere'"),
        ("t", "a?match=x = 1", "takes only 'key=...'"),
        ("c", "a?match=amount >", "expected"),
        ("c", "a", "needs match=EXPRESSION"),
        ("plain", "a", "applies to exchanges"),
    ],
)
def test_bad_bindings_are_refused_and_change_nothing(
    broker: Broker, topic: str, value: str, message: str
) -> None:
    exchange(broker, "t", "topic")
    exchange(broker, "c", "content")
    broker.create_topic("a", 1)
    broker.create_topic("plain", 1)
    broker.alter_topic_configs_ops("t", [(BINDINGS_CONFIG, AlterOp.SET, "a?key=keep")])
    with pytest.raises(Exception, match=message) as refused:
        broker.alter_topic_configs_ops(topic, [(BINDINGS_CONFIG, AlterOp.APPEND, value)])
    assert getattr(refused.value, "code", None) is not None  # a KafkaError, with its code
    assert [binding_spec(b) for b in broker.exchanges.router.bindings()] == ["a?key=keep"]


def test_a_type_is_set_once_and_bindings_need_an_exchange(broker: Broker) -> None:
    exchange(broker, "x", "direct")
    broker.create_topic("plain", 1)
    with pytest.raises(InvalidConfigError, match="never changes"):
        broker.alter_topic_configs("x", {"weirmq.exchange.type": "fanout"})
    with pytest.raises(InvalidConfigError, match="never changes"):
        broker.alter_topic_configs("plain", {"weirmq.exchange.type": "fanout"})
    with pytest.raises(InvalidConfigError, match="only an exchange has bindings"):
        broker.create_topic("y", 1, {BINDINGS_CONFIG: "plain"})
    broker.alter_topic_configs("x", {"weirmq.exchange.unroutable": "reject"})
    assert broker.exchanges.router.exchange("x").unroutable == "reject"
    with pytest.raises(UnroutableError):
        publish(broker, "x", [rec(b"1", b"k")])


def test_created_with_its_bindings(broker: Broker) -> None:
    broker.create_topic("dest", 1)
    broker.create_topic("x", 2, {"weirmq.exchange.type": "direct", BINDINGS_CONFIG: "dest?key=a"})
    assert described(broker, "x") == "dest?key=a"
    with pytest.raises(InvalidConfigError):
        broker.create_topic("y", 1, {"weirmq.exchange.type": "direct", BINDINGS_CONFIG: "zz"})
    assert broker.topics.get("y") is None  # not created without its bindings


def test_deleting_a_destination_unbinds_it_and_deleting_an_exchange_forgets_it(
    broker: Broker, tmp_path: Path
) -> None:
    exchange(broker, "x", "fanout")
    exchange(broker, "y", "fanout")
    broker.create_topic("gone", 1)
    broker.create_topic("kept", 1)
    broker.exchanges.bind("x", "gone")
    broker.exchanges.bind("x", "kept")
    broker.exchanges.bind("x", "y")
    broker.delete_topic("gone")
    assert [b.destination for b in broker.exchanges.router.bindings("x")] == ["kept", "y"]
    broker.delete_topic("y")
    assert "y" not in broker.exchanges.router
    assert [b.destination for b in broker.exchanges.router.bindings("x")] == ["kept"]
    broker.create_topic("gone", 1)  # a new topic of the old name is not bound
    with pytest.raises(UnknownExchangeError):
        broker.exchanges.describe("y")
    broker.close()
    again = open_broker(tmp_path / "data")
    assert [b.destination for b in again.exchanges.router.bindings()] == ["kept"]
    again.close()


# --- restarts and crashes -------------------------------------------------------------------


def test_definitions_survive_a_restart_and_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = open_broker(data)
    exchange(broker, "x", "topic", alternate="alt", unroutable="drop")
    exchange(broker, "alt", "fanout")
    broker.create_topic("dest", 1)
    broker.exchanges.bind("x", "dest", key="a.#")
    broker.exchanges.bind("alt", "dest")
    shutil.copytree(data, tmp_path / "killed")
    broker.close()
    for directory in (data, tmp_path / "killed"):
        again = open_broker(directory)
        assert again.exchanges.router.exchange("x").alternate == "alt"
        assert {binding_spec(b) for b in again.exchanges.router.bindings()} == {
            "dest?key=a.#",
            "dest",
        }
        publish(again, "x", [rec(b"1", b"a.b")])
        assert values(again, "dest") == [b"1"]
        again.close()


def test_a_clean_stop_leaves_nothing_to_reroute(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = open_broker(data)
    exchange(broker, "x", "fanout")
    broker.create_topic("dest", 1)
    broker.exchanges.bind("x", "dest")
    publish(broker, "x", [rec(b"%d" % i) for i in range(5)])
    broker.close()
    assert (data / CURSORS_FILE).exists()
    again = open_broker(data)
    assert values(again, "dest") == [b"%d" % i for i in range(5)]
    assert again.exchanges.stats["x"].copies == 0  # nothing re-routed
    again.close()


def test_a_kill_at_any_point_of_routing_loses_and_repeats_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    broker = open_broker(data)
    exchange(broker, "x", "topic", partitions=2)
    for name, partitions in (("a", 3), ("b", 1), ("c", 2)):
        broker.create_topic(name, partitions)
    broker.exchanges.bind("x", "a", key="#")
    broker.exchanges.bind("x", "b", key="*.b")
    broker.exchanges.bind("x", "c", key="c.#")
    # An earlier stop, so the cursor file exists and is behind what follows.
    publish(broker, "x", [rec(b"early", b"c.b")])
    broker.close()
    broker = open_broker(data)

    images: list[Path] = []
    real_append = exchanges_module.Exchanges._append_copies

    def image_after(self: exchanges_module.Exchanges, *args: object, **kwargs: object) -> int:
        appended = real_append(self, *args, **kwargs)  # type: ignore[arg-type]
        images.append(tmp_path / f"kill-{len(images)}")
        shutil.copytree(data, images[-1])
        return appended

    monkeypatch.setattr(exchanges_module.Exchanges, "_append_copies", image_after)
    sent: list[Record] = []
    for round_ in range(3):
        for index in range(2):
            batch = [rec(b"%d-%d-%d" % (round_, index, i), key) for i, key in
                     enumerate((b"x.b", b"c.b", b"c.d", b"q", None))]  # fmt: skip
            publish(broker, "x", batch, index)
            sent += batch
    monkeypatch.undo()
    expected = {topic: sorted(map(repr, contents(broker, topic))) for topic in "abc"}
    assert len(contents(broker, "x")) == len(sent) + 1
    broker.close()
    assert len(images) >= 10

    for image in images:
        again = open_broker(image)
        # What the exchange held at the kill is routed, exactly once; nothing else is.
        held = {record.value for record in contents(again, "x")}
        for topic in "abc":
            found = sorted(map(repr, contents(again, topic)))
            assert found == [r for r in expected[topic] if value_of(r) in held], image.name
        again.close()


def value_of(shown: str) -> bytes:
    """The value of a record from its repr (values here are plain ASCII)."""
    return shown.split("value=b'", 1)[1].split("'", 1)[0].encode()


def test_a_compressed_batch_too_big_once_decompressed_is_copied_in_several(
    broker: Broker,
) -> None:
    import gzip

    from weirmq.records.batch import ATTR_CODEC_MASK, HEADER_BYTES, parse_header

    exchange(broker, "x", "fanout")
    broker.create_topic("dest", 1)
    broker.exchanges.bind("x", "dest")
    plain = encode_batch([rec(bytes(1000) + b"%d" % i) for i in range(2500)])  # ~2.5 MB
    header = parse_header(plain)
    body = gzip.compress(plain[HEADER_BYTES:])
    # The same records, gzip-compressed: attributes say so, the CRC covers the new bytes.
    from weirmq.records import checksum

    after_crc = struct.pack(">h", 1 & ATTR_CODEC_MASK) + plain[23:HEADER_BYTES] + body
    batch = (
        struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), 0, 2)
        + struct.pack(">I", checksum.crc32c(after_crc))
        + after_crc
    )
    assert header.records_count == 2500 and len(batch) < 100_000
    publish_raw = the(broker, "x").publish(batch, Durability.WRITTEN)
    assert publish_raw.base_offset == 0
    copied = the(broker, "dest")
    sizes = [len(b) for b in scan_batches(copied.log, 0)]
    assert len(sizes) >= 3 and max(sizes) <= exchanges_module.COPY_BATCH_BYTES_MAX + 4096
    assert values(broker, "dest") == [bytes(1000) + b"%d" % i for i in range(2500)]


# --- replay ---------------------------------------------------------------------------------


def replay(broker: Broker, binding: Binding, **kwargs: object) -> tuple[int, int]:
    ranges = broker.exchanges.replay_ranges(binding, **kwargs)  # type: ignore[arg-type]
    progress = list(broker.exchanges.replay(binding, ranges))
    return progress[-1] if progress else (0, 0)


def test_replay_sends_a_new_binding_what_came_before_it_once(tmp_path: Path) -> None:
    broker = open_broker(tmp_path / "data")
    exchange(broker, "x", "topic", partitions=2)
    broker.create_topic("old", 1)
    broker.create_topic("new", 2)
    broker.exchanges.bind("x", "old", key="#")
    for index in range(2):
        publish(broker, "x", [rec(b"%d-%d" % (index, i), b"eu.%d" % i) for i in range(3)], index)
        publish(broker, "x", [rec(b"us-%d" % index, b"us.1")], index)
    binding, _ = broker.exchanges.bind("x", "new", key="eu.*")
    publish(broker, "x", [rec(b"after", b"eu.9")])
    broker.close()  # the binding's starting point survives a restart
    broker = open_broker(tmp_path / "data")
    [binding] = [b for b in broker.exchanges.router.bindings("x") if b.destination == "new"]
    assert replay(broker, binding) == (8, 6)  # 8 records before the binding, 6 matched
    assert sorted(values(broker, "new")) == sorted(
        [b"%d-%d" % (p, i) for p in range(2) for i in range(3)] + [b"after"]
    )
    # Per key, the order of the exchange (eu.0's records: partition 0's, then 1's).
    assert len(values(broker, "old")) == 9  # the old binding got nothing again
    broker.close()


def test_replay_a_range_and_through_an_exchange(broker: Broker) -> None:
    exchange(broker, "x", "direct")
    exchange(broker, "fan", "fanout")
    broker.create_topic("a", 1)
    broker.create_topic("b", 1)
    publish(broker, "x", [rec(b"%d" % i, b"k") for i in range(10)])
    broker.exchanges.bind("fan", "a")
    broker.exchanges.bind("fan", "b")
    binding, _ = broker.exchanges.bind("x", "fan", key="k")
    assert replay(broker, binding, from_offsets={0: 3}, to_offsets={0: 6}) == (3, 6)
    assert values(broker, "a") == values(broker, "b") == [b"3", b"4", b"5"]
    with pytest.raises(UnknownExchangeError):
        replay(broker, Binding("x", "a", "topic", key="nope"))
