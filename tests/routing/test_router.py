"""The exchange graph: declarations, bindings, routing through chains, diamonds and
alternates, unroutable policies, the route cache, limits, and the persisted document."""

from __future__ import annotations

import json

import pytest

from weirmq.errors import ErrorCode
from weirmq.routing import (
    Binding,
    BindingCycleError,
    Exchange,
    ExchangeConflictError,
    ExchangeInUseError,
    ExchangeType,
    ExpressionError,
    InvalidBindingError,
    InvalidRoutingKeyError,
    Router,
    RoutingLimitError,
    UnknownExchangeError,
    UnroutableError,
    limits,
)
from weirmq.routing import router as router_module

DIRECT, TOPIC, FANOUT = ExchangeType.DIRECT, ExchangeType.TOPIC, ExchangeType.FANOUT
HEADERS, CONTENT = ExchangeType.HEADERS, ExchangeType.CONTENT


def to_topic(source: str, topic: str, key: str = "", **fields: object) -> Binding:
    return Binding(source, topic, "topic", key, **fields)  # type: ignore[arg-type]


def to_exchange(source: str, exchange: str, key: str = "") -> Binding:
    return Binding(source, exchange, "exchange", key)


def graph(*exchanges: Exchange) -> Router:
    router = Router()
    for exchange in exchanges:
        router.declare(exchange)
    return router


# -- declarations -------------------------------------------------------------------------


def test_declare_is_idempotent_and_a_different_declaration_names_the_field() -> None:
    router = Router()
    assert router.declare(Exchange("x", DIRECT)) is True
    assert router.declare(Exchange("x", DIRECT)) is False
    with pytest.raises(ExchangeConflictError) as raised:
        router.declare(Exchange("x", FANOUT))
    assert str(raised.value) == (
        "inequivalent arg 'type' for exchange 'x': received 'fanout' but current is 'direct'"
    )
    assert raised.value.code == ErrorCode.invalid_config
    with pytest.raises(
        ExchangeConflictError, match=r"'alternate'.*received 'ae' but current is none"
    ):
        router.declare(Exchange("x", DIRECT, alternate="ae"))
    with pytest.raises(ExchangeConflictError, match="'unroutable'"):
        router.declare(Exchange("x", DIRECT, unroutable="reject"))
    assert router.exchanges() == (Exchange("x", DIRECT),)
    assert router.exchange("x") == Exchange("x", DIRECT) and "x" in router


def test_unknown_exchanges_are_refused_with_kafka_s_unknown_topic_code() -> None:
    router = graph(Exchange("x", DIRECT))
    for action in (
        lambda: router.route("nope", "k", {}),
        lambda: router.bind(to_topic("nope", "t")),
        lambda: router.bind(to_exchange("x", "nope")),
        lambda: router.unbind(to_topic("nope", "t")),
        lambda: router.delete("nope"),
        lambda: router.bindings("nope"),
        lambda: router.exchange("nope"),
    ):
        with pytest.raises(UnknownExchangeError, match="no exchange 'nope'") as raised:
            action()
        assert raised.value.code == ErrorCode.unknown_topic_or_partition


def test_bind_is_idempotent_and_unbind_reports_whether_it_removed() -> None:
    router = graph(Exchange("x", DIRECT))
    binding = to_topic("x", "t", "k")
    assert router.bind(binding) is True
    assert router.bind(to_topic("x", "t", "k")) is False
    assert router.bindings() == (binding,) == router.bindings("x")
    assert router.unbind(binding) is True
    assert router.unbind(binding) is False
    assert router.route("x", "k").unroutable


def test_bindings_are_checked_for_their_exchange_type() -> None:
    router = graph(Exchange("h", HEADERS), Exchange("c", CONTENT), Exchange("d", DIRECT))
    with pytest.raises(InvalidBindingError, match="x-match"):
        router.bind(to_topic("h", "t", arguments={"x-match": "some"}))
    with pytest.raises(ExpressionError, match="at 4"):
        router.bind(to_topic("c", "t", expression="a = "))
    with pytest.raises(InvalidBindingError, match="needs an expression"):
        router.bind(to_topic("c", "t"))
    with pytest.raises(InvalidBindingError, match="only content exchanges take an expression"):
        router.bind(to_topic("d", "t", expression="a = 1"))
    assert router.bindings() == ()  # a refused binding leaves no trace


# -- routing ------------------------------------------------------------------------------


