# The asyncio glue of the native core (records.pxd): everything that knows of an
# event loop. ProducerBatch adds the private waiter futures to a CoreBatch;
# RecordFuture is a record's asyncio-compatible future; Appender binds a CoreAppender
# to the loop whose thread may take records on the native path.

from libc.stdint cimport int32_t, int64_t

from .records cimport CoreAppender, CoreBatch


cdef class RecordFuture
cdef class PendingSend


cdef class ProducerBatch(CoreBatch):
    cdef public list waiters           # private futures of awaiting records, or None
    cdef readonly list hooked          # RecordFutures of it with done-callbacks, or None
    cdef int hook(self, RecordFuture fut) except -1  # add to hooked


cdef class RecordFuture:
    cdef readonly ProducerBatch batch  # the batch holding the record
    cdef int64_t timestamp             # CreateTime of the record
    cdef readonly int32_t index        # the record's offset delta in the batch
    cdef int32_t key_size              # serialized key bytes, -1 for null
    cdef int32_t value_size            # serialized value bytes, -1 for null
    # All of these are None / 0 for a new future (the append path sets none of them),
    # and kept small: 64 bytes in all.
    cdef unsigned char flags           # CANCELLED | HOOKED | BLOCKING (aio.pyx)
    cdef object callbacks              # None, or a list of (callback, context) not yet run
    cdef object awaiting               # pending: the private waiter(s) of tasks awaiting
                                       # it (one, a list, or None); cancelled: cancel(msg)
    cdef object step(self, int* pending)       # one step of ``await self`` (aio.pyx)
    cdef int remember_waiter(self, object waiter) except -1
    cdef object get_result(self)               # result()


cdef class Appender(CoreAppender):
    cdef object loop                   # the bound event loop, None when unbound
    cdef public bint hot               # PendingSend may take the native path
    cdef public object slow            # PendingSend's Python path: a coroutine function
    cdef public object opener          # hot path: (topic, partition, timestamp, key,
                                       # value) -> a new batch holding the record as
                                       # its first, or None (the Python path); or None
    cdef object append_now(self, object topic, object value, object key, object partition,
                           object timestamp_ms)
    cdef CoreBatch open_batch(self, object topic, object key, object partition, int p,
                              int64_t ts, object value)


cdef class PendingSend:
    cdef Appender appender
    cdef object topic, value, key, partition, timestamp_ms  # the record (NEW)
    cdef object inner                  # the Python path's coroutine (DELEGATING)
    cdef unsigned char state           # NEW, DELEGATING, FINISHED (aio.pyx)
    cdef void finish(self) noexcept
    cdef void drop_record(self) noexcept
    cdef object step(self, object arg, int* pending)
