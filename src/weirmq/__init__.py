"""WeirMQ: one broker for durable logs, broker-side routing and queues.

WeirMQ does the jobs teams usually split between Kafka, RabbitMQ and SQS: a durable,
replayable, partitioned log; exchanges that route records at the broker; queues with
per-message acknowledgement and dead-lettering; and flow control that slows producers
down before the broker falls over. It speaks the Kafka wire protocol, so existing Kafka
clients and tools work against it unchanged.

This module deliberately imports nothing: importing ``weirmq`` must stay cheap and must
not pull one layer into another (tests/test_import_rules.py checks this).
"""

__version__ = "0.1.0"
