"""State is part of the record, on the real broker, across processes: the live run's per-step state
digests are the ones a replay in another process and a restart of every agent compute, checked step
by step; and a state-only trap no guard can refuse is reported at its offset and agent."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from swarmlog.examples.case_study import buggy, live_run
from swarmlog.runtime import find_run, start_run

from .. import swarms
from ..contract.state import digest_records, trap_step
from .conftest import new_topic_name
from .test_runtime import AGENTS, _env, _spawn_agent, _stop, _wait_finished


def _cli(settings, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=_env(settings), capture_output=True,
                          text=True, timeout=timeout)


def _recorded_steps(backend, settings, registry) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, rec in digest_records(backend, settings.topic, registry):
        counts[rec["agent_id"]] = counts.get(rec["agent_id"], 0) + len(rec["payload"]["steps"])
    return counts


def _replay_elsewhere(settings, swarm: str) -> tuple[int, dict]:
    done = _cli(settings, "replay", "--swarm", swarm, "--json")
    assert done.returncode in (0, 4), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def _assert_every_digest_checked(backend, settings, registry, replayed: dict, steps: dict[str, int]) -> None:
    recorded = _recorded_steps(backend, settings, registry)
    # Every step of every agent has its digest; an agent that never stepped has its final one (no step).
    assert recorded == steps
    assert replayed["states_recorded"] == {a: recorded.get(a, 0) for a in replayed["states_recorded"]}
    assert replayed["states_checked"] == replayed["states_recorded"]  # each recomputed, each equal
    assert replayed["diverged"] is False


def test_the_case_study_live_replayed_elsewhere_and_restarted_has_identical_per_step_state_digests(
        base_settings, backend, registry):
    run = live_run(base_settings, buggy, seed=3)
    settings = run.settings
    status, replayed = _replay_elsewhere(settings, "swarmlog.examples.case_study:buggy")
    assert status == 0
    _assert_every_digest_checked(backend, settings, registry, replayed, replayed["steps"])
    assert replayed["agents"] == run.hashes
    info = find_run(settings, settings.topic, registry)
    assert info is not None
    before = digest_records(backend, settings.topic, registry)
    restarted = _cli(settings, "run", "swarmlog.examples.case_study:buggy", "--run-id", info.run_id,
                     "--seed", str(info.seed), "--until-quiet", "1")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    again = json.loads(restarted.stdout.strip().splitlines()[-1])
    assert again["states_checked"] == replayed["states_checked"]  # every agent rebuilt through every digest
    assert again["agents"] == run.hashes
    assert digest_records(backend, settings.topic, registry) == before  # and wrote none twice


def _five_processes(base_settings, registry, swarm_spec: str, swarm, run_id: str):
    topic = new_topic_name(run_id)
    from swarmlog.kafka.topic import create_topic

    create_topic(base_settings, topic)
    settings = base_settings.model_copy(update={"topic": topic})
    start_run(settings=settings, swarm=swarm, run_id=run_id, seed=17)
    procs = {a: _spawn_agent(settings, swarm_spec, a) for a in AGENTS}
    _wait_finished(settings, registry)
    return settings, _stop(procs)


def test_a_five_process_swarm_replayed_elsewhere_and_restarted_has_identical_per_step_state_digests(
        base_settings, backend, registry, tmp_path):
    settings, live = _five_processes(base_settings, registry, "tests.swarms:relay", swarms.relay, "dig5")
    status, replayed = _replay_elsewhere(settings, "tests.swarms:relay")
    assert status == 0 and replayed["agents"] == live
    _assert_every_digest_checked(backend, settings, registry, replayed, replayed["steps"])
    before = digest_records(backend, settings.topic, registry)
    # Every agent restarts. The log is quiet already and every position at its end, so quiet says
    # nothing here: each restarted agent is waited for until it says it caught up (a SIGTERM before
    # the process has even started would end it by the signal, with nothing rebuilt).
    logs = {a: tmp_path / f"{a}.stderr" for a in AGENTS}
    procs = {a: subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "run", "tests.swarms:relay", "--agent", a],
                                 env=_env(settings), stdout=subprocess.PIPE, stderr=logs[a].open("w"), text=True)
             for a in AGENTS}
    deadline = time.monotonic() + 180
    while not all("caught up at offset" in logs[a].read_text() for a in AGENTS):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values()), \
            {a: logs[a].read_text()[-1000:] for a in AGENTS}
        time.sleep(0.2)
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for name, p in procs.items():
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, f"{name}: {logs[name].read_text()[-2000:]}"
        again = json.loads(out.strip().splitlines()[-1])
        assert again["states_checked"] == {name: replayed["states_checked"][name]}
        assert again["agents"] == {name: live[name]}
    assert digest_records(backend, settings.topic, registry) == before


def test_a_state_only_trap_is_reported_by_replay_swarm_in_another_process_at_its_offset_and_agent(
        base_settings, backend, registry):
    settings, live = _five_processes(base_settings, registry, "tests.swarms:state_trap", swarms.state_trap, "trap5")
    offset, agent = trap_step(backend, settings.topic, registry)
    status, replayed = _replay_elsewhere(settings, "tests.swarms:state_trap")
    assert status == 4
    first = replayed["first_divergence"]
    assert (first["kind"], first["offset"], first["agent"]) == ("state", offset, agent)
    assert first["recorded"]["state_digest"] != first["replayed"]["state_digest"]
    assert replayed["divergences"] == 1  # no output departed; the state is reported where it first did
    text = _cli(settings, "replay", "--swarm", "tests.swarms:state_trap")
    assert f"DIVERGED first at offset {offset} (agent {agent}, state)" in text.stdout
