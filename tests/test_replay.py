"""Replay: state rebuilt from offset zero equals the live state, by fresh consumer or by group reset."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer

from swarmlog.demo import main as demo_main
from swarmlog.errors import GroupHasActiveMembers, GroupNotAtStart
from swarmlog.log import EventLog
from swarmlog.replay import Fold, replay
from swarmlog.reader import LogReader

from .conftest import subprocess_env


def _fill(settings, n=300):
    offsets = []
    with EventLog(settings=settings, run_id="replay") as log:
        log.append("run.started", {"swarm": "t", "seed": 7, "code_version": "test", "agents": ["a", "b", "c"]},
                   agent="driver")
        for i in range(n):
            log.produce("agent.message", {"kind": "k", "body": str(i)}, agent="abc"[i % 3],
                        to=None if i % 10 == 0 else "abc"[(i + 1) % 3])
        offsets = log.flush()
    return offsets


def _live_fold(settings, registry):
    """Fold the log as a live follower would: batch by batch as it arrives."""
    fold = Fold(registry=registry)
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches(batch_size=7):  # small batches: a different path through the reader
            fold.apply_batch(batch)
        return fold.result(reader.position.end_offset)


def test_state_rebuilt_from_offset_zero_equals_live_state_in_the_demo(base_settings, capsys):
    assert demo_main(settings=base_settings, agents=3, rounds=90) == 0
    out = capsys.readouterr().out
    assert out.count(" equal") >= 4 and "DIFFERENT" not in out


def test_replay_from_zero_matches_an_incremental_fold(settings, registry):
    _fill(settings)
    live = _live_fold(settings, registry)
    result = replay(settings=settings, registry=registry)
    assert result.events == 301
    assert result.agents == live.agents and result.stream_hash == live.stream_hash
    assert set(result.agents) == {"driver", "a", "b", "c"}


def test_replay_stops_at_an_offset(settings, registry):
    offsets = _fill(settings, n=100)
    stop = offsets[50]
    partial = replay(settings=settings, registry=registry, to=stop)
    assert partial.end_offset == stop and partial.events == 51  # run.started + 50 messages
    assert partial.agents != replay(settings=settings, registry=registry).agents


def test_group_replay_after_kafka_tools_reset_matches_a_fresh_replay(settings, registry):
    from swarmlog.dev import kafka_tool_argv

    _fill(settings)
    fresh = replay(settings=settings, registry=registry)
    group = f"replay-{settings.topic}"
    first = replay(settings=settings, registry=registry, group=group)
    assert first.agents == fresh.agents and first.stream_hash == fresh.stream_hash
    # The replay committed where it stopped; replaying without a reset is refused.
    with pytest.raises(GroupNotAtStart):
        replay(settings=settings, registry=registry, group=group, reset=False)
    # Reset with Kafka's own tool, as an operator would, then replay without resetting.
    argv = kafka_tool_argv("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", settings.bootstrap_servers, "--group", group,
                           "--topic", settings.topic, "--reset-offsets", "--to-earliest", "--execute")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    second = replay(settings=settings, registry=registry, group=group, reset=False)
    assert second.agents == fresh.agents and second.stream_hash == fresh.stream_hash
    assert second.end_offset == fresh.end_offset


def test_resetting_a_group_with_an_active_member_is_refused(settings, registry):
    _fill(settings, n=10)
    group = f"active-{settings.topic}"
    member = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": group,
                       "client.id": "busy-agent", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    member.subscribe([settings.topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "the member never joined"
        with pytest.raises(GroupHasActiveMembers) as err:
            replay(settings=settings, registry=registry, group=group)
        assert "busy-agent" in str(err.value) and "Stop its consumers" in str(err.value)
        proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--group", group],
                              env=subprocess_env(settings), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "active member" in proc.stderr
    finally:
        member.close()
    # Once the member has left, the same replay goes through.
    assert replay(settings=settings, registry=registry, group=group).events == 11


def test_replay_reports_garbage_with_its_offset_instead_of_crashing(settings, registry):
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "x"}, agent="a", to="b")
        log.produce_raw(b"garbage")
        log.flush()
        log.append("agent.message", {"kind": "k", "body": "y"}, agent="b", to="a")
    result = replay(settings=settings, registry=registry)
    assert result.events == 2
    assert [u.offset for u in result.undecodable] == [1]
    env = subprocess_env(settings)
    proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) >= {"end_offset", "events", "agents", "stream_hash"}
    assert doc["events"] == 2 and doc["end_offset"] == 3 and doc["undecodable"][0]["offset"] == 1
    assert doc["agents"] == result.agents and doc["stream_hash"] == result.stream_hash
    assert "offset 1" in proc.stderr
    strict = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--strict"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert strict.returncode == 3
