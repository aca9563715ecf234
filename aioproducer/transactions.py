"""Transactions: the coordinator requests (Java's TransactionManager).

A transactional producer talks to two coordinators besides the partition leaders:
the *transaction coordinator* of its ``transactional_id`` (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and the *group coordinator* of a
consumer group (TxnOffsetCommit). Both are found with FindCoordinator and looked up
again when a broker says it is no longer the coordinator.

Two protocols, chosen as the Java client (4.x) chooses, from the cluster's finalized
``transaction.version`` feature (ApiVersions), at init_transactions() (an upgrade to
version 2 is taken at the end of a transaction, with an epoch bump; never back):

* version 1 (classic): every partition is added with AddPartitionsToTxn before the
  first batch goes to it, and AddOffsetsToTxn comes before TxnOffsetCommit; Produce
  is capped at v11, EndTxn at v4, TxnOffsetCommit at v4.
* version 2 (KIP-890 part 2, ``transaction.version`` >= 2): Produce v12+ adds its
  partition to the transaction on the broker's side (no AddPartitionsToTxn round
  trip), TxnOffsetCommit v5+ adds the group's offsets (no AddOffsetsToTxn), and every
  EndTxn (v5+) bumps the epoch: its answer carries the producer id and epoch to use
  next, which the producer keeps.

The states, their transitions and the errors of calls made in the wrong state are
:class:`~aioproducer.transaction_state.TxnStateMachine`'s (shared with
:class:`~aioproducer.testing.MockProducer`); :class:`TransactionManager` drives it
with the coordinators' answers. :func:`transaction_block` is the body of both
producers' ``transaction()`` context manager.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from .config import ProducerConfig
from .errors import (
    BrokerResponseError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    ProducerFencedError,
    ProtocolError,
    RequestTimedOutError,
    TransactionOutcomeUnknownError,
    for_code,
)
from .net.apis import ApiKey
from .net.client import KafkaClient
from .net.connection import BrokerConnection
from .net.protocol import request_module, response_type
from .producer_id import ProducerIdManager
from .transaction_state import FATAL_CODES, FENCED_CODES, TxnState, TxnStateMachine
from .types import TopicPartition

__all__ = ["GroupMetadata", "TransactionManager", "TxnState", "TxnStateMachine",
           "transaction_block"]

log = logging.getLogger("aioproducer.transactions")



_GROUP, _TRANSACTION = 0, 1

# The broker moved the coordinator, or it is not ready yet: find it (again) and retry.
_COORDINATOR_MOVED = frozenset({int(ErrorCode.not_coordinator),
                                int(ErrorCode.coordinator_not_available)})
# Try the same coordinator again after a short backoff.
_RETRY_LATER = frozenset({int(ErrorCode.coordinator_load_in_progress),
                          int(ErrorCode.concurrent_transactions),
                          int(ErrorCode.request_timed_out)})
# Another producer took over the transactional id; errors after which this producer
# can do nothing more (the state machine's lists, under their former names).
_FENCED = FENCED_CODES
_FATAL = FATAL_CODES
_NOT_ATTEMPTED = int(ErrorCode.operation_not_attempted)

# A CONCURRENT_TRANSACTIONS answer usually clears within milliseconds (the previous
# transaction's markers are being written); Java retries it after 20 ms too.
_SHORT_BACKOFF = 0.02


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """The consumer group a transaction commits offsets for.

    ``generation_id``/``member_id``/``group_instance_id`` let the group coordinator
    fence a zombie member (KIP-447); leave them at their defaults when the consumer
    assigns partitions itself instead of joining the group.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(eq=False, slots=True)
class _Offsets:
    """One send_offsets_to_transaction() call's offsets, until they are sent."""

    group: GroupMetadata
    by_topic: dict[str, list[tuple[int, int, str | None]]]
    sent: bool = False


def _kio(api_key: ApiKey, version: int) -> tuple[Any, Any]:
    """kio's request module and response class of ``api_key`` v``version``."""
    return request_module(api_key, version), response_type(api_key, version)


def _timedelta_ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def group_metadata_of(group: str | GroupMetadata | Any) -> GroupMetadata:
    """Accept a group id, a :class:`GroupMetadata`, or any object with the same fields
    (aiokafka's and kafka-python's consumers expose them)."""
    if isinstance(group, GroupMetadata):
        return group
    if isinstance(group, str):
        if not group:
            raise IllegalStateError("send_offsets_to_transaction(): the group id is empty")
        return GroupMetadata(group)
    gid = getattr(group, "group_id", None)
    if not isinstance(gid, str) or not gid:
        raise TypeError(
            "group_metadata must be a group id (str), an aioproducer.GroupMetadata, or an "
            f"object with a 'group_id' attribute; got {type(group).__name__}")
    gen = getattr(group, "generation_id", -1)
    member = getattr(group, "member_id", "")
    instance = getattr(group, "group_instance_id", None)
    return GroupMetadata(gid, int(gen) if gen is not None else -1, str(member or ""),
                         instance if isinstance(instance, str) else None)


