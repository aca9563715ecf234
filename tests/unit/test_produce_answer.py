"""The Produce answer the Sender reads: the compiled decoder of the usual answer (every
partition written) and kio for the rest give the same :class:`ProduceAnswer`. The
fuzz target ``produce_answer`` (tests/unit/test_fuzz.py) checks the agreement on
hostile bodies; these tests pin each field."""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from aioproducer._native.produce import PartitionResult, decode_produce_written
from aioproducer.errors import ProtocolError
from aioproducer.net import protocol
from aioproducer.net.protocol import ProduceAnswer, decode_produce_answer
from fuzz.util import encode

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
TID = uuid.UUID("5f19dd9c-97f0-4394-8b06-eb8b5b36f758")


def _body(version: int, *, code: ErrorCode = ErrorCode.none, message: str | None = None,
          record_errors: tuple[Any, ...] = (), leader: tuple[int, int] | None = None,
          endpoints: tuple[Any, ...] = (), append_ms: int | None = 1_700_000_000_123,
          throttle_ms: int = 0) -> bytes:
    mod = importlib.import_module(f"kio.schema.produce.v{version}.response")
    extra: dict[str, Any] = {}
    if leader is not None:
        extra["current_leader"] = mod.LeaderIdAndEpoch(leader_id=i32(leader[0]),
                                                       leader_epoch=i32(leader[1]))
    part = mod.PartitionProduceResponse(
        index=i32(3), error_code=code, base_offset=i64(41 if code == ErrorCode.none else -1),
        log_append_time=None if append_ms is None
        else EPOCH + datetime.timedelta(milliseconds=append_ms),
        log_start_offset=i64(7), record_errors=record_errors, error_message=message, **extra)
    ident: dict[str, Any] = ({"topic_id": TID} if version >= 13
                             else {"name": TopicName("orders")})
    top: dict[str, Any] = {"node_endpoints": endpoints} if endpoints else {}
    return encode(mod.ProduceResponse(
        responses=(mod.TopicProduceResponse(**ident, partition_responses=(part,)),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
        **top))


@pytest.mark.parametrize("version", range(9, 14))
def test_written_answer_is_decoded_natively(version: int) -> None:
    body = _body(version, throttle_ms=250)
    assert decode_produce_written(version, body) is not None
    answer = decode_produce_answer(version, body)
    name, tid = (None, TID) if version >= 13 else ("orders", None)
    assert answer == ProduceAnswer(250, [(name, tid, PartitionResult(
        3, 0, 41, 1_700_000_000_123, 7, None, [], None))])
    # Exactly what the kio path makes of the same body.
    assert answer == protocol.produce_answer_of(
        protocol.decode_produce_response(version, body))


def test_no_log_append_time_is_minus_one() -> None:
    answer = decode_produce_answer(13, _body(13, append_ms=None))
    assert answer.partitions[0][2].log_append_ms == -1


@pytest.mark.parametrize("kwargs", [
    {"code": ErrorCode.not_leader_or_follower},
    {"code": ErrorCode.invalid_record, "message": "bad",
     "record_errors": ("REC",)},
    {"leader": (2, 9)},
], ids=["error", "record-errors", "leader-hint"])
def test_other_answers_go_through_kio(kwargs: dict[str, Any]) -> None:
    version = 12
    mod = importlib.import_module(f"kio.schema.produce.v{version}.response")
    if kwargs.get("record_errors"):
        kwargs["record_errors"] = (mod.BatchIndexAndErrorMessage(
            batch_index=i32(4), batch_index_error_message="too big"),)
    body = _body(version, **kwargs)
    assert decode_produce_written(version, body) is None
    [(name, tid, part)] = decode_produce_answer(version, body).partitions
    assert (name, tid, part.index) == ("orders", None, 3)
    assert part.error_code == int(kwargs.get("code", ErrorCode.none))
    if "record_errors" in kwargs:
        assert part.record_errors == [(4, "too big")] and part.error_message == "bad"
    if "leader" in kwargs:
        assert part.current_leader == (2, 9)
    else:
        assert part.current_leader is None  # kio's default (-1, -1) is no hint


def test_node_endpoints_go_through_kio() -> None:
    mod = importlib.import_module("kio.schema.produce.v13.response")
    body = _body(13, code=ErrorCode.not_leader_or_follower, leader=(5, 2), endpoints=(
        mod.NodeEndpoint(node_id=i32(5), host="127.0.0.1", port=i32(9093), rack=None),))
    answer = decode_produce_answer(13, body)
    assert answer.node_endpoints == {5: ("127.0.0.1", 9093)}
    assert answer.partitions[0][2].current_leader == (5, 2)


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_or_padded_bodies_are_refused(cut: int) -> None:
    body = _body(11)
    assert decode_produce_written(11, body[:-cut]) is None
    assert decode_produce_written(11, body + b"\x00") is None
    with pytest.raises(ProtocolError):
        decode_produce_answer(11, body[:-cut])
    with pytest.raises(ProtocolError):
        decode_produce_answer(11, body + b"\x00")


def test_versions_outside_9_to_13_are_not_decoded_natively() -> None:
    body = _body(9)
    assert decode_produce_written(8, body) is None
    assert decode_produce_written(14, body) is None


def test_topic_ids_are_shared_and_nil_is_none() -> None:
    """From v13 the compiled decoder gives each topic id as one ``uuid.UUID`` per id
    (made once), and the nil id as None, as kio reads it."""
    first = decode_produce_written(13, _body(13))
    second = decode_produce_written(13, _body(13))
    assert first is not None and second is not None
    assert first.partitions[0][1] == TID and first.partitions[0][1] is second.partitions[0][1]
    assert first.node_endpoints == {} and first.node_endpoints is not second.node_endpoints
    nil = _body(13).replace(TID.bytes, bytes(16))
    answer = decode_produce_written(13, nil)
    assert answer is not None and answer.partitions[0][1] is None
    assert answer == protocol.produce_answer_of(protocol.decode_produce_response(13, nil))
    assert repr(answer).startswith("ProduceAnswer(throttle_ms=0, partitions=[(None, None, ")
    assert answer != ProduceAnswer(1, answer.partitions) and answer != object()
