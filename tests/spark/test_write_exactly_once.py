"""`deliveryGuarantee=exactly-once` writes, checked with a read_committed confluent-kafka
consumer: a batch write lands exactly; a task that fails on its first attempt and is
retried by Spark leaves no duplicate (where the at-least-once default does); a micro-batch
replayed after a restart from its checkpoint writes nothing twice (where at-least-once
does).

Spark retries a failed task only when the master allows it (`local[N, maxFailures]`), and
the session the other tests share is plain `local[2]`, which never retries: the retry test
runs its Spark job in a child process with a `local[2,2]` session of its own (this file,
run as a script; see `main`). The replay test leaves a checkpoint as a driver crash between
the sink's write and Spark's commit log leaves it (the batch's offsets journalled, its
commit missing) by deleting the last entry of the commit log, then restarts the query.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from spark_support import create_topic, produce, watermarks

from weirmq.spark.options import OptionError, parse_write_options

READ_WAIT_S = 60.0
CHILD_TIMEOUT_S = 300.0
RETRY_ROWS = 100
TOO_LARGE_BYTES = 10_000
"""A value the retry topics refuse (max.message.bytes=1024): fails a first attempt."""
HERE = Path(__file__).resolve().parent


def read_values(bootstrap: str, topic: str, partitions: int, *, committed: bool) -> list[bytes]:
    """Every value of a topic, read to the end with read_committed (or read_uncommitted)."""
    highs = {p: watermarks(bootstrap, topic, p)[1] for p in range(partitions)}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "exactly-once-tests-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + READ_WAIT_S
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} took over {READ_WAIT_S} s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                # With read_committed the end is the last stable offset: it reaches the high
                # watermark once no transaction is open (markers are skipped).
                if message.offset() >= highs[message.partition()]:
                    done.add(message.partition())
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def writer(df: Any, bootstrap: str, topic: str, **options: str) -> Any:
    w = (
        df.write.format("weirmq")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for key, value in options.items():
        w = w.option(key, value)
    return w


def test_delivery_guarantee_option_is_checked():
    base = {"kafka.bootstrap.servers": "b:9092", "topic": "t"}
    assert not parse_write_options(base).exactly_once
    eos = parse_write_options({**base, "deliveryguarantee": "Exactly-Once"})
    assert eos.exactly_once and eos.transactional_id_prefix == "weirmq-spark"
    custom = parse_write_options(
        {**base, "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "orders"}
    )
    assert custom.transactional_id_prefix == "orders"
    with pytest.raises(OptionError, match="deliveryGuarantee must be at-least-once or"):
        parse_write_options({**base, "deliveryGuarantee": "exactly_once"})
    with pytest.raises(OptionError, match=r"kafka\.transactional\.id is not supported"):
        parse_write_options({**base, "kafka.transactional.id": "mine"})
    with pytest.raises(OptionError, match=r"needs acks=all and idempotence: kafka\.acks=1"):
        parse_write_options({**base, "deliveryGuarantee": "exactly-once", "kafka.acks": "1"})
    assert not parse_write_options({**base, "kafka.acks": "1"}).exactly_once


def test_exactly_once_batch_write_is_read_back_exactly(spark: Any, bootstrap: str, topic_name: str):
    create_topic(bootstrap, topic_name, 3)
    rows = [(f"k{i % 7}", f"v{i}") for i in range(600)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    writer(df, bootstrap, topic_name, deliveryGuarantee="exactly-once").save()
    values = read_values(bootstrap, topic_name, 3, committed=True)
    assert sorted(values) == sorted(v.encode() for _, v in rows)


def test_a_failed_job_shows_nothing(spark: Any, bootstrap: str, topic_name: str):
    """A job is atomic: the session never retries, so the task given a failing row fails
    the job, and the other task's rows, written and prepared, are aborted with it."""
    from pyspark.sql.functions import udf

    @udf("string", useArrow=False)
    def fail_on_150(value: str) -> str:
        if value == "150":
            raise RuntimeError("injected failure")
        return value

    create_topic(bootstrap, topic_name, 1)
    rows = spark.range(0, 200, 1, 2).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception, match="injected failure"):
        writer(
            rows.select(fail_on_150("value").alias("value")),
            bootstrap,
            topic_name,
            deliveryGuarantee="exactly-once",
        ).save()
    assert read_values(bootstrap, topic_name, 1, committed=True) == []


def test_aborting_a_write_aborts_the_transaction_a_lost_task_left_open(
    bootstrap: str, topic_name: str
):
    """A task whose executor was lost mid-write leaves its transaction open, which holds
    read_committed readers at its first record; the driver's abort of the failed write
    fences it, so what was written after it becomes readable and its own rows never do."""
    from confluent_kafka import KafkaException, Producer

    from weirmq.spark.source import BatchWriter
    from weirmq.spark.write import TaskIdentity

    create_topic(bootstrap, topic_name, 1)
    opts = parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "deliveryGuarantee": "exactly-once"}
    )
    write = BatchWriter(opts)
    lost_task = TaskIdentity(opts.transactional_id_prefix, write.write_id, 0, 0)
    lost = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": lost_task.transactional_id}
    )
    lost.init_transactions(30)
    lost.begin_transaction()
    lost.produce(topic_name, b"lost task")
    assert lost.flush(30) == 0
    produce(bootstrap, [{"topic": topic_name, "value": b"after"}])

    write.abort([None])  # the driver: task 0 failed
    assert read_values(bootstrap, topic_name, 1, committed=True) == [b"after"]
    with pytest.raises(KafkaException, match="fenced"):
        lost.commit_transaction(30)


