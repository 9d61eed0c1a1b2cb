# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean jvm

# A JDK (not only a JRE): Spark runs on it, and javac builds the JVM key hash (spark_jobs/jvm).
$(STAMP): pyproject.toml
	@command -v javac >/dev/null || { echo "installing a Java 17 JDK for Spark"; \
	  (apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless) >/dev/null \
	  || echo "warning: no JDK installed; Spark tests are skipped without Java, routing uses Python workers without javac"; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@$(MAKE) --no-print-directory jvm
	touch $(STAMP)

# The JVM key-hash jar (cached in ~/.cache/placement-service; jobs also build it on first use).
jvm:
	@$(BIN)/python -m spark_jobs.jvm || echo "warning: JVM key hash not built; spark-route will use Python workers"

run: $(STAMP)
	$(BIN)/placement cluster --nodes 5

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_placement.py

clean:
	rm -rf $(VENV) build *.egg-info
