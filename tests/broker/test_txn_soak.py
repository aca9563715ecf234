"""Transaction soak, short versions (the engine and the long runs: ``soak/txn.py``):
consume-transform-produce through one transactional producer shared by three tasks,
while the schedule (seeded; the seed is printed) injects the caller's actions: a
commit or abort cancelled and called again, close() with a short timeout racing a
commit, empty polls, a hand-over to a second producer, a fenced zombie. Every
transaction must be all or nothing for ``read_committed``, the output must be the
transformed input exactly once, in order, and the group's committed offsets must
match it.

- on a one-node broker of each transaction version: the caller's actions only;
- on the three-node cluster (version 2): the same, plus leader kills, follower stalls
  and kills of the transaction coordinator's node.

``AIOPRODUCER_TXN_SOAK_SEED`` picks another schedule.
"""

from __future__ import annotations

import os

import pytest
from support.txn_brokers import TxnBroker, txn_broker_fixture

from aioproducer.devbroker import LocalKafka
from soak.txn import SoakConfig, run_soak

SEED = int(os.environ.get("AIOPRODUCER_TXN_SOAK_SEED", "20261127"))

txn_broker = txn_broker_fixture()


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_txn_soak_caller_actions(txn_broker: TxnBroker) -> None:
    cfg = SoakConfig(seed=SEED, rounds=120, duration=40.0, wall_timeout=120.0)
    print(f"seed {SEED}")
    report = await run_soak(None, txn_broker.bootstrap, cfg)
    print(report.line())
    assert report.version == txn_broker.version
    assert report.rounds >= 30, report.line()
    assert report.expected > 0 and report.outputs_read == report.expected
    assert report.violations() == [], report.line()


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_txn_soak_broker_faults(kafka_cluster3: LocalKafka) -> None:
    cfg = SoakConfig(seed=SEED, rounds=2000, duration=50.0, faults=True,
                     fault_gap=(2.0, 5.0), wall_timeout=150.0)
    print(f"seed {SEED}")
    try:
        report = await run_soak(kafka_cluster3, kafka_cluster3.bootstrap, cfg)
    finally:
        kafka_cluster3.resume_all()
        kafka_cluster3.ensure_running(120.0)
    print(report.line())
    for fault in report.faults:
        print(f"  fault: {fault}")
    assert report.faults, "no broker fault was injected"
    assert report.expected > 0 and report.outputs_read == report.expected
    assert report.violations() == [], report.line()
