"""The compression thread: zstd and LZ4 batches compressed on another core.

The event loop runs every record's append; with zstd or LZ4 it also compressed every
batch, up to a third of its time in the compressed scenarios. A Python thread does not
help (docs/performance.md, "Compression on the second core"): python-zstandard and lz4
release the GIL while they compress, but handing a batch over and its result back costs
a future, a thread switch and the GIL twice, more than compressing a batch of the
default size. This thread never takes the GIL. It is a plain C thread (started by the interpreter's
``PyThread_start_new_thread``, synchronised with pthread mutexes) that
waits for jobs, compresses each with the vendored libzstd or liblz4 (``vendor/``), and
tells the loop through a pipe that something is done; the loop side only copies bytes
in and out, under a mutex held for a few instructions.

A job is a full batch's records section, handed over when the batch is found full
(:meth:`CompressorThread.submit`): the thread reads it in place, through a buffer
export of the batch's block that the job holds until the thread is done with it. The
batch is sealed against appends then, and the loop goes on filling the partition's
next batch. When
the Sender takes the batch, :meth:`CompressJob.result` gives the compressed bytes
(waiting, without the GIL, if they are not ready yet); the Sender leaves a batch whose
job is still running for its next pass (``done``), woken by the pipe. A job that failed
(no memory) or a thread that stopped gives None, and the batch is compressed on the
loop as before.

Lifetimes: a job is shared by its :class:`CompressJob` and the thread, counted in
``refs`` under the mutex; whoever lets go last frees it. The thread's state is shared
the same way by the :class:`CompressorThread` and the thread. The records stay valid
while the thread reads them: the :class:`CompressJob` holds an export of the block
(the pool quarantines an exported block that is released, and frees it only when
the export goes), and a :class:`CompressJob` dropped while its job runs waits for it
first. The output buffers are the thread's own (``malloc``, kept for reuse).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import os

from .cputime cimport thread_cpu_ns


cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass
    int sigfillset(sigset_t* s)
    # (sigprocmask: the calling thread's mask on Linux, and a symbol as old as glibc
    # 2.2.5; pthread_sigmask is versioned 2.32, which would raise the wheel's manylinux
    # tag.)
    int sigprocmask(int how, const sigset_t* s, sigset_t* old)
    enum:
        SIG_BLOCK


cdef extern from "pythread.h" nogil:
    # The interpreter's own way to start a native thread (detached; it runs without a
    # thread state and never takes the GIL). pthread_create is versioned 2.34 in glibc:
    # calling it would make the wheel manylinux_2_34.
    ctypedef void (*thread_fn)(void*) noexcept nogil
    unsigned long PyThread_start_new_thread(thread_fn func, void* arg)
    unsigned long PYTHREAD_INVALID_THREAD_ID


cdef extern from "<unistd.h>" nogil:
    ssize_t write(int fd, const void* buf, size_t n)
    int getpid()


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* m, const void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* m)
    int pthread_mutex_lock(pthread_mutex_t* m)
    int pthread_mutex_unlock(pthread_mutex_t* m)
    int pthread_cond_init(pthread_cond_t* c, const void* attr)
    int pthread_cond_destroy(pthread_cond_t* c)
    int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m)
    int pthread_cond_signal(pthread_cond_t* c)
    int pthread_cond_broadcast(pthread_cond_t* c)


cdef extern from "zstd/zstd.h" nogil:
    ctypedef struct ZSTD_CCtx:
        pass
    ZSTD_CCtx* ZSTD_createCCtx()
    size_t ZSTD_freeCCtx(ZSTD_CCtx* cctx)
    size_t ZSTD_compressCCtx(ZSTD_CCtx* cctx, void* dst, size_t cap, const void* src,
                             size_t n, int level)
    size_t ZSTD_compressBound(size_t n)
    unsigned ZSTD_isError(size_t code)
    ctypedef enum ZSTD_cParameter:
        ZSTD_c_compressionLevel
    size_t ZSTD_CCtx_setParameter(ZSTD_CCtx* cctx, ZSTD_cParameter param, int value)
    size_t ZSTD_compress2(ZSTD_CCtx* cctx, void* dst, size_t cap, const void* src,
                          size_t n)


cdef extern from "lz4/lz4frame.h" nogil:
    ctypedef enum LZ4F_blockSizeID_t:
        LZ4F_max64KB
    ctypedef enum LZ4F_blockMode_t:
        LZ4F_blockIndependent
    ctypedef enum LZ4F_contentChecksum_t:
        LZ4F_noContentChecksum
    ctypedef enum LZ4F_blockChecksum_t:
        LZ4F_noBlockChecksum
    ctypedef struct LZ4F_frameInfo_t:
        LZ4F_blockSizeID_t blockSizeID
        LZ4F_blockMode_t blockMode
        LZ4F_contentChecksum_t contentChecksumFlag
        unsigned long long contentSize
        LZ4F_blockChecksum_t blockChecksumFlag
    ctypedef struct LZ4F_preferences_t:
        LZ4F_frameInfo_t frameInfo
        int compressionLevel
        unsigned autoFlush
    size_t LZ4F_compressFrameBound(size_t n, const LZ4F_preferences_t* prefs)
    size_t LZ4F_compressFrame(void* dst, size_t cap, const void* src, size_t n,
                              const LZ4F_preferences_t* prefs)
    unsigned LZ4F_isError(size_t code)


# Codec ids, as in a record batch's attributes.
cdef enum:
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4

# Of the batches worth handing over, the loop still compresses one in this many itself,
# to keep its cost per byte current (observe()) when the data changes.
cdef enum:
    SAMPLE_EVERY = 16

# Job states.
cdef enum:
    QUEUED = 0
    RUNNING = 1
    DONE = 2
    FAILED = 3        # no memory, a codec error, or the thread stopped first
    CANCELLED = 4     # its CompressJob let go before the thread took it


cdef struct Job:
    Job* next
    const char* src            # the records section: the batch's block, borrowed
    size_t src_len
    char* dst                  # the compressed bytes (DONE)
    size_t dst_len
    size_t dst_cap
    int state
    int refs                   # the CompressJob, the thread


# Buffers kept for the next jobs: a fresh malloc of a few hundred KiB comes from mmap
# and pays a page fault per 4 KiB on first write, more than the copy itself (perf:
# 130 us per 256 KiB job on the loop). Sizes are rounded up to 64 KiB.
cdef enum:
    SPARE_MAX = 12
    SPARE_ROUND = 65536


cdef struct Spare:
    char* ptr
    size_t cap


cdef struct Shared:
    pthread_mutex_t lock
    pthread_cond_t work        # the thread waits here for a job or the stop
    pthread_cond_t finished    # CompressJob.result() waits here for its job
    Job* head
    Job* tail
    int pending                # jobs queued or running
    int stop
    int held                   # tests: the thread takes no job while set (hold())
    int refs                   # the CompressorThread, the thread (once started)
    int codec
    int level                  # zstd level; LZ4 frame level (0: fast mode)
    int notify_fd              # the pipe's write end, -1 when nobody listens
    int notified               # a byte was written that the loop has not read yet
    unsigned long long done_jobs
    unsigned long long failed_jobs
    double ns_per_byte            # the codec's cost on this data, on the loop: a moving
                                  # average of the loop's own compressions (observe());
                                  # 0 until the first
    double thread_ns_per_byte     # ...and on the thread, from its jobs
    Spare spares[SPARE_MAX]       # buffers for the next jobs (see SPARE_MAX)
    int n_spares


cdef char* take_spare(Shared* s, size_t need, size_t* cap) noexcept nogil:
    # Called with the lock held: the smallest spare of at least ``need`` bytes, or a
    # new buffer (NULL if there is no memory).
    cdef int i, best = -1
    cdef char* p
    for i in range(s.n_spares):
        if s.spares[i].cap >= need and (best < 0 or s.spares[i].cap < s.spares[best].cap):
            best = i
    if best >= 0:
        p = s.spares[best].ptr
        cap[0] = s.spares[best].cap
        s.n_spares -= 1
        s.spares[best] = s.spares[s.n_spares]
        return p
    cap[0] = (need + SPARE_ROUND - 1) // SPARE_ROUND * SPARE_ROUND
    if cap[0] == 0:
        cap[0] = SPARE_ROUND
    return <char*>malloc(cap[0])


cdef void give_spare(Shared* s, char* p, size_t cap) noexcept nogil:
    # Called with the lock held.
    if p == NULL:
        return
    if s.n_spares < SPARE_MAX:
        s.spares[s.n_spares].ptr = p
        s.spares[s.n_spares].cap = cap
        s.n_spares += 1
    else:
        free(p)


cdef struct Counters:
    int pending
    unsigned long long done_jobs
    unsigned long long failed_jobs
    double ns_per_byte


cdef void release_job(Shared* s, Job* job) noexcept nogil:
    # Called with the lock held, by a holder letting go.
    job.refs -= 1
    if job.refs == 0:
        give_spare(s, job.dst, job.dst_cap)
        free(job)


cdef void release_shared(Shared* s) noexcept nogil:
    # Called with the lock held; unlocks it.
    cdef bint last
    cdef int i
    s.refs -= 1
    last = s.refs == 0
    pthread_mutex_unlock(&s.lock)
    if last:
        for i in range(s.n_spares):
            free(s.spares[i].ptr)
        pthread_cond_destroy(&s.work)
        pthread_cond_destroy(&s.finished)
        pthread_mutex_destroy(&s.lock)
        free(s)


cdef void learn(double* estimate, double ns_per_byte) noexcept nogil:
    # Called with the lock held. Down at once, up over about eight batches: a slow
    # sample is often the machine's (a cold cache, the codec's first allocations, the
    # core taken by another process), and erring low keeps batches on the loop, as
    # without the thread.
    if estimate[0] == 0 or ns_per_byte < estimate[0]:
        estimate[0] = ns_per_byte
    else:
        estimate[0] += (ns_per_byte - estimate[0]) / 8


cdef void lz4_prefs(Shared* s, LZ4F_preferences_t* prefs) noexcept nogil:
    # What Kafka's Java writer makes and lz4.frame makes on the loop: independent
    # 64 KiB blocks, no checksums but the header's, no content size.
    memset(prefs, 0, sizeof(LZ4F_preferences_t))
    prefs.frameInfo.blockSizeID = LZ4F_max64KB
    prefs.frameInfo.blockMode = LZ4F_blockIndependent
    prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum
    prefs.frameInfo.blockChecksumFlag = LZ4F_noBlockChecksum
    prefs.compressionLevel = s.level


cdef size_t bound(Shared* s, size_t n) noexcept nogil:
    # The largest compressed size of n bytes.
    cdef LZ4F_preferences_t prefs
    if s.codec == CODEC_ZSTD:
        return ZSTD_compressBound(n)
    lz4_prefs(s, &prefs)
    return LZ4F_compressFrameBound(n, &prefs)


cdef bint compress(Shared* s, Job* job, ZSTD_CCtx** zctx) noexcept nogil:
    # Into job.dst (job.dst_cap >= bound(s, job.src_len)).
    cdef size_t n
    cdef LZ4F_preferences_t prefs
    if job.dst == NULL:
        return False
    if s.codec == CODEC_ZSTD:
        if zctx[0] == NULL:
            # One context for the thread's life, its level set once: each frame then
            # reuses its tables (ZSTD_compressCCtx resets and clears them per call).
            zctx[0] = ZSTD_createCCtx()
            if zctx[0] == NULL:
                return False
            if ZSTD_isError(ZSTD_CCtx_setParameter(zctx[0], ZSTD_c_compressionLevel,
                                                   s.level)):
                return False
        n = ZSTD_compress2(zctx[0], job.dst, job.dst_cap, job.src, job.src_len)
        if ZSTD_isError(n):
            return False
    else:
        lz4_prefs(s, &prefs)
        n = LZ4F_compressFrame(job.dst, job.dst_cap, job.src, job.src_len, &prefs)
        if LZ4F_isError(n):
            return False
    job.dst_len = n
    return True


cdef void work(void* arg) noexcept nogil:
    """The thread: take jobs in order until told to stop."""
    cdef Shared* s = <Shared*>arg
    cdef ZSTD_CCtx* zctx = NULL
    cdef Job* job
    cdef sigset_t all_signals
    cdef bint ok
    cdef char byte = b"x"
    cdef ssize_t wrote
    cdef long long spent
    # Signals go to the interpreter's threads, never here.
    sigfillset(&all_signals)
    sigprocmask(SIG_BLOCK, &all_signals, NULL)
    pthread_mutex_lock(&s.lock)
    while True:
        while (s.head == NULL or s.held) and not s.stop:
            pthread_cond_wait(&s.work, &s.lock)
        job = s.head
        if job == NULL:
            break  # stopped, nothing queued
        s.head = job.next
        if s.head == NULL:
            s.tail = NULL
        job.next = NULL
        if job.state == CANCELLED or s.stop:
            if job.state != CANCELLED:
                job.state = FAILED
            s.pending -= 1
            release_job(s, job)
            pthread_cond_broadcast(&s.finished)
            continue
        job.state = RUNNING
        job.dst = take_spare(s, bound(s, job.src_len), &job.dst_cap)
        pthread_mutex_unlock(&s.lock)
        spent = thread_cpu_ns()
        ok = compress(s, job, &zctx)
        spent = thread_cpu_ns() - spent
        pthread_mutex_lock(&s.lock)
        if ok and job.src_len:
            learn(&s.thread_ns_per_byte, <double>spent / <double>job.src_len)
        job.src = NULL  # done with the block: its CompressJob may let it go
        if ok:
            job.state = DONE
            s.done_jobs += 1
        else:
            job.state = FAILED
            s.failed_jobs += 1
        s.pending -= 1
        release_job(s, job)
        pthread_cond_broadcast(&s.finished)
        if not s.notified and s.notify_fd >= 0:
            # Non-blocking: a full pipe has a byte to read already.
            s.notified = True
            wrote = write(s.notify_fd, &byte, 1)
    if zctx != NULL:
        ZSTD_freeCCtx(zctx)
    release_shared(s)  # unlocks


@cython.final
@cython.no_gc_clear
@cython.auto_pickle(False)
cdef class CompressJob:
    """One batch's records section, compressed by the thread (see the module)."""

    cdef Job* job
    cdef CompressorThread owner
    # The export of the records (the batch's block) that the thread reads: held until
    # the thread is done with them, so the pool neither reuses nor frees the block
    # (a block released while exported waits in its pool's quarantine).
    cdef Py_buffer view
    cdef bint viewing

    def __cinit__(self) -> None:
        self.job = NULL
        self.viewing = False

    cdef void let_go(self) noexcept:
        # The thread no longer reads the records (done, failed, cancelled, or never
        # taken): release the export.
        if self.viewing:
            self.viewing = False
            PyBuffer_Release(&self.view)

    cdef int check(self) except -1:
        if self.job == NULL:
            raise RuntimeError("a CompressJob comes from CompressorThread.submit()")
        return 0

    @property
    def done(self) -> bool:
        """Whether the thread is done with it (compressed, or failed)."""
        self.check()
        cdef Shared* s = self.owner.s
        cdef int state
        if self.owner.pid != getpid():
            return True  # a forked child has no thread: result() gives None
        pthread_mutex_lock(&s.lock)
        state = self.job.state
        pthread_mutex_unlock(&s.lock)
        return state >= DONE

    def result(self) -> bytes | None:
        """The compressed bytes; None if the thread could not compress them (the
        caller compresses them itself). Waits for the thread, without the GIL."""
        self.check()
        cdef Shared* s = self.owner.s
        cdef Job* job = self.job
        cdef int state
        if self.owner.pid != getpid():
            return None  # a forked child has no thread to wait for
        with nogil:
            pthread_mutex_lock(&s.lock)
            while job.state < DONE:
                pthread_cond_wait(&s.finished, &s.lock)
            state = job.state
            pthread_mutex_unlock(&s.lock)
        self.let_go()
        if state != DONE:
            return None
        # The thread is done with the job: its dst is ours to read.
        return PyBytes_FromStringAndSize(job.dst, <Py_ssize_t>job.dst_len)

    def __dealloc__(self) -> None:
        cdef Shared* s
        cdef Job* job
        if self.job == NULL or self.owner is None:
            self.let_go()
            return
        s = self.owner.s
        job = self.job
        with nogil:
            pthread_mutex_lock(&s.lock)
            if job.state == QUEUED:
                job.state = CANCELLED  # the thread skips it without reading it
            elif self.owner.pid == getpid():
                # Compressing now (a batch aborted meanwhile): it still reads the
                # records, a few milliseconds at most.
                while job.state == RUNNING:
                    pthread_cond_wait(&s.finished, &s.lock)
            release_job(s, job)
            pthread_mutex_unlock(&s.lock)
        self.job = NULL
        self.let_go()


