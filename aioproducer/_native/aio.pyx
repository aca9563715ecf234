# cython: language_level=3
"""The asyncio glue of the native core: what knows of an event loop.

The core (``records.pyx``) routes and appends records and keeps each batch's
outcome without asyncio. Here:

- :class:`ProducerBatch` (a :class:`records.CoreBatch`) creates and resolves the
  private waiter futures that awaiting records wait on, and checks the split
  batches' completion contract (``child_done``);
- :class:`RecordFuture`, a record's asyncio-compatible future (done-callbacks
  scheduled on the batch's loop);
- :class:`Appender` (a :class:`records.CoreAppender`) binds the native append path
  to one event loop, checked on each record through the thread's async-generator
  hooks (``running_here``), and makes the RecordFuture of each record it appends.
"""

cimport cython
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.method cimport PyMethod_Check, PyMethod_GET_SELF
from cpython.ref cimport PyObject, Py_XDECREF
from libc.stdint cimport int32_t, int64_t

from .records cimport CoreAppender, CoreBatch, RecordMetadata

from asyncio import BaseEventLoop, CancelledError, Future, InvalidStateError
from contextvars import copy_context
import warnings


cdef extern from "Python.h":
    # Only the field read here; the rest of the struct stays opaque.
    ctypedef struct PyThreadState:
        PyObject* async_gen_firstiter
    PyThreadState* PyThreadState_Get()


# ``await record_future`` without a generator: RecordFuture.__await__ returns the
# future itself, and its type's am_send slot (set at import, below) steps it. A done
# future then costs one C call that gives the RecordMetadata (PYGEN_RETURN); a
# pending one yields the private waiter of its batch to the awaiting task
# (PYGEN_NEXT) and is stepped again when the task wakes. __next__ does the same for
# the interpreter's path when a trace function is set (it uses tp_iternext).
# PendingSend (what Producer.send() returns) has a slot of the same shape.
ctypedef object (*step_fn)(object, object, int*)

cdef extern from *:
    """
    #if PY_VERSION_HEX < 0x030A0000
    #error "aioproducer needs Python 3.10+ (am_send)"
    #endif
    /* The step of each type that gets the slot: RecordFuture (0), PendingSend (1). */
    static PyObject* (*aiop_steps[2])(PyObject*, PyObject*, int*) = {NULL, NULL};

    static PySendResult aiop_am_send_with(int which, PyObject* self, PyObject* arg,
                                          PyObject** result) {
        int pending = 0;
        PyObject* r = aiop_steps[which](self, arg, &pending);
        *result = r;
        if (r == NULL)
            return PYGEN_ERROR;
        return pending ? PYGEN_NEXT : PYGEN_RETURN;
    }
    static PySendResult aiop_am_send_0(PyObject* self, PyObject* arg, PyObject** result) {
        return aiop_am_send_with(0, self, arg, result);
    }
    static PySendResult aiop_am_send_1(PyObject* self, PyObject* arg, PyObject** result) {
        return aiop_am_send_with(1, self, arg, result);
    }

    /* 0, or -1 (an exception set) if the type has no async slots to extend. */
    static int aiop_install_am_send(PyObject* type,
                                    PyObject* (*step)(PyObject*, PyObject*, int*),
                                    int which) {
        PyTypeObject* t = (PyTypeObject*)type;
        if (t->tp_as_async == NULL || t->tp_as_async->am_await == NULL) {
            PyErr_Format(PyExc_SystemError, "%s has no am_await slot", t->tp_name);
            return -1;
        }
        aiop_steps[which] = step;
        t->tp_as_async->am_send = which ? aiop_am_send_1 : aiop_am_send_0;
        PyType_Modified(t);
        return 0;
    }
    """
    int aiop_install_am_send(object type, step_fn step, int which) except -1
    # What a coroutine's send gives: its next value (PYGEN_NEXT), its return value
    # (PYGEN_RETURN) or an exception set (PYGEN_ERROR, -1).
    int PyIter_Send(object iter, object arg, PyObject** presult) except? -1
    enum:
        PYGEN_RETURN
        PYGEN_NEXT


