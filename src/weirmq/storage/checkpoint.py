"""Small per-data-directory files that must never be seen half-written.

Format (Kafka's, so the files read the same to anyone who knows Kafka's)::

    0                 version
    2                 number of entries
    orders 0 5210     topic partition offset
    orders 1 4977

Writes are atomic: a temp file is written and fsynced, renamed over the old file, and the
directory is fsynced so the rename itself survives a crash. A reader that finds a
malformed file treats it as absent: recovery then re-validates more, never less.
`write_files_atomically` replaces several files of one directory so: every temp file
written, all fsynced in one pass, all renamed, then one directory fsync (a clean stop
writes both checkpoints and the producer-state snapshot that way). Each file is replaced
atomically on its own; a crash in between can leave some old and some new, so none may
depend on another being new. A write that fails (a full disk) removes its temp files, so
none is left behind to fill the directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..types import TopicPartition
from .fsync import fsync_all

log = logging.getLogger(__name__)

VERSION = 0


def write_atomically(
    path: Path, data: bytes, *, before_rename: Callable[[], None] | None = None
) -> None:
    write_files_atomically(path.parent, {path.name: data}, before_rename=before_rename)


def write_files_atomically(
    directory: Path, files: Mapping[str, bytes], *, before_rename: Callable[[], None] | None = None
) -> None:
    """Replace each `name` in `directory` with its bytes, atomically per file (see the
    module docstring); raises the first OSError, leaving the files not yet renamed as
    they were.

    `before_rename` runs once the new bytes are durable in their temp files (so the disk
    had room for them), just before the renames; if it raises, nothing is replaced."""
    tmps = {name: directory / (name + ".tmp") for name in files}
    try:
        for name, data in files.items():
            _write_file(tmps[name], data)
        errors = fsync_all([str(tmp) for tmp in tmps.values()], _fsync_file)
        if errors:
            raise next(iter(errors.values()))
        if before_rename is not None:
            before_rename()
    except BaseException:
        _remove_quietly(tmps.values())  # a full disk must not leave half-written files
        raise
    for name, tmp in tmps.items():
        os.replace(tmp, directory / name)
    fsync_directory(directory)


def _remove_quietly(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    write_atomically(path, encode_offsets(offsets))


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> bytes:
    """A checkpoint file's bytes (format in the module docstring)."""
    lines = [str(VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    return ("\n".join(lines) + "\n").encode()


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file; {} when it is missing or malformed."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad version or count")
        out = {}
        for line in lines[2:]:
            topic, partition, offset = line.split(" ")
            out[TopicPartition(topic, int(partition))] = int(offset)
        return out
    except (ValueError, IndexError) as exc:
        log.warning("ignoring malformed checkpoint %s (%s): recovering from the start", path, exc)
        return {}
