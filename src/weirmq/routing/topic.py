"""Topic patterns: RabbitMQ's word trie, matched in time linear in the key's words.

Keys and patterns are split into words on "." exactly as RabbitMQ splits them: the empty
key has no words, and every dot separates two words even when they are empty, so "a..b"
is ["a", "", "b"] and "a." is ["a", ""]. In a pattern `*` stands for exactly one word and
`#` for zero or more, anywhere and any number of times. For NATS users, `>` as the *last*
word of a pattern is `#` (NATS' "one or more" is looser here: zero or more, like `#`);
anywhere else `>` is an ordinary word. Keys are matched literally: a key word "*" is
the word "*".

The trie has one edge per pattern word, so every binding whose pattern shares a prefix
shares the path, and a binding sits on the node its last word leads to. Matching walks
states (node, i): "the pattern words on the path to `node` consumed the first `i` words
of the key". From a state the walk follows the child for the key's word i, the `*` child
(both consume one word) and the `#` child (consumes none); a `#` node may also stay where
it is and consume one more word. Each state is visited once (a set remembers them), so
the cost is at most (nodes on matching paths) x (words + 1), never exponential: without
the memo, "#.#.#.#.a" against a long key would try every way of sharing the key between
its four `#`s. The bindings of every node reached with all words consumed match.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .model import Binding

HASH = "#"
STAR = "*"
NATS_TAIL = ">"


def split_words(key: str) -> list[str]:
    """A routing key or pattern as RabbitMQ splits it (see the module docstring)."""
    return key.split(".") if key else []


def pattern_words(pattern: str) -> list[str]:
    """`pattern`'s words, with a last `>` read as `#`."""
    words = split_words(pattern)
    if words and words[-1] == NATS_TAIL:
        words[-1] = HASH
    return words


class _Node:
    __slots__ = ("bindings", "children", "is_hash")

    def __init__(self, is_hash: bool) -> None:
        self.children: dict[str, _Node] = {}
        self.bindings: dict[Binding, None] = {}
        # A `#` node may consume any number of further words without moving.
        self.is_hash = is_hash


class TopicTrie:
    """The bindings of one topic exchange, by pattern; see the module docstring."""

    __slots__ = ("_root",)

    def __init__(self) -> None:
        self._root = _Node(is_hash=False)

    def add(self, binding: Binding) -> None:
        node = self._root
        for word in pattern_words(binding.key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node(is_hash=word == HASH)
            node = child
        node.bindings[binding] = None

    def remove(self, binding: Binding) -> None:
        """Remove `binding` (absent: nothing happens) and prune the nodes left empty."""
        path: list[tuple[_Node, str]] = []
        node = self._root
        for word in pattern_words(binding.key):
            child = node.children.get(word)
            if child is None:
                return
            path.append((node, word))
            node = child
        node.bindings.pop(binding, None)
        for parent, word in reversed(path):
            child = parent.children[word]
            if child.bindings or child.children:
                break
            del parent.children[word]

    def match(self, words: Sequence[str]) -> Iterable[Binding]:
        """The bindings whose pattern matches the key split into `words`."""
        end = len(words)
        matched: dict[Binding, None] = {}
        seen: set[tuple[int, int]] = set()
        pending: list[tuple[_Node, int]] = [(self._root, 0)]
        while pending:
            node, i = pending.pop()
            state = (id(node), i)
            if state in seen:
                continue
            seen.add(state)
            if i == end:
                matched.update(node.bindings)
            elif node.is_hash:
                pending.append((node, i + 1))
            children = node.children
            if not children:
                continue
            hash_child = children.get(HASH)
            if hash_child is not None:
                pending.append((hash_child, i))
            if i < end:
                for word in (words[i], STAR):
                    child = children.get(word)
                    if child is not None:
                        pending.append((child, i + 1))
        return matched.keys()
