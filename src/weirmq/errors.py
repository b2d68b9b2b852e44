"""Kafka error codes, and the base of WeirMQ's operational error tree.

Kafka answers every failed operation with a numeric error code; clients decide from the
code alone whether to retry. We do not keep our own table of codes: kio generates its
`ErrorCode` enum (value and retriable flag) from Kafka's own JSON schemas, so ours cannot
drift from what clients expect.

Operational errors (bad input, unknown topic, full disk) are exceptions that carry their
Kafka code; the layer that answers a request turns them into that code and carries on.
Every protocol adapter maps the same tree: Kafka answers the code, AMQP and SQS will answer
their own errors from it. Broken invariants are `assert`s and are never mapped to a code.

The whole tree (checked against the code by tests/test_errors.py; private classes of an
adapter left out):

    KafkaError                          errors                unknown_server_error
        CorruptPayloadError             records.compression   corrupt_message
        GroupError                      groups.errors         (the code it is raised with)
        InternalTopicError              broker.topics         invalid_request
        InvalidConfigError              broker.configs        invalid_config
        InvalidDelayError               broker.delays         invalid_record
        InvalidPartitionsError          broker.topics         invalid_partitions
        InvalidProducerEpochError       broker.producers      invalid_producer_epoch
        InvalidQuotaError               broker.quotas         invalid_request
        InvalidRecordError              records.batch         corrupt_message
        InvalidReplicaAssignmentError   broker.topics         invalid_replica_assignment
        InvalidReplicationFactorError   broker.topics         invalid_replication_factor
        InvalidTopicError               broker.topics         invalid_topic_exception
        MessageTooLargeError            records.batch         message_too_large
        NotOneBatchError                broker.partition      invalid_record
        OffsetOutOfRangeError           storage.errors        offset_out_of_range
        OutOfOrderSequenceError         broker.producers      out_of_order_sequence_number
        PolicyViolationError            broker.topics         policy_violation
        RecordListTooLargeError         records.batch         record_list_too_large
        RoutingError                    routing.errors        invalid_config
            BindingCycleError           routing.errors        invalid_config
            ExchangeConflictError       routing.errors        invalid_config
            ExchangeInUseError          routing.errors        invalid_config
            InvalidBindingError         routing.errors        invalid_config
                ExpressionError         routing.errors        invalid_config
            InvalidExchangeError        routing.errors        invalid_config
            InvalidRoutingKeyError      routing.errors        invalid_record
            RoutingLimitError           routing.errors        policy_violation
            UnknownExchangeError        routing.errors        unknown_topic_or_partition
            UnroutableError             routing.errors        invalid_record
        ShareError                      queues.errors         invalid_request
            InvalidAcknowledgementError queues.errors         invalid_request
            InvalidRecordStateError     queues.errors         invalid_record_state
            InvalidShareConfigError     queues.errors         invalid_config
            InvalidShareStateError      queues.errors         kafka_storage_error
        ShareSessionError               broker.shares         (the code it is raised with)
        StorageError                    storage.errors        kafka_storage_error
            CorruptDataError            storage.segment       kafka_storage_error
            DamagedRangeError           storage.errors        corrupt_message
            DataDirLockedError          storage.lock          kafka_storage_error
            DiskFullError               storage.errors        kafka_storage_error
            LogOfflineError             storage.errors        kafka_storage_error
        ThrottlingQuotaExceededError    broker.topics         throttling_quota_exceeded
        TopicBusyError                  broker.topics         reassignment_in_progress
        TopicExistsError                broker.topics         topic_already_exists
        TransactionWriteError           broker.partition      (the code it is raised with)
        TransactionsUnsupportedError    broker.partition      invalid_txn_state
        UnknownTopicError               broker.topics         unknown_topic_or_partition
        UnsupportedCompressionError     records.compression   unsupported_compression_type
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """An operational error that maps to one Kafka error code.

    Subclasses set `code`; `retriable` follows Kafka's own classification of that code.
    """

    code: ErrorCode = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)
