# Gregor: every target does the set-up it needs on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
CORE_STAMP := $(VENV)/.installed-core
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
# Debian packages the tests use (kcat; chromium to look at the lag report); Java 17+ for Spark is
# added by java-deps, ZooKeeper for the cluster tests and make cluster by zookeeper-deps. A single
# broker (make run) needs none of them.
APT_PACKAGES := kcat chromium
ZOOKEEPER_JAR := /usr/share/java/zookeeper.jar

.PHONY: setup system-deps java-deps zookeeper-deps run cluster lag-report test lint bench clean

# Everything the tests need: the package with its dev and Spark extras, Debian packages, Java,
# ZooKeeper.
setup: $(STAMP) system-deps

# The broker alone: the package and its core dependencies (make run).
$(CORE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(CORE_STAMP)

$(STAMP): $(CORE_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# Installed with apt-get when missing; needs root or sudo.
system-deps: java-deps zookeeper-deps
	@missing=""; for p in $(APT_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# Java 17+ for Spark (the connector's tests and gregor lag-report).
java-deps:
	@missing=""; \
	jv=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$jv" ] || [ "$$jv" -lt 17 ]; then missing="$$missing openjdk-17-jre-headless"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The Debian package zookeeper (a server jar, no system service), checked by its jar: it has no
# command of its own on PATH. After java-deps, so the JRE it depends on is already there.
zookeeper-deps: java-deps
	@if [ ! -f $(ZOOKEEPER_JAR) ]; then \
	  echo "installing Debian packages: zookeeper"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq zookeeper >/dev/null; \
	fi

run: $(CORE_STAMP)
	$(BIN)/gregor serve $(ARGS)

# ZooKeeper and 3 brokers on 127.0.0.1 until Ctrl-C, data and logs in ./cluster-data
# (docs/operations.md, "Running a cluster"): make cluster ARGS="--brokers 5 --racks a,b,c"
cluster: $(CORE_STAMP) zookeeper-deps
	$(BIN)/python -m gregor.devcluster $(ARGS)

# The Spark lag report over a running broker: make lag-report ARGS="--bootstrap-server 127.0.0.1:9092"
lag-report: $(STAMP) java-deps
	$(BIN)/gregor lag-report $(ARGS)

# Three workers: most cluster tests wait on timeouts, not on the CPU. A test file runs on one
# worker (its module fixtures are started once) and the tests that start Spark all run on one
# (tests/conftest.py). PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 3
test: setup
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,spark,bench]'
	touch $(BENCH_STAMP)

bench: setup $(BENCH_STAMP)
	$(BIN)/python bench/produce_fetch.py $(BENCH_ARGS)
	$(BIN)/python bench/coordinator.py

clean:
	rm -rf $(VENV) gregor-data cluster-data .pytest_cache .mypy_cache .ruff_cache
