"""The seed document's case study on the real broker: a deadlock found live, replayed to the same
deadlock every time, and the fix checked against that same log and against new live runs."""

from __future__ import annotations

import time

from swarmlog.examples import case_study
from swarmlog.examples.case_study import buggy, deadlocked, find_deadlock, fixed, live_run, replay_deadlock


def test_deadlocked_log_replays_to_the_deadlock_10_of_10_and_the_fix_is_verified(base_settings, monkeypatch):
    run, attempts = find_deadlock(base_settings, max_runs=30)
    print(f"\ncase study: the first deadlock took {attempts} live run(s)")
    assert run.deadlocked
    assert run.states["reviewer"] == {"phase": "timed_out", "ignored": 1}

    for _ in range(10):
        replayed = replay_deadlock(run)
        assert replayed.divergences == []
        assert deadlocked(replayed.states)
        assert replayed.agents == run.hashes  # the same deadlock, state for state

    # The fix against the same log: everything up to the late message is identical; there the
    # fixed reviewer approves where the buggy one wrote nothing. That is the first divergence.
    what_if = replay_deadlock(run, fixed)
    first = what_if.first_divergence
    assert first is not None and first.agent == "reviewer"
    assert first.recorded is None and first.replayed["payload"]["kind"] == "approved"
    assert first.replayed["to"] == "coordinator"
    assert what_if.states["reviewer"]["phase"] == "approved"

    # ...and against new live runs, including one where the worker is always late.
    assert not any(live_run(base_settings, fixed, seed=100 + i).deadlocked for i in range(3))

    def always_late(task: str) -> dict:
        # Late beyond doubt: past the timeout and past any agent's start-up on a loaded machine
        # (a reviewer that starts after task_complete is already in the log sees no race at all).
        time.sleep(3.0)
        return {"summary": task.upper(), "took_ms": 3000}

    monkeypatch.setattr(case_study, "do_work", always_late)
    late = live_run(base_settings, fixed, seed=7)
    assert not late.deadlocked
    assert late.states["supervisor"]["escalations"] == 1  # the timeout did fire first
    assert live_run(base_settings, buggy, seed=7).deadlocked  # and the bug deadlocks on the same race
