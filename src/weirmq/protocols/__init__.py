"""One adapter per protocol (Kafka today; AMQP 0-9-1 and SQS next): decode a request, call
the protocol-neutral core in `weirmq.broker`, encode the answer. Adapters never import each
other.
"""
