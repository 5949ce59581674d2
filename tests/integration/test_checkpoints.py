"""Checkpoints on the real broker, with agents as processes killed by real signals: a SIGKILL around
the checkpoint write loses nothing and writes nothing twice, and the restarted agent resumes from a
checkpoint a committed transaction holds (:mod:`swarmlog.runtime.resume`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import start_run

from ..contract.checkpoints import checkpoint_records
from .conftest import spawn_agent_process
from .test_runtime import (
    AGENTS,
    _assert_no_duplicate_and_no_lost_step,
    _committed,
    _env,
    _stop,
    _wait_finished,
)

SWARM = "tests.swarms:relay_long"


def _spawn(settings, agent: str, *extra: str) -> subprocess.Popen:
    env = {**_env(settings), "SWARMLOG_CHECKPOINT_EVERY": "2"}
    return spawn_agent_process([sys.executable, "-m", "swarmlog.cli", "run", SWARM, "--agent", agent, *extra], env)


def _checkpoints_of(backend, settings, agent: str) -> list[int]:
    try:
        return [d["at"] for _, d in checkpoint_records(backend, settings.topic) if d["agent"] == agent]
    except Exception:  # noqa: BLE001 - the snapshot topic is not there yet
        return []


def test_an_agent_sigkilled_around_its_checkpoint_writes_resumes_without_duplicate_or_lost_step(
        settings, registry, backend):
    from tests import swarms

    start_run(settings=settings, swarm=swarms.relay_long, run_id="ckpt-kill", seed=21)
    procs = {a: _spawn(settings, a) for a in AGENTS}
    kills = 0
    deadline = time.monotonic() + 180
    # Killed whenever it has just written a checkpoint (and is on to its next transactions, one of
    # which holds the next checkpoint): three lives die mid-run, at varied points around the writes.
    while kills < 3:
        assert time.monotonic() < deadline, f"only {kills} kills landed"
        seen = len(_checkpoints_of(backend, settings, "r2"))
        while len(_checkpoints_of(backend, settings, "r2")) == seen and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.02 * kills)
        procs["r2"].send_signal(signal.SIGKILL)
        procs["r2"].wait()
        kills += 1
        # What a killed life leaves visible: only checkpoints its committed transactions hold.
        assert max(_checkpoints_of(backend, settings, "r2")) <= max(_committed(settings, "r2"), 0)
        procs["r2"] = _spawn(settings, "r2")
    _wait_finished(settings, registry)
    live = _stop(procs)
    _assert_no_duplicate_and_no_lost_step(settings, registry)
    result = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry)
    assert result.divergences == []
    assert result.agents == live
    count, violations = check_causality(settings=settings, registry=registry)
    assert count > 0 and violations == []
    # A last restart of r2, as a process: it resumes from its latest checkpoint, and from zero it agrees.
    resumed = _restart(settings, "r2")
    again = _restart(settings, "r2", "--from-zero")
    assert resumed["resumed_from"]["r2"] == max(_checkpoints_of(backend, settings, "r2")) > 0
    assert again["resumed_from"]["r2"] == 0
    assert resumed["agents"]["r2"] == again["agents"]["r2"] == live["r2"]
    # `replay --swarm --from-checkpoints`, as a process: only the tail re-run, the same states, no token.
    done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm", SWARM, "--from-checkpoints",
                           "--json"], env=_env(settings), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["agents"] == live and not report["diverged"] and report["token"] is None
    assert set(report["resumed_from"]) == set(AGENTS) and report["resumed_from"]["r2"] > 0


def _restart(settings, agent: str, *extra: str) -> dict:
    proc = _spawn(settings, agent, "--until-quiet", "1", *extra)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])
