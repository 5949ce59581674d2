"""Issue 12's must-shows on the real broker, through the commands users run (the CLI as a process).

The seed's case study deadlocks when the reviewer's timeout fires before the worker's
``task_complete``; here the worker is made late beyond doubt, so one live run is the
deadlocked run every test below reads, debugs and forks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pexpect
import pytest

from swarmlog.debug import LogView
from swarmlog.examples import case_study
from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import TIMER_FIRED
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .conftest import REPO, new_topic_name, read_log, subprocess_env

BUGGY = "swarmlog.examples.case_study:buggy"
FIXED = "swarmlog.examples.case_study:fixed"
CLI = [sys.executable, "-m", "swarmlog.cli"]


@pytest.fixture(scope="module")
def run(base_settings: Settings) -> Settings:
    """One deadlocked live run of the buggy swarm on a topic of its own."""
    topic = new_topic_name("case12")
    create_topic(base_settings, topic)
    settings = base_settings.model_copy(update={"topic": topic})
    view = LogView(settings=settings)

    def _late(task: str) -> dict[str, Any]:
        # Late beyond doubt: the worker's job ends only once the reviewer's timeout is in the
        # log (a fixed sleep lost the race once on a loaded machine, and the run did not deadlock).
        deadline = time.monotonic() + 120
        while not any(True for _ in view.events(types=[TIMER_FIRED])):
            assert time.monotonic() < deadline, "the reviewer's timeout never fired"
            time.sleep(0.1)
        return {"summary": task.upper(), "took_ms": 2000}

    real, case_study.do_work = case_study.do_work, _late
    try:
        start_run(settings=settings, swarm=case_study.buggy, run_id="case12", seed=5)
        results = run_agents(settings=settings, swarm=case_study.buggy, until_quiet=1.0)
    finally:
        case_study.do_work = real
    assert case_study.deadlocked({r.agent: r.state for r in results})
    return settings


def swarmlog(settings: Settings, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run([*CLI, *args], env=subprocess_env(settings), cwd=REPO, capture_output=True, text=True,
                        timeout=180)
    if check:
        assert cp.returncode == 0, f"swarmlog {' '.join(args)} exited {cp.returncode}: {cp.stderr}"
    return cp


def events(settings: Settings) -> list[dict[str, Any]]:
    return [json.loads(line) for line in swarmlog(settings, "log", "--json").stdout.splitlines()]


def offsets_of(settings: Settings) -> tuple[int, int, int]:
    """(the reviewer's timer.set, its timeout firing, the late task_complete)."""
    log = events(settings)
    timer_set = next(e["offset"] for e in log if e["event_type"] == "timer.set" and e["agent"] == "reviewer")
    fired = next(e["offset"] for e in log if e["event_type"] == "timer.fired" and e["agent"] == "reviewer")
    late = next(e["offset"] for e in log if e["event_type"] == "agent.message"
                and e["payload"]["kind"] == "task_complete")
    return timer_set, fired, late


def test_log_lists_every_event_in_offset_order_and_show_resolves_causes_both_ways(run, registry):
    log = events(run)
    recorded = read_log(run, registry)
    assert [e["offset"] for e in log] == [r.offset for r in recorded]  # every event, in offset order
    assert [e["event_id"] for e in log] == [r.record["event_id"] for r in recorded]
    assert {e["agent"] for e in log} | {e["to"] for e in log} >= {"coordinator", "worker", "reviewer", "supervisor",
                                                                "auditor"}
    text = swarmlog(run, "log").stdout.splitlines()
    assert len(text) == len(log) and "task_complete" in "\n".join(text)
    only = swarmlog(run, "log", "--agent", "reviewer", "--type", "agent.message:task_complete", "--json").stdout
    assert [json.loads(x)["payload"]["kind"] for x in only.splitlines()] == ["task_complete"]

    timer_set, fired, late = offsets_of(run)
    assert fired < late  # the deadlock: the timeout fired before the worker's message
    shown = json.loads(swarmlog(run, "show", str(fired), "--json").stdout)
    assert [c["offset"] for c in shown["causes"]] == [timer_set]  # what caused the firing...
    assert [c["event_type"] for c in shown["causes"]] == ["timer.set"]
    caused = [(c["agent"], c["event_type"], c["payload"].get("kind")) for c in shown["caused"]]
    assert caused == [("reviewer", "agent.message", "escalate")]  # ...and what it caused
    late_shown = json.loads(swarmlog(run, "show", str(late), "--json").stdout)
    assert [c["event_type"] for c in late_shown["causes"]] == ["agent.message", "effect.recorded"]
    assert late_shown["caused"] == []  # the buggy reviewer ignored it: nothing came of it
    human = swarmlog(run, "show", str(fired)).stdout
    assert "caused by (1):" in human and "escalate" in human


def test_state_before_and_after_the_timeout_and_the_diff_is_exactly_that_change(run):
    _, fired, _ = offsets_of(run)
    before = json.loads(swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--at", str(fired), "--json").stdout)
    after = json.loads(swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--at", str(fired + 1), "--json").stdout)
    assert before["state"]["phase"] == "waiting" and after["state"]["phase"] == "timed_out"
    d = json.loads(swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--diff", str(fired), str(fired + 1),
                            "--json").stdout)
    assert d["changes"] == [{"path": ["phase"], "kind": "changed", "before": "waiting", "after": "timed_out"}]
    text = swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--diff", str(fired), str(fired + 1)).stdout
    assert '~ phase: "waiting" -> "timed_out"' in text


def test_debug_at_the_late_task_complete_stops_in_its_handler_under_pdb(run):
    _, _, late = offsets_of(run)
    child = pexpect.spawn(CLI[0], [*CLI[1:], "debug", "--swarm", BUGGY, "--at", str(late)],
                          env=subprocess_env(run), cwd=str(REPO), encoding="utf-8", timeout=120)
    try:
        child.expect(r"\(Pdb\) ")
        assert "case_study.py" in child.before and "task_complete()" in child.before
        assert f"offset {late}: reviewer runs Reviewer.task_complete" in child.before
        child.sendline('p self.state["phase"]')
        child.expect(r"\(Pdb\) ")
        assert "'timed_out'" in child.before
        child.sendline("p type(self).__qualname__, event.kind")
        child.expect(r"\(Pdb\) ")
        assert "('Reviewer', 'task_complete')" in child.before
        child.sendline("c")  # leaving the debugger carries on the replay
        child.expect(pexpect.EOF)
        assert 'reviewer now {"phase": "timed_out", "ignored": 1}' in child.before
        assert "no divergence" in child.before
    finally:
        child.close()
    assert child.exitstatus == 0


def test_a_fork_before_the_race_run_with_the_fix_finishes_and_the_original_token_still_verifies(run, tmp_path):
    token = tmp_path / "token.json"
    swarmlog(run, "replay", "--swarm", BUGGY, "--token-out", str(token))
    original = [(e["offset"], e["event_id"]) for e in events(run)]
    _, fired, _ = offsets_of(run)
    fork_topic = new_topic_name("case12-fork")
    forked = json.loads(swarmlog(run, "fork", "--at", str(fired), "--to-topic", fork_topic, "--json").stdout)
    assert forked["source"] == run.topic and forked["at"] == fired
    on_fork = run.model_copy(update={"topic": fork_topic})
    copied = events(on_fork)
    assert [(e["offset"], e["event_id"]) for e in copied if e["offset"] < fired] == \
        [x for x in original if x[0] < fired]
    assert copied[-1]["event_type"] == "run.forked" and copied[-1]["payload"]["source_topic"] == run.topic

    # The fixed code goes on from the fork: the race runs again, and whichever way it goes, it finishes.
    swarmlog(on_fork, "run", FIXED, "--until-quiet", "1.5")
    done = json.loads(swarmlog(on_fork, "state", "coordinator", "--swarm", FIXED, "--at", str(10**12),
                               "--json").stdout)
    assert done["state"]["phase"] == "done"
    rebuilt = swarmlog(on_fork, "replay", "--swarm", FIXED, "--json")
    assert json.loads(rebuilt.stdout)["diverged"] is False

    # The original is untouched and its token still verifies.
    assert [(e["offset"], e["event_id"]) for e in events(run)] == original
    verified = swarmlog(run, "replay", "--verify", str(token), "--swarm", BUGGY)
    assert "matches the token" in verified.stdout


def test_snapshots_are_used_when_they_fit_and_said_when_they_do_not(run):
    _, fired, _ = offsets_of(run)
    taken = swarmlog(run, "snapshot", "--swarm", BUGGY, "--every", "3")
    assert "snapshot record(s)" in taken.stdout
    kept = swarmlog(run, "snapshot", "--swarm", BUGGY, "--list").stdout
    assert "reviewer" in kept and "case-study-buggy" in kept
    fast = json.loads(swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--at", str(fired + 1), "--json").stdout)
    slow = json.loads(swarmlog(run, "state", "reviewer", "--swarm", BUGGY, "--at", str(fired + 1), "--json",
                               "--no-snapshots").stdout)
    assert fast["from_snapshot"] is not None and slow["from_snapshot"] is None
    assert fast["state"] == slow["state"] and fast["steps"] == slow["steps"]
    other = swarmlog(run, "state", "reviewer", "--swarm", FIXED, "--at", str(fired + 1), "--json")
    assert json.loads(other.stdout)["from_snapshot"] is None
    assert "not used" in other.stderr and "case-study-buggy" in other.stderr


def test_the_python_api_finds_the_deadlock_the_state_and_the_fork(run, tmp_path: Path):
    from swarmlog.debug import LogView, Session

    view = LogView(settings=run)
    fired = next(view.events(types=["timer.fired"]))
    late = next(view.events(types=["agent.message:task_complete"]))
    assert fired.offset < late.offset
    session = Session(settings=run, swarm=case_study.buggy)
    assert session.state("reviewer", at=fired.offset).state["phase"] == "waiting"
    assert session.state("reviewer", at=late.offset).state["phase"] == "timed_out"
    first = Session(settings=run, swarm=case_study.fixed).first_divergence()
    assert first is not None and (first.agent, first.offset) == ("reviewer", late.offset)


def test_log_follow_prints_events_as_they_are_appended(run):
    # Last: it appends to the run's topic.
    end = events(run)[-1]["offset"] + 1
    proc = subprocess.Popen([*CLI, "log", "--follow", "--from", str(end)], env=subprocess_env(run), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        swarmlog(run, "append", "agent.message", '{"kind": "hello", "body": "from the test"}', "--agent", "tester",
                 "--to", "reviewer")
        line = proc.stdout.readline() if proc.stdout else ""
        assert "tester" in line and "hello" in line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
