"""Content expressions: a small SQL-92 predicate language over a record's headers.

A content exchange's binding carries an expression such as

    region = 'eu' AND (price > 9.5 OR "content-type" IN ('application/json', 'text/csv'))

and matches the records for which it is TRUE. The language is the one RocketMQ's property
filters and JMS selectors use, without arithmetic:

    predicate   := or
    or          := and ("OR" and)*
    and         := not ("AND" not)*
    not         := "NOT" not | "(" or ")" | condition
    condition   := operand op operand                     op: = <> != < <= > >=
                 | operand ["NOT"] "BETWEEN" operand "AND" operand
                 | operand ["NOT"] "IN" "(" literal ("," literal)* ")"
                 | operand "IS" ["NOT"] "NULL"
                 | "TRUE" | "FALSE"
    operand     := name | literal
    literal     := 'string' | number | "TRUE" | "FALSE"

Keywords are case-insensitive. A name is a header name: bare (ASCII letters, digits and
`_`, not starting with a digit, not a keyword) or double-quoted ("content-type", `""`
escapes a quote). Strings are single-quoted (`''` escapes a quote); numbers are integers
or decimals, possibly negative (`-2`, `0.25`); decimals are exact (`Decimal`), never
binary floats, so `price = 0.1` means what it says.

Values and truth
----------------
SQL's three-valued logic: a header that is missing (or null) is NULL; a comparison with
NULL is unknown, and so is a comparison between values of different kinds (a string with
a number, a boolean with a number), which is never an error; NOT unknown is unknown; AND is
FALSE if either side is, OR TRUE if either side is. A binding matches only when the whole
expression is TRUE. Kafka headers are bytes, so numbers arrive as text: text that is a
number ("42", "-0.5"; a header or a string literal) compares numerically with a number,
and text that is "true" or "false" (any case) with a boolean. A binary float header (an AMQP double)
compares with a decimal literal at the float's precision. Strings compare by code point.
IS NULL is never unknown.

Parsing and printing
--------------------
A tokenizer and a recursive-descent parser (never `eval`), one function per line of the
grammar. Errors are `ExpressionError`s naming what was expected and the 0-based position
of the offending character (the text's length when the text ended too early). Both the
text's length and the nesting of parentheses and NOTs are bounded (`limits.py`), so the
parser's and the evaluator's recursion are too. `str()` of a tree is its canonical text:
upper-case keywords, single spaces, the fewest parentheses that keep the tree's shape, so
that parsing it gives back an equal tree.

An expression is compiled once per binding into nested closures and evaluated per record.
`anchors(tree)` are header names at least one of which is present whenever the expression
is TRUE (`a = 1 OR b > 2`: a or b); the content exchange indexes a binding under each of
them, so a record is tested only against the bindings that could match it (matchers.py).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, NoReturn

from .errors import ExpressionError
from .limits import EXPRESSION_DEPTH_MAX, EXPRESSION_MAX_CHARS
from .model import Value

KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"})
COMPARISONS: Final = ("=", "<>", "<", "<=", ">", ">=")
_ALIASES: Final = {"!=": "<>"}
_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_NUMERIC_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")


# -- the tree -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Identifier:
    """A header name."""

    name: str

    def __str__(self) -> str:
        if _BARE_NAME.fullmatch(self.name) and self.name.upper() not in KEYWORDS:
            return self.name
        return '"' + self.name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class String:
    value: str

    def __str__(self) -> str:
        return "'" + self.value.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Number:
    value: int | Decimal

    def __str__(self) -> str:
        # "f": never an exponent, which the tokenizer would not read back.
        return str(self.value) if isinstance(self.value, int) else format(self.value, "f")


@dataclass(frozen=True, slots=True)
class Boolean:
    """TRUE or FALSE: a literal operand, and on its own a predicate."""

    value: bool

    def __str__(self) -> str:
        return "TRUE" if self.value else "FALSE"


Literal = String | Number | Boolean
Operand = Identifier | Literal


@dataclass(frozen=True, slots=True)
class Comparison:
    op: str
    """One of `COMPARISONS` (`!=` is read as `<>`)."""
    left: Operand
    right: Operand

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True, slots=True)
class Between:
    subject: Operand
    low: Operand
    high: Operand
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.subject} {_not(self.negated)}BETWEEN {self.low} AND {self.high}"


@dataclass(frozen=True, slots=True)
class In:
    subject: Operand
    items: tuple[Literal, ...]
    negated: bool = False

    def __str__(self) -> str:
        items = ", ".join(map(str, self.items))
        return f"{self.subject} {_not(self.negated)}IN ({items})"


@dataclass(frozen=True, slots=True)
class IsNull:
    subject: Operand
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.subject} IS {_not(self.negated)}NULL"


@dataclass(frozen=True, slots=True)
class Not:
    operand: Predicate

    def __str__(self) -> str:
        return "NOT " + _wrap(self.operand, _precedence(self.operand) < _NOT)


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Predicate, ...]
    """Two or more; `a AND b AND c` is one `And`, `a AND (b AND c)` two."""

    def __str__(self) -> str:
        return " AND ".join(_wrap(p, _precedence(p) <= _AND) for p in self.operands)


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Predicate, ...]

    def __str__(self) -> str:
        return " OR ".join(_wrap(p, _precedence(p) <= _OR) for p in self.operands)


Predicate = Comparison | Between | In | IsNull | Not | And | Or | Boolean

_OR, _AND, _NOT, _ATOM = 1, 2, 3, 4


def _precedence(node: Predicate) -> int:
    if isinstance(node, Or):
        return _OR
    if isinstance(node, And):
        return _AND
    return _NOT if isinstance(node, Not) else _ATOM


def _wrap(node: Predicate, parenthesise: bool) -> str:
    return f"({node})" if parenthesise else str(node)


def _not(negated: bool) -> str:
    return "NOT " if negated else ""


# -- tokens -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    """name, keyword, string, number, op, "(", ")", ",", or end."""
    text: str
    """The name, the string's value, the upper-cased keyword, the operator, the number."""
    position: int

    def describe(self) -> str:
        if self.kind == "end":
            return "the end of the expression"
        if self.kind == "string":
            return f"string {String(self.text)}"
        return repr(self.text)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if char.isspace():
            i += 1
            continue
        if char in "'\"":
            value, after = _quoted(text, i)
            if char == '"' and not value:
                raise ExpressionError("empty quoted name", i)
            tokens.append(_Token("string" if char == "'" else "name", value, i))
            i = after
        elif char in "0123456789-":
            found = _NUMBER.match(text, i)
            if found is None:
                raise ExpressionError(f"unexpected character {char!r}", i)
            tokens.append(_Token("number", found.group(), i))
            i = found.end()
        elif char.isascii() and (char.isalpha() or char == "_"):
            found = _BARE_NAME.match(text, i)
            assert found is not None  # the first character alone matches
            word = found.group()
            keyword = word.upper() in KEYWORDS
            tokens.append(
                _Token("keyword" if keyword else "name", word.upper() if keyword else word, i)
            )
            i = found.end()
        elif char in "=<>!":
            op = text[i : i + 2] if text[i : i + 2] in ("<=", ">=", "<>", "!=") else char
            if op == "!":
                raise ExpressionError("unexpected character '!' (did you mean '<>'?)", i)
            tokens.append(_Token("op", _ALIASES.get(op, op), i))
            i += len(op)
        elif char in "(),":
            tokens.append(_Token(char, char, i))
            i += 1
        else:
            raise ExpressionError(f"unexpected character {char!r}", i)
    tokens.append(_Token("end", "", end))
    return tokens


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The value of the quoted string or name opening at `start`, and where it ends."""
    quote = text[start]
    parts: list[str] = []
    i = start + 1
    while True:
        close = text.find(quote, i)
        if close < 0:
            what = "string" if quote == "'" else "quoted name"
            raise ExpressionError(f"unterminated {what}", start)
        parts.append(text[i:close])
        if text.startswith(quote, close + 1):  # a doubled quote stands for itself
            parts.append(quote)
            i = close + 2
        else:
            return "".join(parts), close + 1


# -- parser -------------------------------------------------------------------------------


def parse(text: str) -> Predicate:
    """The tree of `text`; raises `ExpressionError` (see the module docstring)."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, not {type(text).__name__}", 0)
    if len(text) > EXPRESSION_MAX_CHARS:
        raise ExpressionError(
            f"expression is {len(text)} characters, at most {EXPRESSION_MAX_CHARS} allowed",
            EXPRESSION_MAX_CHARS,
        )
    return _Parser(_tokenize(text)).expression()


