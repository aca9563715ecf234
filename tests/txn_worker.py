"""TRANSITIONAL: tests/test_transactions.py, still directly in tests/, runs this path.
The worker is tests/support/txn_worker.py; delete this file once test_transactions.py
has moved and runs that one."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parent / "support" / "txn_worker.py"),
               run_name="__main__")