@cython.final
@cython.auto_pickle(False)
cdef class CompressorThread:
    """A thread that compresses batches of one codec and level (zstd or LZ4).

    ``min_bytes``: smaller records sections are not worth the hand-over and stay on
    the loop. ``min_seconds`` (0: no such choice): neither are those the codec would
    compress faster than that, from what it cost per byte on this producer's data, on
    the loop (its compressions, which it reports with :meth:`observe`) or on the
    thread, whichever is lower: until the loop's first report, and for one batch in
    16 of those worth handing over, the loop compresses and learns.
    ``max_pending``: at most this many jobs queued or running; beyond, the loop
    compresses itself (both cores busy). Started by the first accepted
    :meth:`submit`; :meth:`attach` tells it the loop to wake when a job is done.
    """

    cdef Shared* s
    cdef readonly int codec
    cdef readonly int level
    cdef readonly Py_ssize_t min_bytes
    cdef readonly double min_ns
    cdef readonly int max_pending
    cdef unsigned long long taken   # submits that passed the checks (see SAMPLE_EVERY)
    cdef bint started
    cdef bint closed
    cdef int pid                   # the process that started the thread
    cdef object loop
    cdef object on_done
    cdef int read_fd
    cdef int write_fd

    def __cinit__(self, int codec, int level, Py_ssize_t min_bytes=8192,
                  int max_pending=8, double min_seconds=0.0) -> None:
        if codec != CODEC_ZSTD and codec != CODEC_LZ4:
            raise ValueError(f"the compression thread does zstd (4) and lz4 (3), not {codec}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.s = <Shared*>malloc(sizeof(Shared))
        if self.s == NULL:
            raise MemoryError()
        memset(self.s, 0, sizeof(Shared))
        pthread_mutex_init(&self.s.lock, NULL)
        pthread_cond_init(&self.s.work, NULL)
        pthread_cond_init(&self.s.finished, NULL)
        self.s.refs = 1
        self.s.codec = codec
        self.s.level = level
        self.s.notify_fd = -1
        self.codec = codec
        self.level = level
        self.min_bytes = min_bytes
        self.min_ns = min_seconds * 1e9
        self.max_pending = max_pending
        self.taken = 0
        self.started = False
        self.closed = False
        self.pid = getpid()
        self.read_fd = -1
        self.write_fd = -1

    cdef Counters counters(self) noexcept:
        # One consistent reading of the thread's counters, under the lock.
        cdef Counters c
        pthread_mutex_lock(&self.s.lock)
        c.pending = self.s.pending
        c.done_jobs = self.s.done_jobs
        c.failed_jobs = self.s.failed_jobs
        c.ns_per_byte = self.s.ns_per_byte
        pthread_mutex_unlock(&self.s.lock)
        return c

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        return self.counters().pending

    @property
    def compressed(self) -> int:
        """Jobs compressed so far."""
        return self.counters().done_jobs

    @property
    def failed(self) -> int:
        """Jobs the thread could not compress (left to the loop)."""
        return self.counters().failed_jobs

    def observe(self, Py_ssize_t nbytes, long long ns) -> None:
        """The loop compressed ``nbytes`` of records in ``ns`` nanoseconds of CPU: a
        sample of the codec's cost on this data, for the next :meth:`submit`."""
        if nbytes <= 0 or ns <= 0:
            return
        pthread_mutex_lock(&self.s.lock)
        learn(&self.s.ns_per_byte, <double>ns / <double>nbytes)
        pthread_mutex_unlock(&self.s.lock)

    @property
    def seconds_per_mib(self) -> float:
        """The codec's cost on this data so far, on the loop: CPU seconds per MiB (0:
        unknown)."""
        return self.counters().ns_per_byte * 1048576 / 1e9

    @property
    def running(self) -> bool:
        """Started and not closed."""
        return self.started and not self.closed

    def hold(self, bint held) -> None:
        """Tests: keep the thread from taking a job (True) until released (False);
        a job it is compressing finishes. Lets a test see a batch still at the thread."""
        pthread_mutex_lock(&self.s.lock)
        self.s.held = held
        pthread_cond_broadcast(&self.s.work)
        pthread_mutex_unlock(&self.s.lock)

    def attach(self, loop: object, on_done: object) -> None:
        """Call ``on_done()`` in ``loop`` after jobs finish (once per wake-up of the
        loop, however many finished). Call :meth:`close` in the loop's thread."""
        if self.closed:
            raise RuntimeError("the compression thread is closed")
        if self.loop is not None:
            raise RuntimeError("the compression thread is attached already")
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self.read_fd = r
        self.write_fd = w
        self.loop = loop
        self.on_done = on_done
        loop.add_reader(r, self._readable)
        pthread_mutex_lock(&self.s.lock)
        self.s.notify_fd = w
        self.s.notified = False
        pthread_mutex_unlock(&self.s.lock)

    def _readable(self) -> None:
        # Read first, then clear `notified`: a job finished after the clear writes
        # again, and one finished before it is seen by on_done's pass.
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        pthread_mutex_lock(&self.s.lock)
        self.s.notified = False
        pthread_mutex_unlock(&self.s.lock)
        if self.on_done is not None:
            self.on_done()

    def submit(self, data: object) -> CompressJob | None:
        """Queue ``data`` (a buffer: the thread reads it in place, and the job holds
        an export of it until the thread is done); None (nothing queued: the caller
        compresses it) when it is smaller than ``min_bytes``, its cost on the loop is
        unknown or under ``min_seconds``, it is the one in 16 the loop samples,
        ``max_pending`` jobs are pending, or the thread is closed or cannot start."""
        cdef Job* job
        cdef Shared* s = self.s
        cdef double cost, per_byte
        cdef bint busy
        cdef CompressJob handle
        if self.closed or (self.started and self.pid != getpid()):
            return None
        handle = CompressJob.__new__(CompressJob)
        PyObject_GetBuffer(data, &handle.view, PyBUF_SIMPLE)
        handle.viewing = True
        if handle.view.len < self.min_bytes or handle.view.len <= 0:
            return None  # (handle's dealloc releases the view)
        pthread_mutex_lock(&s.lock)
        # What compressing it costs wherever it is done: the loop's estimate, or the
        # thread's if that is lower (data that compresses very well goes faster on
        # the loop, whose caches hold the records it just wrote).
        per_byte = s.ns_per_byte
        if 0 < s.thread_ns_per_byte < per_byte:
            per_byte = s.thread_ns_per_byte
        cost = per_byte * <double>handle.view.len
        busy = s.pending >= self.max_pending
        pthread_mutex_unlock(&s.lock)
        if busy:
            return None
        if self.min_ns > 0:  # (0: every batch over min_bytes goes)
            if cost == 0 or cost < self.min_ns:
                return None  # (unknown cost: the loop compresses it, and learns it)
            self.taken += 1
            if self.taken % SAMPLE_EVERY == 0:
                return None  # the loop compresses one in SAMPLE_EVERY: a fresh cost
        if not self.started:
            # The thread holds a reference of its own to the shared state.
            s.refs += 1
            if PyThread_start_new_thread(work, s) == PYTHREAD_INVALID_THREAD_ID:
                s.refs -= 1
                self.closed = True
                return None
            self.started = True
            self.pid = getpid()
        job = <Job*>malloc(sizeof(Job))
        if job == NULL:
            return None
        memset(job, 0, sizeof(Job))
        job.src = <const char*>handle.view.buf
        job.src_len = <size_t>handle.view.len
        job.state = QUEUED
        job.refs = 2
        handle.job = job
        handle.owner = self
        pthread_mutex_lock(&s.lock)
        if s.tail == NULL:
            s.head = job
        else:
            s.tail.next = job
        s.tail = job
        s.pending += 1
        pthread_cond_signal(&s.work)
        pthread_mutex_unlock(&s.lock)
        return handle

    def close(self) -> None:
        """Stop the thread (it fails the jobs still queued: their batches are
        compressed on the loop) and stop listening in the loop. Idempotent."""
        if self.closed and self.loop is None:
            return
        self.closed = True
        self.stop()
        if self.loop is not None:
            try:
                self.loop.remove_reader(self.read_fd)
            except Exception:  # a loop closed meanwhile has nothing to remove
                pass
            self.loop = None
            self.on_done = None
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    cdef void stop(self) noexcept:
        pthread_mutex_lock(&self.s.lock)
        self.s.stop = True
        self.s.notify_fd = -1
        pthread_cond_broadcast(&self.s.work)
        pthread_mutex_unlock(&self.s.lock)

    def __dealloc__(self) -> None:
        if self.s == NULL:
            return
        self.stop()
        if self.write_fd >= 0:
            os.close(self.write_fd)
        if self.read_fd >= 0:
            os.close(self.read_fd)
        pthread_mutex_lock(&self.s.lock)
        release_shared(self.s)  # unlocks; frees it unless the thread still runs
        self.s = NULL
