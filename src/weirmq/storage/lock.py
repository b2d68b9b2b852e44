"""One broker per data directory: an advisory lock on ``<data_dir>/.lock``.

Two brokers writing the same partition logs lose acknowledged records: each appends at the
log end it believes in, and the later write overwrites the earlier. So, as Kafka does, a
broker takes an exclusive lock on a file in the data directory before it reads anything
there, holds it for its whole life, and a second broker that finds it taken refuses to
start, naming the directory and the pid of the broker holding it.

Theory of operation:

- The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``.lock``, opened (created if missing) and
  kept open until `DataDirLock.release`. The kernel owns the lock, not the file: when the
  holder exits for any reason, SIGKILL and power cuts included, its descriptors close and
  the lock goes with them. A ``.lock`` file left behind by a dead broker is therefore never
  stale; the next broker locks it and starts. Nothing is ever "cleaned up" by hand.
- flock belongs to the open file description, not to the process: a second `acquire` in
  the same process opens the file again, gets a new description and is refused like any
  other broker. (POSIX ``fcntl`` record locks would not do: they are per process, so a
  second broker in the same process would be let in, and closing *any* descriptor of the
  file would silently drop the lock.)
- The holder writes its pid into the file after locking it, only so that the broker that
  is refused can say who holds the directory. The pid is informational, never trusted for
  the decision: the lock alone decides. Between taking the lock and writing the pid there
  is a window of microseconds in which a refused broker reads nothing (it retries a few
  times, then reports the pid as unknown) or the previous holder's pid.
- The descriptor is opened close-on-exec, so a program the broker runs does not inherit
  the lock. A child made by a bare ``fork()`` shares the description, and with it the lock,
  until it exits: the safe side, since such a child could write the logs too.
- The file is not deleted on release: deleting it would let one broker lock the old inode
  while another creates and locks a new file under the same name.

flock is advisory: it stops other WeirMQ brokers, not other programs. On network file
systems its behaviour depends on the server (NFS may emulate it with byte-range locks);
keep data directories on local disks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from .errors import StorageError

LOCK_FILE = ".lock"
# A pid is at most 7 digits on Linux (pid_max <= 2**22); anything longer is not ours.
PID_BYTES_MAX = 32
# A refused broker re-reads an empty or half-written pid this many times before giving up:
# it has caught the holder between locking and writing (see the module docstring).
PID_READ_ATTEMPTS = 5
PID_READ_PAUSE_S = 0.01


class DataDirLockedError(StorageError):
    """Another broker (or another `DataDirLock` in this process) holds the data directory."""

    def __init__(self, data_dir: Path, holder_pid: int | None) -> None:
        self.data_dir = data_dir
        self.holder_pid = holder_pid
        holder = "pid unknown" if holder_pid is None else f"pid {holder_pid}"
        super().__init__(
            f"data directory {data_dir} is in use by another WeirMQ broker ({holder}); "
            "stop it or choose another data_dir"
        )


class DataDirLock:
    """The exclusive lock on one data directory, held until `release` (or process exit)."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        """Use `acquire`; this only wraps a descriptor that already holds the lock."""
        self.data_dir = data_dir
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Lock `data_dir` (created if missing) for this broker, or raise DataDirLockedError.

        Other OSErrors (unwritable directory, a file system without flock) propagate."""
        data_dir = Path(data_dir).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder_pid(fd)
            os.close(fd)
            raise DataDirLockedError(data_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            _write_pid(fd, os.getpid())
        except BaseException:
            os.close(fd)  # also drops the lock: a broker that cannot write must not start
            raise
        return cls(data_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock; a second call does nothing. The file stays (module docstring)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # the last descriptor of the description: the kernel unlocks

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"DataDirLock({str(self.data_dir)!r}, {state})"


def _write_pid(fd: int, pid: int) -> None:
    """Replace the file's content with `pid`; not fsynced, as it only informs (see above)."""
    os.ftruncate(fd, 0)
    data = b"%d\n" % pid
    written = os.pwrite(fd, data, 0)
    assert written == len(data), f"short write of {len(data)} bytes to the lock file"


def _read_holder_pid(fd: int) -> int | None:
    """The pid the holder wrote, or None if none appears after a few short waits."""
    for attempt in range(PID_READ_ATTEMPTS):
        if attempt:
            time.sleep(PID_READ_PAUSE_S)
        with contextlib.suppress(OSError):
            pid = _parse_pid(os.pread(fd, PID_BYTES_MAX, 0))
            if pid is not None:
                return pid
    return None


def _parse_pid(data: bytes) -> int | None:
    text = data.strip()
    if not text.isdigit() or not data.endswith(b"\n"):  # empty, or caught mid-write
        return None
    pid = int(text)
    return pid if pid > 0 else None