def _prepare(bootstrap: str, topic: str, task: Any, values: list[str]) -> Any:
    """Phase one of one task, as an executor runs it, outside Spark: its rows go to the
    topic's partition of the task's number."""
    import pyarrow as pa

    from weirmq.spark.write import write_transactionally

    rows = pa.RecordBatch.from_pydict(
        {"value": [v.encode() for v in values], "partition": [task.partition] * len(values)}
    )
    client = {"bootstrap.servers": bootstrap}
    return write_transactionally(iter([rows]), client, topic, task)


def _ends(bootstrap: str, topic: str, partitions: int, *, committed: bool) -> list[int]:
    """Each partition's end for a read_committed reader (the last stable offset) or a
    read_uncommitted one (the high watermark)."""
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eos-ends", "isolation.level": isolation}
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _open_tasks(bootstrap: str, topic_name: str, write_id: str, batch_id: int) -> list[Any]:
    from weirmq.spark.write import TaskIdentity, ensure_commits_topic

    ensure_commits_topic({"bootstrap.servers": bootstrap})
    prepared = []
    for partition in range(2):
        task = TaskIdentity("eos-test", write_id, batch_id, partition)
        records, txn = _prepare(
            bootstrap, topic_name, task, [f"{partition}-{i}" for i in range(50)]
        )
        assert records == 50 and txn is not None and txn.partition == partition
        prepared.append(txn)
    return prepared


def test_a_driver_dying_in_its_commit_is_rolled_forward_by_the_replay(
    bootstrap: str, topic_name: str, monkeypatch: pytest.MonkeyPatch
):
    """The decision is logged, the first transaction committed, then the driver dies:
    the batch is decided, so the replay's tasks write nothing and its driver commits the
    second transaction; every row is there once."""
    from weirmq.spark import twophase
    from weirmq.spark.write import TaskIdentity, decision_group

    create_topic(bootstrap, topic_name, 2)
    client = {"bootstrap.servers": bootstrap}
    group = decision_group("eos-test", "query-1")
    prepared = _open_tasks(bootstrap, topic_name, "query-1", 7)
    # Both transactions are open, and stay open once their producers are gone: the rows
    # are in the log, read_committed readers are held at the first.
    assert _ends(bootstrap, topic_name, 2, committed=False) == [50, 50]
    assert _ends(bootstrap, topic_name, 2, committed=True) == [0, 0]

    real_end = twophase.Coordinator.end
    ended: list[str] = []

    def end_then_die(self: Any, txn: Any, *, commit: bool) -> int:
        if ended:
            raise SystemExit("the driver dies")
        ended.append(txn.transactional_id)
        return real_end(self, txn, commit=commit)

    monkeypatch.setattr(twophase.Coordinator, "end", end_then_die)
    with pytest.raises(SystemExit):
        twophase.commit(client, group, 7, prepared)
    monkeypatch.setattr(twophase.Coordinator, "end", real_end)
    assert ended == [prepared[0].transactional_id]
    assert twophase.decided_batches(client, group)[0] == 8

    # The replay: its tasks see the decision and write nothing; its driver rolls forward.
    for partition in range(2):
        task = TaskIdentity("eos-test", "query-1", 7, partition)
        assert _prepare(bootstrap, topic_name, task, ["again"]) is None
    twophase.commit(client, group, 7, [])
    expected = sorted(f"{p}-{i}".encode() for p in range(2) for i in range(50))
    assert sorted(read_values(bootstrap, topic_name, 2, committed=True)) == expected
    # Committing again (Spark's own retry of the commit) changes nothing.
    twophase.commit(client, group, 7, [])
    assert sorted(read_values(bootstrap, topic_name, 2, committed=True)) == expected


def test_a_batch_whose_task_was_fenced_before_the_commit_is_aborted_whole(
    bootstrap: str, topic_name: str
):
    """A transaction fenced after its task reported it (another attempt started) fails the
    commit before anything is decided, and the other task's transaction is aborted."""
    from confluent_kafka import Producer

    from weirmq.spark import twophase
    from weirmq.spark.write import decision_group

    create_topic(bootstrap, topic_name, 2)
    client = {"bootstrap.servers": bootstrap}
    group = decision_group("eos-test", "query-2")
    prepared = _open_tasks(bootstrap, topic_name, "query-2", 0)
    zombie = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": prepared[1].transactional_id}
    )
    zombie.init_transactions(30)  # aborts partition 1's transaction, bumps its epoch
    with pytest.raises(twophase.TwoPhaseError, match=r"partition 1: .*fenced by another attempt"):
        twophase.commit(client, group, 0, prepared)
    assert twophase.decided_batches(client, group)[0] == 0
    assert read_values(bootstrap, topic_name, 2, committed=True) == []
    assert len(read_values(bootstrap, topic_name, 2, committed=False)) == 100


