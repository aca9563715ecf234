# Java-compatible murmur2 (org.apache.kafka.common.utils.Utils.murmur2).

from libc.stdint cimport int32_t


# murmur2 of n bytes at data, seed 0x9747b28c, as Java's signed int.
cdef int32_t murmur2_hash(const unsigned char* data, Py_ssize_t n) noexcept nogil
