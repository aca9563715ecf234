"""Produce request/response helpers for fault tests: decode and re-encode with kio.

* :func:`rewrite_produce_errors` -- a ``body`` function for
  ``FaultProxy.corrupt_responses(API_PRODUCE, ...)`` that rewrites partition error codes
  of a ProduceResponse (v9..v13, the version is recognised from the body).
* :func:`cap_api_version` -- a ``body`` function for ``corrupt_responses(API_API_VERSIONS,
  ...)`` that lowers the max version the broker advertises for one API key.
* :class:`AnsweringProxyCluster` -- a :class:`ProxyCluster` whose proxies can answer a
  Produce request themselves instead of forwarding it (``answer_produce``): the broker
  never sees the request, the client gets a synthesized ProduceResponse with the given
  partition error. The synthesized response is written only once every earlier response
  on the connection was delivered, and later requests wait behind it, so the
  response order on the connection is kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import io
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from aioproducer.testing.faultproxy import (
    _REQ_HEAD,
    _SIZE,
    API_PRODUCE,
    FaultProxy,
    ProxyCluster,
    _Conn,
)

__all__ = [
    "AnsweringProxy",
    "AnsweringProxyCluster",
    "cap_api_version",
    "decode_produce_response_body",
    "encode_produce_response_body",
    "rewrite_produce_errors",
]

PRODUCE_VERSIONS = (13, 12, 11, 10, 9)


def decode_produce_response_body(body: bytes) -> tuple[int, Any]:
    """``(version, ProduceResponse)``: the first of v13..v9 that decodes ``body`` exactly."""
    last: Exception | None = None
    for version in PRODUCE_VERSIONS:
        schema: Any = load_response_schema(API_PRODUCE, version)
        try:
            value, end = entity_reader(schema)(body, 0)
        except Exception as exc:
            last = exc
            continue
        if end == len(body):
            return version, value
    raise ValueError(f"not a ProduceResponse v9..v13 body: {last!r}")


def encode_produce_response_body(version: int, response: Any) -> bytes:
    schema: Any = load_response_schema(API_PRODUCE, version)
    buf = io.BytesIO()
    entity_writer(schema)(buf, response)
    return buf.getvalue()


def rewrite_produce_errors(error_code: int, *, partitions: set[int] | None = None,
                           message: str | None = None,
                           seen: list[tuple[int, int]] | None = None
                           ) -> Callable[[bytes], bytes]:
    """A body function setting every (or ``partitions``') partition error to
    ``error_code`` (base offset -1). ``seen`` collects ``(partition, original code)``."""

    def body(original: bytes) -> bytes:
        version, resp = decode_produce_response_body(original)
        topics = []
        for t in resp.responses:
            parts = []
            for p in t.partition_responses:
                if partitions is None or int(p.index) in partitions:
                    if seen is not None:
                        seen.append((int(p.index), int(p.error_code)))
                    p = dataclasses.replace(p, error_code=ErrorCode(error_code),
                                            base_offset=i64(-1), error_message=message)
                parts.append(p)
            topics.append(dataclasses.replace(t, partition_responses=tuple(parts)))
        return encode_produce_response_body(
            version, dataclasses.replace(resp, responses=tuple(topics)))

    return body


def cap_api_version(api_key: int, max_version: int,
                    api_versions_version: int = 3) -> Callable[[bytes], bytes]:
    """A body function for ApiVersions responses (v``api_versions_version``, the version
    aioproducer asks for) that caps ``api_key``'s max version at ``max_version``."""
    schema: Any = load_response_schema(18, api_versions_version)

    def body(original: bytes) -> bytes:
        resp, _ = entity_reader(schema)(original, 0)
        keys = tuple(
            dataclasses.replace(k, max_version=i16(min(int(k.max_version), max_version)))
            if int(k.api_key) == api_key else k
            for k in resp.api_keys)
        buf = io.BytesIO()
        entity_writer(schema)(buf, dataclasses.replace(resp, api_keys=keys))
        return buf.getvalue()

    return body


def _decode_produce_request(frame: bytes) -> tuple[int, int, Any]:
    """``(version, correlation_id, ProduceRequest)`` of a whole request frame."""
    _size, _key, version, corr = _REQ_HEAD.unpack_from(frame, 0)
    schema: Any = load_request_schema(API_PRODUCE, version)
    # kio readers return (value, number of bytes read from the offset given).
    _header, used = entity_reader(schema.__header_schema__)(frame, 4)
    request, _ = entity_reader(schema)(frame, 4 + used)
    return version, corr, request


def _synthesized_response(version: int, corr: int, request: Any, error_code: int) -> bytes:
    """A whole response frame answering ``request`` with ``error_code`` everywhere."""
    schema: Any = load_response_schema(API_PRODUCE, version)
    module = importlib.import_module(schema.__module__)
    topics = []
    for t in request.topic_data:
        parts = []
        for p in t.partition_data:
            fields: dict[str, Any] = {
                "index": i32(int(p.index)), "error_code": ErrorCode(error_code),
                "base_offset": i64(-1), "log_append_time": None,
                "log_start_offset": i64(-1), "record_errors": (), "error_message": None,
            }
            if hasattr(module, "LeaderIdAndEpoch"):
                fields["current_leader"] = module.LeaderIdAndEpoch(
                    leader_id=i32(-1), leader_epoch=i32(-1))
            names = {f.name for f in dataclasses.fields(module.PartitionProduceResponse)}
            parts.append(module.PartitionProduceResponse(
                **{k: v for k, v in fields.items() if k in names}))
        tfields: dict[str, Any] = {"partition_responses": tuple(parts)}
        tnames = {f.name for f in dataclasses.fields(module.TopicProduceResponse)}
        if "topic_id" in tnames:
            tfields["topic_id"] = t.topic_id
        else:
            tfields["name"] = t.name
        topics.append(module.TopicProduceResponse(**tfields))
    rfields: dict[str, Any] = {"responses": tuple(topics),
                               "throttle_time": i32Timedelta.parse(datetime.timedelta(0))}
    rnames = {f.name for f in dataclasses.fields(schema)}
    if "node_endpoints" in rnames:
        rfields["node_endpoints"] = ()
    response = schema(**{k: v for k, v in rfields.items() if k in rnames})
    header_schema: Any = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_schema)(buf, header_schema(correlation_id=i32(corr)))
    entity_writer(schema)(buf, response)
    data = buf.getvalue()
    return _SIZE.pack(len(data)) + data


