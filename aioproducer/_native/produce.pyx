# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Produce requests and answers: the request body's framing around the record
batches, the per-partition result, and the fast decoder of the usual answer.

:func:`encode_produce_body` writes the body of a Produce request (v9..v13, after the
request header) as a list of small ``bytes`` headers interleaved with the callers'
record views, which are not copied. Layout (``ProduceRequest.json``)::

    transactional_id  COMPACT_NULLABLE_STRING
    acks              INT16
    timeout_ms        INT32
    topic_data        COMPACT_ARRAY of
        name          COMPACT_STRING        (v9-v12)
        topic_id      UUID                  (v13+)
        partition_data COMPACT_ARRAY of
            index     INT32
            records   COMPACT_NULLABLE_BYTES
            TAG_BUFFER
        TAG_BUFFER
    TAG_BUFFER

Almost every Produce response says "written" for every partition and carries no
tagged field. :func:`decode_produce_written` decodes exactly that answer (Produce
v9..v13, the flexible versions) in one pass over the bytes, without kio, and returns
``None`` for anything else: an error code, record errors, an error message, a tagged
field (a leader hint or node endpoints), a truncation, trailing bytes, a string that
is not UTF-8. The caller then decodes the body with kio, which checks it in full and
says precisely what is wrong. So this decoder never has to describe bad input: it
only has to refuse it, and every read is checked against the end of the body first.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from uuid import UUID as _UUID

from .wire cimport (
    Writer,
    put_be16,
    put_be32,
    put_bytes,
    put_u8,
    put_uvarint,
    writer_init,
)

cdef int MIN_VERSION = 9
cdef int MAX_VERSION = 13
cdef int TOPIC_ID_VERSION = 13
# 9999-12-31T23:59:59.999Z, the last millisecond a datetime can hold.
cdef int64_t MAX_TIME_MS = 253402300799999


@cython.final
cdef class PartitionResult:
    """What a Produce answer says about one partition.

    ``log_append_ms`` is -1 unless the topic uses LogAppendTime; ``record_errors``
    is ``[(batch_index, message), ...]``; ``current_leader`` is the leader hint
    (KIP-951) as ``(leader_id, leader_epoch)``, or ``None``.
    """

    cdef readonly int index
    cdef readonly int error_code
    cdef readonly long long base_offset
    cdef readonly long long log_append_ms
    cdef readonly long long log_start_offset
    cdef readonly object error_message
    cdef readonly list record_errors
    cdef readonly object current_leader

    def __init__(self, int index, int error_code, long long base_offset,
                 long long log_append_ms=-1, long long log_start_offset=-1,
                 error_message=None, record_errors=None, current_leader=None):
        self.index = index
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_ms = log_append_ms
        self.log_start_offset = log_start_offset
        self.error_message = error_message
        self.record_errors = [] if record_errors is None else list(record_errors)
        self.current_leader = current_leader

    def __repr__(self):
        return (f"PartitionResult(index={self.index}, error_code={self.error_code}, "
                f"base_offset={self.base_offset}, log_append_ms={self.log_append_ms}, "
                f"log_start_offset={self.log_start_offset}, "
                f"error_message={self.error_message!r}, "
                f"record_errors={self.record_errors!r}, "
                f"current_leader={self.current_leader!r})")

    def __eq__(self, other):
        if not isinstance(other, PartitionResult):
            return NotImplemented
        cdef PartitionResult o = <PartitionResult>other
        return (self.index == o.index and self.error_code == o.error_code
                and self.base_offset == o.base_offset
                and self.log_append_ms == o.log_append_ms
                and self.log_start_offset == o.log_start_offset
                and self.error_message == o.error_message
                and self.record_errors == o.record_errors
                and self.current_leader == o.current_leader)

    __hash__ = None


@cython.final
cdef class ProduceAnswer:
    """A Produce response, flattened for the Sender.

    ``partitions`` is ``[(topic_name, topic_id, result), ...]``: topics come back by
    name up to v12 (``topic_id`` None) and by id from v13 (``topic_name`` None; the
    id a ``uuid.UUID``, or None for the nil id). ``node_endpoints`` maps the node ids
    of KIP-951 leader hints to their addresses.
    """

    cdef readonly int throttle_ms
    cdef public list partitions
    cdef readonly dict node_endpoints

    def __init__(self, int throttle_ms, list partitions, dict node_endpoints=None):
        self.throttle_ms = throttle_ms
        self.partitions = partitions
        self.node_endpoints = {} if node_endpoints is None else node_endpoints

    def __repr__(self):
        return (f"ProduceAnswer(throttle_ms={self.throttle_ms}, "
                f"partitions={self.partitions!r}, node_endpoints={self.node_endpoints!r})")

    def __eq__(self, other):
        if not isinstance(other, ProduceAnswer):
            return NotImplemented
        cdef ProduceAnswer o = <ProduceAnswer>other
        return (self.throttle_ms == o.throttle_ms and self.partitions == o.partitions
                and self.node_endpoints == o.node_endpoints)

    __hash__ = None


