"""`records.checksum`: the crc32c library, imported on first use and then called directly."""

from __future__ import annotations

import subprocess
import sys

import crc32c as library
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.records import checksum


@given(data=st.binary(max_size=300), value=st.integers(0, 2**32 - 1))
def test_it_is_the_librarys_crc32c(data: bytes, value: int) -> None:
    assert checksum.crc32c(data) == library.crc32c(data)
    assert checksum.crc32c(memoryview(data), value) == library.crc32c(data, value)


def test_the_known_check_value() -> None:
    assert checksum.crc32c(b"123456789") == 0xE3069283  # CRC-32C's published check value


def test_the_library_is_imported_on_first_use_and_then_bound_directly() -> None:
    code = (
        "import sys; from weirmq.records import checksum, batch; "
        "before = 'crc32c' in sys.modules; checksum.crc32c(b'x'); "
        "import crc32c; "
        "print(before, 'crc32c' in sys.modules, checksum.crc32c is crc32c.crc32c)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_other_names_are_still_missing() -> None:
    with pytest.raises(AttributeError, match="no attribute 'crc32'"):
        checksum.crc32  # noqa: B018
