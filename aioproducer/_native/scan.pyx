"""Bounds check of a Kafka message body against the wire layout of a kio entity.

kio's decoder reserves memory for an array from its declared length before it reads a
single element (``Vec::with_capacity(n)``): a response that claims 2**35 elements in
a few bytes makes it ask for 256 GiB, and the process aborts (Rust's allocation
failure handler, not a Python exception). :class:`Layout` walks the body first,
without building anything, and refuses it unless every length and count is backed
by bytes that are really there:

* an array of ``n`` elements needs ``n * min_size(element)`` bytes after its length;
* strings, bytes, fixed-size fields and tagged fields must fit in the body;
* a known tagged field must take exactly the size it announces.

When the walk succeeds every array kio will reserve holds at most as many elements
as the body has bytes, so decoding allocates in proportion to the body. The walk
never loops more often than there are bytes left (every element and every tagged
field takes at least one byte) and recurses only as deep as the layout nests.

The layout is a flat ``int32`` program made by ``aioproducer.net.protocol`` from the
kio schema (see ``_Compiler`` there). An entity at offset ``e``::

    code[e]     flags (FLEXIBLE)
    code[e+1]   number of regular fields, in wire order
    code[e+2]   number of tagged fields
    code[e+3]   minimum encoded size of the entity
    then        3 ints per regular field:  array, kind, arg
    then        4 ints per tagged field:   tag, array, kind, arg

``array`` is ``A_NONE``, ``A_COMPACT`` (unsigned varint length + 1; 0 is null) or
``A_LEGACY`` (int32 length; -1 is null). ``kind``/``arg``: ``K_FIXED``/byte count,
``K_CSTR`` (compact string or bytes), ``K_STR16`` (int16-length string),
``K_BYTES32`` (int32-length bytes), ``K_ENTITY``/offset, ``K_NENTITY``/offset
(nullable: an int8 marker first, -1 is null).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int16_t, int32_t, uint32_t, uint64_t

cdef enum:
    A_NONE = 0
    A_COMPACT = 1
    A_LEGACY = 2

    K_FIXED = 1
    K_CSTR = 2
    K_STR16 = 3
    K_BYTES32 = 4
    K_ENTITY = 5
    K_NENTITY = 6

    F_FLEXIBLE = 1

    ENTITY_HEADER = 4
    MAX_DEPTH = 32          # deeper than any Kafka message nests

#: Constants of the layout program (mirrored in ``aioproducer.net.protocol``).
ARRAY_NONE = A_NONE
ARRAY_COMPACT = A_COMPACT
ARRAY_LEGACY = A_LEGACY
KIND_FIXED = K_FIXED
KIND_COMPACT_STRING = K_CSTR
KIND_STRING16 = K_STR16
KIND_BYTES32 = K_BYTES32
KIND_ENTITY = K_ENTITY
KIND_NULLABLE_ENTITY = K_NENTITY
FLAG_FLEXIBLE = F_FLEXIBLE
ENTITY_HEADER_SIZE = ENTITY_HEADER


class LayoutError(ValueError):
    """The body does not fit the layout (truncated, or a length it cannot back)."""


cdef struct Cursor:
    const unsigned char* p  # the body
    Py_ssize_t end          # bytes of the body


cdef int fail(str what, Py_ssize_t pos) except -1:
    raise LayoutError(f"{what} at byte {pos}")


cdef inline int need(Py_ssize_t pos, Py_ssize_t n, Py_ssize_t end, str what) except -1:
    if n < 0 or n > end - pos:
        fail(f"{what} of {n} byte(s) runs past the end ({end - pos} left)", pos)
    return 0


cdef Py_ssize_t read_uvarint(const Cursor* c, Py_ssize_t* pos, Py_ssize_t end) except -1:
    # Unsigned varint of at most 5 bytes (values < 2**35), like Kafka and kio.
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef unsigned char b
    cdef Py_ssize_t start = pos[0]
    while True:
        if pos[0] >= end:
            fail("truncated unsigned varint", start)
        b = c.p[pos[0]]
        pos[0] += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            return <Py_ssize_t>value
        shift += 7
        if shift >= 35:
            fail("unsigned varint longer than 5 bytes", start)


cdef inline int32_t read_i32(const Cursor* c, Py_ssize_t pos) noexcept:
    return <int32_t>((<uint32_t>c.p[pos] << 24) | (<uint32_t>c.p[pos + 1] << 16)
                     | (<uint32_t>c.p[pos + 2] << 8) | <uint32_t>c.p[pos + 3])


@cython.final
@cython.auto_pickle(False)
cdef class Layout:
    """A compiled wire layout; :meth:`check` walks a body against it."""

    cdef int32_t* code
    cdef Py_ssize_t size
    cdef readonly object name

    def __cinit__(self, object code, str name="entity"):
        cdef Py_ssize_t i, n = len(code)
        self.code = NULL
        self.size = 0
        self.name = name
        if n < ENTITY_HEADER:
            raise ValueError("a layout needs at least one entity")
        self.code = <int32_t*>PyMem_Malloc(<size_t>n * sizeof(int32_t))
        if self.code == NULL:
            raise MemoryError()
        for i in range(n):
            self.code[i] = <int32_t>code[i]
        self.size = n
        self.validate(0, 0)

    def __dealloc__(self):
        PyMem_Free(self.code)
        self.code = NULL

    cdef int validate(self, Py_ssize_t e, int depth) except -1:
        # The program is made by our own compiler; still, never walk a bad one.
        cdef Py_ssize_t nf, nt, i, f
        if depth > MAX_DEPTH:
            raise ValueError("layout nests too deep (or is cyclic)")
        if e < 0 or e + ENTITY_HEADER > self.size:
            raise ValueError(f"layout entity offset {e} out of range")
        nf = self.code[e + 1]
        nt = self.code[e + 2]
        if nf < 0 or nt < 0 or self.code[e + 3] < 0 or (
                e + ENTITY_HEADER + 3 * nf + 4 * nt > self.size):
            raise ValueError(f"layout entity at {e} is malformed")
        if nt and not (self.code[e] & F_FLEXIBLE):
            raise ValueError(f"layout entity at {e} has tagged fields but is not flexible")
        for i in range(nf + nt):
            if i < nf:
                f = e + ENTITY_HEADER + 3 * i
            else:
                f = e + ENTITY_HEADER + 3 * nf + 4 * (i - nf) + 1
            if self.code[f] not in (A_NONE, A_COMPACT, A_LEGACY):
                raise ValueError(f"layout field at {f}: bad array mode {self.code[f]}")
            if self.code[f + 1] in (K_ENTITY, K_NENTITY):
                self.validate(self.code[f + 2], depth + 1)
            elif self.code[f + 1] == K_FIXED:
                if self.code[f + 2] <= 0:
                    raise ValueError(f"layout field at {f}: bad fixed size")
            elif self.code[f + 1] not in (K_CSTR, K_STR16, K_BYTES32):
                raise ValueError(f"layout field at {f}: bad kind {self.code[f + 1]}")
        return 0

    def check(self, object body) -> int:
        """Walk ``body`` (any C-contiguous buffer) from offset 0; the offset where the
        entity ends. :class:`LayoutError` if the body does not fit the layout."""
        cdef Py_buffer view
        cdef Cursor c
        cdef Py_ssize_t end
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        try:
            c.p = <const unsigned char*>view.buf
            c.end = view.len
            end = self.walk_entity(&c, 0, 0, c.end)
        finally:
            PyBuffer_Release(&view)
        return end

    cdef Py_ssize_t walk_entity(self, const Cursor* c, Py_ssize_t e, Py_ssize_t pos,
                                Py_ssize_t end) except -1:
        cdef const int32_t* code = self.code
        cdef Py_ssize_t nf = code[e + 1], nt = code[e + 2], i, j, count, tag, size, f, stop
        for i in range(nf):
            f = e + ENTITY_HEADER + 3 * i
            pos = self.walk_field(c, code[f], code[f + 1], code[f + 2], pos, end)
        if not (code[e] & F_FLEXIBLE):
            return pos
        count = read_uvarint(c, &pos, end)
        for i in range(count):  # each tagged field takes >= 2 bytes: bounded by the body
            tag = read_uvarint(c, &pos, end)
            size = read_uvarint(c, &pos, end)
            need(pos, size, end, "tagged field")
            stop = pos + size
            for j in range(nt):
                f = e + ENTITY_HEADER + 3 * nf + 4 * j
                if code[f] == tag:
                    if self.walk_field(c, code[f + 1], code[f + 2], code[f + 3], pos,
                                       stop) != stop:
                        fail(f"tagged field {tag} is shorter than its size {size}", pos)
                    break
            pos = stop  # unknown tags are skipped, as the protocol says
        return pos

    cdef Py_ssize_t walk_field(self, const Cursor* c, int32_t array, int32_t kind,
                               int32_t arg, Py_ssize_t pos, Py_ssize_t end) except -1:
        cdef Py_ssize_t n, i, start = pos, smallest
        if array == A_NONE:
            return self.walk_value(c, kind, arg, pos, end)
        if array == A_COMPACT:
            n = read_uvarint(c, &pos, end)
            if n == 0:
                return pos  # null
            n -= 1
        else:
            need(pos, 4, end, "array length")
            n = read_i32(c, pos)
            pos += 4
            if n == -1:
                return pos  # null
            if n < 0:
                fail(f"negative array length {n}", start)
        smallest = self.min_size(kind, arg)
        if n > (end - pos) // smallest:
            fail(f"array of {n} element(s) of >= {smallest} byte(s) in {end - pos} "
                 "byte(s)", start)
        for i in range(n):
            pos = self.walk_value(c, kind, arg, pos, end)
        return pos

    cdef inline Py_ssize_t min_size(self, int32_t kind, int32_t arg) noexcept:
        if kind == K_FIXED:
            return arg
        if kind == K_STR16:
            return 2
        if kind == K_BYTES32:
            return 4
        if kind == K_ENTITY and self.code[arg + 3] > 1:
            return self.code[arg + 3]
        return 1  # compact string, nullable entity, entities of <= 1 byte

    cdef Py_ssize_t walk_value(self, const Cursor* c, int32_t kind, int32_t arg,
                               Py_ssize_t pos, Py_ssize_t end) except -1:
        cdef Py_ssize_t n, start = pos
        if kind == K_FIXED:
            need(pos, arg, end, "field")
            return pos + arg
        if kind == K_CSTR:
            n = read_uvarint(c, &pos, end)
            if n == 0:
                return pos  # null
            need(pos, n - 1, end, "compact string")
            return pos + n - 1
        if kind == K_STR16:
            need(pos, 2, end, "string length")
            n = <int16_t>((<uint32_t>c.p[pos] << 8) | <uint32_t>c.p[pos + 1])
            pos += 2
            if n == -1:
                return pos
            if n < 0:
                fail(f"negative string length {n}", start)
            need(pos, n, end, "string")
            return pos + n
        if kind == K_BYTES32:
            need(pos, 4, end, "bytes length")
            n = read_i32(c, pos)
            pos += 4
            if n == -1:
                return pos
            if n < 0:
                fail(f"negative bytes length {n}", start)
            need(pos, n, end, "bytes")
            return pos + n
        if kind == K_NENTITY:
            need(pos, 1, end, "nullable marker")
            if c.p[pos] == 0xFF:
                return pos + 1  # null
            pos += 1
        return self.walk_entity(c, arg, pos, end)

    def __repr__(self) -> str:
        return f"<Layout {self.name} ({self.size} ints)>"
