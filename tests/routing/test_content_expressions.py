"""Content expressions: each operator, SQL's NULL logic, precedence, errors with positions,
limits; then properties (printing round-trips, garbage raises only ExpressionError, the
content exchange's index agrees with testing every binding)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.errors import ErrorCode
from weirmq.routing import Binding, Expression, ExpressionError, HeaderValue, InvalidBindingError
from weirmq.routing.expression import (
    And,
    Between,
    Boolean,
    Comparison,
    Identifier,
    In,
    IsNull,
    Not,
    Number,
    Or,
    Predicate,
    String,
    parse,
)
from weirmq.routing.limits import EXPRESSION_DEPTH_MAX, EXPRESSION_MAX_CHARS
from weirmq.routing.matchers import ContentMatcher, Message
from weirmq.routing.model import normalise

HEADERS: dict[str, HeaderValue] = {
    "region": b"eu",
    "price": b"12.50",
    "count": b"7",
    "name": b"O'Brien",
    "content-type": b"application/json",
    "flag": b"true",
    "typed": 3,
    "double": 0.1,
    "on": True,
    "nothing": None,
}


def evaluate(text: str, headers: dict[str, HeaderValue] = HEADERS) -> bool | None:
    return Expression(text).evaluate({k: normalise(v) for k, v in headers.items()})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region = 'eu'", True),
        ("region <> 'eu'", False),
        ("region != 'us'", True),
        ("region < 'fr'", True),
        ("region <= 'eu'", True),
        ("region > 'eu'", False),
        ("region >= 'eu'", True),
        ("price = 12.5", True),  # numeric text against a number: numerically
        ("price > 12", True),
        ("price < -1", False),
        ("count = 7", True),
        ("count <> 7.0", False),
        ("count >= 7 AND count <= 7", True),
        ("typed = 3", True),
        ("typed = '3'", True),  # numeric text is a number, whichever side it is on
        ("typed = 'three'", None),  # a number against other text: unknown
        ("typed > 2.5", True),
        ("double = 0.1", True),  # an AMQP double at its own precision
        ("region = 1", None),  # text that is no number against a number: unknown
        ("count = '7'", True),  # text against text
        ("count < '10'", False),  # text order, not numbers
        ("flag = TRUE", True),
        ("flag <> FALSE", True),
        ("on = TRUE", True),
        ("on = 1", None),
        ("on > FALSE", None),  # booleans have no order
        ("name = 'O''Brien'", True),
        ("\"content-type\" = 'application/json'", True),
        ("TRUE", True),
        ("FALSE", False),
        ("1 = 1", True),
    ],
)
def test_comparisons(text: str, expected: bool | None) -> None:
    assert evaluate(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("price BETWEEN 10 AND 20", True),
        ("price BETWEEN 12.5 AND 12.5", True),
        ("price BETWEEN 13 AND 20", False),
        ("price NOT BETWEEN 13 AND 20", True),
        ("region BETWEEN 'a' AND 'f'", True),
        ("missing BETWEEN 1 AND 2", None),
        ("missing NOT BETWEEN 1 AND 2", None),
        ("price BETWEEN 13 AND missing", False),  # FALSE AND unknown is FALSE
        ("price BETWEEN 10 AND missing", None),
        ("region IN ('us', 'eu')", True),
        ("region IN ('us')", False),
        ("region NOT IN ('us', 'ap')", True),
        ("count IN (1, 7, 'x')", True),
        ("count IN (1, 'x')", False),  # 'x' is a string compared as text: FALSE
        ("typed IN ('a', 4)", None),  # typed = 'a' is unknown, typed = 4 FALSE
        ("typed IN ('a', 3)", True),
        ("missing IN (1, 2)", None),
        ("missing NOT IN (1, 2)", None),
        ("missing IS NULL", True),
        ("nothing IS NULL", True),  # a header with a null value is NULL
        ("region IS NULL", False),
        ("region IS NOT NULL", True),
        ("missing IS NOT NULL", False),
    ],
)
def test_between_in_and_null(text: str, expected: bool | None) -> None:
    assert evaluate(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("missing = 1", None),
        ("NOT missing = 1", None),
        ("missing = 1 AND region = 'eu'", None),
        ("missing = 1 AND region = 'us'", False),
        ("missing = 1 OR region = 'eu'", True),
        ("missing = 1 OR region = 'us'", None),
        ("NOT (missing = 1 OR region = 'us')", None),
        ("NOT (missing = 1 AND region = 'us')", True),
        ("missing <> 1", None),  # not "anything but 1": unknown
    ],
)
def test_three_valued_logic(text: str, expected: bool | None) -> None:
    assert evaluate(text) is expected
    assert Expression(text).matches({k: normalise(v) for k, v in HEADERS.items()}) is (
        expected is True
    )


def test_precedence_is_not_then_and_then_or() -> None:
    a, b, c = (Comparison("=", Identifier(n), Number(1)) for n in "abc")
    assert parse("a = 1 OR b = 1 AND c = 1") == Or((a, And((b, c))))
    assert parse("NOT a = 1 AND b = 1") == And((Not(a), b))
    assert parse("NOT a = 1 OR b = 1") == Or((Not(a), b))
    assert parse("(a = 1 OR b = 1) AND c = 1") == And((Or((a, b)), c))
    assert parse("a = 1 AND b = 1 AND c = 1") == And((a, b, c))
    assert parse("a = 1 AND (b = 1 AND c = 1)") == And((a, And((b, c))))
    # TRUE OR (FALSE AND FALSE): AND first.
    assert evaluate("TRUE OR FALSE AND FALSE") is True
    assert evaluate("(TRUE OR FALSE) AND FALSE") is False
    assert evaluate("NOT FALSE AND FALSE") is False


def test_keywords_are_case_insensitive_and_names_are_not() -> None:
    tree = parse("a between 1 and 2 or B is not null and not c in (TRUE, false)")
    assert str(tree) == "a BETWEEN 1 AND 2 OR B IS NOT NULL AND NOT c IN (TRUE, FALSE)"
    assert evaluate("Region = 'eu'") is None


def test_literals() -> None:
    assert parse("a = -12") == Comparison("=", Identifier("a"), Number(-12))
    assert parse("a = -0.25") == Comparison("=", Identifier("a"), Number(Decimal("-0.25")))
    assert parse("a = 'it''s'") == Comparison("=", Identifier("a"), String("it's"))
    assert parse('"x-""y""" = \'\'') == Comparison("=", Identifier('x-"y"'), String(""))
    assert parse("a = TRUE") == Comparison("=", Identifier("a"), Boolean(True))


