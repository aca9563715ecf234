"""Side-by-side producer benchmarks: ``python -m bench --help``.

Every client run is its own process (``python -m bench.client_<name> --json-args ...``)
that prints one JSON line; :mod:`bench.run` creates a fresh topic per run, alternates the
clients, verifies what the broker holds and writes the Markdown report. See README.md.
"""