# Topic ids seen in answers, by their 16 bytes: a producer writes to a handful of
# topics, and a uuid.UUID costs more to build than the rest of the answer.
cdef dict _TOPIC_IDS = {}
cdef Py_ssize_t _TOPIC_IDS_MAX = 4096
cdef bytes _NIL_ID = bytes(16)


cdef object _topic_uuid(bytes raw):
    """The topic id of ``raw``, None for the nil id (as kio reads it)."""
    tid = _TOPIC_IDS.get(raw)
    if tid is None:
        if raw == _NIL_ID:
            return None
        if len(_TOPIC_IDS) >= _TOPIC_IDS_MAX:
            _TOPIC_IDS.clear()
        tid = _UUID(bytes=raw)
        _TOPIC_IDS[raw] = tid
    return tid


cdef struct Reader:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end
    bint bad          # a read went past the end (or a varint was too long)


cdef inline uint64_t get_be(Reader* r, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    if r.bad or r.end - r.pos < n:
        r.bad = True
        return 0
    for i in range(n):
        v = (v << 8) | r.p[r.pos + i]
    r.pos += n
    return v


cdef inline uint64_t get_uvarint(Reader* r) noexcept nogil:
    """Unsigned varint of at most 5 bytes (the protocol's lengths and counts)."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if r.bad or r.pos >= r.end or shift > 28:
            r.bad = True
            return 0
        b = r.p[r.pos]
        r.pos += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not b & 0x80:
            return v
        shift += 7


def decode_produce_written(int version, body):
    """The :class:`ProduceAnswer` of an answer in which every partition was written and
    nothing else is said; ``None`` for any other body (see the module's doc)."""
    if version < MIN_VERSION or version > MAX_VERSION:
        return None
    cdef Py_buffer buf
    PyObject_GetBuffer(body, &buf, PyBUF_SIMPLE)
    try:
        return _decode(version, <const uint8_t*>buf.buf, buf.len)
    finally:
        PyBuffer_Release(&buf)


cdef object _decode(int version, const uint8_t* data, Py_ssize_t size):
    cdef Reader r
    r.p = data
    r.pos = 0
    r.end = size
    r.bad = False
    cdef bint by_id = version >= TOPIC_ID_VERSION
    cdef uint64_t n_topics, n_parts, n, i, j
    cdef Py_ssize_t start
    cdef object name, topic_id
    cdef PartitionResult part
    cdef int16_t code
    cdef int64_t append_ms
    cdef list out = []

    n_topics = get_uvarint(&r)
    if r.bad or n_topics == 0:  # 0 is a null array: not a real answer
        return None
    # Every topic takes at least 3 bytes: refuse counts the body cannot back
    # before looping.
    if n_topics - 1 > <uint64_t>(r.end - r.pos):
        return None
    for i in range(n_topics - 1):
        if by_id:
            if r.end - r.pos < 16:
                return None
            topic_id = _topic_uuid(PyBytes_FromStringAndSize(<const char*>(r.p + r.pos), 16))
            r.pos += 16
            name = None
        else:
            n = get_uvarint(&r)
            if r.bad or n == 0 or n - 1 > <uint64_t>(r.end - r.pos):
                return None
            start = r.pos
            r.pos += <Py_ssize_t>(n - 1)
            try:
                name = PyUnicode_DecodeUTF8(<const char*>(r.p + start),
                                            <Py_ssize_t>(n - 1), NULL)
            except UnicodeDecodeError:
                return None
            topic_id = None
        n_parts = get_uvarint(&r)
        if r.bad or n_parts == 0 or n_parts - 1 > <uint64_t>(r.end - r.pos):
            return None
        for j in range(n_parts - 1):
            part = PartitionResult.__new__(PartitionResult)
            part.index = <int32_t>get_be(&r, 4)
            code = <int16_t>get_be(&r, 2)
            part.base_offset = <int64_t>get_be(&r, 8)
            append_ms = <int64_t>get_be(&r, 8)
            part.log_start_offset = <int64_t>get_be(&r, 8)
            # record_errors: an empty array (1); error_message: null (0); no tags (0).
            # A LogAppendTime below -1 ("none") or after the year 9999 is not a time
            # kio (Python's datetime) can give: it refuses it.
            if r.bad or code != 0 or append_ms < -1 or append_ms > MAX_TIME_MS \
                    or r.end - r.pos < 3 \
                    or r.p[r.pos] != 1 or r.p[r.pos + 1] != 0 or r.p[r.pos + 2] != 0:
                return None
            r.pos += 3
            part.error_code = 0
            part.log_append_ms = append_ms
            part.error_message = None
            part.record_errors = []
            part.current_leader = None
            out.append((name, topic_id, part))
        if r.end - r.pos < 1 or r.p[r.pos] != 0:  # the topic's tagged fields
            return None
        r.pos += 1
    cdef int32_t throttle = <int32_t>get_be(&r, 4)
    # No tagged fields, and nothing after them.
    if r.bad or r.end - r.pos != 1 or r.p[r.pos] != 0:
        return None
    cdef ProduceAnswer answer = ProduceAnswer.__new__(ProduceAnswer)
    answer.throttle_ms = throttle
    answer.partitions = out
    answer.node_endpoints = {}
    return answer


# -- the request ------------------------------------------------------------------------


def encode_produce_body(int version, transactional_id, int acks, long long timeout_ms,
                        topics):
    """The body of a Produce request v``version`` (9..13), after the request header.

    ``topics`` is ``[(name, topic_id, [(partition, records), ...]), ...]``: topics go
    by ``name`` (a str) up to v12 and by ``topic_id`` (a ``uuid.UUID``, not nil) from
    v13. ``records`` are bytes-like objects placed in the returned list as they are
    (not copied); the caller keeps them unchanged until the request is written (for
    acks != 0: until its answer comes). ``ValueError`` for a version, acks, timeout
    or topic that cannot be encoded.
    """
    if version < MIN_VERSION or version > MAX_VERSION:
        raise ValueError(f"Produce v{version} cannot be encoded (v{MIN_VERSION}..v{MAX_VERSION})")
    if acks != -1 and acks != 0 and acks != 1:
        raise ValueError(f"acks must be -1, 0 or 1, got {acks!r}")
    if not 0 <= timeout_ms <= 0x7FFFFFFF:
        raise ValueError(f"timeout_ms out of range: {timeout_ms!r}")
    cdef bint by_id = version >= TOPIC_ID_VERSION
    cdef bytes txn = None if transactional_id is None else transactional_id.encode("utf-8")
    cdef list keys = []     # per topic: its name's UTF-8 bytes, or its id's 16 bytes
    cdef list sizes = []    # per partition: its records' size in bytes
    cdef Py_ssize_t cap, size
    cdef Py_buffer view
    cdef bytes key
    # The headers' total size, bounded from above: every varint counted at 5 bytes.
    cap = 5 + (0 if txn is None else PyBytes_GET_SIZE(txn)) + 2 + 4 + 5 + 1
    for topic in topics:
        name, topic_id, partitions = topic
        if by_id:
            if topic_id is None:
                raise ValueError(f"Produce v{version} addresses topics by id, "
                                 f"but topic {name!r} has none")
            # (UUID.bytes is Python code; its 128-bit number is a plain attribute.)
            key = topic_id.int.to_bytes(16, "big")
            if PyBytes_GET_SIZE(key) != 16 or key == bytes(16):
                raise ValueError(f"Produce v{version} addresses topics by id, "
                                 f"but topic {name!r} has none")
        else:
            key = (<str?>name).encode("utf-8")
        keys.append(key)
        cap += 5 + PyBytes_GET_SIZE(key) + 5 + 1
        for partition in partitions:
            index, records = partition
            PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
            size = view.len
            PyBuffer_Release(&view)
            sizes.append(size)
            cap += 4 + 5 + 1
    cdef char* scratch = <char*>PyMem_Malloc(<size_t>cap)
    if scratch == NULL:
        raise MemoryError()
    cdef Writer w
    cdef list out = []
    cdef Py_ssize_t seg = 0, t = 0, k = 0
    try:
        writer_init(&w, scratch, 0, cap)
        if txn is None:
            put_u8(&w, 0)
        else:
            put_uvarint(&w, <uint64_t>PyBytes_GET_SIZE(txn) + 1)
            put_bytes(&w, PyBytes_AS_STRING(txn), PyBytes_GET_SIZE(txn))
        put_be16(&w, <uint16_t>acks)
        put_be32(&w, <uint32_t>timeout_ms)
        put_uvarint(&w, <uint64_t>len(topics) + 1)
        for topic in topics:
            name, topic_id, partitions = topic
            key = <bytes>keys[t]
            t += 1
            if not by_id:
                put_uvarint(&w, <uint64_t>PyBytes_GET_SIZE(key) + 1)
            put_bytes(&w, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
            put_uvarint(&w, <uint64_t>len(partitions) + 1)
            for partition in partitions:
                index, records = partition
                size = <Py_ssize_t>sizes[k]
                k += 1
                put_be32(&w, <uint32_t><int32_t>index)
                put_uvarint(&w, <uint64_t>size + 1)
                if size:
                    if w.overflow:
                        raise AssertionError("Produce request headers overflowed")
                    out.append(PyBytes_FromStringAndSize(scratch + seg, w.pos - seg))
                    seg = w.pos
                    out.append(records)
                put_u8(&w, 0)  # the partition's tagged fields
            put_u8(&w, 0)  # the topic's tagged fields
        put_u8(&w, 0)  # the request's tagged fields
        if w.overflow:
            raise AssertionError("Produce request headers overflowed")
        out.append(PyBytes_FromStringAndSize(scratch + seg, w.pos - seg))
        return out
    finally:
        PyMem_Free(scratch)
