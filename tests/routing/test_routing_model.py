"""Exchanges and bindings as values: checked when made, equal by their fields."""

from __future__ import annotations

import pytest

from weirmq.errors import ErrorCode
from weirmq.routing import (
    Binding,
    Exchange,
    ExchangeType,
    InvalidBindingError,
    InvalidExchangeError,
)
from weirmq.routing.limits import BINDING_ARGUMENTS_MAX, BINDING_KEY_MAX_BYTES, NAME_MAX_BYTES


def test_an_exchange_takes_its_type_by_name_and_checks_its_fields() -> None:
    assert Exchange("x", "topic").type is ExchangeType.TOPIC  # type: ignore[arg-type]
    with pytest.raises(InvalidExchangeError, match="unknown type 'queue'"):
        Exchange("x", "queue")  # type: ignore[arg-type]
    with pytest.raises(InvalidExchangeError, match="unroutable must be"):
        Exchange("x", ExchangeType.FANOUT, unroutable="bounce")  # type: ignore[arg-type]
    with pytest.raises(InvalidExchangeError, match="non-empty"):
        Exchange("", ExchangeType.FANOUT)
    with pytest.raises(InvalidExchangeError, match="256 bytes"):
        Exchange("é" * 128, ExchangeType.FANOUT)
    assert Exchange("x" * NAME_MAX_BYTES, ExchangeType.FANOUT).name
    assert InvalidExchangeError("").code == ErrorCode.invalid_config


def test_a_binding_is_its_fields() -> None:
    one = Binding("x", "t", "topic", "k", {"b": 1, "a": "v"})
    same = Binding("x", "t", "topic", "k", {"a": b"v", "b": 1.0})
    assert one == same and hash(one) == hash(same)
    assert list(one.arguments) == ["a", "b"]  # sorted, and bytes decoded
    assert one.arguments["a"] == "v"
    # A boolean is not the number 1: those bindings match different records.
    assert one != Binding("x", "t", "topic", "k", {"a": "v", "b": True})
    assert one != Binding("x", "t", "exchange", "k", {"a": "v", "b": 1})
    assert one != Binding("x", "t", "topic", "k", {"a": "v", "b": 1}, "a = 1")


def test_a_binding_copies_its_arguments() -> None:
    arguments: dict[str, str | None] = {"a": None}
    binding = Binding("x", "t", "topic", arguments=arguments)
    arguments["b"] = "later"
    assert dict(binding.arguments) == {"a": None}
    with pytest.raises(TypeError):
        binding.arguments["c"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"destination_kind": "queue"}, "destination_kind"),
        ({"key": "k" * (BINDING_KEY_MAX_BYTES + 1)}, "256 bytes"),
        ({"arguments": {"n": float("nan")}}, "not a finite number"),
        ({"arguments": {"n": float("inf")}}, "not a finite number"),
        ({"arguments": {"n": [1]}}, "not list"),
        ({"arguments": {f"a{i}": 1 for i in range(BINDING_ARGUMENTS_MAX + 1)}}, "arguments"),
        ({"arguments": {"": 1}}, "argument name"),
        ({"source": ""}, "binding source"),
    ],
)
def test_a_binding_refuses_what_cannot_be_matched_or_stored(
    fields: dict[str, object], message: str
) -> None:
    values: dict[str, object] = {"source": "x", "destination": "t", "destination_kind": "topic"}
    with pytest.raises(InvalidBindingError, match=message):
        Binding(**(values | fields))  # type: ignore[arg-type]


def test_a_binding_key_of_exactly_255_bytes_is_fine() -> None:
    assert Binding("x", "t", "topic", "k" * BINDING_KEY_MAX_BYTES).key
