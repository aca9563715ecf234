"""The compiled sensors (aioproducer/_native/stats.pyx): windows, rates, recording."""

from __future__ import annotations

import pytest

from aioproducer.metrics import ProducerMetrics, WindowedStat


def test_rates_roll_the_windows_first() -> None:
    s = WindowedStat(0.0)
    s.record(10, 1.0)
    s.record(20, 2.0)
    assert s.rate(10.0) == pytest.approx(3.0)  # 30 over the 10 s since creation
    assert s.count_rate(10.0) == pytest.approx(0.2)
    # 40 s: the first window is now the previous one, still counted.
    assert s.rate(40.0) == pytest.approx(30 / 40)
    # 70 s: both windows have passed; a rate read before rolling would still say 30.
    assert s.rate(70.0) == 0.0 and s.count_rate(70.0) == 0.0
    assert s.total == 30 and s.total_count == 2


def test_a_young_stat_divides_by_a_millisecond_at_least() -> None:
    s = WindowedStat(5.0)
    s.record(2, 5.0)
    assert s.rate(5.0) == pytest.approx(2000.0)
    assert s.avg(5.0) == 2 and s.max(5.0) == 2


def test_recording_calls_feed_the_snapshot() -> None:
    clock = [100.0]
    m = ProducerMetrics("c", clock=lambda: clock[0])
    m.batch_sent("t", 10, 1000, 0.5, 2.0, False, 100.0)
    m.batch_sent("t", 10, 1000, 0.5, 2.0, True, 100.0)  # a retry: records only
    m.request_sent(10, 100.0)
    m.response(3, 4.0, 1.5, 100.0)
    m.records_failed("t", 2, 100.0)
    m.pool_waited(1e6, 100.0)
    clock[0] = 110.0
    snap = m.snapshot(buffer_total=10, buffer_available=5, in_flight=1,
                      metadata_age_s=1.0, waiting_threads=0)
    assert snap["record-send-total"] == 10 and snap["record-retry-total"] == 10
    assert snap["byte-total"] == 1000 and snap["batch-size-avg"] == 1000
    assert snap["record-queue-time-avg"] == 2.0 and snap["compression-rate-avg"] == 0.5
    assert snap["request-total"] == 1 and snap["request-latency-max"] == 4.0
    assert snap["produce-throttle-time-max"] == 1.5
    assert snap["record-error-total"] == 2
    assert snap["bufferpool-wait-time-ns-total"] == 1e6
    assert snap.topics["t"]["record-send-total"] == 10
    assert snap.topics["t"]["record-error-total"] == 2
    assert snap.nodes[3]["request-total"] == 1
    assert snap["record-send-rate"] == pytest.approx(1.0)  # 10 records over 10 s
