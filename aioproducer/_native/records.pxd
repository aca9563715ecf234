# The loop-free core of the per-record hot path: a batch's records and outcome
# (CoreBatch), RecordMetadata, the topics' routes, the one partition choice
# (records.pyx: choose_partition) and the appends (CoreAppender).
#
# Nothing here imports asyncio, creates or resolves a future, or reads the thread
# state: that is the asyncio glue, aio.pyx/aio.pxd (ProducerBatch's private waiters,
# RecordFuture, the Appender's loop binding). The one outside object the core touches
# is a batch's ``result``, made and completed by the Python side: the core only calls
# its ``done()``.

from libc.stdint cimport int32_t, int64_t

from .batch cimport BatchBuilder


cdef class CoreBatch:
    cdef public str topic              # the batch's topic
    cdef public int partition          # and partition
    cdef public tuple tp               # (topic, partition), the accumulator's key
    cdef public object block           # the pool Block, None once given back
    cdef public BatchBuilder builder   # writes the records into the block
    cdef public object result          # the batch's future (done = acknowledged or failed);
                                       # the core only asks it done()
    cdef public double created         # monotonic time the batch was opened
    cdef public double next_attempt    # monotonic time before which a retry waits
    cdef public int attempts           # sends so far that failed retriably
    cdef public bint full              # takes no more records (full, drained or closed)
    cdef public bint settled           # result is done (set with it, by the accumulator's
                                       # _resolve): a C read instead of result.done()
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
    # Split batches (MESSAGE_TOO_LARGE): the batches this one's records were moved to,
    # in order, or None; and, on such a child, its parent and first index in it.
    cdef readonly list children
    cdef readonly CoreBatch parent
    cdef readonly int32_t parent_offset
    cdef int pending_children          # children not yet reported by child_done() (aio.pyx)
    cdef bint reported                 # child_done() ran for this child

    # The batch giving the outcome of record index[0] of this one (split batches);
    # index[0] becomes the record's index there.
    cdef CoreBatch descend(self, int32_t* index)
    # The error of the record at index, None on success.
    cdef object error_for(self, int32_t index)
    # The traceback err had when this batch recorded it.
    cdef object tb_of(self, object err)
    # This batch's distinct errors of records lo..hi-1, in record order, appended to out.
    cdef int collect_failures(self, list out, set seen, bint with_tb,
                              int32_t lo, int32_t hi) except -1
    # How many of records lo..hi-1 failed (so far).
    cdef Py_ssize_t count_failed(self, int32_t lo, int32_t hi) except -1
    cdef int add_failure(self, list out, set seen, bint with_tb, object err) except -1


cdef class RecordMetadata:
    cdef readonly str topic                   # where the record was written
    cdef readonly int partition
    cdef readonly int64_t offset              # -1 when unknown (acks=0)
    cdef readonly int64_t timestamp           # CreateTime, or the broker's LogAppendTime
    cdef readonly int32_t serialized_key_size    # -1 for a null key
    cdef readonly int32_t serialized_value_size  # -1 for a null value


cdef class TopicRoute:
    cdef public int num_partitions     # partitions in the latest metadata
    cdef public int sticky             # keyless records go here; -1 = not chosen
    cdef public long long sticky_bytes # KIP-794: batch bytes produced to `sticky` so far
    cdef public int sticky_limit       # switch after this many bytes (batch_size); <= 0: never
    cdef public list tails             # per partition: the newest batch (a ProducerBatch), or None


cdef class CoreAppender:
    cdef dict routes                   # topic -> TopicRoute
    cdef bint hash_keys                # murmur2 keyed records here (else: Python path)
    cdef bint ignore_keys              # keyed records are spread like keyless ones
    cdef Py_ssize_t max_payload        # key + value bytes above this take the Python path
    cdef readonly int sticky_batch_size  # KIP-794: new routes' sticky_limit
    cdef object last_topic             # the topic of the last fast_append lookup
    cdef TopicRoute last_route         # and its route (None: no cached lookup)

    # Route and append one record: the batch it went into, with its index there in
    # index[0] and its timestamp in ts[0]; None means "take the Python path". When
    # all the record needs is a new batch of its (decided) partition, that partition
    # is in open_p[0] (else -1) and the timestamp in ts[0].
    cdef CoreBatch fast_append(self, object topic, object value, object key,
                               object partition, object timestamp_ms,
                               int32_t* index, int64_t* ts, int* open_p)
    # A record that fast_append left for a new batch went into one (nbytes: the
    # batch's size with it): count them for a sticky choice, as fast_append does.
    cdef void count_sticky(self, object topic, object key, object partition, int p,
                           Py_ssize_t nbytes) noexcept
