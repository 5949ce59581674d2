"""What an agent's fold names instead of handling (runtime/anomalies.py, issue 28 items 1-3, 5): the
engine's decisions on the in-memory log, pure logic — the same agents as processes on Kafka are the
fault suite's rows (tests/faults/test_edges.py).

A repeated event id is named and never handled twice, and never makes the agent that wrote the first
"diverge"; an input no schema reads is named and skipped; one of a newer schema parks the agent, which
goes on once it can read it; a cause the log lost stops the fold, naming the offset. Live agents,
``replay --swarm`` and the debugger's fold name the same messages at the same offsets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmlog.debug import Session
from swarmlog.errors import HistoryHoles
from swarmlog.log.append import EventLog
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import MESSAGE, route
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.anomalies import NEWER_SCHEMA, REPEATED, UNREADABLE, Presence, Watch
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import first_pass
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .. import swarms
from ..conftest import newer_schemas, unchecked_event

SETTINGS = Settings(topic="t", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")


def _ran(seed: int = 7) -> InMemoryLog:
    backend = InMemoryLog()
    backend.create_topic("t")
    start_run(settings=SETTINGS, swarm=swarms.relay, run_id="r", seed=seed, backend=backend)
    run_agents(settings=SETTINGS, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    return backend


def _decoded(backend: InMemoryLog, registry: SchemaRegistry) -> list[tuple[int, str, dict]]:
    decoder = Decoder(registry)
    out = []
    for m in backend.messages("t"):
        try:
            writer, rec = decoder.decode(m.value(), m.offset())
        except Exception:  # noqa: BLE001 - not an event: the cases name it apart
            continue
        out.append((m.offset(), writer.event_type, rec))
    return out


def _resend(backend: InMemoryLog, offset: int) -> int:
    """Another producer re-sends the message at ``offset`` byte for byte (a copy tool)."""
    m = next(m for m in backend.messages("t") if m.offset() == offset)
    with EventLog(settings=SETTINGS, backend=backend) as log:
        log.produce_raw(m.value(), key=m.key(), headers=m.headers())
        return log.flush()[0]


def test_a_repeated_event_id_is_handled_once_and_its_writer_restarts_without_a_divergence(registry):
    backend = _ran()
    hop = next((o, rec) for o, t, rec in _decoded(backend, registry)
               if t == MESSAGE and rec["payload"]["kind"] == "hop" and rec["agent_id"] == "r1")
    copy = _resend(backend, hop[0])
    # Every agent starts again (restart is rebuild): the writer reads its own output twice, the
    # recipient its input twice. Before issue 28 the recipient handled it again and the writer's
    # every restart stopped with "the log has an output this step no longer writes".
    run_agents(settings=SETTINGS, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    handled = [o for o, _, rec in _decoded(backend, registry) if rec["causes"][:1] == [copy]]
    assert handled == []
    result = replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=registry, backend=backend)
    assert result.divergences == []
    named = {(a.offset, a.agent, a.kind, a.first) for a in result.anomalies}
    assert named == {(copy, "r1", REPEATED, hop[0]), (copy, hop[1]["to"], REPEATED, hop[0])}
    debugged = Session(settings=SETTINGS, swarm=swarms.relay, backend=backend, registry=registry)
    assert debugged.first_divergence() is None


def test_an_input_no_schema_reads_is_named_and_skipped_and_the_agent_goes_on(registry):
    backend = _ran()
    value, key, headers = unchecked_event(registry, MESSAGE, {"kind": "hop", "body": json.dumps({"chain": 9,
                                                                                                 "ttl": 0})},
                                          agent="r0", to="r3", run_id="r")
    with EventLog(settings=SETTINGS, backend=backend) as log:
        log.produce_raw(value + b"\x00trailing", key=key, headers=headers)
        bad = log.flush()[0]
        log.append(MESSAGE, {"kind": "hop", "body": json.dumps({"chain": 8, "ttl": 0})}, agent="tester", to="r3",
                   run_id="r")
    run_agents(settings=SETTINGS, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    finished = [json.loads(rec["payload"]["body"])["chain"] for _, t, rec in _decoded(backend, registry)
                if t == MESSAGE and rec["payload"]["kind"] == "finished"]
    assert 8 in finished and 9 not in finished  # the valid one after it was handled; the bad one was not
    result = replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=registry, backend=backend)
    assert result.divergences == []
    [(offset, agent, kind, detail)] = [(a.offset, a.agent, a.kind, a.detail) for a in result.anomalies]
    assert (offset, agent, kind) == (bad, "r3", UNREADABLE) and "byte(s) follow it" in detail


def test_an_input_of_a_newer_schema_parks_its_agent_which_goes_on_once_upgraded(registry, tmp_path: Path):
    backend = _ran()
    newer = SchemaRegistry.load([newer_schemas(tmp_path)])
    with EventLog(settings=SETTINGS, backend=backend, registry=newer, run_id="r") as log:
        at = log.append(MESSAGE, {"kind": "hop", "body": json.dumps({"chain": 7, "ttl": 0}), "trace": "v4"},
                        agent="writer-v4", to="r2")
    decoder = Decoder(registry)
    histories, _ = first_pass(backend=backend, topic="t", decoder=decoder, agents=["r2"])
    core = AgentCore(agent=swarms.relay.agent("r2"), decoder=decoder, history=histories["r2"], live_sink=None,
                     strict=False)
    for m in backend.messages("t"):
        core.process(m, decoder.envelope_route(m))
    parked = core.watch.parked
    assert parked is not None and (parked.offset, parked.kind) == (at, NEWER_SCHEMA)
    assert "a newer agent.message (v4) than this reader knows (up to v3)" in parked.detail
    old = replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=registry, backend=backend)
    assert [(a.offset, a.agent, a.kind) for a in old.anomalies] == [(at, "r2", NEWER_SCHEMA)]
    assert old.unverified_from.get("r2") == at and old.divergences == []
    # Upgraded: the agents read it, r2 handles it (chain 7 finishes), and the replay on v4 is clean.
    run_agents(settings=SETTINGS, swarm=swarms.relay, until_quiet=0.3, backend=backend, registry=newer)
    finished = [json.loads(rec["payload"]["body"])["chain"] for _, t, rec in _decoded(backend, newer)
                if t == MESSAGE and rec["payload"]["kind"] == "finished"]
    assert 7 in finished
    new = replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=newer, backend=backend)
    assert new.divergences == [] and new.anomalies == []


def test_a_cause_the_log_lost_stops_the_fold_naming_the_offset(registry):
    backend = _ran()
    events = _decoded(backend, registry)
    held = {o for o, _, _ in events}
    empty = next(o for o in range(events[-1][0]) if o not in held and o > 5)  # a transaction marker's offset
    value, key, headers = unchecked_event(registry, MESSAGE, {"kind": "finished", "body": json.dumps({"chain": 0,
                                                                                                     "by": "x"})},
                                          agent="r0", to="r4", causes=[empty], run_id="r")
    with EventLog(settings=SETTINGS, backend=backend) as log:
        log.produce_raw(value, key=key, headers=headers)
        at = log.flush()[0]
    with pytest.raises(HistoryHoles) as info:
        replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=registry, backend=backend)
    assert info.value.holes == {empty: at}
    with pytest.raises(HistoryHoles):
        run_agents(settings=SETTINGS, swarm=swarms.relay, agents=["r4"], until_quiet=0.3, backend=backend)


def test_presence_tells_a_lost_cause_only_inside_the_range_read():
    p = Presence(start=None)
    for off in (10, 11, 13):
        p.mark(off)

    class E:
        offset = 20
        causes = [3, 11, 12, 13]

    assert p.missing(E()) == [12]  # 3 is before what was read (a snapshot's position): nothing said
    w = Watch(agent="a", presence=p)
    w.restore(w.capture())
    assert w.anomalies == [] and w.parked is None


def test_a_long_run_of_copies_is_named_without_a_line_each(registry, caplog):
    from swarmlog.events import Event

    w = Watch(agent="a", presence=Presence())
    first = Event(1, MESSAGE, 3, "e-1", "r", "b", "a", [], {}, 0)
    assert not w.repeated(first)
    with caplog.at_level("WARNING", logger="swarmlog.runtime.anomalies"):
        for off in range(2, 3002):
            assert w.repeated(first._replace(offset=off))
    assert w.counts == {REPEATED: 3000} and len(caplog.records) == 20 + 3  # 20 lines, then one every thousand
    assert {a.first for a in w.anomalies} == {1}


def _step_event(offset: int, writer: str, step: int, index: int = 0):
    from swarmlog.events import Event

    return Event(offset, MESSAGE, 3, f"{writer}@{step}#{index}", "r", writer, "a", [], {}, 0)


def test_the_ids_an_agent_remembers_are_bounded_and_a_copy_of_a_step_it_no_longer_keeps_is_still_named(
        monkeypatch):
    """A run's length must not grow what a fold (and each checkpoint of it) remembers of the ids it took: of
    the steps' ids only the latest RECENT_IDS are kept, and an id of an earlier step of its writer than one
    dropped was taken before (a writer's steps come in order)."""
    from swarmlog.runtime import anomalies

    monkeypatch.setattr(anomalies, "RECENT_IDS", 8)
    w = Watch(agent="a", presence=Presence())
    for step in range(100):
        assert w.take(_step_event(step, "b", step))
    doc = w.capture()
    assert len(doc["recent"]) == 8 and doc["ids"] == [] and doc["floor"] == {"b": 91}
    assert not w.take(_step_event(500, "b", 95))  # kept: named with the offset of the first
    assert not w.take(_step_event(501, "b", 3))  # dropped long ago: still a copy
    assert [(a.offset, a.kind, a.first) for a in w.anomalies] == [(500, REPEATED, 95), (501, REPEATED, None)]
    restored = Watch(agent="a", presence=Presence())
    restored.restore(doc)
    assert not restored.take(_step_event(502, "b", 3)) and not restored.take(_step_event(503, "b", 96))
    assert restored.take(_step_event(504, "b", 100))


def test_an_id_of_a_step_still_writing_is_not_taken_for_a_copy_when_its_first_ids_were_dropped(monkeypatch):
    # One writer's step may write many ids, its transaction interleaved with other writers': the first ids
    # of step 10 dropped from the kept ones (the floor is 10) say nothing of step 10's later ids.
    from swarmlog.runtime import anomalies

    monkeypatch.setattr(anomalies, "RECENT_IDS", 4)
    w = Watch(agent="a", presence=Presence())
    assert w.take(_step_event(0, "b", 10, 0))
    for i in range(1, 6):
        assert w.take(_step_event(i, "c", i))
    assert w.take(_step_event(6, "b", 10, 1)) and w.take(_step_event(7, "b", 11, 0))
    assert w.anomalies == []


def test_appended_input_and_ids_of_another_writers_grammar_are_kept_whole(monkeypatch):
    # An id a client chose, even one that looks like an agent's step, has no order to lean on.
    from swarmlog.events import Event
    from swarmlog.runtime import anomalies

    monkeypatch.setattr(anomalies, "RECENT_IDS", 2)
    w = Watch(agent="a", presence=Presence())
    ids = [f"q-{i}" for i in range(10)] + ["b@7#0"]  # the last looks like b's step 7's, written by "client"
    for off, event_id in enumerate(ids):
        assert w.take(Event(off, MESSAGE, 3, event_id, "r", "client", "a", [], {}, 0))
    assert not w.take(Event(20, MESSAGE, 3, "q-0", "r", "client", "a", [], {}, 0))
    assert not w.take(Event(21, MESSAGE, 3, "b@7#0", "r", "client", "a", [], {}, 0))
    assert [a.first for a in w.anomalies] == [0, 10]


def test_a_snapshot_that_kept_every_id_is_restored_into_the_bounded_memory(monkeypatch):
    # A checkpoint written by a swarmlog that kept every id ({"ids": [...]}, no "recent"): still honoured.
    from swarmlog.runtime import anomalies

    monkeypatch.setattr(anomalies, "RECENT_IDS", 4)
    w = Watch(agent="a", presence=Presence())
    w.restore({"ids": [[f"b@{s}#0", s] for s in range(10)] + [["q-1", 10]], "anomalies": [], "parked": None})
    assert len(w.capture()["recent"]) == 4
    assert not w.take(_step_event(30, "b", 2)) and not w.take(_step_event(31, "b", 9))
    assert w.take(_step_event(32, "b", 10))
    assert [a.first for a in w.anomalies] == [None, 9]


def test_the_routes_of_a_bad_input_come_from_its_headers():
    # What makes an unreadable input "addressed" to an agent: its routing headers, the only say there is.
    headers = [("sl.type", b"agent.message"), ("sl.v", b"4"), ("sl.agent", b"w"), ("sl.to", b"r2")]
    assert route(headers)[:3] == ("agent.message", "w", "r2")


def test_what_compaction_leaves_of_a_swarm_names_its_holes_though_no_cause_is_left(registry):
    """Compaction keeps each key's newest message: for a swarm, run.started and each agent's last state
    digest record, which names no cause. The digest's last step is an offset that held an input: gone, it
    is a hole — for the engine (replay --swarm, a restarted agent), the plain replay and check."""
    from swarmlog.errors import HistoryHoles as Holes
    from swarmlog.replaying import replay
    from swarmlog.replaying.causality import check_causality

    backend = _ran()
    newest: dict[bytes | None, object] = {}
    for m in backend.messages("t"):
        newest[m.key()] = m  # what the log cleaner keeps
    kept = sorted(newest.values(), key=lambda m: m.offset())
    backend.create_copy("compacted", kept, end=backend.watermarks("t")[1])
    compacted = SETTINGS.model_copy(update={"topic": "compacted"})
    with pytest.raises(Holes):
        replay_swarm(settings=compacted, swarm=swarms.relay, registry=registry, backend=backend)
    with pytest.raises(Holes):
        replay(settings=compacted, registry=registry, backend=backend)
    _, found = check_causality(settings=compacted, registry=registry, backend=backend)
    assert [v.rule for v in found if v.section == "history"].count("hole") >= 1
    workers: list = []
    with pytest.raises(Holes):
        run_agents(settings=compacted, swarm=swarms.relay, agents=["r1", "r2"], until_quiet=0.3, backend=backend,
                   on_started=workers.extend)
    # Parked, not crashed: up and not ready, saying why, and no crash that stops the other agents with it (a
    # supervisor would restart the process into the same holes).
    parked = {w.agent.name: w.refused for w in workers if w.refused is not None}
    assert parked and all("has lost events" in why for why in parked.values()), parked


def test_check_lets_a_logical_timer_fire_during_a_message_that_is_not_an_event(registry):
    """A logical timer counts every message, and fires during the step of the one that made it due —
    garbage too; that offset is its firing's second cause, not a missing one."""
    from swarmlog.log.protocol import RUN_STARTED, TIMER_FIRED, TIMER_SET
    from swarmlog.replaying.causality import check_causality

    backend = InMemoryLog()
    backend.create_topic("t")
    events = [(RUN_STARTED, {"swarm": "s", "seed": 1, "code_version": "c", "agents": ["a"], "hash_seed": None,
                             "hash_algorithm": None}, "swarmlog", None, [], "run@r"),
              (TIMER_SET, {"name": "tick", "after_events": 1, "after_ms": None}, "a", "a", [0], "a@0#0"),
              None,  # a message that is not an event
              (TIMER_FIRED, {"name": "tick", "set_offset": 1, "clock": "events"}, "a", "a", [1, 2], "a@2#0")]
    with EventLog(settings=SETTINGS, backend=backend) as log:
        for e in events:
            if e is None:
                log.produce_raw(b"garbage")
                continue
            etype, payload, agent, to, causes, event_id = e
            value, key, headers = unchecked_event(registry, etype, payload, agent=agent, to=to, causes=causes,
                                                  run_id="r", event_id=event_id)
            log.produce_raw(value, key=key, headers=headers)
        assert log.flush() == [0, 1, 2, 3]
    _, found = check_causality(settings=SETTINGS, registry=registry, backend=backend)
    assert [(v.offset, v.rule) for v in found] == [(2, "unreadable")]


def test_a_parked_agent_still_checks_the_outputs_of_its_steps_before_the_input_it_parks_at(registry, tmp_path: Path):
    """A step's transaction may commit after a newer schema's input was appended (a slow step, on Kafka):
    the agent parks at that input, and its earlier step's outputs, read after it, are still checked
    against the step — neither left pending as "never written" nor taken for outputs of a later step.
    (The fold contract's probe swarm: no logical timer, which counts every message, to be moved by the
    input put in afterwards.)"""
    from swarmlog.log.memory import MemoryMessage
    from swarmlog.log.protocol import parse_step

    from ..contract import probes

    backend = InMemoryLog()
    backend.create_topic("t")
    start_run(settings=SETTINGS, swarm=probes.probe_clean, run_id="r", seed=3, backend=backend)
    run_agents(settings=SETTINGS, swarm=probes.probe_clean, until_quiet=0.3, backend=backend)
    messages = list(backend.messages("t"))
    held = {m.offset() for m in messages}
    decoded = _decoded(backend, registry)
    # q's first note, and the offset that holds nothing (p's transaction marker) before q's ack of it: the
    # newer input goes there, between the step and what it wrote.
    (note,) = [o for o, t, rec in decoded if t == MESSAGE and rec["to"] == "q" and rec["payload"]["body"] == "1"]
    ack = min(o for o, _, rec in decoded
              if rec["agent_id"] == "q" and (parse_step(rec["event_id"]) or (-1,))[0] == note)
    (gap,) = [g for g in range(note + 1, ack) if g not in held]
    newer = SchemaRegistry.load([newer_schemas(tmp_path)])
    value, key, headers = unchecked_event(newer, MESSAGE, {"kind": "note", "body": "v4", "trace": "v4"},
                                          agent="writer-v4", to="q", run_id="r")
    upgraded = sorted([*messages, MemoryMessage(gap, value, key, headers, 0)], key=lambda m: m.offset())
    backend.create_copy("upgraded", upgraded, end=backend.watermarks("t")[1])
    settings = SETTINGS.model_copy(update={"topic": "upgraded"})
    for workers in (1, 2):
        result = replay_swarm(settings=settings, swarm=probes.probe_clean, registry=registry, backend=backend,
                              workers=workers)
        assert result.divergences == [], result.divergences[:1]
        assert [(a.offset, a.agent, a.kind) for a in result.anomalies] == [(gap, "q", NEWER_SCHEMA)]
        assert result.unverified_from["q"] == gap
    replayed = Session(settings=settings, swarm=probes.probe_clean, backend=backend, registry=registry,
                       snapshots=False).replay()
    assert replayed.divergences == [] and [(a.offset, a.kind) for a in replayed.anomalies] == [(gap, NEWER_SCHEMA)]


def test_a_parked_live_agent_says_so_and_commits_no_position_past_the_input(registry, tmp_path: Path):
    """What an operator sees of a parked agent (its pod's /readyz and metrics serve these): readiness names
    the offset and what to upgrade, swarmlog_agent_parked is 1, the anomaly is counted; its group's position
    stays at the input, so its next life — upgraded — reads it again."""
    from swarmlog.log.protocol import agent_group

    backend = _ran()
    newer = SchemaRegistry.load([newer_schemas(tmp_path)])
    with EventLog(settings=SETTINGS, backend=backend, registry=newer, run_id="r") as log:
        at = log.append(MESSAGE, {"kind": "hop", "body": json.dumps({"chain": 7, "ttl": 0}), "trace": "v4"},
                        agent="writer-v4", to="r2")
    started: list = []
    run_agents(settings=SETTINGS, swarm=swarms.relay, agents=["r2"], until_quiet=0.3, backend=backend,
               on_started=started.extend)
    (worker,) = started
    said = worker.readiness()
    assert said is not None and f"parked at offset {at}" in said and "a newer agent.message (v4)" in said
    families = {f.name: f.samples for f in worker.metric_families()}
    assert families["swarmlog_agent_parked"] == [(("r2",), 1.0)]
    assert (("r2", NEWER_SCHEMA), 1) in families["swarmlog_agent_anomalies"]
    assert backend.committed(agent_group("t", "r2"), "t") == at
    # Upgraded, it reads the input and is ready: nothing was lost.
    started.clear()
    run_agents(settings=SETTINGS, swarm=swarms.relay, agents=["r2"], until_quiet=0.3, backend=backend,
               registry=newer, on_started=started.extend)
    (worker,) = started
    assert worker.readiness() is None
    assert {f.name: f.samples for f in worker.metric_families()}["swarmlog_agent_parked"] == [(("r2",), 0.0)]
    assert backend.committed(agent_group("t", "r2"), "t") > at


def test_an_own_record_of_a_newer_schema_parks_the_fold_at_its_step_and_is_no_divergence(registry, tmp_path: Path):
    """A replay on the old schemas of a run whose agents were upgraded meets an agent's own output written
    by its newer version: what that step did cannot be checked — the fold parks at the step (named, the
    agent unverified from there), never "the step now writes an event the log does not have"."""
    from swarmlog.log.memory import MemoryMessage
    from swarmlog.log.protocol import parse_step

    from ..contract import probes

    backend = InMemoryLog()
    backend.create_topic("t")
    start_run(settings=SETTINGS, swarm=probes.probe_clean, run_id="r", seed=3, backend=backend)
    run_agents(settings=SETTINGS, swarm=probes.probe_clean, until_quiet=0.3, backend=backend)
    decoded = {o: rec for o, _, rec in _decoded(backend, registry)}
    (note,) = [o for o, rec in decoded.items() if rec["to"] == "q" and rec["payload"].get("body") == "1"]
    (ack,) = [o for o, rec in decoded.items() if rec["agent_id"] == "q" and (parse_step(rec["event_id"]) or (-1,))[0]
              == note]
    rec = decoded[ack]
    newer = SchemaRegistry.load([newer_schemas(tmp_path)])
    value, key, headers = unchecked_event(newer, MESSAGE, {**rec["payload"], "trace": "v4"}, agent="q", to=rec["to"],
                                          causes=rec["causes"], run_id="r", event_id=rec["event_id"])
    upgraded = [MemoryMessage(ack, value, key, headers, 0) if m.offset() == ack else m for m in backend.messages("t")]
    backend.create_copy("upgraded", upgraded, end=backend.watermarks("t")[1])
    settings = SETTINGS.model_copy(update={"topic": "upgraded"})
    for workers in (1, 2):
        result = replay_swarm(settings=settings, swarm=probes.probe_clean, registry=registry, backend=backend,
                              workers=workers)
        assert result.divergences == [], result.divergences[:1]
        # q at its step (its own record), p at its input (the same message: the ack is addressed to p).
        assert [(a.offset, a.agent, a.kind) for a in result.anomalies] == [(note, "q", NEWER_SCHEMA),
                                                                            (ack, "p", NEWER_SCHEMA)]
        assert f"own record at offset {ack}" in result.anomalies[0].detail
        assert result.unverified_from["q"] == note and result.unverified_from["p"] == ack


def _copies(n: int) -> Watch:
    """A watch that took one appended input and then ``n`` copies of it."""
    from swarmlog.events import Event

    watch = Watch(agent="w", presence=Presence(topic="t"))
    for off in range(n + 1):
        event = Event(offset=off, event_type=MESSAGE, version=3, event_id="client-1", run_id="r", agent_id="client",
                      to="w", causes=[], payload={"kind": "k", "body": ""})
        assert watch.take(event) is (off == 0)
    return watch


def test_ten_thousand_copies_keep_a_bounded_list_and_capture_and_exact_counts():
    from swarmlog.runtime._worker import AgentWorker
    from swarmlog.runtime.anomalies import KEPT_ANOMALIES

    watch = _copies(10_000)
    assert watch.counts == {REPEATED: 10_000} and watch.named == 10_000
    kept = watch.anomalies
    # The first copy, and the latest KEPT_ANOMALIES: what a report lists; the rest are counted.
    assert [a.offset for a in kept] == [1, *range(10_001 - KEPT_ANOMALIES, 10_001)]
    assert watch.omitted == 10_000 - len(kept) and all(a.first == 0 for a in kept)
    captured = json.loads(json.dumps(watch.capture()))
    assert len(captured["anomalies"]) == len(kept) and captured["anomaly_counts"] == {REPEATED: 10_000}
    # Twice the copies, the same capture's size: bounded, not a list as long as the run.
    assert len(json.dumps(_copies(20_000).capture())) < len(json.dumps(captured)) * 1.01
    restored = Watch(agent="w", presence=Presence(topic="t"))
    restored.restore(captured)
    assert restored.counts == watch.counts and restored.anomalies == kept
    # The metrics read the counts.
    core = type("Core", (), {"watch": watch})()
    assert AgentWorker._anomaly_counts(core) == {REPEATED: 10_000, UNREADABLE: 0, NEWER_SCHEMA: 0}  # type: ignore[arg-type]


def test_a_checkpoint_that_kept_every_anomaly_still_restores_with_exact_counts():
    from swarmlog.runtime.anomalies import KEPT_ANOMALIES

    old = _copies(3_000).capture()
    old["anomalies"] = [[off, "w", REPEATED, "a copy", 0] for off in range(1, 3_001)]  # as swarmlog kept them all
    del old["anomaly_counts"]
    restored = Watch(agent="w", presence=Presence(topic="t"))
    restored.restore(old)
    assert restored.counts == {REPEATED: 3_000}
    assert [a.offset for a in restored.anomalies] == [1, *range(3_001 - KEPT_ANOMALIES, 3_001)]


def test_replay_of_a_swarm_counts_every_anomaly_and_lists_the_kept_ones(registry):
    from swarmlog.replaying.report import swarm_report
    from swarmlog.runtime.anomalies import KEPT_ANOMALIES

    backend = _ran()
    hop = next(o for o, t, rec in _decoded(backend, registry)
               if t == MESSAGE and rec["payload"]["kind"] == "hop" and rec["agent_id"] == "r1")
    n = KEPT_ANOMALIES + 200
    m = next(m for m in backend.messages("t") if m.offset() == hop)
    with EventLog(settings=SETTINGS, backend=backend) as log:
        for _ in range(n):
            log.produce_raw(m.value(), key=m.key(), headers=m.headers())
        log.flush()
    result = replay_swarm(settings=SETTINGS, swarm=swarms.relay, registry=registry, backend=backend, workers=1)
    assert result.divergences == []
    # The writer and the recipient each name every copy; each keeps the first and its latest KEPT_ANOMALIES.
    assert len(result.anomalies) == 2 * (KEPT_ANOMALIES + 1)
    assert result.anomalies_omitted == 2 * (n - KEPT_ANOMALIES - 1)
    report = swarm_report(result, swarm="relay", topic="t", group=None, token=None)
    assert report["anomaly_count"] == 2 * n and report["anomalies_omitted"] == result.anomalies_omitted
    assert len(report["anomalies"]) == 100  # the report's shape: the first ones, the count says how many


def test_presence_says_which_offsets_of_its_range_held_a_message_across_byte_and_block_edges():
    p = Presence(start=None)
    held = {5, 6, 12, 13, 20, 70_000, 70_007, 70_008}
    for off in sorted(held):
        p.mark(off)
    for off in range(0, 70_020):
        assert p.holds(off) == (None if off < 5 else off in held), off
    assert p.absent([4, 5, 7, 12, 14, 70_007, 70_009, 80_000], 75_000) == [7, 14, 70_009]
    assert p.nbytes * 8 >= 70_008 - 5 and p.nbytes < 70_008 // 4  # bits, not bytes
