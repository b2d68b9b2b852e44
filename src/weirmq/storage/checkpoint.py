"""Small per-data-directory files that must never be seen half-written.

Format (Kafka's, so the files read the same to anyone who knows Kafka's)::

    0                 version
    2                 number of entries
    orders 0 5210     topic partition offset
    orders 1 4977

Writes are atomic: a temp file is written and fsynced, renamed over the old file, and the
directory is fsynced so the rename itself survives a crash. A reader that finds a
malformed file treats it as absent: recovery then re-validates more, never less.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..types import TopicPartition

log = logging.getLogger(__name__)

VERSION = 0


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offsets(path: Path, offsets: dict[TopicPartition, int]) -> None:
    lines = [str(VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


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
