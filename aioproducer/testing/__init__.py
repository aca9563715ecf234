"""Test helpers: :class:`MockProducer` and a pytest plugin (``aioproducer.testing.plugin``).

The plugin registers itself through the ``pytest11`` entry point once aioproducer is
installed; its fixtures are ``kafka_bootstrap``, ``kafka_topic``,
``kafka_topic_factory``, ``producer``, ``mock_producer``, ``producer_options`` and
``mock_producer_options``.
"""

from .mock import MockProducer, MockRecordFuture, MockSendManyResult, SentRecord

__all__ = ["MockProducer", "MockRecordFuture", "MockSendManyResult", "SentRecord"]
