"""A Produce peer in memory, for Sender unit tests without a broker (as franz-go's kfake).

:class:`FakeBroker` is one node (id 0) that leads every partition. It decodes each
Produce request the Sender writes (kio reads the body; the record batch headers are
read by hand), keeps a log per partition, and keeps what a Kafka broker keeps per
producer id and partition for idempotence: the epoch, the last sequence written and
the last five batches (a batch sent again is answered with its first offset, not
written twice). It answers as Kafka does: OUT_OF_ORDER_SEQUENCE_NUMBER for a gap,
INVALID_PRODUCER_EPOCH for an older epoch, a new epoch only from sequence 0.

Faults are scripted per partition, in the order they are asked for:

- ``refuse(tp, code, times=1)``: answer ``code`` without writing;
- ``lose_answer(tp, times=1)``: write the batch, then lose the answer (the request
  fails with a lost connection: the outcome is unknown to the producer);
- ``hold(tp)`` / ``release(tp)``: answer nothing for the partition's requests until
  released (then write and answer them, in order).

:class:`FakeClient` is the part of ``KafkaClient`` the Sender and the idempotence
state use, with :class:`FakeConnection`\\ s to the broker; InitProducerId is answered
with a new producer id each time. :func:`parts` builds an accumulator, metadata, a
Sender and an idempotence state wired as the Producer wires them.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from aioproducer.accumulator import RecordAccumulator
from aioproducer.compression import codec_id, make_compressor
from aioproducer.config import ProducerConfig
from aioproducer.errors import KafkaConnectionError
from aioproducer.metadata import Cluster, Metadata, PartitionInfo, TopicInfo
from aioproducer.net.apis import ApiKey
from aioproducer.net.protocol import PartitionResult, ProduceAnswer, request_module
from aioproducer.producer_id import ProducerIdManager
from aioproducer.sender import Sender
from aioproducer.wiring import wire_sender

TopicPartition = tuple[str, int]

_BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")  # baseOffset .. recordsCount (61 bytes)


@dataclass
class Written:
    """A record batch in a partition's log."""

    base_offset: int
    producer_id: int
    epoch: int
    base_sequence: int
    count: int
    data: bytes


@dataclass
class _ProducerState:
    epoch: int
    last_sequence: int = -1
    recent: deque[Written] = field(default_factory=lambda: deque(maxlen=5))


@dataclass
class _Held:
    respond: Callable[[], None]


