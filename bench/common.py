"""What every benchmark script shares: the machine description, tables, saving results.

Each script writes one JSON document per run to ``bench/results/<kind>-<timestamp>.json``
(gitignored) unless ``--json FILE`` names another place: the parameters, the machine and
every figure, so a run can be compared with a later one.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


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
