"""Building and taking apart record batches in tests."""

from __future__ import annotations

from ..records.batch import Record, encode_batch, parse_header
from ..storage.interface import PartitionLog


def make_batch(n: int = 1, *, ts: int = 1_000, size: int = 10, tag: bytes = b"") -> bytes:
    """A batch of `n` keyed records with one header, timestamps ts, ts+1, ..., and values
    padded to `size` bytes."""
    return encode_batch(
        [
            Record(
                value=(tag + b"v%d-" % i).ljust(size, b"."),
                key=b"k%d" % i,
                headers=(("h", b"x"),),
                timestamp_ms=ts + i,
            )
            for i in range(n)
        ]
    )


def split_batches(data: bytes | memoryview) -> list[bytes]:
    """The whole batches of a read result, each as bytes."""
    data = bytes(data)
    out, pos = [], 0
    while pos < len(data):
        size = parse_header(data, pos).size
        out.append(data[pos : pos + size])
        pos += size
    return out


def read_all(log: PartitionLog, max_bytes: int = 1 << 20) -> list[bytes]:
    """Every batch from the log start to the end, read in sequence as a consumer would."""
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        got = split_batches(log.read(offset, max_bytes).records)
        assert got, f"no progress at offset {offset}"
        out += got
        offset = parse_header(got[-1]).last_offset + 1
    return out
