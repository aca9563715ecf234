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
    BrokerResponseError,
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    ErrorCategory,
    GroupAuthorizationError,
    IllegalStateError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
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
    UnknownTopicError,
    UnsupportedVersionError,
)
from .interceptors import ProducerInterceptor, ProducerRecord
from .metrics import MetricsSnapshot
from .producer import Producer
from .record import RecordFuture, RecordMetadata, SendManyResult

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

__all__ = [
    "AuthenticationError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ConfigError",
    "ConfigIgnoredWarning",
    "DeliveryTimeoutError",
    "ErrorCategory",
    "GroupAuthorizationError",
    "GroupMetadata",
    "IllegalStateError",
    "InvalidTopicError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetricsSnapshot",
    "PartitionError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerInterceptor",
    "ProducerRecord",
    "ProtocolError",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "SendManyResult",
    "SerializationError",
    "TLSError",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionOutcomeUnknownError",
    "TransactionalIdAuthorizationError",
    "UnknownPartitionError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "__version__",
]
