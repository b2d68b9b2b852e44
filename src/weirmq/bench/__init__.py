"""``weirmq bench``: where a Kafka-compatible broker stands, in numbers, on this machine.

One command runs every workload against one broker and reports a table, a JSON document
and (optionally) a PNG plot:

- ``startup``: process start to accepting connections; ``idle``: CPU and RSS of a broker
  doing nothing;
- ``produce``: 100 B, 1 KB and 16 KB messages, acks=1 and acks=all, one and two producer
  processes, and 60 KB batches (``batch.size=60000``) next to librdkafka's 1 MB ones;
- ``consume``: a catch-up read of what was produced;
- ``requests``: broker CPU per request beyond the per-byte cost, for Produce and Fetch;
- ``latency``: end to end, send to receipt, at fixed rates, and the broker's own share;
- ``partitions``: one produce load over 1 to 10,000 partitions;
- ``stop``: a clean stop (SIGTERM to exit) with 10,000 partitions of producer state;
- ``rebalance``: consumer-group rebalance time;
- ``delay``: delayed delivery's lateness from the due time;
- ``share``: a share group reading with per-record acknowledgement, against a classic group;
- ``amqp``: AMQP 0-9-1 publish with confirms and consume with acks, WeirMQ against a
  private RabbitMQ node (`rabbitmq`), with one pika load generator (`amqp`);
- ``sqs``: the SQS API with boto3 at queue depths 1,000 and 100,000, next to the same
  broker's AMQP and to moto's server (`sqs`).

Theory of operation
-------------------
- **The load is real clients in other processes** (`workers`): confluent-kafka, so
  librdkafka, the client most production Kafka traffic goes through, one process per
  client. Each reports its own CPU time, so a case says which side was the limit.
- **The broker is ours or anyone's** (`target`): without ``--bootstrap`` each case starts
  a fresh ``weirmq serve`` in a temporary directory; with it, the same workloads run
  against any Kafka-compatible broker, so figures can be set side by side. Broker CPU and
  memory come from ``/proc``, for ours or for an external broker whose pid is given; our
  broker's own metrics add how many requests it answered and how long each took.
- **Figures, not verdicts**: nothing here fails on speed. `report` computes the targets of
  issues 6 and 17 from the run's own figures (ratios compare measurements from the same
  run) and says which were met; the tests only check that a ``--quick`` run completes and
  writes valid JSON and a PNG.

docs/benchmarks.md has the latest figures, the machine, and how to reproduce them.
"""
