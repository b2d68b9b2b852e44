"""The data directory's file of per-partition state blobs: round trip, and all or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.storage.state_file import StateFileError, decode_states, encode_states, read_states
from weirmq.types import TopicPartition

topics = st.text(st.sampled_from("abcxyz._-é"), min_size=1, max_size=20)
states = st.dictionaries(
    st.builds(TopicPartition, topics, st.integers(0, 100_000)),
    st.binary(max_size=64),
    max_size=20,
)


@given(states)
def test_round_trip(blobs: dict[TopicPartition, bytes]) -> None:
    assert decode_states(encode_states(blobs)) == blobs


@given(states.filter(bool), st.data())
def test_any_damage_is_refused_whole(
    blobs: dict[TopicPartition, bytes], data: st.DataObject
) -> None:
    encoded = encode_states(blobs)
    position = data.draw(st.integers(0, len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(StateFileError):
        decode_states(bytes(flipped))
    with pytest.raises(StateFileError):
        decode_states(encoded[:position])


def test_an_empty_directory_state_is_a_valid_file() -> None:
    assert decode_states(encode_states({})) == {}


def test_a_missing_or_damaged_file_reads_as_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "state"
    assert read_states(path) == {}
    path.write_bytes(encode_states({TopicPartition("t", 0): b"x"})[:-1])
    assert read_states(path) == {}
    path.write_bytes(encode_states({TopicPartition("t", 0): b"x"}))
    assert read_states(path) == {("t", 0): b"x"}
