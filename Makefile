# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-quick bench clean jvm sim-fast

# A JDK (not only a JRE): Spark runs on it, and javac builds the JVM key hash (spark_jobs/jvm).
$(STAMP): pyproject.toml
	@command -v javac >/dev/null || { echo "installing a Java 17 JDK for Spark"; \
	  (apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless) >/dev/null \
	  || echo "warning: no JDK installed; Spark tests are skipped without Java, routing uses Python workers without javac"; }
	@{ command -v ip && command -v iptables; } >/dev/null || { echo "installing iproute2 and iptables for the network-namespace tests"; \
	  (apt-get update -qq && apt-get install -y -qq iproute2 iptables) >/dev/null \
	  || echo "warning: no iptables; tests/test_netns_cluster.py is skipped"; }
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { echo "installing Chromium for the console's browser test"; \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null \
	  || echo "warning: no chromium installed; the console's browser test is skipped"; }
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

# The tests run in pytest-xdist worker processes (how they are shared out: tests/conftest.py). Much
# of the suite waits on timers, sockets and node processes, so more workers than the 2 cores pay:
# 3 for the whole suite (its node processes and JVMs fill the cores; 4 was slower), 4 for the
# in-process tests of test-quick. 0 runs the tests in one process, one after another.
TEST_WORKERS ?= 3
QUICK_WORKERS ?= 4

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# The inner loop: all but the tests marked slow (real processes, Spark clusters, the documented
# commands) and netns (hosts in network namespaces). `make test`, which CI runs, runs them all.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -n $(QUICK_WORKERS) -m "not slow and not netns"

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_placement.py

# Optional: the membership core and the ownership rules compiled with mypyc, for faster simulations
# (docs/simulations.md, "Speed"). The sources stay the truth: they are copied to $(FAST) and
# compiled there, and only runs with PYTHONPATH=$(FAST) use the build. mypy comes from its own venv,
# not the project's. ownership/lease.py is compiled too since its _Tracked (a dict subclass) sets its
# counter in __init__ (a class-level default failed compiled); measured before: ~4 % at N=256.
FAST := build/mypyc
MYPYC_VENV := build/mypyc-venv
MYPYC_MODULES := core view dissemination probing conflicts updates joining status sampling wire queue suspicion awareness messages config
MYPYC_OWNERSHIP := core lease views states survival protocol messages wire config
PYTHON ?= $(BIN)/python

sim-fast:
	test -x $(MYPYC_VENV)/bin/mypyc || { $(PYTHON) -m venv $(MYPYC_VENV) && \
	  $(MYPYC_VENV)/bin/python -m pip install --quiet "mypy>=1.10" setuptools; }
	rm -rf $(FAST) && mkdir -p $(FAST) && cp -r membership ownership $(FAST)/ && rm -rf $(FAST)/*/__pycache__
	cd $(FAST) && $(abspath $(MYPYC_VENV))/bin/mypyc --ignore-missing-imports \
	  $(MYPYC_MODULES:%=membership/%.py) $(MYPYC_OWNERSHIP:%=ownership/%.py) > mypyc.log
	@echo "built $(FAST); use it with PYTHONPATH=$(FAST)"

clean:
	rm -rf $(VENV) build *.egg-info
