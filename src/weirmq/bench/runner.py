"""Runs the chosen workloads against one broker and writes the results.

The run is sequential: one case at a time, so cases never compete for the machine's two
cores. Progress goes to stderr; the table to stdout; the JSON document and the plot to the
files asked for. A case that fails is recorded as failed and the run goes on; the exit
status is then 1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirmq import __version__
from weirmq.bench import report
from weirmq.bench.results import machine_info
from weirmq.bench.workloads import WORKLOADS, Run


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(*, quick: bool, workloads: Sequence[str], bootstrap: str | None, broker_pid: int | None,
        work_parent: Path) -> dict[str, Any]:
    """Run `workloads` (names from WORKLOADS, in that table's order) and return the document."""
    import confluent_kafka

    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    begin = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="weirmq-bench-", dir=work_parent))
    context = Run(quick=quick, work=work, log=log, bootstrap=bootstrap, broker_pid=broker_pid,
                  cores=os.cpu_count() or 1)
    document: dict[str, Any] = {
        "tool": "weirmq bench",
        "version": __version__,
        "started": started,
        "quick": quick,
        "machine": machine_info(),
        "broker": {
            "kind": "own" if bootstrap is None else "external",
            "bootstrap": bootstrap,
            "pid": broker_pid,
            "description": (f"weirmq {__version__}, started by the benchmark" if bootstrap is None
                            else f"external broker at {bootstrap}"),
        },
        "client": {"library": "confluent-kafka", "version": confluent_kafka.version()[0],
                   "librdkafka": confluent_kafka.libversion()[0]},
        "workloads": {},
    }
    try:
        for name in WORKLOADS:
            if name not in workloads:
                continue
            log(f"{name} ...")
            document["workloads"][name] = WORKLOADS[name](context)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document["seconds"] = time.perf_counter() - begin
    document["targets"] = report.targets(document)
    return document


def failed(document: dict[str, Any]) -> bool:
    return any("error" in case for w in document["workloads"].values() for case in w["cases"])


def write(document: dict[str, Any], json_path: Path | None, plot_path: Path | None) -> None:
    """Print the table; write the JSON document and the plot if asked."""
    print(report.render(document))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(document, indent=2) + "\n")
        log(f"results: {json_path}")
    if plot_path is not None:
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        report.plot(document, plot_path)
        log(f"plot: {plot_path}")
