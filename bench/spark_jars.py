"""Spark's own Kafka sink for the benchmark: ``spark-sql-kafka-0-10`` matched to the
installed pyspark, fetched from Maven Central with ``mvn`` into the git-ignored
``.cache/`` by ``aioproducer.devbroker.jars.fetch_maven_artifacts`` (the same fetch and
cache as the Kafka jars).

Only the jars that pyspark does not already ship are kept (the sink, its token
provider, kafka-clients, commons-pool2): two versions of one library on the class
path is how a benchmark ends up measuring the wrong thing, or nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from aioproducer.devbroker.jars import cache_root, fetch_maven_artifacts

_MARKER = "complete.json"


def spark_versions() -> tuple[str, str]:
    """(Spark version, Scala binary version) of the installed pyspark."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    scala = next((m.group(1) for p in jars.glob("scala-library-*.jar")
                  if (m := re.match(r"scala-library-(\d+\.\d+)\.", p.name))), None)
    if scala is None:
        raise RuntimeError(f"no scala-library jar in {jars}: cannot tell pyspark's Scala "
                           "version")
    return pyspark.__version__, scala


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.1.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar_name)


def ensure_spark_kafka_jars() -> list[Path]:
    """The jars to add to ``spark.jars`` for ``df.write.format("kafka")``."""
    import pyspark

    spark, scala = spark_versions()
    root = cache_root() / f"spark-sql-kafka-{spark}_{scala}"
    libs = root / "libs"
    marker = root / _MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("spark") == spark:
        return sorted(libs.glob("*.jar"))
    sink = f"spark-sql-kafka-0-10_{scala}-{spark}.jar"
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    fetch_maven_artifacts(
        root, [("org.apache.spark", f"spark-sql-kafka-0-10_{scala}", spark)],
        what=f"spark-sql-kafka-0-10_{scala} {spark}",
        project=("aioproducer.bench", "spark-kafka-sink", spark), required=[sink],
        keep=lambda jar: _artifact(jar.name) not in shipped, log_prefix="bench")
    jars = sorted(libs.glob("*.jar"))
    marker.write_text(json.dumps({"spark": spark, "scala": scala,
                                  "jars": [j.name for j in jars]}))
    print("bench: " + ", ".join(j.name for j in jars), file=sys.stderr, flush=True)
    return jars


if __name__ == "__main__":
    for jar in ensure_spark_kafka_jars():
        print(jar)
