"""The error tree drawn in weirmq/errors.py is the tree the code has.

Every module of the broker is imported, every subclass of `KafkaError` found, and the tree
drawn again in the docstring's format; the two must be equal, so a new error class (or a
changed code) updates the drawing in the same change.
"""

from __future__ import annotations

import importlib
import pkgutil

import weirmq
from weirmq import errors
from weirmq.errors import KafkaError

# Not part of the broker: clients of it, and code that needs optional packages.
OUTSIDE = ("weirmq.spark", "weirmq.bench", "weirmq.cli", "weirmq.testing", "weirmq.admin")
NAME_WIDTH, MODULE_WIDTH = 36, 22


def import_the_broker() -> None:
    for module in pkgutil.walk_packages(weirmq.__path__, "weirmq."):
        if not module.name.startswith(OUTSIDE):
            importlib.import_module(module.name)


def code_of(cls: type[KafkaError]) -> str:
    inherits_the_default = cls is not KafkaError and cls.code is KafkaError.code
    if inherits_the_default and "__init__" in vars(cls):  # GroupError: given at each raise
        return "(the code it is raised with)"
    return cls.code.name


def draw(cls: type[KafkaError], depth: int = 0) -> list[str]:
    indent = "    " * (depth + 1)
    module = cls.__module__.removeprefix("weirmq.")
    line = f"{indent}{cls.__name__:<{NAME_WIDTH - 4 * depth}}{module:<{MODULE_WIDTH}}"
    lines = [(line + code_of(cls)).rstrip()]
    for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
        # Left out: an adapter's private refinements, and test doubles defined in tests.
        if not sub.__name__.startswith("_") and sub.__module__.startswith("weirmq."):
            lines += draw(sub, depth + 1)
    return lines


def drawn_in_the_docstring() -> list[str]:
    doc = errors.__doc__ or ""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("KafkaError "))
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    return lines[start:end]


def test_the_drawn_error_tree_is_the_code_s() -> None:
    import_the_broker()
    expected = draw(KafkaError)
    assert drawn_in_the_docstring() == expected, "\n" + "\n".join(expected)
