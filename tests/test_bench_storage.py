"""The storage benchmark runs end to end and reports every figure (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def numbers(tree: Any, path: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON tree, with its path."""
    if isinstance(tree, dict):
        return [n for key, value in tree.items() for n in numbers(value, f"{path}.{key}")]
    if isinstance(tree, list):
        return [n for i, value in enumerate(tree) for n in numbers(value, f"{path}[{i}]")]
    if isinstance(tree, int | float) and not isinstance(tree, bool):
        return [(path, tree)]
    return []


@pytest.mark.slow
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.storage",
            "--quick",
            "--json",
            str(out),
            "--dir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Recovery on open" in done.stdout
    document = json.loads(out.read_text())
    results = document["results"]
    assert set(results["append"]) == set(results["read"]) == {"1KB", "16KB", "1MB"}
    assert set(results["baseline"]) == {"16KiB", "1MiB"}
    assert set(results["recovery"]) == {"1KB", "16KB"}
    assert results["group_commit"]["fsync_rounds"] >= 1
    figures = numbers(results)
    assert len(figures) > 50
    assert [(p, v) for p, v in figures if not v > 0] == []
    assert document["params"]["total_bytes"] > 0
    assert document["machine"]["cpu_count"] >= 1
    assert list(tmp_path.iterdir()) == [out]  # the temporary data directory is gone
