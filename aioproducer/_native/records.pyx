# cython: language_level=3
"""Per-record hot path: batches, record futures and the appender.

``Appender.append`` does in one call what ``send()`` needs for an ordinary record:
pick the partition (explicit, Java murmur2 of the key, or the sticky partition),
append to that partition's open batch and return a :class:`RecordFuture`. Anything
out of the ordinary (unknown topic, a full batch, headers, a non-bytes key or value,
a partition out of range) returns None, and the Python path in ``producer.py`` does
the full work, with its typed errors. There is one implementation of each step:
the Python path calls back into the same builder and the same routes.
"""

cimport cython
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport PyObject
from cpython.method cimport PyMethod_Check, PyMethod_GET_SELF
from libc.stdint cimport int32_t, int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from .batch cimport BatchBuilder
from .murmur2 cimport murmur2_hash

from asyncio import CancelledError, InvalidStateError
from contextvars import copy_context


cdef extern from "Python.h":
    # Only the field read here; the rest of the struct stays opaque.
    ctypedef struct PyThreadState:
        PyObject* async_gen_firstiter
    PyThreadState* PyThreadState_Get()


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

# Only a str and ints inside: it can never be part of a cycle, so it stays out of the
# garbage collector (one less tracked object per awaited record).
@cython.no_gc
cdef class RecordMetadata:
    """Where a record was written (Java's ``RecordMetadata``). Immutable."""

    def __init__(self, str topic, int partition, int64_t offset, int64_t timestamp,
                 int32_t serialized_key_size, int32_t serialized_value_size):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.serialized_key_size = serialized_key_size
        self.serialized_value_size = serialized_value_size

    def _astuple(self):
        return (self.topic, self.partition, self.offset, self.timestamp,
                self.serialized_key_size, self.serialized_value_size)

    def __eq__(self, other):
        if type(other) is not RecordMetadata:
            return NotImplemented
        return self._astuple() == (<RecordMetadata>other)._astuple()

    def __hash__(self):
        return hash(self._astuple())

    def __reduce__(self):
        return (RecordMetadata, self._astuple())

    def __repr__(self):
        return (f"RecordMetadata(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, timestamp={self.timestamp}, "
                f"serialized_key_size={self.serialized_key_size}, "
                f"serialized_value_size={self.serialized_value_size})")


