# Kafka record batch v2 (magic 2) written straight into a pool Block.

from cpython.ref cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t

from .pool cimport Block


# Byte offsets of the batch header fields (big-endian), from the Kafka
# protocol documentation, "Record Batch".
cdef enum:
    OFF_BASE_OFFSET = 0            # int64
    OFF_BATCH_LENGTH = 8           # int32: bytes after this field
    OFF_LEADER_EPOCH = 12          # int32 partitionLeaderEpoch
    OFF_MAGIC = 16                 # int8 = 2
    OFF_CRC = 17                   # uint32 CRC-32C of [OFF_ATTRIBUTES:end]
    OFF_ATTRIBUTES = 21            # int16
    OFF_LAST_OFFSET_DELTA = 23     # int32
    OFF_BASE_TIMESTAMP = 27        # int64
    OFF_MAX_TIMESTAMP = 35         # int64
    OFF_PRODUCER_ID = 43           # int64
    OFF_PRODUCER_EPOCH = 51        # int16
    OFF_BASE_SEQUENCE = 53         # int32
    OFF_RECORD_COUNT = 57          # int32
    HEADER_SIZE = 61               # records start here

    ATTR_TRANSACTIONAL = 0x10      # attributes bit 4
    ATTR_CODEC_MASK = 0x07         # attributes bits 0-2: compression codec


# A key, value or header value borrowed from a Python object for one append.
cdef struct Slice:
    const char* ptr                # first byte (may be NULL when len <= 0)
    Py_ssize_t len                 # byte length; -1 for a null field
    bint acquired                  # `view` holds a buffer that must be released
    Py_buffer view                 # the buffer, for non-bytes objects


# One record header, held from sizing until the write is done.
cdef struct HeaderSlot:
    PyObject* pair                 # owned reference to the (key, value) tuple
    const char* key                # UTF-8 key (cached by, and owned by, the str)
    Py_ssize_t key_len             # key byte length
    Slice value                    # the header value (len -1 for null)


# One record header borrowed for a bulk append (append_raw): pointers into memory the
# caller keeps alive for the call (a str's UTF-8, bytes, an Arrow buffer).
cdef struct RawHeader:
    const char* key                # UTF-8 key
    Py_ssize_t key_len             # key byte length
    const char* value              # value bytes (may be NULL when value_len <= 0)
    Py_ssize_t value_len           # value byte length; -1 for null


cdef class BatchBuilder:
    cdef readonly Block block      # the memory written into
    cdef Py_ssize_t pos            # bytes written: header + records so far
    cdef Py_ssize_t capacity       # the block's capacity
    cdef Py_ssize_t limit          # records stop here, except a batch's first record
    cdef int codec_                # compression codec id asked for (0: none)
    cdef int applied_codec         # codec of the closed batch (0 if sent uncompressed)
    cdef object compressor         # records section -> compressed bytes-like
    cdef object pending            # its CompressJob on the compression thread, or None
    cdef int64_t compress_ns_      # CPU ns of its compression on the loop (0: none, or
                                   # done by the compression thread)
    cdef Py_ssize_t records_size_  # uncompressed bytes of the records section
    cdef int32_t count             # records appended
    cdef int64_t base_ts           # timestamp of the first record (baseTimestamp)
    cdef int64_t max_ts            # largest record timestamp (maxTimestamp)
    cdef int64_t producer_id_      # header producerId, set by close()
    cdef int16_t producer_epoch_   # header producerEpoch
    cdef int32_t base_sequence_    # header baseSequence
    cdef bint transactional_       # attributes bit 4
    cdef bint closed_              # close() ran: header and CRC are final

    # Append one record: its offset delta, -1 if it does not fit (nothing is
    # written then), or -2 with an exception set.
    cdef Py_ssize_t append_record(self, int64_t timestamp_ms, object key, object value,
                                  object headers) except -2
    # Append one record from borrowed memory (send_many's bulk path): key/value
    # pointers and lengths (-1 = null) and nh headers. Sized exactly, then written
    # through the bounds-checked Writer; the offset delta, -1 if it does not fit
    # (nothing written), or -2 with an exception set.
    cdef Py_ssize_t append_raw(self, int64_t timestamp_ms, const char* key,
                               Py_ssize_t key_len, const char* value, Py_ssize_t value_len,
                               const RawHeader* headers, Py_ssize_t nh) except -2
    # Write the producer fields into the header and recompute the CRC.
    cdef int write_producer_state(self) except -1
    # Raise RuntimeError unless the block is still live.
    cdef int check_block(self) except -1
    # Compress [HEADER_SIZE:pos] in place (falls back to plain if it does not fit).
    cdef int compress_records(self) except -1
    # CRC-32C of [OFF_ATTRIBUTES:pos] into the crc field.
    cdef int store_crc(self) except -1
    # Debug builds: check that the records tile [HEADER_SIZE:pos] exactly.
    cdef int debug_walk(self) except -1
