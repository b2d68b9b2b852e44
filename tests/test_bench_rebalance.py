"""The rebalance benchmark runs end to end on its fastest scenario (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.integration
def test_one_kip848_join_and_leave_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.rebalance", "--scenario", "consumer-hb500", "--runs", "1",
         "--timeout-s", "20", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())["results"]["consumer-hb500"]
    [run] = result["runs"]
    assert set(run) == {"rebalance_s", "new_member_assigned_s", "new_member_consuming_s",
                        "leave_s"}
    # The group settles only after the new member has its partitions and consumes from them.
    assert 0 < run["new_member_assigned_s"] <= run["new_member_consuming_s"] <= run["rebalance_s"]
    assert run["leave_s"] > 0
    assert result["producer"]["sent"] > 0 and result["producer"]["failed"] == 0