class FakeBroker:
    """One node leading every partition; logs, idempotence, scripted faults."""

    def __init__(self) -> None:
        self.logs: dict[TopicPartition, list[Written]] = {}
        self.requests = 0
        self._states: dict[tuple[int, TopicPartition], _ProducerState] = {}
        self._refusals: dict[TopicPartition, deque[int]] = {}
        self._lost: dict[TopicPartition, int] = {}
        self._held: dict[TopicPartition, list[Callable[[], None]]] = {}
        self._holding: set[TopicPartition] = set()
        self._misnamed: dict[TopicPartition, int] = {}
        self._next_producer_id = 1000

    # -- scripting -------------------------------------------------------------------

    def refuse(self, tp: TopicPartition, code: int, times: int = 1) -> None:
        self._refusals.setdefault(tp, deque()).extend([code] * times)

    def lose_answer(self, tp: TopicPartition, times: int = 1) -> None:
        self._lost[tp] = self._lost.get(tp, 0) + times

    def misname(self, tp: TopicPartition, times: int = 1) -> None:
        """The next ``times`` answers for ``tp`` name partition ``tp[1] + 1`` instead
        (written there, offset 0): a broker bug, or a corrupted answer."""
        self._misnamed[tp] = self._misnamed.get(tp, 0) + times

    def hold(self, tp: TopicPartition) -> None:
        self._holding.add(tp)

    def release(self, tp: TopicPartition) -> None:
        self._holding.discard(tp)
        for respond in self._held.pop(tp, []):
            respond()

    # -- what was written ---------------------------------------------------------------

    def records(self, tp: TopicPartition) -> list[tuple[int, int]]:
        """(offset, sequence) of every record written to ``tp``, in log order."""
        out = []
        for w in self.logs.get(tp, []):
            out.extend((w.base_offset + i, w.base_sequence + i) for i in range(w.count))
        return out

    # -- the protocol ----------------------------------------------------------------------

    def new_producer_id(self) -> int:
        self._next_producer_id += 1
        return self._next_producer_id

    def produce(self, version: int, body: bytes) -> list[tuple[TopicPartition, Callable[
            [], PartitionResult]]]:
        """Decode a Produce request; for each partition, what answers it when the
        answer is due (the write happens then too)."""
        self.requests += 1
        request_t = request_module(ApiKey.PRODUCE, version).ProduceRequest
        request, _ = entity_reader(request_t)(body, 0)
        out = []
        for topic in request.topic_data:
            name = str(topic.name)
            for part in topic.partition_data:
                tp = (name, int(part.index))
                records = bytes(part.records or b"")
                out.append((tp, self._answer_for(tp, int(part.index), records)))
        return out

    def _answer_for(self, tp: TopicPartition, index: int,
                    records: bytes) -> Callable[[], PartitionResult]:
        if self._misnamed.get(tp):
            self._misnamed[tp] -= 1
            return lambda: PartitionResult(index + 1, 0, 0)
        refusals = self._refusals.get(tp)
        if refusals:
            code = refusals.popleft()
            return lambda: PartitionResult(index, code, -1)

        def write() -> PartitionResult:
            code, offset = self._write(tp, records)
            return PartitionResult(index, code, offset)

        return write

    def _write(self, tp: TopicPartition, records: bytes) -> tuple[int, int]:
        (_base, _length, _leader_epoch, _magic, _crc, _attrs, _delta, _ts, _max_ts, pid,
         epoch, seq, count) = _BATCH_HEADER.unpack_from(records, 0)
        log = self.logs.setdefault(tp, [])
        next_offset = log[-1].base_offset + log[-1].count if log else 0
        if pid >= 0:
            state = self._states.get((pid, tp))
            if state is None or epoch > state.epoch:
                if seq != 0:
                    return int(ErrorCode.out_of_order_sequence_number), -1
                state = self._states[(pid, tp)] = _ProducerState(epoch)
            elif epoch < state.epoch:
                return int(ErrorCode.invalid_producer_epoch), -1
            for w in state.recent:  # sent again: the first offset it was written at
                if w.base_sequence == seq and w.count == count:
                    return 0, w.base_offset
            if seq != state.last_sequence + 1:
                return int(ErrorCode.out_of_order_sequence_number), -1
            state.last_sequence = seq + count - 1
        written = Written(next_offset, pid, epoch, seq, count, records)
        log.append(written)
        if pid >= 0:
            state.recent.append(written)
        return 0, next_offset