cdef inline int64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef class ProducerBatch:
    """One batch for one partition: a builder over a pool block, and its outcome.

    Outcome: ``result`` (the batch's future, completed by the Python side),
    ``base_offset``/``log_append_time``, ``error`` (for every record, or, when
    ``record_errors`` is set, for the records without an entry there). A batch split
    after MESSAGE_TOO_LARGE has ``children`` (see :meth:`set_children`): its records
    resolve through them.
    """

    def __init__(self, tuple tp, object block, object result, double now):
        self.tp = tp
        self.topic = tp[0]
        self.partition = tp[1]
        self.block = block
        self.builder = BatchBuilder(block)
        self.result = result
        self.created = now
        self.next_attempt = 0.0
        self.attempts = 0
        self.full = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error_ = None
        self.error_tb = None
        self.record_errors_ = None
        self.last_error = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.waiters = None

    @property
    def error(self):
        """The batch's final error, None on success. Setting it also keeps the
        traceback it has now (``error_tb``): every record future raises it with that
        traceback, like ``asyncio.Future``, so raising it for many awaiters does not
        grow it."""
        return self.error_

    @error.setter
    def error(self, value):
        if value is not None and not isinstance(value, BaseException):
            raise TypeError(f"a batch's error must be an exception or None, not {value!r}")
        self.error_ = value
        self.error_tb = None if value is None else (<BaseException>value).__traceback__

    @property
    def record_errors(self):
        """KIP-467: None, or ``{index of the record in this batch: its error}``.

        A record with an entry fails with it; the batch's other records fail with
        ``error``. Assign the whole dict once the errors are known: the tracebacks of
        its errors are kept then (an error added to the dict later is kept with the
        traceback it has when it is first raised)."""
        return self.record_errors_

    @record_errors.setter
    def record_errors(self, value):
        if value is not None and type(value) is not dict:
            raise TypeError(f"record_errors must be a dict or None, not {type(value).__name__}")
        if value:
            for err in (<dict>value).values():
                if not isinstance(err, BaseException):
                    raise TypeError(f"a record error must be an exception, not {err!r}")
        self.record_errors_ = value
        self.tbs = None
        if value:
            for err in (<dict>value).values():
                self.tb_of(err)

    cdef object error_for(self, int32_t index):
        # The error of the record at ``index`` (None on success).
        cdef PyObject* found
        if self.record_errors_ is not None:
            found = PyDict_GetItem(self.record_errors_, index)
            if found is not NULL:
                return <object>found
        return self.error_

    cdef object tb_of(self, object err):
        # The traceback ``err`` had when this batch recorded it.
        if err is self.error_:
            return self.error_tb
        if self.tbs is None:
            self.tbs = {}
        key = id(err)
        entry = self.tbs.get(key)
        if entry is None or (<tuple>entry)[0] is not err:
            entry = (err, getattr(err, "__traceback__", None))
            self.tbs[key] = entry
        return (<tuple>entry)[1]

    # -- split batches ---------------------------------------------------------------

    def set_children(self, list children not None):
        """This batch's records were moved, in order, into ``children`` (a split after
        MESSAGE_TOO_LARGE, like Java's ``splitAndReenqueue``).

        Child k holds this batch's indices ``[offset_k, offset_k + child.record_count)``
        (``offset_k`` is the sum of the record counts of the children before it); it gets
        ``child.parent = self`` and ``child.parent_offset = offset_k``. The children
        must be new batches of the same partition, none of them done, together holding
        exactly this batch's records; this batch must not be done nor already split.
        A child may be split in turn.

        From now on a record of this batch gives the metadata or error of its record in
        the child that holds it (recursively), once that child is done. This batch's
        ``result`` must be completed (then :meth:`wake_waiters`) only when
        :meth:`child_done` says so, that is when every child is done: its record
        futures are done exactly then.
        """
        if self.children is not None:
            raise ValueError(f"{self!r} was already split")
        if not children:
            raise ValueError("set_children() needs at least one child batch")
        if self.result.done():
            raise ValueError(f"{self!r} is done: a completed batch cannot be split")
        cdef ProducerBatch child
        cdef Py_ssize_t total = 0
        cdef set seen = set()
        for c in children:
            if not isinstance(c, ProducerBatch):
                raise TypeError(f"children must be ProducerBatch objects, not {type(c).__name__}")
            child = <ProducerBatch>c
            if child is self or child.parent is not None or id(child) in seen:
                raise ValueError(f"{child!r} cannot be a child of {self!r}: it is this "
                                 f"batch, already a child, or listed twice")
            seen.add(id(child))
            if child.tp != self.tp:
                raise ValueError(f"child {child!r} is not of {self.topic}-{self.partition}")
            if child.result.done():
                raise ValueError(f"child {child!r} is already done")
            if child.builder.count == 0:
                raise ValueError(f"child {child!r} holds no records")
            total += child.builder.count
        if total != self.builder.count:
            raise ValueError(f"the children hold {total} records, {self!r} holds "
                             f"{self.builder.count}")
        cdef int32_t offset = 0
        for c in children:
            child = <ProducerBatch>c
            child.parent = self
            child.parent_offset = offset
            offset += child.builder.count
        self.children = list(children)
        self.pending_children = <int>len(children)

    def child_done(self):
        """Call it on a child batch right after completing it (its ``result`` set and
        its waiters woken). True when this call made the last of its parent's children
        done: the caller must then complete ``self.parent`` (set its outcome and
        ``result``, :meth:`wake_waiters`) and call ``child_done()`` on the parent in
        turn, since the parent may itself be a child (nested splits). False otherwise,
        for a batch that has no parent, and for a second call on the same child.
        """
        cdef ProducerBatch parent = self.parent
        if parent is None or self.reported:
            return False
        if not self.result.done():
            raise InvalidStateError(f"child_done() on {self!r}, whose result is not set")
        self.reported = True
        parent.pending_children -= 1
        return parent.pending_children == 0

    cdef ProducerBatch descend(self, int32_t* index):
        # The batch that gives the outcome of the record at index[0] of this batch:
        # down through the children while the child holding it is done (a parent
        # completed on its own, e.g. aborted, answers for its children not done).
        # index[0] becomes the record's index in that batch.
        cdef ProducerBatch b = self, child
        cdef list ch
        cdef Py_ssize_t lo, hi, mid
        cdef int32_t i = index[0]
        while b.children is not None:
            ch = b.children
            lo = 0
            hi = PyList_GET_SIZE(ch) - 1
            while lo < hi:  # the last child starting at or before i
                mid = (lo + hi + 1) // 2
                if (<ProducerBatch>PyList_GET_ITEM(ch, mid)).parent_offset <= i:
                    lo = mid
                else:
                    hi = mid - 1
            child = <ProducerBatch>PyList_GET_ITEM(ch, lo)
            if (i < child.parent_offset or i - child.parent_offset >= child.builder.count
                    or not child.result.done()):
                break
            i -= child.parent_offset
            b = child
        index[0] = i
        return b

    # -- failures --------------------------------------------------------------------

    cdef int collect_failures(self, list out, set seen, bint with_tb) except -1:
        # Appends this batch's distinct errors, in record order, to ``out``:
        # (topic, partition, error), or (error, traceback) with ``with_tb``.
        cdef ProducerBatch child
        if self.children is not None:
            for c in self.children:
                child = <ProducerBatch>c
                if child.result.done():
                    child.collect_failures(out, seen, with_tb)
                elif self.result.done() and self.error_ is not None:
                    # completed on its own (aborted): its error is this child's records'
                    self.add_failure(out, seen, with_tb, self.error_)
            return 0
        if not self.result.done():
            return 0
        if self.record_errors_:
            for index in sorted(self.record_errors_):
                self.add_failure(out, seen, with_tb, self.record_errors_[index])
            if self.error_ is not None and len(self.record_errors_) < self.builder.count:
                self.add_failure(out, seen, with_tb, self.error_)
        elif self.error_ is not None:
            self.add_failure(out, seen, with_tb, self.error_)
        return 0

    cdef int add_failure(self, list out, set seen, bint with_tb, object err) except -1:
        if id(err) in seen:
            return 0
        seen.add(id(err))
        if with_tb:
            out.append((err, self.tb_of(err)))
        else:
            out.append((self.topic, self.partition, err))
        return 0

    def failures(self):
        """``(topic, partition, error)`` of each distinct error of this batch's records
        so far, in record order: its record errors and its error, or, for a split
        batch, those of its done children (recursively); an error shared by several
        records is listed once. Empty while nothing failed."""
        cdef list out = []
        self.collect_failures(out, set(), False)
        return out

    def first_failure(self):
        """``(error, traceback)`` of the first of :meth:`failures`, with the traceback
        the error had when the batch recorded it (raise ``error.with_traceback(tb)``);
        None when nothing failed."""
        cdef list out = []
        self.collect_failures(out, set(), True)
        return out[0] if out else None

    # -- waiting ---------------------------------------------------------------------

    def waiter(self):
        """A new future that :meth:`wake_waiters` resolves when the batch completes
        (None if it is done). Awaiting a private future, a cancelled task cancels only
        its own, never the batch's ``result`` that all of its records share."""
        if self.result.done():
            return None
        w = self.result.get_loop().create_future()
        if self.waiters is None:
            self.waiters = [w]
        else:
            self.waiters.append(w)
        return w

    def wake_waiters(self):
        """Resolve every waiter now (called right after ``result`` is set): the
        awaiting tasks resume one loop iteration sooner than through a done-callback
        of ``result``."""
        cdef list waiters = self.waiters
        if waiters is None:
            return
        self.waiters = None
        for w in waiters:
            if not w.done():
                w.set_result(None)

    @property
    def record_count(self):
        return self.builder.count

    @property
    def closed(self):
        return self.builder.closed_

    def __repr__(self):
        split = "" if self.children is None else f" split={len(self.children)}"
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.builder.count} "
                f"attempts={self.attempts} seq={self.base_sequence}{split}>")


