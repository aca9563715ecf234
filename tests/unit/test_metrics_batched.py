"""The per-request metric recording (``batches_sent``, ``WindowedStat.record_all``)
gives exactly what recording each batch on its own gives."""

from __future__ import annotations

import random

from aioproducer.metrics import ProducerMetrics, WindowedStat

_SNAPSHOT_ARGS = {"buffer_total": 1 << 20, "buffer_available": 1 << 19, "in_flight": 1,
                  "metadata_age_s": 1.0, "waiting_threads": 0}


def _state(s: WindowedStat) -> tuple[object, ...]:
    return tuple(getattr(s, name) for name in WindowedStat.__slots__)


def test_record_all_is_record_of_each_bit_for_bit() -> None:
    rng = random.Random(7)
    one, many = WindowedStat(0.0), WindowedStat(0.0)
    now = 0.0
    for _ in range(300):
        now += rng.choice((0.001, 0.5, 7.0, 31.0, 65.0))  # same window, next, gap
        values = [rng.random() * 1e3 for _ in range(rng.randrange(0, 9))]
        for v in values:
            one.record(v, now)
        many.record_all(values, now)
        assert _state(one) == _state(many)
    assert one.avg(now) == many.avg(now) and one.max(now) == many.max(now)
    assert one.rate(now) == many.rate(now) and one.count_rate(now) == many.count_rate(now)


def test_batches_sent_is_batch_sent_per_batch_then_request_sent() -> None:
    rng = random.Random(11)
    clock = [100.0]
    per_batch = ProducerMetrics("a", clock=lambda: clock[0])
    per_request = ProducerMetrics("b", clock=lambda: clock[0])
    for _ in range(200):
        clock[0] += rng.choice((0.002, 3.0, 40.0))
        now = clock[0]
        batches = [(rng.choice("xyz"), rng.randrange(1, 500), rng.randrange(61, 20000),
                    rng.random() + 0.2, rng.random() * 30, rng.random() < 0.2)
                   for _ in range(rng.randrange(1, 7))]
        for topic, n, size, ratio, queued, retry in batches:
            per_batch.batch_sent(topic, n, size, ratio, queued, retry, now)
        total = sum(b[1] for b in batches)
        per_batch.request_sent(total, now)
        first = [b for b in batches if not b[5]]
        per_request.batches_sent([b[0] for b in first], [b[1] for b in first],
                                 [b[2] for b in first], [b[3] for b in first],
                                 [b[4] for b in first], [b[1] for b in batches if b[5]],
                                 total, now)
    a = per_batch.snapshot(**_SNAPSHOT_ARGS)
    b = per_request.snapshot(**_SNAPSHOT_ARGS)
    assert a.producer == b.producer
    assert a.topics == b.topics and list(a.topics) == list(b.topics)
    assert a.nodes == b.nodes
    for name in ("record_send", "record_retry", "bytes", "batch_size", "compression_rate",
                 "queue_time", "records_per_request"):
        assert _state(getattr(per_batch, name)) == _state(getattr(per_request, name)), name
    for topic, stat in per_batch.topic_send.items():
        assert _state(stat) == _state(per_request.topic_send[topic])
        assert _state(per_batch.topic_bytes[topic]) == _state(per_request.topic_bytes[topic])
