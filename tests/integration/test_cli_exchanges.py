"""``weirmq exchanges`` end to end: each command runs as a user would run it (``python -m
weirmq ...`` in a subprocess) against a real broker process (conftest.BrokerProcess), and
its results are read back through the commands' own ``--json`` output, or, for routing,
through ``weirmq produce`` and ``weirmq consume``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from test_cli import columns, failed, ok, ok_json, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess


def declare(broker: BrokerProcess, name: str, kind: str, *options: str) -> Any:
    return ok_json(weirmq(broker, "exchanges", "declare", name, "--type", kind, *options, "--json"))


def describe(broker: BrokerProcess, name: str) -> Any:
    return ok_json(weirmq(broker, "exchanges", "describe", name, "--json"))


def bindings(broker: BrokerProcess, name: str) -> list[tuple[str, Any]]:
    """(destination, the field its type uses) of each binding of exchange ``name``."""
    found = describe(broker, name)["bindings"]
    return [(b["destination"], b["key"] or b["match"] or b["arguments"]) for b in found]


def binding(destination: str, **fields: Any) -> dict[str, Any]:
    return {"destination": destination, "key": None, "match": None, "arguments": None, **fields}


# -- declare, list, delete ---------------------------------------------------------------------


def test_declare_each_type_then_list(broker: BrokerProcess) -> None:
    for kind in ("direct", "topic", "fanout", "headers", "content"):
        assert declare(broker, f"x-{kind}", kind) == {
            "name": f"x-{kind}",
            "type": kind,
            "partitions": 1,
            "alternate": None,
            "unroutable": "drop",
            "created": True,
        }
    options = ("--partitions", "3", "--alternate", "x-fanout", "--unroutable", "reject")
    text = ok(weirmq(broker, "exchanges", "declare", "orders", "--type", "topic", *options))
    assert text == "Declared topic exchange orders with 3 partitions.\n"
    ok(weirmq(broker, "topics", "create", "plain"))  # not an exchange: not listed

    listed = ok_json(weirmq(broker, "exchanges", "list", "--json"))["exchanges"]
    assert [(e["name"], e["type"], e["partitions"]) for e in listed] == [
        ("orders", "topic", 3),
        ("x-content", "content", 1),
        ("x-direct", "direct", 1),
        ("x-fanout", "fanout", 1),
        ("x-headers", "headers", 1),
        ("x-topic", "topic", 1),
    ]
    assert listed[0] == {
        "name": "orders",
        "type": "topic",
        "partitions": 3,
        "alternate": "x-fanout",
        "unroutable": "reject",
        "bindings": 0,
    }
    header, *rows = ok(weirmq(broker, "exchanges", "list")).splitlines()
    assert header.split() == [
        "EXCHANGE", "TYPE", "PARTITIONS", "ALTERNATE", "UNROUTABLE", "BINDINGS"
    ]  # fmt: skip
    assert rows[0].split() == ["orders", "topic", "3", "x-fanout", "reject", "0"]
    assert rows[1].split() == ["x-content", "content", "1", "-", "drop", "0"]
    # Numbers are right-aligned under their header.
    assert {columns(line)[2] for line in (header, *rows)} == {columns(header)[2]}
    # The exchanges are topics too.
    topics = ok_json(weirmq(broker, "topics", "list", "--json"))["topics"]
    assert {"name": "orders", "partitions": 3} in topics


def test_redeclare_is_idempotent_and_a_difference_is_named(broker: BrokerProcess) -> None:
    options = ("--partitions", "2", "--alternate", "ae")
    assert declare(broker, "orders", "direct", *options)["created"] is True
    again = weirmq(broker, "exchanges", "declare", "orders", "--type", "direct", *options)
    assert ok(again) == ""
    assert again.stderr == b"weirmq: exchange 'orders' already exists as declared\n"
    same = declare(broker, "orders", "direct", "--alternate", "ae")  # any partition count
    assert same["created"] is False

    other = weirmq(broker, "exchanges", "declare", "orders", "--type", "topic", *options)
    assert failed(other, 1) == (
        "weirmq: exchange 'orders' already exists with another definition: "
        "its type is direct, not topic"
    )
    several = weirmq(broker, "exchanges", "declare", "orders", "--type", "direct",
                     "--partitions", "4", "--unroutable", "reject")  # fmt: skip
    assert failed(several, 1) == (
        "weirmq: exchange 'orders' already exists with another definition: its alternate is "
        "'ae', not none; its unroutable policy is drop, not reject; it has 2 partitions, not 4"
    )
    # --if-not-exists takes the exchange as it is, and says how it differs.
    kept = weirmq(broker, "exchanges", "declare", "orders", "--type", "fanout",
                  "--if-not-exists", "--json")  # fmt: skip
    assert ok_json(kept) == {
        "name": "orders",
        "type": "direct",
        "partitions": 2,
        "alternate": "ae",
        "unroutable": "drop",
        "created": False,
    }
    assert b"its type is direct, not fanout" in kept.stderr

    ok(weirmq(broker, "topics", "create", "plain"))
    for extra in ((), ("--if-not-exists",)):
        plain = weirmq(broker, "exchanges", "declare", "plain", "--type", "fanout", *extra)
        assert failed(plain, 1) == "weirmq: topic 'plain' already exists and is not an exchange"
    bad_alternate = weirmq(broker, "exchanges", "declare", "x", "--type", "fanout",
                           "--alternate", "no/such")  # fmt: skip
    message = failed(bad_alternate, 1)
    assert message.startswith("weirmq: cannot declare exchange 'x': ")
    assert message.endswith("(INVALID_CONFIG)")


def test_delete(broker: BrokerProcess) -> None:
    declare(broker, "doomed", "fanout")
    ok(weirmq(broker, "topics", "create", "plain"))
    ok(weirmq(broker, "exchanges", "bind", "doomed", "plain"))
    assert ok(weirmq(broker, "exchanges", "delete", "doomed")) == "Deleted exchange doomed.\n"
    assert ok_json(weirmq(broker, "exchanges", "list", "--json")) == {"exchanges": []}
    assert failed(weirmq(broker, "exchanges", "delete", "doomed"), 1) == (
        "weirmq: exchange 'doomed' does not exist"
    )
    gone = ok_json(weirmq(broker, "exchanges", "delete", "doomed", "--if-exists", "--json"))
    assert gone == {"name": "doomed", "deleted": False}
    for extra in ((), ("--if-exists",)):
        assert failed(weirmq(broker, "exchanges", "delete", "plain", *extra), 1) == (
            "weirmq: 'plain' is a plain topic, not an exchange "
            "(weirmq topics delete deletes topics)"
        )
    assert ok_json(weirmq(broker, "topics", "describe", "plain", "--json"))["name"] == "plain"


# -- bind, unbind, describe --------------------------------------------------------------------


def test_bind_and_unbind_each_kind(broker: BrokerProcess) -> None:
    for kind in ("direct", "topic", "fanout", "headers", "content"):
        declare(broker, kind, kind)
    for topic in ("eu", "all"):
        ok(weirmq(broker, "topics", "create", topic))

    def bind(*args: str) -> Any:
        return ok_json(weirmq(broker, "exchanges", "bind", *args, "--json"))

    assert bind("direct", "eu", "--key", "eu") == {
        "exchange": "direct", **binding("eu", key="eu"), "bound": True
    }  # fmt: skip
    assert bind("direct", "eu", "--key", "eu")["bound"] is False  # binding twice is once
    bind("topic", "eu", "--key", "eu.#")
    bind("topic", "all", "--key", "#")
    bind("fanout", "all")
    bind("fanout", "topic")  # an exchange as destination
    bind("headers", "eu", "--headers", "region=eu,urgent", "--any")
    bind("headers", "all", "--headers", "x-prio=high", "--with-x")
    bind("content", "eu", "--match", "region = 'eu' AND amount > 100")

    assert bindings(broker, "direct") == [("eu", "eu")]
    assert bindings(broker, "topic") == [("eu", "eu.#"), ("all", "#")]
    assert describe(broker, "fanout")["bindings"] == [binding("all"), binding("topic")]
    assert bindings(broker, "headers") == [
        ("eu", {"x-match": "any", "region": "eu", "urgent": None}),
        ("all", {"x-match": "all-with-x", "x-prio": "high"}),
    ]
    assert bindings(broker, "content") == [("eu", "region = 'eu' AND amount > 100")]
    listed = ok_json(weirmq(broker, "exchanges", "list", "--json"))["exchanges"]
    assert {e["name"]: e["bindings"] for e in listed} == {
        "content": 1, "direct": 1, "fanout": 2, "headers": 2, "topic": 2
    }  # fmt: skip

    text = ok(weirmq(broker, "exchanges", "describe", "topic"))
    header, blank, titles, *rows = text.splitlines()
    assert header == (
        "Exchange topic (topic): 1 partition, 2 bindings, no alternate, unroutable records: drop"
    )
    assert (blank, titles.split()) == ("", ["DESTINATION", "KEY"])
    assert [row.split() for row in rows] == [["eu", "eu.#"], ["all", "#"]]
    text = ok(weirmq(broker, "exchanges", "describe", "headers"))
    assert text.splitlines()[2:] == [
        "DESTINATION  ARGUMENTS                      ",
        "eu           x-match=any, region=eu, urgent ",
        "all          x-match=all-with-x, x-prio=high",
    ]

    def unbind(*args: str) -> Any:
        return ok_json(weirmq(broker, "exchanges", "unbind", *args, "--json"))

    assert unbind("topic", "eu", "--key", "eu.#") == {
        "exchange": "topic", **binding("eu", key="eu.#"), "unbound": True
    }  # fmt: skip
    assert bindings(broker, "topic") == [("all", "#")]
    unbind("fanout", "topic")
    unbind("headers", "eu", "--headers", "urgent,region=eu", "--any")
    unbind("content", "eu", "--match", "region = 'eu' AND amount > 100")
    assert unbind("direct", "eu", "--key", "eu")["unbound"] is True
    assert bindings(broker, "fanout") == [("all", None)]
    assert bindings(broker, "headers") == [("all", {"x-match": "all-with-x", "x-prio": "high"})]
    assert bindings(broker, "content") == bindings(broker, "direct") == []

    missing = weirmq(broker, "exchanges", "unbind", "topic", "eu", "--key", "eu.#")
    assert failed(missing, 1) == "weirmq: eu is not bound to exchange 'topic' with key 'eu.#'"
    quiet = unbind("topic", "eu", "--key", "eu.#", "--if-exists")
    assert quiet["unbound"] is False
    empty = weirmq(broker, "exchanges", "describe", "direct")
    assert ok(empty).startswith("Exchange direct (direct): 1 partition, 0 bindings")
    assert empty.stderr == b"weirmq: exchange 'direct' has no bindings\n"


def test_binding_errors_are_one_line_and_exit_1(broker: BrokerProcess) -> None:
    declare(broker, "orders", "topic")
    declare(broker, "rules", "content")
    ok(weirmq(broker, "topics", "create", "eu"))
    ok(weirmq(broker, "topics", "create", "plain"))

    def refused(*args: str) -> str:
        return failed(weirmq(broker, "exchanges", *args), 1)

    # The broker says where the expression went wrong; the message quotes the expression.
    assert refused("bind", "rules", "eu", "--match", "amount >") == (
        "weirmq: cannot bind eu to exchange 'rules' matching 'amount >': expected a name or a "
        "value at 8, found the end of the expression (INVALID_CONFIG)"
    )
    nowhere = refused("bind", "orders", "nowhere", "--key", "eu.#")
    assert nowhere.startswith("weirmq: cannot bind nowhere to exchange 'orders' with key 'eu.#': ")
    assert "no topic or exchange 'nowhere'" in nowhere
    assert nowhere.endswith("(INVALID_CONFIG)")
    assert refused("bind", "orders", "eu", "--match", "a = 1") == (
        "weirmq: exchange 'orders' is a topic exchange: its bindings need --key PATTERN, "
        "not --match"
    )
    assert refused("bind", "rules", "eu") == (
        "weirmq: exchange 'rules' is a content exchange: its bindings need --match EXPRESSION"
    )
    for command in ("bind", "unbind"):
        assert refused(command, "nope", "eu", "--key", "k") == (
            "weirmq: exchange 'nope' does not exist"
        )
        assert refused(command, "plain", "eu", "--key", "k") == (
            "weirmq: 'plain' is a plain topic, not an exchange"
        )
    assert refused("describe", "nope") == "weirmq: exchange 'nope' does not exist"
    assert refused("describe", "plain", "--json") == (
        "weirmq: 'plain' is a plain topic, not an exchange"
    )
    assert describe(broker, "orders")["bindings"] == []  # nothing was bound
    names = [t["name"] for t in ok_json(weirmq(broker, "topics", "list", "--json"))["topics"]]
    assert "nope" not in names and "nowhere" not in names  # nor created


# -- routing -----------------------------------------------------------------------------------


def test_a_record_produced_to_a_topic_exchange_reaches_the_bound_topic(
    broker: BrokerProcess,
) -> None:
    declare(broker, "orders", "topic", "--partitions", "2")
    for topic in ("eu-orders", "big-orders"):
        ok(weirmq(broker, "topics", "create", topic))
    ok(weirmq(broker, "exchanges", "bind", "orders", "eu-orders", "--key", "eu.#"))
    declare(broker, "rules", "content")
    ok(weirmq(broker, "exchanges", "bind", "orders", "rules", "--key", "#"))
    ok(weirmq(broker, "exchanges", "bind", "rules", "big-orders", "--match", "amount > 100"))

    lines = b"eu.paris:o-1\nus.nyc:o-2\neu.berlin:o-3\n"
    produced = weirmq(broker, "produce", "orders", "--key-separator", ":",
                      "--header", "amount=250", "--json", stdin=lines)  # fmt: skip
    assert ok_json(produced)["delivered"] == 3

    def consumed(topic: str, count: int) -> list[str]:
        result = weirmq(broker, "consume", topic, "--from-beginning", "--exit",
                        "--max-messages", str(count), "--format", "%k=%s\n")  # fmt: skip
        return sorted(ok(result).splitlines())

    # Routing happens before the producer is answered: the copies are there already.
    assert consumed("eu-orders", 2) == ["eu.berlin=o-3", "eu.paris=o-1"]
    assert consumed("big-orders", 3) == ["eu.berlin=o-3", "eu.paris=o-1", "us.nyc=o-2"]
    # The exchange keeps what was written to it, as any topic does.
    assert len(consumed("orders", 3)) == 3


def test_broker_that_went_away_is_exit_3(broker: BrokerProcess) -> None:
    declare(broker, "orders", "fanout")
    broker.kill()
    started = time.monotonic()
    assert failed(weirmq(broker, "exchanges", "describe", "orders"), 3) == (
        f"weirmq: cannot reach a broker at {broker.bootstrap} (connection refused)"
    )
    assert time.monotonic() - started < 10


def test_replay_sends_a_new_binding_what_the_exchange_held(
    broker_factory: BrokerFactory,
) -> None:
    from confluent_kafka import Producer

    broker = broker_factory(admin_listen="127.0.0.1:0")
    assert broker.admin_url is not None
    declare(broker, "events", "topic")
    ok(weirmq(broker, "topics", "create", "eu"))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, key in enumerate(["eu.a", "us.a", "eu.b"]):
        producer.produce("events", b"%d" % i, key.encode())
    assert producer.flush(30) == 0
    ok(weirmq(broker, "exchanges", "bind", "events", "eu", "--key", "eu.*"))
    admin = ["--admin-url", broker.admin_url]
    done = ok_json(weirmq(None, "exchanges", "replay", "events", "eu", "--key", "eu.*",
                          *admin, "--json"))  # fmt: skip
    assert (done["records_read"], done["records_routed"]) == (3, 2)
    assert done["ranges"] == [{"partition": 0, "start_offset": 0, "end_offset": 3}]
    text = ok(weirmq(None, "exchanges", "replay", "events", "eu", "--key", "eu.*",
                     "--from-offset", "0=2", "--to-offset", "0=3", *admin))  # fmt: skip
    assert (
        text == "Replayed 1 record of exchange events (partition: offsets [0: 2..3]); "
        "1 routed into eu.\n"
    )
    message = failed(weirmq(None, "exchanges", "replay", "events", "eu", "--key", "no.*",
                            *admin), 1)  # fmt: skip
    assert "no binding with these fields" in message
    unreachable = ["--admin-url", "http://127.0.0.1:9"]
    assert "no admin API answered" in failed(
        weirmq(None, "exchanges", "replay", "events", "eu", "--key", "eu.*", *unreachable), 3
    )