def test_each_exchange_type_routes() -> None:
    router = graph(
        Exchange("d", DIRECT),
        Exchange("t", TOPIC),
        Exchange("f", FANOUT),
        Exchange("h", HEADERS),
        Exchange("c", CONTENT),
    )
    router.bind(to_topic("d", "orders", "order.created"))
    router.bind(to_topic("t", "eu", "*.eu.#"))
    router.bind(to_topic("f", "audit", "ignored"))
    router.bind(to_topic("f", "archive"))
    router.bind(to_topic("h", "pdf", arguments={"format": "pdf"}))
    router.bind(to_topic("c", "big", expression="size > 1000"))

    assert router.route("d", "order.created").topics == {"orders"}
    assert router.route("d", "order").topics == set()
    assert router.route("t", "sale.eu.fr.paris").topics == {"eu"}
    assert router.route("f", "anything").topics == {"audit", "archive"}
    assert router.route("h", "", {"format": b"pdf"}).topics == {"pdf"}
    assert router.route("c", "", {"size": b"2048"}).topics == {"big"}
    assert router.route("c", "", {"size": b"20"}).topics == set()


def test_a_chain_of_exchanges_end_to_end() -> None:
    router = graph(Exchange("in", TOPIC), Exchange("eu", HEADERS), Exchange("all", FANOUT))
    router.bind(to_exchange("in", "eu", "sale.eu.*"))
    router.bind(to_topic("eu", "eu-pdf", arguments={"format": "pdf"}))
    router.bind(to_exchange("eu", "all"))  # all (default), no conditions: everything
    router.bind(to_topic("all", "audit"))

    route = router.route("in", "sale.eu.fr", {"format": b"pdf"})
    assert route.topics == {"eu-pdf", "audit"}
    assert route.visited == ("in", "eu", "all")
    assert route.alternates_used == () and not route.unroutable
    assert router.route("in", "sale.us.ny", {"format": b"pdf"}).topics == set()


def test_a_diamond_delivers_once_and_visits_each_exchange_once() -> None:
    router = graph(*(Exchange(name, FANOUT) for name in ("a", "b", "c", "d")))
    router.bind(to_exchange("a", "b"))
    router.bind(to_exchange("a", "c"))
    router.bind(to_exchange("b", "d"))
    router.bind(to_exchange("c", "d"))
    router.bind(to_topic("d", "t"))
    router.bind(to_topic("b", "t"))

    route = router.route("a", "k")
    assert route.topics == {"t"}
    assert sorted(route.visited) == ["a", "b", "c", "d"] and len(route.visited) == 4


def test_cycles_are_refused_at_bind_time() -> None:
    router = graph(*(Exchange(name, DIRECT) for name in ("a", "b", "c")))
    router.bind(to_exchange("a", "b", "k"))
    router.bind(to_exchange("b", "c", "k"))
    with pytest.raises(BindingCycleError, match="would close a cycle") as raised:
        router.bind(to_exchange("c", "a", "other"))
    assert raised.value.code == ErrorCode.invalid_config
    with pytest.raises(BindingCycleError):
        router.bind(to_exchange("a", "a"))
    # Parallel edges and a second path are not cycles.
    assert router.bind(to_exchange("a", "b", "other"))
    assert router.bind(to_exchange("a", "c", "k"))
    # Once the path is gone, the edge back is fine.
    router.unbind(to_exchange("b", "c", "k"))
    router.unbind(to_exchange("a", "c", "k"))
    assert router.bind(to_exchange("c", "a", "other"))


def test_the_alternate_takes_only_what_the_exchange_s_own_bindings_miss() -> None:
    router = graph(
        Exchange("main", DIRECT, alternate="ae"),
        Exchange("ae", FANOUT),
        Exchange("empty", FANOUT),
    )
    router.bind(to_topic("main", "known", "k"))
    router.bind(to_exchange("main", "empty", "to-empty"))
    router.bind(to_topic("ae", "unrouted"))

    assert router.route("main", "k").topics == {"known"}
    missed = router.route("main", "other")
    assert missed.topics == {"unrouted"} and missed.alternates_used == ("ae",)
    # An exchange binding matched: the alternate is not used, even though it led nowhere.
    to_empty = router.route("main", "to-empty")
    assert to_empty.unroutable and to_empty.alternates_used == ()