cdef inline bint running_here(object loop) noexcept:
    # Whether ``loop`` is the loop running in this thread. A running asyncio (or
    # uvloop) loop installs its own bound method as this thread's async-generator
    # "firstiter" hook for as long as it runs, and one loop at a time runs in a
    # thread: reading it costs a few instructions, where asyncio.get_running_loop()
    # makes a getpid() system call. Anything else (another loop, none, hooks replaced
    # by the application) answers False, and the caller takes the exact path.
    cdef PyObject* hook = PyThreadState_Get().async_gen_firstiter
    return (hook != NULL and PyMethod_Check(<object>hook)
            and PyMethod_GET_SELF(<object>hook) == <PyObject*>loop)


cdef inline bint batch_done(CoreBatch b) except -1:
    # The batch's result is done: ``settled`` (set with the result, by the
    # accumulator's _resolve) is a C read; ``result.done()`` a method call by name,
    # ~200 instructions per record in the await of every record future.
    return b.settled or bool(b.result.done())


# asyncio's own loops make a future in Python (BaseEventLoop.create_future, one
# frame per future); new_future makes the same future without that frame.
cdef object _BASE_CREATE_FUTURE = BaseEventLoop.create_future


cpdef object new_future(object loop):
    """``loop.create_future()``: asyncio's ``Future(loop=loop)``, made here when the
    loop's ``create_future`` is asyncio's own (which makes just that), else the
    loop's own (uvloop's, or another loop's)."""
    if getattr(type(loop), "create_future", None) is _BASE_CREATE_FUTURE:
        return Future(loop=loop)
    return loop.create_future()


cdef class ProducerBatch(CoreBatch):
    """A :class:`records.CoreBatch` whose records can be awaited: ``waiter()`` gives a
    private future of the batch's loop, ``wake_waiters()`` resolves them all."""

    def child_done(self):
        """Call it on a child batch right after completing it (its ``result`` set and
        its waiters woken). True when this call made the last of its parent's children
        done: the caller must then complete ``self.parent`` (set its outcome and
        ``result``, :meth:`wake_waiters`) and call ``child_done()`` on the parent in
        turn, since the parent may itself be a child (nested splits). False otherwise,
        for a batch that has no parent, and for a second call on the same child.
        """
        cdef CoreBatch parent = self.parent
        if parent is None or self.reported:
            return False
        if not self.result.done():
            raise InvalidStateError(f"child_done() on {self!r}, whose result is not set")
        self.reported = True
        parent.pending_children -= 1
        return parent.pending_children == 0

    # -- waiting ---------------------------------------------------------------------

    def waiter(self):
        """A new future that :meth:`wake_waiters` resolves when the batch completes
        (None if it is done). Awaiting a private future, a cancelled task cancels only
        its own, never the batch's ``result`` that all of its records share."""
        if batch_done(self):
            return None
        w = new_future(self.result.get_loop())
        if self.waiters is None:
            self.waiters = [w]
        else:
            self.waiters.append(w)
        return w

    def wake_waiters(self):
        """Resolve every waiter now (called right after ``result`` is set): the
        awaiting tasks resume one loop iteration sooner than through a done-callback
        of ``result``. The done-callbacks of the batch's record futures are scheduled
        too, all of them in one loop callback (one ``call_soon`` per batch, not two
        per record future)."""
        cdef list waiters = self.waiters
        if waiters is not None:
            self.waiters = None
            for w in waiters:
                if not w.done():
                    w.set_result(None)
        cdef list hooked = self.hooked
        if hooked is None:
            return
        self.hooked = None
        cdef list due = []
        cdef RecordFuture fut
        for f in hooked:
            fut = <RecordFuture>f
            if fut.callbacks is not None:  # (cancel() scheduled them already)
                due.append((fut, fut.callbacks))
                fut.callbacks = None
        if due:
            loop = self.result.get_loop()
            loop.call_soon(run_callbacks, loop, due)

    cdef int hook(self, RecordFuture fut) except -1:
        # fut has done-callbacks to schedule when this batch completes.
        if self.hooked is None:
            self.hooked = [fut]
        else:
            self.hooked.append(fut)
        return 0


