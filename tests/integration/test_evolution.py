"""Code that changes while runs are in flight, against the real broker, with the CLI as a process.

Issue 31 items 1-2 and issue 29 item 4: a fix deployed behind a versioned step into the case study's
run while its agents run as one process each, as the chart's pods (the reviewer's process alone is
replaced; old steps replay, new steps take the new path, nobody restarts, the replay is clean);
older code started on that run refuses it through /readyz and its log, and stays up; a handler that
fails makes ``swarmlog run`` exit non-zero, and after the fix ``swarmlog run --retry-failed`` takes
the run to its end, the failed attempt still in ``swarmlog log``, and a retried step killed midway
runs again with nothing lost or written twice; a misspelt kind is warned about
live and listed by ``swarmlog check unhandled``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import HANDLER_FAILED, MESSAGE, PATCH_MARKER, STEP_RETRIED

from ..conftest import subprocess_env
from .conftest import read_log
from .dev_clusters import free_ports

PATCH = "accept-late-task-complete"


def _swarmlog(settings, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=timeout)


def _serve(settings, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "swarmlog.cli", *argv], env=subprocess_env(settings),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _wait(what: str, check, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _messages(settings, registry, kind: str) -> list[Any]:
    return [r for r in read_log(settings, registry)
            if r.event_type == MESSAGE and r.record["payload"]["kind"] == kind]


def _deadlocked_case_study(settings) -> Any:
    """The buggy case study, live as a `swarmlog run` process, on fresh topics until a run deadlocks."""
    for attempt in range(1, 16):
        topic = f"{settings.topic}.case-{uuid.uuid4().hex[:8]}"
        create_topic(settings, topic)
        s = settings.model_copy(update={"topic": topic})
        live = _swarmlog(s, "run", "examples.case_study:buggy", "--run-id", f"case-{attempt}", "--seed",
                         str(attempt), "--until-quiet", "1")
        assert live.returncode == 0, live.stderr
        states = json.loads(live.stdout)
        if states["steps"]["coordinator"] == 1:  # run.started only: the approval never came
            return s
    raise AssertionError("no deadlock in 15 live runs of the buggy case study")


AGENTS = ("coordinator", "worker", "reviewer", "supervisor", "auditor")


def _agent_pods(s, swarm: str, ports: dict[str, int], agents=AGENTS) -> dict[str, subprocess.Popen[str]]:
    """One `swarmlog run --agent` process per agent, as the chart's Deployments run them."""
    return {a: _serve(s, "run", swarm, "--agent", a, "--metrics-port", str(ports[a])) for a in agents}


def _deadlocked_live(settings, registry, ports: dict[str, int]) -> tuple[Any, dict[str, subprocess.Popen[str]]]:
    """The buggy case study, one process per agent, on fresh topics until its reviewer has ignored a late
    task_complete (the timeout fired first): the run is in flight, deadlocked, its agents still running."""
    for attempt in range(1, 9):
        s, pods, deadlocked = _case_run(settings, registry, ports, attempt)
        if deadlocked:
            return s, pods
        for proc in pods.values():
            _stop(proc)
    raise AssertionError("no deadlock in 8 live runs of the buggy case study")


def _case_run(settings, registry, ports: dict[str, int], attempt: int) -> tuple[Any, dict[str, Any], bool]:
    from swarmlog.kafka.backend import KafkaBackend
    from swarmlog.log.protocol import TIMER_FIRED, agent_group

    topic = f"{settings.topic}.case-{uuid.uuid4().hex[:8]}"
    create_topic(settings, topic)
    s = settings.model_copy(update={"topic": topic})
    started = _swarmlog(s, "run", "examples.case_study:buggy", "--start", "--run-id", f"case-{attempt}", "--seed",
                        str(attempt))
    assert started.returncode == 0, started.stderr
    pods = _agent_pods(s, "examples.case_study:buggy", ports)
    (late,) = _wait("the race between the worker and the reviewer's timeout",
                    lambda: _messages(s, registry, "task_complete"), timeout=120)
    fired = [r for r in read_log(s, registry) if r.event_type == TIMER_FIRED and r.record["agent_id"] == "reviewer"]
    if not fired or fired[0].offset > late.offset:
        return s, pods, False  # in time: approved, no deadlock
    backend = KafkaBackend(s)
    # The buggy reviewer has read it (and ignored it): its group committed past it.
    _wait("the reviewer to read the late task_complete", lambda: (
        backend.committed(agent_group(s.topic, "reviewer"), s.topic) or 0) > late.offset, timeout=60)
    assert not _messages(s, registry, "approved")
    return s, pods, True


