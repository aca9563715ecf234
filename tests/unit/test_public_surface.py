"""One rule for the public surface (issue #34, item 4).

Every error class of ``aioproducer.errors`` is exported from ``aioproducer`` (a caller
catches what a future can raise without reaching into a submodule); so are the shared
types and the protocols, and ``ProducerLike`` covers the public API of ``Producer``
(what it leaves out, it says). mypy checks that Producer and MockProducer satisfy it:
test_mock_producer.py's ``test_mypy_accepts_both_as_producer_like``.
"""

from __future__ import annotations

import inspect

import aioproducer
from aioproducer import errors, protocols, types
from aioproducer.testing import MockProducer, MockRecordFuture, MockSendManyResult

#: Public members of Producer that ProducerLike leaves out, and why.
PRODUCER_ONLY = {
    "client_instance_id": "needs a cluster's client telemetry (KIP-714)",
    "prepare_transaction": "the two-phase hand-over to another process",
    "resume_transaction": "the two-phase hand-over from another process",
}


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_every_error_class_is_exported() -> None:
    classes = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and obj.__module__ == errors.__name__
               and not name.startswith("_")}
    assert len(classes) >= 38
    assert sorted(classes - set(aioproducer.__all__)) == []
    assert sorted(classes - set(errors.__all__)) == []
    for name in classes:
        assert getattr(aioproducer, name) is getattr(errors, name)


def test_shared_types_and_protocols_are_exported() -> None:
    for name in ("Header", "Serializer", "PartitionFunction"):
        assert name in aioproducer.__all__
        assert getattr(aioproducer, name) is getattr(types, name)
    for name in ("ProducerLike", "RecordFutureLike", "SendManyResultLike"):
        assert name in aioproducer.__all__
        assert getattr(aioproducer, name) is getattr(protocols, name)
    from aioproducer.partitioner import Partitioner
    assert aioproducer.Partitioner is Partitioner  # the object form, the one Partitioner
    assert not hasattr(aioproducer.config, "Partitioner")


def test_producer_like_covers_the_producer() -> None:
    producer, mock = aioproducer.Producer(), MockProducer()  # (instances: their attributes)
    members = _public(aioproducer.ProducerLike)
    missing = _public(producer) - members - set(PRODUCER_ONLY)
    assert sorted(missing) == []
    assert members <= _public(producer)
    assert members <= _public(mock)
    assert _public(protocols.RecordFutureLike) <= _public(aioproducer.RecordFuture)
    assert _public(protocols.RecordFutureLike) <= _public(MockRecordFuture)
    assert _public(protocols.SendManyResultLike) <= _public(aioproducer.SendManyResult)
    assert _public(protocols.SendManyResultLike) <= _public(MockSendManyResult)