def run_callbacks(loop, list due):
    """Run the done-callbacks of a completed batch's record futures, in the order they
    were added, each in its own context; one that raises is reported to the loop's
    exception handler (as asyncio does for a callback) and the others still run. One
    that raises SystemExit or KeyboardInterrupt stops the loop, and the ones after it
    are scheduled again first, as asyncio's queued Handles would run later."""
    cdef Py_ssize_t i, j
    cdef list cbs, rest
    for i in range(len(due)):
        fut = (<tuple>due[i])[0]
        cbs = (<tuple>due[i])[1]
        for j in range(len(cbs)):
            cb = cbs[j]
            try:
                (<tuple>cb)[1].run((<tuple>cb)[0], fut)
            except (SystemExit, KeyboardInterrupt):
                rest = due[i + 1:]
                if j + 1 < len(cbs):
                    rest.insert(0, (fut, cbs[j + 1:]))
                if rest:
                    loop.call_soon(run_callbacks, loop, rest)
                raise
            except BaseException as exc:
                loop.call_exception_handler({
                    "message": f"Exception in callback {(<tuple>cb)[0]!r}({fut!r})",
                    "exception": exc, "future": fut})


# RecordFuture.flags
cdef enum:
    CANCELLED = 1   # cancel() ran while it was pending
    HOOKED = 2      # it is in its batch's hooked list
    BLOCKING = 4    # _asyncio_future_blocking


cdef int schedule_callbacks(RecordFuture fut) except -1:
    # Schedule the future's callbacks on its batch's loop, and forget them.
    cdef list cbs = fut.callbacks
    if cbs is None:
        return 0
    fut.callbacks = None
    loop = fut.batch.result.get_loop()
    for entry in cbs:
        loop.call_soon((<tuple>entry)[0], fut, context=(<tuple>entry)[1])
    return 0


