"""A broker of each transaction version (KIP-890), for the transaction tests.

``txn_broker = txn_broker_fixture()`` in a test module gives a module-scoped fixture
parametrized by the finalized ``transaction.version``: 2 is the session's broker
(Kafka 4.3 finalizes version 2 by default; checked with ApiVersions), 1 a broker
formatted with ``--feature transaction.version=1``, started for the module and
stopped after it. With ``$AIOPRODUCER_BOOTSTRAP`` only that broker is used, at the
version it finalizes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from aioproducer.devbroker import BrokerStartError, KafkaLibsError, LocalKafka
from aioproducer.net.client import KafkaClient


@dataclass(frozen=True)
class TxnBroker:
    bootstrap: str
    version: int


def finalized_transaction_version(bootstrap: str) -> int:
    """The cluster's finalized ``transaction.version`` (0 if not finalized)."""

    async def ask() -> int:
        client = KafkaClient(bootstrap)
        try:
            await client.bootstrap(30.0)
            levels = [c.finalized_features.get("transaction.version", 0)
                      for c in client.connections()]
            return max(levels, default=0)
        finally:
            await client.close()

    return asyncio.run(ask())


def txn_broker_fixture() -> Callable[..., Iterator[TxnBroker]]:
    @pytest.fixture(scope="module", params=[1, 2], ids=["tv1", "tv2"])
    def txn_broker(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnBroker]:
        version: int = request.param
        session: Any = request.getfixturevalue("kafka_local_broker")
        if session is None or version == 2:
            import os

            bootstrap = (session.bootstrap if session is not None
                         else os.environ["AIOPRODUCER_BOOTSTRAP"])
            found = _in_thread(finalized_transaction_version, bootstrap)
            if found != version:
                pytest.skip(f"the broker finalizes transaction.version={found}")
            yield TxnBroker(bootstrap, version)
            return
        cluster = LocalKafka(tmp_path_factory.mktemp(f"kafka-tv{version}"), nodes=1,
                             features={"transaction.version": version})
        try:
            try:
                cluster.start(timeout=180)
            except (BrokerStartError, KafkaLibsError) as exc:
                pytest.fail(f"could not start a transaction.version={version} broker: "
                            f"{exc}", pytrace=False)
            found = _in_thread(finalized_transaction_version, cluster.bootstrap)
            assert found == version, found
            yield TxnBroker(cluster.bootstrap, version)
        finally:
            cluster.stop(timeout=30)

    return txn_broker


def _in_thread(fn: Callable[[str], int], arg: str) -> int:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, arg).result()
