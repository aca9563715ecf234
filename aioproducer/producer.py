"""The public :class:`Producer`: ``await producer.send(...)`` and its lifecycle."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from ._bulk import BulkInput
from ._bulk import send_many_error as _send_many_error
from ._lifecycle import check_loop, raise_not_running
from ._native import BATCH_HEADER_SIZE, Appender, ProducerBatch
from .accumulator import RecordAccumulator
from .compression import codec_id, make_compression_thread, make_compressor
from .config import ProducerConfig
from .errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
)
from .interceptors import InterceptorChain, ProducerRecord
from .metadata import Cluster, Metadata
from .metrics import MetricsSnapshot, ProducerMetrics
from .net.client import KafkaClient
from .net.security import security_from_config
from .partitioner import RecordPartitioner
from .producer_id import ProducerIdManager
from .record import RecordFuture, RecordMetadata, SendManyResult
from .sender import Sender
from .serializers import (
    check_record_size,
    needs_topic,
    prepare_record,
    serialize_for_topic,
)
from .types import Header
from .wiring import wire_buffering, wire_new_batches, wire_sender

if TYPE_CHECKING:
    from .otel import Tracing
    from .telemetry import ClientTelemetry
    from .transaction_state import TxnStateMachine
    from .transactions import GroupMetadata, TransactionManager

__all__ = ["Producer"]


log = logging.getLogger("aioproducer.producer")

_NEW, _RUNNING, _CLOSING, _CLOSED = range(4)
# Clean-up tasks of producers collected without close(): kept alive until done.
_abandoned: set[asyncio.Task[None]] = set()


class Producer:
    """An asyncio Kafka producer with the Java ``KafkaProducer``'s semantics.

    Construct it anywhere (no event loop is needed), then ``await start()`` or use
    ``async with Producer(...) as producer:``. Options are :class:`ProducerConfig`
    fields, by Python name (``linger_ms``) or Java name (``"linger.ms"``).
    """

    def __init__(self, config: ProducerConfig | Mapping[str, Any] | None = None,
                 **options: Any) -> None:
        if isinstance(config, ProducerConfig):
            if options:
                raise IllegalStateError("pass either a ProducerConfig or options, not both")
            self.config = config.validated()
        else:
            self.config = ProducerConfig.from_options(config, **options)
        c = self.config
        self._state = _NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._metadata = Metadata(max_age_ms=c.metadata_max_age_ms,
                                  retry_backoff_ms=c.retry_backoff_ms,
                                  retry_backoff_max_ms=c.retry_backoff_max_ms,
                                  max_idle_ms=c.metadata_max_idle_ms)
        # The native appender: send()'s one native call. It holds each topic's route
        # (its partition count, sticky choice and each partition's open batch); the
        # partitioner chooses with it and the accumulator sets its open batches.
        # Records whose key + value approach a size limit take the exact Python check.
        max_payload = min(c.max_request_size, c.buffer_memory) - BATCH_HEADER_SIZE - 64
        self._appender = Appender(hash_keys=c.partitioner == "murmur2",
                                  ignore_keys=c.partitioner_ignore_keys,
                                  max_payload=max_payload, sticky_batch_size=c.batch_size)
        self._partitioner = RecordPartitioner(
            c.partitioner, appender=self._appender, ignore_keys=c.partitioner_ignore_keys,
            batch_size=c.batch_size, adaptive=c.partitioner_adaptive_partitioning_enable,
            availability_timeout_ms=c.partitioner_availability_timeout_ms)
        self._accumulator = RecordAccumulator(
            batch_size=c.batch_size, batch_max_size=c.batch_max_size or c.batch_size,
            buffer_memory=c.buffer_memory, linger_ms=c.linger_ms,
            retry_backoff_ms=c.retry_backoff_ms, retry_backoff_max_ms=c.retry_backoff_max_ms,
            delivery_timeout_ms=c.delivery_timeout_ms,
            codec=codec_id(c.compression_type),
            compressor=make_compressor(c.compression_type, c.compression_level),
            max_request_size=c.max_request_size, appender=self._appender,
            offload=make_compression_thread(c.compression_type, c.compression_level)
            if c.compression_thread else None,
        )
        self._metrics = ProducerMetrics(c.client_id)
        wire_buffering(self._accumulator, self._partitioner, self._metrics)
        self._client: KafkaClient | None = None
        self._security = security_from_config(c)  # TLS files are loaded (and checked) here
        self._sender: Sender | None = None
        self._txn: TransactionManager | None = None
        self._max_block_s = c.max_block_ms / 1000.0
        self._max_request_size = c.max_request_size
        self._key_serializer = c.key_serializer
        self._value_serializer = c.value_serializer
        # Schema Registry serializers (aioproducer.schema) take the topic and may await.
        self._topic_serializers = needs_topic(c.key_serializer) or needs_topic(
            c.value_serializer)
        self._linger_zero = c.linger_ms == 0
        # send_and_wait() under a linger: the task whose send() is running, and the new
        # batch its send opened without waking the Sender (see _on_new_batch).
        self._pass_for_task: asyncio.Task[Any] | None = None
        self._pass_batch: ProducerBatch | None = None
        self._interceptors = InterceptorChain(c.interceptors)
        self._fast = self._partitioner.fast and c.key_serializer is None \
            and c.value_serializer is None and not self._interceptors
        # send() is the appender's: a PendingSend that, awaited, takes the native path
        # while appender.hot (set in start()), else this producer's Python path
        # (_send_any). The bound native method goes in the instance's dict, so that
        # `producer.send(...)` costs no Python frame; Producer.send below does the
        # same call for subclasses that override it (and for docs and typing).
        # (slow holds the producer weakly: an unclosed producer is still collected at
        # once, and warns, with no reference cycle through its own send.)
        self._appender.slow = _python_path(weakref.ref(self))
        if type(self).send is Producer.send:
            self.__dict__["send"] = self._appender.send
        self._tracing: Tracing | None = None  # when tracer_provider is set (otel.py)
        if c.tracer_provider is not None or c.meter_provider is not None:
            from .otel import setup as otel_setup
            self._tracing = otel_setup(self, c.tracer_provider, c.meter_provider,
                                       c.propagator)
        self._fatal: KafkaError | None = None
        self._telemetry: ClientTelemetry | None = None  # KIP-714 push (telemetry.py)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster (bounded by ``max_block_ms``) and start the Sender."""
        if self._state != _NEW:
            raise IllegalStateError("start() can be called once, on a new producer")
        c = self.config
        self._loop = asyncio.get_running_loop()
        client = KafkaClient(
            c.servers, client_id=c.client_id, request_timeout_ms=c.request_timeout_ms,
            connect_timeout_ms=c.socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=c.reconnect_backoff_ms,
            reconnect_backoff_max_ms=c.reconnect_backoff_max_ms,
            max_response_bytes=c.max_response_bytes, security=self._security,
            metadata_recovery_strategy=c.metadata_recovery_strategy,
            metadata_recovery_rebootstrap_trigger_ms=c.metadata_recovery_rebootstrap_trigger_ms,
            connect_timeout_max_ms=c.socket_connection_setup_timeout_max_ms,
            connections_max_idle_ms=c.connections_max_idle_ms,
            send_buffer_bytes=c.send_buffer_bytes, receive_buffer_bytes=c.receive_buffer_bytes,
            client_dns_lookup=c.client_dns_lookup,
        )
        self._client = client
        try:
            response = await client.bootstrap(self._max_block_s)
        except BaseException:
            await client.close()
            self._state = _CLOSED
            raise
        cluster = Cluster.from_response(response)
        client.update_nodes(cluster.nodes)
        self._metadata.refresh_done(time.monotonic(), cluster, [])
        client.check_produce_versions()
        # The producer is the composition root: it builds the idempotence and
        # transaction state and hands them to the Sender, which drives them.
        pid = ProducerIdManager(client, c) if c.enable_idempotence else None
        txn = None
        if c.transactional_id is not None:
            assert pid is not None
            from .transactions import TransactionManager  # transactions' code when used
            txn = TransactionManager(client, c, pid, self._wake_sender)
        self._sender = Sender(c, client, self._metadata, self._accumulator, self._metrics,
                              pid=pid, txn=txn)
        wire_sender(self._sender, client, self._metadata, self._accumulator)
        # Through a weak reference: the Sender must not keep an abandoned producer
        # alive (its __del__ warns and cleans up).
        ref = weakref.ref(self)

        def on_fatal(error: KafkaError) -> None:
            producer = ref()
            if producer is not None:
                producer._on_sender_failed(error)

        self._sender.on_fatal = on_fatal
        self._txn = txn
        self._sender.start()
        self._state = _RUNNING
        if c.enable_metrics_push:
            self._start_telemetry(client)
        self._appender.bind(self._loop)
        self._appender.hot = self._fast and self._txn is None and self._tracing is None
        if self._appender.hot:
            wire_new_batches(self._appender, self._accumulator, self._metadata,
                             weakref.ref(self))

    def _wake_sender(self) -> None:
        if self._sender is not None:
            self._sender.wakeup()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until all of it is acknowledged or failed.

        Raises :class:`KafkaTimeoutError` if ``timeout`` seconds pass first.
        """
        self._check_loop()
        acc = self._accumulator
        pending = [b.result for b in acc.incomplete]
        if not pending:
            return
        acc.begin_flush()
        self._wake_sender()
        try:
            _done, not_done = await asyncio.wait(pending, timeout=timeout)
        finally:
            acc.end_flush()
        if not_done:
            records = sum(b.record_count for b in acc.incomplete if b.result in not_done)
            raise KafkaTimeoutError(
                f"flush() timed out after {timeout} s with {records} record(s) not yet "
                "acknowledged; they stay buffered and will still be retried"
            )

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, then release everything.

        Waits up to ``timeout`` seconds in all (None: until every record is
        acknowledged or has expired after ``delivery_timeout_ms``). A transactional
        producer first settles its transaction, as Java's close does: a commit or
        abort running in another task is waited for, one that was cancelled or timed
        out after it began to end the transaction is finished, and an open
        transaction is aborted. When the time runs out, no EndTxn goes out any more
        (a commit in progress raises, and commits nothing), and records still
        undelivered fail with :class:`ProducerClosedError`. Safe to call more than
        once.
        """
        if self._state in (_CLOSED, _CLOSING):
            if self._state == _CLOSING:
                while self._state != _CLOSED:
                    await asyncio.sleep(0.01)
            return
        if self._state == _NEW:
            self._state = _CLOSED
            return
        self._check_loop()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(0.0, timeout)

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - loop.time())

        txn = self._txn
        if txn is not None:
            try:
                await asyncio.wait_for(txn.settle(self.abort_transaction), remaining())
            except (KafkaError, asyncio.TimeoutError) as exc:
                log.warning("close(): the transaction could not be ended: %s",
                            exc or "timed out")
        self._state = _CLOSING
        self._appender.hot = False
        self._appender.bind(None)
        acc = self._accumulator
        acc.close(ProducerClosedError("the producer was closed"))
        self._metadata.fail_waiters(ProducerClosedError("the producer was closed"))
        sender = self._sender
        try:
            if sender is not None and sender.task is not None:
                sender.wakeup()
                try:
                    await asyncio.wait_for(asyncio.shield(sender.task), remaining())
                except asyncio.TimeoutError:
                    pass
                except asyncio.CancelledError:
                    if not sender.task.done():
                        raise  # our caller was cancelled: clean up below, then re-raise
                except Exception:  # the sender crashed; it already failed everything
                    pass
            if self._telemetry is not None:
                # KIP-714: the last push (terminating), after the Sender's last sends.
                bound = self.config.request_timeout_ms / 1000.0
                left = remaining()
                await self._telemetry.close(bound if left is None else min(bound, left))
        finally:
            # Also when close() itself is cancelled: nothing is left pending. No EndTxn
            # may go out after this point (Java's forced close fails the transaction's
            # pending requests before it fails the batches).
            closed = ProducerClosedError(
                "the producer was closed before this record was acknowledged")
            if txn is not None:
                txn.close(closed)
            failed = acc.abort_all(closed)
            if failed:
                log.warning("close(): %d record(s) were not delivered and failed", failed)
            if sender is not None:
                await sender.stop()
            if self._telemetry is not None:
                self._telemetry.stop()
            if self._client is not None:
                await self._client.close()
            self._interceptors.close()
            self._partitioner.close()
            self._state = _CLOSED

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    # -- sending -----------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, *,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: Sequence[Header] | None = None) -> Coroutine[Any, Any, RecordFuture]:
        """Append a record; the coroutine returns once it is buffered (not yet
        acknowledged): ``fut = await producer.send(...)``.

        Waits only for the topic's metadata (first use) and for buffer memory, both
        bounded by ``max_block_ms``. ``await`` the returned :class:`RecordFuture` for
        the :class:`RecordMetadata`. Like an ``async def``, nothing happens until the
        coroutine is awaited (or run as a task), and one dropped unawaited warns.
        """
        # Instances use self._appender.send itself (set in __init__). Without headers
        # it is a native coroutine (PendingSend): awaited, the common case appends in
        # one native call, with no coroutine frame. It takes that path while
        # appender.hot says the producer runs with no serializers, interceptors,
        # transaction or tracing to consult, and checks that this is the producer's
        # loop; else (and with headers) it runs _send_any.
        return self._appender.send(topic, value, key, partition=partition,
                                   timestamp_ms=timestamp_ms, headers=headers)

    def _send_any(self, topic: str, value: Any, key: Any, partition: int | None,
                  timestamp_ms: int | None,
                  headers: Sequence[Header] | None) -> Coroutine[Any, Any, RecordFuture]:
        """send()'s Python path: a coroutine (traced, or not), run only when awaited."""
        if self._tracing is not None:
            return self._tracing.send(self._send, topic, value, key, partition,
                                      timestamp_ms, headers)
        return self._send(topic, value, key, partition, timestamp_ms, headers)

    def _on_sender_failed(self, error: KafkaError) -> None:
        """The Sender failed for good: from now on every send raises at once."""
        self._fatal = error
        self._appender.hot = False
        self._appender.bind(None)
        self._accumulator.refuse_appends(error)

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            err = KafkaError(str(self._fatal))
            raise err from self._fatal.__cause__

    async def _send(self, topic: str, value: Any, key: Any, partition: int | None,
                    timestamp_ms: int | None, headers: Sequence[Header] | None) -> RecordFuture:
        if self._state != _RUNNING or (self._appender.bound_loop() is None
                                       and asyncio.get_running_loop() is not self._loop):
            self._raise_not_running()
        self._raise_if_failed()
        txn = self._txn
        if txn is not None:
            txn.check_send()
            if self._fast and headers is None:
                # Appends now, without suspending: into the open transaction.
                fut = self._appender.append(topic, value, key, partition, timestamp_ms)
                if fut is not None:
                    return fut
            # The slow path may suspend (metadata, memory): the record goes into the
            # transaction open now or nowhere (commit waits for it to be appended).
            number = txn.join()
            try:
                guard = partial(txn.machine.check_joined, number)
                if self._interceptors:
                    return await self._send_intercepted(topic, value, key, partition,
                                                        timestamp_ms, headers, guard)
                return await self._send_slow(topic, value, key, partition, timestamp_ms,
                                             headers, guard)
            finally:
                txn.leave()
        if self._interceptors:
            return await self._send_intercepted(topic, value, key, partition, timestamp_ms,
                                                headers)
        return await self._send_slow(topic, value, key, partition, timestamp_ms, headers)

    async def _send_intercepted(self, topic: str, value: Any, key: Any,
                                partition: int | None, timestamp_ms: int | None,
                                headers: Sequence[Header] | None,
                                guard: Callable[[], None] | None = None) -> RecordFuture:
        chain = self._interceptors
        rec = chain.on_send(ProducerRecord(topic, value, key, partition, timestamp_ms,
                                           headers))
        try:
            fut = await self._send_slow(rec.topic, rec.value, rec.key, rec.partition,
                                        rec.timestamp_ms, rec.headers, guard)
        except Exception as exc:
            chain.on_acknowledgement(RecordMetadata(
                rec.topic, rec.partition if rec.partition is not None else -1, -1, -1, -1, -1),
                exc)
            raise
        fut.add_done_callback(self._acknowledged)
        return fut

    def _acknowledged(self, fut: RecordFuture) -> None:
        exc = fut.exception()
        if exc is None:
            self._interceptors.on_acknowledgement(fut.result(), None)
        else:
            self._interceptors.on_acknowledgement(
                RecordMetadata(fut.topic, fut.partition, -1, -1, -1, -1), exc)

    async def _send_slow(self, topic: str, value: Any, key: Any, partition: int | None,
                         timestamp_ms: int | None,
                         headers: Sequence[Header] | None,
                         guard: Callable[[], None] | None = None) -> RecordFuture:
        """Everything the native fast path leaves to Python: serializers, type checks
        with typed errors, metadata waits, new batches, memory waits, headers."""
        key_obj, value_obj = key, value  # a custom Partitioner gets them too
        key_ser, value_ser = self._key_serializer, self._value_serializer
        if self._topic_serializers:  # a registry lookup on a subject's first use only
            key, value = await serialize_for_topic(topic, key, value, key_ser, value_ser)
            key_ser = value_ser = None
            if self._state != _RUNNING:
                self._raise_not_running()
            if guard is not None:
                guard()
        key, value, checked, timestamp_ms = prepare_record(
            topic, key, value, headers, timestamp_ms, key_ser, value_ser)
        record_size = check_record_size(key, value, checked, self._max_request_size,
                                        self.config.buffer_memory)

        info = self._metadata.cluster.topics.get(topic)
        started = 0.0
        # An explicit partition beyond the known count: refresh and wait (Java).
        wanted = partition if type(partition) is int and partition >= 0 else None
        if info is None or (wanted is not None and wanted >= len(info.partitions)):
            started = time.monotonic()
            info = await self._metadata.wait_for_topic(topic, self._max_block_s, wanted)
            if self._state != _RUNNING:
                self._raise_not_running()
            if guard is not None:
                guard()
            self._accumulator.learn_growth_cap(topic)
        partitioner = self._partitioner
        cluster = self._metadata.cluster
        part = partitioner.partition(topic, key, partition, info, value=value,
                                     key_obj=key_obj, value_obj=value_obj, cluster=cluster)
        remaining = self._max_block_s - (time.monotonic() - started if started else 0.0)
        res = await self._accumulator.append(
            topic, info, part, timestamp_ms, key, value, checked, record_size,
            sticky=partitioner.new_batch_hook(topic, key, partition, value=value,
                                              key_obj=key_obj, value_obj=value_obj,
                                              cluster=cluster),
            max_block_s=max(remaining, 0.0), guard=guard)
        if res.new_batch:
            self._on_new_batch(res.batch)
        batch, index = res.batch, res.index
        return RecordFuture(batch, index, timestamp_ms,
                            -1 if key is None else len(key),
                            -1 if value is None else len(value))

    async def send_many(self, topic: str, values: Sequence[Any],
                        keys: Sequence[Any] | None = None, *, partition: int | None = None,
                        timestamp_ms: int | None = None,
                        headers: Sequence[Sequence[Header] | None] | None = None,
                        timestamps: Sequence[int | None] | None = None) -> SendManyResult:
        """Append many records to one topic in a native loop; returns once all are buffered.

        ``values`` (and ``keys``, of the same length) are sequences of bytes-like or None.
        ``headers`` has one entry per record: None or a list of ``(str, bytes | None)``
        pairs, as :meth:`send` takes them. ``timestamps`` has one entry per record: int ms
        since the epoch, or None for "now"; ``timestamp_ms`` is one timestamp for all
        (give one of the two, else TypeError). Each of these may also be a pyarrow
        ``Array``/``ChunkedArray``: binary or string values and keys, headers as
        ``list<struct<key: string, value: binary>>`` (Spark's Kafka schema), timestamps
        as int64 ms or ``timestamp``; the native loop reads their buffers.
        Partitioning, memory bounds and errors are those of :meth:`send`; the records of
        one partition keep their order. ``await`` the result for the acknowledgement of
        all of them. If record ``i`` is refused (a typed error; a
        :class:`~aioproducer.SerializationError` says ``record i``), records ``0..i-1`` stay
        buffered and will be sent; the error says how many.
        """
        if timestamps is not None and timestamp_ms is not None:
            raise TypeError("send_many: give timestamp_ms (one for every record) or "
                            "timestamps (one per record), not both")
        call = self._send_many_call
        if headers is not None or timestamps is not None:
            call = partial(self._send_many_call, headers=headers, timestamps=timestamps)
        if self._tracing is not None:  # one span for the call (aioproducer.otel)
            return await self._tracing.send_many(
                partial(self._send_many_call, timestamps=timestamps), topic, values, keys,
                partition, timestamp_ms, headers)
        return await call(topic, values, keys, partition, timestamp_ms)

    async def _send_many_call(self, topic: str, values: Sequence[Any],
                              keys: Sequence[Any] | None, partition: int | None,
                              timestamp_ms: int | None, *,
                              headers: Sequence[Sequence[Header] | None] | None = None,
                              timestamps: Sequence[int | None] | None = None
                              ) -> SendManyResult:
        if self._state != _RUNNING or asyncio.get_running_loop() is not self._loop:
            self._raise_not_running()
        self._raise_if_failed()
        bulk = BulkInput(values, keys, headers, timestamps)
        txn = self._txn
        if txn is None:
            return await self._send_many(topic, bulk, partition, timestamp_ms, None)
        number = txn.join()
        try:
            return await self._send_many(topic, bulk, partition, timestamp_ms,
                                         partial(txn.machine.check_joined, number))
        finally:
            txn.leave()

    async def _send_many(self, topic: str, bulk: BulkInput, partition: int | None,
                         timestamp_ms: int | None,
                         guard: Callable[[], None] | None) -> SendManyResult:
        n = bulk.count
        touched: list[ProducerBatch] = []
        firsts: list[int] = []  # per touched entry: the index of the call's first record
        ends: list[int] = []  # and the end of the run of the call's records from it
        append_many = self._appender.append_many if self._fast else None
        native: tuple[Any, Any, Any, Any] = (None, None, None, None)
        if append_many is not None:
            native = bulk.native()
        vals, ks, hs, tss = native
        i = 0
        while i < n:
            if append_many is not None:
                if guard is not None and i:
                    guard()  # the loop suspended since the last check
                done = len(touched)
                i = append_many(topic, vals, ks, i, partition, timestamp_ms, touched,
                                hs, tss, n, firsts)
                # Nothing else ran in append_many: each batch it wrote into holds the
                # call's records from its first one there to the batch's end now. (The
                # Python path below may wait, and other sends write in meanwhile.)
                for k in range(done, len(touched)):
                    ends.append(touched[k].record_count)
                if i >= n:
                    break
            try:
                value, key, headers, ts = bulk.row(i)
                send_one = self._send_intercepted if self._interceptors else self._send_slow
                fut = await send_one(topic, value, key, partition,
                                     timestamp_ms if bulk.timestamps is None else ts,
                                     headers, guard)
            except BaseException as exc:
                err = _send_many_error(exc, i, touched, firsts, ends)
                if err is exc:
                    raise
                raise err from exc
            touched.append(fut.batch)
            firsts.append(fut.index)
            ends.append(fut.index + 1)
            i += 1
            if self._state != _RUNNING:
                self._raise_not_running()
        return SendManyResult(touched, n, firsts, ends)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[Header] | None = None) -> RecordMetadata:
        """``send()`` and wait for the acknowledgement.

        The record's batch does not linger: it is sendable at the Sender's next pass
        (records appended before that pass, in the same turn of the event loop, still
        share it). See "Latency of send_and_wait" in docs/performance.md.
        """
        if self._linger_zero:
            fut = await self.send(topic, value, key, partition=partition,
                                  timestamp_ms=timestamp_ms, headers=headers)
            return await fut
        task = asyncio.current_task()
        self._pass_for_task = task
        try:
            fut = await self.send(topic, value, key, partition=partition,
                                  timestamp_ms=timestamp_ms, headers=headers)
        except BaseException:
            if self._pass_for_task is task:
                self._pass_for_task = None
            self._pass_new_batch(None)
            raise
        if self._pass_for_task is task:
            self._pass_for_task = None
        batch = fut.batch
        if self._accumulator.hurry(batch):
            if not self._pass_new_batch(batch):
                self._wake_sender()
        else:
            self._pass_new_batch(None)
        return await fut

    def _pass_new_batch(self, batch: ProducerBatch | None) -> bool:
        """send_and_wait() under a linger, right after its send(): if that send opened
        ``batch`` and left the Sender asleep (see :meth:`_on_new_batch`), the Sender's
        pass runs as a callback at the loop's next turn (:meth:`_pass_for`), where the
        Sender task would have run it: records other tasks append in this turn still
        share the batch. The callback is cheaper than the task's pass (no sleep, no
        timer, no delay to work out). True if this was done; False if the send did
        not open ``batch`` (the Sender is awake or looks before the linger ends), and
        the caller wakes the Sender. ``None``: the send failed or its batch is full; a
        batch left asleep gets its wakeup."""
        skipped = self._pass_batch
        if skipped is None:
            return False
        self._pass_batch = None
        sender = self._sender
        if sender is None:
            return False
        if skipped is not batch:
            sender.wakeup()
            return batch is None
        loop = batch.result.get_loop()
        if _nothing_runs_before_next_turn(loop):
            # The callback would be the first thing the next turn runs, and nothing
            # else runs before it: making the pass now is the same, without a turn.
            self._pass_for(sender, batch)
        else:
            loop.call_soon(self._pass_for, sender, batch)
        return True

    def _pass_for(self, sender: Sender, batch: ProducerBatch) -> None:
        """The Sender's pass for a send_and_wait() batch (see :meth:`_pass_new_batch`);
        the Sender task is woken if the batch is still queued after it (held behind
        its partition's request in flight, or waiting for a connection or the producer
        id), or if the producer is closing."""
        if self._state == _RUNNING and sender is self._sender:
            # This batch alone when no other partition has a batch queued (else the
            # pass takes those of its leader along, as Java's drain does) and it can go
            # now (send_new: its partition's one queued batch, as under linger 0);
            # else a full pass.
            now = time.monotonic()
            if self._accumulator.queued_elsewhere(batch.tp) \
                    or not sender.send_new(batch, now):
                sender.run_once(now, want_delay=False)
            dq = self._accumulator.batches.get(batch.tp)
            if not (dq and batch in dq):
                return
        sender.wakeup()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waits for metadata up to ``max_block_ms``)."""
        if self._state != _RUNNING:
            self._raise_not_running()
        info = await self._metadata.wait_for_topic(topic, self._max_block_s)
        return [p.partition for p in info.partitions]

    def _on_new_batch(self, batch: ProducerBatch) -> None:
        """A send opened a new batch: the Sender should look again."""
        sender = self._sender
        if sender is None:
            return
        if self._linger_zero:
            # linger_ms=0: the batch is sendable now; one Sender pass here writes it
            # without waiting for the Sender task's next turn of the loop: this batch
            # alone when it can go now (send_new), else a full pass.
            now = time.monotonic()
            if not sender.send_new(batch, now):
                sender.run_once(now, want_delay=False)
            if batch.full:
                return  # drained and written: nothing left for the Sender task
            if sender.in_flight.get(batch.tp):
                # It waits for its partition's request in flight, whose answer (or
                # failure) wakes the Sender as this batch is queued; a pass now would
                # find nothing to do, at the cost of a turn of the loop and a timer.
                return
        elif self._txn is None and self._pass_for_task is not None \
                and self._pass_batch is None \
                and self._pass_for_task is asyncio.current_task():
            # send_and_wait()'s own send, which has the Sender's pass made by a
            # callback at the next turn of the loop (_pass_new_batch): no wakeup of
            # the Sender task.
            self._pass_batch = batch
            return
        elif self._txn is None and self._accumulator.lingers(batch) \
                and sender.looks_within(self._accumulator.linger):
            # It only lingers, and the Sender looks again before its linger ends (a
            # pass is due, or its timer fires by then): a pass now would find nothing
            # to send, and with thousands of partitions each pass walks them all. (In
            # a transaction the pass also adds the new partition: it runs at once.)
            return
        sender.wakeup()

    # -- observability -----------------------------------------------------------

    def metrics(self) -> MetricsSnapshot:
        """A snapshot of the producer's metrics, by the Java producer's names
        (``record-send-rate``, ``batch-size-avg``, ``request-latency-avg``...); see
        :mod:`aioproducer.metrics`. Cheap enough to call every second."""
        acc = self._accumulator
        client = self._client
        return self._metrics.snapshot(
            buffer_total=acc.pool.total_memory, buffer_available=acc.pool.available_memory,
            in_flight=client.in_flight_total() if client is not None else 0,
            metadata_age_s=self._metadata.age(time.monotonic()),
            waiting_threads=acc.memory_waiters)

    def _start_telemetry(self, client: KafkaClient) -> None:
        # Through a weak reference, as the Sender's on_fatal: the push task must not
        # keep an abandoned producer alive.
        ref = weakref.ref(self)

        def snapshot() -> MetricsSnapshot | None:
            producer = ref()
            return producer.metrics() if producer is not None else None

        c = self.config
        resource = {"transactional_id": c.transactional_id} if c.transactional_id else {}
        from ._version import __version__
        from .telemetry import ClientTelemetry  # the push's code when it is on
        self._telemetry = ClientTelemetry(client, snapshot,
                                          request_timeout_ms=c.request_timeout_ms,
                                          resource=resource, scope_version=__version__)
        self._telemetry.start()

    async def client_instance_id(self, timeout: float | None = None) -> uuid.UUID | None:
        """The client instance id the cluster gave this producer for its metrics
        push (KIP-714), as Java's ``clientInstanceId(Duration)``.

        Waits up to ``timeout`` seconds (None: ``max_block_ms``) for the first
        GetTelemetrySubscriptions answer; None if there is none by then (a cluster
        without a client telemetry receiver never answers). Raises
        :class:`IllegalStateError` when ``enable_metrics_push`` is off.
        """
        if not self.config.enable_metrics_push:
            raise IllegalStateError("client metrics push is off: client_instance_id() "
                                    "needs enable_metrics_push=True")
        if timeout is None:
            timeout = self._max_block_s
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
        elif timeout < 0:
            raise ValueError(f"timeout must not be negative, got {timeout}")
        if self._state != _RUNNING:
            self._raise_not_running()
        self._check_loop()
        assert self._telemetry is not None
        return await self._telemetry.client_instance_id(float(timeout))

    # -- transactions ------------------------------------------------------------

    def _transactions(self, what: str) -> TransactionManager:
        if self._state != _RUNNING:
            self._raise_not_running()
        self._check_loop()
        if self._txn is None:
            raise IllegalStateError(
                f"{what}: this producer is not transactional; set transactional_id")
        return self._txn

    @property
    def transaction_version(self) -> int | None:
        """The transaction protocol in use: 2 (KIP-890: partitions join implicitly,
        every commit or abort bumps the epoch) when the cluster's finalized
        ``transaction.version`` feature is 2 or more, else 1; None before
        :meth:`init_transactions` (and for a producer that is not transactional)."""
        txn = self._txn
        return None if txn is None else txn.machine.version

    @property
    def transaction_sequence(self) -> int:
        """The number of the transaction begun last (1 for the first, 0 before it).

        A ``send()`` joins the transaction open when it is *called*: read this just
        before the call. If ``send()`` returns, the record is in that transaction (a
        commit waits for sends that joined to finish appending); if that transaction
        is aborted before the record could be appended, ``send()`` raises
        :class:`TransactionAbortedError` and nothing was buffered. A ``send()`` called
        while a commit or abort runs, or with no transaction open, raises."""
        txn = self._txn
        return 0 if txn is None else txn.machine.number

    async def init_transactions(self) -> None:
        """Register ``transactional_id`` with its coordinator; call once, before the
        first transaction.

        Fences any older producer with the same id (it gets
        :class:`ProducerFencedError`) and aborts a transaction it left open. Bounded by
        ``max_block_ms`` (:class:`KafkaTimeoutError`; the call may be repeated).
        """
        await self._transactions("init_transactions()").init()

    async def prepare_transaction(self) -> tuple[int, int] | None:
        """Send the open transaction's records and give the transaction up, open,
        for another process to end: returns (producer id, epoch) to pass to
        :meth:`resume_transaction` of a producer with the same ``transactional_id``
        (None if the transaction holds nothing). As Flink's Kafka sink does, for
        two-phase commits (``aioproducer.spark_source``). Afterwards this producer can
        only be closed; close() leaves the transaction open. It must be ended within
        ``transaction_timeout_ms`` or the coordinator aborts it."""
        return await self._transactions("prepare_transaction()").hand_over(self.flush)

    async def resume_transaction(self, producer_id: int, epoch: int) -> None:
        """Instead of :meth:`init_transactions`: take over the open transaction that
        :meth:`prepare_transaction` handed over, then end it with
        :meth:`commit_transaction` or :meth:`abort_transaction`. Committing a
        transaction that was already committed succeeds (the coordinator takes it as a
        retry); one the coordinator aborted (timed out) or whose id a newer producer
        took raises :class:`ProducerFencedError` (or a
        :class:`BrokerResponseError` such as INVALID_TXN_STATE). The resumed
        transaction takes no records (``send()`` raises :class:`IllegalStateError`);
        the next transaction of this producer begins under a new epoch."""
        await self._transactions("resume_transaction()").resume(producer_id, epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._transactions("begin_transaction()").begin()

    async def commit_transaction(self) -> None:
        """Send what is buffered, then commit the transaction.

        If a record of the transaction failed, raises
        :class:`TransactionAbortableError`: call :meth:`abort_transaction`. Cancelled
        before its EndTxn, the transaction stays open; cancelled or timed out after it
        (:class:`KafkaTimeoutError`), only ``commit_transaction()`` may follow, and it
        finishes the commit (so does :meth:`close`). See "When the caller cancels,
        times out, closes or hands over" in docs/transactions.md.
        """
        await self._transactions("commit_transaction()").commit(self.flush, self._hurry)

    def _hurry(self, on: bool) -> None:
        """While commit_transaction() waits for sends to append: every batch is
        sendable at once (as during flush()), so sends waiting for memory get it."""
        if on:
            self._accumulator.begin_flush()
            self._wake_sender()
        else:
            self._accumulator.end_flush()

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not yet sent fail with
        :class:`TransactionAbortedError`, and what was written is never read by
        ``read_committed`` consumers. Cancelled or timed out, only
        ``abort_transaction()`` may follow, and it finishes the abort (so does
        :meth:`close`)."""
        txn = self._transactions("abort_transaction()")
        acc = self._accumulator
        sender = self._sender
        assert sender is not None

        async def wait_in_flight() -> None:
            pending = [b.result for b in acc.incomplete]
            if pending:
                await asyncio.wait(pending)

        await txn.abort(sender.abort_queued, wait_in_flight)

    async def send_offsets_to_transaction(
            self, offsets: Mapping[Any, Any] | Iterable[Any],
            group_metadata: str | GroupMetadata | Any) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        ``offsets`` maps ``(topic, partition)`` to the next offset to consume (or to
        ``(offset, metadata)``); an iterable of objects with ``topic``, ``partition``
        and ``offset`` (confluent-kafka's ``TopicPartition``) also works.
        ``group_metadata`` is the consumer group id, or a :class:`GroupMetadata` (with
        generation and member id, to fence zombie group members).

        Empty ``offsets`` are a no-op (an empty poll starts nothing). Offsets whose call
        timed out or was cancelled stay queued, and go out before the commit's EndTxn;
        calls from several tasks are sent one at a time, in order.
        """
        await self._transactions("send_offsets_to_transaction()").send_offsets(
            offsets, group_metadata)

    def transaction(self) -> AbstractAsyncContextManager[Producer]:
        """``async with producer.transaction():`` begins a transaction, commits it when
        the block ends, and aborts it if the block raises (the exception propagates)."""
        from .transactions import transaction_block
        return transaction_block(self, self._begin_block, log)

    def _begin_block(self) -> TxnStateMachine:
        txn = self._transactions("transaction()")
        txn.begin()
        return txn.machine

    # -- helpers -----------------------------------------------------------------

    def _raise_not_running(self) -> NoReturn:
        raise_not_running(self._loop, self._state == _NEW, "Producer")

    def _check_loop(self) -> None:
        check_loop(self._loop)

    def __repr__(self) -> str:
        state = ("new", "running", "closing", "closed")[self._state]
        return f"<Producer {self.config.client_id!r} {state}>"

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if getattr(self, "_state", _CLOSED) not in (_RUNNING, _CLOSING):
            return
        _warn(f"unclosed {self!r}: call 'await producer.close()' or use 'async with'",
              ResourceWarning, source=self)
        loop, sender, client = self._loop, self._sender, self._client
        if self._telemetry is not None:
            self._telemetry.stop()
        acc = self._accumulator
        if loop is None or loop.is_closed():
            return

        async def abandon() -> None:
            acc.close(ProducerClosedError("the producer was garbage-collected"))
            acc.abort_all(ProducerClosedError(
                "the producer was garbage-collected without close()"))
            if sender is not None:
                await sender.stop()
            if client is not None:
                await client.close()

        def schedule() -> None:
            task = loop.create_task(abandon())
            _abandoned.add(task)
            task.add_done_callback(_abandoned.discard)

        loop.call_soon_threadsafe(schedule)




def _nothing_runs_before_next_turn(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a callback scheduled now would be the next thing ``loop`` runs: on
    asyncio's own loops, when nothing waits in its ready queue (the callbacks left in
    this turn, and those already scheduled for the next). The next turn then starts
    with it: the I/O events and timers of that turn queue behind it. On other loops
    (uvloop) this is not known: False."""
    ready = getattr(loop, "_ready", None)
    return type(ready) is deque and not ready


def _python_path(ref: weakref.ref[Producer]) -> Callable[
        [str, Any, Any, int | None, int | None, Sequence[Header] | None],
        Coroutine[Any, Any, RecordFuture]]:
    """The appender's ``slow``: ``send()``'s Python path, for a producer held weakly."""

    def slow(topic: str, value: Any, key: Any, partition: int | None,
             timestamp_ms: int | None,
             headers: Sequence[Header] | None) -> Coroutine[Any, Any, RecordFuture]:
        producer = ref()
        if producer is None:  # (only a PendingSend that outlived its producer)
            raise ProducerClosedError("cannot send: the producer was garbage-collected")
        return producer._send_any(topic, value, key, partition, timestamp_ms, headers)

    return slow