def offsets_of(offsets: Mapping[Any, Any] | Iterable[Any]
               ) -> dict[str, list[tuple[int, int, str | None]]]:
    """``{(topic, partition): offset | (offset, metadata)}``, or an iterable of objects
    with ``topic``/``partition``/``offset`` (confluent-kafka's ``TopicPartition``), as
    ``{topic: [(partition, offset, metadata)]}``. Offsets are the *next* offset to read."""
    out: dict[str, list[tuple[int, int, str | None]]] = {}
    items: Iterable[tuple[Any, Any]] = (
        offsets.items() if isinstance(offsets, Mapping) else ((x, x) for x in offsets))
    for key, val in items:
        if isinstance(key, tuple) and len(key) == 2:
            topic, partition = key
        else:
            topic, partition = getattr(key, "topic", None), getattr(key, "partition", None)
        metadata: str | None = None
        if isinstance(val, tuple):
            offset, metadata = val
        elif isinstance(val, int):
            offset = val
        else:
            offset = getattr(val, "offset", None)
            metadata = getattr(val, "metadata", None)
        if not isinstance(topic, str) or not isinstance(partition, int) \
                or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise TypeError(
                "offsets must map (topic, partition) to a next offset >= 0 (or to "
                f"(offset, metadata)); got {key!r}: {val!r}")
        out.setdefault(topic, []).append((partition, offset, metadata))
    return out


_P = TypeVar("_P", bound="_TransactionalProducer")


class _TransactionalProducer(Protocol):
    @property
    def closed(self) -> bool: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...


@asynccontextmanager
async def transaction_block(producer: _P, begin: Callable[[], TxnStateMachine],
                            logger: logging.Logger = log) -> AsyncIterator[_P]:
    """The ``transaction()`` context manager of a producer (real or mock).

    ``begin()`` begins the transaction (raising if it cannot) and returns the
    producer's state machine. The block's end commits; an exception in the block
    aborts (if the transaction is still open and the producer not closed; an abort
    error is logged) and propagates; a commit that fails with an abortable error is
    aborted before its error propagates.
    """
    machine = begin()
    try:
        yield producer
    except BaseException:
        if machine.open and not producer.closed:
            try:
                await producer.abort_transaction()
            except KafkaError as exc:
                logger.warning("could not abort the transaction: %s", exc)
        raise
    try:
        await producer.commit_transaction()
    except KafkaError:
        if machine.state is TxnState.ABORTABLE_ERROR:
            await producer.abort_transaction()
        raise


async def _no_call(conn: BrokerConnection) -> int:
    """A coordinator call that only connects (the connection tells the features)."""
    return 0