# RecordFuture.flags
cdef enum:
    CANCELLED = 1   # cancel() ran while it was pending
    HOOKED = 2      # its _batch_done hook is on the batch's result future
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
    - Done-callbacks are scheduled with ``loop.call_soon(callback, self,
      context=context)`` when the record is done (the batch's loop, the context
      given, or the one current at ``add_done_callback``), and then forgotten.
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
        if not self.flags & CANCELLED:
            waiter = self.batch.waiter()
            if waiter is not None:
                # Known to cancel(), which must wake this task too.
                if self.awaiting is None:
                    self.awaiting = waiter
                elif type(self.awaiting) is list:
                    self.awaiting.append(waiter)
                else:
                    self.awaiting = [self.awaiting, waiter]
                try:
                    yield from waiter
                finally:
                    if self.flags & CANCELLED:
                        pass  # cancel() took the waiters (awaiting is its message now)
                    elif self.awaiting is waiter:
                        self.awaiting = None
                    elif type(self.awaiting) is list and waiter in <list>self.awaiting:
                        (<list>self.awaiting).remove(waiter)
        return self.result()

    def done(self):
        """True once the record is acknowledged or failed, or this handle cancelled."""
        return bool(self.flags & CANCELLED) or self.batch.result.done()

    def cancelled(self):
        """True if :meth:`cancel` cancelled this handle (the record is still sent)."""
        return bool(self.flags & CANCELLED)

    def result(self):
        """The RecordMetadata. Raises the record's error (with the traceback it had when
        the batch failed), CancelledError if cancelled, InvalidStateError if not done."""
        if self.flags & CANCELLED:
            raise self._make_cancelled_error()
        cdef ProducerBatch b = self.batch
        if not b.result.done():
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
        cdef ProducerBatch b = self.batch
        if not b.result.done():
            raise InvalidStateError("Exception is not set.")
        cdef int32_t i = self.index
        if b.children is not None:
            b = b.descend(&i)
        return b.error_for(i)

    def add_done_callback(self, callback, *, context=None):
        """Schedule ``callback(self)`` with ``loop.call_soon(callback, self,
        context=context)`` once the record is done (at once if it is done).
        ``context`` defaults to a copy of the current one. The first callback of a
        pending future hooks it on its batch's result future (once); a record whose
        future gets no callback costs nothing here."""
        if context is None:
            context = copy_context()
        if self.callbacks is None:
            if self.flags & CANCELLED or self.batch.result.done():
                self.batch.result.get_loop().call_soon(callback, self, context=context)
                return
            self.callbacks = [(callback, context)]
        else:  # pending, or done with its hook still to run: keep the order
            (<list>self.callbacks).append((callback, context))
        if not self.flags & HOOKED:
            self.flags |= HOOKED
            self.batch.result.add_done_callback(self._batch_done)

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

    def _batch_done(self, _result):
        # The hook on the batch's result future: schedule the callbacks, forget them.
        schedule_callbacks(self)

    def cancel(self, msg=None):
        """Cancel this handle, not the record (see the class docstring). False if it is
        done already; else True, and its callbacks are scheduled."""
        if self.flags & CANCELLED or self.batch.result.done():
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


