"""`weirmq storage verify` and `repair` on data directories damaged the way disks do.

Each test writes a data directory with `LogManager` (checkpoints included), stops it
cleanly or "crashes" it, damages a file, and checks what verify finds (kind, file,
position, offsets) and what repair leaves behind: a directory the next `LogManager`
opens with the partition online, every intact record readable, reads in the given-up
range going on past it, appends working, and every byte taken out of a log in
quarantine/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from weirmq.records.batch import parse_header
from weirmq.storage.config import LogConfig
from weirmq.storage.damage import read_lost_ranges
from weirmq.storage.log import FileLog
from weirmq.storage.manager import LogManager, StorageSettings
from weirmq.storage.repair import apply_plan, plan_repair
from weirmq.storage.verify import (
    DAMAGED,
    INDEX,
    LOST,
    MISSING,
    QUARANTINE_DIR,
    TORN_TAIL,
    DataDirReport,
    Finding,
    verify_data_dir,
)
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)
SETTINGS = StorageSettings(flush_interval_ms=3_600_000)  # flushes only when told
BATCHES = 60  # of three records, ~200 bytes: six segments of 30 offsets


def _manager(data_dir: Path) -> LogManager:
    return LogManager(data_dir, clock=ManualClock(), settings=SETTINGS, config_for=lambda _: CONFIG)


def _write(data_dir: Path, *, batches: int = BATCHES, clean: bool = True) -> list[str]:
    """orders-0 with `batches` batches (and a small sound partition beside it); returns
    the segment files. `clean=False`: flushed and checkpointed, then a crash."""
    manager = _manager(data_dir)
    log = manager.create("orders", 0)
    for i in range(batches):
        log.append(make_batch(3, size=100, ts=1_000 * i))
    manager.create("other", 0).append(make_batch(2))
    paths = [s.log_path for s in log.segments]
    if clean:
        manager.close()
    else:
        for each in manager.logs().values():
            each.flush()
        manager.write_checkpoints()
        manager.committer.close()
        manager.handles.close()
    return paths


def _positions(path: str) -> list[int]:
    data = Path(path).read_bytes()
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += parse_header(data, position).size
    return positions


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x01]))


def _only_finding(report: DataDirReport) -> Finding:
    damaged = [p for p in report.partitions if not p.ok]
    assert [p.name for p in damaged] == ["orders-0"]
    assert [p.name for p in report.partitions if p.ok] == ["other-0"]
    (finding,) = damaged[0].findings
    return finding


def _repair(data_dir: Path, **options: bool) -> DataDirReport:
    """Repair, then verify again; returns the second report (which must be sound)."""
    apply_plan(plan_repair(verify_data_dir(data_dir), **options), data_dir)
    after = verify_data_dir(data_dir)
    assert after.ok, after.to_json()
    return after


def _reopened(data_dir: Path) -> tuple[LogManager, FileLog]:
    manager = _manager(data_dir)
    log = manager.get("orders", 0)
    assert log is not None and log.offline_reason is None, log and log.offline_reason
    assert log.damage == ()
    return manager, log


def _first_offset(log: FileLog, offset: int) -> int:
    return parse_header(bytes(log.read(offset, 100).records)).base_offset


def test_a_sound_data_directory_has_no_findings(tmp_path: Path) -> None:
    _write(tmp_path)
    report = verify_data_dir(tmp_path)
    assert report.ok and report.clean_shutdown
    assert [(p.name, p.findings) for p in report.partitions] == [("orders-0", ()), ("other-0", ())]
    orders = report.partitions[0]
    assert (orders.first_offset, orders.end_offset, len(orders.segments)) == (0, 180, 6)
    assert plan_repair(report) == []


def test_a_flipped_bit_is_found_and_repair_truncates_at_the_first_bad_batch(
    tmp_path: Path,
) -> None:
    paths = _write(tmp_path)
    middle = paths[2]  # offsets 60..89
    bad = _positions(middle)[4]  # the batch of offsets 72..74
    _flip(middle, bad + 90)
    size = os.path.getsize(middle)
    cut = Path(middle).read_bytes()[bad:]

    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.path, finding.position) == (DAMAGED, middle, bad)
    assert (finding.start_offset, finding.end_offset, finding.offsets) == (72, 90, "72..89")
    assert finding.bytes == size - bad and "CRC" in finding.problem

    (plan,) = plan_repair(verify_data_dir(tmp_path))
    assert plan.lost == ((72, 90),) and plan.lost_bytes == size - bad
    after = _repair(tmp_path)
    (lost,) = after.partitions[0].findings
    assert (lost.kind, lost.start_offset, lost.end_offset) == (LOST, 72, 90)
    assert os.path.getsize(middle) == bad
    quarantine = tmp_path / QUARANTINE_DIR / "orders-0"
    assert (quarantine / f"{Path(middle).name}.from-{bad}").read_bytes() == cut  # kept
    assert read_lost_ranges(tmp_path / "orders-0") == [(72, 90)]

    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 69) == 69
    assert _first_offset(log, 72) == 90  # a read in the given-up range goes on past it
    assert log.append(make_batch(1)).base_offset == 180
    manager.close()


def test_a_segment_cut_inside_a_batch(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    middle = paths[1]  # offsets 30..59
    os.truncate(middle, _positions(middle)[3] + 100)  # inside the batch of 39..41
    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.start_offset, finding.end_offset) == (DAMAGED, 39, 60)
    _repair(tmp_path)
    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 40) == 60
    manager.close()


def test_a_segment_cut_between_batches_is_missing_data(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    middle = paths[1]
    os.truncate(middle, _positions(middle)[3])
    (orders, _other) = verify_data_dir(tmp_path).partitions
    # Its indexes still name the batches cut off: they disagree with the log too.
    index, timeindex, missing = orders.findings
    assert (index.kind, timeindex.kind) == (INDEX, INDEX)
    assert "past the log's end" in index.problem
    assert (missing.kind, missing.start_offset, missing.end_offset) == (MISSING, 39, 60)
    manager = _manager(tmp_path)
    offline = manager.get("orders", 0)
    assert offline is not None and offline.offline_reason is not None  # before the repair
    manager.close()

    (plan,) = plan_repair(verify_data_dir(tmp_path))
    assert [step.what for step in plan.steps] == ["record", "move", "move"]  # the indexes
    assert plan.lost == ((39, 60),) and plan.lost_bytes == 0
    _repair(tmp_path)
    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 39) == 60
    manager.close()


def test_a_missing_segment_file(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    os.unlink(paths[3])  # offsets 90..119
    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.start_offset, finding.end_offset) == (MISSING, 90, 120)
    _repair(tmp_path)
    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 90) == 120
    manager.close()


def test_a_missing_last_segment(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    for suffix in (".log", ".index", ".timeindex"):
        os.unlink(paths[-1].removesuffix(".log") + suffix)  # offsets 150..179
    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.start_offset, finding.end_offset) == (MISSING, 150, 180)
    _repair(tmp_path)
    manager, log = _reopened(tmp_path)
    assert log.log_end_offset == 180  # the next append gets an offset never given before
    assert log.append(make_batch(1)).base_offset == 180
    assert _first_offset(log, 150) == 180
    manager.close()


def test_damage_in_the_last_segment_repaired_with_a_new_segment_at_the_recovery_point(
    tmp_path: Path,
) -> None:
    paths = _write(tmp_path, batches=BATCHES - 5, clean=False)  # the last: offsets 150..164
    last = paths[-1]
    _flip(last, _positions(last)[2] + 90)  # offsets 156..158
    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.start_offset, finding.end_offset) == (DAMAGED, 156, 165)

    _repair(tmp_path)
    assert (tmp_path / "orders-0" / f"{165:020d}.log").exists()
    manager, log = _reopened(tmp_path)
    assert log.log_end_offset == 165  # no offset ever given to a producer is reused
    assert log.append(make_batch(1)).base_offset == 165
    assert _first_offset(log, 150) == 150
    assert _first_offset(log, 160) == 165
    manager.close()


def test_quarantine_moves_the_whole_damaged_segment(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    middle = paths[2]
    _flip(middle, _positions(middle)[4] + 90)
    (plan,) = plan_repair(verify_data_dir(tmp_path), quarantine_segments=True)
    assert plan.lost == ((60, 90),)  # the intact prefix goes with it
    _repair(tmp_path, quarantine_segments=True)
    assert not os.path.exists(middle)
    quarantined = sorted(p.name for p in (tmp_path / QUARANTINE_DIR / "orders-0").iterdir())
    assert quarantined == [f"{60:020d}.{suffix}" for suffix in ("index", "log", "timeindex")]
    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 60) == 90
    manager.close()


def test_a_torn_tail_after_a_crash_is_not_damage(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    log = manager.create("orders", 0)
    for _ in range(5):
        log.append(make_batch(3, size=100))
    log.flush()
    manager.write_checkpoints()
    log.append(make_batch(3, size=100))  # never flushed: the crash tears it
    path = log.segments[-1].log_path
    manager.committer.close()
    manager.handles.close()
    os.truncate(path, os.path.getsize(path) - 50)
    report = verify_data_dir(tmp_path)
    assert report.ok and not report.clean_shutdown
    (finding,) = report.partitions[0].findings
    assert (finding.kind, finding.start_offset, finding.end_offset) == (TORN_TAIL, 15, None)
    assert plan_repair(report) == []


def test_an_index_that_disagrees_with_its_log(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    index = paths[1].removesuffix(".log") + ".index"
    data = bytearray(Path(index).read_bytes())
    data[7] ^= 0x04  # the first entry's position now points inside a batch
    Path(index).write_bytes(bytes(data))
    finding = _only_finding(verify_data_dir(tmp_path))
    assert (finding.kind, finding.path) == (INDEX, index)
    _repair(tmp_path)
    assert not os.path.exists(index)  # moved aside: the broker rebuilds it
    assert (tmp_path / QUARANTINE_DIR / "orders-0" / Path(index).name).read_bytes() == data
    manager, log = _reopened(tmp_path)
    assert _first_offset(log, 45) == 45
    manager.close()


@pytest.mark.parametrize("clean", [True, False], ids=["after-a-stop", "after-a-crash"])
def test_a_partition_the_checkpoint_does_not_name_is_judged_from_offset_zero(
    tmp_path: Path, clean: bool
) -> None:
    # With no recovery point, as for the broker, every bad byte is a torn tail.
    paths = _write(tmp_path, clean=clean)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    _flip(paths[2], _positions(paths[2])[4] + 90)
    report = verify_data_dir(tmp_path)
    assert report.ok
    (finding,) = report.partitions[0].findings
    assert (finding.kind, finding.start_offset) == (TORN_TAIL, 72)
