"""Shared journal against per-partition fsync, for acks=all over many partitions.

Run: ``.venv/bin/python -m bench.journal [--partitions N] [--rounds R] [--dir DIR]``. It
prints milliseconds of wall time and of this process's CPU per round. It is not a test.

One round is what a group commit does for acks=all when every one of N partitions got a
1 KB append since the last round, and all of it must be durable before any is answered:

- ``per-partition`` (today's design): a write into each partition's file, then an fsync
  of every file, spread over 4 threads (``weirmq.storage.fsync.fsync_all``, as the clean
  stop does);
- ``journal`` (StoneMQ's idea, not built): the N appends in one write to one shared file
  and one ``fdatasync``; the partition files get their writes too (page cache only) and
  are fsynced every ``CHECKPOINT_ROUNDS`` rounds, the background work a journal defers,
  counted here.

The two designs alternate, twice each. The files go under ``--dir`` (default: the current
directory, so the disk measured is the one the data would live on) and are removed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable

from weirmq.storage.fsync import fsync_all

RECORD_BYTES = 1024
CHECKPOINT_ROUNDS = 50
FSYNC_THREADS = 4


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    data = os.urandom(RECORD_BYTES)
    root = tempfile.mkdtemp(dir=args.dir, prefix="weirmq-journal-")
    try:
        files = [
            os.open(os.path.join(root, f"p{i}"), os.O_RDWR | os.O_CREAT, 0o644)
            for i in range(args.partitions)
        ]
        journal = os.open(os.path.join(root, "journal"), os.O_RDWR | os.O_CREAT, 0o644)

        def per_partition(round_: int) -> None:
            for fd in files:
                os.pwrite(fd, data, round_ * RECORD_BYTES)
            fsync_all(files, os.fsync, threads=FSYNC_THREADS)

        def shared_journal(round_: int) -> None:
            os.pwrite(journal, data * len(files), round_ * RECORD_BYTES * len(files))
            os.fdatasync(journal)
            for fd in files:
                os.pwrite(fd, data, round_ * RECORD_BYTES)
            if round_ % CHECKPOINT_ROUNDS == CHECKPOINT_ROUNDS - 1:
                fsync_all(files, os.fsync, threads=FSYNC_THREADS)

        designs: list[tuple[str, Callable[[int], None]]] = [
            ("per-partition", per_partition),
            ("journal", shared_journal),
        ]
        for name, design in designs * 2:
            started, cpu = time.perf_counter(), _cpu_s()
            for round_ in range(args.rounds):
                design(round_)
            wall_ms = 1e3 * (time.perf_counter() - started) / args.rounds
            cpu_ms = 1e3 * (_cpu_s() - cpu) / args.rounds
            print(
                f"{args.partitions} partitions, {name:13s} "
                f"{wall_ms:8.2f} ms/round {cpu_ms:8.2f} ms CPU/round"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