def test_canonical_printing() -> None:
    text = "not(a=1)and(b<>'x'or\"c.d\"in(1,2.5))or e is null"
    assert str(Expression(text)) == "NOT a = 1 AND (b <> 'x' OR \"c.d\" IN (1, 2.5)) OR e IS NULL"
    assert str(Expression("a != 1")) == "a <> 1"
    assert str(Expression('"and" = 1')) == '"and" = 1'  # a keyword as a name stays quoted


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 0, "expected a condition"),
        ("   ", 3, "expected a condition"),
        ("a = ", 4, "expected a name or a value"),
        ("(a = 1 OR b = 2", 15, "expected ')'"),
        ("(a = 1 OR b = 2 c", 16, "expected ')'"),
        ("a = 1)", 5, "expected AND, OR or the end"),
        ("a = 1 b = 2", 6, "expected AND, OR or the end"),
        ("a", 1, "expected an operator"),
        ("a 1", 2, "expected an operator"),
        ("a ! 1", 2, "unexpected character '!'"),
        ("a = 'open", 4, "unterminated string"),
        ('"open = 1', 0, "unterminated quoted name"),
        ('"" = 1', 0, "empty quoted name"),
        ("a = NULL", 4, "NULL may only follow IS"),
        ("a IS 1", 5, "expected NULL"),
        ("a NOT 1", 6, "expected BETWEEN or IN"),
        ("a BETWEEN 1 OR 2", 12, "expected AND"),
        ("a IN 1", 5, "expected '('"),
        ("a IN ()", 6, "expected a literal"),
        ("a IN (b)", 6, "expected a literal"),
        ("a IN (1 2)", 8, "expected ',' or ')'"),
        ("a = 1 AND", 9, "expected a condition"),
        ("NOT", 3, "expected a condition"),
        ("a = 1.", 5, "unexpected character '.'"),
        ("a = -", 4, "unexpected character '-'"),
        ("a = #", 4, "unexpected character '#'"),
        ("a.b = 1", 1, "unexpected character '.'"),
    ],
)
def test_errors_point_at_the_problem(text: str, position: int, message: str) -> None:
    with pytest.raises(ExpressionError) as raised:
        parse(text)
    assert raised.value.position == position
    assert message in str(raised.value)
    assert f"at {position}" in str(raised.value)
    assert raised.value.code == ErrorCode.invalid_config
    assert isinstance(raised.value, InvalidBindingError)


