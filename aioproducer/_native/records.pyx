# cython: language_level=3
"""The loop-free core of the per-record hot path: batches, routes, appends.

:class:`CoreBatch` is a batch's records and outcome, :class:`TopicRoute` a topic's
partition count, sticky partition and open batches, ``choose_partition`` the one
native partition choice (explicit, Java murmur2 of the key, or the sticky partition)
and :class:`CoreAppender` appends a record, or a run of records, to its partition's
open batch. Anything out of the ordinary (unknown topic, a full batch, headers, a
non-bytes key or value, a partition out of range) is left to the Python path in
``producer.py``, with its typed errors; it calls back into the same builder and
the same routes.

This module knows nothing of asyncio: it imports no asyncio, creates and resolves
no future and does not look at the thread state. A batch's ``result`` (made and
completed by the Python side) is only asked ``done()``. The asyncio glue, the
waiters of :class:`aio.ProducerBatch`, :class:`aio.RecordFuture` and the loop
binding of :class:`aio.Appender`, is in ``aio.pyx``.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from .batch cimport BatchBuilder, RawHeader
from .murmur2 cimport murmur2_to_partition

# send_many's bulk path (CoreAppender.append_many) reads these.
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport uint8_t, uintptr_t


cdef extern from "Python.h":
    # PyLong_AsLong without Cython's error check: choose_partition checks (and clears)
    # the OverflowError itself.
    long PyLong_AsLong_unchecked "PyLong_AsLong" (object o) noexcept

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


cdef class CoreBatch:
    """One batch for one partition: a builder over a pool block, and its outcome;
    the loop-free part of :class:`aio.ProducerBatch` (which adds the private waiters).

    Outcome: ``result`` (the batch's future, made and completed by the Python side;
    only its ``done()`` is asked here),
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
        self.settled = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error_ = None
        self.error_tb = None
        self.record_errors_ = None
        self.last_error = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1

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
        ``result`` must be completed (then ``wake_waiters()``) only when
        ``child_done()`` (both of aio.ProducerBatch) says so, that is when every child is done: its record
        futures are done exactly then.
        """
        if self.children is not None:
            raise ValueError(f"{self!r} was already split")
        if not children:
            raise ValueError("set_children() needs at least one child batch")
        if self.result.done():
            raise ValueError(f"{self!r} is done: a completed batch cannot be split")
        cdef CoreBatch child
        cdef Py_ssize_t total = 0
        cdef set seen = set()
        for c in children:
            if not isinstance(c, CoreBatch):
                raise TypeError(f"children must be ProducerBatch objects, not {type(c).__name__}")
            child = <CoreBatch>c
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
            child = <CoreBatch>c
            child.parent = self
            child.parent_offset = offset
            offset += child.builder.count
        self.children = list(children)
        self.pending_children = <int>len(children)

    cdef CoreBatch descend(self, int32_t* index):
        # The batch that gives the outcome of the record at index[0] of this batch:
        # down through the children while the child holding it is done (a parent
        # completed on its own, e.g. aborted, answers for its children not done).
        # index[0] becomes the record's index in that batch.
        cdef CoreBatch b = self, child
        cdef list ch
        cdef Py_ssize_t lo, hi, mid
        cdef int32_t i = index[0]
        while b.children is not None:
            ch = b.children
            lo = 0
            hi = PyList_GET_SIZE(ch) - 1
            while lo < hi:  # the last child starting at or before i
                mid = (lo + hi + 1) // 2
                if (<CoreBatch>PyList_GET_ITEM(ch, mid)).parent_offset <= i:
                    lo = mid
                else:
                    hi = mid - 1
            child = <CoreBatch>PyList_GET_ITEM(ch, lo)
            if (i < child.parent_offset or i - child.parent_offset >= child.builder.count
                    or not child.result.done()):
                break
            i -= child.parent_offset
            b = child
        index[0] = i
        return b

    # -- failures --------------------------------------------------------------------

    cdef int collect_failures(self, list out, set seen, bint with_tb,
                              int32_t lo, int32_t hi) except -1:
        # Appends the distinct errors of this batch's records lo..hi-1, in record
        # order, to ``out``: (topic, partition, error), or (error, traceback) with
        # ``with_tb``. A split batch answers through the children holding those records.
        cdef CoreBatch child
        cdef int32_t off, cnt
        cdef Py_ssize_t own = 0
        if lo < 0:
            lo = 0
        if hi > self.builder.count:
            hi = self.builder.count
        if lo >= hi:
            return 0  # no record asked about
        if self.children is not None:
            for c in self.children:
                child = <CoreBatch>c
                off = child.parent_offset
                cnt = child.builder.count
                if off + cnt <= lo or off >= hi:
                    continue  # none of the records asked about
                if child.result.done():
                    child.collect_failures(out, seen, with_tb,
                                           <int32_t>max(lo - off, <int32_t>0),
                                           <int32_t>min(hi - off, cnt))
                elif self.result.done() and self.error_ is not None:
                    # completed on its own (aborted): its error is this child's records'
                    self.add_failure(out, seen, with_tb, self.error_)
            return 0
        if not self.result.done():
            return 0
        if self.record_errors_:
            for index in sorted(self.record_errors_):
                if lo <= index < hi:
                    own += 1
                    self.add_failure(out, seen, with_tb, self.record_errors_[index])
            if self.error_ is not None and own < hi - lo:
                # (only if one of these records has no error of its own)
                self.add_failure(out, seen, with_tb, self.error_)
        elif self.error_ is not None:
            self.add_failure(out, seen, with_tb, self.error_)
        return 0

    cdef Py_ssize_t count_failed(self, int32_t lo, int32_t hi) except -1:
        # A failed batch fails all its records (the ones without a KIP-467 error of
        # their own get BatchRejectedError); a split one counts through its children.
        cdef CoreBatch child
        cdef int32_t off, cnt
        cdef Py_ssize_t n = 0
        if lo < 0:
            lo = 0
        if hi > self.builder.count:
            hi = self.builder.count
        if lo >= hi:
            return 0  # no record asked about
        if self.children is not None:
            for c in self.children:
                child = <CoreBatch>c
                off = child.parent_offset
                cnt = child.builder.count
                if off + cnt <= lo or off >= hi:
                    continue
                if child.result.done():
                    n += child.count_failed(<int32_t>max(lo - off, <int32_t>0),
                                            <int32_t>min(hi - off, cnt))
                elif self.result.done() and self.error_ is not None:
                    n += min(hi, off + cnt) - max(lo, off)
            return n
        if not self.result.done():
            return 0
        if self.error_ is not None:
            return hi - lo
        if self.record_errors_:  # (errors of their own, and no batch error)
            for index in self.record_errors_:
                if lo <= index < hi:
                    n += 1
        return n

    cdef int add_failure(self, list out, set seen, bint with_tb, object err) except -1:
        if id(err) in seen:
            return 0
        seen.add(id(err))
        if with_tb:
            out.append((err, self.tb_of(err)))
        else:
            out.append((self.topic, self.partition, err))
        return 0

    def failures(self, int32_t lo=0, int32_t hi=-1):
        """``(topic, partition, error)`` of each distinct error of this batch's records
        so far, in record order: its record errors and its error, or, for a split
        batch, those of its done children (recursively); an error shared by several
        records is listed once. Empty while nothing failed. ``lo``, ``hi``: only the
        records ``lo..hi-1`` (``hi`` -1: to the last)."""
        cdef list out = []
        self.collect_failures(out, set(), False, lo, self.builder.count if hi < 0 else hi)
        return out

    def first_failure(self, int32_t lo=0, int32_t hi=-1):
        """``(error, traceback)`` of the first of :meth:`failures`, with the traceback
        the error had when the batch recorded it (raise ``error.with_traceback(tb)``);
        None when nothing failed."""
        cdef list out = []
        self.collect_failures(out, set(), True, lo, self.builder.count if hi < 0 else hi)
        return out[0] if out else None

    def failed_count(self, int32_t lo=0, int32_t hi=-1):
        """How many of the records ``lo..hi-1`` (``hi`` -1: to the last) have failed so
        far (a split batch: in the children holding them)."""
        return self.count_failed(lo, self.builder.count if hi < 0 else hi)

    @property
    def record_count(self):
        return self.builder.count

    @property
    def closed(self):
        return self.builder.closed_

    def __repr__(self):
        split = "" if self.children is None else f" split={len(self.children)}"
        return (f"<{type(self).__name__} {self.topic}-{self.partition} "
                f"records={self.builder.count} attempts={self.attempts} seq={self.base_sequence}{split}>")


cdef class TopicRoute:
    """Where a topic's records go: partition count, sticky partition, open batches.

    KIP-794: ``sticky_bytes`` counts the batch bytes produced to the sticky partition
    since it was chosen (a new batch counts its header too); once they reach
    ``sticky_limit``, the next record that finds the partition's open batch full (or
    gone), or any record at twice the limit, goes to the Python path, which moves the
    sticky partition (``partitioner.py``: ``RecordPartitioner.sticky``).
    """

    def __init__(self, int num_partitions, int sticky_limit=16384):
        if num_partitions < 0:
            raise ValueError(f"num_partitions must be >= 0, got {num_partitions}")
        self.num_partitions = num_partitions
        self.sticky = -1
        self.sticky_bytes = 0
        self.sticky_limit = sticky_limit
        self.tails = [None] * num_partitions

    def resize(self, int num_partitions):
        if num_partitions < 0:
            raise ValueError(f"num_partitions must be >= 0, got {num_partitions}")
        if num_partitions > len(self.tails):
            self.tails.extend([None] * (num_partitions - len(self.tails)))
        self.num_partitions = num_partitions
        if self.sticky >= num_partitions:
            self.sticky = -1
            self.sticky_bytes = 0

    def switch_due(self):
        """Whether the sticky partition must move before the next keyless record
        (none chosen, or its bytes reached the limit and its open batch is full or
        gone, or they reached twice the limit). The native path asks the same."""
        return sticky_switch_due(self)


cdef inline bint _is_bytes_or_none(object o):
    return o is None or type(o) is bytes




cdef inline bint sticky_switch_due(TopicRoute route) noexcept:
    # KIP-794 (Java's BuiltInPartitioner.updatePartitionInfo with enableSwitch = "all
    # batches full"): the sticky partition moves once batch_size bytes went to it and
    # its open batch takes no more records or holds batch_size bytes, or once twice
    # batch_size bytes went to it. "Holds batch_size bytes" is Java's full batch; a
    # batch grown past batch_size (batch_max_size) must not make the partition's stay
    # longer than the others', or a backlogged partition (whose batches grow) would
    # get more records per stay and the adaptive weights would count for less.
    # (Uncompressed batches only: ``pos`` counts uncompressed bytes, and a compressed
    # batch holds batch_size bytes after compression.)
    cdef int s = route.sticky
    cdef long long limit = route.sticky_limit
    if s < 0 or s >= route.num_partitions or s >= PyList_GET_SIZE(route.tails):
        return True
    if limit <= 0 or route.sticky_bytes < limit or route.num_partitions == 1:
        return False  # (one partition: a move could only choose it again)
    if route.sticky_bytes >= 2 * limit:
        return True
    cdef object tail = <object>PyList_GET_ITEM(route.tails, s)
    cdef BatchBuilder builder = (<CoreBatch>tail).builder if tail is not None else None
    return tail is None or (<CoreBatch>tail).full or \
        (builder.codec_ == 0 and builder.pos >= limit)


cdef inline int choose_partition(TopicRoute route, object key, object partition,
                                 bint hash_keys, bint ignore_keys) noexcept:
    # The partition of a record whose key is bytes or None: the explicit partition,
    # else murmur2 of the key, else the topic's sticky partition. -1 means "take the
    # Python path" (a partition not an int or out of range, keys not hashed here, no
    # sticky partition chosen yet): it decides the same way, and raises the typed
    # errors. The only other copy of this order is partitioner.py's, for the custom
    # partitioners and the errors native code does not give.
    cdef int n = route.num_partitions
    cdef long explicit
    if partition is not None:
        if type(partition) is not int:
            return -1
        explicit = PyLong_AsLong_unchecked(partition)
        if explicit == -1 and PyErr_Occurred():  # beyond a C long: out of range
            PyErr_Clear()
            return -1
        if explicit < 0 or explicit >= n:
            return -1
        return <int>explicit
    if key is not None and not ignore_keys:
        if not hash_keys or n <= 0:
            return -1
        return murmur2_to_partition(<const unsigned char*>PyBytes_AS_STRING(key),
                                    PyBytes_GET_SIZE(key), n)
    if sticky_switch_due(route):
        return -1  # the Python path moves the sticky partition
    return route.sticky


cdef inline bint is_sticky_choice(object key, object partition, bint ignore_keys) noexcept:
    # The record's partition came from the sticky choice (its bytes count, KIP-794).
    return partition is None and (key is None or ignore_keys)


cdef inline bint too_large(Py_ssize_t max_payload, object key, object value) noexcept:
    # Key and value (bytes or None) above max_payload bytes (-1: no bound).
    return max_payload >= 0 and (
        (0 if key is None else PyBytes_GET_SIZE(key))
        + (0 if value is None else PyBytes_GET_SIZE(value)) > max_payload)


# -- send_many's bulk input: Python lists or Arrow columns -----------------------------

# How append_many reads a column: absent, a Python list, or Arrow buffers.
cdef enum:
    COL_NONE = 0
    COL_LIST = 1
    COL_ARROW = 2


# An Arrow binary/string column (or large_binary/large_string): the buffers of one
# array, which the caller keeps alive for the call (aioproducer/_bulk.py).
cdef struct BinCol:
    const uint8_t* validity        # NULL: no nulls
    const char* offsets            # int32 (int64 when large) offsets
    const char* data               # the bytes
    Py_ssize_t offset              # the array's offset into its buffers
    bint large


cdef int bin_col(object spec, BinCol* c) except -1:
    # spec: (validity address or 0, offsets address, data address or 0, offset, large)
    validity, offsets, data, offset, large = spec
    c.validity = <const uint8_t*><uintptr_t>validity
    c.offsets = <const char*><uintptr_t>offsets
    c.data = <const char*><uintptr_t>data
    c.offset = offset
    c.large = large
    if c.offsets == NULL or c.offset < 0:
        raise ValueError("an Arrow column needs its offsets buffer")
    return 0


cdef inline bint arrow_valid(const uint8_t* validity, Py_ssize_t j) noexcept:
    return validity == NULL or (validity[j >> 3] >> (j & 7)) & 1


cdef inline void bin_get(const BinCol* c, Py_ssize_t i, const char** ptr,
                         Py_ssize_t* length) noexcept:
    # Row i of the column: its bytes, or length -1 for null.
    cdef Py_ssize_t j = c.offset + i
    cdef int64_t a, b
    if not arrow_valid(c.validity, j):
        ptr[0] = NULL
        length[0] = -1
        return
    if c.large:
        a = (<const int64_t*>c.offsets)[j]
        b = (<const int64_t*>c.offsets)[j + 1]
    else:
        a = (<const int32_t*>c.offsets)[j]
        b = (<const int32_t*>c.offsets)[j + 1]
    ptr[0] = c.data + a
    length[0] = <Py_ssize_t>(b - a)


cdef inline bint bytes_slice(object o, const char** ptr, Py_ssize_t* length) noexcept:
    # A list item: bytes or None; False for anything else (the Python path checks it).
    if o is None:
        ptr[0] = NULL
        length[0] = -1
        return True
    if type(o) is bytes:
        ptr[0] = PyBytes_AS_STRING(o)
        length[0] = PyBytes_GET_SIZE(o)
        return True
    return False


cdef inline int choose_partition_raw(TopicRoute route, const char* key, Py_ssize_t key_len,
                                     object partition, bint hash_keys,
                                     bint ignore_keys) noexcept:
    # choose_partition for a key given as memory (-1 length: null).
    if partition is not None or key_len < 0 or ignore_keys:
        return choose_partition(route, None, partition, hash_keys, ignore_keys)
    if not hash_keys or route.num_partitions <= 0:
        return -1
    return murmur2_to_partition(<const unsigned char*>key, key_len, route.num_partitions)


cdef extern from *:
    """
    /* A str's UTF-8 bytes without an exception check: compact ASCII strings are read
       in place; others through PyUnicode_AsUTF8AndSize (cached in the str). NULL, with
       the error cleared, for a str that has no UTF-8 form (lone surrogates). */
    static inline const char* aiop_str_utf8(PyObject* o, Py_ssize_t* size) {
        const char* p;
        if (PyUnicode_IS_COMPACT_ASCII(o)) {
            *size = PyUnicode_GET_LENGTH(o);
            return (const char*)PyUnicode_DATA(o);
        }
        p = PyUnicode_AsUTF8AndSize(o, size);
        if (p == NULL)
            PyErr_Clear();
        return p;
    }

    /* One header of a Python list/tuple: a 2-tuple (str, bytes | None) into its
       key and value pointers and lengths (-1: null value); 0, or -1 for anything
       else (the Python path checks it). Borrowed: the caller's list keeps it alive. */
    static inline int aiop_header_pair(PyObject* pair, const char** key,
                                       Py_ssize_t* key_len, const char** value,
                                       Py_ssize_t* value_len) {
        PyObject *k, *v;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return -1;
        k = PyTuple_GET_ITEM(pair, 0);
        v = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_Check(k))
            return -1;
        if (v == Py_None) {
            *value = NULL;
            *value_len = -1;
        } else if (PyBytes_CheckExact(v)) {
            *value = PyBytes_AS_STRING(v);
            *value_len = PyBytes_GET_SIZE(v);
        } else {
            return -1;
        }
        *key = aiop_str_utf8(k, key_len);
        return *key == NULL ? -1 : 0;
    }

    /* The items of a list or tuple (exact types) into *items, their count into *n:
       0, or -1 for anything else. (An empty list's item array is NULL.) */
    static inline int aiop_seq_items(PyObject* o, PyObject*** items, Py_ssize_t* n) {
        if (PyList_CheckExact(o)) {
            *n = PyList_GET_SIZE(o);
            *items = ((PyListObject*)o)->ob_item;
            return 0;
        }
        if (PyTuple_CheckExact(o)) {
            *n = PyTuple_GET_SIZE(o);
            *items = ((PyTupleObject*)o)->ob_item;
            return 0;
        }
        return -1;
    }
    """
    const char* aiop_str_utf8(object o, Py_ssize_t* size) noexcept
    int aiop_header_pair(PyObject* pair, const char** key, Py_ssize_t* key_len,
                         const char** value, Py_ssize_t* value_len) noexcept
    int aiop_seq_items(PyObject* o, PyObject*** items, Py_ssize_t* n) noexcept


cdef inline int col_mode(object col):
    if col is None:
        return COL_NONE
    if type(col) is list:
        return COL_LIST
    if type(col) is tuple:
        return COL_ARROW
    raise TypeError(f"append_many takes lists or Arrow column specs, not {type(col).__name__}")


cdef class CoreAppender:
    """Routes records to their partition's open batch: the loop-free part of
    :class:`aio.Appender` (which adds the loop binding and the record futures)."""

    def __init__(self, bint hash_keys, bint ignore_keys=False, Py_ssize_t max_payload=-1,
                 int sticky_batch_size=16384):
        self.routes = {}
        # KIP-794: keyless records move on after this many bytes (the new routes'
        # sticky_limit; batch_size); <= 0: only when the Python path moves them.
        self.sticky_batch_size = sticky_batch_size
        self.hash_keys = hash_keys
        self.ignore_keys = ignore_keys
        # Records near max_request_size / buffer_memory get the exact size check (and
        # its typed error) in Python; -1: no bound here.
        self.max_payload = max_payload

    def route(self, str topic):
        """The topic's route, or None."""
        return self.routes.get(topic)

    def set_route(self, str topic, int num_partitions):
        """Create or update a topic's route for ``num_partitions`` partitions."""
        cdef TopicRoute r = self.routes.get(topic)
        if r is None:
            r = TopicRoute(num_partitions, self.sticky_batch_size)
            self.routes[topic] = r
        elif r.num_partitions != num_partitions:
            r.resize(num_partitions)
        return r

    def drop_route(self, str topic):
        """Forget a topic's route (it expired from the metadata); its records take
        the Python path again. True if there was one."""
        self.last_topic = None
        self.last_route = None
        return self.routes.pop(topic, None) is not None

    cdef CoreBatch fast_append(self, object topic, object value, object key,
                               object partition, object timestamp_ms,
                               int32_t* index, int64_t* ts, int* open_p):
        cdef TopicRoute route
        open_p[0] = -1
        cdef PyObject* found
        if topic is self.last_topic and self.last_route is not None:
            # An application sends to the same topic object again and again: its
            # route without a dict lookup (drop_route clears this).
            route = self.last_route
        else:
            if type(topic) is not str:
                return None
            found = PyDict_GetItem(self.routes, topic)
            if found is NULL:
                return None
            route = <TopicRoute>found
            self.last_topic = topic
            self.last_route = route
        cdef int64_t t
        if not _is_bytes_or_none(value) or not _is_bytes_or_none(key):
            return None
        if too_large(self.max_payload, key, value):
            return None
        cdef int p = choose_partition(route, key, partition, self.hash_keys, self.ignore_keys)
        if p < 0:
            return None
        if timestamp_ms is None:
            t = now_ms()
        elif type(timestamp_ms) is int and timestamp_ms >= 0:
            t = timestamp_ms
        else:
            return None
        cdef object tail = <object>PyList_GET_ITEM(route.tails, p)
        cdef CoreBatch batch = <CoreBatch>tail if tail is not None else None
        cdef Py_ssize_t before, i = -1
        if batch is not None and not batch.full:
            before = batch.builder.pos
            i = batch.builder.append_record(t, key, value, None)
            if i < 0:
                batch.full = True
        if i < 0:
            # The partition needs a new batch. Its partition stands, unless it was
            # the sticky choice and the full batch makes its switch due (KIP-794:
            # the Python path moves it).
            if not (is_sticky_choice(key, partition, self.ignore_keys)
                    and sticky_switch_due(route)):
                open_p[0] = p
                ts[0] = t
            return None
        if is_sticky_choice(key, partition, self.ignore_keys):
            route.sticky_bytes += batch.builder.pos - before
        index[0] = <int32_t>i
        ts[0] = t
        return batch

    cdef void count_sticky(self, object topic, object key, object partition, int p,
                           Py_ssize_t nbytes) noexcept:
        if not is_sticky_choice(key, partition, self.ignore_keys):
            return
        cdef PyObject* found = PyDict_GetItem(self.routes, topic)
        if found is not NULL and (<TopicRoute>found).sticky == p:
            (<TopicRoute>found).sticky_bytes += nbytes

    def append_many(self, str topic, object values, object keys, Py_ssize_t start,
                    object partition, object timestamp_ms, list touched,
                    object headers=None, object timestamps=None, Py_ssize_t count=-1,
                    list firsts=None):
        """Append records ``start..`` while they fit in open batches.

        ``values`` and ``keys`` are lists (bytes or None items) or Arrow binary column
        specs ``(validity address, offsets address, data address, offset, large)``;
        ``headers`` a list (per record: None or a list/tuple of ``(str, bytes | None)``
        tuples) or an Arrow list<struct<key, value>> spec ``(validity address, offsets
        address, offset, large, key spec, value spec)``; ``timestamps`` a list (int ms or
        None) or an Arrow int64 spec ``(validity address, data address, offset)``; with
        ``timestamps``, ``timestamp_ms`` is ignored. ``count`` is the number of records
        (needed when ``values`` is a spec). The caller keeps the Arrow buffers alive.

        Returns the index of the first record left for the Python path (``count`` when
        all were appended): anything it must check or decide (a type, a size near a
        limit, a new batch). Every batch written into is added once to ``touched``,
        and the index in it of the first record written there to ``firsts``.
        Needs no loop: the caller awaits the batches.
        """
        cdef int vmode = col_mode(values), kmode = col_mode(keys)
        cdef int hmode = col_mode(headers), tmode = col_mode(timestamps)
        cdef Py_ssize_t n = count, i
        if vmode == COL_LIST:
            n = PyList_GET_SIZE(<list>values)
        elif vmode == COL_NONE or n < 0:
            raise ValueError("append_many needs values, and count with an Arrow column")
        for mode, col, name in ((kmode, keys, "keys"), (hmode, headers, "headers"),
                                (tmode, timestamps, "timestamps")):
            if mode == COL_LIST and PyList_GET_SIZE(<list>col) != n:
                raise ValueError(f"{name} and values must have the same length")
        cdef BinCol vcol, kcol, hkcol, hvcol
        cdef const uint8_t* hvalid = NULL
        cdef const char* hoffs = NULL
        cdef Py_ssize_t hoff = 0
        cdef bint hlarge = False
        cdef const uint8_t* tvalid = NULL
        cdef const int64_t* tdata = NULL
        cdef Py_ssize_t toff = 0
        if vmode == COL_ARROW:
            bin_col(values, &vcol)
        if kmode == COL_ARROW:
            bin_col(keys, &kcol)
        if hmode == COL_ARROW:
            hv, ho, hoff, hlarge, hkspec, hvspec = headers
            hvalid = <const uint8_t*><uintptr_t>hv
            hoffs = <const char*><uintptr_t>ho
            if hoffs == NULL or hoff < 0:
                raise ValueError("an Arrow headers column needs its offsets buffer")
            bin_col(hkspec, &hkcol)
            bin_col(hvspec, &hvcol)
        if tmode == COL_ARROW:
            tv, td, toff = timestamps
            tvalid = <const uint8_t*><uintptr_t>tv
            tdata = <const int64_t*><uintptr_t>td
            if tdata == NULL or toff < 0:
                raise ValueError("an Arrow timestamps column needs its data buffer")
        cdef PyObject* found = PyDict_GetItem(self.routes, topic)
        if found is NULL:
            return start
        cdef TopicRoute route = <TopicRoute>found
        if tmode == COL_NONE and timestamp_ms is not None and (
                type(timestamp_ms) is not int or timestamp_ms < 0):
            return start
        cdef int64_t fixed_ts = -1 if timestamp_ms is None or tmode != COL_NONE \
            else <int64_t>timestamp_ms
        cdef int p, overflow
        cdef int64_t ts, a = 0, b = 0
        cdef long long lts
        cdef CoreBatch batch
        cdef object item, tail
        cdef PyObject* hitem
        cdef PyObject** pairs = NULL
        cdef list last = [None] * route.num_partitions  # per partition: the batch last
                                                         # added to touched
        cdef Py_ssize_t index, before, nh, cap = 0, j, payload
        cdef const char* kptr = NULL
        cdef const char* vptr = NULL
        cdef Py_ssize_t klen = -1, vlen = -1
        cdef RawHeader* slots = NULL
        cdef RawHeader* grown
        cdef RawHeader* h
        cdef Py_ssize_t max_payload = self.max_payload
        try:
            for i in range(start, n):
                # -- value and key
                if vmode == COL_LIST:
                    if not bytes_slice(<object>PyList_GET_ITEM(<list>values, i), &vptr, &vlen):
                        return i
                else:
                    bin_get(&vcol, i, &vptr, &vlen)
                if kmode == COL_LIST:
                    if not bytes_slice(<object>PyList_GET_ITEM(<list>keys, i), &kptr, &klen):
                        return i
                elif kmode == COL_ARROW:
                    bin_get(&kcol, i, &kptr, &klen)
                payload = (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
                # -- headers, borrowed into slots
                nh = 0
                if hmode == COL_LIST:
                    hitem = PyList_GET_ITEM(<list>headers, i)
                    if hitem != <PyObject*>None:
                        if aiop_seq_items(hitem, &pairs, &nh) < 0:
                            return i
                elif hmode == COL_ARROW:
                    j = hoff + i
                    if arrow_valid(hvalid, j):
                        if hlarge:
                            a = (<const int64_t*>hoffs)[j]
                            b = (<const int64_t*>hoffs)[j + 1]
                        else:
                            a = (<const int32_t*>hoffs)[j]
                            b = (<const int32_t*>hoffs)[j + 1]
                        nh = <Py_ssize_t>(b - a)
                if nh > cap:
                    grown = <RawHeader*>PyMem_Realloc(slots, <size_t>nh * sizeof(RawHeader))
                    if grown == NULL:
                        raise MemoryError()
                    slots = grown
                    cap = nh
                for j in range(nh):
                    h = &slots[j]
                    if hmode == COL_LIST:
                        if aiop_header_pair(pairs[j], &h.key, &h.key_len, &h.value,
                                            &h.value_len) < 0:
                            return i  # not (str, bytes | None): the Python path checks
                    else:
                        bin_get(&hkcol, <Py_ssize_t>a + j, &h.key, &h.key_len)
                        if h.key_len < 0:
                            return i  # a null header key: the Python path refuses it
                        bin_get(&hvcol, <Py_ssize_t>a + j, &h.value, &h.value_len)
                    # a bound of the header's bytes: key, value and their varints
                    payload += h.key_len + (h.value_len if h.value_len > 0 else 0) + 10
                if max_payload >= 0 and payload > max_payload:
                    return i  # near a size limit: the Python path checks it exactly
                # -- timestamp
                if tmode == COL_LIST:
                    item = <object>PyList_GET_ITEM(<list>timestamps, i)
                    if item is None:
                        ts = now_ms()
                    elif type(item) is int:
                        lts = PyLong_AsLongLongAndOverflow(item, &overflow)
                        if overflow or lts < 0:
                            return i
                        ts = lts
                    else:
                        return i
                elif tmode == COL_ARROW:
                    j = toff + i
                    if arrow_valid(tvalid, j):
                        ts = tdata[j]
                        if ts < 0:
                            return i
                    else:
                        ts = now_ms()
                elif fixed_ts >= 0:
                    ts = fixed_ts
                else:
                    ts = now_ms()
                # -- partition and its open batch
                p = choose_partition_raw(route, kptr, klen, partition, self.hash_keys,
                                         self.ignore_keys)
                if p < 0:
                    return i
                tail = <object>PyList_GET_ITEM(route.tails, p)
                if tail is None:
                    return i
                batch = <CoreBatch>tail
                if batch.full:
                    return i
                before = batch.builder.pos
                index = batch.builder.append_raw(ts, kptr, klen, vptr, vlen, slots, nh)
                if index < 0:
                    batch.full = True
                    return i
                if partition is None and (klen < 0 or self.ignore_keys):
                    route.sticky_bytes += batch.builder.pos - before  # KIP-794
                if <object>PyList_GET_ITEM(last, p) is not batch:
                    touched.append(batch)
                    if firsts is not None:
                        firsts.append(index)
                    last[p] = batch
            return n
        finally:
            PyMem_Free(slots)
