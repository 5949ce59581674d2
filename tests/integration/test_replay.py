"""Replay: state rebuilt from offset zero equals the live state, by fresh consumer or by group reset."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer
from fastavro.utils import generate_many

from swarmlog.errors import GroupHasActiveMembers, GroupNotAtStart
from swarmlog.events import Event
from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog
from swarmlog.log.hashing import state_hash
from swarmlog.replaying import Fold, replay
from swarmlog.replaying.ledger import Ledger
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog_connectors.demo import main as demo_main

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
        assert proc.returncode == 70 and "active member" in proc.stderr
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


class _LedgerByEvents(Ledger):
    """The ledger through the reducer protocol: a subclass, so the fold hands it Events."""

    def apply(self, states, event):
        assert isinstance(event, Event)
        super().apply(states, event)


def test_the_ledgers_fast_path_folds_exactly_like_the_reducer_protocol(settings, registry):
    _fill(settings, n=100)
    fast = replay(settings=settings, registry=registry)
    by_events = replay(settings=settings, registry=registry, reducer=_LedgerByEvents())
    assert fast.events == by_events.events == 101
    assert fast.agents == by_events.agents and fast.stream_hash == by_events.stream_hash


def _ledger_hashes(events):
    states = {}
    ledger = Ledger()
    for offset, (agent, to, payload) in enumerate(events):
        ledger.apply(states, Event(offset, "agent.message", 3, f"e{offset}", "r", agent, to, [], payload))
    return {agent: state_hash(s) for agent, s in states.items()}


_RUN = [("a", "b", {"kind": "k", "body": "1"}), ("b", "a", {"kind": "k", "body": "2"}),
        ("a", None, {"kind": "k", "body": "3"}), ("b", "a", {"kind": "k", "body": "4"})]


@pytest.mark.parametrize("change", ["changed", "missing", "duplicated", "reordered"])
def test_a_changed_missing_duplicated_or_reordered_event_changes_the_agents_hash(change):
    run = list(_RUN)
    if change == "changed":
        run[1] = ("b", "a", {"kind": "k", "body": "2!"})
    elif change == "missing":
        del run[1]
    elif change == "duplicated":
        run.insert(1, run[1])
    else:
        run[1], run[3] = run[3], run[1]
    assert _ledger_hashes(run)["a"] != _ledger_hashes(_RUN)["a"]


def test_payloads_decode_in_the_newest_schemas_field_order_from_every_writer(registry):
    # The ledger's mark encodes a payload in its dict's order (swarmlog.replaying.ledger.mark_json), so the
    # same event written by an old and by the newest writer marks the same only if the
    # decoder builds both dicts in one order. A new version that reorders fields, or adds
    # one anywhere but at the end, breaks that; this says so before any hash does.
    decoder = Decoder(registry)
    for event_type in registry.event_types():
        newest = [f["name"] for f in registry.latest(event_type).payload_schema["fields"]]
        for version in range(1, registry.latest(event_type).version + 1):
            writer = registry.get(event_type, version)
            for i, record in enumerate(generate_many(writer.schema, 5)):
                record.update(event_type=event_type, schema_version=version)
                _, decoded = decoder.decode(Encoder(writer).encode(record), i)
                assert list(decoded["payload"]) == newest, (event_type, version)


def test_a_broadcast_concerns_every_agent_already_seen():
    hashes = _ledger_hashes(_RUN[:2])
    after = _ledger_hashes(_RUN[:2] + [("c", None, {"kind": "k", "body": "hello"})])
    assert after["a"] != hashes["a"] and after["b"] != hashes["b"] and "c" in after
