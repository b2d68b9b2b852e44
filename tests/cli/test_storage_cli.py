"""``weirmq storage verify`` and ``repair`` as an operator runs them: output, --json, exit
codes, the data directory's lock, --dry-run. What they find and fix is tested in
tests/storage/test_verify_repair.py; here, how they say it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner, Result

from weirmq.cli.main import main
from weirmq.records.batch import parse_header
from weirmq.storage.config import LogConfig
from weirmq.storage.lock import DataDirLock
from weirmq.storage.manager import LogManager, StorageSettings
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def _data_dir(path: Path, *, damaged: bool) -> str:
    """orders-0: 60 batches of three records in six segments, stopped cleanly; with
    `damaged`, one bit flipped in the batch of offsets 72..74. Returns that segment."""
    manager = LogManager(
        path,
        clock=ManualClock(),
        settings=StorageSettings(flush_interval_ms=3_600_000),
        config_for=lambda _: CONFIG,
    )
    log = manager.create("orders", 0)
    for _ in range(60):
        log.append(make_batch(3, size=100))
    middle = log.segments[2].log_path
    manager.close()
    if damaged:
        data = bytearray(Path(middle).read_bytes())
        position = 0
        for _ in range(4):
            position += parse_header(data, position).size
        data[position + 90] ^= 0x01
        Path(middle).write_bytes(bytes(data))
    return middle


def _run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(
        main, ["storage", *args], env={"WEIRMQ_DATA_DIR": None, **(env or {})}
    )


def _files(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_storage_is_a_weirmq_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "storage" in result.output


def test_verify_a_sound_directory(tmp_path: Path) -> None:
    _data_dir(tmp_path, damaged=False)
    result = _run("verify", "--data-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.stdout == "orders-0  OK  offsets 0..179, 6 segments, 24,360 bytes\n"
    assert "all sound" in result.stderr


def test_verify_names_the_damaged_range(tmp_path: Path) -> None:
    middle = _data_dir(tmp_path, damaged=True)
    result = _run("verify", "--data-dir", str(tmp_path))
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("orders-0  DAMAGED  offsets 0..179")
    assert lines[1].startswith(
        f"    damaged: offsets 72..89 (orders-0/{Path(middle).name} from position 1,624, "
    )
    assert "CRC mismatch" in lines[1]
    assert "weirmq storage repair" in result.stderr


def test_verify_json(tmp_path: Path) -> None:
    middle = _data_dir(tmp_path, damaged=True)
    result = _run("verify", "--data-dir", str(tmp_path), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["clean_shutdown"] is True
    (partition,) = report["partitions"]
    assert (partition["partition"], partition["status"]) == ("orders-0", "damaged")
    (finding,) = partition["findings"]
    assert finding["kind"] == "damaged" and finding["file"] == middle
    assert (finding["position"], finding["start_offset"], finding["end_offset"]) == (1624, 72, 90)


def test_the_data_dir_comes_from_the_broker_s_settings(tmp_path: Path) -> None:
    _data_dir(tmp_path, damaged=False)
    result = _run("verify", env={"WEIRMQ_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 0 and "orders-0  OK" in result.stdout


def test_a_running_broker_s_directory_is_refused(tmp_path: Path) -> None:
    _data_dir(tmp_path, damaged=True)
    with DataDirLock.acquire(tmp_path):  # what a running broker holds
        for command in ("verify", "repair"):
            result = _run(command, "--data-dir", str(tmp_path))
            assert result.exit_code == 3, result.output
            assert f"in use by a running WeirMQ broker (pid {os.getpid()})" in result.stderr
            assert "stop the broker first" in result.stderr
            assert "Traceback" not in result.output


def test_usage_errors(tmp_path: Path) -> None:
    result = _run("verify", "--data-dir", str(tmp_path / "nowhere"))
    assert result.exit_code == 2 and "no data directory at" in result.stderr
    assert not (tmp_path / "nowhere").exists()  # not created by looking
    _data_dir(tmp_path, damaged=False)
    result = _run("verify", "--data-dir", str(tmp_path), "--partition", "orders-9")
    assert result.exit_code == 2 and "no partition directory orders-9" in result.stderr


def test_repair_dry_run_changes_nothing(tmp_path: Path) -> None:
    middle = _data_dir(tmp_path, damaged=True)
    before = _files(tmp_path)
    result = _run("repair", "--data-dir", str(tmp_path), "--dry-run")
    assert result.exit_code == 0, result.output
    assert _files(tmp_path) == before
    name = Path(middle).name
    assert result.stdout.splitlines() == [
        "orders-0: would record offsets 72..89 as given up (in orders-0/lost-offsets)",
        f"orders-0: would move orders-0/{name[:20]}.index to quarantine/orders-0/",
        f"orders-0: would move orders-0/{name[:20]}.timeindex to quarantine/orders-0/",
        f"orders-0: would truncate orders-0/{name} at position 1,624 (the bytes after it go "
        "to quarantine/orders-0/)",
        "orders-0: would lose 72..89 (18 offsets, 2,436 bytes moved to quarantine)",
    ]
    assert "dry run: nothing changed" in result.stderr


def test_repair_then_verify(tmp_path: Path) -> None:
    _data_dir(tmp_path, damaged=True)
    result = _run("repair", "--data-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (plan,) = report["partitions"]
    assert plan["lost_offsets"] == [{"start_offset": 72, "end_offset": 90}]
    assert (plan["lost_offset_count"], plan["lost_bytes"]) == (18, 2436)
    assert report["still_damaged"] == []
    assert "repaired 1 partition" in result.stderr
    again = _run("verify", "--data-dir", str(tmp_path))
    assert again.exit_code == 0, again.output
    assert "lost: offsets 72..89" in again.stdout
    nothing = _run("repair", "--data-dir", str(tmp_path))
    assert nothing.exit_code == 0 and "nothing to repair" in nothing.stderr
