# swarmlog — two commands on a fresh machine: `make demo` and `make test`.
# Everything the project needs is installed here, never by hand: the Python
# environment (.venv), Kafka's jars (Maven, on first `swarmlog dev up`), PostgreSQL
# (Debian's package when the machine has none), and helm (built from the Go
# module proxy) for the chart tests.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench tools up down status schema-check clean help

help:
	@echo "make demo   run a swarm on a local Kafka + Postgres, mirror it, replay it"
	@echo "make test   run the test suite against the real services"
	@echo "make bench  benchmarks beside their baselines -> bench/results.{json,md}"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $@

tools: .tools/bin/helm

.tools/bin/helm: helm/install-helm.sh
	bash helm/install-helm.sh

up: $(STAMP)
	$(BIN)/swarmlog dev up

down: $(STAMP)
	$(BIN)/swarmlog dev down

status: $(STAMP)
	$(BIN)/swarmlog dev status

demo: up
	$(BIN)/swarmlog demo

schema-check: $(STAMP)
	$(BIN)/swarmlog schema check --property

test: $(STAMP) tools up schema-check
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: up
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .tools .pytest_cache
