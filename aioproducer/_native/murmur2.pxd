# Java-compatible murmur2 (org.apache.kafka.common.utils.Utils.murmur2), and the one
# murmur2-to-partition formula of the package.

from libc.stdint cimport int32_t


# murmur2 of n bytes at data, seed 0x9747b28c, as Java's signed int.
cdef int32_t murmur2_hash(const unsigned char* data, Py_ssize_t n) noexcept nogil


# Java's BuiltInPartitioner for a keyed record: Utils.toPositive(murmur2(key)) %
# numPartitions. num_partitions must be positive (the callers check it).
cdef inline int murmur2_to_partition(const unsigned char* data, Py_ssize_t n,
                                     int num_partitions) noexcept nogil:
    return (murmur2_hash(data, n) & 0x7fffffff) % num_partitions