class _Parser:
    """Recursive descent over the grammar of the module docstring, one method a rule."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._next = 0
        self._depth = 0

    def expression(self) -> Predicate:
        tree = self._or()
        if self._peek().kind != "end":
            self._fail("AND, OR or the end of the expression")
        return tree

    def _or(self) -> Predicate:
        operands = [self._and()]
        while self._keyword("OR"):
            operands.append(self._and())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and(self) -> Predicate:
        operands = [self._negation()]
        while self._keyword("AND"):
            operands.append(self._negation())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _negation(self) -> Predicate:
        token = self._peek()
        if token.kind == "keyword" and token.text == "NOT":
            self._advance()
            self._enter(token)
            operand = self._negation()
            self._depth -= 1
            return Not(operand)
        if token.kind == "(":
            self._advance()
            self._enter(token)
            inner = self._or()
            self._expect(")", "')'")
            self._depth -= 1
            return inner
        return self._condition(self._operand("a condition"))

    def _condition(self, left: Operand) -> Predicate:
        token = self._peek()
        if token.kind == "op":
            self._advance()
            return Comparison(token.text, left, self._operand("a name or a value"))
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            self._expect_keyword("NULL")
            return IsNull(left, negated)
        negated = self._keyword("NOT")
        if self._keyword("BETWEEN"):
            low = self._operand("a name or a value")
            self._expect_keyword("AND")
            return Between(left, low, self._operand("a name or a value"), negated)
        if self._keyword("IN"):
            return In(left, self._items(), negated)
        if negated:
            self._fail("BETWEEN or IN")
        if isinstance(left, Boolean):
            return left
        self._fail("an operator (=, <>, <, <=, >, >=, BETWEEN, IN or IS)")

    def _items(self) -> tuple[Literal, ...]:
        self._expect("(", "'('")
        items = [self._literal()]
        while self._peek().kind == ",":
            self._advance()
            items.append(self._literal())
        self._expect(")", "',' or ')'")
        return tuple(items)

    def _operand(self, expected: str) -> Operand:
        token = self._peek()
        if token.kind == "name":
            self._advance()
            return Identifier(token.text)
        return self._literal(expected)

    def _literal(self, expected: str = "a literal") -> Literal:
        token = self._peek()
        if token.kind == "string":
            self._advance()
            return String(token.text)
        if token.kind == "number":
            self._advance()
            return Number(_number(token))
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            self._advance()
            return Boolean(token.text == "TRUE")
        if token.kind == "keyword" and token.text == "NULL":
            raise ExpressionError("NULL may only follow IS (write 'IS NULL')", token.position)
        self._fail(expected)

    def _enter(self, token: _Token) -> None:
        self._depth += 1
        if self._depth > EXPRESSION_DEPTH_MAX:
            raise ExpressionError(
                f"parentheses and NOTs nest deeper than {EXPRESSION_DEPTH_MAX}", token.position
            )

    def _peek(self) -> _Token:
        return self._tokens[self._next]

    def _advance(self) -> _Token:
        token = self._tokens[self._next]
        if token.kind != "end":
            self._next += 1
        return token

    def _keyword(self, word: str) -> bool:
        token = self._peek()
        if token.kind == "keyword" and token.text == word:
            self._advance()
            return True
        return False

    def _expect_keyword(self, word: str) -> None:
        if not self._keyword(word):
            self._fail(word)

    def _expect(self, kind: str, expected: str) -> None:
        if self._peek().kind != kind:
            self._fail(expected)
        self._advance()

    def _fail(self, expected: str) -> NoReturn:
        token = self._peek()
        raise ExpressionError(f"expected {expected}", token.position, token.describe())


def _number(token: _Token) -> int | Decimal:
    if "." in token.text:
        return Decimal(token.text)
    try:
        return int(token.text)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        return Decimal(token.text)


# -- evaluation ---------------------------------------------------------------------------

Scalar = Value | Decimal
Truth = bool | None
"""TRUE, FALSE, or None for unknown."""
Test = Callable[[Mapping[str, Value]], Truth]
_Get = Callable[[Mapping[str, Value]], Scalar]

_ORDER: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compare(op: str, left: Scalar, right: Scalar) -> Truth:
    """`left op right` in three-valued logic (see "Values and truth" above)."""
    if left is None or right is None:
        return None
    if isinstance(left, bool) or isinstance(right, bool):
        x, y = _as_bool(left), _as_bool(right)
        if x is None or y is None or op not in ("=", "<>"):
            return None
        return (x == y) == (op == "=")
    if isinstance(left, str) and isinstance(right, str):
        return _ORDER[op](left, right)
    a, b = _as_number(left), _as_number(right)
    if a is None or b is None:
        return None
    # A binary float (an AMQP double) against a decimal literal compares at the float's
    # precision, so that 0.1 equals 0.1 whichever side was typed.
    if isinstance(a, float) and isinstance(b, Decimal):
        b = float(b)
    elif isinstance(a, Decimal) and isinstance(b, float):
        a = float(a)
    return _ORDER[op](a, b)


def _as_bool(value: Scalar) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.lower()
        return True if lowered == "true" else False if lowered == "false" else None
    return None


def _as_number(value: Scalar) -> int | float | Decimal | None:
    if isinstance(value, str):
        if not _NUMERIC_TEXT.fullmatch(value):
            return None
        if "." in value:
            return Decimal(value)
        try:
            return int(value)
        except ValueError:  # beyond int()'s digit limit
            return Decimal(value)
    if isinstance(value, float) and math.isnan(value):
        return None  # NaN orders with nothing (and Decimal would raise on it)
    assert not isinstance(value, bool) and value is not None
    return value


def compile_predicate(node: Predicate) -> Test:
    """`node` as a function of normalised headers; built once, called per record."""
    if isinstance(node, Comparison):
        return _compile_comparison(
            node.op, _compile_operand(node.left), _compile_operand(node.right)
        )
    if isinstance(node, Between):
        return _compile_between(node)
    if isinstance(node, In):
        return _compile_in(node)
    if isinstance(node, IsNull):
        get, negated = _compile_operand(node.subject), node.negated
        return lambda headers: (get(headers) is None) != negated
    if isinstance(node, Not):
        inner = compile_predicate(node.operand)
        return lambda headers: _negate(inner(headers))
    if isinstance(node, And):
        return _compile_and(tuple(map(compile_predicate, node.operands)))
    if isinstance(node, Or):
        return _compile_or(tuple(map(compile_predicate, node.operands)))
    value = node.value
    return lambda headers: value


def _compile_operand(node: Operand) -> _Get:
    if isinstance(node, Identifier):
        name = node.name
        return lambda headers: headers.get(name)
    value = node.value
    return lambda headers: value


def _compile_comparison(op: str, left: _Get, right: _Get) -> Test:
    return lambda headers: compare(op, left(headers), right(headers))


def _compile_between(node: Between) -> Test:
    subject = _compile_operand(node.subject)
    low, high = _compile_operand(node.low), _compile_operand(node.high)
    negated = node.negated

    def between(headers: Mapping[str, Value]) -> Truth:
        value = subject(headers)
        result = _and(compare(">=", value, low(headers)), compare("<=", value, high(headers)))
        return _negate(result) if negated else result

    return between


def _compile_in(node: In) -> Test:
    subject = _compile_operand(node.subject)
    items = tuple(item.value for item in node.items)
    negated = node.negated

    def within(headers: Mapping[str, Value]) -> Truth:
        value = subject(headers)
        result: Truth = False
        for item in items:
            equal = compare("=", value, item)
            if equal:
                result = True
                break
            if equal is None:
                result = None
        return _negate(result) if negated else result

    return within


def _compile_and(tests: tuple[Test, ...]) -> Test:
    def conjunction(headers: Mapping[str, Value]) -> Truth:
        result: Truth = True
        for test in tests:
            value = test(headers)
            if value is False:
                return False
            if value is None:
                result = None
        return result

    return conjunction


def _compile_or(tests: tuple[Test, ...]) -> Test:
    def disjunction(headers: Mapping[str, Value]) -> Truth:
        result: Truth = False
        for test in tests:
            value = test(headers)
            if value:
                return True
            if value is None:
                result = None
        return result

    return disjunction


def _and(left: Truth, right: Truth) -> Truth:
    if left is False or right is False:
        return False
    return None if left is None or right is None else True


def _negate(value: Truth) -> Truth:
    return None if value is None else not value


# -- what a TRUE needs --------------------------------------------------------------------


def anchors(node: Predicate, truth: bool = True) -> frozenset[str]:
    """Header names at least one of which is present (not NULL) whenever `node` evaluates
    to `truth`; empty when no such names can be told from the tree (`a IS NULL`, `TRUE`).

    A comparison needs all of its names, so any one will do (the smallest is taken);
    "all of these are TRUE" needs what any one of them needs (the fewest names are taken),
    "one of these is TRUE" needs one of what each of them needs (all of them, joined)."""
    if isinstance(node, Comparison):
        return _first(_names(node.left) | _names(node.right))
    if isinstance(node, Between):
        if truth != node.negated:
            return _first(_names(node.subject) | _names(node.low) | _names(node.high))
        # FALSE: below the low bound or above the high one; either needs the subject.
        return _first(_names(node.subject) or (_names(node.low) & _names(node.high)))
    if isinstance(node, In):
        return _names(node.subject)
    if isinstance(node, IsNull):
        return frozenset() if truth != node.negated else _names(node.subject)
    if isinstance(node, Not):
        return anchors(node.operand, not truth)
    if isinstance(node, And | Or):
        parts = [anchors(operand, truth) for operand in node.operands]
        # AND is TRUE when every operand is, FALSE when one is; OR the other way round.
        if truth == isinstance(node, And):
            return min((part for part in parts if part), key=len, default=frozenset())
        return frozenset().union(*parts) if all(parts) else frozenset()
    return frozenset()


def _first(names: frozenset[str]) -> frozenset[str]:
    return frozenset((min(names),)) if names else names


def _names(node: Operand) -> frozenset[str]:
    return frozenset((node.name,)) if isinstance(node, Identifier) else frozenset()


# -- the compiled expression --------------------------------------------------------------


class Expression:
    """A content binding's expression, parsed and compiled once.

    `str()` is the canonical text; `anchors` header names one of which is present
    whenever it is TRUE (see `anchors`; empty when there are none)."""

    __slots__ = ("_test", "anchors", "text", "tree")

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = parse(text)
        self.anchors = anchors(self.tree)
        self._test = compile_predicate(self.tree)

    def evaluate(self, headers: Mapping[str, Value]) -> Truth:
        """TRUE, FALSE or unknown (None) for normalised `headers`."""
        return self._test(headers)

    def matches(self, headers: Mapping[str, Value]) -> bool:
        """Whether the expression is TRUE for normalised `headers`."""
        return self._test(headers) is True

    def __str__(self) -> str:
        return str(self.tree)

    def __repr__(self) -> str:
        return f"Expression({str(self)!r})"
