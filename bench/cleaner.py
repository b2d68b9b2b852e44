"""The log cleaner's rate while appends go on: MB/s of log cleaned (not a test).

    python -m bench.cleaner            # 128 MB of log, 10,000 keys
    MB=512 KEYS=100000 IO_BYTES_PER_S=67108864 python -m bench.cleaner

Fills one compacted log with keyed records (200-byte values, 50-record batches) in 64 MiB
segments, then runs one cleaning (`LogCleaner.run_once`, the cleaner thread's work) on the
main thread while another thread appends, and swaps the result in.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from weirmq.records.batch import Record, encode_batch
from weirmq.storage.cleaner import CleanerSettings, CompactionConfig
from weirmq.storage.config import LogConfig
from weirmq.storage.manager import LogManager

KEYS = int(os.environ.get("KEYS", "10000"))
MB = int(os.environ.get("MB", "128"))
IO_BYTES_PER_S = int(os.environ.get("IO_BYTES_PER_S", str(1 << 40)))
VALUE = b"x" * 200
RECORDS_PER_BATCH = 50


def now_ms() -> int:
    return int(time.time() * 1000)


def main() -> None:
    path = Path(tempfile.mkdtemp(prefix="weirmq-cleaner-bench-"))
    manager = LogManager(
        path,
        clock=now_ms,
        config_for=lambda _topic: LogConfig(segment_bytes=64 << 20, retention_ms=None),
        compaction_for=lambda _topic: CompactionConfig(compact=True),
        cleaner_settings=CleanerSettings(io_bytes_per_s=IO_BYTES_PER_S),
    )
    log = manager.create("bench", 0)
    written = 0

    def batch() -> bytes:
        nonlocal written
        keys = range(written, written + RECORDS_PER_BATCH)
        written += RECORDS_PER_BATCH
        return encode_batch(
            [Record(VALUE, b"key-%d" % (k % KEYS), timestamp_ms=now_ms()) for k in keys]
        )

    while log.size_bytes < MB << 20:
        log.append(batch())
    log._roll()
    log.flush()
    before = log.size_bytes
    stop = threading.Event()
    appended = 0

    def appender() -> None:
        nonlocal appended
        while not stop.is_set():
            log.append(batch())
            appended += RECORDS_PER_BATCH
            time.sleep(0.0005)

    thread = threading.Thread(target=appender)
    thread.start()
    started = time.perf_counter()
    manager.cleaner.run_once()
    seconds = time.perf_counter() - started
    stop.set()
    thread.join()
    manager.finish_cleaning()
    cleaner = manager.cleaner
    print(
        f"cleaned {before / 1e6:.0f} MB of log ({KEYS} keys) in {seconds:.2f} s: "
        f"{before / 1e6 / seconds:.1f} MB/s of log; read {cleaner.bytes_read / 1e6:.0f} MB, "
        f"wrote {cleaner.bytes_written / 1e6:.1f} MB; {appended} records appended meanwhile"
    )
    manager.close()
    shutil.rmtree(path)


if __name__ == "__main__":
    main()
