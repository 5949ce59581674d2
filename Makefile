# swarmlog — two commands on a fresh machine: `make demo` and `make test`.
# Everything the project needs is installed here, never by hand: the Python
# environment (.venv), Kafka's jars (Maven, on first `swarmlog dev up`), PostgreSQL
# (Debian's package when the machine has none), and helm (built from the Go
# module proxy) for the chart tests, and headless Chromium (Debian's chromium and
# chromium-driver) for the timeline page's tests.

# The CPythons swarmlog supports (pyproject's classifiers): .venv is the oldest's (PYTHON overrides the
# interpreter), and each other one gets a venv of its own (below).
OLDEST_PYTHON := 3.11
OTHER_PYTHONS := 3.12 3.13
NEWEST_PYTHON := $(lastword $(OTHER_PYTHONS))
PYTHON ?=
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test unit unit-pythons integration faults faults-slice lint docs docs-serve bench bench-peers tools browser up down status schema-check clean help

help:
	@echo "make demo   run a swarm on a local Kafka + Postgres, mirror it, replay it"
	@echo "make test   lint and type checks, unit tests (no services) on CPython 3.11, 3.12 and 3.13, then the"
	@echo "            integration tests against the real Kafka and Postgres (started here if they are not"
	@echo "            running) on 3.11 and a slice of them on 3.13"
	@echo "make faults the fault suite: real signals against real processes (a throwaway dev cluster of"
	@echo "            its own); prints the table kept in docs/faults.md -> tests/faults/results.md"
	@echo "make docs   the documentation site (mkdocs build --strict) -> build/site; make docs-serve to read it"
	@echo "make bench  benchmarks beside their baselines -> bench/results.{json,md}"
	@echo "make bench-peers  LangGraph and Kafka Connect beside swarmlog -> bench/results-peers.{json,md}"

# The editable install also compiles the C modules in place (the guard's profile hook, the decoder's
# routing, the Avro readers; optional: without a compiler swarmlog installs with their Python paths),
# so a change to their source reinstalls.
C_SOURCES := platform/swarmlog/guard/_native.c platform/swarmlog/schema/_route.c \
	platform/swarmlog/schema/_avro_native.c platform/swarmlog/schema/_avro_binary.h

# What the tests and benchmarks need, in every venv; .venv (CPython 3.11) also has the linters.
EXTRAS := test,bench,metrics,tui,otel,langgraph,ui,docs

$(STAMP): pyproject.toml $(C_SOURCES)
	interpreter="$(PYTHON)"; interpreter="$${interpreter:-$$(bash tests/find-python.sh $(OLDEST_PYTHON))}" && \
		"$$interpreter" -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS),lint]'
	touch $@

# The other CPythons: `make test` runs the unit suite on each and an integration slice on the newest,
# each in a venv of its own made from the interpreter tests/find-python.sh finds on the machine (pyenv's,
# or pythonX.Y on PATH). A missing one fails with a message saying how to install it. The editable
# install compiles the C modules for each version beside the others (their file names carry the ABI:
# _native.cpython-312-x86_64-linux-gnu.so).

.venv-%/.installed: pyproject.toml $(C_SOURCES)
	interpreter="$$(bash tests/find-python.sh $*)" && "$$interpreter" -m venv .venv-$*
	.venv-$*/bin/pip install --quiet --upgrade pip
	.venv-$*/bin/pip install --quiet -e '.[$(EXTRAS)]'
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
test: $(STAMP) lint unit unit-pythons docs tools up schema-check integration integration-$(NEWEST_PYTHON) faults-slice

# mypy checks the package as the oldest and the newest CPython it supports (code for one version only,
# `if sys.version_info >= (3, 12)`, is checked under the other).
lint: $(STAMP)
	$(BIN)/ruff check platform connectors tests bench examples docs
	$(BIN)/mypy
	$(BIN)/mypy --python-version $(NEWEST_PYTHON)

