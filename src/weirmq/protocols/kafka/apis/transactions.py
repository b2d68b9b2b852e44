"""Kafka's transaction APIs (KIP-98): the adapter of the transaction coordinator.

InitProducerId with a transactional id (22), AddPartitionsToTxn (24), AddOffsetsToTxn
(25), EndTxn (26), TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66)
and DescribeProducers (61). Each turns its request into a call of
`broker.txns` (broker/txn_service.py), which decides (weirmq.transactions) and waits for
its log before the answer goes out.

Versions: AddPartitionsToTxn v4+ carries several transactions and `verify_only` (brokers
send it to the coordinator, KIP-890); it is answered here too. EndTxn v5 and TxnOffsetCommit
v5 are KIP-890 part 2 (an epoch bump at every end), for clients that see the
`transaction.version` feature at 2; this broker does not advertise it, so clients use
part 1, where each partition checks its transactional writes with the coordinator.

PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH to request versions older
than the ones that brought it (`_FENCED_FROM`), which is what those clients know.
WriteTxnMarkers (27) is the coordinator's request to partition leaders, served by Kafka
on its inter-broker listener only; on one node the coordinator writes the markers itself
(`Partition.write_marker`), so it is not served, as Kafka's client listeners do not.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Awaitable, Sequence
from typing import Any

from ....broker.core import Broker
from ....broker.group_service import CommitRequest
from ....errors import ErrorCode
from ....transactions.state import PendingOffset, TxnMetadata, TxnState
from ....types import RequestContext, TopicPartition
from ..requests import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    TxnTopic,
)

_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
"""Per API key, the first version that may be answered PRODUCER_FENCED."""
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)
"""Kafka's -1 for "no transaction open": a timestamp the response encoder takes as is
(the millisecond int -1 would read as a null, which the field does not allow)."""
_STATE_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
"""Kafka's names of the states, as DescribeTransactions and ListTransactions give them."""


