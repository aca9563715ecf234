"""What the tests share, imported as ``support.<module>`` (``tests/`` is on ``sys.path``
under pytest: ``tests/conftest.py`` is a rootdir conftest outside any package).

- ``kafka_util``: topics, reading everything back, watermarks, with confluent-kafka.
- ``delivery_util``: the delivery checks (lost, duplicated, out of order) of a run.
- ``log_util``: the broker's log segments, read with Kafka's DumpLogSegments.
- ``secure_util``: clients and raw SASL exchanges for the secured broker.
- ``produce_response``: Produce responses made up for the fault proxy
  (``aioproducer.testing.faultproxy``) to answer with.
- scripts run as child processes: ``txn_worker.py`` (transactional workers that die
  for real), ``service_sigterm.py`` (a service stopped by SIGTERM);
  ``typecheck_protocol.py`` is checked by ``mypy --strict``, not run.
- ``java/``: single-file Java programs the tests run (``run_java``, ``java``).
"""
