# One entry point for a fresh machine: `make demo` and `make test` do all the set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Set by `make docs` only: the docs extra (MkDocs Material, mkdocstrings) is not
# installed for `make test` / `make demo`.
DOCS_STAMP := $(VENV)/.docs-installed
# The newest pyspark whose spark-sql-kafka-0-10 jar is on Maven Central (4.2.1's and
# 4.3.0's are not): bench/spark_bench.py runs Spark's Kafka sink of the same version.
PYSPARK := pyspark[sql,connect]==4.2.0

.PHONY: venv build broker broker-stop demo test lint bench docs clean spark-cluster \
        spark-cluster-stop

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel "Cython>=3.0"
	$(BIN)/pip install -q -e ".[test,spark,cli,otel,schema]" "$(PYSPARK)" --no-build-isolation
	touch $(STAMP)

venv: $(STAMP)

# Recompile the Cython core (fast when nothing changed), and write the bytecode
# caches that `pip install` writes for an installed package: with
# PYTHONDONTWRITEBYTECODE set (as on our CI machines) an editable checkout would
# otherwise compile every module from source in every process (~90 ms of CPU at
# each start). A cache is checked against its source's mtime, so an edit is never
# shadowed.
build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace
	$(BIN)/python -m compileall -q aioproducer bench

broker: build
	$(BIN)/aioproducer broker start

broker-stop:
	-$(BIN)/aioproducer broker stop

# A three-node Kafka cluster and a Spark standalone cluster (a master and two workers,
# from pyspark's own jars and spark-class) on 127.0.0.1, left running for
# `python -m bench.spark_cluster_bench --bootstrap <printed> --spark-dir .broker/spark`
# or a job of your own (docs/spark.md, "On a cluster"); `make spark-cluster-stop` ends both.
spark-cluster: build
	$(BIN)/aioproducer broker start --nodes 3 --dir .broker/spark-kafka
	$(BIN)/python -m aioproducer.devbroker.spark_cluster start --dir .broker/spark

spark-cluster-stop:
	-$(BIN)/python -m aioproducer.devbroker.spark_cluster stop --dir .broker/spark
	-$(BIN)/aioproducer broker stop --dir .broker/spark-kafka

# The main job: a local broker, one million 100-byte records, with a progress bar and a summary.
demo: broker
	$(BIN)/aioproducer perf --num-records 1000000 --record-size 100

# Set-up plus the full suite (the suite starts its own broker once per session).
test: build
	$(BIN)/python -m pytest -q -ra --durations=25 $(PYTEST_ARGS)

lint: build
	$(BIN)/ruff check aioproducer tests bench fuzz setup.py
	$(BIN)/mypy

bench: build
	$(BIN)/python -m bench

# The docs extra's pins, read from pyproject.toml (installing ".[docs]" would rebuild the
# package): into the same venv, once, and again when pyproject.toml changes.
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' > $(VENV)/docs-requirements.txt
	$(BIN)/pip install -q -r $(VENV)/docs-requirements.txt
	touch $(DOCS_STAMP)

# The documentation site (docs/, mkdocs.yml) into site/; any warning fails the build.
# (NO_MKDOCS_2_WARNING: Material for MkDocs 9.7+ prints a banner about MkDocs 2.0 otherwise.)
# The API reference reads the docstrings (and the compiled core's .pyi stubs).
docs: $(DOCS_STAMP) build
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean: broker-stop
	rm -rf build site $(VENV) .broker aioproducer/_native/*.c aioproducer/_native/*.so
