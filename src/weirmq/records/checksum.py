"""CRC-32C (Castagnoli), as Kafka's record batches and the broker's own files use it.

The `crc32c` package, at import, looks its own version up through `importlib.metadata`,
which scans every installed distribution and imports `email` and `zipfile` on the way:
about 15 ms of a broker's ~150 ms start-up and ~2 MB of memory (measured with
``-X importtime`` and VmRSS), paid by a broker that has no batch to check yet. So the
package is imported on the first use of `checksum.crc32c`, through the module's
`__getattr__` (PEP 562); from then on the name is the library's C function itself, found
in this module's globals, and a call costs what calling it directly costs.

Callers write ``from weirmq.records import checksum`` and call
``checksum.crc32c(data[, value])``: a ``from weirmq.records.checksum import crc32c``
would import the package at once.
"""

from __future__ import annotations

from typing import Any, Protocol


class _Crc32c(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...


crc32c: _Crc32c
"""`crc32c.crc32c(data, value=0)`: the CRC-32C of `data`, continuing from `value`."""


def __getattr__(name: str) -> Any:
    if name != "crc32c":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from crc32c import crc32c as native

    globals()["crc32c"] = native
    return native
