"""A failing schedule found in simulation, handed to the real runtime: a Kafka topic and its replay token.

Issue 13's export Must-show: the case study's deadlock, found and shrunk with no broker,
is written to a topic on the real broker; ``swarmlog replay --swarm`` (the CLI, as a
process) replays it to the same deadlock 10 times out of 10 and verifies its token, and
the debugger's commands (``log``, ``state``, ``debug``, ``timeline``) open it like any run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from swarmlog.examples import case_study, claims
from swarmlog.kafka import KafkaBackend
from swarmlog.log.protocol import STATE_DIGEST, TIMER_FIRED, agent_group, route
from swarmlog.replaying import replay_swarm
from swarmlog.testing import Schedule, Simulator, export, no_message_ignored

from .conftest import REPO, subprocess_env

SWARMLOG = [sys.executable, "-m", "swarmlog.cli"]
BUGGY = "swarmlog.examples.case_study:buggy"
FIXED = "swarmlog.examples.case_study:fixed"

pytest_plugins = ["pytester"]


def _deadlock() -> object:
    sim = Simulator(case_study.buggy, effects=case_study.MODELS, end_state=case_study.finished,
                    invariants=[no_message_ignored], crashes=2)
    found = sim.explore(max_examples=1000)
    assert found.failure is not None and found.failure.schedule.deviations == 1
    return found.failure


def test_an_exported_deadlock_replays_on_the_broker_to_the_same_deadlock_10_times_out_of_10(base_settings, tmp_path):
    run = _deadlock()
    token_path = tmp_path / "deadlock-token.json"
    exported = export(run, settings=base_settings, token_path=token_path)
    print(f"\n{exported}")
    settings = base_settings.model_copy(update={"topic": exported.topic})
    assert exported.token.agents == run.replay().agents  # the simulated agents' states, hashed

    # The real runtime's tools read it like any run: positions of every agent's group, as simulated.
    backend = KafkaBackend(settings)
    for agent in run.states:
        assert backend.committed(agent_group(exported.topic, agent), exported.topic) == \
            run.log.committed(agent_group(run.topic, agent), run.topic)
    backend.close()

    env = subprocess_env(settings)
    for attempt in range(10):
        out = subprocess.run([*SWARMLOG, "replay", "--swarm", BUGGY, "--json",
                              "--verify", str(token_path)], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, (attempt, out.stdout, out.stderr)
        doc = json.loads(out.stdout[: out.stdout.rindex("}") + 1])
        assert doc["diverged"] is False and doc["agents"] == exported.token.agents
        assert f"the replay of {exported.topic} matches the token {token_path}" in out.stdout
        replayed = replay_swarm(settings=settings, swarm=case_study.buggy)
        assert replayed.divergences == [] and case_study.deadlocked(replayed.states)
        assert replayed.states["reviewer"] == {"phase": "timed_out", "ignored": 1}

    # The debugger's commands open it like any run: every event at its offset, the reviewer's state
    # either side of the timeout, and a stop inside the handler that drops the late message.
    out = subprocess.run([*SWARMLOG, "log", "--json"], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    logged = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(e["offset"], e["event_type"], e["timestamp_ms"]) for e in logged if e["event_type"] != STATE_DIGEST] == \
        [(e.offset, e.event_type, e.timestamp_ms) for e in run.events()]
    # And the simulated agents' state digests, as live agents record them (SimRun.events() leaves them out).
    assert [e["offset"] for e in logged if e["event_type"] == STATE_DIGEST] == \
        [m.offset() for m in run.log.messages(run.topic) if route(m.headers()).event_type == STATE_DIGEST]
    fired = next(e.offset for e in run.events() if e.event_type == TIMER_FIRED)
    late = next(e.offset for e in run.events() if e.kind == "task_complete")
    for at, phase in ((fired, "waiting"), (fired + 1, "timed_out")):
        out = subprocess.run([*SWARMLOG, "state", "reviewer", "--at", str(at), "--swarm", BUGGY,
                              "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and json.loads(out.stdout)["state"]["phase"] == phase, out.stdout + out.stderr
    out = subprocess.run([*SWARMLOG, "debug", "--at", str(late), "--agent", "reviewer", "--swarm",
                          BUGGY], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120, input='p "phase=" + self.state["phase"]\ncontinue\n')
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reviewer runs Reviewer.task_complete" in out.stderr  # where it stops, and in which handler
    assert "case_study.py" in out.stdout and "task_complete()" in out.stdout and "'phase=timed_out'" in out.stdout
    assert "no divergence" in out.stdout

    # The timeline draws it as a sequence diagram: every event a row at its offset, the firing the one
    # timeout, the late task_complete an arrow to the reviewer; the fix's divergence marked on that row.
    for spec, diverges in ((BUGGY, False), (FIXED, True)):
        out = subprocess.run([*SWARMLOG, "timeline", "--json", "--swarm", spec], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        page = json.loads(out.stdout)
        rows = {r["o"]: r for r in page["rows"]}
        assert list(rows) == [e.offset for e in run.events()]
        assert [o for o, r in rows.items() if r["k"] == "timeout"] == [fired]
        assert rows[late]["k"] == "message" and rows[late]["lb"] == "task_complete"
        assert page["lanes"][rows[late]["t"][0]] == "reviewer"
        assert (page["divergence"] is not None and page["divergence"]["offset"] == late
                and rows[late]["d"] is not None) is diverges, page["divergence"]

    # The fix against the same log departs from it exactly at the late task_complete.
    what_if = replay_swarm(settings=settings, swarm=case_study.fixed)
    first = what_if.first_divergence
    assert first is not None and first.agent == "reviewer" and first.replayed["payload"]["kind"] == "approved"
    assert not case_study.deadlocked(what_if.states) or what_if.states["reviewer"]["phase"] == "approved"

    # Causes precede their effects in the exported log, as in any log the runtime writes.
    check = subprocess.run([*SWARMLOG, "check", "causality"], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0 and "0 causality violation(s)" in check.stdout, check.stdout + check.stderr


def test_a_crash_and_the_second_race_export_and_replay_with_their_tokens(base_settings, tmp_path):
    # A schedule in which the worker dies before its commit: its aborted transaction and the fence's
    # marker are in the exported log too, at the same offsets.
    sim = Simulator(case_study.fixed, effects=case_study.MODELS, end_state=case_study.finished, crashes=1)
    crashed = next(r for r in (sim.run(seed) for seed in range(200)) if any(s.kind == "crash" for s in r.steps))
    claimed = Simulator(claims.buggy, effects=claims.MODELS, invariants=[claims.done_once]).run(
        Schedule((1, 1, 1)))
    assert not claimed.ok
    for run, spec in ((crashed, FIXED), (claimed, "swarmlog.examples.claims:buggy")):
        token_path = tmp_path / f"{run.swarm.name}.json"
        exported = export(run, settings=base_settings, token_path=token_path)
        env = subprocess_env(base_settings.model_copy(update={"topic": exported.topic}))
        out = subprocess.run([*SWARMLOG, "replay", "--swarm", spec, "--verify", str(token_path)], env=env,
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "no divergence" in out.stdout
        assert f"the replay of {exported.topic} matches the token {token_path}" in out.stdout


def test_a_seeded_schedule_is_the_same_run_in_every_process_whatever_its_string_hashes():
    # The same choices and the same agents' states under two string-hash seeds; each run records the
    # seed its handlers ran under (run.started v2), so an exported run replays under that one.
    code = ("from swarmlog.examples import claims\n"
            "from swarmlog.testing import Simulator\n"
            "sim = Simulator(claims.buggy, effects=claims.MODELS, invariants=[claims.done_once], crashes=1)\n"
            "runs = [sim.run(seed) for seed in range(30)]\n"
            "print(next(e.payload['hash_seed'] for e in runs[0].events() if e.event_type == 'run.started'))\n"
            "print([(r.schedule.choices, r.ok, r.replay().agents) for r in runs])\n")
    outs = []
    for hashseed in ("0", "4242"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMLOG_REEXEC")}
        env["PYTHONHASHSEED"] = hashseed
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        recorded, runs = out.stdout.splitlines()
        assert recorded == hashseed
        outs.append(runs)
    assert outs[0] == outs[1] and outs[0].count("(") > 30 and "False" in outs[0]


def test_the_simulate_fixture_exports_a_failing_schedule_with_its_token_when_asked(base_settings, pytester):
    pytester.makepyfile(test_review='''
from swarmlog.examples import case_study

def test_the_buggy_review_always_finishes(simulate):
    simulate(case_study.buggy, effects=case_study.MODELS, end_state=case_study.finished)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--swarmlog-examples", "40", "--swarmlog-export")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "DEADLOCK" in out and "exported to Kafka topic swarmlog." in out
    tokens = list(pytester.path.parent.rglob("replay-token.json")) or list(pytester.path.rglob("replay-token.json"))
    assert tokens, "the failing test's tmp_path holds no replay token"
    doc = json.loads(tokens[0].read_text())
    assert doc["reducer"] == "swarm:case-study" and doc["topic"].startswith(base_settings.topic + ".sim-")
