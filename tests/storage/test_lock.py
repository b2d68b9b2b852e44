"""The data directory lock: one holder at a time, whoever and wherever the second one is.

The cross-process tests run a child Python that takes the lock with the same class, so they
check what two brokers see: the refusal names the child's pid, and a child killed with
SIGKILL leaves a lock file behind that does not block the next broker.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from weirmq.storage import lock as lock_module
from weirmq.storage.errors import StorageError
from weirmq.storage.lock import LOCK_FILE, DataDirLock, DataDirLockedError

CHILD_TIMEOUT_S = 20.0

# Takes the lock, says so, then holds it until its stdin closes (or it is killed).
HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from weirmq.storage.lock import DataDirLock

    held = DataDirLock.acquire(Path(sys.argv[1]))
    print("locked", flush=True)
    sys.stdin.read()
    held.release()
    """
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def held(data_dir: Path) -> Iterator[DataDirLock]:
    lock = DataDirLock.acquire(data_dir)
    yield lock
    lock.release()


def refusal(data_dir: Path) -> DataDirLockedError:
    with pytest.raises(DataDirLockedError) as refused:
        DataDirLock.acquire(data_dir)
    return refused.value


def test_acquire_creates_the_directory_and_writes_the_pid(
    held: DataDirLock, data_dir: Path
) -> None:
    assert held.held
    assert held.data_dir == data_dir.resolve()
    assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_a_second_acquire_in_the_same_process_is_refused(held: DataDirLock, data_dir: Path) -> None:
    refused = refusal(data_dir)
    assert isinstance(refused, StorageError)
    assert (refused.data_dir, refused.holder_pid) == (data_dir.resolve(), os.getpid())
    assert str(refused) == (
        f"data directory {data_dir.resolve()} is in use by another WeirMQ broker "
        f"(pid {os.getpid()}); stop it or choose another data_dir"
    )
    assert held.held, "the refused attempt must not disturb the holder"
    assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_the_refusal_names_the_absolute_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with DataDirLock.acquire(Path("data")):
        refused = refusal(Path("data"))
    assert refused.data_dir.is_absolute()
    assert f"data directory {tmp_path.resolve() / 'data'} is in use" in str(refused)


def test_release_then_acquire_again(held: DataDirLock, data_dir: Path) -> None:
    held.release()
    assert not held.held
    again = DataDirLock.acquire(data_dir)
    try:
        assert again.held
    finally:
        again.release()


def test_release_is_idempotent(held: DataDirLock, data_dir: Path) -> None:
    held.release()
    held.release()
    with DataDirLock.acquire(data_dir) as again:
        held.release()  # a late second release of the old lock must not free the new one
        refusal(data_dir)
        assert again.held
    assert not again.held


def test_a_lock_file_left_behind_does_not_block(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / LOCK_FILE).write_text("999999999\n")  # a broker that died long ago
    with DataDirLock.acquire(data_dir):
        assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_an_unreadable_pid_is_reported_as_unknown(
    held: DataDirLock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lock_module, "PID_READ_PAUSE_S", 0.0)
    (data_dir / LOCK_FILE).write_bytes(b"12")  # what a refused broker sees mid-write
    refused = refusal(data_dir)
    assert refused.holder_pid is None
    assert "(pid unknown)" in str(refused)


def test_a_program_the_holder_runs_does_not_inherit_the_lock(
    held: DataDirLock, data_dir: Path
) -> None:
    # close_fds=False: only the descriptor's close-on-exec flag keeps it from the child.
    # Popen may return before the kernel has closed those descriptors in the child (a vfork
    # parent resumes when execve drops the old memory, before close-on-exec runs), so wait
    # for the child to speak: by then it runs the new program.
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; print('running', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        close_fds=False,
    ) as child:
        try:
            wait_for_line(child, b"running\n")
            held.release()
            with DataDirLock.acquire(data_dir):
                pass
        finally:
            child.kill()


def test_a_child_process_holds_it_until_it_is_killed(data_dir: Path) -> None:
    with start_holder(data_dir) as child:
        try:
            wait_for_line(child, b"locked\n")
            refused = refusal(data_dir)
            assert refused.holder_pid == child.pid
            assert f"(pid {child.pid})" in str(refused)
            child.send_signal(signal.SIGKILL)
            assert child.wait(CHILD_TIMEOUT_S) == -signal.SIGKILL
        finally:
            child.kill()
    assert (data_dir / LOCK_FILE).read_text() == f"{child.pid}\n", "the file stays behind"
    with DataDirLock.acquire(data_dir):
        assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_a_child_process_is_refused_while_we_hold_it(held: DataDirLock, data_dir: Path) -> None:
    with start_holder(data_dir) as child:
        try:
            _, stderr = child.communicate(b"", timeout=CHILD_TIMEOUT_S)
        finally:
            child.kill()
    assert child.returncode != 0
    last_line = stderr.decode().strip().splitlines()[-1]
    assert last_line.endswith(
        f"data directory {data_dir.resolve()} is in use by another WeirMQ broker "
        f"(pid {os.getpid()}); stop it or choose another data_dir"
    )


def start_holder(data_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_line(child: subprocess.Popen[bytes], expected: bytes) -> None:
    """Read one line of the child's stdout, failing (not hanging) if none comes in time."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], CHILD_TIMEOUT_S)
    assert ready, f"the child said nothing within {CHILD_TIMEOUT_S:.0f} s"
    line = child.stdout.readline()
    if line != expected:
        child.kill()
        _, stderr = child.communicate()
        pytest.fail(f"child said {line!r}, expected {expected!r}; stderr:\n{stderr.decode()}")
