"""Fuzzing: the targets (``fuzz.targets``, run in the suite by ``tests/unit/test_fuzz.py``),
their hostile-input helpers (``fuzz.util``) and the long campaign (``python -m fuzz.long``).
"""
