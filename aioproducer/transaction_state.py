"""The transactional producer's state machine: states, transitions, state errors.

Pure: no I/O, no asyncio, no logging. :class:`~aioproducer.transactions.TransactionManager`
drives one :class:`TxnStateMachine` with the coordinator's answers;
:class:`~aioproducer.testing.MockProducer` drives one with its scripted answers. Both
therefore refuse the same calls in the same states with the same errors.

States, and what moves between them::

    UNINITIALIZED --init_transactions()--> READY --begin_transaction()--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction()--> COMMITTING --EndTxn--> READY
    IN_TRANSACTION / ABORTABLE_ERROR --abort_transaction()--> ABORTING --EndTxn--> READY
    IN_TRANSACTION / COMMITTING --a batch or request fails--> ABORTABLE_ERROR
    any --fenced or not authorized--> FATAL_ERROR (only close() is left)

Java's ``TransactionManager.State`` has the same states but one: its ``INITIALIZING``
is ``UNINITIALIZED`` here while ``init_transactions()`` runs (:attr:`TxnStateMachine.busy`
says so), and the epoch bump after a failed transaction happens inside ``COMMITTING`` /
``ABORTING`` instead of going through ``INITIALIZING`` again. Two transitions Java does
not have undo an operation that did not happen: ``COMMITTING -> IN_TRANSACTION`` (the
flush before EndTxn failed or was cancelled) and ``ABORTING -> IN_TRANSACTION /
ABORTABLE_ERROR`` (the mock's scripted abort error that is not a coordinator answer).

A commit or abort that passed its point of no return (:attr:`TxnStateMachine.ending`:
an abort from its start, a commit once its flush is done) and was then cancelled or
timed out stays in ``COMMITTING`` / ``ABORTING``: only the same call may follow, and it
finishes what the first one began (as Java's cached ``TransactionalRequestResult``);
``close()`` finishes it too.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from kio.schema.errors import ErrorCode

from .errors import (
    BrokerResponseError,
    ClusterAuthorizationError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    UnsupportedVersionError,
)

__all__ = [
    "FATAL_CODES",
    "FENCED_CODES",
    "PRODUCE_FENCED_CODES",
    "TRANSITIONS",
    "TxnState",
    "TxnStateMachine",
    "is_fatal_code",
    "is_fatal_failure",
    "is_transition_valid",
]


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in a transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "in an abortable error"
    FATAL_ERROR = "in a fatal error"


_S = TxnState

#: source state -> the states it may move to. FATAL_ERROR may be entered from any
#: state, itself included (a later fatal error replaces the first), and left to none.
TRANSITIONS: Mapping[TxnState, frozenset[TxnState]] = {
    _S.UNINITIALIZED: frozenset({_S.READY}),
    _S.READY: frozenset({_S.IN_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.COMMITTING, _S.ABORTING, _S.ABORTABLE_ERROR}),
    _S.COMMITTING: frozenset({_S.READY, _S.ABORTABLE_ERROR, _S.IN_TRANSACTION}),
    _S.ABORTING: frozenset({_S.READY, _S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.ABORTING}),
    _S.FATAL_ERROR: frozenset(),
}


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    """Whether the state machine may move from ``source`` to ``target``."""
    return target is _S.FATAL_ERROR or target in TRANSITIONS[source]


# -- which errors are fatal ---------------------------------------------------------------

#: Error codes saying that another producer took over the transactional id.
FENCED_CODES: frozenset[int] = frozenset({
    int(ErrorCode.producer_fenced), int(ErrorCode.invalid_producer_epoch),
    int(ErrorCode.transaction_coordinator_fenced)})
#: The fencing codes of a *partition leader's* Produce answer. INVALID_PRODUCER_EPOCH is
#: not one of them there (KIP-588, as Java): the transaction is abortable, and the
#: abort's epoch bump recovers; from a coordinator it still means fenced.
PRODUCE_FENCED_CODES: frozenset[int] = FENCED_CODES - {int(ErrorCode.invalid_producer_epoch)}
#: Error codes of a coordinator answer after which this producer can do nothing more.
FATAL_CODES: frozenset[int] = FENCED_CODES | {
    int(ErrorCode.invalid_producer_id_mapping),
    int(ErrorCode.transactional_id_authorization_failed),
    int(ErrorCode.invalid_txn_state),
    int(ErrorCode.invalid_transaction_timeout),
    int(ErrorCode.unsupported_for_message_format),
    int(ErrorCode.cluster_authorization_failed)}


def is_fatal_code(code: int) -> bool:
    """Whether a coordinator answering ``code`` leaves the producer unusable."""
    return code in FATAL_CODES


def is_fatal_failure(exc: BaseException) -> bool:
    """Whether a failed batch or request makes the producer unusable (fenced, the
    transactional id or the cluster operation not authorized, an unsupported version,
    a producer id no longer mapped to the transactional id (KAFKA-18019): Java's
    list). Every other failure in a transaction is abortable: the transaction must be
    aborted, then the producer goes on."""
    return isinstance(exc, (ProducerFencedError, TransactionalIdAuthorizationError,
                            ClusterAuthorizationError, UnsupportedVersionError,
                            InvalidProducerIdMappingError))


def _kafka_error(exc: BaseException) -> KafkaError:
    return exc if isinstance(exc, KafkaError) else KafkaError(str(exc))


# -- the machine ---------------------------------------------------------------------------


class TxnStateMachine:
    """The transactional state of one producer, and the errors its calls get.

    Every change of :attr:`state` goes through :func:`is_transition_valid` (an
    invalid one is a bug of the driver and raises :class:`IllegalStateError`).
    """

    __slots__ = ("_before", "_doomed", "_error", "_state", "busy", "number", "resumed",
                 "retrying_end", "transactional_id", "version")

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._state = TxnState.UNINITIALIZED
        self._error: KafkaError | None = None
        self._before = TxnState.IN_TRANSACTION  # where a commit or abort started from
        self.busy: str | None = None
        """The call still running (``"commit_transaction()"``...), or None."""
        self.retrying_end: bool | None = None
        """A commit (True) or abort (False) past its point of no return: if the call
        is cancelled or times out, only the same call may follow, and it resumes."""
        self.resumed = False
        """The open transaction was taken over with resume_transaction(): it can be
        committed or aborted, and takes no records."""
        self._doomed: KafkaError | None = None
        self.number = 0
        """The number of the last transaction begun (1 for the first; 0 before it).
        A ``send()`` joins the transaction whose number this is when it is called."""
        self.version: int | None = None
        """The transaction protocol version (1 or 2, KIP-890) chosen at init, or None."""

    @property
    def state(self) -> TxnState:
        return self._state

    @property
    def error(self) -> KafkaError | None:
        """What made the transaction abortable or the producer unusable."""
        return self._error

    def __repr__(self) -> str:
        return (f"<TxnStateMachine {self.transactional_id!r} {self._state.name}"
                + (f" busy={self.busy}" if self.busy else "") + ">")

    def _go(self, target: TxnState) -> None:
        if not is_transition_valid(self._state, target):
            raise IllegalStateError(
                f"invalid transaction state transition {self._state.name} -> {target.name}")
        self._state = target

    # -- checks -----------------------------------------------------------------------

    @property
    def ending(self) -> bool | None:
        """The commit (True) or abort (False) past its point of no return, else None."""
        return self.retrying_end

    def check_send(self) -> None:
        """Raise unless records may be appended now (called by send())."""
        if self._state is not TxnState.IN_TRANSACTION:
            raise self.state_error("send()")
        if self.resumed:
            raise IllegalStateError(
                "send(): the transaction was taken over with resume_transaction(); it "
                "can be committed or aborted, not written to (its records were written "
                "by the producer that prepared it, whose sequence numbers this producer "
                "does not know); begin a new transaction to send")

    def joined(self) -> int:
        """check_send(), and the number of the transaction a send() called now joins."""
        self.check_send()
        return self.number

    def check_joined(self, number: int) -> None:
        """Raise unless the transaction ``number`` (that a send() joined) still takes
        records: it is the current one, open or being committed (a commit waits for
        the sends that joined it). Called right before the record is appended."""
        st = self._state
        if number == self.number and (st is TxnState.IN_TRANSACTION
                                      or st is TxnState.COMMITTING):
            return
        if number == self.number and st in (TxnState.ABORTABLE_ERROR,
                                             TxnState.FATAL_ERROR):
            raise self.state_error("send()")
        raise TransactionAbortedError(
            f"send(): transaction {number} of {self.transactional_id!r}, which this "
            "send() joined, was aborted before the record could be appended; nothing "
            "was buffered")

    def enter(self, what: str, *allowed: TxnState) -> None:
        """Raise unless the call ``what`` may start: nothing else running, and the
        state one of ``allowed``."""
        if self.busy is not None:
            raise IllegalStateError(f"{what}: {self.busy} is still running")
        if self._state not in allowed:
            raise self.state_error(what)

    @contextmanager
    def running(self, what: str) -> Iterator[None]:
        """Mark ``what`` as running (:attr:`busy`) for the duration of the block."""
        self.busy = what
        try:
            yield
        finally:
            self.busy = None

    def state_error(self, what: str) -> KafkaError:
        """The error for the call ``what``, made in a state that does not allow it."""
        st = self._state
        if st is TxnState.FATAL_ERROR:
            return self.fatal_error()
        if st is TxnState.ABORTABLE_ERROR:
            err = TransactionAbortableError(
                f"{what}: the transaction failed and must be aborted with "
                f"abort_transaction(): {self._error}")
            err.__cause__ = self._error
            return err
        if st is TxnState.UNINITIALIZED:
            return IllegalStateError(f"{what}: call init_transactions() first")
        if st is TxnState.READY:
            return IllegalStateError(
                f"{what}: no transaction in progress; call begin_transaction() first")
        if st is TxnState.IN_TRANSACTION:
            return IllegalStateError(f"{what}: a transaction is already in progress")
        if self.busy is None and self.retrying_end is not None:
            call = "commit_transaction()" if self.retrying_end else "abort_transaction()"
            return IllegalStateError(
                f"{what}: an earlier {call} was cancelled or timed out after it started "
                f"to end the transaction; call {call} again to finish it")
        return IllegalStateError(f"{what}: the producer is {st.value} the transaction")

    def fatal_error(self) -> KafkaError:
        """A fresh copy of the fatal error (its cause is the original), for each call."""
        err = self._error
        if isinstance(err, BrokerResponseError):
            copy: KafkaError = type(err)(f"transactional_id {self.transactional_id!r}: "
                                         "the producer is no longer usable",
                                         code=err.code)
        elif isinstance(err, ProducerClosedError):
            copy = ProducerClosedError(f"transactional_id {self.transactional_id!r}: {err}")
        else:
            copy = IllegalStateError(f"the transactional producer failed: {err}")
        copy.__cause__ = err
        return copy

    def queued_error(self) -> KafkaError | None:
        """The error to fail buffered records with, when they must not be sent."""
        st = self._state
        if st is TxnState.FATAL_ERROR:
            return self.fatal_error()
        if st is TxnState.ABORTABLE_ERROR or st is TxnState.ABORTING:
            return TransactionAbortedError(
                "the record's transaction was aborted before it was sent"
                + (f" (after: {self._error})" if self._error is not None else ""))
        return None

    @property
    def open(self) -> bool:
        """Whether a transaction is open and may be aborted (close() aborts it)."""
        return self._state is TxnState.IN_TRANSACTION \
            or self._state is TxnState.ABORTABLE_ERROR

    # -- transitions --------------------------------------------------------------------

    def initialized(self) -> None:
        """init_transactions() succeeded."""
        self._go(TxnState.READY)

    def begin(self) -> None:
        """begin_transaction()."""
        self.enter("begin_transaction()", TxnState.READY)
        self._error = None
        self.resumed = False
        self.number += 1
        self._go(TxnState.IN_TRANSACTION)

    def resume(self) -> None:
        """resume_transaction() took over an open transaction: it is the current one,
        and it takes no records."""
        self.begin()
        self.resumed = True

    def resumes_end(self, commit: bool) -> bool:
        """Whether commit_transaction() (``commit``) or abort_transaction() finishes a
        call of its own kind that was cancelled or timed out past its point of no
        return, instead of starting anew."""
        return (self._state is (TxnState.COMMITTING if commit else TxnState.ABORTING)
                and self.retrying_end is commit and self.busy is None)

    def pending_end(self) -> bool | None:
        """A commit (True) or abort (False) that was cancelled or timed out past its
        point of no return and is not running now: close() finishes it."""
        if self.busy is None and self._state in (TxnState.COMMITTING, TxnState.ABORTING):
            return self.retrying_end
        return None

    def start_commit(self) -> None:
        """commit_transaction() starts (it flushes next)."""
        self.enter("commit_transaction()", TxnState.IN_TRANSACTION)
        self._before = self._state
        self._go(TxnState.COMMITTING)

    def start_abort(self) -> None:
        """abort_transaction() starts: its point of no return is now (the queued
        records fail next), so a cancelled or timed-out abort can only be finished."""
        self.enter("abort_transaction()", TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
        self._before = self._state
        self._go(TxnState.ABORTING)
        self.retrying_end = False

    def revert_end(self) -> None:
        """The commit or abort did not happen (its flush failed, or it was cancelled
        before its point of no return): back to the state it started from, unless
        something else moved the state."""
        if self._state is TxnState.COMMITTING or self._state is TxnState.ABORTING:
            self.retrying_end = None
            self._go(self._before)

    def end_started(self, commit: bool) -> None:
        """The commit (or abort) passed its point of no return (EndTxn comes next): if
        it is cancelled or times out, only the same call may follow, and finishes it."""
        self.retrying_end = commit

    def end_failed(self, commit: bool, exc: KafkaError) -> bool:
        """EndTxn (or the epoch bump after it) failed with ``exc``, not a timeout: a
        failed commit leaves the transaction to abort, a failed abort is fatal.
        Returns whether this call made the producer unusable."""
        self.retrying_end = None
        if self._state is TxnState.FATAL_ERROR:  # the answer's code was fatal already
            return False
        if self.coordinator_error(exc):
            return True
        if commit:
            self._error = exc
            self._go(TxnState.ABORTABLE_ERROR)
            return False
        self.to_fatal(exc)
        return True

    def ended(self) -> None:
        """EndTxn succeeded: ready for the next transaction (or, if the producer failed
        meanwhile, :meth:`doom`, unusable from now on)."""
        self.retrying_end = None
        self.resumed = False
        self._error = None
        if self._doomed is not None:
            self.to_fatal(self._doomed)
            return
        self._go(TxnState.READY)

    def fail(self, exc: BaseException) -> TxnState | None:
        """A batch or a request of the transaction failed. Returns the state it moved
        to (ABORTABLE_ERROR or FATAL_ERROR), None if nothing changed. A commit past
        its point of no return had every batch complete before it: nothing of its
        transaction can fail any more, so only a fatal failure changes it."""
        if self._state is TxnState.FATAL_ERROR:
            return None
        if is_fatal_failure(exc):
            self.to_fatal(exc)
            return TxnState.FATAL_ERROR
        if self._state is TxnState.IN_TRANSACTION or (
                self._state is TxnState.COMMITTING and self.retrying_end is None):
            self._error = _kafka_error(exc)
            self._go(TxnState.ABORTABLE_ERROR)
            return TxnState.ABORTABLE_ERROR
        return None

    def doom(self, exc: KafkaError) -> TxnState | None:
        """The producer can no longer send (its Sender failed): an open transaction
        must be aborted (which still works: it only needs the coordinator), and the
        producer is unusable afterwards; with no transaction open, at once. Returns
        the state it moved to, None if nothing changed."""
        if self._state is TxnState.FATAL_ERROR:
            return None
        self._doomed = exc
        if self._state in (TxnState.UNINITIALIZED, TxnState.READY) and self.busy is None:
            self.to_fatal(exc)
            return TxnState.FATAL_ERROR
        return self.fail(exc)

    def to_fatal(self, exc: BaseException) -> None:
        """The producer can no longer be used (only close() is left)."""
        self._error = _kafka_error(exc)
        self._go(TxnState.FATAL_ERROR)

    def coordinator_error(self, exc: BaseException) -> bool:
        """A coordinator answered ``exc``: fatal if its code is (:data:`FATAL_CODES`).
        Returns whether the producer is now unusable because of it."""
        if isinstance(exc, BrokerResponseError) and is_fatal_code(int(exc.code)):
            self.to_fatal(exc)
            return True
        return False

    def fenced(self, code: int, message: str | None = None) -> KafkaError:
        """A partition leader answered a fencing ``code``: the error to fail the batch
        with; the producer is now unusable."""
        err = ProducerFencedError(
            f"transactional_id {self.transactional_id!r} was taken over by a newer "
            f"producer ({ErrorCode(code).name.upper()}" + (f": {message})" if message else ")"))
        self.to_fatal(err)
        return err
