"""Typed errors: every failure a caller can see is one of these.

Kafka error codes map to exception classes through :func:`for_code`. Whether an
error is worth retrying comes from the code itself (``kio``'s ``ErrorCode`` carries
the ``retriable`` flag of Kafka's own ``Errors`` table), so the Sender never guesses.
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode

__all__ = [
    "AuthenticationError",
    "BatchRejectedError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ClusterAuthorizationError",
    "ConfigError",
    "DeliveryTimeoutError",
    "ErrorCategory",
    "GroupAuthorizationError",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageTooLargeError",
    "NotLeaderOrFollowerError",
    "OutOfOrderSequenceError",
    "PartitionError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProtocolError",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "SerializationError",
    "TLSError",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionOutcomeUnknownError",
    "TransactionalIdAuthorizationError",
    "UnknownPartitionError",
    "UnknownProducerIdError",
    "UnknownTopicError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "category_of",
    "for_code",
]


class ErrorCategory(enum.Enum):
    """What the caller of a (transactional) producer does about an error: KIP-1050's
    categories, one per error (``exc.category``). See docs/transactions.md."""

    RETRIABLE = "retriable"
    """Nothing was lost; the producer already retried within its bounds: call again."""
    REFRESH_AND_RETRY = "refresh-and-retry"
    """Stale routing (leader, coordinator, topic); the producer refreshes its metadata
    by itself: call again."""
    ABORTABLE = "abortable"
    """The transaction cannot commit: abort_transaction(), rewind the input to the last
    committed offsets, begin again. The producer stays usable."""
    APPLICATION_RECOVERABLE = "application-recoverable"
    """This producer instance is finished (fenced by a newer one, its producer id
    gone): close it; a new producer with the same transactional_id and
    init_transactions() take over, if this process should still be the owner."""
    INVALID_CONFIGURATION = "invalid-configuration"
    """A setting, an ACL or a version is wrong: close the producer and fix the
    configuration; retrying cannot succeed."""
    FATAL = "fatal"
    """A bug or an unusable producer (used after close, in the wrong state): close it
    and stop."""


class KafkaError(Exception):
    """Base class of every error aioproducer raises on purpose.

    ``category`` (:class:`ErrorCategory`) says what the caller does about it."""

    retriable: bool = False
    category: ErrorCategory = ErrorCategory.FATAL


class ConfigError(KafkaError, ValueError):
    """A producer option is unknown or has an invalid value."""


class SerializationError(KafkaError, TypeError):
    """A key, value or header is of a type the producer cannot send."""


class IllegalStateError(KafkaError, RuntimeError):
    """The producer was used in a state that does not allow the call."""


class ProducerClosedError(IllegalStateError):
    """The producer is closed (or closing); no more records can be sent."""


class TransactionOutcomeUnknownError(ProducerClosedError):
    """``close()`` ran out of time while the commit's EndTxn was on its way: the request
    was written, its answer did not come, so the transaction may be committed or not.
    Read the output with a ``read_committed`` consumer (or let the next producer with
    the same ``transactional_id`` finish it: ``init_transactions()`` completes a commit
    the coordinator started, and aborts an open transaction)."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A bounded wait (``max_block_ms``, ``flush(timeout)``...) ran out."""


class BufferExhaustedError(KafkaTimeoutError):
    """``send()`` could not get buffer memory within ``max_block_ms``."""


class UnknownTopicError(KafkaTimeoutError):
    """Metadata for a topic did not arrive within ``max_block_ms``."""


