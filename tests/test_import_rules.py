"""The layering rules of ARCHITECTURE.md, checked on the source tree.

Every ``.py`` file under ``src/weirmq`` is parsed with ``ast`` (nothing is imported, so a
broken module cannot hide a violation). Every import counts: ``import x``, ``from x import
y``, relative imports (resolved to absolute names), imports inside functions and inside
``if TYPE_CHECKING:`` blocks, and ``importlib.import_module("...")`` / ``__import__("...")``
with a literal name. A type-only import is still a dependency of the design.

``from a.b import c`` is checked as ``a.b.c``: ``c`` may be a submodule, and when it is a
name re-exported by ``a/b/__init__.py`` the import still reaches the whole of ``a.b``. So
``storage/`` may write ``from weirmq.wire.records import RecordBatch`` but not
``from weirmq.wire import RecordBatch``.

A top-level package or module missing from ``RULES`` is itself a violation: a new layer
gets a row here (and in ARCHITECTURE.md) before it gets code.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = REPO_ROOT / "src" / "weirmq"

# Within may_import, "" stands for the whole of weirmq.
EVERYTHING = ("",)
# The sans-I/O core gets time from an injected clock and never does I/O or threading.
IO_MODULES = frozenset({"asyncio", "socket", "selectors", "threading", "time"})


@dataclass(frozen=True, slots=True)
class Rule:
    """What one top-level part of ``weirmq`` may import (besides itself)."""

    may_import: tuple[str, ...]
    sans_io: bool = False


# Keys are the top-level packages (and modules) of weirmq; values name, relative to
# weirmq, the packages or modules they may import. Importing oneself is always allowed.
RULES: dict[str, Rule] = {
    "wire": Rule((), sans_io=True),
    "storage": Rule(("wire.records", "wire.errors", "wire.compression")),
    "broker": Rule(("wire", "storage", "groups", "queues", "routing", "flow")),
    "groups": Rule(("storage", "wire"), sans_io=True),
    "queues": Rule(("storage", "wire"), sans_io=True),
    "routing": Rule(("storage", "wire"), sans_io=True),
    "flow": Rule(("storage", "wire"), sans_io=True),
    "server": Rule(("broker", "wire")),
    "admin": Rule(("broker", "__version__")),
    "spark": Rule(()),  # talks to the broker through a Kafka client only
    # A client of any broker: runs `weirmq serve` as a process, reads only default settings.
    "bench": Rule(("__version__", "broker.settings")),
    "cli": Rule(EVERYTHING),
    "testing": Rule(EVERYTHING),
    "__init__": Rule(()),  # src/weirmq/__init__.py: importing weirmq stays cheap
    "__main__": Rule(("cli",)),
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One forbidden import: where it is and why it is forbidden."""

    path: Path
    line: int
    target: str
    reason: str

    def __str__(self) -> str:
        inside_repo = self.path.is_relative_to(REPO_ROOT)
        shown = self.path.relative_to(REPO_ROOT) if inside_repo else self.path
        return f"{shown}:{self.line}: forbidden import of {self.target!r}: {self.reason}"


def module_name(path: Path, package_root: Path) -> tuple[str, bool]:
    """Dotted module name of ``path`` and whether it is a package ``__init__``."""
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """Absolute module named by a (possibly relative) ``from ... import``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """Yield ``(line, absolute dotted name)`` for every import anywhere in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, module, is_package)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def check_import(part: str, rule: Rule, target: str) -> str | None:
    """Why ``part`` may not import ``target``, or None when it may."""
    top = target.split(".")[0]
    if rule.sans_io and top in IO_MODULES:
        return f"{part}/ is sans-I/O and may not import {top}"
    if not _within(target, "weirmq") or _within(target, f"weirmq.{part}"):
        return None
    allowed = [f"weirmq.{name}" if name else "weirmq" for name in rule.may_import]
    if any(_within(target, prefix) for prefix in allowed):
        return None
    return f"{part} may import only {', '.join(allowed) or 'nothing of weirmq'}"


def check_file(path: Path, package_root: Path) -> list[Violation]:
    """Every import in one file that breaks its part's rule."""
    module, is_package = module_name(path, package_root)
    part = module.split(".")[1] if "." in module else "__init__"
    rule = RULES.get(part)
    if rule is None:
        missing = f"weirmq.{part} has no row in RULES (nor in ARCHITECTURE.md's table)"
        return [Violation(path, 1, module, missing)]
    with warnings.catch_warnings():
        # Invalid escape sequences warn at parse time; that is ruff's job, not this test's.
        warnings.simplefilter("ignore")
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for line, target in imported_names(tree, module, is_package):
        reason = check_import(part, rule, target)
        if reason is not None:
            found.append(Violation(path, line, target, reason))
    return found


def check_tree(package_root: Path) -> list[Violation]:
    """Every violation in every ``.py`` file under ``package_root``."""
    return [
        violation
        for path in sorted(package_root.rglob("*.py"))
        for violation in check_file(path, package_root)
    ]


def test_source_tree_follows_the_layering_rules() -> None:
    assert PACKAGE_ROOT.is_dir()
    violations = check_tree(PACKAGE_ROOT)
    assert not violations, "\n".join(map(str, violations))


def test_checker_reports_forbidden_imports(tmp_path: Path) -> None:
    sources = {
        "__init__.py": "",
        "wire/__init__.py": "",
        "wire/records.py": (
            "from typing import TYPE_CHECKING\n"
            "from . import errors\n"  # allowed: wire importing itself
            "if TYPE_CHECKING:\n"
            "    from ..storage import log\n"  # line 4: relative, type-only
            "def now() -> float:\n"
            "    import time\n"  # line 6: inside a function, sans-I/O
            "    return time.time()\n"
        ),
        "storage/log.py": (
            "from weirmq.wire.records import RecordBatch\n"  # allowed
            "from weirmq.wire import framing\n"  # line 2: not the record-batch codec
        ),
        "admin/api.py": "import importlib\nimportlib.import_module('weirmq.storage.log')\n",
        "extras.py": "",  # line 1: no rule for weirmq.extras
    }
    package_root = tmp_path / "weirmq"
    for name, text in sources.items():
        (package_root / name).parent.mkdir(parents=True, exist_ok=True)
        (package_root / name).write_text(text, encoding="utf-8")

    violations = check_tree(package_root)

    found = {(str(v.path.relative_to(package_root)), v.line, v.target) for v in violations}
    assert found == {
        ("wire/records.py", 4, "weirmq.storage.log"),
        ("wire/records.py", 6, "time"),
        ("storage/log.py", 2, "weirmq.wire.framing"),
        ("admin/api.py", 2, "weirmq.storage.log"),
        ("extras.py", 1, "weirmq.extras"),
    }
    message = str(next(v for v in violations if v.target == "weirmq.wire.framing"))
    assert message.startswith(f"{package_root / 'storage' / 'log.py'}:2: ")
    assert "'weirmq.wire.framing'" in message
