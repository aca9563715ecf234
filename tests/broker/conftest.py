"""Fixtures of the broker tests that more than one module uses.

- ``spark``: one local Spark session for the whole run (``support.spark_session``),
  shared by test_spark.py and test_spark_source.py: one JVM serves the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.spark_session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    yield from spark_session()
