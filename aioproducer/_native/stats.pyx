# cython: language_level=3
"""The producer's sensors, compiled: the windowed statistics and the per-batch and
per-request recording of :class:`aioproducer.metrics.ProducerMetrics`.

A batch sent records seven statistics and a response three: in Python that was the
largest single share of the Sender's own lines per request (66 of ~900 per round trip
of ``send_and_wait``). Here they are C calls. The meanings are Java's
(``SampledStat`` over ``metrics.num.samples=2`` windows of ``metrics.sample.window.ms``
= 30 s); :mod:`aioproducer.metrics` computes rates, averages and maxima from them when
``metrics()`` is called.
"""

cimport cython

cdef double WINDOW = 30.0
cdef double NEG_INF = float("-inf")


@cython.final
@cython.auto_pickle(False)
cdef class WindowedStat:
    """Sum, count and max over the current and the previous sample window, plus
    all-time totals (``total``, ``total_count``)."""

    cdef double _prev_start, _cur_start
    cdef double _prev_sum, _cur_sum
    cdef long long _prev_count, _cur_count
    cdef double _prev_max, _cur_max
    cdef readonly double created
    cdef readonly double total
    cdef readonly long long total_count

    def __init__(self, double now):
        self.created = now
        self._prev_start = self._cur_start = now
        self._prev_sum = self._cur_sum = 0.0
        self._prev_count = self._cur_count = 0
        self._prev_max = self._cur_max = NEG_INF
        self.total = 0.0
        self.total_count = 0

    cdef void roll(self, double now) noexcept:
        if now - self._cur_start < WINDOW:
            return
        if now - self._cur_start < 2 * WINDOW:
            self._prev_start = self._cur_start
            self._prev_sum = self._cur_sum
            self._prev_count = self._cur_count
            self._prev_max = self._cur_max
        else:  # nothing recorded for a whole window
            self._prev_start = now - WINDOW
            self._prev_sum = 0.0
            self._prev_count = 0
            self._prev_max = NEG_INF
        self._cur_start = now
        self._cur_sum = 0.0
        self._cur_count = 0
        self._cur_max = NEG_INF

    cpdef void record(self, double value, double now) noexcept:
        """Add one value at monotonic time ``now``."""
        if now - self._cur_start >= WINDOW:
            self.roll(now)
        self._cur_sum += value
        self._cur_count += 1
        if value > self._cur_max:
            self._cur_max = value
        self.total += value
        self.total_count += 1

    cdef double window_seconds(self, double now) noexcept:
        # Rolls the windows to now; the seconds they span (at least 1 ms).
        self.roll(now)
        cdef double elapsed = now - self._prev_start
        return elapsed if elapsed > 1e-3 else 1e-3

    def rate(self, double now) -> float:
        """Sum per second over the window (since creation while younger)."""
        cdef double seconds = self.window_seconds(now)  # (rolls first)
        return (self._prev_sum + self._cur_sum) / seconds

    def count_rate(self, double now) -> float:
        """Values recorded per second over the window."""
        cdef double seconds = self.window_seconds(now)  # (rolls first)
        return (self._prev_count + self._cur_count) / seconds

    def avg(self, double now) -> float:
        """Mean of the values in the window (0 when there are none)."""
        self.roll(now)
        cdef long long n = self._prev_count + self._cur_count
        return (self._prev_sum + self._cur_sum) / n if n else 0.0

    def max(self, double now) -> float:
        """Largest value in the window (0 when there are none)."""
        self.roll(now)
        cdef double m = self._prev_max if self._prev_max > self._cur_max else self._cur_max
        return m if m != NEG_INF else 0.0


cdef WindowedStat _stat(dict table, object key, double now):
    cdef object s = table.get(key)
    if s is None:
        s = table[key] = WindowedStat(now)
    return <WindowedStat>s


@cython.auto_pickle(False)
cdef class Sensors:
    """The statistics the Sender, the accumulator and the producer record into, and
    the recording calls (per batch and per request, never per record)."""

    cdef public WindowedStat record_send       # records sent (first attempt), per batch
    cdef public WindowedStat record_error      # records failed
    cdef public WindowedStat record_retry      # records in batches sent again
    cdef public WindowedStat bytes             # batch bytes sent (first attempt)
    cdef public WindowedStat batch_size        # bytes per batch
    cdef public WindowedStat records_per_request
    cdef public WindowedStat compression_rate
    cdef public WindowedStat request_latency   # ms
    cdef public WindowedStat queue_time        # ms, batch creation -> drain
    cdef public WindowedStat throttle_time     # ms
    cdef public WindowedStat pool_wait         # ns waited for buffer memory
    cdef public dict topic_send                # topic -> WindowedStat
    cdef public dict topic_bytes
    cdef public dict topic_errors
    cdef public dict node_latency              # node id -> WindowedStat (ms)

    def __init__(self, double now):
        self.record_send = WindowedStat(now)
        self.record_error = WindowedStat(now)
        self.record_retry = WindowedStat(now)
        self.bytes = WindowedStat(now)
        self.batch_size = WindowedStat(now)
        self.records_per_request = WindowedStat(now)
        self.compression_rate = WindowedStat(now)
        self.request_latency = WindowedStat(now)
        self.queue_time = WindowedStat(now)
        self.throttle_time = WindowedStat(now)
        self.pool_wait = WindowedStat(now)
        self.topic_send = {}
        self.topic_bytes = {}
        self.topic_errors = {}
        self.node_latency = {}

    def batch_sent(self, str topic, long long records, long long size,
                   double compression_rate, double queue_ms, bint retry,
                   double now) -> None:
        """A batch went out: its records and bytes (a retry counts only its records
        as retried)."""
        if retry:
            self.record_retry.record(<double>records, now)
            return
        self.record_send.record(<double>records, now)
        self.bytes.record(<double>size, now)
        self.batch_size.record(<double>size, now)
        self.compression_rate.record(compression_rate, now)
        self.queue_time.record(queue_ms, now)
        _stat(self.topic_send, topic, now).record(<double>records, now)
        _stat(self.topic_bytes, topic, now).record(<double>size, now)

    def request_sent(self, long long records, double now) -> None:
        self.records_per_request.record(<double>records, now)

    def response(self, int node, double latency_ms, double throttle_ms, double now) -> None:
        self.request_latency.record(latency_ms, now)
        self.throttle_time.record(throttle_ms, now)
        _stat(self.node_latency, node, now).record(latency_ms, now)

    def records_failed(self, str topic, long long records, double now) -> None:
        self.record_error.record(<double>records, now)
        _stat(self.topic_errors, topic, now).record(<double>records, now)

    def pool_waited(self, double ns, double now) -> None:
        self.pool_wait.record(ns, now)