@dataclasses.dataclass
class _AnswerRule:
    error_code: int
    skip: int
    remaining: int
    only: Callable[[Any], bool] | None


class AnsweringProxy(FaultProxy):
    """A :class:`FaultProxy` that can also answer Produce requests itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answer: _AnswerRule | None = None
        #: ``(correlation id, request)`` of every request answered by the proxy.
        self.answered: list[tuple[int, Any]] = []

    def answer_produce(self, error_code: int, *, skip: int = 0, count: int = 1,
                       only: Callable[[Any], bool] | None = None) -> None:
        """Let ``skip`` Produce requests (matching ``only(request)``, if given) through,
        then answer the next ``count`` ones with ``error_code`` for each of their
        partitions, without forwarding them to the broker."""
        self._answer = _AnswerRule(error_code, skip, count, only) if count > 0 else None

    async def _intercept(self, conn: _Conn, head: bytes, api_key: int, api_version: int,
                         corr: int, total: int) -> bytes | None:
        rule = self._answer
        if api_key != API_PRODUCE or rule is None:
            return head
        # Read the whole request (small in these tests) to decide.
        frame = head + await conn.client_reader.readexactly(total - len(head))
        version, corr, request = _decode_produce_request(frame)
        if rule.only is None or rule.only(request):
            if rule.skip > 0:
                rule.skip -= 1
            else:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._answer = None
                self.stats["requests_by_api"][api_key] += 1
                self._request_seen.set()
                await self._answer_now(conn, version, corr, request, rule.error_code)
                return None
        return frame

    async def _answer_now(self, conn: _Conn, version: int, corr: int, request: Any,
                          error_code: int) -> None:
        # Responses go back in request order: wait until the broker answered every
        # earlier request and those answers were passed on.
        while conn.pending:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)  # the last one's bytes are fully written
        self.answered.append((corr, request))
        conn.client_writer.write(_synthesized_response(version, corr, request, error_code))
        await conn.client_writer.drain()


class AnsweringProxyCluster(ProxyCluster):
    """A :class:`ProxyCluster` of :class:`AnsweringProxy`."""

    proxies: dict[int, AnsweringProxy]  # type: ignore[assignment]

    async def _add(self, node_id: int, host: str, port: int) -> FaultProxy:
        proxy = AnsweringProxy(host, port, rewrite_addresses=self._rewrite)
        self.proxies[node_id] = proxy
        await proxy.start()
        return proxy