# The site, strictly: a broken link, a missing page or an anchor that is not there fails the build. The
# pages docs/_generate.py writes are held to the code by tests/unit/test_docs_reference.py, and every
# Python block of the pages runs in tests/{unit,integration}/test_docs_code.py.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# On every core (pytest-xdist), with one worker more than there are cores: the unit suite needs no service,
# but some of its tests wait on the clock by design (a timeout is tested by letting it pass; two async calls
# by overlapping them for real), and while one worker waits the spare one keeps the core busy.
# Its bytecode is cached (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE=1 is set:
# otherwise every worker compiles, through pytest's assertion rewriting, every test module and every
# module of a package with a pytest plugin (langsmith's hundreds) again on every run.
CACHED_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
# Work stealing: a worker that ran out of tests takes the rest of another's queue, so a share that happens to
# hold the long tests (a contract suite's runs, the docs' pages) does not leave a core idle at the end.
UNIT_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
UNIT_PYTEST := -m pytest -q -p no:cacheprovider -n $(UNIT_WORKERS) --dist worksteal tests/unit

unit: $(STAMP)
	$(CACHED_BYTECODE) $(BIN)/python $(UNIT_PYTEST)

# The unit suite on each other CPython (`make unit-3.12` runs one), with Hypothesis's dev profile even in
# CI: what differs between the versions is the interpreter under the guard and the C modules' builds,
# which every example exercises alike; every example of every property runs once, on 3.11 (`unit`).
unit-pythons: $(addprefix unit-,$(OTHER_PYTHONS))

unit-%: .venv-%/.installed
	$(CACHED_BYTECODE) HYPOTHESIS_PROFILE=dev .venv-$*/bin/python $(UNIT_PYTEST)

# Against the cluster `up` just started, unless SWARMLOG_BOOTSTRAP_SERVERS already points at one.
# (pytest run by hand with no SWARMLOG_* variables and a Docker engine reachable uses containers
# instead: tests/integration/conftest.py.)
integration: $(STAMP) tools up
	if [ -z "$$SWARMLOG_BOOTSTRAP_SERVERS" ]; then eval "$$($(BIN)/swarmlog dev env)"; fi; \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration

# A slice of the integration suite on another CPython (`make test` runs it on the newest; the whole suite
# runs on .venv's 3.11, above): the guard refusing on the real broker under each of its hooks, the case
# study live on Kafka and replayed, the string-hash seed across processes, replay, the Postgres mirror
# (SIGKILL included), and the wheel built and installed for that Python. A few minutes.
INTEGRATION_SLICE := tests/integration/test_guard_live.py tests/integration/test_case_study.py \
	tests/integration/test_hash_seed.py tests/integration/test_replay.py tests/integration/test_sink.py \
	tests/integration/test_wheel.py

integration-%: .venv-%/.installed tools up
	if [ -z "$$SWARMLOG_BOOTSTRAP_SERVERS" ]; then eval "$$($(BIN)/swarmlog dev env)"; fi; \
	.venv-$*/bin/python -m pytest -q -p no:cacheprovider $(INTEGRATION_SLICE)

# The fault suite (tests/faults): each case from a clean topic and database, faults injected with
# real signals (SIGKILL, SIGSTOP) against real processes of a dev cluster the suite starts for
# itself and purges (it never kills yours), checked by reading the whole topic and mirror. Whole:
# about 15-20 minutes; `make test` runs the same cases smaller (faults-slice, a few minutes).
faults: $(STAMP)
	SWARMLOG_FAULTS=full $(BIN)/python -m pytest -q -p no:cacheprovider tests/faults

faults-slice: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/faults

# The guard's benchmark measures every CPython `make test` runs on, in a process of each (bench/guard.py).
bench: up $(addprefix .venv-,$(addsuffix /.installed,$(OTHER_PYTHONS)))
	BENCH_PYTHONS="$(OTHER_PYTHONS)" $(BIN)/python -m bench.run

bench-peers: up $(PEERS_STAMP)
	$(BIN)/python -m bench.peers

clean:
	rm -rf $(VENV) .venv-* .tools .pytest_cache
