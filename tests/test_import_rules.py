"""The layering rules of ARCHITECTURE.md, checked on the source tree.

Every ``.py`` file under ``src/weirmq`` is parsed with ``ast`` (nothing is imported, so a
broken module cannot hide a violation). Every import counts: ``import x``, ``from x import
y``, relative imports (resolved to absolute names), imports inside functions and inside
``if TYPE_CHECKING:`` blocks, and ``importlib.import_module("...")`` / ``__import__("...")``
with a literal name. A type-only import is still a dependency of the design.

``from a.b import c`` is checked as ``a.b.c``: ``c`` may be a submodule, and when it is a
name re-exported by ``a/b/__init__.py`` the import still reaches the whole of ``a.b``. So
``protocols/`` may write ``from weirmq.storage.errors import StorageError`` but not
``from weirmq.storage import StorageError``.

Protocol adapters (``weirmq.protocols.<name>``) get one more rule: none may import
another; all may import the shared ``weirmq.protocols.contract``.

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
    "types": Rule((), sans_io=True),
    "errors": Rule((), sans_io=True),
    "settings": Rule(()),  # configures the process: server, admin, cli and testing use it
    "records": Rule(("errors", "types"), sans_io=True),
    "storage": Rule(("records", "errors", "types")),
    # One concern each, sans-I/O state machines: events and a clock in, outputs out.
    "groups": Rule(("records", "errors", "types"), sans_io=True),
    "queues": Rule(("records", "errors", "types"), sans_io=True),
    "routing": Rule(("records", "errors", "types"), sans_io=True),
    "flow": Rule(("records", "errors", "types"), sans_io=True),
    "replication": Rule(("records", "errors", "types"), sans_io=True),
    "security": Rule(("records", "errors", "types"), sans_io=True),
    "transactions": Rule(("records", "errors", "types"), sans_io=True),
    # The protocol-neutral model: imports no protocol.
    "broker": Rule(
        (
            *("types", "errors", "settings", "records", "storage"),
            *("groups", "queues", "routing", "flow", "replication", "security"),
            "transactions",
        )
    ),
    # Thin adapters over the broker; never each other (see ADAPTER_SHARED below).
    "protocols": Rule(
        (
            *("types", "errors", "settings", "records", "broker", "flow", "groups"),
            *("transactions", "storage.errors"),
        )
    ),
    "server": Rule(("protocols", "broker", "settings", "types", "errors")),
    # The metrics name every Kafka API from the adapter's own table.
    "admin": Rule(
        ("broker", "settings", "types", "errors", "__version__", "protocols.kafka.dispatch")
    ),
    # Talks to the broker through Kafka clients only: confluent-kafka, and the CLI's
    # one-request-at-a-time client for what librdkafka cannot send (the driver's EndTxn).
    "spark": Rule(("cli.kafka_request", "cli.clients")),
    # A client of any broker: runs `weirmq serve` as a process, reads only default settings.
    "bench": Rule(("__version__", "settings")),
    "cli": Rule(EVERYTHING),
    "testing": Rule(EVERYTHING),
    "__init__": Rule(()),  # src/weirmq/__init__.py: importing weirmq stays cheap
    "__main__": Rule(("cli",)),
}
ADAPTER_SHARED = "weirmq.protocols.contract"
"""What every protocol adapter may import from `weirmq.protocols` besides itself."""


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


def check_import(part: str, rule: Rule, target: str, module: str = "") -> str | None:
    """Why ``part`` (module ``module``) may not import ``target``, or None when it may."""
    top = target.split(".")[0]
    if rule.sans_io and top in IO_MODULES:
        return f"{part}/ is sans-I/O and may not import {top}"
    if part == "protocols":
        return _check_adapter(module, target)
    if not _within(target, "weirmq") or _within(target, f"weirmq.{part}"):
        return None
    allowed = [f"weirmq.{name}" if name else "weirmq" for name in rule.may_import]
    if any(_within(target, prefix) for prefix in allowed):
        return None
    return f"{part} may import only {', '.join(allowed) or 'nothing of weirmq'}"


def _check_adapter(module: str, target: str) -> str | None:
    """The protocols rule, and: one adapter (weirmq.protocols.<name>) may not import
    another; all of them may import the shared contract."""
    if not _within(target, "weirmq.protocols"):
        return check_import("protocols (adapters)", RULES["protocols"], target)
    own = ".".join(module.split(".")[:3])
    if _within(target, ADAPTER_SHARED) or _within(target, own) or target == "weirmq.protocols":
        return None
    return f"{own} is one protocol adapter and may not import another ({target})"


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
        reason = check_import(part, rule, target, module)
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
        "records/__init__.py": "",
        "records/batch.py": (
            "from typing import TYPE_CHECKING\n"
            "from . import compression\n"  # allowed: records importing itself
            "if TYPE_CHECKING:\n"
            "    from ..storage import log\n"  # line 4: relative, type-only
            "def now() -> float:\n"
            "    import time\n"  # line 6: inside a function, sans-I/O
            "    return time.time()\n"
        ),
        "storage/log.py": (
            "from weirmq.records.batch import RecordBatch\n"  # allowed
            "from weirmq.protocols.kafka import wire\n"  # line 2: a protocol
        ),
        "protocols/amqp/channel.py": (
            "from weirmq.protocols.contract import Reply\n"  # allowed: shared by adapters
            "from weirmq.protocols.amqp import frames\n"  # allowed: itself
            "from weirmq.protocols.kafka.wire import fast\n"  # line 3: another adapter
            "from weirmq.server import connection\n"  # line 4: the layer above
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
        ("records/batch.py", 4, "weirmq.storage.log"),
        ("records/batch.py", 6, "time"),
        ("storage/log.py", 2, "weirmq.protocols.kafka.wire"),
        ("protocols/amqp/channel.py", 3, "weirmq.protocols.kafka.wire.fast"),
        ("protocols/amqp/channel.py", 4, "weirmq.server.connection"),
        ("admin/api.py", 2, "weirmq.storage.log"),
        ("extras.py", 1, "weirmq.extras"),
    }
    message = str(next(v for v in violations if v.target == "weirmq.protocols.kafka.wire"))
    assert message.startswith(f"{package_root / 'storage' / 'log.py'}:2: ")
    assert "'weirmq.protocols.kafka.wire'" in message
    crossing = next(v for v in violations if v.target.endswith("fast"))
    assert "may not import another" in crossing.reason
