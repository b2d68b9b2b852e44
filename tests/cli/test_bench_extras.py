"""`weirmq bench` in an environment without the `bench` extra (what `make run` installs):
the workloads that need its clients are refused at once, naming what to install."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner

from weirmq.cli import bench as bench_command
from weirmq.cli.main import main as cli


@pytest.fixture
def without_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name in ("boto3", "moto") else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(bench_command.importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("without_boto3")
def test_a_workload_whose_clients_are_missing_is_refused_before_anything_runs() -> None:
    result = CliRunner().invoke(cli, ["bench", "--workload", "sqs"])
    assert result.exit_code == 2
    assert "sqs needs boto3, sqs needs moto" in result.output
    assert "pip install 'weirmq[bench]'" in result.output


@pytest.mark.usefixtures("without_boto3")
def test_by_default_every_workload_is_chosen_and_so_checked() -> None:
    result = CliRunner().invoke(cli, ["bench", "--quick"])
    assert result.exit_code == 2
    assert "--workload" in result.output
