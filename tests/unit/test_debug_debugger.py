"""A real debugger at one step of a replay, beside the determinism guard (in memory, pdb scripted).

``sys.breakpointhook`` is pointed at a pdb reading its commands from a string, so these run
without a terminal; ``tests/integration/test_debug_case_study.py`` drives the real CLI's pdb
over a pseudo-terminal.
"""

from __future__ import annotations

import io
import pdb
import sys
import time
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.debug import LogView, Session
from swarmlog.errors import NondeterminismError
from swarmlog.examples import case_study
from swarmlog.guard import guarded
from swarmlog.log.memory import InMemoryLog
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings


def _late(task: str) -> dict[str, Any]:
    time.sleep(0.8)  # past the reviewer's 0.3 s timeout: the deadlock, every time
    return {"summary": task.upper(), "took_ms": 800}


@pytest.fixture(scope="module")
def deadlocked() -> tuple[InMemoryLog, Settings]:
    backend = InMemoryLog()
    backend.create_topic("case")
    settings = Settings(topic="case", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    real, case_study.do_work = case_study.do_work, _late
    try:
        start_run(settings=settings, swarm=case_study.buggy, run_id="case", seed=1, backend=backend)
        results = run_agents(settings=settings, swarm=case_study.buggy, until_quiet=0.5, backend=backend)
    finally:
        case_study.do_work = real
    assert case_study.deadlocked({r.agent: r.state for r in results})
    return backend, settings


class ScriptedPdb:
    """``sys.breakpointhook`` as pdb with its commands scripted; what it printed in ``out``."""

    def __init__(self, commands: str) -> None:
        self.commands = commands
        self.out = io.StringIO()

    def __call__(self) -> None:
        pdb.Pdb(stdin=io.StringIO(self.commands), stdout=self.out, readrc=False).set_trace(sys._getframe().f_back)


def _late_task_complete(backend: InMemoryLog, settings: Settings) -> int:
    view = LogView(settings=settings, backend=backend)
    return next(e.offset for e in view.events(types=["agent.message:task_complete"]))


def test_debug_at_an_offset_stops_in_its_handler_with_the_state_rebuilt_from_the_log(deadlocked, monkeypatch):
    backend, settings = deadlocked
    at = _late_task_complete(backend, settings)
    hook = ScriptedPdb('p self.state["phase"]\np event.kind\nn\np open(__file__).readline()[:3]\nc\n')
    monkeypatch.setattr(sys, "breakpointhook", hook)
    told = []
    session = Session(settings=settings, swarm=case_study.buggy, backend=backend)
    result = session.debug(at=at, on_stop=told.append)
    out = hook.out.getvalue()
    assert "case_study.py" in out and "task_complete()" in out.splitlines()[0]
    assert "'timed_out'" in out and "'task_complete'" in out
    assert "'\"\"\"'" in out  # the debugger's own file read at its prompt is not refused
    assert [(s.agent, s.offset, s.handler) for s in told] == [("reviewer", at, "Reviewer.task_complete")]
    assert result.states["reviewer"] == {"phase": "timed_out", "ignored": 1}  # the replay carried on
    assert result.divergences == []


def test_quitting_the_debugger_carries_on_the_replay_as_if_nobody_had_stopped(deadlocked, monkeypatch):
    backend, settings = deadlocked
    at = _late_task_complete(backend, settings)
    session = Session(settings=settings, swarm=case_study.buggy, backend=backend)
    undebugged = session.replay()
    monkeypatch.setattr(sys, "breakpointhook", ScriptedPdb("n\nq\n"))
    result = session.debug(at=at)
    assert [s.quit for s in result.stops] == [True]
    assert result.states == undebugged.states and result.divergences == []
    assert sys.gettrace() is None


def test_debug_by_step_number_and_at_the_first_divergence(deadlocked, monkeypatch):
    backend, settings = deadlocked
    at = _late_task_complete(backend, settings)
    monkeypatch.setattr(sys, "breakpointhook", ScriptedPdb("c\n"))
    by_step = Session(settings=settings, swarm=case_study.buggy, backend=backend).debug(agent="reviewer", step=3)
    assert [(s.offset, s.handler) for s in by_step.stops] == [(at, "Reviewer.task_complete")]
    # The fixed reviewer first departs from the log where it approves the late message.
    fixed = Session(settings=settings, swarm=case_study.fixed, backend=backend).debug(divergence=True)
    assert [(s.agent, s.offset, s.handler) for s in fixed.stops] == [("reviewer", at, "FixedReviewer.task_complete")]
    assert fixed.states["reviewer"]["phase"] == "approved"


class _Starter(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("c", "tick", "1")


class _Clocked(Agent):
    @on_message("tick")
    def tick(self, ctx, event):
        self.state["ticks"] = self.state.get("ticks", 0) + 1


class _ReadsTheClock(_Clocked):
    @on_message("tick")
    def tick(self, ctx, event):
        self.state["ticks"] = self.state.get("ticks", 0) + 1
        self.state["at"] = time.time()  # nondeterministic: the guard must still catch it under the debugger


def test_under_the_debugger_the_handler_is_still_guarded_and_the_debugger_is_not(monkeypatch):
    backend = InMemoryLog()
    backend.create_topic("clock")
    settings = Settings(topic="clock", bootstrap_servers="127.0.0.1:1")
    good = Swarm(name="clock", agents=lambda: [_Starter("s"), _Clocked("c")], code_version="1")
    start_run(settings=settings, swarm=good, run_id="r", seed=1, backend=backend)
    run_agents(settings=settings, swarm=good, until_quiet=0.2, backend=backend)
    bad = Swarm(name="clock", agents=lambda: [_Starter("s"), _ReadsTheClock("c")], code_version="2")
    hook = ScriptedPdb("import time\np type(time.time()).__name__\nc\n")
    monkeypatch.setattr(sys, "breakpointhook", hook)
    at = next(e.offset for e in LogView(settings=settings, backend=backend).events(types=["agent.message:tick"]))
    result = Session(settings=settings, swarm=bad, backend=backend).debug(at=at)
    assert "float" in hook.out.getvalue()  # time.time() typed at the prompt: the debugger's, allowed
    first = result.first_divergence
    assert first is not None and first.offset == at and "time.time() is forbidden" in first.detail


def test_a_debugger_entered_from_inside_a_handler_sets_itself_up_unrefused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".pdbrc").write_text("p 'rc read'\n")  # pdb opens it: a file read inside the guard
    out = io.StringIO()
    with pytest.raises(NondeterminismError):
        with guarded(agent="a", offset=1):
            pdb.Pdb(stdin=io.StringIO("p 6 * 7\nc\n"), stdout=out).set_trace()
            x = 1  # the debugger stops here, and its prompt runs unguarded
            time.time()  # the handler's own clock read is still refused
    assert "'rc read'" in out.getvalue() and "42" in out.getvalue() and x == 1
    assert sys.gettrace() is None
