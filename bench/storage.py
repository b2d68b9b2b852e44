"""Storage engine micro-benchmark: how close `FileLog` gets to the disk it writes to.

Run: ``make bench-storage`` (or ``.venv/bin/python -m bench.storage [--quick] [--json FILE]
[--dir DIR] [--size-mib N]``). It prints a table and writes every figure, the parameters and
the machine to a JSON file (default ``bench/results/storage-<timestamp>.json``, gitignored).
It is not a test: nothing here passes or fails on speed.

What one run measures, each on the same amount of data (1 GiB; ``--quick`` 64 MiB), in a
fresh temporary directory made under ``--dir`` (default: the current directory, so the
same filesystem as a ``weirmq-data`` there) and deleted at the end:

1. Baseline: plain buffered sequential writes to one file with ``os.write`` in 16 KiB and
   1 MiB chunks, then one fsync. This is what the disk and page cache give any program;
   the log's figures only mean something next to it, measured in the same run.
2. ``FileLog.append`` of one Kafka v2 record batch of 1 KB, 16 KB or 1 MB (built once with
   ``encode_batch``, appended over and over; the log assigns offsets), then one
   ``flush()``. Reported with and without that final flush.
   The storage engine's overhead in one number (target: >= 0.5) is the ratio of the 16 KB
   append rate to the plain write rate of the same 16 KB, measured head to head:
   alternating rounds of 1,000 writes and 1,000 appends, so that both meet the same
   page-cache and writeback state. (Measured one after the other, the second run is
   throttled by the writeback of the first one's dirty pages; that ratio is shown too.)
   Group commit: 16 KB appends, each followed by ``LogManager.sync(log)`` (what an
   acks=all produce request asks for), waiting for the futures every 64 appends, as if
   64 producers were in flight; reports the rate and how many fsync rounds it took.
3. ``FileLog.read`` of the whole log from offset 0 with ``max_bytes`` 1 MiB, stepping to the
   offset after the last batch returned. Every batch served is CRC-checked by the log.
   The data was just written, so reads come from the page cache (not dropped: that
   needs root and is unreliable in containers); this is the CPU cost of the read path.
4. Recovery: the 1 KB and 16 KB logs of step 2 (several segments: ``segment.bytes`` is a
   quarter of the data) are reopened as after a crash (``recovery_point=0``,
   ``clean_shutdown=False``: every batch's framing, CRC and offsets re-validated, every
   index rebuilt) and as after a clean shutdown (indexes trusted after a tail check).
   Both from the page cache. Target: 1 GB of segments recovered in <= 3 s.

Units: MB = 10**6 bytes, GB = 10**9 bytes; sizes of data written are in MiB/GiB. Times
are wall clock (``time.perf_counter``) on a machine that may be noisy: re-run before
trusting a difference of less than ~20%.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

from weirmq.bench import results as common
from weirmq.records.batch import Record, encode_batch, parse_header, read_base_offset_and_size
from weirmq.storage.config import LogConfig
from weirmq.storage.handles import HandleCache
from weirmq.storage.log import FileLog
from weirmq.storage.manager import LogManager

KIB = 1024
HEAD_TO_HEAD_ROUND = 1000  # operations per alternating round
MIB = 1024 * KIB
GIB = 1024 * MIB
MB = 10**6
GB = 10**9

FULL_TOTAL_BYTES = GIB
QUICK_TOTAL_BYTES = 64 * MIB
WRITE_CHUNK_BYTES = {"16KiB": 16 * KIB, "1MiB": MIB}
BATCH_BYTES = {"1KB": KIB, "16KB": 16 * KIB, "1MB": MIB}
RECORD_VALUE_BYTES = 512
READ_MAX_BYTES = MIB
GROUP_COMMIT_BATCH = "16KB"
GROUP_COMMIT_WAIT_EVERY = 64
RECOVERY_BATCHES = ("1KB", "16KB")
RATIO_TARGET = 0.5
RECOVERY_TARGET_S_PER_GB = 3.0


def clock_ms() -> int:
    return int(time.time() * 1000)


# --- inputs ---------------------------------------------------------------------------


def make_batch(size_bytes: int) -> bytes:
    """One uncompressed v2 batch of exactly `size_bytes` (or a byte or two off when a
    varint length boundary is in the way): records of RECORD_VALUE_BYTES, the last one
    padded."""
    now = clock_ms()
    count = max(1, (size_bytes - 61) // (RECORD_VALUE_BYTES + 12))  # 12 >= record overhead
    head = [Record(b"v" * RECORD_VALUE_BYTES, timestamp_ms=now) for _ in range(count - 1)]
    last_value = 1
    batch = b""
    for _ in range(8):
        batch = encode_batch([*head, Record(b"v" * last_value, timestamp_ms=now)])
        if len(batch) == size_bytes:
            break
        last_value = max(1, last_value + size_bytes - len(batch))
    if abs(len(batch) - size_bytes) > 2:
        raise RuntimeError(f"could not build a batch of {size_bytes} bytes ({len(batch)})")
    return batch


def log_config(total_bytes: int) -> LogConfig:
    """Several segments per log (a quarter of the data each), nothing expires."""
    return LogConfig(segment_bytes=max(total_bytes // 4, 4 * MIB), retention_ms=None)


# --- 1. baseline ----------------------------------------------------------------------


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def bench_plain_write(path: Path, chunk_bytes: int, total_bytes: int) -> dict[str, float]:
    chunk = b"\xa5" * chunk_bytes
    count = total_bytes // chunk_bytes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            write_all(fd, chunk)
        written = time.perf_counter()
        os.fsync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        path.unlink()
    return rates(count * chunk_bytes, written - start, synced - written)


def rates(data_bytes: int, write_s: float, sync_s: float) -> dict[str, float]:
    return {
        "bytes": data_bytes,
        "write_s": write_s,
        "sync_s": sync_s,
        "write_mb_s": data_bytes / write_s / MB,
        "write_sync_mb_s": data_bytes / (write_s + sync_s) / MB,
    }


# --- 2. appends -----------------------------------------------------------------------


def open_log(
    directory: Path, config: LogConfig, handles: HandleCache | None = None, **recovery: Any
) -> FileLog:
    return FileLog(directory, config, handles=handles or HandleCache(), clock=clock_ms, **recovery)


def bench_append(log: FileLog, batch: bytes, total_bytes: int) -> dict[str, float]:
    count = max(1, total_bytes // len(batch))
    append = log.append
    start = time.perf_counter()
    for _ in range(count):
        append(batch)
    appended = time.perf_counter()
    log.flush()
    flushed = time.perf_counter()
    result = rates(count * len(batch), appended - start, flushed - appended)
    result["batch_bytes"] = len(batch)
    result["batches"] = count
    result["batches_s"] = count / (appended - start)
    return result


def bench_head_to_head(work_dir: Path, batch: bytes, total_bytes: int) -> dict[str, float]:
    """The target ratio, measured fairly: rounds of plain 16 KB `os.write`s and of
    `FileLog.append`s of a 16 KB batch alternate, each to its own file, so both run in
    the same page-cache and writeback state (measured one after the other, whichever runs
    second inherits the first one's dirty pages and is throttled by their writeback)."""
    rounds = max(1, total_bytes // len(batch) // HEAD_TO_HEAD_ROUND)
    directory = work_dir / "head-to-head"
    log = open_log(directory, log_config(total_bytes))
    fd = os.open(work_dir / "plain-h2h", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
    plain_s = append_s = 0.0
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(HEAD_TO_HEAD_ROUND):
                write_all(fd, batch)
            middle = time.perf_counter()
            for _ in range(HEAD_TO_HEAD_ROUND):
                log.append(batch)
            plain_s += middle - start
            append_s += time.perf_counter() - middle
    finally:
        os.close(fd)
        log.close()
        (work_dir / "plain-h2h").unlink()
        shutil.rmtree(directory)
    data_bytes = rounds * HEAD_TO_HEAD_ROUND * len(batch)
    return {
        "bytes": data_bytes,
        "rounds": rounds,
        "plain_write_mb_s": data_bytes / plain_s / MB,
        "append_mb_s": data_bytes / append_s / MB,
        "ratio": plain_s / append_s,
    }


def bench_group_commit(data_dir: Path, batch: bytes, total_bytes: int) -> dict[str, float]:
    """acks=all: a sync future per append, waited for every GROUP_COMMIT_WAIT_EVERY."""
    total_bytes = max(total_bytes, len(batch))
    manager = LogManager(data_dir, clock=clock_ms, config_for=lambda _t: log_config(total_bytes))
    try:
        log = manager.create("bench", 0)
        count = total_bytes // len(batch)
        pending: list[Future[int]] = []
        start = time.perf_counter()
        for i in range(1, count + 1):
            log.append(batch)
            pending.append(manager.sync(log))
            if i % GROUP_COMMIT_WAIT_EVERY == 0 or i == count:
                wait_ok(pending)
                pending = []
        elapsed_s = time.perf_counter() - start
        rounds = manager.committer.rounds
    finally:
        manager.close()
    return {
        "bytes": count * len(batch),
        "batch_bytes": len(batch),
        "batches": count,
        "wait_every": GROUP_COMMIT_WAIT_EVERY,
        "elapsed_s": elapsed_s,
        "mb_s": count * len(batch) / elapsed_s / MB,
        "batches_s": count / elapsed_s,
        "fsync_rounds": rounds,
        "appends_per_round": count / max(rounds, 1),
    }


def wait_ok(futures: Sequence[Future[int]]) -> None:
    wait(futures)
    for future in futures:
        future.result()  # raises what the flusher raised


# --- 3. reads -------------------------------------------------------------------------


def read_all(log: FileLog) -> tuple[int, int]:
    """Read the log from its start batch by batch; returns (bytes, read calls)."""
    offset, end = log.log_start_offset, log.log_end_offset
    data_bytes = calls = 0
    while offset < end:
        records = log.read(offset, READ_MAX_BYTES).records
        calls += 1
        data_bytes += len(records)
        offset = next_offset_after(records)
    return data_bytes, calls


def next_offset_after(records: bytes | memoryview) -> int:
    """The offset after the last of the whole batches in `records`."""
    position = last = 0
    while position < len(records):
        last = position
        _base, size = read_base_offset_and_size(records, position)
        position += size
    header = parse_header(records, last)
    return header.base_offset + header.last_offset_delta + 1


def bench_read(log: FileLog) -> dict[str, float]:
    start = time.perf_counter()
    data_bytes, calls = read_all(log)
    elapsed_s = time.perf_counter() - start
    if data_bytes != log.size_bytes:
        raise RuntimeError(f"read {data_bytes} bytes of a {log.size_bytes}-byte log")
    return {
        "bytes": data_bytes,
        "read_calls": calls,
        "elapsed_s": elapsed_s,
        "read_mb_s": data_bytes / elapsed_s / MB,
        "reads_s": calls / elapsed_s,
    }


# --- 4. recovery ----------------------------------------------------------------------


def timed_open(directory: Path, config: LogConfig, end: int, **recovery: Any) -> float:
    handles = HandleCache()
    start = time.perf_counter()
    log = open_log(directory, config, handles, **recovery)
    elapsed_s = time.perf_counter() - start
    problem = log.offline_reason
    reopened_end = log.log_end_offset
    handles.close()  # no log.close(): nothing to flush, and the next open must re-check
    if problem is not None or reopened_end != end:
        raise RuntimeError(f"reopened log ends at {reopened_end}, expected {end}: {problem}")
    return elapsed_s


def bench_recovery(directory: Path, config: LogConfig, end: int, size: int) -> dict[str, float]:
    unclean_s = timed_open(directory, config, end, recovery_point=0, clean_shutdown=False)
    clean_s = timed_open(directory, config, end, recovery_point=end, clean_shutdown=True)
    return {
        "bytes": size,
        "segments": len(list(directory.glob("*.log"))),
        "unclean_open_s": unclean_s,
        "unclean_s_per_gb": unclean_s / (size / GB),
        "clean_open_s": clean_s,
        "clean_s_per_gb": clean_s / (size / GB),
    }


# --- one run --------------------------------------------------------------------------


def run(work_dir: Path, total_bytes: int, progress: Callable[[str], None]) -> dict[str, Any]:
    config = log_config(total_bytes)
    results: dict[str, Any] = {"baseline": {}, "append": {}, "read": {}, "recovery": {}}
    for name, chunk_bytes in WRITE_CHUNK_BYTES.items():
        progress(f"plain write, {name} chunks")
        results["baseline"][name] = bench_plain_write(work_dir / "plain", chunk_bytes, total_bytes)
    for name, batch_bytes in BATCH_BYTES.items():
        directory = work_dir / f"append-{name}-0"
        log = open_log(directory, config)
        progress(f"append, {name} batches")
        results["append"][name] = bench_append(log, make_batch(batch_bytes), total_bytes)
        progress(f"read, {name} batches")
        results["read"][name] = bench_read(log)
        end, size = log.log_end_offset, log.size_bytes
        log.close()
        if name in RECOVERY_BATCHES:
            progress(f"recovery, {name} batches")
            results["recovery"][name] = bench_recovery(directory, config, end, size)
        shutil.rmtree(directory)
    progress("group commit")
    results["group_commit"] = bench_group_commit(
        work_dir / "group-commit", make_batch(BATCH_BYTES[GROUP_COMMIT_BATCH]), total_bytes
    )
    results["append_16kb_to_write_16kib_ratio"] = (
        results["append"]["16KB"]["write_mb_s"] / results["baseline"]["16KiB"]["write_mb_s"]
    )
    progress("head to head, 16KB")
    results["head_to_head"] = bench_head_to_head(
        work_dir, make_batch(BATCH_BYTES["16KB"]), total_bytes
    )
    return results


# --- reporting ------------------------------------------------------------------------


def machine_info(work_dir: Path) -> dict[str, Any]:
    return {**common.machine_info(), "filesystem": filesystem_type(work_dir)}


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem holding `path`, from /proc/mounts (Linux), else None."""
    best, fs_type = "", None
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if (
                    len(fields) > 2
                    and str(path).startswith(fields[1])
                    and len(fields[1]) > len(best)
                ):
                    best, fs_type = fields[1], fields[2]
    except OSError:
        return None
    return fs_type


def num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def report(results: dict[str, Any], params: dict[str, Any], machine: dict[str, Any]) -> str:
    total_mib = params["total_bytes"] / MIB
    out = [
        f"WeirMQ storage benchmark: {total_mib:,.0f} MiB per measurement, in {params['work_dir']}"
        f" ({machine['filesystem']}), {machine['cpu_count']} CPUs, Python {machine['python']}",
        "MB = 10^6 bytes, GB = 10^9 bytes. Reads and recovery read from the page cache.",
        "",
        "Plain writes (os.write to one file, then one fsync)",
    ]
    out += common.table(
        ["chunk", "MB/s", "MB/s incl. fsync", "fsync s"],
        [
            [name, num(r["write_mb_s"]), num(r["write_sync_mb_s"]), num(r["sync_s"], 3)]
            for name, r in results["baseline"].items()
        ],
    )
    out += ["", "FileLog.append (buffered), then one flush()"]
    out += common.table(
        ["batch", "bytes", "batches/s", "MB/s", "MB/s incl. flush", "flush s"],
        [
            [
                name,
                num(r["batch_bytes"]),
                num(r["batches_s"]),
                num(r["write_mb_s"]),
                num(r["write_sync_mb_s"]),
                num(r["sync_s"], 3),
            ]
            for name, r in results["append"].items()
        ],
    )
    ratio = results["append_16kb_to_write_16kib_ratio"]
    h2h = results["head_to_head"]
    out.append(f"  16 KB append / 16 KiB plain write, one after the other: {ratio:.2f}")
    out.append(
        f"  16 KB append / 16 KB plain write, alternating rounds of {HEAD_TO_HEAD_ROUND}: "
        f"{h2h['append_mb_s']:,.0f} / {h2h['plain_write_mb_s']:,.0f} MB/s = "
        f"{h2h['ratio']:.2f} (target >= {RATIO_TARGET})"
    )
    if params["total_bytes"] < FULL_TOTAL_BYTES:
        out.append("  (small sizes stay in the page cache: this compares CPU costs, not the disk)")
    gc = results["group_commit"]
    out += [
        "",
        f"Group commit: {GROUP_COMMIT_BATCH} appends, LogManager.sync() after each, "
        f"waited every {gc['wait_every']}",
    ]
    out += common.table(
        ["batch", "batches/s", "MB/s", "fsync rounds", "appends/round"],
        [
            [
                GROUP_COMMIT_BATCH,
                num(gc["batches_s"]),
                num(gc["mb_s"]),
                num(gc["fsync_rounds"]),
                num(gc["appends_per_round"], 1),
            ]
        ],
    )
    out += ["", f"FileLog.read (max_bytes {READ_MAX_BYTES // KIB} KiB, page cache, CRC-checked)"]
    out += common.table(
        ["batch", "reads/s", "MB/s"],
        [[n, num(r["reads_s"]), num(r["read_mb_s"])] for n, r in results["read"].items()],
    )
    segment_mib = params["segment_bytes"] / MIB
    out += [
        "",
        f"Recovery on open (segment.bytes {segment_mib:,.0f} MiB; "
        f"target <= {RECOVERY_TARGET_S_PER_GB} s/GB unclean)",
    ]
    out += common.table(
        ["batch", "GB", "segments", "unclean s", "unclean s/GB", "clean s", "clean s/GB"],
        [
            [
                name,
                num(r["bytes"] / GB, 3),
                num(r["segments"]),
                num(r["unclean_open_s"], 3),
                num(r["unclean_s_per_gb"], 2),
                num(r["clean_open_s"], 4),
                num(r["clean_s_per_gb"], 4),
            ]
            for name, r in results["recovery"].items()
        ],
    )
    return "\n".join(out)


# --- command line ---------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.storage", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_TOTAL_BYTES // MIB} MiB per measurement"
    )
    parser.add_argument("--size-mib", type=int, help="MiB per measurement (overrides --quick)")
    parser.add_argument("--json", type=Path, help="results file (default: bench/results/...)")
    parser.add_argument(
        "--dir", type=Path, default=Path.cwd(), help="make the temporary directory here"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.size_mib is not None:
        total_bytes = args.size_mib * MIB
    else:
        total_bytes = QUICK_TOTAL_BYTES if args.quick else FULL_TOTAL_BYTES
    if total_bytes < MIB:
        sys.exit("the size must be at least 1 MiB")
    args.dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="weirmq-bench-", dir=args.dir)).resolve()
    params = {
        "total_bytes": total_bytes,
        "quick": args.quick,
        "work_dir": str(work_dir),
        "segment_bytes": log_config(total_bytes).segment_bytes,
        "batch_bytes": BATCH_BYTES,
        "write_chunk_bytes": WRITE_CHUNK_BYTES,
        "record_value_bytes": RECORD_VALUE_BYTES,
        "read_max_bytes": READ_MAX_BYTES,
        "group_commit_wait_every": GROUP_COMMIT_WAIT_EVERY,
    }
    started = time.strftime("%Y%m%d-%H%M%S")
    try:
        machine = machine_info(work_dir)
        begin = time.perf_counter()
        results = run(work_dir, total_bytes, lambda step: print(f"... {step}", file=sys.stderr))
        params["run_s"] = time.perf_counter() - begin
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(report(results, params, machine))
    document = {"params": params, "machine": machine, "results": results}
    print(f"\nresults: {common.save_results('storage', started, document, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