def test_a_fix_deployed_behind_a_versioned_step_into_the_running_case_study_unblocks_it_and_replays_clean(
        settings, registry):
    ports = dict(zip(AGENTS, free_ports(len(AGENTS)), strict=True))
    s, pods = _deadlocked_live(settings, registry, ports)
    late = _messages(s, registry, "task_complete")
    assert len(late) == 1
    try:
        for agent in AGENTS:
            _wait(f"{agent} to be ready", lambda a=agent: _probe(ports[a], "/readyz")[0] == 200)
        # The deploy: the reviewer's pod alone is replaced by one running the patched code; every
        # other agent keeps running as it was.
        code, _, err = _stop(pods["reviewer"])
        assert code == 0, err
        pods["reviewer"] = _serve(s, "run", "examples.case_study:patched", "--agent", "reviewer", "--metrics-port",
                                  str(ports["reviewer"]))
        # It rebuilds (its old steps replay on the old path, checked against the log) and is live.
        _wait("the patched reviewer to be ready", lambda: _probe(ports["reviewer"], "/readyz")[0] == 200)
        # New work takes the new path: the task sent again, its late task_complete is accepted.
        sent = _swarmlog(s, "append", MESSAGE, json.dumps({"kind": "task", "body": "summarise the incident"}),
                         "--agent", "operator", "--to", "worker")
        assert sent.returncode == 0, sent.stderr
        _wait("the coordinator's approval", lambda: _messages(s, registry, "approved"))
        for agent, proc in pods.items():  # every agent kept running: none exited, none was restarted
            assert proc.poll() is None, agent
            assert _probe(ports[agent], "/readyz")[0] == 200, agent
    finally:
        outcomes = {agent: _stop(proc) for agent, proc in pods.items()}
    assert all(code == 0 for code, _, _ in outcomes.values()), {a: o[2][-500:] for a, o in outcomes.items()}
    assert json.loads(outcomes["coordinator"][1])["steps"]["coordinator"] == 2  # run.started, then the approval
    log = read_log(s, registry)
    markers = [r for r in log if r.event_type == PATCH_MARKER]
    assert [(m.record["agent_id"], m.record["payload"]["patch_id"]) for m in markers] == [("reviewer", PATCH)]
    assert markers[0].offset > late[0].offset  # the old late message is not marked: it replays on the old path
    # The new code replays the whole log clean; the old code fails on it naming the patch.
    clean = _swarmlog(s, "replay", "--swarm", "examples.case_study:patched", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["diverged"] is False
    old = _swarmlog(s, "replay", "--swarm", "examples.case_study:buggy", "--json")
    assert old.returncode == 4 and PATCH in old.stdout
    # Which runs still need the old path: this one has steps recorded before the patch.
    needed = _swarmlog(s, "patches", "--patch", PATCH)
    assert needed.returncode == 1 and "still needed" in needed.stdout and s.topic in needed.stdout
    # Over every run of a pattern (this test's case-study topics), as JSON.
    every = _swarmlog(s, "patches", "--topics-pattern", re.escape(settings.topic) + r"\.case-.*", "--json")
    assert every.returncode == 0, every.stderr
    doc = json.loads(every.stdout)
    assert s.topic in doc["topics"]
    (verdict,) = [p for p in doc["patches"] if p["patch"] == PATCH]
    assert verdict["stage"] == "keep" and s.topic in verdict["runs_before"]


def test_old_code_started_on_a_run_recorded_with_a_newer_patch_refuses_not_ready_and_does_not_exit(
        settings, registry):
    s = _deadlocked_case_study(settings)
    (port,) = free_ports(1)
    patched = _swarmlog(s, "run", "examples.case_study:patched", "--until-quiet", "1")
    assert patched.returncode == 0, patched.stderr
    assert _swarmlog(s, "append", MESSAGE, json.dumps({"kind": "task", "body": "again"}), "--agent", "operator",
                     "--to", "worker").returncode == 0
    assert _swarmlog(s, "run", "examples.case_study:patched", "--until-quiet", "1").returncode == 0
    assert any(r.event_type == PATCH_MARKER for r in read_log(s, registry))
    # The old code, as a pod would run it: it refuses the run and stays up, not ready.
    old = _serve(s, "run", "examples.case_study:buggy", "--metrics-port", str(port))
    try:
        status, body = _wait("the refusal on /readyz", lambda: (r := _probe(port, "/readyz"))[0] == 503
                             and PATCH in r[1] and r)
        assert "reviewer" in body and "cannot go on with run" in body
        time.sleep(3)
        assert old.poll() is None  # no exit, so nothing for a supervisor to restart into a loop
        assert _probe(port, "/readyz")[0] == 503 and _probe(port, "/livez")[0] == 200
    finally:
        code, _, err = _stop(old)
    assert code != 0  # stopped, it says the run could not go on
    refusals = [line for line in err.splitlines() if "cannot go on with run" in line and "ERROR" in line]
    assert len(refusals) == 1 and PATCH in refusals[0] and "case-" in refusals[0]  # once, naming run and patch


def test_a_handler_failing_on_its_second_step_exits_non_zero_and_the_fixed_code_retries_it_to_the_end(
        settings, registry):
    failed = _swarmlog(settings, "run", "tests.swarms:chain_buggy", "--run-id", "chain", "--seed", "1",
                       "--until-quiet", "1")
    assert failed.returncode == 70, failed.stderr
    assert "job 1 divides by zero" in failed.stderr and "ZeroDivisionError" in failed.stderr
    step = next(r for r in read_log(settings, registry) if r.event_type == HANDLER_FAILED)
    failed_step = int(step.record["event_id"].split("@")[1].split("#")[0])
    assert f"step at offset {failed_step}" in failed.stderr.splitlines()[-1]  # the last line names the step
    assert "--retry-failed" in failed.stderr.splitlines()[-1]  # and what to do
    # The fixed code alone does not go on: the failed step is retried by the one documented command.
    fixed = _swarmlog(settings, "run", "tests.swarms:chain_fixed", "--retry-failed", "--until-quiet", "1")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["steps"]["chain"] == 5  # run.started, job 1 (failed), its retry, jobs 2 and 3
    log = read_log(settings, registry)
    (retry,) = [r for r in log if r.event_type == STEP_RETRIED]
    assert retry.record["payload"]["failed_step"] == failed_step and retry.offset > step.offset
    jobs = [r.record["payload"]["body"] for r in log if r.event_type == MESSAGE and r.record["to"] == "chain"]
    assert jobs == ["1", "2", "3"]  # the chain went on from the failed step to its end
    # The failed attempt stays in the history, where `swarmlog log` shows it.
    shown = _swarmlog(settings, "log", "--json")
    assert shown.returncode == 0, shown.stderr
    types = [json.loads(line)["event_type"] for line in shown.stdout.splitlines() if line.strip()]
    assert HANDLER_FAILED in types and STEP_RETRIED in types
    replay = _swarmlog(settings, "replay", "--swarm", "tests.swarms:chain_fixed", "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["diverged"] is False
    # Nothing left to retry: `swarmlog retry --list` says what happened.
    listed = _swarmlog(settings, "retry", "--list")
    assert f"retried at offset {retry.offset}" in listed.stdout


def test_a_message_with_a_misspelt_kind_is_warned_about_live_and_listed_by_check(settings, registry):
    started = _swarmlog(settings, "run", "tests.swarms:chain_fixed", "--start", "--run-id", "typo", "--seed", "1")
    assert started.returncode == 0, started.stderr
    sent = _swarmlog(settings, "append", MESSAGE, json.dumps({"kind": "jbo", "body": "1"}), "--agent", "operator",
                     "--to", "chain")
    assert sent.returncode == 0, sent.stderr
    typo_at = int(sent.stdout.strip().split()[-1])
    live = _swarmlog(settings, "run", "tests.swarms:chain_fixed", "--until-quiet", "1")
    assert live.returncode == 0, live.stderr
    warnings = [line for line in live.stderr.splitlines() if "WARNING" in line and "'jbo'" in line]
    assert len(warnings) == 1 and f"offset {typo_at}" in warnings[0] and "no handler" in warnings[0]
    listed = _swarmlog(settings, "check", "unhandled", "--swarm", "tests.swarms:chain_fixed")
    assert listed.returncode == 1, listed.stderr
    assert f"offset {typo_at}: 'jbo' from 'operator': agent 'chain' has no handler for kind 'jbo'" in listed.stdout
    assert "1 message(s) no agent of chain handles" in listed.stdout


def test_a_run_pinned_to_its_code_is_refused_by_another_version_not_ready_unless_accepted(settings, registry):
    first = _swarmlog(settings, "run", "tests.swarms:chain_pinned", "--run-id", "pinned", "--seed", "1",
                      "--until-quiet", "1")
    assert first.returncode == 0, first.stderr
    (port,) = free_ports(1)
    other = _serve(settings, "run", "tests.swarms:chain_pinned_next", "--metrics-port", str(port))
    try:
        status, body = _wait("the refusal on /readyz", lambda: (r := _probe(port, "/readyz"))[0] == 503
                             and "pinned" in r[1] and r)
        assert "'chain-3'" in body and "'chain-2'" in body and "--accept-version chain-2" in body
        time.sleep(2)
        assert other.poll() is None  # refused, not restarted in a loop
    finally:
        code, _, err = _stop(other)
    assert code == 70 and "pinned to 'chain-2'" in err
    assert _swarmlog(settings, "append", MESSAGE, json.dumps({"kind": "job", "body": "9"}), "--agent", "operator",
                     "--to", "chain").returncode == 0
    accepted = _swarmlog(settings, "run", "tests.swarms:chain_pinned_next", "--accept-version", "chain-2",
                         "--until-quiet", "1")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["steps"]["chain"] == 5  # run.started, jobs 1-3, and the job appended


def test_a_retried_step_killed_midway_runs_again_without_a_gap_or_a_duplicate(settings, registry, tmp_path):
    from collections import Counter

    failed = _swarmlog(settings, "run", "tests.swarms:chain_buggy", "--run-id", "kill", "--seed", "1",
                       "--until-quiet", "1")
    assert failed.returncode == 70, failed.stderr
    retried = _swarmlog(settings, "retry")
    assert retried.returncode == 0 and "step.retried appended at offset" in retried.stdout, retried.stderr
    release = tmp_path / "release"
    env = {**subprocess_env(settings), "CHAIN_RELEASE_FILE": str(release)}
    argv = [sys.executable, "-m", "swarmlog.cli", "run", "tests.swarms:chain_slow_fix", "--until-quiet", "1"]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait("the retried step's effect to start", lambda: (tmp_path / "release.started").exists() or first.poll())
    assert first.poll() is None, first.stderr.read() if first.stderr else ""
    first.send_signal(signal.SIGKILL)  # in the middle of the retried step: its transaction never commits
    first.wait(30)
    release.write_text("go")
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    log = read_log(settings, registry)
    ids = Counter(r.record["event_id"] for r in log)
    assert [i for i, n in ids.items() if n > 1] == []  # nothing written twice
    asked = [r.record["payload"]["body"] for r in log if r.event_type == MESSAGE and r.record["to"] == "relay"]
    assert asked == ["1", "2", "3"]  # the chain went on from the retried step to its end, once
    assert [r.event_type for r in log].count(STEP_RETRIED) == 1
    replay = _swarmlog(settings, "replay", "--swarm", "tests.swarms:chain_slow_fix", "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["diverged"] is False


def test_retry_check_unhandled_and_patches_name_garbage_and_copies_and_answer_as_on_the_clean_log(
        settings, registry):
    from swarmlog.log.append import EventLog

    from ..conftest import unchecked_event

    assert _swarmlog(settings, "run", "tests.swarms:chain_buggy", "--run-id", "scan", "--seed", "1",
                     "--until-quiet", "1").returncode == 70
    sent = _swarmlog(settings, "append", MESSAGE, json.dumps({"kind": "jbo", "body": "1"}), "--agent", "operator",
                     "--to", "chain")
    assert sent.returncode == 0, sent.stderr
    fixed = _swarmlog(settings, "run", "tests.swarms:chain_fixed", "--retry-failed", "--until-quiet", "1")
    assert fixed.returncode == 0, fixed.stderr

    def answers() -> tuple[subprocess.CompletedProcess[str], ...]:
        return (_swarmlog(settings, "retry", "--list"),
                _swarmlog(settings, "check", "unhandled", "--swarm", "tests.swarms:chain_fixed"),
                _swarmlog(settings, "patches", "--json"))

    clean = answers()
    assert [a.returncode for a in clean] == [0, 1, 0], [a.stderr for a in clean]
    assert "retried at offset" in clean[0].stdout and "'jbo'" in clean[1].stdout
    assert json.loads(clean[2].stdout)["skipped"][settings.topic] == {"unreadable": [], "repeats": 0, "repeated": []}

    # Another producer writes bytes that are not an event under a handler.failed's headers, the misspelt
    # message with bytes after it, and copies of the failure (after its retry) and of the misspelt message.
    log = read_log(settings, registry)
    failed = next(r for r in log if r.event_type == HANDLER_FAILED)
    typo = next(r for r in log if r.event_type == MESSAGE and r.record["payload"]["kind"] == "jbo")

    def again(r: Any) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        rec = r.record
        return unchecked_event(registry, r.event_type, rec["payload"], agent=rec["agent_id"], to=rec["to"],
                               causes=rec["causes"], run_id=rec["run_id"], event_id=rec["event_id"])

    with EventLog(settings=settings) as writer:
        for value, key, headers in (
                (b"not an event", *again(failed)[1:]),
                (again(typo)[0] + b"\x00trailing", *again(typo)[1:]),
                again(failed), again(typo)):
            writer.produce_raw(value, key=key, headers=headers)
        garbage, trailing, *copies = writer.flush()

    dirty = answers()
    assert [a.returncode for a in dirty] == [0, 1, 0], [a.stderr for a in dirty]
    assert dirty[0].stdout.splitlines()[0] == clean[0].stdout.splitlines()[0]  # the failure, retried
    assert [line for line in dirty[1].stdout.splitlines() if line.startswith("offset ")] \
        == [line for line in clean[1].stdout.splitlines() if line.startswith("offset ")]
    for done in dirty[:2]:
        assert f"offset {garbage}: not a readable event (UndecodableMessage)" in done.stdout
        assert f"offset {trailing}: not a readable event (TrailingBytesInValue)" in done.stdout
        assert all(f"offset {c}: event id" in done.stdout for c in copies)
        assert f"offset {garbage}" in done.stderr  # and logged
    doc = json.loads(dirty[2].stdout)
    assert doc["patches"] == json.loads(clean[2].stdout)["patches"]
    skipped = doc["skipped"][settings.topic]
    assert [u["offset"] for u in skipped["unreadable"]] == [garbage, trailing]
    assert [(a["offset"], a["first"]) for a in skipped["repeated"]] == [(copies[0], failed.offset),
                                                                         (copies[1], typo.offset)]
    # The failure's copy is not a second failure: nothing is open, as the agents say.
    retried = _swarmlog(settings, "retry")
    assert retried.returncode == 0 and "nothing to retry" in retried.stderr, retried.stderr
