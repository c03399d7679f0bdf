# Gregor: every target does the set-up it needs on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
APT_PACKAGES := kcat chromium

.PHONY: setup system-deps run test lint bench clean

setup: $(STAMP) system-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# Debian packages the tests use (kcat; chromium to look at the lag report; Java 17+ for Spark). Installed with apt-get when missing;
# needs root or sudo.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	jv=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$jv" ] || [ "$$jv" -lt 17 ]; then missing="$$missing openjdk-17-jre-headless"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

run: setup
	$(BIN)/gregor serve $(ARGS)

test: setup
	$(BIN)/pytest -q $(PYTEST_ARGS)

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
	rm -rf $(VENV) gregor-data .pytest_cache .mypy_cache .ruff_cache
