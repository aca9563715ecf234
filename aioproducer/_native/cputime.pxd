# The calling thread's CPU time, in nanoseconds (clock_gettime with
# CLOCK_THREAD_CPUTIME_ID): the loop times its own compressions with it (batch.pyx),
# and the compression thread its jobs (compressor.pyx), for the choice of the batches
# worth handing over.

from libc.stdint cimport int64_t


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock, timespec* ts)
    enum:
        CLOCK_THREAD_CPUTIME_ID


cdef inline int64_t thread_cpu_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec
