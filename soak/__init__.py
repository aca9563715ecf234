"""Soaks: long seeded runs against a local three-node cluster that must end with every
invariant holding (``soak/README.md``). ``python -m soak.chaos``: the idempotent
producer under broker and network faults; ``python -m soak.txn``: transactions under
the caller's and the brokers' misbehaviour. The suite runs short versions of both
(``tests/broker/test_chaos.py``, ``tests/broker/test_txn_soak.py``).
"""
