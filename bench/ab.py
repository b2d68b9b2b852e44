"""A/B: this tree's broker against an older commit's, alternating, on issue 17's cases.

    python -m bench.ab --baseline 45a94e8 [--runs 3] [--out ab-results]
    python -m bench.ab --baseline HEAD --before-python .venv/bin/python \
        --after-python /other/venv/bin/python      # same code, two interpreters

The machine drifts (the same broker measured twice as much CPU per request an hour
apart), so a before/after figure is only worth something from runs that alternate on one
machine at one time. This checks the baseline commit out into a temporary git worktree,
gives it this tree's benchmark code (so both brokers are measured the same way; only the
broker differs), and then runs the cases below once per tree, in turns, `--runs` times.
Each run is a fresh process with its tree first on PYTHONPATH, and every broker it starts
(`weirmq.bench.target.BrokerProcess`) inherits that. It prints, per target, the median
of each side and every run's figure, and leaves each run's JSON document in `--out`.

The cases: `startup`, `idle`, the 1 KB and 16 KB single-producer produce cases at
librdkafka's default batches and at batch.size=60000, `requests`, both modes at 1,000
partitions, `latency` at 5,000 msg/s (the quick variant: 4 s), and `stop` with 10,000
partitions: about 2.5 minutes a run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KB = 1024


def one_run(out: Path) -> None:
    """Child mode: the cases once, against the broker of the tree on PYTHONPATH."""
    from weirmq.bench import report
    from weirmq.bench import workloads as w

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="weirmq-ab-"))
    full = w.Run(quick=False, work=work, log=log, cores=os.cpu_count() or 1)
    quick = w.Run(quick=True, work=work, log=log, cores=os.cpu_count() or 1)
    w.produce_plan = lambda _quick: [  # type: ignore[assignment]
        (size, acks, 1, batch)
        for size in (KB, 16 * KB)
        for acks in ("1", "all")
        for batch in (None, w.SMALL_REQUEST_BYTES)
    ]
    w.partitions_plan = lambda _quick: [("default", 1000), ("round-robin", 1000)]  # type: ignore[assignment]
    plan = [("startup", full), ("idle", full), ("produce", full), ("requests", full),
            ("partitions", full), ("latency", quick), ("stop", full)]  # fmt: skip
    document: dict[str, Any] = {"workloads": {}}
    try:
        for name, run in plan:
            document["workloads"][name] = w.WORKLOADS[name](run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document["targets"] = report.targets(document)
    out.write_text(json.dumps(document, indent=1, default=str))


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summarize(documents: dict[str, list[dict[str, Any]]]) -> str:
    """Per target: each side's median and every run's figure."""
    lines = []
    names = [t["target"] for t in documents["after"][0]["targets"]]
    goals = {t["target"]: t["goal"] for t in documents["after"][0]["targets"]}
    for name in names:
        row = [f"{name} ({goals[name]})"]
        for side in ("before", "after"):
            values = [t["measured"] for d in documents[side] for t in d["targets"]
                      if t["target"] == name]  # fmt: skip
            known = [v for v in values if v is not None]
            median = statistics.median(known) if known else None
            row.append(f"{side} {_figure(median)} [{', '.join(_figure(v) for v in values)}]")
        lines.append("  ".join(row))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("ab-results"))
    parser.add_argument(
        "--before-python",
        default=sys.executable,
        help="the interpreter that runs the baseline (default: this one)",
    )
    parser.add_argument(
        "--after-python",
        default=sys.executable,
        help="the interpreter that runs this tree (default: this one)",
    )
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.one is not None:
        one_run(args.one)
        return
    if not args.baseline:
        parser.error("--baseline is required")
    args.out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="weirmq-ab-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base),
                    args.baseline], check=True)  # fmt: skip
    try:
        shutil.rmtree(base / "src/weirmq/bench")
        shutil.copytree(ROOT / "src/weirmq/bench", base / "src/weirmq/bench")
        trees = {"before": base, "after": ROOT}
        pythons = {"before": args.before_python, "after": args.after_python}
        documents: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for run in range(1, args.runs + 1):
            for side, tree in trees.items():
                out = (args.out / f"{side}-{run}.json").resolve()
                print(f"run {run}: {side} ({tree})", file=sys.stderr, flush=True)
                env = {**os.environ, "PYTHONPATH": str(tree / "src")}
                subprocess.run([pythons[side], "-m", "bench.ab", "--one", str(out)],
                               cwd=ROOT, env=env, check=True)  # fmt: skip
                documents[side].append(json.loads(out.read_text()))
        print(summarize(documents))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                       check=False)  # fmt: skip


if __name__ == "__main__":
    main()
