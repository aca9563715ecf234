"""TRANSITIONAL: tests/test_mock_producer.py, still directly in tests/, runs
``mypy --strict tests/typecheck_protocol.py``; mypy follows this import and checks
tests/support/typecheck_protocol.py. Delete this file once test_mock_producer.py has
moved and checks that one."""

import support.typecheck_protocol  # noqa: F401
