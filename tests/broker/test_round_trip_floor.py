"""``bench/studies/round_trip_floor.py`` on the test broker: the requests it captures from our
producer and writes again are real Produce requests that the broker appends, read back
by confluent-kafka, so the floors it prints are of real round trips."""

from __future__ import annotations

from support.kafka_util import consume_all, create_topic, partition_offsets

from bench.studies.round_trip_floor import (
    VALUE,
    capture_request,
    run_blocking,
    run_bulk,
    run_paced,
    run_task,
)


def test_one_record_request_is_appended_by_every_floor_client(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap)
    request, records = capture_request(kafka_bootstrap, topic)  # writes 2 records
    assert records == 1
    assert int.from_bytes(request[:4], "big") == len(request) - 4  # one whole frame
    assert int.from_bytes(request[4:6], "big") == 0  # api key 0: Produce

    blocking = run_blocking(kafka_bootstrap, request, 20)
    tasked = run_task(kafka_bootstrap, request, 10)
    paced = run_paced(kafka_bootstrap, request, 200.0, 0.25)
    assert len(blocking) == 20 and len(tasked) == 10 and len(paced) == 50
    assert min(blocking + tasked + paced) > 0

    got = consume_all(kafka_bootstrap, topic, expected=82, timeout=30)
    assert [r.offset for r in got] == list(range(82))
    assert all(r.value == VALUE and r.key is None for r in got)


def test_bulk_request_is_appended_whole_each_time(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap)
    request, records = capture_request(kafka_bootstrap, topic, bulk=20_000)
    # send_many's batches for 20,000 records of 100 bytes: several, each of many records
    assert 100 < records < 20_000
    rate, cpu = run_bulk(kafka_bootstrap, request, 3, records)
    assert rate > 0 and cpu >= 0
    # the warm-up record, the captured run, and three more copies of the captured batch
    assert partition_offsets(kafka_bootstrap, topic)[0] == (0, 1 + 20_000 + 3 * records)