def test_alternates_chain_and_cannot_loop() -> None:
    router = graph(
        Exchange("a", DIRECT, alternate="b"),
        Exchange("b", DIRECT, alternate="a"),
        Exchange("c", DIRECT, alternate="missing"),
    )
    route = router.route("a", "k")
    assert route.unroutable and route.alternates_used == ("b",) and route.visited == ("a", "b")
    assert router.route("c", "k").alternates_used == ()  # a missing alternate is skipped


def test_an_alternate_downstream_is_used_by_the_exchange_that_missed() -> None:
    router = graph(Exchange("in", FANOUT), Exchange("mid", DIRECT, alternate="ae"))
    router.declare(Exchange("ae", FANOUT))
    router.bind(to_exchange("in", "mid"))
    router.bind(to_topic("ae", "rest"))
    route = router.route("in", "nothing-bound")
    assert route.topics == {"rest"} and route.alternates_used == ("ae",)


def test_unroutable_records_follow_the_entry_exchange_s_policy() -> None:
    router = graph(
        Exchange("drop", DIRECT),
        Exchange("strict", DIRECT, unroutable="reject"),
        Exchange("lenient-next", DIRECT, unroutable="reject"),
    )
    router.bind(to_exchange("drop", "lenient-next", "k"))
    dropped = router.route("drop", "k")
    assert dropped.unroutable and not dropped.rejected and dropped.policy == "drop"
    dropped.raise_if_rejected()  # nothing to raise

    refused = router.route("strict", "k")
    assert refused.unroutable and refused.rejected and refused.policy == "reject"
    with pytest.raises(UnroutableError, match="no route from exchange 'strict'") as raised:
        refused.raise_if_rejected()
    assert raised.value.code == ErrorCode.invalid_record

    router.bind(to_topic("strict", "t", "k"))
    assert not router.route("strict", "k").rejected


def test_routing_keys_are_bounded() -> None:
    router = graph(Exchange("d", DIRECT))
    router.route("d", "k" * limits.ROUTING_KEY_MAX_BYTES)
    with pytest.raises(InvalidRoutingKeyError, match="4097 bytes") as raised:
        router.route("d", "k" * (limits.ROUTING_KEY_MAX_BYTES + 1))
    assert raised.value.code == ErrorCode.invalid_record


# -- delete -------------------------------------------------------------------------------


def test_delete_removes_the_bindings_both_ways() -> None:
    router = graph(Exchange("up", FANOUT), Exchange("x", FANOUT), Exchange("down", FANOUT))
    into, out_of = to_exchange("up", "x"), to_exchange("x", "down")
    to_t = to_topic("x", "t")
    for binding in (into, out_of, to_t, to_topic("down", "d"), to_topic("up", "u")):
        router.bind(binding)

    with pytest.raises(ExchangeInUseError, match="source of 2 bindings"):
        router.delete("x", if_unused=True)
    assert set(router.delete("x")) == {into, out_of, to_t}
    assert "x" not in router
    assert router.bindings() == (to_topic("up", "u"), to_topic("down", "d"))
    assert router.route("up", "k").topics == {"u"}
    # Bindings *to* an exchange do not make it "in use" (RabbitMQ's rule).
    router.bind(to_exchange("up", "down"))
    router.unbind(to_topic("down", "d"))
    assert router.delete("down", if_unused=True) == (to_exchange("up", "down"),)
    # Declaring the name again starts with no bindings.
    router.declare(Exchange("x", DIRECT))
    assert router.bindings("x") == ()


# -- the route cache ----------------------------------------------------------------------


def test_a_route_changes_right_after_a_bind_or_unbind() -> None:
    router = graph(Exchange("t", TOPIC), Exchange("f", FANOUT))
    first = router.route("t", "a.b")
    assert first.unroutable
    assert router.route("t", "a.b") is first  # cached
    generation = router.generation

    router.bind(to_topic("t", "q", "a.*"))
    assert router.generation > generation
    assert router.route("t", "a.b").topics == {"q"}
    router.bind(to_exchange("t", "f", "#"))
    router.bind(to_topic("f", "all"))
    assert router.route("t", "a.b").topics == {"q", "all"}
    router.unbind(to_topic("t", "q", "a.*"))
    assert router.route("t", "a.b").topics == {"all"}
    router.delete("f")
    assert router.route("t", "a.b").unroutable


