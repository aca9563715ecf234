"""Spark's own Kafka sink for the benchmark: ``spark-sql-kafka-0-10`` matched to the
installed pyspark, fetched from Maven Central with ``mvn`` into the git-ignored
``.cache/`` (as ``aioproducer.devbroker`` fetches the Kafka jars).

Only the jars that pyspark does not already ship are kept (the sink, its token
provider, kafka-clients, commons-pool2): two versions of one library on the class
path is how a benchmark ends up measuring the wrong thing, or nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_MVN_TIMEOUT = 900.0
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


def _pom(spark: str, scala: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>aioproducer.bench</groupId>
  <artifactId>spark-kafka-sink</artifactId>
  <version>{spark}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_{scala}</artifactId>
      <version>{spark}</version>
    </dependency>
  </dependencies>
</project>
"""


def ensure_spark_kafka_jars() -> list[Path]:
    """The jars to add to ``spark.jars`` for ``df.write.format("kafka")``."""
    import pyspark

    spark, scala = spark_versions()
    root = ROOT / ".cache" / f"spark-sql-kafka-{spark}_{scala}"
    libs = root / "libs"
    marker = root / _MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("spark") == spark:
        return sorted(libs.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven ('mvn') is needed to fetch spark-sql-kafka-0-10 and is "
                           "not on PATH")
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(_pom(spark, scala))
    partial = root / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    print(f"bench: fetching spark-sql-kafka-0-10_{scala} {spark} with Maven into {root} "
          "(once)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    cmd = [mvn, "-B", "--no-transfer-progress", "-f", str(root / "pom.xml"),
           "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
           "-DincludeScope=runtime"]
    done = subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=_MVN_TIMEOUT,
                          check=False)
    sink = f"spark-sql-kafka-0-10_{scala}-{spark}.jar"
    if done.returncode != 0 or not (partial / sink).is_file():
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise RuntimeError(f"mvn could not fetch {sink} (exit {done.returncode}):\n{tail}")
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in partial.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    shutil.rmtree(root / "target", ignore_errors=True)
    jars = sorted(libs.glob("*.jar"))
    marker.write_text(json.dumps({"spark": spark, "scala": scala,
                                  "jars": [j.name for j in jars]}))
    print(f"bench: {len(jars)} jars in {time.monotonic() - started:.1f} s: "
          + ", ".join(j.name for j in jars), file=sys.stderr, flush=True)
    return jars


if __name__ == "__main__":
    for jar in ensure_spark_kafka_jars():
        print(jar)