class FakeConnection:
    """What the Sender and the idempotence state use of a ``BrokerConnection``."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.in_flight = 0
        self.can_write = True
        self.api_versions = {int(ApiKey.PRODUCE): (3, 13),
                             int(ApiKey.INIT_PRODUCER_ID): (0, 5)}
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        return min(hi, self.api_versions.get(int(api_key), (0, hi))[1])

    async def request(self, request: Any, response_type: Any) -> Any:
        assert type(request).__name__ == "InitProducerIdRequest", request
        return SimpleNamespace(error_code=0, producer_id=self.broker.new_producer_id(),
                               producer_epoch=0)

    def send_raw(self, api_key: int, api_version: int,
                 body_parts: Sequence[bytes | bytearray | memoryview], *, flexible: bool,
                 expect_response: bool, timeout_ms: int | None = None,
                 decode: Any = None) -> asyncio.Future[Any] | None:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def reply(answer: Any, exc: BaseException | None) -> None:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(answer)

        self.send_with_reply(api_key, api_version, body_parts, flexible=flexible,
                             decode=decode, reply=reply, timeout_ms=timeout_ms)
        return fut if expect_response else None

    def send_with_reply(self, api_key: int, api_version: int,
                        body_parts: Sequence[bytes | bytearray | memoryview], *,
                        flexible: bool, decode: Any, reply: Any,
                        timeout_ms: int | None = None) -> None:
        assert int(api_key) == int(ApiKey.PRODUCE)
        loop = asyncio.get_running_loop()
        body = b"".join(bytes(p) for p in body_parts)
        answers = self.broker.produce(api_version, body)
        self.in_flight += 1
        broker = self.broker
        tps = [tp for tp, _ in answers]

        def respond() -> None:
            if any(tp in broker._holding for tp in tps):
                held = next(tp for tp in tps if tp in broker._holding)
                broker._held.setdefault(held, []).append(respond)
                return
            results = [(tp, answer()) for tp, answer in answers]
            self.in_flight -= 1
            lost = [tp for tp in tps if broker._lost.get(tp)]
            if lost:
                for tp in lost:
                    broker._lost[tp] -= 1
                reply(None, KafkaConnectionError("the connection was lost (fake)"))
            else:
                reply(ProduceAnswer(0, [(tp[0], None, r) for tp, r in results]), None)

        loop.call_soon(respond)


class FakeClient:
    """What the Sender and the idempotence state use of a ``KafkaClient``."""

    def __init__(self, broker: FakeBroker) -> None:
        self.conn = FakeConnection(broker)
        self.on_ready_change: Any = None
        self.on_disconnect: Any = None

    def ready(self, node: int) -> bool:
        return True

    def ready_connection(self, node: int) -> FakeConnection:
        return self.conn

    def connection(self, node: int) -> FakeConnection:
        return self.conn

    def connections(self) -> list[FakeConnection]:
        return [self.conn]

    async def connect(self, node: int, timeout: float) -> FakeConnection:
        return self.conn

    def least_loaded_node(self) -> int:
        return 0

    def security_error(self, node: int) -> None:
        return None

    def in_flight_total(self) -> int:
        return self.conn.in_flight

    def throttle(self, node: int, ms: float) -> None:
        pass

    def add_nodes(self, nodes: Any) -> None:
        pass

    def update_nodes(self, nodes: Any) -> None:
        pass

    async def fetch_metadata(self, topics: Any, **kwargs: Any) -> Any:
        raise KafkaConnectionError("no metadata from the fake broker: it keeps its own")

    async def topic_max_message_bytes(self, topic: str, timeout_s: float) -> int:
        raise KafkaConnectionError("not known to the fake broker")


@dataclass
class Parts:
    broker: FakeBroker
    client: FakeClient
    metadata: Metadata
    accumulator: RecordAccumulator
    sender: Sender
    pid: ProducerIdManager | None
    info: dict[str, TopicInfo]

    async def send(self, topic: str, value: bytes, partition: int = 0,
                   key: bytes | None = None) -> Any:
        """Append one record (as the Producer's Python path does) and wake the Sender;
        returns the record's (batch, index)."""
        res = await self.accumulator.append(
            topic, self.info[topic], partition, 1_700_000_000_000, key, value, None,
            len(value) + 64, sticky=None, max_block_s=5.0)
        self.sender.wakeup()
        return res

    async def close(self) -> None:
        await self.sender.stop()


def parts(topics: dict[str, int], **options: Any) -> Parts:
    """The parts of an idempotent producer (unless ``enable_idempotence=False``) on a
    fake broker that leads every partition of ``topics`` (name -> partitions), wired
    as the Producer wires them; the Sender task is started (call within a loop)."""
    config = ProducerConfig.from_options(None, **options)
    broker = FakeBroker()
    client = FakeClient(broker)
    metadata = Metadata(max_age_ms=3_600_000, retry_backoff_ms=config.retry_backoff_ms)
    info = {t: TopicInfo(t, tuple(PartitionInfo(p, 0) for p in range(n)))
            for t, n in topics.items()}
    leaders = {(t, p): 0 for t, n in topics.items() for p in range(n)}
    metadata.refresh_done(0.0, Cluster(leaders=leaders, topics=info), list(topics))
    acc = RecordAccumulator(
        batch_size=config.batch_size, batch_max_size=config.batch_size,
        buffer_memory=config.buffer_memory, linger_ms=config.linger_ms,
        retry_backoff_ms=config.retry_backoff_ms,
        retry_backoff_max_ms=config.retry_backoff_max_ms,
        delivery_timeout_ms=config.delivery_timeout_ms,
        codec=codec_id(config.compression_type),
        compressor=make_compressor(config.compression_type, config.compression_level),
        max_request_size=config.max_request_size)
    fake: Any = client
    pid = ProducerIdManager(fake, config) if config.enable_idempotence else None
    sender = Sender(config, fake, metadata, acc, pid=pid)
    wire_sender(sender, fake, metadata, acc)
    sender.start()
    return Parts(broker, client, metadata, acc, sender, pid, info)