def test_idempotent_changes_keep_the_cache() -> None:
    router = graph(Exchange("d", DIRECT))
    router.bind(to_topic("d", "t", "k"))
    cached = router.route("d", "k")
    router.declare(Exchange("d", DIRECT))
    router.bind(to_topic("d", "t", "k"))
    router.unbind(to_topic("d", "other", "k"))
    assert router.route("d", "k") is cached


def test_routes_through_header_exchanges_are_never_cached() -> None:
    router = graph(Exchange("f", FANOUT), Exchange("h", HEADERS))
    router.bind(to_exchange("f", "h"))
    router.bind(to_topic("h", "pdf", arguments={"format": "pdf"}))
    assert router.route("f", "k", {"format": "pdf"}).topics == {"pdf"}
    assert router.route("f", "k", {"format": "zip"}).topics == set()


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "ROUTE_CACHE_ENTRIES", 3)
    router = graph(Exchange("d", DIRECT))
    routes = {key: router.route("d", key) for key in ("a", "b", "c")}
    assert router.route("d", "a") is routes["a"]  # "a" is now the most recent
    router.route("d", "d")  # evicts "b", the least recently used
    assert router.route("d", "a") is routes["a"]
    assert router.route("d", "b") is not routes["b"]
    long_key = "k" * (limits.ROUTE_CACHE_KEY_MAX_CHARS + 1)
    assert router.route("d", long_key) is not router.route("d", long_key)


# -- limits -------------------------------------------------------------------------------


def test_exchange_and_binding_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "EXCHANGES_MAX", 2)
    monkeypatch.setattr(router_module, "BINDINGS_PER_EXCHANGE_MAX", 2)
    router = graph(Exchange("a", DIRECT), Exchange("b", DIRECT))
    with pytest.raises(RoutingLimitError, match="limit of 2 exchanges") as raised:
        router.declare(Exchange("c", DIRECT))
    assert raised.value.code == ErrorCode.policy_violation
    router.declare(Exchange("a", DIRECT))  # a redeclaration is fine at the limit
    router.bind(to_topic("a", "t1"))
    router.bind(to_topic("a", "t2"))
    router.bind(to_topic("a", "t2"))  # idempotent at the limit
    with pytest.raises(RoutingLimitError, match="the limit is 2"):
        router.bind(to_topic("a", "t3"))


# -- the document -------------------------------------------------------------------------


def full_router() -> Router:
    router = graph(
        Exchange("in", TOPIC, alternate="ae", unroutable="reject"),
        Exchange("ae", FANOUT),
        Exchange("h", HEADERS),
        Exchange("c", CONTENT),
        Exchange("d", DIRECT),
    )
    router.bind(to_exchange("in", "h", "sale.#"))
    router.bind(to_exchange("in", "c", "sale.#"))
    router.bind(to_topic("in", "exact", "sale.eu"))
    router.bind(to_topic("ae", "dead"))
    router.bind(to_topic("h", "pdf", arguments={"x-match": "any", "format": b"pdf", "n": 1.5}))
    router.bind(to_topic("h", "flag", arguments={"on": True, "trace": None}))
    router.bind(to_topic("c", "big", expression='size > 1000 AND "content-type" IS NOT NULL'))
    router.bind(to_topic("d", "t", "k", arguments={"x-anything": "kept"}))
    return router


def test_the_document_round_trips_through_json() -> None:
    original = full_router()
    document = json.loads(json.dumps(original.to_document()))
    restored = Router.from_document(document)

    assert restored.exchanges() == original.exchanges()
    assert restored.bindings() == original.bindings()
    assert restored.to_document() == original.to_document()
    for key, headers in [
        ("sale.eu", {"format": b"pdf", "size": b"5000", "content-type": b"x"}),
        ("other", {}),
        ("sale.us", {"on": True, "trace": b""}),
    ]:
        assert restored.route("in", key, headers) == original.route("in", key, headers)


def test_a_foreign_document_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="version"):
        Router.from_document({"version": 99})
    with pytest.raises(ValueError, match="'exchanges' must be a list"):
        Router.from_document({"version": 1, "exchanges": {}})
    with pytest.raises(ValueError, match="unknown exchange type"):
        Router.from_document({"version": 1, "exchanges": [{"name": "x", "type": "queue"}]})
    with pytest.raises(ValueError, match="'name' must be a string"):
        Router.from_document({"version": 1, "exchanges": [{"type": "direct"}]})
    assert Router.from_document({"version": 1}).exchanges() == ()
