"""One-off studies, each a question asked once and answered in ``docs/performance.md``
or ``docs/notes/bench-sessions.md``: ``python -m bench.studies.<name> --help``.

Some are shared with the suite: ``tests/broker/test_partitioning.py`` runs
:mod:`bench.studies.partitioning`'s measurement, ``tests/broker/test_round_trip_floor.py``
the clients of :mod:`bench.studies.round_trip_floor`.
"""