cdef class TopicRoute:
    """Where a topic's records go: partition count, sticky partition, open batches."""

    def __init__(self, int num_partitions):
        self.num_partitions = num_partitions
        self.sticky = -1
        self.tails = [None] * num_partitions

    def resize(self, int num_partitions):
        if num_partitions > len(self.tails):
            self.tails.extend([None] * (num_partitions - len(self.tails)))
        self.num_partitions = num_partitions
        if self.sticky >= num_partitions:
            self.sticky = -1


cdef inline bint _is_bytes_or_none(object o):
    return o is None or type(o) is bytes


cdef class Appender:
    """Routes records to their partition's open batch (see the module docstring)."""

    def __init__(self, bint hash_keys, bint ignore_keys=False, Py_ssize_t max_payload=-1):
        self.loop = None
        self.routes = {}
        self.hash_keys = hash_keys
        self.ignore_keys = ignore_keys
        # Records near max_request_size / buffer_memory get the exact size check (and
        # its typed error) in Python; -1: no bound here.
        self.max_payload = max_payload

    def bind(self, object loop):
        """Take records (in :meth:`append`) only while ``loop`` runs them, in its own
        thread; ``None``: take none."""
        self.loop = loop

    def route(self, str topic):
        """The topic's route, or None."""
        return self.routes.get(topic)

    def set_route(self, str topic, int num_partitions):
        """Create or update a topic's route for ``num_partitions`` partitions."""
        cdef TopicRoute r = self.routes.get(topic)
        if r is None:
            r = TopicRoute(num_partitions)
            self.routes[topic] = r
        elif r.num_partitions != num_partitions:
            r.resize(num_partitions)
        return r

    def append(self, object topic, object value, object key, object partition,
               object timestamp_ms, /):
        """A RecordFuture, or None when the Python path must take this record.

        Also None unless called on the bound loop, while it runs in this thread.
        """
        if self.loop is None or not running_here(self.loop):
            return None
        return self.fast_append(topic, value, key, partition, timestamp_ms)

    cdef object fast_append(self, object topic, object value, object key, object partition,
                            object timestamp_ms):
        if type(topic) is not str:
            return None
        cdef PyObject* found = PyDict_GetItem(self.routes, topic)
        if found is NULL:
            return None
        cdef TopicRoute route = <TopicRoute>found
        cdef int n = route.num_partitions
        cdef int p
        cdef int64_t ts
        if not _is_bytes_or_none(value) or not _is_bytes_or_none(key):
            return None
        if self.max_payload >= 0 and (
                (0 if key is None else PyBytes_GET_SIZE(key))
                + (0 if value is None else PyBytes_GET_SIZE(value)) > self.max_payload):
            return None
        if partition is not None:
            if type(partition) is not int:
                return None
            if partition < 0 or partition >= n:
                return None
            p = partition
        elif key is not None and not self.ignore_keys:
            if not self.hash_keys:
                return None
            p = <int>((murmur2_hash(<const unsigned char*><char*>key,
                                    PyBytes_GET_SIZE(key)) & 0x7fffffff) % n)
        else:
            p = route.sticky
            if p < 0:
                return None
        if timestamp_ms is None:
            ts = now_ms()
        elif type(timestamp_ms) is int and timestamp_ms >= 0:
            ts = timestamp_ms
        else:
            return None
        cdef object tail = <object>PyList_GET_ITEM(route.tails, p)
        if tail is None:
            return None
        cdef ProducerBatch batch = <ProducerBatch>tail
        if batch.full:
            return None
        cdef Py_ssize_t index = batch.builder.append_record(ts, key, value, None)
        if index < 0:
            batch.full = True
            return None
        cdef RecordFuture fut = RecordFuture.__new__(RecordFuture)  # no argument parsing
        fut.batch = batch
        fut.index = <int32_t>index
        fut.timestamp = ts
        fut.key_size = -1 if key is None else <int32_t>PyBytes_GET_SIZE(key)
        fut.value_size = -1 if value is None else <int32_t>PyBytes_GET_SIZE(value)
        return fut

    def append_many(self, str topic, list values, object keys, Py_ssize_t start,
                    object partition, object timestamp_ms, list touched):
        """Append ``values[start:]`` (and ``keys``) while they fit in open batches.

        Returns the index of the first record left for the Python path (``len(values)``
        when all were appended). Every batch written into is added once to ``touched``.
        """
        cdef Py_ssize_t n = PyList_GET_SIZE(values), i
        cdef list key_list = None
        if keys is not None:
            key_list = <list?>keys
            if PyList_GET_SIZE(key_list) != n:
                raise ValueError("keys and values must have the same length")
        cdef PyObject* found = PyDict_GetItem(self.routes, topic)
        if found is NULL:
            return start
        cdef TopicRoute route = <TopicRoute>found
        cdef int num = route.num_partitions, p
        cdef int64_t ts
        cdef ProducerBatch batch
        cdef object value, key = None, tail
        cdef list last = [None] * num   # per partition: the batch last added to touched
        cdef Py_ssize_t index
        if partition is not None:
            if type(partition) is not int or partition < 0 or partition >= num:
                return start
        if timestamp_ms is not None and (type(timestamp_ms) is not int or timestamp_ms < 0):
            return start
        for i in range(start, n):
            value = <object>PyList_GET_ITEM(values, i)
            if key_list is not None:
                key = <object>PyList_GET_ITEM(key_list, i)
            if not _is_bytes_or_none(value) or not _is_bytes_or_none(key):
                return i
            if self.max_payload >= 0 and (
                    (0 if key is None else PyBytes_GET_SIZE(key))
                    + (0 if value is None else PyBytes_GET_SIZE(value)) > self.max_payload):
                return i
            if partition is not None:
                p = partition
            elif key is not None and not self.ignore_keys:
                if not self.hash_keys:
                    return i
                p = <int>((murmur2_hash(<const unsigned char*><char*>key,
                                        PyBytes_GET_SIZE(key)) & 0x7fffffff) % num)
            else:
                p = route.sticky
                if p < 0:
                    return i
            tail = <object>PyList_GET_ITEM(route.tails, p)
            if tail is None:
                return i
            batch = <ProducerBatch>tail
            if batch.full:
                return i
            ts = now_ms() if timestamp_ms is None else <int64_t>timestamp_ms
            index = batch.builder.append_record(ts, key, value, None)
            if index < 0:
                batch.full = True
                return i
            if <object>PyList_GET_ITEM(last, p) is not batch:
                touched.append(batch)
                last[p] = batch
        return n