def _fenced(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
    if code is ErrorCode.producer_fenced and version < _FENCED_FROM[api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


# --- InitProducerId (22) -------------------------------------------------------------------


async def init_transactional_producer(
    broker: Broker, request: InitProducerIdRequest, transactional_id: str, version: int
) -> dict[str, Any]:
    # Integer division, not total_seconds() * 1000: the float product truncates
    # 1001 ms to 1000 (and thousands of other values), which DescribeTransactions shows.
    timeout_ms = request.transaction_timeout // datetime.timedelta(milliseconds=1)
    code, producer_id, epoch = await broker.txns.init_producer_id(
        transactional_id, timeout_ms, int(request.producer_id), int(request.producer_epoch)
    )
    return {
        "error_code": _fenced(code, 22, version),
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


# --- AddPartitionsToTxn (24) ---------------------------------------------------------------


def handle_add_partitions_to_txn(
    broker: Broker, request: AddPartitionsToTxnRequest, version: int, ctx: RequestContext
) -> Awaitable[dict[str, Any]]:
    if version <= 3:
        return _add_partitions_v3(broker, request, version)
    return _add_partitions_v4(broker, request, version)


async def _add_partitions_v3(
    broker: Broker, request: AddPartitionsToTxnRequest, version: int
) -> dict[str, Any]:
    results = await _add_partitions(
        broker,
        request.v3_and_below_transactional_id,
        int(request.v3_and_below_producer_id),
        int(request.v3_and_below_producer_epoch),
        request.v3_and_below_topics,
        verify_only=False,
        version=version,
    )
    return {"results_by_topic_v3_and_below": results}


async def _add_partitions_v4(
    broker: Broker, request: AddPartitionsToTxnRequest, version: int
) -> dict[str, Any]:
    answers = []
    for txn in request.transactions:
        results = await _add_partitions(
            broker,
            txn.transactional_id,
            int(txn.producer_id),
            int(txn.producer_epoch),
            txn.topics,
            verify_only=bool(txn.verify_only),
            version=version,
        )
        answers.append({"transactional_id": txn.transactional_id, "topic_results": results})
    return {"error_code": ErrorCode.none, "results_by_transaction": answers}


async def _add_partitions(
    broker: Broker,
    txn_id: str,
    producer_id: int,
    epoch: int,
    topics: Sequence[TxnTopic],
    *,
    verify_only: bool,
    version: int,
) -> list[dict[str, Any]]:
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    unknown = {tp for tp in wanted if broker.partition(*tp) is None}
    codes: dict[tuple[str, int], ErrorCode] = {}
    if verify_only:
        for tp in wanted:
            code = broker.txns.check_write(producer_id, epoch, TopicPartition(*tp))
            codes[tp] = code
    elif unknown:
        for tp in wanted:
            codes[tp] = (
                ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
            )
    else:
        code = await broker.txns.add_partitions(
            txn_id, producer_id, epoch, [TopicPartition(*tp) for tp in wanted]
        )
        code = _fenced(code, 24, version)
        codes = dict.fromkeys(wanted, code)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": codes[(topic, partition)]}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


# --- AddOffsetsToTxn (25), EndTxn (26) -----------------------------------------------------


async def _add_offsets(
    broker: Broker, request: AddOffsetsToTxnRequest, version: int
) -> dict[str, Any]:
    code = await broker.txns.add_offsets(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        request.group_id,
    )
    return {"error_code": _fenced(code, 25, version)}


def handle_add_offsets_to_txn(
    broker: Broker, request: AddOffsetsToTxnRequest, version: int, ctx: RequestContext
) -> Awaitable[dict[str, Any]]:
    return _add_offsets(broker, request, version)


async def _end_txn(broker: Broker, request: EndTxnRequest, version: int) -> dict[str, Any]:
    code = await broker.txns.end_txn(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
    )
    return {"error_code": _fenced(code, 26, version)}


def handle_end_txn(
    broker: Broker, request: EndTxnRequest, version: int, ctx: RequestContext
) -> Awaitable[dict[str, Any]]:
    return _end_txn(broker, request, version)


# --- TxnOffsetCommit (28) ------------------------------------------------------------------


async def _txn_offset_commit(
    broker: Broker, request: TxnOffsetCommitRequest, version: int
) -> dict[str, Any]:
    offsets: dict[TopicPartition, PendingOffset] = {}
    for topic in request.topics:
        for p in topic.partitions:
            offsets[TopicPartition(topic.name, int(p.partition_index))] = PendingOffset(
                int(p.committed_offset),
                int(p.committed_leader_epoch),
                p.committed_metadata or "",
            )
    member = CommitRequest(
        request.group_id,
        request.member_id,
        int(request.generation_id),
        request.group_instance_id,
        (),
    )
    code = broker.groups.check_txn_commit(member)  # KIP-447: a zombie consumer is fenced
    if code is ErrorCode.none:
        code = await broker.txns.txn_offset_commit(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            request.group_id,
            offsets,
        )
    code = _fenced(code, 28, version)
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
    }


def handle_txn_offset_commit(
    broker: Broker, request: TxnOffsetCommitRequest, version: int, ctx: RequestContext
) -> Awaitable[dict[str, Any]]:
    return _txn_offset_commit(broker, request, version)


# --- DescribeTransactions (65), ListTransactions (66) --------------------------------------


def handle_describe_transactions(
    broker: Broker, request: DescribeTransactionsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    states = []
    for txn_id in request.transactional_ids:
        meta = broker.txns.describe(txn_id)
        if meta is None:
            states.append(
                {
                    "error_code": ErrorCode.transactional_id_not_found,
                    "transactional_id": txn_id,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": _NO_TIME,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        states.append(_described(meta))
    return {"transaction_states": states}


def _described(meta: TxnMetadata) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {
        "error_code": ErrorCode.none,
        "transactional_id": meta.transactional_id,
        "transaction_state": _STATE_NAMES[meta.state],
        "transaction_timeout": meta.timeout_ms,
        "transaction_start_time": _NO_TIME if meta.start_ms < 0 else meta.start_ms,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


def handle_list_transactions(
    broker: Broker, request: ListTransactionsRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    """KIP-1152's pattern (v2) is a Java regular expression that must match the whole id;
    Python's `re.fullmatch` reads the forms clients send the same way (as the consumer
    groups' SubscribedTopicRegex does). One that does not compile is
    INVALID_REGULAR_EXPRESSION, as Kafka answers."""
    pattern = request.transactional_id_pattern
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return {
            "error_code": ErrorCode.invalid_regular_expression,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    known = {name: state for state, name in _STATE_NAMES.items()}
    wanted_states = {known[s] for s in request.state_filters if s in known}
    unknown = [s for s in request.state_filters if s not in known]
    producers = {int(p) for p in request.producer_id_filters}
    duration = int(request.duration_filter)
    now = broker.clock()
    found = []
    for meta in broker.txns.transactions():
        if request.state_filters and meta.state not in wanted_states:
            continue
        if producers and meta.producer_id not in producers:
            continue
        # Kafka lists a transaction only when it has run *longer* than the filter.
        if duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= duration):
            continue
        if matcher is not None and matcher.fullmatch(meta.transactional_id) is None:
            continue
        found.append(
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": _STATE_NAMES[meta.state],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": found,
    }


# --- DescribeProducers (61) ----------------------------------------------------------------


def handle_describe_producers(
    broker: Broker, request: DescribeProducersRequest, version: int, ctx: RequestContext
) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        partitions: list[dict[str, Any]] = []
        for index in topic.partition_indexes:
            found = broker.partition(topic.name, int(index))
            if found is None:
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.unknown_topic_or_partition,
                        "error_message": None,
                        "active_producers": [],
                    }
                )
                continue
            ongoing = found.producers.ongoing
            active = [
                {
                    "producer_id": producer_id,
                    "producer_epoch": entry.epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp_ms,
                    "coordinator_epoch": 0,
                    "current_txn_start_offset": ongoing.get(producer_id, -1),
                }
                for producer_id, entry in found.producers.entries()
            ]
            partitions.append(
                {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "active_producers": active,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
