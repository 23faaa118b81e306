# make setup   virtualenv with the pinned requirements, and the JVM jars
#              (Maven from PATH, or fetched by bin/maven)
# make slug    a slug-like folder built as Heroku's buildpacks would; prints its size
# make test    lint, then the whole test suite (real Kafka, Postgres and
#              Spark), on the slug's pruned Spark
# make test-fast  lint and tests/unit: no broker, Postgres or Spark (seconds)
# make run     the local stack (Kafka + Postgres) and the workers
# make bench   the benchmarks on the slug's Spark, reported as numbers and kept as data
#              (it says how long first; make bench-quick: the quick set)
# make bench-charts  docs/benchmarks.md's table and charts, from benchmarks/results.jsonl
# Every target does its own setup first.

# The major version .python-version names, as Heroku's buildpack reads it.
PYTHON_VERSION := $(shell cat .python-version)
PYTHON ?= python$(PYTHON_VERSION)
VENV := .venv
PY := $(VENV)/bin/python
# -C: fail on a checksum mismatch. settings.xml: Maven Central only.
MVN := bin/maven -q -B -C -s jvm/settings.xml

SLUG := build/slug
SLUG_SPARK := $(CURDIR)/$(SLUG)/.heroku/python/lib/python$(PYTHON_VERSION)/site-packages/pyspark

.PHONY: setup jars slug lint test test-fast run bench bench-quick bench-charts clean

setup: $(VENV)/.installed jars

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@command -v java >/dev/null || { echo "error: Java 17+ is required"; exit 1; }
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(v != "$(PYTHON_VERSION)" and \
		f"error: Python $(PYTHON_VERSION) is required (.python-version), not {v}")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

jars: jars/spark-connector/.fetched jars/kafka-broker/.fetched

# Spark's Kafka connector: the same pinned, checksum-verified jars as on Heroku.
jars/spark-connector/.fetched: jvm/spark-connector.lock bin/fetch-connector-jars
	bin/fetch-connector-jars jars/spark-connector
	touch $@

# The local broker (Kafka 3.9, KRaft), for tests and `make run`.
jars/kafka-broker/.fetched: jvm/kafka-broker/pom.xml jvm/settings.xml
	rm -rf jars/kafka-broker
	$(MVN) -f jvm/kafka-broker/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/jars/kafka-broker
	touch $@

# Kafka Streams and its topologies' jars, for `make bench`'s peer only.
jars/kafka-streams-peers/.fetched: jvm/kafka-streams-peers/pom.xml jvm/settings.xml
	rm -rf jars/kafka-streams-peers
	$(MVN) -f jvm/kafka-streams-peers/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/jars/kafka-streams-peers
	touch $@

slug: $(SLUG)/.built

$(SLUG)/.built: $(VENV)/.installed requirements.txt system.properties .slugignore jvm/spark-connector.lock \
		jvm/unused-spark-jars.txt jvm/java-modules.txt bin/build-slug bin/post_compile bin/prune-spark \
		bin/fetch-connector-jars bin/link-java-runtime bin/spark-class-archive shared/spark.py shared/jvm_options.py shared/py4j_names.py \
		$(wildcard shared/levers/*) shared/worker/spark_kafka.py services/workers.py $(wildcard services/*/worker.py services/*/topology.py)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHON=$(PY) bin/build-slug $(SLUG)
	touch $@

# Every Spark the tests start (in-process, each worker's, a test cluster's)
# runs on the slug's pruned jars and its linked Java runtime, so the pruning is proven
# end to end. The end-to-end tests mostly wait (session timeouts, restarts,
# deadlines): 3 processes, each with its own broker and Postgres: 20 to 26 min
# where one took 28 (2 cores).
TEST_PROCESSES ?= 3
ON_SLUG := SPARK_HOME=$(SLUG_SPARK) JAVA_HOME=$(CURDIR)/$(SLUG)/.jdk
test: lint slug
	$(ON_SLUG) $(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal $(PYTEST_ARGS)

test-fast: lint
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# ruff and mypy as pyproject.toml configures them.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

run: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m devstack.local_stack -- honcho -f Procfile.local start

# On the slug's Spark and Java runtime, with its class-data archive, as a
# dyno runs. Each says first how long it will take; the figures go to
# benchmarks/results.jsonl, and `make bench-charts` draws docs/benchmarks.md
# from them.
bench: setup slug jars/kafka-streams-peers/.fetched
	$(ON_SLUG) $(PY) -m benchmarks

bench-quick: setup slug jars/kafka-streams-peers/.fetched
	$(ON_SLUG) $(PY) -m benchmarks quick

bench-charts: .venv-charts/.installed
	.venv-charts/bin/python -m benchmarks.charts

.venv-charts/.installed: requirements-charts.txt
	$(PYTHON) -m venv .venv-charts
	.venv-charts/bin/pip install -q --disable-pip-version-check -r requirements-charts.txt
	touch $@

clean:
	rm -rf $(VENV) .venv-charts jars build
