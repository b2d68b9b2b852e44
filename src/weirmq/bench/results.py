"""What every benchmark shares: the machine description, aligned tables, saving results.

A run writes one JSON document: the parameters, the machine and every figure, so that a
run can be compared with a later one or with another broker's. The scripts under the
repository's ``bench/`` (storage, encoders) and ``python -m weirmq.bench.rebalance`` write
to ``bench/results/<kind>-<timestamp>.json`` (gitignored) unless ``--json FILE`` names
another place.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path("bench") / "results"  # relative to where the benchmark is run


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, CPU model, memory, Python, kernel."""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        pages, page_bytes = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return round(pages * page_bytes / 2**30, 1)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned columns: the first left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  " + "   ".join(cells))
    return lines


def save_results(kind: str, started: str, document: dict[str, Any], json_path: Path | None) -> Path:
    """Write `document` (plus `started`) to `json_path` or the default place; returns it."""
    path = json_path or RESULTS_DIR / f"{kind}-{started}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"started": started, **document}, indent=2) + "\n")
    return path