@pytest.mark.slow
def test_a_task_retried_after_failing_leaves_no_duplicates(
    bootstrap: str, topic_name: str, tmp_path: Path
):
    """The first attempt of every task fails: by a record the broker refuses (after the
    others were acknowledged), or by a UDF that raises on its last row. Spark retries."""
    topics = {
        "refused-at-least-once": f"{topic_name}.alo",
        "refused-exactly-once": f"{topic_name}.eos",
        "raised-exactly-once": f"{topic_name}.raised",
    }
    for name, topic in topics.items():
        config = {"max.message.bytes": "1024"} if name.startswith("refused") else {}
        create_topic(bootstrap, topic, 1, config)
    log = tmp_path / "child.log"
    with log.open("wb") as out:
        child = subprocess.run(
            [sys.executable, str(HERE / "test_write_exactly_once.py"), bootstrap, *topics.values()],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    assert child.returncode == 0, log.read_text(errors="replace")[-6000:]
    expected = sorted(str(i).encode() for i in range(RETRY_ROWS))

    at_least_once = read_values(bootstrap, topics["refused-at-least-once"], 1, committed=True)
    # The failed attempt's 99 acknowledged records stay: duplicates, as documented.
    assert sorted(set(at_least_once)) == expected
    assert len(at_least_once) == 2 * RETRY_ROWS - 1

    for name in ("refused-exactly-once", "raised-exactly-once"):
        assert sorted(read_values(bootstrap, topics[name], 1, committed=True)) == expected, name
    # The failed attempt did write (its records are in the log, aborted): what read_committed
    # hides is there for a read_uncommitted reader.
    uncommitted = read_values(bootstrap, topics["refused-exactly-once"], 1, committed=False)
    assert len(uncommitted) == 2 * RETRY_ROWS - 1


def _stream(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, **opts: str):
    writer = (
        spark.readStream.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for key, value in opts.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination()
    return [p["batchId"] for p in query.recentProgress if p["numInputRows"]]


@pytest.mark.slow
def test_a_micro_batch_replayed_after_a_restart_writes_nothing_twice(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    source = f"{topic_name}.in"
    create_topic(bootstrap, source, 2)
    produce(
        bootstrap,
        [{"topic": source, "partition": i % 2, "value": str(i).encode()} for i in range(300)],
    )
    expected = sorted(str(i).encode() for i in range(300))
    for guarantee in ("at-least-once", "exactly-once"):
        sink = f"{topic_name}.{guarantee}"
        create_topic(bootstrap, sink, 2)
        checkpoint = tmp_path / guarantee
        opts = {"deliveryGuarantee": guarantee}
        assert _stream(spark, bootstrap, source, sink, checkpoint, **opts) == [0, 1, 2]
        # What a driver killed after batch 2's tasks wrote, before Spark logged its commit,
        # leaves behind: batch 2's offsets in the checkpoint, its commit missing.
        for entry in (checkpoint / "commits" / "2", checkpoint / "commits" / ".2.crc"):
            entry.unlink(missing_ok=True)
        assert _stream(spark, bootstrap, source, sink, checkpoint, **opts) == [2]
        values = read_values(bootstrap, sink, 2, committed=True)
        if guarantee == "at-least-once":
            assert sorted(set(values)) == expected and len(values) == 400  # batch 2 twice
        else:
            assert sorted(values) == expected


def main(bootstrap: str, refused_alo: str, refused_eos: str, raised_eos: str) -> None:
    """The retry test's Spark job, in a process whose session retries failed tasks."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    from weirmq.spark.local import local_session

    spark = local_session(
        "weirmq-exactly-once-retries",
        master="local[2,2]",  # up to 2 attempts per task
        fast_start=True,
        config={"spark.sql.execution.arrow.maxRecordsPerBatch": "10"},
    )
    last = str(RETRY_ROWS - 1)

    @udf("string", useArrow=False)
    def too_large_at_first(value: str) -> str:
        context = TaskContext.get()
        first = context is not None and context.attemptNumber() == 0
        return "x" * TOO_LARGE_BYTES if first and value == last else value

    @udf("string", useArrow=False)
    def raise_at_first(value: str) -> str:
        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and value == last:
            raise RuntimeError("injected failure of a first attempt")
        return value

    rows = spark.range(RETRY_ROWS).selectExpr("CAST(id AS STRING) AS value").coalesce(1)
    # One record per produce request, so that the broker refuses the large one alone.
    single = {"kafka.batch.num.messages": "1"}
    refused = rows.select(too_large_at_first("value").alias("value"))
    writer(refused, bootstrap, refused_alo, **single).save()
    writer(refused, bootstrap, refused_eos, deliveryGuarantee="exactly-once", **single).save()
    raised = rows.select(raise_at_first("value").alias("value"))
    writer(raised, bootstrap, raised_eos, deliveryGuarantee="exactly-once").save()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
