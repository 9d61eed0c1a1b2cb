# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "installing Java for Spark"; \
	  (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless) >/dev/null \
	  || echo "warning: Java not installed; Spark tests will be skipped with a reason"; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/placement cluster --nodes 5

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_placement.py

clean:
	rm -rf $(VENV) build *.egg-info
