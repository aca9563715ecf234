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
    """One batch for one partition: a builder over a pool block, and its outcome."""

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
        self.error = None
        self.last_error = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.waiters = None

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
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.builder.count} "
                f"attempts={self.attempts} seq={self.base_sequence}>")


# It refers only to its batch. A cycle through it (a done-callback that captures it,
# held by the batch's future) is broken when the batch completes, and every batch is
# completed (acknowledged, failed, or aborted on close). Keeping one object per record
# out of the collector's counts makes collections, and their pauses, rarer.
@cython.no_gc
@cython.freelist(256)
cdef class RecordFuture:
    """The result of one ``send()``: await it, or add a done callback.

    Like Java's ``FutureRecordMetadata``, it is (batch, index): the only asyncio
    future is the batch's.
    """

    def __init__(self, ProducerBatch batch, int32_t index, int64_t timestamp,
                 int32_t key_size, int32_t value_size):
        self.batch = batch
        self.index = index
        self.timestamp = timestamp
        self.key_size = key_size
        self.value_size = value_size

    def __await__(self):
        waiter = self.batch.waiter()
        if waiter is not None:
            yield from waiter
        return self.result()

    def done(self):
        return self.batch.result.done()

    def result(self):
        """The RecordMetadata; raises the record's error, or InvalidStateError if not done."""
        cdef ProducerBatch b = self.batch
        if not b.result.done():
            b.result.result()  # raises asyncio.InvalidStateError
        if b.error is not None:
            raise b.error
        offset = b.base_offset + self.index if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else self.timestamp
        cdef RecordMetadata meta = RecordMetadata.__new__(RecordMetadata)
        meta.topic = b.topic
        meta.partition = b.partition
        meta.offset = offset
        meta.timestamp = ts
        meta.serialized_key_size = self.key_size
        meta.serialized_value_size = self.value_size
        return meta

    def exception(self):
        if not self.batch.result.done():
            self.batch.result.result()  # raises asyncio.InvalidStateError
        return self.batch.error

    def add_done_callback(self, callback):
        """Call ``callback(self)`` on the event loop once the record is done."""
        self.batch.result.add_done_callback(lambda _f: callback(self))

    @property
    def topic(self):
        return self.batch.topic

    @property
    def partition(self):
        return self.batch.partition

    def __repr__(self):
        state = "pending"
        if self.batch.result.done():
            state = "failed" if self.batch.error is not None else "done"
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