class DeliveryTimeoutError(KafkaTimeoutError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""

    retriable = True


class KafkaConnectionError(KafkaError, ConnectionError):
    """A broker could not be reached, or the connection to it was lost."""

    retriable = True


class RequestTimedOutError(KafkaError):
    """A request got no response within ``request_timeout_ms``."""

    retriable = True


class ProtocolError(KafkaError):
    """A broker sent bytes that do not decode as the Kafka protocol says."""

    retriable = True


class UnsupportedVersionError(KafkaError):
    """The broker and aioproducer share no version of a request they need."""


class AuthenticationError(KafkaError):
    """SASL authentication failed: wrong password, unknown user, a mechanism the broker
    does not enable, a bad token. Not retried: sends to the broker fail at once."""


class TLSError(KafkaError):
    """The TLS handshake failed: the broker's certificate is not trusted by the CA, its
    name does not match the host, or the broker refused our client certificate."""


class RecordTooLargeError(KafkaError, ValueError):
    """A record is larger than ``max_request_size`` or ``buffer_memory``."""


class PartitionError(KafkaError, ValueError):
    """An explicit partition does not exist for the topic."""


class UnknownPartitionError(KafkaTimeoutError, PartitionError):
    """An explicit partition beyond the topic's partition count: metadata was
    refreshed and the partition did not appear within ``max_block_ms`` (the message
    names the count). Also a :class:`PartitionError`."""


class BrokerResponseError(KafkaError):
    """An error code returned by a broker.

    ``code`` is the Kafka error code (``kio``'s ``ErrorCode``), ``retriable`` says
    whether the producer may try again.
    """

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str | None = None, *, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        self.retriable = bool(self.code.retriable)
        self.category = _category_of(type(self), int(self.code), self.retriable)
        text = f"[{self.code.name.upper()} ({int(self.code)})]"
        super().__init__(f"{text} {message}" if message else text)


class NotLeaderOrFollowerError(BrokerResponseError):
    """The broker is not the partition's leader; metadata is refreshed and the batch retried."""

    code = ErrorCode.not_leader_or_follower


class UnknownTopicOrPartitionError(BrokerResponseError):
    """The broker does not host this topic-partition."""

    code = ErrorCode.unknown_topic_or_partition


class InvalidTopicError(BrokerResponseError, ValueError):
    """The topic name is not legal in Kafka (empty, ``.`` or ``..``, longer than 249
    characters, or characters other than ASCII letters, digits, ``.``, ``_`` and
    ``-``), or the broker answered INVALID_TOPIC_EXCEPTION. Raised at once, never
    retried."""

    code = ErrorCode.invalid_topic_exception


class MessageTooLargeError(BrokerResponseError):
    """The broker refused a batch larger than its max.message.bytes."""

    code = ErrorCode.message_too_large


class TopicAuthorizationError(BrokerResponseError):
    """The client is not authorized to write to this topic."""

    code = ErrorCode.topic_authorization_failed


class ClusterAuthorizationError(BrokerResponseError):
    """The client is not authorized for a cluster-level operation (e.g. idempotent write)."""

    code = ErrorCode.cluster_authorization_failed


class GroupAuthorizationError(BrokerResponseError):
    """The client may not commit offsets for this consumer group."""

    code = ErrorCode.group_authorization_failed


class OutOfOrderSequenceError(BrokerResponseError):
    """The broker received a batch sequence out of order."""

    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(BrokerResponseError):
    """The producer epoch is stale."""

    code = ErrorCode.invalid_producer_epoch


class UnknownProducerIdError(BrokerResponseError):
    """The broker no longer knows this producer id."""

    code = ErrorCode.unknown_producer_id


class InvalidProducerIdMappingError(BrokerResponseError):
    """The producer id is not (or no longer) the one of this ``transactional_id``:
    the coordinator expired the id, or another producer took it. Fatal for a
    transactional producer (KAFKA-18019): only ``close()`` is left; a new producer's
    ``init_transactions()`` starts over."""

    code = ErrorCode.invalid_producer_id_mapping


class InvalidRecordError(BrokerResponseError):
    """The broker rejected a record as invalid (for example a null key on a compacted topic)."""

    code = ErrorCode.invalid_record


class BatchRejectedError(KafkaError):
    """The broker refused this record's whole batch because of *other* records in it
    (KIP-467: those get :class:`InvalidRecordError` with the broker's reason). This
    record itself was not found invalid, and it was not written; send it again if
    needed. The Java producer fails these records the same way."""


class ProducerFencedError(BrokerResponseError):
    """Another producer with the same ``transactional_id`` took over (a newer epoch).

    Fatal: the fenced producer can do nothing more but ``close()``. Kafka reports it
    as PRODUCER_FENCED, or as INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED
    on older paths; a transactional producer raises this class for all three.
    """

    code = ErrorCode.producer_fenced


class TransactionalIdAuthorizationError(BrokerResponseError):
    """The client may not use this ``transactional_id`` (fatal for the producer)."""

    code = ErrorCode.transactional_id_authorization_failed


class TransactionAbortableError(KafkaError):
    """The current transaction hit an error and can only be aborted.

    Call ``abort_transaction()``; the producer can then begin a new transaction.
    The original error is the ``__cause__``.
    """


class TransactionAbortedError(KafkaError):
    """The record was not sent: its transaction was aborted before it went out."""


_BY_CODE: dict[int, type[BrokerResponseError]] = {
    int(cls.code): cls
    for cls in (
        NotLeaderOrFollowerError,
        UnknownTopicOrPartitionError,
        InvalidTopicError,
        MessageTooLargeError,
        TopicAuthorizationError,
        ClusterAuthorizationError,
        GroupAuthorizationError,
        OutOfOrderSequenceError,
        InvalidProducerEpochError,
        UnknownProducerIdError,
        InvalidProducerIdMappingError,
        InvalidRecordError,
        ProducerFencedError,
        TransactionalIdAuthorizationError,
    )
}


def for_code(code: int, message: str | None = None) -> BrokerResponseError:
    """The exception for a Kafka error code (``code`` must not be 0)."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        ec = ErrorCode.unknown_server_error
        message = f"unknown error code {code}" + (f": {message}" if message else "")
    cls = _BY_CODE.get(int(ec), BrokerResponseError)
    return cls(message, code=ec)



# -- KIP-1050 categories --------------------------------------------------------------

_C = ErrorCategory
#: Categories of the error classes (subclasses inherit them).
_CLASS_CATEGORY: dict[type[KafkaError], ErrorCategory] = {
    ConfigError: _C.INVALID_CONFIGURATION,
    UnsupportedVersionError: _C.INVALID_CONFIGURATION,
    AuthenticationError: _C.INVALID_CONFIGURATION,
    TLSError: _C.INVALID_CONFIGURATION,
    KafkaTimeoutError: _C.RETRIABLE,
    KafkaConnectionError: _C.RETRIABLE,
    RequestTimedOutError: _C.RETRIABLE,
    ProtocolError: _C.RETRIABLE,
    # A record that failed in a transaction (it expired, or the broker or send()
    # refused it): the transaction must be aborted (Java's maybeTransitionToErrorState).
    DeliveryTimeoutError: _C.ABORTABLE,
    SerializationError: _C.ABORTABLE,
    RecordTooLargeError: _C.ABORTABLE,
    PartitionError: _C.ABORTABLE,
    BatchRejectedError: _C.ABORTABLE,
    TransactionAbortableError: _C.ABORTABLE,
    TransactionAbortedError: _C.ABORTABLE,
    IllegalStateError: _C.FATAL,
}
for _cls, _cat in _CLASS_CATEGORY.items():
    _cls.category = _cat
UnknownPartitionError.category = _C.REFRESH_AND_RETRY
UnknownTopicError.category = _C.REFRESH_AND_RETRY

_E = ErrorCode
#: Categories of broker error codes (a retriable code not listed is RETRIABLE, any
#: other code not listed ABORTABLE: it failed a request of the transaction).
CODE_CATEGORY: dict[int, ErrorCategory] = {
    **{int(c): _C.REFRESH_AND_RETRY for c in (
        _E.not_leader_or_follower, _E.unknown_topic_or_partition, _E.leader_not_available,
        _E.fenced_leader_epoch, _E.unknown_leader_epoch, _E.not_coordinator,
        _E.coordinator_not_available, _E.unknown_topic_id, _E.inconsistent_topic_id)},
    **{int(c): _C.ABORTABLE for c in (
        _E.invalid_producer_epoch,  # from a partition leader: KIP-588
        _E.transaction_abortable, _E.unknown_producer_id, _E.out_of_order_sequence_number,
        _E.message_too_large, _E.record_list_too_large, _E.invalid_record,
        _E.corrupt_message)},
    **{int(c): _C.APPLICATION_RECOVERABLE for c in (
        _E.producer_fenced, _E.transaction_coordinator_fenced,
        _E.invalid_producer_id_mapping, _E.invalid_txn_state)},
    **{int(c): _C.INVALID_CONFIGURATION for c in (
        _E.topic_authorization_failed, _E.group_authorization_failed,
        _E.cluster_authorization_failed, _E.transactional_id_authorization_failed,
        _E.invalid_transaction_timeout, _E.unsupported_for_message_format,
        _E.unsupported_version, _E.invalid_topic_exception, _E.invalid_required_acks,
        _E.sasl_authentication_failed, _E.security_disabled)},
}


def _category_of(cls: type[BrokerResponseError], code: int, retriable: bool
                  ) -> ErrorCategory:
    if cls is ProducerFencedError or issubclass(cls, ProducerFencedError):
        return _C.APPLICATION_RECOVERABLE  # whatever code said "fenced"
    cat = CODE_CATEGORY.get(code)
    if cat is not None:
        return cat
    return _C.RETRIABLE if retriable else _C.ABORTABLE


def category_of(exc: BaseException) -> ErrorCategory:
    """The category of any exception a producer call raised (FATAL for one that is
    not a :class:`KafkaError`: a bug)."""
    return exc.category if isinstance(exc, KafkaError) else _C.FATAL
