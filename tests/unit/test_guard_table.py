"""The guard's table (swarmlog.guard.COVERAGE), row by row, in live handlers.

Every refused row is refused inside a handler of a real runtime run on the in-memory log
(``run_agents`` on ``InMemoryLog``: the same worker, context and guard as on Kafka, no broker),
with a ForbiddenCall naming the row, the agent, the offset and the ``ctx`` method to use; every
allowed row runs there; both under each of the guard's profile hooks (the C one and the Python
one). Each refused case also works outside a handler, so a case cannot pass by being broken.
And the docs' summary of the guard (docs/agents.md) names only rows of this table, with their verdict.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.guard import COVERAGE, KINDS, ForbiddenCall, Row, is_guarded, resolve
from swarmlog.log.protocol import HANDLER_FAILED
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer

from ..conftest import REPO
from ..contract.runtime import events
from .guard_cases import ALLOWED, OUTSIDE_SKIPPED, REFUSED, Env, prepared


def _present(row: Row) -> bool:
    try:
        return resolve(row.call) is not None
    except LookupError:
        return False


REFUSED_ROWS = [row for row in COVERAGE if row.refused and _present(row)]
ALLOWED_ROWS = [row for row in COVERAGE if not row.refused]


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[tuple[str, int], tuple[str, int], str]]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(128)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    with StubServer() as http:
        yield tcp.getsockname(), udp.getsockname(), http.base_url
    tcp.close()
    udp.close()


@pytest.fixture
def env(tmp_path: Path, listeners: tuple[tuple[str, int], tuple[str, int], str]) -> Iterator[Env]:
    made = Env(tmp_path, *listeners)
    try:
        yield from prepared(made)
    finally:
        made.close()


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory,
               listeners: tuple[tuple[str, int], tuple[str, int], str]) -> Iterator[Env]:
    """One Env for every live refusal: a refused case is stopped before it changes anything."""
    made = Env(tmp_path_factory.mktemp("guard"), *listeners)
    try:
        yield from prepared(made)
    finally:
        made.close()


class _Trap(Agent):
    """Runs one action in its first handler (the run's start), as a handler would."""

    def __init__(self, name: str, action: Callable[[], object] = lambda: None) -> None:
        self._action = action
        super().__init__(name)

    @on("run.started")
    def start(self, ctx, event):
        self._action()


class _Sender(Agent):
    """Sends the agent ``to`` one message per allowed row."""

    @on("run.started")
    def start(self, ctx, event):
        for case in ALLOWED:
            ctx.send("allowed", "case", case)


class _AllowedRows(Agent):
    """Runs each allowed row's case in a step of its own."""

    def __init__(self, name: str, env: Env | None = None) -> None:
        self._env = env
        super().__init__(name)

    def initial_state(self) -> dict[str, Any]:
        return {"ran": []}

    @on_message("case")
    def run_case(self, ctx, event):
        assert is_guarded()
        if self._env is not None:
            self._env.ctx = ctx  # the cases of async steps run a coroutine on the step's loop
        ALLOWED[event.body](self._env)
        self.state["ran"].append(event.body)


def _live(backend, settings, registry, *agents: Agent, quiet: float = 0.3):
    swarm = Swarm(name="guard", agents=lambda: list(agents), code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="guard", seed=1, backend=backend, registry=registry)
    return run_agents(settings=settings, swarm=swarm, backend=backend, registry=registry, until_quiet=quiet)


# --- the table's shape ------------------------------------------------------------------------


def test_every_row_has_one_case_and_every_case_a_row() -> None:
    cases = [row.case for row in COVERAGE]
    assert len(cases) == len(set(cases)), "two rows with one case"
    assert {row.case for row in COVERAGE if row.refused} == set(REFUSED)
    assert {row.case for row in COVERAGE if not row.refused} == set(ALLOWED)
    assert set(OUTSIDE_SKIPPED) <= set(REFUSED)


def test_every_row_names_a_real_function_a_kind_and_a_reason() -> None:
    wrong = []
    for row in COVERAGE:
        if row.kind not in KINDS or not row.why or (row.refused and not row.use):
            wrong.append(f"{row.case}: kind, reason or use missing")
        elif _present(row) and not callable(resolve(row.call)):
            wrong.append(f"{row.case}: {row.call} is not callable")
    assert wrong == []


def test_the_rows_this_platform_must_have_are_present() -> None:
    assert [row.case for row in COVERAGE if not row.optional and not _present(row)] == []


# --- refused rows --------------------------------------------------------------------------------


@pytest.mark.usefixtures("guard_hook")
@pytest.mark.parametrize("row", REFUSED_ROWS, ids=lambda r: r.case)
def test_each_refused_row_is_refused_in_a_live_handler(row: Row, shared_env: Env, backend, run_settings,
                                                       registry) -> None:
    with pytest.raises(ForbiddenCall) as caught:
        _live(backend, run_settings, registry, _Trap("trap", lambda: REFUSED[row.case](shared_env)))
    error = caught.value
    assert (error.case, error.call, error.kind) == (row.case, row.call, row.kind)
    assert (error.agent, error.offset) == ("trap", 0)
    assert f"{row.call}()" in str(error) and row.use in str(error) and row.why in str(error)


@pytest.mark.parametrize("row", [r for r in REFUSED_ROWS if r.case not in OUTSIDE_SKIPPED], ids=lambda r: r.case)
def test_each_refused_case_works_outside_a_handler(row: Row, env: Env) -> None:
    """The case really calls something that works: outside a handler it runs (or the OS itself
    says no, as os.wait3 does with no child to wait for)."""
    try:
        REFUSED[row.case](env)
    except OSError:
        pass


# --- allowed rows -----------------------------------------------------------------------------


@pytest.mark.usefixtures("guard_hook")
def test_every_allowed_row_runs_in_a_live_handler(env: Env, backend, run_settings, registry) -> None:
    _, result = _live(backend, run_settings, registry, _Sender("sender"), _AllowedRows("allowed", env))
    failed = [rec["payload"] for _, t, rec in events(backend, run_settings.topic, registry) if t == HANDLER_FAILED]
    assert failed == []
    assert result.state["ran"] == list(ALLOWED)
    assert "inside a handler: logged" in (env.tmp / "handler.log").read_text()  # the record reached its file


# --- the docs' summary (docs/agents.md) says what the table says -----------------------------------

_SECTION = "## What the guard refuses"


def _readme_summary() -> list[list[str]]:
    text = (REPO / "docs" / "agents.md").read_text()
    assert _SECTION in text
    section = text.split(_SECTION, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| reaches")]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in rows]


def test_the_readme_summary_names_only_rows_of_the_table_with_their_verdict() -> None:
    refused = {row.case: row for row in COVERAGE if row.refused}
    allowed = {row.case: row for row in COVERAGE if not row.refused}
    summary = _readme_summary()
    kinds = {title: key for key, title in KINDS.items()}
    assert sorted(kinds[cells[0]] for cells in summary) == sorted(KINDS), "one row of the docs per kind, in its words"
    for reaches, refused_cell, allowed_cell, use in summary:
        kind = kinds[reaches]
        named_refused = re.findall(r"`([^`]+)`", refused_cell)
        assert named_refused, reaches
        for case in named_refused:
            assert case in refused, f"docs/agents.md says {case!r} is refused: no refused row has that case"
            assert refused[case].kind == kind, f"{case!r} is listed under {reaches!r}"
        for case in re.findall(r"`([^`]+)`", allowed_cell):
            assert case in allowed, f"docs/agents.md says {case!r} is allowed: no allowed row has that case"
        uses = {row.use for row in refused.values() if row.kind == kind}
        for method in re.findall(r"`(ctx\.[^`]+)`", use):
            assert any(method in u for u in uses), f"docs/agents.md's alternative {method!r} for {reaches!r}"