def test_the_message_says_what_was_found() -> None:
    with pytest.raises(ExpressionError, match=r"^expected '\)' at 15, found the end"):
        parse("(a = 1 OR b = 2")
    with pytest.raises(ExpressionError, match=r"found 'c'$"):
        parse("(a = 1 OR b = 2 c")


def test_length_is_bounded() -> None:
    fits = "a = '" + "x" * (EXPRESSION_MAX_CHARS - 6) + "'"
    assert len(fits) == EXPRESSION_MAX_CHARS
    parse(fits)
    with pytest.raises(ExpressionError, match="at most 4096") as raised:
        parse(fits + " ")
    assert raised.value.position == EXPRESSION_MAX_CHARS


def test_nesting_is_bounded() -> None:
    deepest = "(" * EXPRESSION_DEPTH_MAX + "a = 1" + ")" * EXPRESSION_DEPTH_MAX
    assert evaluate(deepest, {"a": 1}) is True
    with pytest.raises(ExpressionError, match="nest deeper than 64") as raised:
        parse("(" + deepest + ")")
    assert raised.value.position == EXPRESSION_DEPTH_MAX
    nots = "NOT " * EXPRESSION_DEPTH_MAX + "a = 1"
    assert evaluate(nots, {"a": 1}) is True
    with pytest.raises(ExpressionError, match="nest deeper"):
        parse("NOT " + nots)


def test_long_chains_are_not_nesting() -> None:
    chain = " OR ".join(f"a = {i}" for i in range(300))
    assert evaluate(chain, {"a": 299}) is True


def test_anchors_are_names_one_of_which_a_true_needs() -> None:
    assert Expression("a = 1 AND (b = 2 OR c = 3)").anchors == {"a"}
    assert Expression("(b = 2 OR c = 3) AND a = 1").anchors == {"a"}
    assert Expression("a = 1 OR b = 2").anchors == {"a", "b"}
    assert Expression("a = 1 OR b IS NULL").anchors == set()
    assert Expression("(a = 1 AND b = 1) OR (a = 2 AND c = 1)").anchors == {"a"}
    assert Expression("b = a").anchors == {"a"}
    assert Expression("a IS NULL").anchors == set()
    assert Expression("TRUE OR a = 1").anchors == set()
    assert Expression("NOT a IS NULL").anchors == {"a"}
    assert Expression("NOT (a IS NULL OR b = 1)").anchors == {"a"}
    assert Expression("a NOT BETWEEN b AND c").anchors == {"a"}
    assert Expression("1 NOT BETWEEN b AND b").anchors == {"b"}
    assert Expression("NOT (a = 1 AND b = 1)").anchors == {"a", "b"}
    assert Expression("'x' IN ('x')").anchors == set()


def test_the_content_matcher_uses_expressions_and_refuses_bad_bindings() -> None:
    matcher = ContentMatcher()
    eu = Binding("c", "eu", "topic", expression="region = 'eu'")
    cheap = Binding("c", "cheap", "topic", expression="price < 20 OR free IS NOT NULL")
    assert Expression(str(cheap.expression)).anchors == {"price", "free"}
    orphans = Binding("c", "orphans", "topic", expression="region IS NULL")
    for binding in (eu, cheap, orphans):
        matcher.add(binding)
    assert set(matcher.match(Message("", HEADERS))) == {eu, cheap}
    assert set(matcher.match(Message("", {"free": b""}))) == {cheap, orphans}
    matcher.remove(cheap)
    matcher.remove(orphans)
    assert set(matcher.match(Message("", {"free": b""}))) == set()
    with pytest.raises(InvalidBindingError, match="needs an expression"):
        matcher.add(Binding("c", "t", "topic"))
    with pytest.raises(ExpressionError):
        matcher.add(Binding("c", "t", "topic", expression="region ="))


