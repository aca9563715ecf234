"""Kafka's default key hash, bit-for-bit the Java client's.

``murmur2`` is ``org.apache.kafka.common.utils.Utils.murmur2`` (MurmurHash2,
32-bit, seed ``0x9747b28c``, little-endian 4-byte words, Java's signed ``int``
result) and ``murmur2_partition`` is the Java ``BuiltInPartitioner`` mapping of a
key: ``Utils.toPositive(murmur2(key)) % numPartitions``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, uint32_t


cdef extern from *:
    """
    #include <string.h>
    /* The little-endian 32-bit word at p (4 readable bytes): one load on a
       little-endian host, the byte-by-byte form elsewhere. */
    static inline uint32_t aiop_load_le32(const unsigned char* p) {
    #if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
        __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    #else
        return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
            | ((uint32_t)p[3] << 24);
    #endif
    }
    """
    uint32_t aiop_load_le32(const unsigned char* p) noexcept nogil

cdef enum:
    M = 0x5BD1E995      # the MurmurHash2 multiplier
    R = 24              # the MurmurHash2 shift
cdef uint32_t SEED = 0x9747B28C


cdef int32_t murmur2_hash(const unsigned char* data, Py_ssize_t n) noexcept nogil:
    # All arithmetic in uint32_t: wraps like Java's int and has no C UB.
    # Java's `>>>` is a logical shift, which is `>>` on an unsigned value.
    cdef uint32_t h = SEED ^ <uint32_t>n
    cdef uint32_t k
    cdef Py_ssize_t i, tail = n & ~(<Py_ssize_t>3)
    for i in range(0, tail, 4):
        k = aiop_load_le32(data + i)  # i + 4 <= tail <= n: inside the key
        k *= M
        k ^= k >> R
        k *= M
        h *= M
        h ^= k
    # The Java switch falls through from case 3 to case 1.
    cdef Py_ssize_t rest = n - tail
    if rest >= 3:
        h ^= <uint32_t>data[tail + 2] << 16
    if rest >= 2:
        h ^= <uint32_t>data[tail + 1] << 8
    if rest >= 1:
        h ^= <uint32_t>data[tail]
        h *= M
    h ^= h >> 13
    h *= M
    h ^= h >> 15
    return <int32_t>h


def murmur2(data) -> int:
    """Java's ``Utils.murmur2(data)``: a signed 32-bit hash of a bytes-like object."""
    cdef Py_buffer view
    cdef int32_t h
    if PyBytes_CheckExact(data):
        return murmur2_hash(<const unsigned char*>PyBytes_AS_STRING(data),
                            PyBytes_GET_SIZE(data))
    get_buffer(data, &view)
    h = murmur2_hash(<const unsigned char*>view.buf, view.len)
    PyBuffer_Release(&view)
    return h


def murmur2_partition(key, int num_partitions) -> int:
    """The partition Java's default partitioner picks for ``key``.

    ``(murmur2(key) & 0x7fffffff) % num_partitions`` (``murmur2_to_partition`` in
    murmur2.pxd, the formula the native appender uses too); ValueError if
    ``num_partitions`` is not positive.
    """
    cdef Py_buffer view
    cdef int p
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    if PyBytes_CheckExact(key):
        return murmur2_to_partition(<const unsigned char*>PyBytes_AS_STRING(key),
                                    PyBytes_GET_SIZE(key), num_partitions)
    get_buffer(key, &view)
    p = murmur2_to_partition(<const unsigned char*>view.buf, view.len, num_partitions)
    PyBuffer_Release(&view)
    return p


cdef int get_buffer(object data, Py_buffer* view) except -1:
    # A simple (contiguous bytes) buffer of data; TypeError if it has none.
    if not PyObject_CheckBuffer(data):
        raise TypeError(f"murmur2 needs a bytes-like object, got {type(data).__name__}")
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    return 0
