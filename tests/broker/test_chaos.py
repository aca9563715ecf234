"""Chaos soak, short version: exactly once, in order, for the idempotent producer while
brokers are killed and paused, connections reset, acks lost and poison records sent.

The engine is ``soak/chaos.py`` (its docstring lists the faults and the invariants);
``python -m soak.chaos --records 1000000 --seed N`` is the long soak. Here: 70 s of
records at 3,000/s on the three-node cluster, through the fault proxy (so that
InitProducerId requests are counted), with a seeded schedule: a leader kill and a 5 s
pause of two followers (in a random order), and every 3-8 s a connection reset or a
burst of lost acks (at least one of each); poison records every second; then about
20 s without faults for the stall detector. The run is bounded (150 s) and the
cluster is healed afterwards whatever happened.

``AIOPRODUCER_CHAOS_SEED`` picks another schedule (the seed is printed with it).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from aioproducer.devbroker import LocalKafka
from aioproducer.testing.faultproxy import ProxyCluster
from soak.chaos import ChaosConfig, ChaosReport, make_schedule, run_chaos

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("AIOPRODUCER_CHAOS_SEED", "20261125"))


def short_config(**overrides: object) -> ChaosConfig:
    cfg = ChaosConfig(
        records=210_000, rate=3_000.0, seed=SEED,
        fault_start=3.0, tail_seconds=20.0, pause_seconds=5.0, kill_down=(2.0, 4.0),
        restart_estimate=25.0, gap=(1.5, 3.0),
        delivery_timeout_ms=60_000, max_block_ms=60_000,
        node_timeout=60.0, settle_timeout=30.0, close_timeout=10.0, consume_timeout=60.0,
        wall_timeout=110.0, max_ack_gap=15.0)
    return ChaosConfig(**{**cfg.__dict__, **overrides})


async def run_short(cluster: LocalKafka, cfg: ChaosConfig, budget: float) -> ChaosReport:
    try:
        async with ProxyCluster.start(cluster.bootstrap) as proxy:
            return await asyncio.wait_for(run_chaos(cluster, cfg, proxy=proxy), budget)
    finally:
        # Whatever happened: later tests get a healthy cluster.
        await asyncio.to_thread(cluster.resume_all)
        await asyncio.to_thread(cluster.ensure_running, 120.0)


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_chaos_exactly_once_in_order(kafka_cluster3: LocalKafka) -> None:
    cfg = short_config()
    kinds = {e.kind for e in make_schedule(cfg, proxy=True)}
    assert kinds == {"kill", "pause", "reset", "drop_acks"}, "the schedule lacks a fault"
    report = await run_short(kafka_cluster3, cfg, budget=150.0)
    print("\n" + report.line())
    ran = [e for e in report.schedule if e.started is not None]
    assert len(ran) == len(report.schedule), "a fault never ran: the stream was too short"
    assert report.poison_sent > 0
    assert report.tail >= 10.0, "too little time after the last fault to judge stalls"
    assert not report.violations(), report.line()


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_chaos_harness_without_faults(kafka_cluster3: LocalKafka) -> None:
    """The same stream and checks with an empty schedule (poison records included):
    any correct producer passes, so a failure of the test above is the producer's."""
    cfg = short_config(faults=False, records=60_000)
    report = await run_short(kafka_cluster3, cfg, budget=120.0)
    print("\n" + report.line())
    assert report.schedule == []
    assert not report.violations(), report.line()
    assert report.acknowledged == cfg.records


def test_pause_and_resume_node(kafka_cluster3: LocalKafka) -> None:
    """pause_node freezes a node without it counting as gone (the watchdog leaves it
    alone); ensure_running and resume_node bring it back."""
    cluster = kafka_cluster3
    pid = cluster.node_pid(2)
    assert pid is not None
    try:
        cluster.pause_node(2)
        assert cluster.node_paused(2) and cluster.node_alive(2)
        time.sleep(2.5)  # the watchdog looks every second
        assert cluster.node_pid(2) == pid and cluster.node_paused(2)
        cluster.resume_node(2)
        assert not cluster.node_paused(2)
        cluster.pause_node(2)
        cluster.ensure_running(timeout=60)  # resumes it rather than waiting forever
        assert not cluster.node_paused(2)
        assert cluster.node_pid(2) == pid  # the same process: not restarted
    finally:
        cluster.resume_all()


@pytest.mark.broker  # starts a broker of its own
def test_stop_resumes_a_paused_node(tmp_path: Path) -> None:
    """stop() on a paused node: SIGTERM then SIGCONT, so the node shuts down cleanly
    at once instead of waiting for the SIGKILL after ``timeout``."""
    cluster = LocalKafka(tmp_path / "one", nodes=1)
    cluster.start(timeout=120)
    try:
        pid = cluster.node_pid(0)
        cluster.pause_node(0)
        started = time.monotonic()
        cluster.stop(timeout=60)
        took = time.monotonic() - started
        assert pid is not None and cluster.node_pid(0) is None
        assert took < 30, f"stop() took {took:.1f} s: the paused node was not resumed"
    finally:
        cluster.stop(timeout=10)
