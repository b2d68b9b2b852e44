"""WeirMQ as a package: `python -m build` makes a wheel and an sdist, and the wheel,
installed into a fresh environment, gives a working `weirmq serve` and CLI.

The fresh environment gets the wheel alone (`--no-deps`, no index): its dependencies come
from this environment's site-packages through a path file, which adds the directory
without running that environment's own path hooks (its editable install of this checkout
among them). So what runs is the wheel's code, and the test needs no network.
"""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# Client libraries a project may have its own versions of: floors only, never pins.
CLIENT_LIBRARIES = ("confluent-kafka", "aiokafka", "kafka-python")
STARTUP_TIMEOUT_S = 30
TOP_LEVEL_NOT_IN_A_CLONE = {
    ".venv", ".git", "weirmq-data", "build", "dist", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", ".hypothesis",
}  # fmt: skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "weirmq"
    # Build from a copy, as from a fresh clone: no build/ or egg-info of this tree leaks in.
    shutil.copytree(ROOT, source, ignore=not_in_a_clone)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def not_in_a_clone(directory: str, names: list[str]) -> set[str]:
    """What a working tree has and a fresh clone does not (at its top: data and builds)."""
    ignored = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    if Path(directory) == ROOT:
        ignored |= {n for n in names if n in TOP_LEVEL_NOT_IN_A_CLONE}
    return ignored


def only(directory: Path, pattern: str) -> Path:
    found = list(directory.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_ships_the_code_the_console_and_the_entry_points(dist: Path) -> None:
    wheel = only(dist, "weirmq-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
        entry_points = archive.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert "weirmq/py.typed" in names
    assert "weirmq/cli/main.py" in names
    assert "weirmq/admin/console/index.html" in names
    assert "weirmq = weirmq.cli.main:main" in entry_points
    assert "weirmq = weirmq.testing.pytest_plugin" in entry_points
    message = email.parser.BytesParser().parsebytes(metadata)
    assert {"spark", "bench", "test"} <= set(message.get_all("Provides-Extra") or [])
    requirements = message.get_all("Requires-Dist") or []
    for library in CLIENT_LIBRARIES:
        for requirement in requirements:
            if re.match(rf"{library}\b", requirement, re.I):
                version = requirement.partition(";")[0]  # not the extra's marker
                assert "==" not in version and "<" not in version, requirement


def test_the_sdist_has_what_a_build_needs(dist: Path) -> None:
    sdist = only(dist, "weirmq-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md"} <= names
    assert "src/weirmq/admin/console/index.html" in names
    assert "src/weirmq/cli/main.py" in names


def test_the_installed_wheel_serves_and_its_cli_works(dist: Path, tmp_path: Path) -> None:
    wheel = only(dist, "weirmq-*.whl")
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # This environment's packages, without its path hooks (see the module docstring).
    purelib = Path(sysconfig.get_paths()["purelib"])
    target = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(target) / "weirmq-test-deps.pth").write_text(f"{purelib}\n")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=120,
    )
    where = subprocess.run(
        [python, "-c", "import weirmq; print(weirmq.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(target), where  # the wheel's copy, not this checkout's

    weirmq = env_dir / "bin" / "weirmq"
    server = subprocess.Popen(
        [weirmq, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
         "--admin-listen", "off", "--amqp-listen", "off", "--sqs-listen", "off"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"accepting Kafka connections on (\S+)", line)
        assert match, (line, server.stderr.read() if server.poll() is not None else "")
        bootstrap = match.group(1)
        cli = [weirmq, "--help"]
        assert subprocess.run(cli, capture_output=True, check=True).returncode == 0
        created = subprocess.run(
            [weirmq, "topics", "create", "packaged", "-b", bootstrap, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert created.returncode == 0, created.stderr
        produced = subprocess.run(
            [weirmq, "produce", "packaged", "-b", bootstrap],
            input="from the wheel\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert produced.returncode == 0, produced.stderr
        consumed = subprocess.run(
            [weirmq, "consume", "packaged", "-b", bootstrap, "--from-beginning", "--exit"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert consumed.stdout == "from the wheel\n", consumed.stderr
    finally:
        server.terminate()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if server.poll() is None:
            server.kill()
        server.communicate()
