"""The string-hash seed is pinned for a run: recorded in run.started, required of every process
that runs its handlers, restored by the command line re-executing itself.

With real processes on the real broker: tests/integration/test_hash_seed.py.
"""

from __future__ import annotations

import sys

import pytest

from swarmlog import cli
from swarmlog.errors import HashSeedMismatch
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import RUN_STARTED
from swarmlog.runtime import find_run, interpreter, run_agents, start_run

from .. import swarms
from ..conftest import REPO


def test_the_seed_is_what_the_interpreter_started_with():
    # This process's own flags decide which values are consistent with it.
    randomised = sys.flags.hash_randomization == 1
    assert interpreter.current({}).seed is None
    assert interpreter.current({"PYTHONHASHSEED": "random"}).seed is None
    assert interpreter.current({"PYTHONHASHSEED": "x"}).seed is None
    assert interpreter.current({"PYTHONHASHSEED": str(2**32)}).seed is None
    # 0 turns randomisation off: an environment saying 0 in a randomised interpreter was
    # changed after start-up, and is not the interpreter's seed (and vice versa).
    assert interpreter.current({"PYTHONHASHSEED": "0"}).seed == (None if randomised else 0)
    assert interpreter.current({"PYTHONHASHSEED": "17"}).seed == (17 if randomised else None)
    assert interpreter.current({}).algorithm == f"{sys.hash_info.algorithm}/{sys.hash_info.width}"


def test_a_new_run_takes_this_processs_seed_else_the_default():
    assert interpreter.seed_for_new_run({}) == interpreter.DEFAULT_HASH_SEED == 0
    if sys.flags.hash_randomization:
        assert interpreter.seed_for_new_run({"PYTHONHASHSEED": "17"}) == 17


def test_a_pinned_run_requires_the_same_seed_and_algorithm(monkeypatch):
    here = interpreter.current()
    interpreter.require(run_id="r", seed=None, algorithm=None)  # unpinned: anything goes
    pinned = interpreter.HashPin(seed=5, algorithm="siphash13/64")
    monkeypatch.setattr(interpreter, "current", lambda environ=None: pinned)
    interpreter.require(run_id="r", seed=5, algorithm="siphash13/64")
    with pytest.raises(HashSeedMismatch) as caught:
        interpreter.require(run_id="r", seed=6, algorithm="siphash13/64")
    assert (caught.value.recorded_seed, caught.value.current_seed) == (6, 5)
    assert "PYTHONHASHSEED=6" in str(caught.value)
    with pytest.raises(HashSeedMismatch, match="whose string hash is fnv/32"):
        interpreter.require(run_id="r", seed=5, algorithm="fnv/32")
    assert here.algorithm


def test_reexec_repeats_the_command_line_under_the_runs_seed_once(monkeypatch):
    calls = []
    monkeypatch.setattr(interpreter.os, "execve", lambda exe, argv, env: calls.append((exe, argv, env)))
    monkeypatch.setattr(interpreter.sys, "orig_argv", ["python3", "/venv/bin/swarmlog", "-v", "run", "app:swarm"])
    monkeypatch.delenv("SWARMLOG_REEXEC_HASH_SEED", raising=False)
    interpreter.reexec_with(42, run_id="r")
    exe, argv, env = calls[0]
    assert exe == sys.executable and argv == [sys.executable, "/venv/bin/swarmlog", "-v", "run", "app:swarm"]
    assert env["PYTHONHASHSEED"] == "42"
    # The re-executed process is still not pinned (the interpreter ignored the variable): no loop.
    monkeypatch.setenv("SWARMLOG_REEXEC_HASH_SEED", "42")
    with pytest.raises(HashSeedMismatch):
        interpreter.reexec_with(42, run_id="r")
    assert len(calls) == 1


def test_the_runtime_refuses_a_pinned_runs_handlers_under_another_seed(run_settings, backend):
    other = 7 if interpreter.current().seed != 7 else 8
    with EventLog(settings=run_settings, backend=backend, run_id="pinned") as log:
        log.append(RUN_STARTED, {"swarm": "sets", "seed": 1, "code_version": "sets-1", "agents": ["scatter", "gather"],
                                 "hash_seed": other, "hash_algorithm": interpreter.hash_algorithm()},
                   agent="swarmlog")
    with pytest.raises(HashSeedMismatch) as caught:
        run_agents(settings=run_settings, swarm=swarms.sets, backend=backend, until_quiet=0.2)
    assert caught.value.recorded_seed == other
    info = find_run(run_settings, run_settings.topic, log.registry, backend=backend)
    assert info is not None and info.hash_seed == other


def test_a_run_started_without_a_seed_is_recorded_unpinned_and_runs(run_settings, backend, monkeypatch, caplog):
    monkeypatch.setattr(interpreter, "current", lambda environ=None: interpreter.HashPin(None, "siphash13/64"))
    info = start_run(settings=run_settings, swarm=swarms.sets, run_id="free", seed=1, backend=backend)
    assert info.hash_seed is None and "not pinned" in caplog.text
    results = run_agents(settings=run_settings, swarm=swarms.sets, backend=backend, until_quiet=0.3)
    assert {r.agent: r.steps for r in results}["gather"] == len(swarms.Scatter.ITEMS)


def test_the_image_and_the_chart_set_the_seed():
    dockerfile = (REPO / "helm" / "Dockerfile").read_text()
    assert "PYTHONHASHSEED=0" in dockerfile
    values = (REPO / "helm" / "swarmlog" / "values.yaml").read_text()
    assert "hashSeed: 0" in values
    helpers = (REPO / "helm" / "swarmlog" / "templates" / "_helpers.tpl").read_text()
    assert "PYTHONHASHSEED: {{" in helpers


def test_only_the_command_line_process_may_reexecute(monkeypatch):
    from swarmlog_connectors import command

    seen = []
    monkeypatch.setattr(command, "cmd_demo", lambda args: seen.append(args.may_reexec) or 0)
    assert cli.main(["demo"]) == 0
    assert seen == [False]


def test_a_snapshot_of_a_pinned_run_is_not_resumed_under_another_seed(registry):
    from swarmlog.runtime.checkpoint import capture, restore
    from swarmlog.runtime.engine import AgentCore
    from swarmlog.runtime.history import NoHistory
    from swarmlog.schema.codec import Decoder

    def core() -> AgentCore:
        return AgentCore(agent=swarms.Gather("gather"), decoder=Decoder(registry), history=NoHistory(), live_sink=None)

    other = 7 if interpreter.current().seed != 7 else 8
    folded = core()
    folded.ctx.set_run(run_id="pinned", seed=1)
    folded.run_pin = (other, interpreter.hash_algorithm())
    doc = capture(folded)
    with pytest.raises(HashSeedMismatch):
        restore(core(), doc)
    unpinned = dict(doc, hash=None)
    fresh = core()
    restore(fresh, unpinned)
    assert fresh.ctx.run_id == "pinned"