# It refers only to its batch (and, while they wait, to the callbacks added to it and
# the private future of a task awaiting it). A cycle through it (a done-callback that
# captures it) is broken when the record is done: its callbacks are dropped as they
# are scheduled, on cancel() and on remove_done_callback(), and every batch is
# completed (acknowledged, failed, or aborted on close). Keeping one object per record
# out of the collector's counts makes collections, and their pauses, rarer.
@cython.no_gc
@cython.freelist(256)
cdef class RecordFuture:
    """The result of one ``send()``: an awaitable future of its RecordMetadata.

    Like Java's ``FutureRecordMetadata``, it is (batch, index): the only asyncio future
    is the batch's. It has the interface of ``asyncio.Future`` (``asyncio.isfuture()``
    is true), so ``asyncio.wait``, ``gather``, ``as_completed``, ``wait_for``,
    ``shield`` and ``ensure_future`` take it as it is:

    - ``done()`` once its batch is completed (a split batch: once all the batches its
      records moved to are) or it is cancelled. ``result()`` gives the RecordMetadata or
      raises the record's error, with the traceback the error had when the batch
      failed (as ``asyncio.Future``); a KIP-467 per-record error wins over the batch's.
    - Done-callbacks run as ``context.run(callback, self)`` on the batch's loop, soon
      after the record is done, in the order they were added (the context given, or
      the one current at ``add_done_callback``), and are then forgotten. Those of all
      the records of a batch run from one loop callback scheduled when the batch
      completes; one that raises goes to the loop's exception handler, as in asyncio.
    - ``cancel()`` cancels this handle only: ``cancelled()`` is then True,
      ``result()``/``exception()`` raise CancelledError, its callbacks are scheduled
      and tasks awaiting it get CancelledError. The record itself is still sent, and
      its batch and the other records are not affected: like Java, a record cannot be
      unsent. cancel() of a done future returns False.
    - ``await`` waits on a private future of the batch: a task cancelled while
      awaiting it gets CancelledError, and nothing else changes.
    """

    def __init__(self, ProducerBatch batch, int32_t index, int64_t timestamp,
                 int32_t key_size, int32_t value_size):
        self.batch = batch
        self.index = index
        self.timestamp = timestamp
        self.key_size = key_size
        self.value_size = value_size

    def __await__(self):
        # Its own iterator: the type's am_send (aiop_rf_am_send) steps it.
        return self

    def __next__(self):
        # The same step for the interpreter's traced path (tp_iternext).
        cdef int pending = 0
        value = rf_step(self, None, &pending)
        if pending:
            return value
        raise StopIteration(value)

    cdef object step(self, int* pending):
        # One step of ``await self``: the RecordMetadata (or the record's error raised)
        # once done; else the batch's new private waiter for the awaiting task to
        # block on (pending[0] = 1). A task cancelled while blocked gets CancelledError
        # from its waiter; cancel() cancels the waiters of every task awaiting this.
        cdef ProducerBatch b = self.batch
        if not self.flags & CANCELLED:
            if not batch_done(b):
                waiter = b.waiter()
                if waiter is not None:
                    self.remember_waiter(waiter)
                    waiter._asyncio_future_blocking = True
                    pending[0] = 1
                    return waiter
            self.awaiting = None  # (waiters of done futures: nothing to cancel)
        return self.get_result()

    cdef int remember_waiter(self, object waiter) except -1:
        # Known to cancel(), which must wake the awaiting tasks too. Waiters of tasks
        # cancelled since (done) are dropped here.
        cdef object awaiting = self.awaiting
        if awaiting is None or (type(awaiting) is not list and awaiting.done()):
            self.awaiting = waiter
        elif type(awaiting) is list:
            kept = [w for w in <list>awaiting if not w.done()]
            kept.append(waiter)
            self.awaiting = kept
        else:
            self.awaiting = [awaiting, waiter]
        return 0

    def done(self):
        """True once the record is acknowledged or failed, or this handle cancelled."""
        return bool(self.flags & CANCELLED) or batch_done(self.batch)

    def cancelled(self):
        """True if :meth:`cancel` cancelled this handle (the record is still sent)."""
        return bool(self.flags & CANCELLED)

    def result(self):
        """The RecordMetadata. Raises the record's error (with the traceback it had when
        the batch failed), CancelledError if cancelled, InvalidStateError if not done."""
        return self.get_result()

    cdef object get_result(self):
        if self.flags & CANCELLED:
            raise self._make_cancelled_error()
        cdef CoreBatch b = self.batch
        if not batch_done(b):
            raise InvalidStateError("Result is not set.")
        cdef int32_t i = self.index
        if b.children is not None:
            b = b.descend(&i)
        err = b.error_for(i)
        if err is not None:
            raise err.with_traceback(b.tb_of(err))
        cdef RecordMetadata meta = RecordMetadata.__new__(RecordMetadata)
        meta.topic = b.topic
        meta.partition = b.partition
        meta.offset = b.base_offset + i if b.base_offset >= 0 else -1
        meta.timestamp = b.log_append_time if b.log_append_time >= 0 else self.timestamp
        meta.serialized_key_size = self.key_size
        meta.serialized_value_size = self.value_size
        return meta

    def exception(self):
        """The record's error, None on success. Raises CancelledError if cancelled,
        InvalidStateError if not done."""
        if self.flags & CANCELLED:
            raise self._make_cancelled_error()
        cdef CoreBatch b = self.batch
        if not batch_done(b):
            raise InvalidStateError("Exception is not set.")
        cdef int32_t i = self.index
        if b.children is not None:
            b = b.descend(&i)
        return b.error_for(i)

    def add_done_callback(self, callback, *, context=None):
        """Run ``callback(self)`` in ``context`` on the batch's loop once the record is
        done (scheduled with ``loop.call_soon`` at once if it is done already).
        ``context`` defaults to a copy of the current one. The first callback of a
        pending future puts it on its batch's list, run from one loop callback when the
        batch completes; a record whose future gets no callback costs nothing here."""
        if context is None:
            context = copy_context()
        if self.callbacks is None:
            if self.flags & CANCELLED or batch_done(self.batch):
                self.batch.result.get_loop().call_soon(callback, self, context=context)
                return
            self.callbacks = [(callback, context)]
        else:  # pending, or done with its hook still to run: keep the order
            (<list>self.callbacks).append((callback, context))
        if not self.flags & HOOKED:
            self.flags |= HOOKED
            self.batch.hook(self)  # wake_waiters() schedules them

    def remove_done_callback(self, callback):
        """Remove every registration of ``callback`` not yet scheduled; returns how
        many."""
        cdef list cbs = self.callbacks
        if cbs is None:
            return 0
        cdef list kept = [entry for entry in cbs if (<tuple>entry)[0] != callback]
        cdef Py_ssize_t removed = len(cbs) - len(kept)
        if removed:
            self.callbacks = kept if kept else None
        return removed

    def cancel(self, msg=None):
        """Cancel this handle, not the record (see the class docstring). False if it is
        done already; else True, and its callbacks are scheduled."""
        if self.flags & CANCELLED or batch_done(self.batch):
            return False
        self.flags |= CANCELLED
        awaiting = self.awaiting
        self.awaiting = msg  # from now on, the message (no task awaits it any more)
        schedule_callbacks(self)
        if awaiting is not None:
            if type(awaiting) is list:
                for w in <list>awaiting:
                    w.cancel(msg)
            else:
                awaiting.cancel(msg)
        return True

    def get_loop(self):
        """The event loop of the record's batch."""
        return self.batch.result.get_loop()

    def _make_cancelled_error(self):
        # asyncio.gather() asks a cancelled child for this.
        msg = self._cancel_message
        return CancelledError() if msg is None else CancelledError(msg)

    @property
    def _cancel_message(self):
        # asyncio.gather() reads it from a cancelled child.
        return self.awaiting if self.flags & CANCELLED else None

    @property
    def _asyncio_future_blocking(self):
        # asyncio.isfuture() is true for a class with this attribute not None. (A task
        # sets it back to False after a future it awaits yielded itself with True;
        # this one always yields its private waiter instead.)
        return bool(self.flags & BLOCKING)

    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value):
        if value:
            self.flags |= BLOCKING
        else:
            self.flags &= <unsigned char>~BLOCKING

    @property
    def topic(self):
        return self.batch.topic

    @property
    def partition(self):
        return self.batch.partition

    def __repr__(self):
        state = "pending"
        if self.flags & CANCELLED:
            state = "cancelled"
        elif self.batch.result.done():
            state = "failed" if self.exception() is not None else "done"
        return f"<RecordFuture {self.batch.topic}-{self.batch.partition}#{self.index} {state}>"



