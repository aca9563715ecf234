# The per-record hot path: batches, record futures, and the appender that routes a
# record to its partition's open batch in one call. The batch's result future is
# created and completed by the Python side; only asyncio's exception types, and the
# loop of that future (for callbacks), are used here.

from libc.stdint cimport int32_t, int64_t

from .batch cimport BatchBuilder


cdef class ProducerBatch:
    cdef public str topic              # the batch's topic
    cdef public int partition          # and partition
    cdef public tuple tp               # (topic, partition), the accumulator's key
    cdef public object block           # the pool Block, None once given back
    cdef public BatchBuilder builder   # writes the records into the block
    cdef public object result          # the batch's future (done = acknowledged or failed)
    cdef public double created         # monotonic time the batch was opened
    cdef public double next_attempt    # monotonic time before which a retry waits
    cdef public int attempts           # sends so far that failed retriably
    cdef public bint full              # takes no more records (full, drained or closed)
    cdef public int64_t base_offset    # from the broker; -1 when unknown
    cdef public int64_t log_append_time  # broker LogAppendTime, -1 for CreateTime
    cdef object error_                 # the final error, None on success (property error)
    cdef readonly object error_tb      # error's traceback when it was set (re-raised with it)
    cdef dict record_errors_           # KIP-467: None, or {index in batch: error}
    cdef dict tbs                      # id(record error) -> (error, its first traceback)
    cdef public object last_error      # last retriable error, for expiry messages
    cdef public int64_t producer_id    # idempotence: producer id the batch was sent with
    cdef public int producer_epoch     # and epoch
    cdef public int32_t base_sequence  # and first sequence; -1 until assigned
    cdef public list waiters           # private futures of awaiting records, or None
    # Split batches (MESSAGE_TOO_LARGE): the batches this one's records were moved to,
    # in order, or None; and, on such a child, its parent and first index in it.
    cdef readonly list children
    cdef readonly ProducerBatch parent
    cdef readonly int32_t parent_offset
    cdef int pending_children          # children not yet reported by child_done()
    cdef bint reported                 # child_done() ran for this child

    cdef ProducerBatch descend(self, int32_t* index)
    cdef object error_for(self, int32_t index)
    cdef object tb_of(self, object err)
    cdef int collect_failures(self, list out, set seen, bint with_tb) except -1
    cdef int add_failure(self, list out, set seen, bint with_tb, object err) except -1


cdef class RecordMetadata:
    cdef readonly str topic                   # where the record was written
    cdef readonly int partition
    cdef readonly int64_t offset              # -1 when unknown (acks=0)
    cdef readonly int64_t timestamp           # CreateTime, or the broker's LogAppendTime
    cdef readonly int32_t serialized_key_size    # -1 for a null key
    cdef readonly int32_t serialized_value_size  # -1 for a null value


cdef class RecordFuture:
    cdef readonly ProducerBatch batch  # the batch holding the record
    cdef int64_t timestamp             # CreateTime of the record
    cdef int32_t index                 # the record's offset delta in the batch
    cdef int32_t key_size              # serialized key bytes, -1 for null
    cdef int32_t value_size            # serialized value bytes, -1 for null
    # All of these are None / 0 for a new future (the append path sets none of them),
    # and kept small: 64 bytes in all.
    cdef unsigned char flags           # CANCELLED | HOOKED | BLOCKING (records.pyx)
    cdef object callbacks              # None, or a list of (callback, context) not yet run
    cdef object awaiting               # pending: the private waiter(s) of tasks awaiting
                                       # it (one, a list, or None); cancelled: cancel(msg)


cdef class TopicRoute:
    cdef public int num_partitions     # partitions in the latest metadata
    cdef public int sticky             # keyless records go here; -1 = not chosen
    cdef public list tails             # per partition: the newest batch, or None


cdef class Appender:
    cdef object loop                   # the bound event loop, None when unbound
    cdef dict routes                   # topic -> TopicRoute
    cdef bint hash_keys                # murmur2 keyed records here (else: Python path)
    cdef bint ignore_keys              # keyed records are spread like keyless ones
    cdef Py_ssize_t max_payload        # key + value bytes above this take the Python path

    # Route and append one record; None means "take the Python path".
    cdef object fast_append(self, object topic, object value, object key, object partition,
                            object timestamp_ms)
