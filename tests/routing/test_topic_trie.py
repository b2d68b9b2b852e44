"""Topic patterns: RabbitMQ's examples, edge cases of its word split, and a property test
of the trie against a plain recursive matcher."""

from __future__ import annotations

import time
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.routing import Binding
from weirmq.routing.topic import TopicTrie, pattern_words, split_words


def matches(pattern: str, key: str) -> bool:
    trie = TopicTrie()
    binding = Binding("x", "t", "topic", pattern)
    trie.add(binding)
    return binding in set(trie.match(split_words(key)))


def test_keys_split_on_every_dot_as_rabbitmq_does() -> None:
    assert split_words("") == []
    assert split_words("a") == ["a"]
    assert split_words("a..b") == ["a", "", "b"]
    assert split_words("a.") == ["a", ""]
    assert split_words(".") == ["", ""]


def test_a_trailing_greater_than_is_a_hash_and_elsewhere_a_word() -> None:
    assert pattern_words("a.>") == ["a", "#"]
    assert pattern_words(">") == ["#"]
    assert pattern_words("a.>.b") == ["a", ">", "b"]
    assert matches("a.>", "a") and matches("a.>", "a.b.c")
    assert matches("a.>.b", "a.>.b") and not matches("a.>.b", "a.x.b")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # RabbitMQ tutorial 5: Q1 "*.orange.*", Q2 "*.*.rabbit" and "lazy.#".
        ("quick.orange.rabbit", {"*.orange.*", "*.*.rabbit"}),
        ("lazy.orange.elephant", {"*.orange.*", "lazy.#"}),
        ("quick.orange.fox", {"*.orange.*"}),
        ("lazy.brown.fox", {"lazy.#"}),
        ("lazy.pink.rabbit", {"*.*.rabbit", "lazy.#"}),
        ("quick.brown.fox", set()),
        ("orange", set()),
        ("quick.orange.new.rabbit", set()),
        ("lazy.orange.new.rabbit", {"lazy.#"}),
        ("lazy", {"lazy.#"}),
    ],
)
def test_rabbitmq_tutorial_examples(key: str, expected: set[str]) -> None:
    patterns = ("*.orange.*", "*.*.rabbit", "lazy.#")
    assert {p for p in patterns if matches(p, key)} == expected


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("#", "", True),
        ("#", "a.b.c", True),
        ("*", "", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("", "", True),
        ("", "a", False),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.x.y", False),
        ("#.a", "a", True),
        ("#.a", "x.a", True),
        ("#.#", "", True),
        ("#.*", "", False),
        ("#.*.#", "x", True),
        ("a.*", "a.", True),  # "a." is ["a", ""]: the empty word is a word
        ("a", "a.", False),
        ("*.*", ".", True),
        ("a.*.b", "a..b", True),
        ("a.b", "a.*", False),  # keys are literal
        ("a.*", "a.*", True),
        ("#.a.#", "b.a.c", True),
    ],
)
def test_patterns_edge_cases(pattern: str, key: str, expected: bool) -> None:
    assert matches(pattern, key) is expected


def test_removal_prunes_without_disturbing_shared_prefixes() -> None:
    trie = TopicTrie()
    first, second = Binding("x", "t1", "topic", "a.b.c"), Binding("x", "t2", "topic", "a.b")
    trie.add(first)
    trie.add(second)
    trie.remove(first)
    trie.remove(Binding("x", "t3", "topic", "a.b.c.d"))  # never added: nothing happens
    assert set(trie.match(["a", "b"])) == {second}
    assert set(trie.match(["a", "b", "c"])) == set()
    trie.remove(second)
    assert set(trie.match(["a", "b"])) == set()


def test_many_hashes_are_not_exponential() -> None:
    trie = TopicTrie()
    binding = Binding("x", "t", "topic", ".".join(["#"] * 30 + ["a"]))
    trie.add(binding)
    started = time.perf_counter()
    assert list(trie.match(["w"] * 300)) == []
    assert list(trie.match(["w"] * 300 + ["a"])) == [binding]
    # Each (node, position) once: ~31 nodes x 301 positions; a naive backtracking walk
    # would take longer than the age of the universe.
    assert time.perf_counter() - started < 2.0


# -- property: the trie agrees with a plain recursive matcher -----------------------------


def reference(pattern_text: str, key_text: str) -> bool:
    """Written from RabbitMQ's rules, sharing no code with the trie."""
    pattern = pattern_text.split(".") if pattern_text else []
    key = key_text.split(".") if key_text else []
    if pattern and pattern[-1] == ">":
        pattern[-1] = "#"

    @cache
    def go(p: int, k: int) -> bool:
        if p == len(pattern):
            return k == len(key)
        if pattern[p] == "#":
            return go(p + 1, k) or (k < len(key) and go(p, k + 1))
        if k == len(key):
            return False
        return (pattern[p] in ("*", key[k])) and go(p + 1, k + 1)

    return go(0, 0)


PATTERN_WORDS = st.sampled_from(["", "a", "b", "*", "#", ">"])
KEY_WORDS = st.sampled_from(["", "a", "b", "*", "#", ">"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(PATTERN_WORDS, max_size=5).map(".".join), min_size=1, max_size=8),
    st.lists(st.lists(KEY_WORDS, max_size=6).map(".".join), min_size=1, max_size=6),
)
def test_trie_agrees_with_a_reference_matcher(patterns: list[str], keys: list[str]) -> None:
    trie = TopicTrie()
    bindings = {Binding("x", f"t{i}", "topic", p) for i, p in enumerate(patterns)}
    for binding in bindings:
        trie.add(binding)
    # Remove a third of them again, so pruning is exercised too.
    removed = {b for b in bindings if int(b.destination[1:]) % 3 == 0}
    for binding in removed:
        trie.remove(binding)
    for key in keys:
        expected = {b for b in bindings - removed if reference(b.key, key)}
        assert set(trie.match(split_words(key))) == expected, key