cdef object rf_step(object fut, object arg, int* pending):
    # (A value sent in is ignored, as asyncio.Future's iterator does.)
    return (<RecordFuture>fut).step(pending)


aiop_install_am_send(RecordFuture, rf_step, 0)


cdef class Appender(CoreAppender):
    """Routes records to their partition's open batch (see :class:`records.CoreAppender`),
    on the native path only in the thread of the event loop it is bound to."""

    def bind(self, object loop):
        """Take records (in :meth:`append`) only while ``loop`` runs them, in its own
        thread; ``None``: take none."""
        self.loop = loop

    def bound_loop(self):
        """The bound loop if it is the one running in this thread (known without
        ``asyncio.get_running_loop()``, which makes a getpid() system call), else
        None: then the caller asks asyncio."""
        if self.loop is not None and running_here(self.loop):
            return self.loop
        return None

    def append(self, object topic, object value, object key, object partition,
               object timestamp_ms, /):
        """A RecordFuture, or None when the Python path must take this record.

        Also None unless called on the bound loop, while it runs in this thread.
        """
        return self.append_now(topic, value, key, partition, timestamp_ms)

    cdef object append_now(self, object topic, object value, object key, object partition,
                           object timestamp_ms):
        if self.loop is None or not running_here(self.loop):
            return None
        cdef int32_t index
        cdef int64_t ts
        cdef int open_p
        cdef CoreBatch batch = self.fast_append(topic, value, key, partition, timestamp_ms,
                                                &index, &ts, &open_p)
        if batch is None:
            if open_p < 0 or self.opener is None or not self.hot:
                return None
            batch = self.open_batch(topic, key, partition, open_p, ts, value)
            if batch is None:
                return None
            index = 0
        cdef RecordFuture fut = RecordFuture.__new__(RecordFuture)  # no argument parsing
        fut.batch = <ProducerBatch>batch  # routes hold the producer's ProducerBatches
        fut.index = index
        fut.timestamp = ts
        fut.key_size = -1 if key is None else <int32_t>PyBytes_GET_SIZE(key)
        fut.value_size = -1 if value is None else <int32_t>PyBytes_GET_SIZE(value)
        return fut

    cdef CoreBatch open_batch(self, object topic, object key, object partition, int p,
                              int64_t ts, object value):
        # The record's partition needs a new batch: the opener makes it now (memory
        # free, nothing to wait for) with the record as its first, or returns None and
        # the Python path takes the record. A sticky choice's bytes count (KIP-794)
        # as the Python path counts them: the new batch's size.
        cdef object opened = self.opener(topic, p, ts, key, value)
        if opened is None:
            return None
        cdef CoreBatch batch = <CoreBatch?>opened
        self.count_sticky(topic, key, partition, p, batch.builder.pos)
        return batch

    def send(self, object topic, object value=None, object key=None, *,
             object partition=None, object timestamp_ms=None, object headers=None):
        """``Producer.send`` (the same signature): a :class:`PendingSend` of the record
        (awaited, it appends it: natively while :attr:`hot`, else through
        :attr:`slow`), or for a record with headers ``slow(...)``'s coroutine."""
        if headers is not None:
            return self.slow(topic, value, key, partition, timestamp_ms, headers)
        cdef PendingSend p = PendingSend.__new__(PendingSend)
        p.appender = self
        p.topic = topic
        p.value = value
        p.key = key
        p.partition = partition
        p.timestamp_ms = timestamp_ms
        return p


