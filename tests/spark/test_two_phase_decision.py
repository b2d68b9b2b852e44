"""The exactly-once sink's decision record (weirmq.spark.twophase): what the driver logs
before it commits a batch's transactions, and reads back to roll a replay forward."""

from __future__ import annotations

import pytest

from weirmq.spark.twophase import PreparedTxn, TwoPhaseError, decode_decision, encode_decision


def test_a_decision_lists_its_batch_and_transactions():
    txns = [PreparedTxn(0, "p-q-0", 17, 3), PreparedTxn(5, "p-q-5", 18, 0)]
    value = encode_decision(42, txns)
    assert decode_decision(value, 42) == txns
    assert decode_decision(encode_decision(0, []), 0) == []


def test_a_decision_of_another_batch_or_unreadable_is_refused():
    value = encode_decision(41, [PreparedTxn(0, "p-q-0", 17, 3)])
    with pytest.raises(TwoPhaseError, match="names batch 41, not 42"):
        decode_decision(value, 42)
    for garbage in (b"", b"{}", b"not json", b'{"batch": 1, "transactions": [[0, "t"]]}'):
        with pytest.raises(TwoPhaseError, match="decision record of batch 1 is unreadable"):
            decode_decision(garbage, 1)
