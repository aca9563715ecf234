"""Kafka record batch v2 (magic 2), written straight into a pool Block.

Wire format (Kafka protocol documentation, "Record Batch"; big-endian):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | records count int32 | records...

and each record (signed varints are zigzag):

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headers count varint
    | (headerKeyLength varint | key | headerValueLength varint | value)*

The CRC is CRC-32C over ``attributes`` up to the end of the batch.  Records are
sized exactly before anything is written, so a record that does not fit leaves
the block untouched.
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_READ,
    PyBUF_SIMPLE,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_Check, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_Check
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport PyObject, Py_XDECREF, Py_XINCREF
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_Check
from libc.string cimport memcpy
from libc.stdint cimport (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    int16_t,
    int32_t,
    int64_t,
    uint16_t,
    uint32_t,
    uint64_t,
)

from .cputime cimport thread_cpu_ns
from .debug cimport AIOP_DEBUG
from .pool cimport BLOCK_LIVE, BLOCK_RELEASED, Block
from .wire cimport (
    Writer,
    put_be16,
    put_be32,
    put_be64,
    put_bytes,
    put_u8,
    put_varint,
    uvarint_size,
    varint_size,
    writer_init,
    zigzag64,
)

# The CRC-32C of the `crc32c` package (hardware accelerated: SSE4.2 / ARMv8 CRC
# instructions, software fallback otherwise).  Checked in its source (crc32c
# 2.9, ext/_crc32c.c): crc32c(data, value=0, gil_release_mode=-1) takes any
# contiguous buffer ("y*"); with the default mode -1 it releases the GIL only for
# buffers of 32 KiB or more (MIN_BUFSIZE_FOR_AUTOMATIC_RELEASE), mode 1 always
# releases it and mode 0 never does.  We keep the default: typical batches
# (16 KiB) are summed holding the GIL, where a release would cost more than it
# saves, and big batches let other threads run.  It is called once per batch,
# from close() and set_producer_state(), on a memoryview made straight from the
# block memory (PyMemoryView_FromMemory: no export, no copy).
#
# The function comes from the package's extension module, `crc32c._crc32c`, loaded
# without running the package's `__init__`: that one reads the package's own version
# with importlib.metadata, which imports email, zipfile, csv... and cost ~27 ms of
# CPU at every start of a process (0.5 ms this way). The usual import is the
# fallback if the layout of the package ever changes.
def _load_crc32c():
    import importlib.machinery
    import importlib.util
    import sys

    mod = sys.modules.get("crc32c._crc32c")
    if mod is None:
        try:
            pkg = importlib.util.find_spec("crc32c")  # finds the package, runs nothing
            spec = importlib.machinery.PathFinder.find_spec(
                "crc32c._crc32c", None if pkg is None else pkg.submodule_search_locations)
            if spec is None or spec.loader is None:
                raise ImportError("crc32c._crc32c not found")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except Exception:
            from crc32c import crc32c
            return crc32c
        # `import crc32c` later finds its extension module here and uses it.
        sys.modules["crc32c._crc32c"] = mod
    return mod.crc32c


_crc32c = _load_crc32c()

#: Bytes of the record batch header; records start at this offset.
BATCH_HEADER_SIZE = HEADER_SIZE

cdef enum:
    MAX_VARINT_SIZE = 5            # bytes of the longest int32 varint
    MAX_VARLONG_SIZE = 10          # bytes of the longest int64 varlong
    STACK_HEADERS = 8              # header slots kept on the C stack
    MAGIC = 2


# -- borrowing bytes from Python objects ---------------------------------------

cdef str field_name(const char* field, Py_ssize_t index):
    if index >= 0:
        return f"headers[{index}] {field.decode()}"
    return field.decode()


cdef int acquire(object obj, Slice* s, const char* field, Py_ssize_t index) except -1:
    # Borrow the bytes of a key/value: None -> len -1; bytes -> its storage (kept
    # alive by the caller); any other C-contiguous buffer -> an acquired view.
    s.acquired = False
    if obj is None:
        s.ptr = NULL
        s.len = -1
        return 0
    if PyBytes_CheckExact(obj):
        s.ptr = PyBytes_AS_STRING(obj)
        s.len = PyBytes_GET_SIZE(obj)
        return 0
    if not PyObject_CheckBuffer(obj):
        raise TypeError(
            f"{field_name(field, index)} must be bytes-like or None, "
            f"got {type(obj).__name__}"
        )
    try:
        PyObject_GetBuffer(obj, &s.view, PyBUF_SIMPLE)
    except BufferError as exc:
        raise TypeError(
            f"{field_name(field, index)} must be a C-contiguous buffer: {exc}"
        ) from exc
    s.acquired = True
    s.ptr = <const char*>s.view.buf
    s.len = s.view.len
    return 0


cdef inline void release(Slice* s) noexcept:
    if s.acquired:
        s.acquired = False
        PyBuffer_Release(&s.view)


cdef Py_ssize_t header_count(object headers) except -1:
    if PyList_Check(headers):
        return PyList_GET_SIZE(headers)
    if PyTuple_Check(headers):
        return PyTuple_GET_SIZE(headers)
    raise TypeError(
        f"headers must be a list or tuple of (str, bytes | None) pairs or None, "
        f"got {type(headers).__name__}"
    )


cdef PyObject* header_pair(object headers, Py_ssize_t i) except NULL:
    # Borrowed reference to the i-th header, checked to be a 2-tuple with a str key.
    cdef PyObject* item
    cdef object pair
    if PyList_Check(headers):
        if i >= PyList_GET_SIZE(headers):
            raise RuntimeError("headers list changed size during append")
        item = PyList_GET_ITEM(headers, i)
    else:
        item = PyTuple_GET_ITEM(headers, i)
    pair = <object>item
    if not PyTuple_Check(pair) or PyTuple_GET_SIZE(pair) != 2:
        raise TypeError(
            f"headers[{i}] must be a (str, bytes | None) tuple, got {type(pair).__name__}"
        )
    key = <object>PyTuple_GET_ITEM(pair, 0)
    if not PyUnicode_Check(key):
        raise TypeError(f"headers[{i}] key must be str, got {type(key).__name__}")
    return item


def record_size_upper_bound(Py_ssize_t key_len, Py_ssize_t value_len,
                            object headers=None) -> int:
    """An upper bound of one encoded record, length prefix included.

    ``key_len``/``value_len`` of -1 mean null.  A block of
    ``BATCH_HEADER_SIZE + record_size_upper_bound(...)`` bytes always takes the
    record as the first of a batch.
    """
    cdef Py_ssize_t n = 0, i, klen
    cdef int64_t body
    cdef Slice s
    if key_len < -1 or value_len < -1:
        raise ValueError(
            f"key_len and value_len must be >= -1 (-1 = null), got {key_len}, {value_len}"
        )
    body = (1 + MAX_VARLONG_SIZE + MAX_VARINT_SIZE
            + varint_size(key_len) + (key_len if key_len > 0 else 0)
            + varint_size(value_len) + (value_len if value_len > 0 else 0))
    if headers is not None:
        n = header_count(headers)
        for i in range(n):
            pair = <object>header_pair(headers, i)
            PyUnicode_AsUTF8AndSize((<tuple>pair)[0], &klen)
            acquire((<tuple>pair)[1], &s, b"value", i)
            release(&s)
            body += varint_size(klen) + klen + varint_size(s.len) + (s.len if s.len > 0 else 0)
    body += varint_size(n)
    return uvarint_size(zigzag64(body)) + body


# -- the builder -----------------------------------------------------------------

cdef Block _released_block():
    cdef Block b = Block.__new__(Block)
    b.state = BLOCK_RELEASED
    return b


# What a builder holds after detach(): a dead block with no memory and no pool, so that
# every method that would touch the memory raises as it does for a released block.
cdef Block RELEASED_BLOCK = _released_block()


# Not tracked by the cycle collector: it refers only to its block and its compressor
# (a codec's callable), and neither refers back to a builder. A completed batch that a
# record future keeps alive then adds no object to the collector's counts (with
# detach(), which also lets the block object go).
@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class BatchBuilder:
    """Builds one record batch v2 in a :class:`Block` (records from offset 61)."""

    def __cinit__(self, Block block not None):
        if block.state != BLOCK_LIVE:
            raise ValueError("cannot build a batch in a released block")
        if block.capacity < HEADER_SIZE + 1:
            raise ValueError(
                f"a {block.capacity}-byte block is too small for a record batch "
                f"(at least {HEADER_SIZE + 1} bytes)"
            )
        self.block = block
        self.capacity = block.capacity
        self.limit = block.capacity
        self.codec_ = 0
        self.applied_codec = 0
        self.compressor = None
        self.pending = None
        self.compress_ns_ = 0
        self.records_size_ = 0
        self.pos = HEADER_SIZE
        self.count = 0
        self.base_ts = -1
        self.max_ts = -1
        self.producer_id_ = -1
        self.producer_epoch_ = -1
        self.base_sequence_ = -1
        self.transactional_ = False
        self.closed_ = False

    def set_compression(self, int codec, object compressor, Py_ssize_t limit=-1) -> None:
        """Compress the records with ``compressor`` (codec id 1-4) when the batch closes.

        ``limit`` (default: the block's capacity) bounds the uncompressed batch for every
        record but the first, leaving room in the block for codec overhead: the
        compressed records are copied back over the plain ones. If they still do not fit,
        the batch goes out uncompressed (codec 0), which Kafka accepts as well.
        """
        if self.closed_ or self.count:
            raise RuntimeError("set_compression() must come before the first append")
        if codec < 0 or codec > 4:
            raise ValueError(f"compression codec id must be 0..4, got {codec}")
        if codec and not callable(compressor):
            raise TypeError("compressor must be callable when a codec is set")
        if limit == -1:
            limit = self.capacity
        if limit <= HEADER_SIZE or limit > self.capacity:
            raise ValueError(
                f"limit {limit} must be in ({HEADER_SIZE}, {self.capacity}] for this block")
        self.codec_ = codec
        self.compressor = compressor if codec else None
        self.limit = limit

    def compress_ahead(self, object thread) -> bool:
        """Hand the records to ``thread`` (a :class:`CompressorThread` of this batch's
        codec) to compress them now, before the batch closes; the batch takes no more
        records from here on. False (nothing changed) if the thread declines (too
        small, too busy, closed), or if the batch is empty, closed, uncompressed,
        handed over already or done with its block."""
        if self.closed_ or not self.codec_ or self.count == 0 or self.pending is not None \
                or self.block.state != BLOCK_LIVE:
            return False  # (a batch failed before it closed has given its block back)
        # An export of the block (it counts in Block.exports): the thread reads the
        # records in place, and the job holds the export until it is done with them,
        # so that the pool neither reuses nor frees the block before (a released block
        # that is still exported waits in the pool's quarantine).
        job = thread.submit(self.block.view(HEADER_SIZE, self.pos))
        if job is None:
            return False
        self.pending = job
        # Sealed: every later record is refused as if it did not fit (the thread
        # compresses the records as they are now).
        self.limit = self.pos
        return True

    @property
    def compress_ns(self) -> int:
        """CPU nanoseconds its compression took on this thread (0 if not compressed
        here: uncompressed, not closed yet, or compressed by the compression thread)."""
        return self.compress_ns_

    @property
    def compressing(self) -> bool:
        """Its records are with the compression thread, not done yet."""
        return self.pending is not None and not self.pending.done

    # -- appending -------------------------------------------------------------

    def append(self, timestamp_ms, key, value, headers=None) -> int:
        """Append a record; its offset delta, or -1 if it does not fit.

        ``key``/``value``: None or a C-contiguous bytes-like object;
        ``headers``: None or a list/tuple of ``(str, bytes-like | None)`` pairs.
        """
        cdef int overflow = 0
        cdef int64_t ts
        if not PyLong_Check(timestamp_ms):
            raise TypeError(f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")
        ts = PyLong_AsLongLongAndOverflow(timestamp_ms, &overflow)
        if overflow:
            raise ValueError(f"timestamp_ms {timestamp_ms} does not fit in an int64")
        return self.append_record(ts, key, value, headers)

    cdef Py_ssize_t append_record(self, int64_t timestamp_ms, object key, object value,
                                  object headers) except -2:
        cdef Slice k, v
        cdef HeaderSlot stack_slots[STACK_HEADERS]
        cdef HeaderSlot* slots = stack_slots
        cdef HeaderSlot* h
        cdef PyObject* pair
        cdef Py_ssize_t nh = 0, held = 0, i, start
        cdef int64_t delta, body, total
        cdef Writer w

        if self.closed_:
            raise RuntimeError("cannot append to a closed batch")
        self.check_block()
        k.acquired = False
        v.acquired = False
        try:
            acquire(key, &k, b"key", -1)
            acquire(value, &v, b"value", -1)
            if headers is not None:
                nh = header_count(headers)
                if nh > STACK_HEADERS:
                    slots = <HeaderSlot*>PyMem_Malloc(<size_t>nh * sizeof(HeaderSlot))
                    if slots == NULL:
                        raise MemoryError()
                for i in range(nh):
                    pair = header_pair(headers, i)
                    h = &slots[i]
                    # Hold the tuple (and so its key and value) until the end.
                    Py_XINCREF(pair)
                    h.pair = pair
                    h.value.acquired = False
                    held += 1
                    h.key = PyUnicode_AsUTF8AndSize(
                        <object>PyTuple_GET_ITEM(<object>pair, 0), &h.key_len)
                    acquire(<object>PyTuple_GET_ITEM(<object>pair, 1), &h.value,
                            b"value", i)

            # Exact size of the record.
            if self.count == 0:
                delta = 0
            else:
                delta = <int64_t>(<uint64_t>timestamp_ms - <uint64_t>self.base_ts)
            body = (1 + varint_size(delta) + varint_size(self.count)
                    + varint_size(k.len) + (k.len if k.len > 0 else 0)
                    + varint_size(v.len) + (v.len if v.len > 0 else 0)
                    + varint_size(nh))
            for i in range(nh):
                h = &slots[i]
                body += (varint_size(h.key_len) + h.key_len + varint_size(h.value.len)
                         + (h.value.len if h.value.len > 0 else 0))
            if body > INT32_MAX:
                raise ValueError(f"a {body}-byte record is larger than the protocol allows")
            total = uvarint_size(zigzag64(body)) + body
            if (total > self.capacity - self.pos or self.count == INT32_MAX
                    or (self.count > 0 and total > self.limit - self.pos)):
                return -1

            # Write it; every primitive write is bounds-checked against capacity.
            start = self.pos
            writer_init(&w, self.block.data, start, self.capacity)
            put_varint(&w, body)
            put_u8(&w, 0)                       # record attributes (unused)
            put_varint(&w, delta)
            put_varint(&w, self.count)          # offsetDelta
            put_varint(&w, k.len)
            put_bytes(&w, k.ptr, k.len)
            put_varint(&w, v.len)
            put_bytes(&w, v.ptr, v.len)
            put_varint(&w, nh)
            for i in range(nh):
                h = &slots[i]
                put_varint(&w, h.key_len)
                put_bytes(&w, h.key, h.key_len)
                put_varint(&w, h.value.len)
                put_bytes(&w, h.value.ptr, h.value.len)
            if w.overflow or w.pos != start + total:
                raise SystemError(
                    f"aioproducer internal error: record sized {total} bytes, wrote "
                    f"{w.pos - start} (overflow={w.overflow})"
                )
        finally:
            release(&k)
            release(&v)
            for i in range(held):
                release(&slots[i].value)
                Py_XDECREF(slots[i].pair)
            if slots != stack_slots:
                PyMem_Free(slots)

        self.pos = w.pos
        if self.count == 0:
            self.base_ts = timestamp_ms
            self.max_ts = timestamp_ms
        elif timestamp_ms > self.max_ts:
            self.max_ts = timestamp_ms
        self.count += 1
        if AIOP_DEBUG:
            self.debug_walk()
        return self.count - 1

    cdef Py_ssize_t append_raw(self, int64_t timestamp_ms, const char* key,
                               Py_ssize_t key_len, const char* value, Py_ssize_t value_len,
                               const RawHeader* headers, Py_ssize_t nh) except -2:
        # The bulk path's append (send_many): the same record layout and checks as
        # append_record, from memory the caller borrowed (list items, Arrow buffers).
        cdef const RawHeader* h
        cdef Py_ssize_t i, start
        cdef int64_t delta, body, total
        cdef Writer w
        if self.closed_:
            raise RuntimeError("cannot append to a closed batch")
        self.check_block()
        if self.count == 0:
            delta = 0
        else:
            delta = <int64_t>(<uint64_t>timestamp_ms - <uint64_t>self.base_ts)
        body = (1 + varint_size(delta) + varint_size(self.count)
                + varint_size(key_len) + (key_len if key_len > 0 else 0)
                + varint_size(value_len) + (value_len if value_len > 0 else 0)
                + varint_size(nh))
        for i in range(nh):
            h = &headers[i]
            body += (varint_size(h.key_len) + h.key_len + varint_size(h.value_len)
                     + (h.value_len if h.value_len > 0 else 0))
        if body > INT32_MAX:
            raise ValueError(f"a {body}-byte record is larger than the protocol allows")
        total = uvarint_size(zigzag64(body)) + body
        if (total > self.capacity - self.pos or self.count == INT32_MAX
                or (self.count > 0 and total > self.limit - self.pos)):
            return -1
        start = self.pos
        writer_init(&w, self.block.data, start, self.capacity)
        put_varint(&w, body)
        put_u8(&w, 0)                       # record attributes (unused)
        put_varint(&w, delta)
        put_varint(&w, self.count)          # offsetDelta
        put_varint(&w, key_len)
        put_bytes(&w, key, key_len)
        put_varint(&w, value_len)
        put_bytes(&w, value, value_len)
        put_varint(&w, nh)
        for i in range(nh):
            h = &headers[i]
            put_varint(&w, h.key_len)
            put_bytes(&w, h.key, h.key_len)
            put_varint(&w, h.value_len)
            put_bytes(&w, h.value, h.value_len)
        if w.overflow or w.pos != start + total:
            raise SystemError(
                f"aioproducer internal error: record sized {total} bytes, wrote "
                f"{w.pos - start} (overflow={w.overflow})"
            )
        self.pos = w.pos
        if self.count == 0:
            self.base_ts = timestamp_ms
            self.max_ts = timestamp_ms
        elif timestamp_ms > self.max_ts:
            self.max_ts = timestamp_ms
        self.count += 1
        if AIOP_DEBUG:
            self.debug_walk()
        return self.count - 1

    # -- closing ---------------------------------------------------------------

    def close(self, int64_t producer_id=-1, int64_t producer_epoch=-1,
              int64_t base_sequence=-1, bint transactional=False) -> None:
        """Fill in the header and the CRC; no more appends after this."""
        cdef Writer w
        if self.closed_:
            raise RuntimeError("the batch is already closed")
        self.check_block()
        if self.count == 0:
            raise RuntimeError("cannot close an empty batch")
        check_producer_state(producer_id, producer_epoch, base_sequence)
        self.producer_id_ = producer_id
        self.producer_epoch_ = <int16_t>producer_epoch
        self.base_sequence_ = <int32_t>base_sequence
        self.transactional_ = transactional
        self.records_size_ = self.pos - HEADER_SIZE
        if self.codec_:
            self.compress_records()
        writer_init(&w, self.block.data, 0, HEADER_SIZE)
        put_be64(&w, 0)                                       # baseOffset
        put_be32(&w, <uint32_t>(self.pos - OFF_LEADER_EPOCH))  # batchLength
        put_be32(&w, <uint32_t>-1)                            # partitionLeaderEpoch
        put_u8(&w, MAGIC)
        put_be32(&w, 0)                                       # crc, below
        put_be16(&w, <uint16_t>((ATTR_TRANSACTIONAL if transactional else 0) | self.applied_codec))
        put_be32(&w, <uint32_t>(self.count - 1))              # lastOffsetDelta
        put_be64(&w, <uint64_t>self.base_ts)
        put_be64(&w, <uint64_t>self.max_ts)
        put_be64(&w, <uint64_t>self.producer_id_)
        put_be16(&w, <uint16_t>self.producer_epoch_)
        put_be32(&w, <uint32_t>self.base_sequence_)
        put_be32(&w, <uint32_t>self.count)
        if w.overflow or w.pos != HEADER_SIZE:
            raise SystemError("aioproducer internal error: batch header size")
        self.store_crc()
        self.closed_ = True
        if AIOP_DEBUG and not self.applied_codec:
            self.debug_walk()

    def set_producer_state(self, int64_t producer_id, int64_t producer_epoch,
                           int64_t base_sequence) -> None:
        """Rewrite producerId/Epoch/baseSequence of a closed batch and re-CRC it."""
        if not self.closed_:
            raise RuntimeError("set_producer_state() needs a closed batch; use close()")
        self.check_block()
        check_producer_state(producer_id, producer_epoch, base_sequence)
        self.producer_id_ = producer_id
        self.producer_epoch_ = <int16_t>producer_epoch
        self.base_sequence_ = <int32_t>base_sequence
        self.write_producer_state()

    def detach(self) -> None:
        """Forget the block once it went back to its pool (the batch is done: only
        its counts and sizes are read after this). RuntimeError while it is live."""
        if self.block.state == BLOCK_LIVE:
            raise RuntimeError("detach() of a builder whose block is still live")
        self.block = RELEASED_BLOCK
        self.pending = None  # a job of an aborted batch: the thread drops it

    def view(self) -> memoryview:
        """Read-only view of the closed batch (an export: the block is not reused
        while the view lives)."""
        if not self.closed_:
            raise RuntimeError("the batch must be closed before it is viewed")
        self.check_block()
        return self.block.view(0, self.pos)

    # -- state -----------------------------------------------------------------

    @property
    def record_count(self) -> int:
        return self.count

    @property
    def compression(self) -> int:
        """Codec id asked for; after close, the one applied (0 if sent plain)."""
        return self.applied_codec if self.closed_ else self.codec_

    @property
    def records_size(self) -> int:
        """Uncompressed bytes of the records section (header excluded)."""
        return self.records_size_ if self.closed_ else self.pos - HEADER_SIZE

    @property
    def limit_bytes(self) -> int:
        """Batch bytes beyond which only a first record is taken."""
        return self.limit

    @property
    def size_in_bytes(self) -> int:
        """Header plus the records appended so far."""
        return self.pos

    @property
    def remaining(self) -> int:
        """Bytes left for records (0 once closed)."""
        return 0 if self.closed_ else self.capacity - self.pos

    @property
    def base_timestamp(self) -> int:
        """Timestamp of the first record (-1 while empty)."""
        return self.base_ts

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp (-1 while empty)."""
        return self.max_ts

    @property
    def closed(self) -> bool:
        return self.closed_

    @property
    def producer_id(self) -> int:
        return self.producer_id_

    @property
    def producer_epoch(self) -> int:
        return self.producer_epoch_

    @property
    def base_sequence(self) -> int:
        return self.base_sequence_

    @property
    def transactional(self) -> bool:
        return self.transactional_

    def __repr__(self) -> str:
        return (
            f"<BatchBuilder records={self.count} size={self.pos}/{self.capacity} "
            f"{'closed' if self.closed_ else 'open'}>"
        )

    # -- C level -----------------------------------------------------------------

    cdef int check_block(self) except -1:
        if self.block.state != BLOCK_LIVE:
            raise RuntimeError("the batch's block was released to its pool")
        return 0

    cdef int write_producer_state(self) except -1:
        cdef Writer w
        writer_init(&w, self.block.data, OFF_PRODUCER_ID, OFF_RECORD_COUNT)
        put_be64(&w, <uint64_t>self.producer_id_)
        put_be16(&w, <uint16_t>self.producer_epoch_)
        put_be32(&w, <uint32_t>self.base_sequence_)
        if w.overflow or w.pos != OFF_RECORD_COUNT:
            raise SystemError("aioproducer internal error: producer state size")
        self.store_crc()
        return 0

    cdef int compress_records(self) except -1:
        cdef Slice out
        cdef Py_ssize_t n = self.pos - HEADER_SIZE
        result = None
        if self.pending is not None:
            # Compressed by the thread (waiting for it if need be); None if it could
            # not, and the compressor below does it here.
            job = self.pending
            self.pending = None
            result = job.result()
        if result is None:
            src = PyMemoryView_FromMemory(self.block.data + HEADER_SIZE, n, PyBUF_READ)
            started = thread_cpu_ns()
            try:
                result = self.compressor(src)
            finally:
                src.release()
            self.compress_ns_ = thread_cpu_ns() - started
        out.acquired = False
        acquire(result, &out, b"compressed records", -1)
        try:
            if out.len < 0 or out.len > self.capacity - HEADER_SIZE:
                self.applied_codec = 0      # does not fit: send the records plain
                return 0
            memcpy(self.block.data + HEADER_SIZE, out.ptr, <size_t>out.len)
            self.pos = HEADER_SIZE + out.len
            self.applied_codec = self.codec_
        finally:
            release(&out)
        return 0

    cdef int store_crc(self) except -1:
        cdef Writer w
        cdef uint32_t crc
        crc = _crc32c(PyMemoryView_FromMemory(self.block.data + OFF_ATTRIBUTES,
                                              self.pos - OFF_ATTRIBUTES, PyBUF_READ))
        writer_init(&w, self.block.data, OFF_CRC, OFF_ATTRIBUTES)
        put_be32(&w, crc)
        if w.overflow:
            raise SystemError("aioproducer internal error: crc offset")
        return 0

    cdef int debug_walk(self) except -1:
        # Debug builds: walk the records by their length prefixes and check that
        # they tile [HEADER_SIZE:pos] exactly.
        cdef const unsigned char* p = <const unsigned char*>self.block.data
        cdef Py_ssize_t off = HEADER_SIZE, n = 0
        cdef uint64_t zz
        cdef int shift
        cdef int64_t length
        while off < self.pos:
            zz = 0
            shift = 0
            while True:
                if off >= self.pos or shift > 63:
                    raise AssertionError("record length varint runs past the batch")
                zz |= <uint64_t>(p[off] & 0x7F) << shift
                off += 1
                if not (p[off - 1] & 0x80):
                    break
                shift += 7
            length = <int64_t>(zz >> 1) ^ -<int64_t>(zz & 1)
            if length < 6 or length > self.pos - off:
                raise AssertionError(f"record {n} has a bad length {length}")
            off += length
            n += 1
        if off != self.pos or n != self.count:
            raise AssertionError(
                f"records tile {off - HEADER_SIZE} bytes in {n} records; expected "
                f"{self.pos - HEADER_SIZE} bytes in {self.count}"
            )
        if self.pos > self.capacity or self.pos > self.block.capacity:
            raise AssertionError("batch runs past its block")
        return 0


cdef int check_producer_state(int64_t producer_id, int64_t producer_epoch,
                              int64_t base_sequence) except -1:
    if producer_epoch < INT16_MIN or producer_epoch > INT16_MAX:
        raise ValueError(f"producer_epoch {producer_epoch} does not fit in an int16")
    if base_sequence < INT32_MIN or base_sequence > INT32_MAX:
        raise ValueError(f"base_sequence {base_sequence} does not fit in an int32")
    return 0