# PendingSend.state
cdef enum:
    NEW = 0         # not awaited yet: holds the record
    DELEGATING = 1  # on the Python path: steps its coroutine
    FINISHED = 2    # returned, raised or closed


@cython.final
@cython.freelist(16)
@cython.no_gc  # holds the record's objects and the appender, never itself
cdef class PendingSend:
    """What ``Producer.send()`` returns for a record without headers: a coroutine
    (``asyncio.iscoroutine()`` is true; ``create_task``, ``gather`` and ``wait_for``
    take it) that does nothing until awaited, as an ``async def`` would.

    Its first step appends the record on the native path when the appender is hot,
    and returns the RecordFuture at once: no coroutine object, frame or generator
    step for the common case. Otherwise it calls ``appender.slow(topic, value, key,
    partition, timestamp_ms, None)`` (the producer's Python path, a coroutine) and
    delegates every step, ``throw()`` and ``close()`` to it, as ``await`` does.
    Dropped without being awaited, it warns as a never-awaited coroutine does: the
    record was not sent.
    """

    def __await__(self):
        return self

    def __next__(self):
        cdef int pending = 0
        value = self.step(None, &pending)
        if pending:
            return value
        raise StopIteration(value)

    def send(self, arg):
        """One step, as ``coroutine.send``."""
        cdef int pending = 0
        value = self.step(arg, &pending)
        if pending:
            return value
        raise StopIteration(value)

    def throw(self, typ, val=None, tb=None):
        """As ``coroutine.throw``: into the Python path's coroutine if it runs; else
        the exception is raised here and this is finished."""
        if self.state == DELEGATING:
            try:
                if val is None and tb is None:
                    return self.inner.throw(typ)
                return self.inner.throw(typ, val, tb)
            except BaseException:
                self.finish()
                raise
        self.finish()
        if isinstance(typ, BaseException):
            raise typ
        if val is None:
            raise typ()
        if tb is not None:
            raise val.with_traceback(tb)
        raise val

    def close(self):
        """As ``coroutine.close``."""
        inner = self.inner if self.state == DELEGATING else None
        self.finish()
        if inner is not None:
            inner.close()

    cdef void finish(self) noexcept:
        self.state = FINISHED
        self.inner = None
        self.drop_record()

    cdef void drop_record(self) noexcept:
        self.topic = self.value = self.key = self.partition = self.timestamp_ms = None

    cdef object step(self, object arg, int* pending):
        cdef PyObject* res = NULL
        cdef int r
        cdef Appender a
        if self.state == NEW:
            if arg is not None:
                raise TypeError("can't send non-None value to a just-started coroutine")
            a = self.appender
            if a.hot:
                fut = a.append_now(self.topic, self.value, self.key, self.partition,
                                   self.timestamp_ms)
                if fut is not None:
                    self.state = FINISHED  # (its fields go with it, at once as a rule)
                    return fut
            try:
                self.inner = a.slow(self.topic, self.value, self.key, self.partition,
                                    self.timestamp_ms, None)
            except BaseException:
                self.finish()
                raise
            self.drop_record()  # (the Python path's coroutine has the record now)
            self.state = DELEGATING
        if self.state == DELEGATING:
            try:
                r = PyIter_Send(self.inner, arg, &res)
            except BaseException:
                self.finish()
                raise
            value = <object>res
            Py_XDECREF(res)
            if r == PYGEN_NEXT:
                pending[0] = 1
            else:
                self.finish()
            return value
        raise RuntimeError("cannot reuse already awaited coroutine")

    def __del__(self):
        if self.state == NEW:
            warnings.warn(
                f"Producer.send({self.topic!r}, ...) was never awaited: the record was "
                "not sent", RuntimeWarning, stacklevel=2)


cdef object ps_step(object p, object arg, int* pending):
    return (<PendingSend>p).step(arg, pending)


aiop_install_am_send(PendingSend, ps_step, 1)