# -- properties ---------------------------------------------------------------------------

NAMES = st.one_of(
    st.sampled_from(["a", "b", "c", "_x1", "content-type", "and", "NULL", 'q"uote', "a b"]),
    st.text(min_size=1, max_size=6),
)
LITERALS = st.one_of(
    st.builds(String, st.text(max_size=6)),
    st.builds(Number, st.integers(-(10**12), 10**12)),
    st.builds(Number, st.decimals(allow_nan=False, allow_infinity=False, places=3)),
    st.builds(Boolean, st.booleans()),
)
OPERANDS = st.one_of(st.builds(Identifier, NAMES), LITERALS)
CONDITIONS = st.one_of(
    st.builds(Comparison, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), OPERANDS, OPERANDS),
    st.builds(Between, OPERANDS, OPERANDS, OPERANDS, st.booleans()),
    st.builds(In, OPERANDS, st.lists(LITERALS, min_size=1, max_size=3).map(tuple), st.booleans()),
    st.builds(IsNull, OPERANDS, st.booleans()),
    st.builds(Boolean, st.booleans()),
)


def _combined(children: st.SearchStrategy[Predicate]) -> st.SearchStrategy[Predicate]:
    several = st.lists(children, min_size=2, max_size=3).map(tuple)
    return st.one_of(st.builds(Not, children), st.builds(And, several), st.builds(Or, several))


PREDICATES = st.recursive(CONDITIONS, _combined, max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(PREDICATES)
def test_printing_round_trips(tree: Predicate) -> None:
    text = str(tree)
    assert parse(text) == tree
    assert str(parse(text)) == text


TOKENS = st.sampled_from(
    [
        "a", "b", '"c-d"', "'s'", "''", "'", '"', "1", "-2", "3.5", ".", "-", "(", ")", ",",
        "=", "<>", "!=", "!", "<", ">=", "AND", "or", "NOT", "BETWEEN", "in", "IS", "NULL",
        "TRUE", "false", "#", "é", " ", "\t",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.lists(TOKENS, max_size=14).map(" ".join)))
def test_garbage_raises_only_expression_errors_within_the_text(text: str) -> None:
    try:
        tree = parse(text)
    except ExpressionError as error:
        assert 0 <= error.position <= len(text)
        assert f"at {error.position}" in str(error)
    else:
        assert parse(str(tree)) == tree


HEADER_NAMES = st.sampled_from(["a", "b", "c"])
HEADER_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([b"1", b"x", b"true", "2"])
)  # fmt: skip
SIMPLE_OPERANDS = st.one_of(
    st.builds(Identifier, HEADER_NAMES),
    st.builds(Number, st.integers(-2, 2)),
    st.builds(String, st.sampled_from(["1", "x"])),
)
SIMPLE_CONDITIONS = st.one_of(
    st.builds(Comparison, st.sampled_from(["=", "<>", "<"]), SIMPLE_OPERANDS, SIMPLE_OPERANDS),
    st.builds(Between, SIMPLE_OPERANDS, SIMPLE_OPERANDS, SIMPLE_OPERANDS, st.booleans()),
    st.builds(IsNull, SIMPLE_OPERANDS, st.booleans()),
    st.builds(In, SIMPLE_OPERANDS, st.just((Number(1), String("x"))), st.booleans()),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.recursive(SIMPLE_CONDITIONS, _combined, max_leaves=5), min_size=1, max_size=6),
    st.lists(st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=3), min_size=1, max_size=4),
)
def test_the_content_index_agrees_with_testing_every_binding(
    trees: list[Predicate], records: list[dict[str, HeaderValue]]
) -> None:
    matcher = ContentMatcher()
    bindings = [Binding("c", f"t{i}", "topic", expression=str(t)) for i, t in enumerate(trees)]
    for binding in bindings:
        matcher.add(binding)
    for headers in records:
        normalised = {name: normalise(value) for name, value in headers.items()}
        expected = {b for b in bindings if Expression(str(b.expression)).matches(normalised)}
        assert set(matcher.match(Message("", headers))) == expected
