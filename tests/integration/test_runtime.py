"""The deterministic agent runtime on the real broker: live runs replay exactly, crashes lose
nothing and duplicate nothing, restart is rebuild."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.errors import NondeterminismError
from swarmlog.kafka.reader import high_watermark
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import parse_step
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import run_agents, start_run

from .. import swarms
from .conftest import REPO, new_topic_name, read_log, spawn_agent_process, subprocess_env

AGENTS = [f"r{i}" for i in range(swarms.N_AGENTS)]


def _env(settings) -> dict[str, str]:
    env = subprocess_env(settings)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    return env


def _spawn_agent(settings, swarm: str, agent: str) -> subprocess.Popen:
    return spawn_agent_process([sys.executable, "-m", "swarmlog.cli", "run", swarm, "--agent", agent], _env(settings))


def _log_end(settings) -> int:
    """The high watermark. Not the last stable offset a read_committed client would see: an
    open transaction (e.g. a killed agent's, until its restart aborts it) pins that, and the
    log would look quiet while the swarm is only blocked."""
    return high_watermark(settings, settings.topic)


def _committed(settings, agent: str) -> int:
    from swarmlog.kafka.config import admin_client
    from swarmlog.kafka.groups import committed_offset

    got = committed_offset(admin_client(settings), group=f"swarmlog.{settings.topic}.{agent}", topic=settings.topic)
    return -1 if got is None else got


def _wait_quiet(settings, seconds: float = 3.0, limit: float = 120.0, agents=AGENTS) -> None:
    """The log stopped growing and every agent has committed a position at its end."""
    deadline = time.monotonic() + limit
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        end = _log_end(settings)
        if end != last:
            last, since = end, time.monotonic()
        elif time.monotonic() - since >= seconds and all(_committed(settings, a) >= end for a in agents):
            return
        time.sleep(0.2)
    raise AssertionError("the swarm never went quiet")


def _wait_finished(settings, registry, chains: int = swarms.CHAINS, limit: float = 240.0) -> None:
    """Wait for the swarm's own end (every chain broadcast `finished`), then for quiet.

    Quiet alone cannot tell a finished swarm from one waiting for a restarting agent: the
    log is just as still. The swarm's completion condition can.
    """
    deadline = time.monotonic() + limit
    while True:
        done = {json.loads(rec["payload"]["body"])["chain"] for _, t, rec in _events(settings, registry)
                if t == "agent.message" and rec["payload"]["kind"] == "finished"}
        if len(done) >= chains:
            break
        assert time.monotonic() < deadline, f"only chains {sorted(done)} finished within {limit} s"
        time.sleep(0.5)
    _wait_quiet(settings, limit=limit)


def _wait_for_events(settings, n: int, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while _log_end(settings) < n:
        assert time.monotonic() < deadline, f"fewer than {n} events after {limit} s"
        time.sleep(0.1)


def _stop(procs: dict[str, subprocess.Popen]) -> dict[str, str]:
    """SIGTERM every agent; return the state hash each reported on its way out."""
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    hashes = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, f"{name} exited {p.returncode}: {err[-2000:]}"
        hashes.update(json.loads(out.strip().splitlines()[-1])["agents"])
    return hashes


def _events(settings, registry):
    return [(r.offset, r.event_type, r.record) for r in read_log(settings, registry)]


def _assert_no_duplicate_and_no_lost_step(settings, registry) -> None:
    events = _events(settings, registry)
    ids = Counter(rec["event_id"] for _, _, rec in events)
    assert [i for i, n in ids.items() if n > 1] == [], "an output was written twice"
    handled = {(rec["agent_id"], parse_step(rec["event_id"])[0]) for _, _, rec in events
               if parse_step(rec["event_id"]) is not None}
    hops = [(off, rec["to"]) for off, t, rec in events
            if t == "agent.message" and rec["payload"]["kind"] == "hop"]
    assert hops
    lost = [(off, to) for off, to in hops if (to, off) not in handled]
    assert lost == [], f"hops nobody handled: {lost}"


def test_live_multiprocess_runs_replay_to_identical_state_and_outputs_10_of_10(base_settings, registry):
    """Five agents, each its own OS process; ten runs; every run replays exactly."""
    for run in range(10):
        topic = new_topic_name(f"live{run}")
        from swarmlog.kafka.topic import create_topic

        create_topic(base_settings, topic)
        settings = base_settings.model_copy(update={"topic": topic})
        start_run(settings=settings, swarm=swarms.relay, run_id=f"live-{run}", seed=1000 + run)
        procs = {a: _spawn_agent(settings, "tests.swarms:relay", a) for a in AGENTS}
        _wait_finished(settings, registry)
        live = _stop(procs)
        result = replay_swarm(settings=settings, swarm=swarms.relay, registry=registry)
        assert result.divergences == [], f"run {run}: {result.first_divergence}"
        assert result.agents == live, f"run {run}: replayed state differs from the live state"
        assert sum(result.steps.values()) > swarms.CHAINS * swarms.TTL
        _assert_no_duplicate_and_no_lost_step(settings, registry)


def test_agent_killed_mid_run_restarts_without_duplicate_or_lost_step(settings, registry):
    start_run(settings=settings, swarm=swarms.relay_long, run_id="kill", seed=7)
    procs = {a: _spawn_agent(settings, "tests.swarms:relay_long", a) for a in AGENTS}
    _wait_for_events(settings, 200)
    before = _log_end(settings)
    procs["r2"].send_signal(signal.SIGKILL)
    procs["r2"].wait()
    mid = _log_end(settings)
    procs["r2"] = _spawn_agent(settings, "tests.swarms:relay_long", "r2")
    _wait_finished(settings, registry)
    live = _stop(procs)
    end = _log_end(settings)
    assert before >= 200 and end > mid, "the kill did not land mid-run"
    _assert_no_duplicate_and_no_lost_step(settings, registry)
    result = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry)
    assert result.divergences == []
    assert result.agents == live
    count, violations = check_causality(settings=settings, registry=registry)
    assert count > 0 and violations == []


def test_group_reset_to_zero_while_stopped_then_restart_rebuilds_without_writing_twice(settings, registry):
    from swarmlog.dev import kafka_tool_argv

    start_run(settings=settings, swarm=swarms.relay, run_id="reset", seed=3)
    first = {r.agent: r for r in run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)}
    events_before = len(_events(settings, registry))
    group = f"swarmlog.{settings.topic}.r1"
    argv = kafka_tool_argv("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", settings.bootstrap_servers, "--group", group,
                           "--topic", settings.topic, "--reset-offsets", "--to-earliest", "--execute")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "0" in proc.stdout
    # Restart r1 alone: it rebuilds from zero and writes nothing it already wrote.
    again = run_agents(settings=settings, swarm=swarms.relay, agents=["r1"], until_quiet=1.0)[0]
    assert again.state_hash == first["r1"].state_hash
    assert len(_events(settings, registry)) == events_before
    # ...and then continues live: a new input is handled exactly once.
    with EventLog(settings=settings, run_id="reset") as log:
        new_input = log.append("agent.message", {"kind": "hop", "body": json.dumps({"chain": 99, "ttl": 0})},
                               agent="operator", to="r1")
    run_agents(settings=settings, swarm=swarms.relay, agents=["r1"], until_quiet=1.0)
    run_agents(settings=settings, swarm=swarms.relay, agents=["r1"], until_quiet=1.0)  # and once more: idempotent
    outputs = [rec for _, _, rec in _events(settings, registry) if rec["event_id"].startswith(f"r1@{new_input}#")]
    assert [o["payload"]["kind"] for o in outputs if o["event_type"] == "agent.message"] == ["finished"]
    assert replay_swarm(settings=settings, swarm=swarms.relay, registry=registry).divergences == []


class _Clocky(Agent):
    @on("run.started")
    def start(self, ctx, event):
        self.state["t"] = time.time()


def test_a_handler_reading_the_clock_stops_the_agent_with_a_named_error(settings):
    swarm = Swarm(name="clocky", agents=lambda: [_Clocky("c")], code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="clock", seed=1)
    with pytest.raises(NondeterminismError) as err:
        run_agents(settings=settings, swarm=swarm, until_quiet=1.0)
    assert "time.time" in str(err.value) and "ctx.now()" in str(err.value)
    assert err.value.agent == "c"


def test_changed_code_replayed_against_the_log_says_where_it_first_diverges(settings, registry):
    start_run(settings=settings, swarm=swarms.relay, run_id="whatif", seed=11)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    same = replay_swarm(settings=settings, swarm=swarms.relay, registry=registry)
    changed = replay_swarm(settings=settings, swarm=swarms.relay_changed, registry=registry)
    assert same.divergences == [] and changed.divergences
    first = changed.first_divergence
    assert first.recorded["payload"]["kind"] == "hop" and first.replayed["payload"]["kind"] == "finished"
    # Every step before the first divergence is identical, so inputs before it match too.
    assert same.stream_hash == changed.stream_hash
    strict = None
    try:
        replay_swarm(settings=settings, swarm=swarms.relay_changed, registry=registry, strict=True)
    except NondeterminismError as exc:
        strict = exc
    assert strict is not None and strict.offset == first.offset and strict.agent == first.agent


def test_a_swarm_replay_split_across_processes_reports_what_one_process_reports(settings, registry):
    """`replay --swarm --workers N`: each process folds some agents over the whole log, read from the broker."""
    start_run(settings=settings, swarm=swarms.relay, run_id="split", seed=12)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)

    def cli(workers: int, swarm: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm", swarm, "--json",
                               "--workers", str(workers)], env=_env(settings), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode in (0, 4), proc.stderr
        return json.loads(proc.stdout)

    one, split = cli(1, "tests.swarms:relay"), cli(3, "tests.swarms:relay")
    assert split == one and not one["diverged"] and sum(one["states_checked"].values()) > 0
    changed_one = replay_swarm(settings=settings, swarm=swarms.relay_changed, registry=registry, workers=1)
    changed_split = replay_swarm(settings=settings, swarm=swarms.relay_changed, registry=registry, workers=4)
    assert changed_split.to_json() == changed_one.to_json() and changed_one.divergences
    assert [d.to_json() for d in changed_split.divergences] == [d.to_json() for d in changed_one.divergences]


def test_the_run_records_seed_and_code_version_and_refuses_a_second_run(settings, registry):
    from swarmlog.errors import SwarmlogError

    start_run(settings=settings, swarm=swarms.relay, run_id="one", seed=5)
    start_run(settings=settings, swarm=swarms.relay, run_id="one", seed=5)  # idempotent
    with pytest.raises(SwarmlogError, match="one topic holds one run"):
        start_run(settings=settings, swarm=swarms.relay, run_id="two", seed=6)
    (_, t, rec), = _events(settings, registry)
    assert t == "run.started" and rec["payload"]["seed"] == 5 and rec["payload"]["code_version"] == "relay-1"
    assert rec["payload"]["agents"] == AGENTS


def test_sigterm_finishes_the_transaction_and_exits_cleanly(settings, registry):
    start_run(settings=settings, swarm=swarms.relay_long, run_id="term", seed=9)
    procs = {a: _spawn_agent(settings, "tests.swarms:relay_long", a) for a in AGENTS}
    _wait_for_events(settings, 150)
    hashes = _stop(procs)  # mid-run: every agent commits its batch and reports its state
    assert set(hashes) == set(AGENTS)
    # The run is unfinished (hops were in flight), but what was committed replays exactly.
    result = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry)
    assert result.divergences == []


def test_a_swarm_is_not_quiet_while_an_agent_holds_an_open_transaction(settings, registry):
    """Found by CI on a just-started broker: the coordinator's first outputs were held back by a
    transaction coordinator still loading, the log end stood still for over a second, and the
    swarm was called quiet (and 'deadlocked') before its first step was even on the broker."""
    import threading
    from types import SimpleNamespace

    from swarmlog.kafka import KafkaBackend
    from swarmlog.runtime.runner import _QuietWatcher

    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "first step"}, agent="a")
    end = high_watermark(settings, settings.topic)
    caught_up = threading.Event()
    caught_up.set()
    worker = SimpleNamespace(core=SimpleNamespace(next_wall_due_ms=lambda: None), caught_up=caught_up,
                             eof_at=end, in_transaction=True, refused=None)
    watcher = _QuietWatcher(KafkaBackend(settings), settings.topic, [worker])  # type: ignore[list-item]
    stop = threading.Event()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert not watcher.quiet(0.2, stop), "quiet while a transaction is open"  # each look waits 0.2 s
    worker.in_transaction = False
    assert watcher.quiet(0.2, stop)


def test_an_agent_stopped_mid_step_commits_past_its_last_marker_and_shows_lag_0(settings, registry):
    """SIGTERM while a step runs: the agent finishes and commits the step, then reads its own outputs
    back and past the transaction's marker before it commits its position, so Kafka's own tools
    (kafka-consumer-groups) show the stopped, caught-up agent at lag 0, not behind."""
    from swarmlog.dev import kafka_tool_argv

    start_run(settings=settings, swarm=swarms.echo, run_id="lag", seed=4)
    agent = _spawn_agent(settings, "tests.swarms:echo", "e")
    with EventLog(settings=settings, run_id="lag") as log:
        ping = log.append("agent.message", {"kind": "ping", "body": "1"}, agent="operator", to="e")
    deadline = time.monotonic() + 60
    while _log_end(settings) <= ping + 1:  # the pong is in the open transaction; the step still runs
        assert time.monotonic() < deadline and agent.poll() is None, "the agent never answered"
        time.sleep(0.05)
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err[-2000:]
    group = f"swarmlog.{settings.topic}.e"
    argv = kafka_tool_argv("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", settings.bootstrap_servers, "--describe", "--group", group)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    (current, end, lag), = [tuple(map(int, cols[3:6])) for cols in map(str.split, proc.stdout.splitlines())
                            if cols[:2] == [group, settings.topic]]
    assert end == _log_end(settings) > ping + 3  # ping, pong, the effect's record, the commit marker
    assert (current, lag) == (end, 0), proc.stdout
