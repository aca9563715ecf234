"""aioproducer: an asyncio-native Apache Kafka producer with a compiled Cython core.

    async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        fut = await producer.send("events", b"value", key=b"key")
        metadata = await fut
"""

from typing import TYPE_CHECKING, Any

from . import _native  # noqa: F401  (fails with a clear message if the core is not built)
from .config import ConfigIgnoredWarning, ProducerConfig
from .errors import (
    AuthenticationError,
    BatchRejectedError,
    BrokerResponseError,
    BufferExhaustedError,
    ClusterAuthorizationError,
    ConfigError,
    DeliveryTimeoutError,
    ErrorCategory,
    GroupAuthorizationError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    PartitionError,
    ProducerClosedError,
    ProducerFencedError,
    ProtocolError,
    RecordTooLargeError,
    RequestTimedOutError,
    SerializationError,
    TLSError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    TransactionOutcomeUnknownError,
    UnknownPartitionError,
    UnknownProducerIdError,
    UnknownTopicError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from .interceptors import ProducerInterceptor, ProducerRecord
from .metrics import MetricsSnapshot
from .partitioner import Partitioner
from .producer import Producer
from .protocols import ProducerLike, RecordFutureLike, SendManyResultLike
from .record import RecordFuture, RecordMetadata, SendManyResult
from .types import Header, PartitionFunction, Serializer

if TYPE_CHECKING:
    from .transactions import GroupMetadata
else:

    def __getattr__(name: str) -> Any:
        # The transactions module is imported when first used, not with the package.
        if name == "GroupMetadata":
            from .transactions import GroupMetadata
            globals()[name] = GroupMetadata
            return GroupMetadata
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

from ._version import __version__

# Every error class of aioproducer.errors is here (tests/unit/test_public_surface.py).
__all__ = [
    "AuthenticationError",
    "BatchRejectedError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ClusterAuthorizationError",
    "ConfigError",
    "ConfigIgnoredWarning",
    "DeliveryTimeoutError",
    "ErrorCategory",
    "GroupAuthorizationError",
    "GroupMetadata",
    "Header",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageTooLargeError",
    "MetricsSnapshot",
    "NotLeaderOrFollowerError",
    "OutOfOrderSequenceError",
    "PartitionError",
    "PartitionFunction",
    "Partitioner",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerInterceptor",
    "ProducerLike",
    "ProducerRecord",
    "ProtocolError",
    "RecordFuture",
    "RecordFutureLike",
    "RecordMetadata",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "SendManyResult",
    "SendManyResultLike",
    "SerializationError",
    "Serializer",
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
    "__version__",
]
