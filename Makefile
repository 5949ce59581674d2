# swarmlog — two commands on a fresh machine: `make demo` and `make test`.
# Everything the project needs is installed here, never by hand: the Python
# environment (.venv), Kafka's jars (Maven, on first `swarmlog dev up`), PostgreSQL
# (Debian's package when the machine has none), and helm (built from the Go
# module proxy) for the chart tests, and headless Chromium (Debian's chromium and
# chromium-driver) for the timeline page's tests.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test unit integration faults faults-slice lint docs docs-serve bench bench-peers tools browser up down status schema-check clean help

help:
	@echo "make demo   run a swarm on a local Kafka + Postgres, mirror it, replay it"
	@echo "make test   lint and type checks, unit tests (no services), then the integration tests"
	@echo "            against the real Kafka and Postgres (started here if they are not running)"
	@echo "make faults the fault suite: real signals against real processes (a throwaway dev cluster of"
	@echo "            its own); prints the table kept in docs/faults.md -> tests/faults/results.md"
	@echo "make docs   the documentation site (mkdocs build --strict) -> build/site; make docs-serve to read it"
	@echo "make bench  benchmarks beside their baselines -> bench/results.{json,md}"
	@echo "make bench-peers  LangGraph and Kafka Connect beside swarmlog -> bench/results-peers.{json,md}"

# The editable install also compiles the C modules in place (the guard's profile hook, the decoder's
# routing, the Avro readers; optional: without a compiler swarmlog installs with their Python paths),
# so a change to their source reinstalls.
$(STAMP): pyproject.toml platform/swarmlog/guard/_native.c platform/swarmlog/schema/_route.c \
		platform/swarmlog/schema/_avro_native.c platform/swarmlog/schema/_avro_binary.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,lint,metrics,tui,otel,langgraph,ui,docs]'
	touch $@

# The peers (LangGraph, its Postgres checkpointer) are heavy and only the peers benchmark
# needs them; Kafka Connect and the JDBC sink connector come from Maven on its first run.
PEERS_STAMP := $(VENV)/.installed-peers

$(PEERS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench,lint,tui,peers]'
	touch $@

tools: .tools/bin/helm browser

# The timeline's HTML page is tested in a real browser; the script does nothing when both are there.
browser:
	bash tests/install-chromium.sh

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

# Order matters: the lint gate and the unit tests run before any service is started, which
# is what shows the unit tests need none (tests/unit/conftest.py also refuses every attempt).
test: $(STAMP) lint unit docs tools up schema-check integration faults-slice

lint: $(STAMP)
	$(BIN)/ruff check platform connectors tests bench examples docs
	$(BIN)/mypy

# The site, strictly: a broken link, a missing page or an anchor that is not there fails the build. The
# pages docs/_generate.py writes are held to the code by tests/unit/test_docs_reference.py, and every
# Python block of the pages runs in tests/{unit,integration}/test_docs_code.py.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

# Against the cluster `up` just started, unless SWARMLOG_BOOTSTRAP_SERVERS already points at one.
# (pytest run by hand with no SWARMLOG_* variables and a Docker engine reachable uses containers
# instead: tests/integration/conftest.py.)
integration: $(STAMP) tools up
	if [ -z "$$SWARMLOG_BOOTSTRAP_SERVERS" ]; then eval "$$($(BIN)/swarmlog dev env)"; fi; \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration

# The fault suite (tests/faults): each case from a clean topic and database, faults injected with
# real signals (SIGKILL, SIGSTOP) against real processes of a dev cluster the suite starts for
# itself and purges (it never kills yours), checked by reading the whole topic and mirror. Whole:
# about 15-20 minutes; `make test` runs the same cases smaller (faults-slice, a few minutes).
faults: $(STAMP)
	SWARMLOG_FAULTS=full $(BIN)/python -m pytest -q -p no:cacheprovider tests/faults

faults-slice: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/faults

bench: up
	$(BIN)/python -m bench.run

bench-peers: up $(PEERS_STAMP)
	$(BIN)/python -m bench.peers

clean:
	rm -rf $(VENV) .tools .pytest_cache