class TransactionManager:
    """The coordinator requests of one transactional producer, driving its
    :class:`~aioproducer.transaction_state.TxnStateMachine` (:attr:`machine`); the
    Sender asks it before sending."""

    def __init__(self, client: KafkaClient, config: ProducerConfig,
                 pid: ProducerIdManager, wakeup: Callable[[], None]) -> None:
        assert config.transactional_id is not None
        self.transactional_id: str = config.transactional_id
        self._client = client
        self._pid = pid
        self._wakeup = wakeup
        self._timeout_ms = config.transaction_timeout_ms
        self._max_block_s = config.max_block_ms / 1000.0
        self._request_timeout_s = config.request_timeout_ms / 1000.0
        self._backoff = config.retry_backoff_ms / 1000.0
        self._backoff_max = config.retry_backoff_max_ms / 1000.0
        self.machine = TxnStateMachine(config.transactional_id)
        self.added: set[TopicPartition] = set()
        self.pending: set[TopicPartition] = set()
        self._started = False  # something was added: the coordinator knows the transaction
        # A request that would start the transaction on the coordinator went out, its
        # answer unknown (an abort must then end what the coordinator may hold).
        self._maybe_started = False
        self._end_done = False  # the current EndTxn succeeded (a resumed call skips it)
        self._end_written = False  # the current EndTxn(commit) reached a connection
        # send_offsets_to_transaction() calls not yet answered (a timed-out one stays).
        self._pending_offsets: list[_Offsets] = []
        # One offsets call at a time, in order (tasks calling send_offsets together
        # queue here; commit, abort and prepare wait for the call in progress).
        self._offsets_lock = asyncio.Lock()
        self._offsets_added: set[str] = set()  # version 1: groups AddOffsetsToTxn added
        self._idle: asyncio.Future[None] | None = None  # close() waiting for a call
        self._closing: KafkaError | None = None  # close() was forced: no EndTxn any more
        self._bump_first = False  # an epoch bump before the next batch goes out
        self._add_task: asyncio.Task[None] | None = None
        self._add_next = 0.0
        self._add_failures = 0
        self._coordinators: dict[tuple[int, str], int] = {}
        self._appending = 0  # send() calls that joined the transaction, still appending
        self._appended: asyncio.Future[None] | None = None  # set when that reaches 0
        self.version = 1  # KIP-890 transaction version, chosen by init()

    # -- the state machine's view ----------------------------------------------------

    @property
    def state(self) -> TxnState:
        return self.machine.state

    @property
    def error(self) -> KafkaError | None:
        return self.machine.error

    def check_send(self) -> None:
        """Raise unless records may be appended now (called by send())."""
        self.machine.check_send()

    def join(self) -> int:
        """A send() that may suspend before it appends (metadata, memory) joins the
        open transaction: its number is returned, and commit waits until
        :meth:`leave` is called for it. Raises if no transaction takes records."""
        number = self.machine.joined()
        self._appending += 1
        return number

    def leave(self) -> None:
        """The send() that joined has appended its record(s), or failed."""
        self._appending -= 1
        if self._appending == 0 and self._appended is not None:
            if not self._appended.done():
                self._appended.set_result(None)
            self._appended = None

    async def _wait_appending(self) -> None:
        """Until every send() that joined the transaction has appended or failed
        (each is bounded by ``max_block_ms``)."""
        while self._appending > 0:
            if self._appended is None:
                self._appended = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._appended)

    @property
    def produce_max_version(self) -> int:
        """The highest Produce version the Sender may use: v12+ means version 2."""
        return 13 if self.version >= 2 else 11

    def _cluster_version(self) -> int:
        """2 if the cluster finalized ``transaction.version`` >= 2 (the connection
        with the newest feature epoch says) and the brokers speak Produce v12 and
        EndTxn v5; else 1."""
        best_epoch, level = -2, 0
        v2_apis = True
        for conn in self._client.connections():
            if not conn.api_versions:
                continue
            if conn.finalized_features_epoch > best_epoch:
                best_epoch = conn.finalized_features_epoch
                level = conn.finalized_features.get("transaction.version", 0)
            for key, need in ((ApiKey.PRODUCE, 12), (ApiKey.END_TXN, 5)):
                rng = conn.api_versions.get(key)
                if rng is None or rng[1] < need:
                    v2_apis = False
        return 2 if level >= 2 and v2_apis and best_epoch > -2 else 1

    def _choose_version(self) -> None:
        """At init_transactions() (or resume_transaction()): the version this producer
        starts with, from the finalized feature (as Java's initTransactions())."""
        version = self._cluster_version()
        log.info("transactional producer %r: transaction version %d",
                 self.transactional_id, version)
        self.version = version
        self.machine.version = version

    async def _maybe_upgrade(self) -> None:
        """At the end of a version-1 transaction, if the cluster now finalizes version
        2: bump the epoch, then use version 2 from the next transaction on. The bump
        keeps the first version-2 transaction (whose Produce requests add their
        partitions on the broker's side) from joining the last version-1 one, which
        shares its epoch (KAFKA-18227). A producer never goes back to version 1."""
        if self.version >= 2 or self._cluster_version() < 2:
            return
        await self._init_producer_id(bump=True)
        self.version = 2
        self.machine.version = 2
        log.info("transactional producer %r: the cluster finalized transaction version 2; "
                 "producer id %d now at epoch %d", self.transactional_id,
                 self._pid.producer_id, self._pid.epoch)

    @property
    def blocks_queued(self) -> KafkaError | None:
        """The error to fail queued batches with, when they must not be sent."""
        return self.machine.queued_error()

    # -- state changes from the Sender ------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """A batch or a request of this transaction failed."""
        entered = self.machine.fail(exc)
        if isinstance(exc, InvalidProducerEpochError):
            # KIP-588: abortable; the abort bumps the epoch (EndTxn v5 does it in
            # version 2, an InitProducerId after EndTxn in version 1).
            self._pid.bump_needed = True
        if entered is TxnState.FATAL_ERROR:
            self._log_fatal(exc)
        elif entered is TxnState.ABORTABLE_ERROR:
            log.warning("transaction of %r must be aborted: %s", self.transactional_id, exc)
        self._wakeup()

    def _to_fatal(self, exc: BaseException) -> None:
        self.machine.to_fatal(exc)
        self._log_fatal(exc)

    def _log_fatal(self, exc: BaseException) -> None:
        log.error("transactional producer %r can no longer be used: %s",
                  self.transactional_id, exc)

    def fenced(self, code: int, message: str | None = None) -> KafkaError:
        """The error for a fencing code from a partition leader (fatal)."""
        err = self.machine.fenced(code, message)
        self._log_fatal(err)
        return err

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may go out (the partition is in the transaction).
        Version 2: always (Produce adds the partition); the transaction has started.
        Nothing goes out while an epoch bump is due first (:attr:`_bump_first`)."""
        if self._bump_first:
            return False
        if tp in self.added:
            return True
        if self.version >= 2:
            self.added.add(tp)
            self._started = True
            return True
        self.pending.add(tp)
        return False

    def add_due(self, now: float) -> float:
        """Seconds until the Sender should start the coordinator request the
        transaction's batches wait for (the epoch bump due before the first batch, or
        AddPartitionsToTxn): <= 0 now, inf nothing to do."""
        if self._add_task is not None or (not self.pending and not self._bump_first):
            return float("inf")
        if self.machine.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return float("inf")
        return self._add_next - now

    def start_add(self) -> None:
        loop = asyncio.get_running_loop()
        self._add_task = loop.create_task(
            self._bump_before_sending() if self._bump_first else self._add_partitions())

    def _add_retry_later(self, exc: KafkaError, what: str) -> None:
        self._add_failures += 1
        delay = min(self._backoff * 2 ** (self._add_failures - 1), self._backoff_max)
        if isinstance(exc, BrokerResponseError) and not self.added and \
                int(exc.code) == int(ErrorCode.concurrent_transactions):
            # The previous transaction is still completing: try again soon
            # (Java's 20 ms, for the transaction's first partitions).
            delay = min(delay, _SHORT_BACKOFF)
        self._add_next = asyncio.get_running_loop().time() + delay
        log.debug("%s failed (%s); retrying in %.0f ms", what, exc, delay * 1000)

    async def _await_add(self) -> None:
        """Wait for the AddPartitionsToTxn (or epoch bump) in flight, if any. A forced
        close() cancels it: the caller then gets close()'s error (ProducerClosedError),
        not the CancelledError of a task it never cancelled."""
        task = self._add_task
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            closing = self._closing
            if closing is not None and task.cancelled() \
                    and (me is None or me.cancelling() == 0):
                raise closing from None
            raise

    async def _bump_now(self) -> None:
        """The epoch bump due before any request of this transaction (after a resumed
        transaction), made by the caller when the Sender has not made it yet: an
        AddOffsetsToTxn or TxnOffsetCommit under the old epoch would start a
        transaction that the bump then aborts."""
        while self._bump_first:
            if self._add_task is not None:  # the Sender's bump in progress
                await self._await_add()
                continue
            await self._init_producer_id(bump=True)  # (clears _bump_first)

    async def _bump_before_sending(self) -> None:
        """The epoch bump a transaction's first batch waits for (after a resumed
        transaction: this producer does not know the sequences its records used)."""
        try:
            await self._init_producer_id(bump=True)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            if exc.retriable or isinstance(exc, KafkaTimeoutError):
                self._add_retry_later(exc, "InitProducerId (epoch bump)")
            else:
                self.fail(exc)
        else:
            self._add_failures = 0
            self._bump_first = False
        finally:
            self._add_task = None
            self._wakeup()

    async def _add_partitions(self) -> None:
        tps = sorted(self.pending)
        try:
            await self._add_partitions_once(tps)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            if exc.retriable:
                self._add_retry_later(exc, "AddPartitionsToTxn")
            else:
                self.fail(exc)
        else:
            self._add_failures = 0
            self.pending.difference_update(tps)
            self.added.update(tps)
            self._started = True
        finally:
            self._add_task = None
            self._wakeup()

    async def _add_partitions_once(self, tps: list[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)

        async def call(conn: BrokerConnection) -> int:
            version = conn.version_for(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3)
            req_m, resp_t = _kio(ApiKey.ADD_PARTITIONS_TO_TXN, version)
            req = req_m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=i64(self._pid.producer_id),
                v3_and_below_producer_epoch=i16(self._pid.epoch),
                v3_and_below_topics=tuple(
                    req_m.AddPartitionsToTxnTopic(name=t, partitions=tuple(i32(p) for p in ps))
                    for t, ps in by_topic.items()),
            )
            resp = await conn.request(req, resp_t)
            worst = 0
            for topic in resp.results_by_topic_v3_and_below:
                for part in topic.results_by_partition:
                    code = int(part.partition_error_code)
                    if code and code != _NOT_ATTEMPTED and worst == 0:
                        worst = code
            return worst

        # The Sender retries on its own schedule: one attempt per call here, bounded.
        self._maybe_started = True
        await self._coordinator_call(_TRANSACTION, self.transactional_id,
                                     "AddPartitionsToTxn", call, self._request_timeout_s,
                                     retry=False)

    # -- the public operations -------------------------------------------------------

    @contextmanager
    def _running(self, what: str) -> Iterator[None]:
        """The machine's ``busy`` for the duration of the block; when it ends, a
        close() waiting for the call (:meth:`wait_idle`) goes on."""
        with self.machine.running(what):
            try:
                yield
            finally:
                idle, self._idle = self._idle, None
                if idle is not None and not idle.done():
                    idle.set_result(None)

    async def wait_idle(self) -> None:
        """Until no transactional call runs (in another task)."""
        while self.machine.busy is not None:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)

    async def init(self) -> None:
        """init_transactions(): get a producer id and epoch for the transactional id.

        The coordinator fences older producers with the same id and finishes (aborts)
        a transaction one of them left open.
        """
        m = self.machine
        m.enter("init_transactions()", TxnState.UNINITIALIZED)
        with self._running("init_transactions()"):
            await self._init_producer_id(bump=False)
        self._choose_version()
        m.initialized()
        log.info("transactional producer %r: producer id %d epoch %d", self.transactional_id,
                 self._pid.producer_id, self._pid.epoch)

    def begin(self) -> None:
        """begin_transaction(). The transaction version stays the one chosen at init
        (an upgrade of the cluster is taken at the end of a transaction, with an epoch
        bump: :meth:`_maybe_upgrade`)."""
        self.machine.begin()
        self._reset_transaction()

    def _reset_transaction(self) -> None:
        self.added.clear()
        self.pending.clear()
        self._started = False
        self._maybe_started = False
        self._end_done = False
        self._end_written = False
        self._pending_offsets.clear()
        self._offsets_added.clear()

    async def commit(self, flush: Callable[[], Awaitable[None]],
                     hurry: Callable[[bool], None] | None = None) -> None:
        """commit_transaction(): sends that joined the transaction finish appending
        (``hurry(True)`` makes every batch sendable meanwhile, so that sends waiting
        for memory get it; ``hurry(False)`` ends that), then ``flush()``, then the
        offsets of a send_offsets_to_transaction() that timed out, then EndTxn.
        send() calls made once the commit started raise.

        Until EndTxn, a cancelled or failed commit leaves the transaction open (a
        batch that failed leaves it to abort). From then on (the point of no return),
        only commit_transaction() may follow, and it finishes the commit."""
        m = self.machine
        if m.resumes_end(True):
            await self._finish(True)  # a commit cancelled or timed out, called again
            return
        m.start_commit()
        try:
            with self._running("commit_transaction()"):
                if self._appending:
                    if hurry is not None:
                        hurry(True)
                    try:
                        await self._wait_appending()
                    finally:
                        if hurry is not None:
                            hurry(False)
                await flush()
                await self._await_add()
                async with self._offsets_lock:
                    if m.state is TxnState.COMMITTING:
                        await self._send_pending_offsets()
        except BaseException:
            m.revert_end()
            raise
        if m.state is not TxnState.COMMITTING:  # a batch or request failed meanwhile
            raise m.state_error("commit_transaction()")
        if self.pending:  # cannot happen: flush() only returns once every batch is out
            self.fail(IllegalStateError(
                f"partitions {sorted(self.pending)} were never added to the transaction"))
            raise m.state_error("commit_transaction()")
        await self._finish(True)

    async def abort(self, abort_queued: Callable[[KafkaError], None],
                    wait_in_flight: Callable[[], Awaitable[None]]) -> None:
        """abort_transaction(): queued records fail, records in flight are answered,
        then EndTxn(abort). Past its start there is no way back: a cancelled or
        timed-out abort can only be finished, by abort_transaction() or close()."""
        m = self.machine
        if not m.resumes_end(False):
            m.start_abort()
        with self._running("abort_transaction()"):
            err = m.queued_error()
            if err is not None:
                abort_queued(err)
            await wait_in_flight()
            async with self._offsets_lock:  # an offsets call in progress ends first
                self._pending_offsets.clear()
            await self._await_add()
        if m.state is not TxnState.ABORTING:
            raise m.state_error("abort_transaction()")
        await self._finish(False)

    async def hand_over(self, flush: Callable[[], Awaitable[None]]) -> tuple[int, int] | None:
        """Send the open transaction's records, then give the transaction up without
        ending it: returns (producer id, epoch) for :meth:`resume` in another producer
        (None if nothing reached the coordinator, so there is nothing to end). This
        producer can then only be closed (close() does not abort the transaction)."""
        m = self.machine
        m.enter("prepare_transaction()", TxnState.IN_TRANSACTION)
        with self._running("prepare_transaction()"):
            await self._wait_appending()
            await flush()
            await self._await_add()
            async with self._offsets_lock:
                if m.state is TxnState.IN_TRANSACTION:
                    await self._send_pending_offsets()
        if m.state is not TxnState.IN_TRANSACTION:  # a batch of it failed
            raise m.state_error("prepare_transaction()")
        handle = (self._pid.producer_id, self._pid.epoch) if self._started else None
        m.to_fatal(IllegalStateError(
            f"the transaction of {self.transactional_id!r} was handed over by "
            "prepare_transaction(); this producer can only be closed"))
        return handle

    async def resume(self, producer_id: int, epoch: int) -> None:
        """Take over the open transaction that another producer with this
        transactional id handed over (:meth:`hand_over`), without InitProducerId
        (which would abort it); commit() or abort() then ends it. EndTxn carries the
        given epoch, the one the transaction's records were written with (version 2
        bumps the epoch only at EndTxn). The transaction takes no records (their
        sequence numbers would start over at 0 under the same epoch, and the broker
        would drop them as duplicates of the first producer's): send() raises."""
        m = self.machine
        m.enter("resume_transaction()", TxnState.UNINITIALIZED)
        with self._running("resume_transaction()"):
            await self._coordinator_call(_TRANSACTION, self.transactional_id,
                                         "FindCoordinator", _no_call, self._max_block_s)
        self._pid.assign(producer_id, epoch)
        self._choose_version()
        m.initialized()
        m.resume()
        self._reset_transaction()
        self._started = True
        # This producer does not know the sequences the transaction's records used:
        # the next transaction's first batch waits for an epoch bump (version 2: the
        # EndTxn answer carries the bumped epoch, which cancels this). Not done right
        # after EndTxn: a commit of the same handle must stay repeatable.
        self._bump_first = True

    async def _finish(self, commit: bool) -> None:
        """EndTxn, then the epoch bump a failed batch asked for, then (at most once in
        the producer's life) the move to transaction version 2. Cancelled or timed out,
        the state stays, and the same call finishes it: steps already done are not
        done again."""
        m = self.machine
        m.end_started(commit)
        try:
            with self._running("commit_transaction()" if commit else "abort_transaction()"):
                if not self._end_done:
                    if self._started or (self._maybe_started and self.version >= 2):
                        # (Version 2 takes an abort of a transaction it never saw.)
                        await self._end_txn(commit)
                    elif self._maybe_started:
                        # Version 1: a request that would have started the transaction
                        # went out and its answer did not come: the coordinator may
                        # hold an open transaction, which an epoch bump aborts.
                        self._pid.bump_needed = True
                    self._end_done = True
                if self._closing is not None:
                    # EndTxn was answered as close() ran out of time: the transaction
                    # is ended; the producer is closed, nothing more to do.
                    return
                if self._pid.bump_needed:
                    # A batch of this transaction failed with a sequence number: start
                    # the sequences over under a new epoch before the next transaction.
                    await self._init_producer_id(bump=True)
                await self._maybe_upgrade()
        except KafkaTimeoutError:
            if self._end_done and self._closing is not None:
                return  # (as below)
            raise  # state unchanged: the same call may be repeated
        except KafkaError as exc:
            if self._end_done and self._closing is not None:
                return  # ended by EndTxn; what failed after it was close()'s refusal
            if m.end_failed(commit, exc):
                self._log_fatal(exc)
            raise
        m.ended()
        self._reset_transaction()
        log.debug("transaction of %r %s", self.transactional_id,
                  "committed" if commit else "aborted")

    async def send_offsets(self, offsets: Mapping[Any, Any] | Iterable[Any],
                           group_metadata: str | GroupMetadata | Any) -> None:
        """send_offsets_to_transaction(). Empty offsets are a no-op (as Java's: an empty
        poll must not start a transaction the coordinator never sees). Offsets whose
        call timed out or was cancelled stay queued: the next send_offsets, commit or
        prepare sends them before anything else, so a commit never goes out without
        them."""
        m = self.machine
        m.enter("send_offsets_to_transaction()", TxnState.IN_TRANSACTION)
        group = group_metadata_of(group_metadata)
        by_topic = offsets_of(offsets)
        if not by_topic:
            return
        item = _Offsets(group, by_topic)
        self._pending_offsets.append(item)
        async with self._offsets_lock:  # after the offsets calls of other tasks
            if not item.sent and item in self._pending_offsets:
                await self._send_pending_offsets(until=item)
        if not item.sent:  # the transaction was aborted meanwhile
            raise m.state_error("send_offsets_to_transaction()")

    async def _send_pending_offsets(self, until: _Offsets | None = None) -> None:
        """Send the queued offsets, oldest first, up to ``until`` (None: all); called
        under the offsets lock. A failure other than a timeout makes the transaction
        abortable and raises; a timeout leaves them queued."""
        m = self.machine
        if self._pending_offsets and self._bump_first:
            await self._bump_now()
        while self._pending_offsets:
            item = self._pending_offsets[0]
            group = item.group
            try:
                if self.version < 2 and group.group_id not in self._offsets_added:
                    # Version 2: TxnOffsetCommit v5 adds the group itself.
                    self._maybe_started = True
                    await self._add_offsets(group.group_id)
                    self._offsets_added.add(group.group_id)
                    self._started = True
                if self.version >= 2:
                    self._maybe_started = True
                await self._txn_offset_commit(group, item.by_topic)
            except KafkaTimeoutError:
                raise
            except KafkaError as exc:
                self.fail(exc)
                raise m.state_error("send_offsets_to_transaction()") from exc
            self._started = True
            item.sent = True
            self._pending_offsets.pop(0)
            if item is until:
                return

    # -- close ---------------------------------------------------------------------

    async def settle(self, abort: Callable[[], Awaitable[None]]) -> None:
        """close(): what Java's graceful close does with the transaction. A call
        running in another task (a commit, an abort) is waited for; a commit or abort
        that was cancelled or timed out past its point of no return is finished; an
        open transaction is aborted (``abort()``: abort_transaction()). The caller
        bounds this with close()'s timeout."""
        m = self.machine
        for _ in range(4):  # each pass ends a call or moves the state on
            if m.busy is not None:
                await self.wait_idle()
                continue
            pending = m.pending_end()
            if pending is True:
                await self._finish(True)
            elif pending is False or m.open:
                await abort()
            else:
                return

    def close(self, error: KafkaError) -> None:
        """close() is forced (its timeout ran out, or it was cancelled): no EndTxn
        goes out from now on, the AddPartitionsToTxn in flight is cancelled, and a
        transaction that was not ended fails (the producer is unusable, as after
        Java's forced close). Called before the buffered batches are failed."""
        self._closing = error
        if self._add_task is not None:
            self._add_task.cancel()
        m = self.machine
        if m.state is not TxnState.READY and m.state is not TxnState.UNINITIALIZED \
                and m.state is not TxnState.FATAL_ERROR:
            m.to_fatal(error)
        elif m.busy is not None and m.state is not TxnState.FATAL_ERROR:
            m.to_fatal(error)  # init_transactions() or resume_transaction() running

    def _closed_error(self, what: str) -> KafkaError:
        """The error of a coordinator call refused because close() was forced."""
        closing = self._closing
        assert closing is not None
        if what.startswith("EndTxn (commit)") and self._end_written:
            err: KafkaError = TransactionOutcomeUnknownError(
                f"commit_transaction(): the producer was closed after the commit's "
                f"EndTxn was sent and before its answer came; transaction "
                f"{self.machine.number} of {self.transactional_id!r} may or may not be "
                "committed")
        else:
            err = ProducerClosedError(
                f"{what}: not sent, the producer was closed ({closing}); nothing of the "
                f"transaction of {self.transactional_id!r} is committed")
        err.__cause__ = closing
        return err

    def sender_failed(self, error: KafkaError) -> None:
        """The Sender failed for good (it failed every batch): an open transaction
        must be aborted, and the producer is unusable afterwards."""
        entered = self.machine.doom(error)
        if entered is TxnState.FATAL_ERROR:
            self._log_fatal(error)
        elif entered is TxnState.ABORTABLE_ERROR:
            log.warning("transaction of %r must be aborted: %s", self.transactional_id,
                        error)

    # -- requests ----------------------------------------------------------------------

    async def _init_producer_id(self, bump: bool) -> None:
        async def call(conn: BrokerConnection) -> int:
            lo = 3 if bump else 0
            version = conn.version_for(ApiKey.INIT_PRODUCER_ID, lo, 5)
            req_m, resp_t = _kio(ApiKey.INIT_PRODUCER_ID, version)
            fields: dict[str, Any] = {
                "transactional_id": self.transactional_id,
                "transaction_timeout": _timedelta_ms(self._timeout_ms),
            }
            if version >= 3:
                fields["producer_id"] = i64(self._pid.producer_id if bump else -1)
                fields["producer_epoch"] = i16(self._pid.epoch if bump else -1)
            resp = await conn.request(req_m.InitProducerIdRequest(**fields),
                                      resp_t)
            code = int(resp.error_code)
            if code == 0:
                self._pid.assign(int(resp.producer_id), int(resp.producer_epoch))
                self._bump_first = False
            return code

        await self._coordinator_call(_TRANSACTION, self.transactional_id, "InitProducerId",
                                     call, self._max_block_s)

    async def _end_txn(self, commit: bool) -> None:
        v2 = self.version >= 2

        what = "EndTxn (commit)" if commit else "EndTxn (abort)"

        async def call(conn: BrokerConnection) -> int:
            if self._closing is not None:  # checked right before the request is written
                raise self._closed_error(what)
            version = conn.version_for(ApiKey.END_TXN, 5, 5) if v2 else conn.version_for(
                ApiKey.END_TXN, 0, 4)
            req_m, resp_t = _kio(ApiKey.END_TXN, version)
            request = req_m.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=i64(self._pid.producer_id), producer_epoch=i16(self._pid.epoch),
                committed=commit)
            self._end_written = True
            resp = await conn.request(request, resp_t)
            code = int(resp.error_code)
            if code == 0 and version >= 5 and int(resp.producer_id) >= 0:
                # KIP-890: the coordinator bumped the epoch (or, when the epoch ran
                # out, gave a new producer id): the next transaction uses them.
                self._pid.assign(int(resp.producer_id), int(resp.producer_epoch))
                self._bump_first = False
            return code

        await self._coordinator_call(_TRANSACTION, self.transactional_id, what, call,
                                     self._max_block_s)

    async def _add_offsets(self, group_id: str) -> None:
        async def call(conn: BrokerConnection) -> int:
            version = conn.version_for(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
            req_m, resp_t = _kio(ApiKey.ADD_OFFSETS_TO_TXN, version)
            resp = await conn.request(req_m.AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=i64(self._pid.producer_id), producer_epoch=i16(self._pid.epoch),
                group_id=group_id), resp_t)
            return int(resp.error_code)

        await self._coordinator_call(_TRANSACTION, self.transactional_id, "AddOffsetsToTxn",
                                     call, self._max_block_s)

    async def _txn_offset_commit(self, group: GroupMetadata,
                                 by_topic: dict[str, list[tuple[int, int, str | None]]]
                                 ) -> None:
        v2 = self.version >= 2

        async def call(conn: BrokerConnection) -> int:
            version = conn.version_for(ApiKey.TXN_OFFSET_COMMIT, 5, 5) if v2 else \
                conn.version_for(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
            req_m, resp_t = _kio(ApiKey.TXN_OFFSET_COMMIT, version)
            part_t = req_m.TxnOffsetCommitRequestPartition
            part_fields = {f for f in part_t.__dataclass_fields__}
            topics = []
            for name, parts in by_topic.items():
                built = []
                for p, off, meta in parts:
                    pf: dict[str, Any] = {"partition_index": i32(p),
                                          "committed_offset": i64(off),
                                          "committed_metadata": meta}
                    if "committed_leader_epoch" in part_fields:
                        pf["committed_leader_epoch"] = i32(-1)
                    built.append(part_t(**pf))
                topics.append(req_m.TxnOffsetCommitRequestTopic(name=name,
                                                                 partitions=tuple(built)))
            fields: dict[str, Any] = {
                "transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": i64(self._pid.producer_id),
                "producer_epoch": i16(self._pid.epoch), "topics": tuple(topics)}
            if version >= 3:
                fields.update(generation_id=i32(group.generation_id),
                              member_id=group.member_id,
                              group_instance_id=group.group_instance_id)
            resp = await conn.request(req_m.TxnOffsetCommitRequest(**fields),
                                      resp_t)
            worst = 0
            for topic in resp.topics:
                for part in topic.partitions:
                    code = int(part.error_code)
                    if code and worst == 0:
                        worst = code
            return worst

        await self._coordinator_call(_GROUP, group.group_id, "TxnOffsetCommit", call,
                                     self._max_block_s, retry_retriable=True)

    # -- coordinators ----------------------------------------------------------------

    async def _coordinator_call(self, key_type: int, key: str, what: str,
                                call: Callable[[BrokerConnection], Awaitable[int]],
                                timeout_s: float, *, retry: bool = True,
                                retry_retriable: bool = False) -> None:
        """Run ``call`` on the coordinator for ``key`` until it answers 0, an error
        that is not retriable (raised), or ``timeout_s`` passes (KafkaTimeoutError).
        ``retry_retriable``: every code Kafka marks retriable is retried (as Java's
        TxnOffsetCommit handler), not only the coordinator codes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        failures = 0
        last: BaseException | None = None
        while True:
            if self._closing is not None:
                raise self._closed_error(what)
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                node = await self._coordinator(key_type, key, remaining)
                conn = await self._client.connect(node, remaining)
                code = await asyncio.wait_for(call(conn), min(remaining,
                                                              self._request_timeout_s))
            except asyncio.TimeoutError:
                last = RequestTimedOutError(f"{what}: no answer")
                self._coordinators.pop((key_type, key), None)
            except (KafkaConnectionError, RequestTimedOutError, ProtocolError) as exc:
                last = exc
                self._coordinators.pop((key_type, key), None)
            else:
                if code == 0:
                    return
                err = for_code(code, what)
                if code in FENCED_CODES:
                    err = ProducerFencedError(
                        f"{what}: transactional_id {self.transactional_id!r} was taken over "
                        f"by a newer producer ({ErrorCode(code).name.upper()})")
                if code in FATAL_CODES:
                    self._to_fatal(err)
                    raise err
                if code in _COORDINATOR_MOVED:
                    self._coordinators.pop((key_type, key), None)
                elif code not in _RETRY_LATER and not (retry_retriable and err.retriable):
                    raise err
                last = err
            if not retry:
                assert last is not None
                if isinstance(last, KafkaError):
                    last.retriable = True
                    raise last
                raise KafkaConnectionError(str(last))
            failures += 1
            if isinstance(last, BrokerResponseError) and \
                    int(last.code) == int(ErrorCode.concurrent_transactions):
                delay = _SHORT_BACKOFF
            else:
                delay = min(self._backoff * 2 ** min(failures - 1, 16), self._backoff_max)
            log.debug("%s for %r failed (%s); retrying in %.0f ms", what, key, last,
                      delay * 1000)
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        raise KafkaTimeoutError(
            f"{what} for {key!r} did not complete within {timeout_s * 1000:.0f} ms"
            + (f"; last error: {last}" if last is not None else "")
            + "; the same call may be retried")

    async def _coordinator(self, key_type: int, key: str, timeout_s: float) -> int:
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached
        client = self._client

        async def op(node: int, remaining: float) -> int:
            conn = await client.connect(node, remaining)
            version = conn.version_for(ApiKey.FIND_COORDINATOR, 1, 6)
            req_m, resp_t = _kio(ApiKey.FIND_COORDINATOR, version)
            if version >= 4:
                resp = await conn.request(req_m.FindCoordinatorRequest(
                    key_type=i8(key_type), coordinator_keys=(key,)),
                    resp_t)
                if not resp.coordinators:
                    raise ProtocolError("FindCoordinator answered no coordinator")
                c = resp.coordinators[0]
                code, nid, host, port = int(c.error_code), int(c.node_id), c.host, int(c.port)
            else:
                resp = await conn.request(req_m.FindCoordinatorRequest(
                    key=key, key_type=i8(key_type)), resp_t)
                code, nid, host = int(resp.error_code), int(resp.node_id), resp.host
                port = int(resp.port)
            if code != 0:
                err = for_code(code, "FindCoordinator")
                if code in _COORDINATOR_MOVED or code in _RETRY_LATER:
                    # Not a connection problem, but worth another try after a pause
                    # (the coordinator's internal topic may still be being created).
                    await asyncio.sleep(self._backoff)
                    raise KafkaConnectionError(f"FindCoordinator for {key!r}: {err}")
                if code in FATAL_CODES:
                    self._to_fatal(err)
                raise err
            nodes = client.nodes
            if nodes.get(nid) != (host, port):
                nodes[nid] = (host, port)
                client.update_nodes(nodes)
            return nid

        nid = await client.on_any_node(op, timeout_s, "find the coordinator")
        self._coordinators[(key_type, key)] = nid
        return nid
