"""A bounded, least-recently-used cache of open segment files.

Thousands of partitions must not cost thousands of file descriptors: a segment holds no
descriptor of its own and asks this cache for one at each read or write. An idle
partition therefore holds nothing open, and the whole broker holds at most `max_open`
segment files, whatever the number of partitions.

The cache belongs to the thread that appends and reads (the broker's event loop). The
flusher thread never uses it: it opens its own short-lived descriptor to fsync, because an
fsync through any descriptor of a file makes all of that file's written data durable.
"""

from __future__ import annotations

import os
from collections import OrderedDict


class HandleCache:
    """Open file descriptors by path, at most `max_open` of them."""

    def __init__(self, max_open: int = 256) -> None:
        assert max_open >= 1
        self.max_open = max_open
        self._fds: OrderedDict[str, int] = OrderedDict()
        self.opened = 0  # a counter, for tests and metrics

    def __len__(self) -> int:
        return len(self._fds)

    def get(self, path: str) -> int:
        """A read-write descriptor of `path`, created if missing."""
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        while len(self._fds) >= self.max_open:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._fds[path] = fd
        self.opened += 1
        return fd

    def forget(self, path: str) -> None:
        """Close `path`'s descriptor if open (before deleting or renaming the file)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)
