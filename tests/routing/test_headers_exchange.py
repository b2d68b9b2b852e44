"""The headers exchange: RabbitMQ's x-match rules, type classes, and the index agreeing
with a binding-by-binding reference."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.routing import Binding, HeaderValue, InvalidBindingError
from weirmq.routing.headers import HeadersIndex, compile_rule
from weirmq.routing.model import normalise


def kind(value: object) -> str:
    return (
        "bool"
        if isinstance(value, bool)
        else "number"
        if isinstance(value, int | float)
        else "other"
    )


def reference(arguments: Mapping[str, HeaderValue], headers: Mapping[str, HeaderValue]) -> bool:
    """RabbitMQ's headers_match, restated from its rules (no code shared with the index)."""
    args = {name: normalise(value) for name, value in arguments.items()}
    data = {name: normalise(value) for name, value in headers.items()}
    mode = args.pop("x-match", "all")
    assert isinstance(mode, str)
    with_x = mode.endswith("-with-x")
    held = [
        name in data and (want is None or (kind(data[name]) == kind(want) and data[name] == want))
        for name, want in args.items()
        if with_x or not name.startswith("x-")
    ]
    return all(held) if mode.startswith("all") else any(held)


def matches(arguments: Mapping[str, HeaderValue], headers: Mapping[str, HeaderValue]) -> bool:
    binding = Binding("x", "t", "topic", arguments=arguments)
    index = HeadersIndex()
    index.add(binding, compile_rule(binding.arguments))
    normalised = {name: normalise(value) for name, value in headers.items()}
    found = binding in set(index.match(normalised))
    assert found == reference(arguments, headers)
    return found


def test_all_is_the_default_and_needs_every_argument() -> None:
    arguments = {"format": "pdf", "type": "report"}
    assert matches(arguments, {"format": "pdf", "type": "report", "extra": "x"})
    assert not matches(arguments, {"format": "pdf", "type": "log"})
    assert not matches(arguments, {"format": "pdf"})
    assert matches(arguments | {"x-match": "all"}, {"format": "pdf", "type": "report"})


def test_any_needs_one_argument() -> None:
    arguments = {"x-match": "any", "format": "pdf", "type": "report"}
    assert matches(arguments, {"format": "zip", "type": "report"})
    assert not matches(arguments, {"format": "zip", "type": "log"})
    assert not matches(arguments, {})


def test_no_conditions_all_matches_everything_any_nothing() -> None:
    assert matches({}, {}) and matches({"x-match": "all"}, {"a": 1})
    assert not matches({"x-match": "any"}, {"a": 1})
    # Only x- arguments: not conditions under all/any.
    assert matches({"x-match": "all", "x-tag": "v"}, {})
    assert not matches({"x-match": "any", "x-tag": "v"}, {"x-tag": "v"})


def test_x_arguments_are_conditions_only_with_x() -> None:
    assert matches({"x-match": "all", "x-tag": "v", "a": 1}, {"a": 1})
    assert not matches({"x-match": "all-with-x", "x-tag": "v", "a": 1}, {"a": 1})
    assert matches({"x-match": "all-with-x", "x-tag": "v", "a": 1}, {"a": 1, "x-tag": "v"})
    assert not matches({"x-match": "any", "x-tag": "v"}, {"x-tag": "v"})
    assert matches({"x-match": "any-with-x", "x-tag": "v", "a": 1}, {"x-tag": "v"})
    # x-match itself is never a condition, even with x.
    assert matches({"x-match": "all-with-x", "a": 1}, {"a": 1})


def test_an_argument_without_a_value_asks_for_presence() -> None:
    assert matches({"trace": None}, {"trace": "anything"})
    assert matches({"trace": None}, {"trace": None})  # a Kafka header with a null value
    assert not matches({"trace": None}, {"other": "x"})
    assert matches({"x-match": "any", "trace": None, "a": 1}, {"trace": b""})


def test_values_compare_within_their_type_class() -> None:
    assert matches({"n": 1}, {"n": 1.0})
    assert not matches({"n": 1}, {"n": True})
    assert not matches({"n": True}, {"n": 1})
    assert matches({"n": True}, {"n": True})
    assert not matches({"n": 1}, {"n": "1"})
    assert not matches({"n": "1"}, {"n": 1})
    assert not matches({"n": "v"}, {"n": None})
    assert not matches({"n": 0.5}, {"n": float("nan")})


def test_bytes_are_strings_on_both_sides() -> None:
    assert matches({"format": b"pdf"}, {"format": "pdf"})
    assert matches({"format": "pdf"}, {"format": b"pdf"})
    assert matches({"name": "caf\u00e9"}, {"name": "caf\u00e9".encode()})
    # Invalid UTF-8 is replaced, never an error.
    assert matches({"raw": "\ufffd"}, {"raw": b"\xff"})
    assert matches({"x-match": b"any", "a": 1, "b": 2}, {"b": 2})


@pytest.mark.parametrize("mode", ["none", "ALL", "", 1, True, None])
def test_an_invalid_x_match_is_refused(mode: HeaderValue) -> None:
    with pytest.raises(InvalidBindingError, match="x-match"):
        compile_rule({"x-match": mode, "a": 1})


def test_removing_a_binding_removes_its_conditions() -> None:
    index = HeadersIndex()
    kept = Binding("x", "t1", "topic", arguments={"a": 1})
    gone = Binding("x", "t2", "topic", arguments={"x-match": "any", "a": 1, "b": None})
    everything = Binding("x", "t3", "topic")
    for binding in (kept, gone, everything):
        index.add(binding, compile_rule(binding.arguments))
    index.remove(gone)
    index.remove(everything)
    index.remove(Binding("x", "t4", "topic"))  # never added
    assert set(index.match({"a": 1, "b": "x"})) == {kept}
    assert set(index.match({"b": "x"})) == set()


# -- property: the index agrees with the rules tried binding by binding -------------------

NAMES = st.sampled_from(["a", "b", "c", "x-d"])
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(0, 2), st.sampled_from([0.0, 1.0, 2.5]),
    st.sampled_from(["0", "1", "v"]), st.sampled_from([b"1", b"v"]),
)  # fmt: skip
MODES = st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"])


@st.composite
def argument_sets(draw: st.DrawFn) -> dict[str, HeaderValue]:
    arguments: dict[str, HeaderValue] = draw(st.dictionaries(NAMES, VALUES, max_size=3))
    mode = draw(MODES)
    if mode is not None:
        arguments["x-match"] = mode
    return arguments


@settings(max_examples=100, deadline=None)
@given(
    st.lists(argument_sets(), min_size=1, max_size=8),
    st.lists(st.dictionaries(NAMES, VALUES, max_size=4), min_size=1, max_size=4),
)
def test_index_agrees_with_the_rules(
    argument_lists: list[dict[str, HeaderValue]], records: list[dict[str, HeaderValue]]
) -> None:
    index = HeadersIndex()
    bindings = {}
    for i, arguments in enumerate(argument_lists):
        binding = Binding("x", f"t{i}", "topic", arguments=arguments)
        bindings[binding] = arguments
        index.add(binding, compile_rule(binding.arguments))
    for headers in records:
        normalised = {name: normalise(value) for name, value in headers.items()}
        expected = {b for b, arguments in bindings.items() if reference(arguments, headers)}
        assert set(index.match(normalised)) == expected
        assert {b for b in bindings if compile_rule(b.arguments).matches(normalised)} == expected
