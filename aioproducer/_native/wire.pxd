# Bounds-checked primitive encoders for the Kafka wire format.
#
# Everything here is `cdef inline` and only used from other Cython modules
# (there is no wire.pyx).  All writes go through a `Writer`, which checks the
# bounds before *every* write: a write that would pass `end` is refused, sets
# `overflow`, and every later write on that Writer is refused too.  Callers
# compute the exact size of what they write first, so an overflow means a bug;
# they check `overflow` once at the end.

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef extern from *:
    """
    /* Bytes needed by an unsigned LEB128 varint of v (1..10). */
    static inline int aiop_uvarint_size(uint64_t v) {
    #if defined(__GNUC__) || defined(__clang__)
        int bits = 64 - __builtin_clzll(v | 1);
        /* (bits + 6) / 7 for bits in 1..64, without a division. */
        return (bits * 9 + 64) >> 6;
    #else
        int n = 1;
        while (v >= 0x80) { v >>= 7; n++; }
        return n;
    #endif
    }
    """
    int aiop_uvarint_size(uint64_t v) noexcept nogil


cdef struct Writer:
    char* buf            # start of the memory written into
    Py_ssize_t pos       # offset of the next byte to write
    Py_ssize_t end       # offset one past the last byte that may be written
    bint overflow        # set by a refused write; all later writes are refused


cdef inline void writer_init(Writer* w, char* buf, Py_ssize_t pos,
                             Py_ssize_t end) noexcept nogil:
    w.buf = buf
    w.pos = pos
    w.end = end
    w.overflow = False


cdef inline bint reserve(Writer* w, Py_ssize_t n) noexcept nogil:
    # True if n more bytes may be written at w.pos; otherwise marks overflow.
    if w.overflow or n > w.end - w.pos:
        w.overflow = True
        return False
    return True


cdef inline uint64_t zigzag64(int64_t v) noexcept nogil:
    # Zigzag of a signed value (Kafka varint/varlong).  For values in the
    # int32 range this equals the 32-bit zigzag, so it serves both.
    return (<uint64_t>v << 1) ^ (<uint64_t>0 - (<uint64_t>v >> 63))


cdef inline int uvarint_size(uint64_t v) noexcept nogil:
    # Bytes of the unsigned varint encoding of v (already zigzagged if signed).
    return aiop_uvarint_size(v)


cdef inline int varint_size(int64_t v) noexcept nogil:
    # Bytes of the zigzag varint/varlong encoding of a signed value.
    return aiop_uvarint_size(zigzag64(v))


cdef inline void put_u8(Writer* w, uint8_t v) noexcept nogil:
    if reserve(w, 1):
        w.buf[w.pos] = <char>v
        w.pos += 1


cdef inline void put_be16(Writer* w, uint16_t v) noexcept nogil:
    cdef unsigned char* p
    if reserve(w, 2):
        p = <unsigned char*>w.buf + w.pos
        p[0] = <unsigned char>(v >> 8)
        p[1] = <unsigned char>v
        w.pos += 2


cdef inline void put_be32(Writer* w, uint32_t v) noexcept nogil:
    cdef unsigned char* p
    if reserve(w, 4):
        p = <unsigned char*>w.buf + w.pos
        p[0] = <unsigned char>(v >> 24)
        p[1] = <unsigned char>(v >> 16)
        p[2] = <unsigned char>(v >> 8)
        p[3] = <unsigned char>v
        w.pos += 4


cdef inline void put_be64(Writer* w, uint64_t v) noexcept nogil:
    put_be32(w, <uint32_t>(v >> 32))
    put_be32(w, <uint32_t>v)


cdef inline void put_uvarint(Writer* w, uint64_t v) noexcept nogil:
    # Unsigned LEB128; Kafka's signed varints go through put_varint. One and two
    # bytes (lengths under 8 KiB, counts, small deltas: most varints of a record)
    # are written without sizing the value first.
    cdef int n
    cdef unsigned char* p
    if v < 0x80:
        if reserve(w, 1):
            (<unsigned char*>w.buf)[w.pos] = <unsigned char>v
            w.pos += 1
        return
    if v < 0x4000:
        if reserve(w, 2):
            p = <unsigned char*>w.buf + w.pos
            p[0] = <unsigned char>((v & 0x7F) | 0x80)
            p[1] = <unsigned char>(v >> 7)
            w.pos += 2
        return
    n = aiop_uvarint_size(v)
    if reserve(w, n):
        p = <unsigned char*>w.buf + w.pos
        while v >= 0x80:
            p[0] = <unsigned char>((v & 0x7F) | 0x80)
            p += 1
            v >>= 7
        p[0] = <unsigned char>v
        w.pos += n


cdef inline void put_varint(Writer* w, int64_t v) noexcept nogil:
    # Signed zigzag varint/varlong (for int32 values the encoding is the same).
    put_uvarint(w, zigzag64(v))


cdef inline void put_bytes(Writer* w, const char* src, Py_ssize_t n) noexcept nogil:
    if n > 0 and reserve(w, n):
        memcpy(w.buf + w.pos, src, <size_t>n)
        w.pos += n
