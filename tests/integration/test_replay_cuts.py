"""``replay --swarm --to N`` is exact: a cut between a step and its outputs is not a divergence.

The outputs a cut leaves out are reported as unverified past the cut; the code that wrote a
log replays it cleanly at every cut; changed code still diverges where it changes, at every
cut that includes that step's first record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from swarmlog.examples import case_study
from swarmlog.examples.case_study import buggy, fixed, live_run
from swarmlog.kafka.reader import watermarks
from swarmlog.log.protocol import MESSAGE, step_of
from swarmlog.replaying import replay_swarm

from .conftest import read_log, subprocess_env


def _late(task: str) -> dict:
    time.sleep(2.0)  # past the reviewer's 0.3 s timeout beyond doubt: the buggy reviewer deadlocks
    return {"summary": task.upper(), "took_ms": 2000}


@pytest.fixture(scope="module")
def deadlock(base_settings):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(case_study, "do_work", _late)
        run = live_run(base_settings, buggy, seed=7)
    assert run.deadlocked
    return run


def test_the_case_study_replays_with_its_own_code_at_every_cut_without_a_divergence(deadlock, registry):
    settings = deadlock.settings
    _, end = watermarks(settings, settings.topic)
    unverified_somewhere = 0
    for cut in range(0, end + 1):
        result = replay_swarm(settings=settings, swarm=buggy, registry=registry, to=cut)
        assert result.divergences == [], (cut, [d.to_json() for d in result.divergences])
        assert result.end_offset <= cut
        # A step before the cut whose outputs lie past it: unverified from that step, never later.
        for agent, offset in result.unverified_from.items():
            assert offset < cut, (cut, agent, offset)
        unverified_somewhere += bool(result.unverified_from)
    assert unverified_somewhere > 0  # some cuts did fall between a step and its outputs
    full = replay_swarm(settings=settings, swarm=buggy, registry=registry, to=end)
    assert full.agents == deadlock.hashes and full.unverified_from == {}


def test_the_fixed_code_diverges_at_the_late_message_at_every_cut_that_holds_it(deadlock, registry):
    settings = deadlock.settings
    _, end = watermarks(settings, settings.topic)
    late = next(r.offset for r in read_log(settings, registry)
                if r.event_type == MESSAGE and r.record["to"] == "reviewer"
                and r.record["payload"]["kind"] == "task_complete")
    # Every step leaves a record (its outputs, and at least its state digest): until the first record
    # of the reviewer's late step is inside the cut, the log cannot say what that step wrote, so the
    # step is unverified there rather than a divergence.
    recorded = next(r.offset for r in read_log(settings, registry)
                    if r.offset > late and r.record["agent_id"] == "reviewer"
                    and step_of(r.record["event_id"].encode()) == str(late).encode())
    assert late < recorded
    for cut in range(0, end + 1):
        result = replay_swarm(settings=settings, swarm=fixed, registry=registry, to=cut)
        first = result.first_divergence
        if cut <= late:
            assert first is None, (cut, first)
        elif cut <= recorded:
            assert first is None and result.unverified_from.get("reviewer") == late, (cut, first)
        else:
            assert first is not None and (first.offset, first.agent) == (late, "reviewer"), (cut, first)
            assert first.recorded is None and first.replayed["payload"]["kind"] == "approved"


def test_the_command_line_reports_what_a_cut_leaves_unverified(deadlock, registry):
    settings = deadlock.settings
    # The cut right after the worker's task: its effect and task_complete lie past it.
    task = next(r.offset for r in read_log(settings, registry)
                if r.event_type == MESSAGE and r.record["to"] == "worker")
    proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm",
                           "swarmlog.examples.case_study:buggy", "--to", str(task + 1), "--json"],
                          env=subprocess_env(settings), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["diverged"] is False and doc["unverified_from"]["worker"] == task
    assert all(offset <= task for offset in doc["unverified_from"].values())
    text = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm",
                           "swarmlog.examples.case_study:buggy", "--to", str(task + 1)],
                          env=subprocess_env(settings), capture_output=True, text=True, timeout=120)
    assert text.returncode == 0
    assert f"worker: unverified from offset {task}" in text.stdout
