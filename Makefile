# make setup   virtualenv with the pinned requirements, and the JVM jars
# make test    the whole test suite (real Kafka, Postgres and Spark)
# make run     the local stack (Kafka + Postgres) and the workers
# make bench   the benchmarks, reported as numbers
# Every target does its own setup first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# -C: fail on a checksum mismatch. settings.xml: Maven Central only.
MVN := mvn -q -B -C -s jvm/settings.xml

.PHONY: setup jars test run bench clean

setup: $(VENV)/.installed jars

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@command -v java >/dev/null || { echo "error: Java 17+ is required"; exit 1; }
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "error: Python 3.11+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

jars: jars/spark-connector/.fetched jars/kafka-broker/.fetched

jars/%/.fetched: jvm/%/pom.xml jvm/settings.xml
	rm -rf jars/$*
	$(MVN) -f jvm/$*/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/jars/$*
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

run: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m shared.local_stack -- honcho -f Procfile.local start

bench: setup
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) jars
