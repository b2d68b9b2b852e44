"""examples/order_pipeline.py's `--master`: parsed, checked, and honoured.

The demo runs in a process of its own here, not through `main()` in this one: the tests
share one local[2] session, and `getOrCreate()` would hand the demo that session (ignoring
its master) and the demo would stop it on the way out. The subprocess uses the shared
broker (`--bootstrap`) and prints the master its session runs on, so the test sees that
`--master local[1]` reached Spark, not only argparse.

A standalone cluster (`spark://`) is not started here but in test_example_cluster.py, which
runs the demo on a master and two workers (docs/spark.md, "Running on a cluster"); here
only the check that a cluster run has PYSPARK_PYTHON set, which fails before anything
starts, is tested.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_pipeline.py"
DEMO_TIMEOUT_S = 300
DEMO_ORDERS = 300


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("order_pipeline_master", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look a class's module up in sys.modules while building it.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_master_defaults_to_local_2(example: ModuleType) -> None:
    args = example._parse_args([])
    assert args.master == "local[2]"
    assert args.work_dir is None


def test_cluster_master_and_work_dir_are_parsed(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    args = example._parse_args(
        ["--master", "spark://10.0.0.5:7077", "--work-dir", "hdfs://nn:8020/pipeline"]
    )
    assert args.master == "spark://10.0.0.5:7077"
    assert args.work_dir == "hdfs://nn:8020/pipeline"


def test_cluster_master_without_pyspark_python_is_refused(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        example._parse_args(["--master", "spark://10.0.0.5:7077"])
    assert exit_info.value.code == 2
    assert "needs PYSPARK_PYTHON" in capsys.readouterr().err


def test_local_master_needs_no_pyspark_python(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # local_session() points the workers at this interpreter itself.
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert example._parse_args(["--master", "local[1]"]).master == "local[1]"


def test_demo_runs_on_the_master_given(bootstrap: str, tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    command = [
        sys.executable,
        str(EXAMPLE),
        "--master",
        "local[1]",
        "--bootstrap",
        bootstrap,
        "--orders",
        str(DEMO_ORDERS),
        "--work-dir",
        str(work_dir),
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Spark session ready on local[1] " in done.stdout
    # Both sinks (the result topic and Parquet) hold every order, as computed.
    assert done.stdout.count(f"(window, region) rows, {DEMO_ORDERS} orders,") == 2, done.stdout
    # --work-dir was used (and, being the caller's, left in place).
    checkpoints = list(work_dir.glob("order-pipeline-*/checkpoint"))
    assert len(checkpoints) == 1, list(work_dir.iterdir())
