"""Flood: producers far faster than one slow consumer, on a topic with a backlog bound.

Three confluent-kafka producers (acks=all, idempotent) write 1 KiB records as fast as
librdkafka lets them to a topic with `weirmq.backlog.max.bytes` measured against the
group `slow`, whose one consumer reads a few hundred records a second and commits as it
goes. What must hold, and is checked:

- the producers see the broker's throttle (their `throttle_cb`), and nothing fails: a
  produce held at the bound waits or is refused with a retriable error they retry;
- the backlog stays near its bound: the broker's own gauge (from the admin API) and,
  independently, the group's lag in records times the record size, sampled every 100 ms;
- the broker's RSS stays within its request-memory budget of where it started;
- every acknowledged record reaches the slow group once the producers stop.

The figures (peak backlog against the bound, peak RSS against the budget, throughput)
are printed for the issue's closing note: run with `-s` to see them.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer, ThrottleEvent
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    create_topic,
    payload,
    produce_with_backpressure,
    seq_of,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC, GROUP = "flood", "slow"
PARTITIONS = 2
BOUND = 4 * 1024 * 1024
RECORD_BYTES = 1024
PRODUCERS = 3
PRODUCE_S = 20.0
SLOW_RECORDS_PER_S = 300
BUDGET = 32 * 1024 * 1024
BATCH_BYTES = 64 * 1024
SLACK = PRODUCERS * PARTITIONS * (BATCH_BYTES + 4096) + PARTITIONS * 4096
"""What the backlog may exceed its bound by: a batch per producer and partition admitted
just below the bound (each is charged as it is admitted, so only requests already past
admission add to it), plus the index grain per partition."""


def test_a_flood_is_held_to_the_backlog_bound_and_nothing_is_lost(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0", queued_max_request_bytes=BUDGET)
    assert broker.admin_url is not None
    create_topic(
        broker.bootstrap,
        TOPIC,
        PARTITIONS,
        {"weirmq.backlog.max.bytes": str(BOUND), "weirmq.backlog.group": GROUP},
    )
    start_rss = broker.rss_bytes()
    errors = ErrorLog()
    stop_producing = threading.Event()
    stop_sampling = threading.Event()
    draining = threading.Event()
    deliveries = [DeliveryLog() for _ in range(PRODUCERS)]
    throttles: list[int] = []
    consumed: set[int] = set()
    peaks: dict[str, float] = {"gauge": 0, "lag_bytes": 0, "rss": start_rss, "memory": 0}
    states: set[str] = set()

    def produce(number: int) -> None:
        def on_throttle(event: ThrottleEvent) -> None:
            throttles.append(int(event.throttle_time * 1000))

        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "client.id": f"flood-{number}",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.size": BATCH_BYTES,
                "message.timeout.ms": 180_000,
                # a small local queue: the broker's back-pressure reaches the application
                # (BufferError) instead of piling up in librdkafka
                "queue.buffering.max.messages": 2_000,
                "error_cb": errors.error_cb,
                "throttle_cb": on_throttle,
            }
        )
        log = deliveries[number]
        seq = number * 10_000_000

        def send(seq: int) -> None:
            producer.produce(
                TOPIC,
                payload(seq, RECORD_BYTES),
                key=b"%d" % seq,
                headers=[("seq", b"%d" % seq)],
                on_delivery=log.callback(seq),
            )

        while not stop_producing.is_set():
            seq += 1
            produce_with_backpressure(functools.partial(send, seq), producer.poll)
            producer.poll(0)
        left = producer.flush(120)
        if left:
            errors.add(f"producer {number}: {left} records not delivered")

    def consume() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "error_cb": errors.error_cb,
            }
        )
        consumer.subscribe([TOPIC])
        last_commit = time.monotonic()
        uncommitted = False
        try:
            while not (draining.is_set() and stop_sampling.is_set()):
                batch = consumer.consume(50 if draining.is_set() else 10, timeout=0.2)
                for message in batch:
                    if message.error() is not None:
                        errors.add(f"consumer: {message.error()}")
                        continue
                    consumed.add(seq_of(message.headers()))
                    uncommitted = True
                if uncommitted and time.monotonic() - last_commit >= 0.1:
                    consumer.commit(asynchronous=False)
                    last_commit, uncommitted = time.monotonic(), False
                if not draining.is_set():
                    time.sleep(len(batch) / SLOW_RECORDS_PER_S)
            if uncommitted:
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()

    def sample() -> None:
        while not stop_sampling.is_set():
            document = _get(broker.admin_url, "/api/v1/broker")
            for resource in document["flow"]["resources"]:
                if resource["name"] == f"backlog:{TOPIC}":
                    peaks["gauge"] = max(peaks["gauge"], resource["level"])
                    states.add(resource["state"])
                elif resource["name"] == "memory":
                    peaks["memory"] = max(peaks["memory"], resource["level"])
            lag = _get(broker.admin_url, f"/api/v1/groups/{GROUP}").get("lag") or 0
            peaks["lag_bytes"] = max(peaks["lag_bytes"], lag * RECORD_BYTES)
            peaks["rss"] = max(peaks["rss"], broker.rss_bytes())
            time.sleep(0.1)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(PRODUCERS)]
    consumer_thread = threading.Thread(target=consume)
    sampler = threading.Thread(target=sample)
    began = time.monotonic()
    for thread in [consumer_thread, sampler, *threads]:
        thread.start()
    time.sleep(PRODUCE_S)
    stop_producing.set()
    draining.set()  # the consumer catches up, so the producers' last records go through
    for thread in threads:
        thread.join(150)
        assert not thread.is_alive(), "a producer did not finish"
    produced_s = time.monotonic() - began
    acknowledged = {seq for log in deliveries for seq in log.where}
    deadline = Deadline(120, "the slow group draining the flood")
    while not acknowledged <= consumed:
        deadline.check(f"{len(acknowledged - consumed)} acknowledged records not consumed")
        time.sleep(0.2)
    stop_sampling.set()
    sampler.join(30)
    consumer_thread.join(60)

    print(
        f"\nflood: {len(acknowledged)} records of {RECORD_BYTES} B acknowledged in "
        f"{produced_s:.1f} s by {PRODUCERS} producers ({len(throttles)} throttled responses, "
        f"up to {max(throttles, default=0)} ms); backlog bound {BOUND} B: peak gauge "
        f"{peaks['gauge']:.0f} B, peak lag {peaks['lag_bytes']:.0f} B of values; request "
        f"memory budget {BUDGET} B: peak in use {peaks['memory']:.0f} B; RSS "
        f"{start_rss / 2**20:.1f} MiB at start, peak {peaks['rss'] / 2**20:.1f} MiB"
    )
    failed = [error for log in deliveries for error in log.errors]
    assert not failed, failed[:5]
    assert not errors.snapshot(), errors.snapshot()[:5]
    assert throttles, "no producer saw a throttle"
    assert states & {"throttled", "blocked"}, f"the backlog never pressed: {states}"
    assert peaks["gauge"] <= BOUND + SLACK
    assert peaks["lag_bytes"] <= BOUND + SLACK
    assert peaks["rss"] <= start_rss + BUDGET
    assert acknowledged <= consumed


def _get(base: str | None, path: str) -> dict[str, Any]:
    assert base is not None
    with urllib.request.urlopen(base + path, timeout=10) as response:
        document: dict[str, Any] = json.load(response)
    return document
