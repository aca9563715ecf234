"""One local Spark session for the whole test run (``tests/broker/conftest.py`` makes it
the session-scoped ``spark`` fixture): test_spark.py and test_spark_source.py share its
JVM and Python workers instead of starting one each.

``local[2, 2]``: two cores, and a failed task is tried twice, so that Spark's retry can
be tested. Everything binds to 127.0.0.1; the Python workers run this interpreter (they
import aioproducer). ``format("aioproducer")`` is registered in it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def spark_session() -> Iterator[Any]:
    """Start the session, yield it, stop it (the body of the ``spark`` fixture)."""
    pyspark_sql = pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")
    pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import aioproducer
    session = (
        pyspark_sql.SparkSession.builder.master("local[2, 2]")
        .appName("aioproducer-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from aioproducer import spark_source

    spark_source.register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
