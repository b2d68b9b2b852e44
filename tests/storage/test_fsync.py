"""Many fsyncs in one pass: every path is attempted, failures come back by path."""

from __future__ import annotations

import threading

import pytest

from weirmq.storage.fsync import fsync_all


@pytest.mark.parametrize("threads", [1, 4])
def test_every_path_is_attempted_and_failures_are_named(threads: int) -> None:
    done: list[str] = []
    lock = threading.Lock()

    def fsync(path: str) -> None:
        with lock:
            done.append(path)
        if path.startswith("bad"):
            raise OSError(5, "Input/output error")

    paths = [f"{'bad' if i % 3 == 0 else 'ok'}-{i}" for i in range(10)]
    errors = fsync_all(paths, fsync, threads=threads)
    assert sorted(done) == sorted(paths)
    assert sorted(errors) == [p for p in sorted(paths) if p.startswith("bad")]
    assert all(exc.errno == 5 for exc in errors.values())


def test_nothing_to_do() -> None:
    assert fsync_all([], lambda _path: None) == {}
