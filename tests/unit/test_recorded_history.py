"""The recorded-history seam (``runtime/history.py``) on the in-memory log: whichever way it is read, it
tells a fold the same thing.

A fold asks an agent's history for a step's effects and digest, the agent's last recorded step and how
far it got. The history answers by a first pass (a live agent's start) or by reading ahead of the fold
only as far as a step needs (a replay, the debugger), from offset zero or a checkpoint's position, never
past a cut. The oracle is a first pass over the whole log; every other way must agree with it for every
step it covers.
"""

from __future__ import annotations

from typing import Any

import pytest

from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import RECORDED_EFFECTS, STATE_DIGEST, agent_group, output_id, parse_step, route
from swarmlog.runtime import history as history_module
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.digests import DigestRecord
from swarmlog.runtime.history import NO_LIVE_STEPS, LogHistory, first_pass, steps_past
from swarmlog.schema.codec import Decoder
from swarmlog.settings import Settings

from .. import swarms

AGENTS = swarms._names()


@pytest.fixture(scope="module")
def relay_log(registry_module: Any) -> tuple[InMemoryLog, str, Decoder]:
    """A real run of a 5-agent swarm (effects, random draws, logical timers, broadcasts, digests on)."""
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarms.relay_long, run_id="h", seed=17, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay_long, until_quiet=0.3, backend=backend)
    return backend, "relay", Decoder(registry_module)


@pytest.fixture(scope="module")
def registry_module() -> Any:
    from swarmlog.schema.registry import SchemaRegistry

    return SchemaRegistry.load(Settings().schema_dirs())


def _recorded(backend: InMemoryLog, topic: str, decoder: Decoder) -> dict[str, Any]:
    """What the log holds, read plainly: per agent its effects (id -> offset), digests (step -> digest),
    highest step of any record."""
    out: dict[str, Any] = {a: {"effects": {}, "digests": {}, "top": -1} for a in AGENTS}
    for m in backend.messages(topic):
        writer, rec = decoder.decode(m.value(), m.offset())
        mine = out.get(rec["agent_id"])
        if mine is None:
            continue
        step = route(m.headers()).step
        if step is not None:
            mine["top"] = max(mine["top"], step)
        if writer.event_type == STATE_DIGEST:
            record = DigestRecord.from_payload(rec["payload"])
            mine["digests"].update(zip(record.steps, record.digests, strict=True))
        elif writer.event_type in RECORDED_EFFECTS and parse_step(rec["event_id"]) is not None:
            mine["effects"][rec["event_id"]] = m.offset()
    return out


def test_a_live_history_ends_at_each_agents_last_recorded_step_and_a_replays_nowhere(relay_log):
    backend, topic, decoder = relay_log
    recorded = _recorded(backend, topic, decoder)
    live, read_to = first_pass(backend=backend, topic=topic, decoder=decoder, agents=AGENTS)
    assert read_to == backend.watermarks(topic)[1]  # past the last transaction's marker: where it catches up
    for a in AGENTS:
        assert recorded[a]["effects"] and recorded[a]["digests"]
        assert live[a].last_step == recorded[a]["top"]
        assert live[a].reach() == NO_LIVE_STEPS and not live[a].past_cut(0)  # a live agent got everywhere it is
    replay = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=AGENTS)
    assert all(replay.agent(a).last_step == NO_LIVE_STEPS for a in AGENTS)  # every recorded step is history


@pytest.mark.parametrize("batch,kept,alone", [(1, 0, 1), (7, 3, 5), (100, 50_000, 500)],
                         ids=["nothing-kept", "a-little-kept", "all-kept"])
def test_reading_ahead_tells_each_step_what_a_first_pass_tells_it(relay_log, monkeypatch, batch, kept, alone):
    # The fold asks, as it reaches each step's input, for the step's effects and then its digest: the
    # history reads on from there only as far as it must (its own reader past AHEAD_KEPT kept messages).
    backend, topic, decoder = relay_log
    recorded = _recorded(backend, topic, decoder)
    monkeypatch.setattr(history_module, "AHEAD_KEPT", kept)
    monkeypatch.setattr(history_module, "AHEAD_BATCH", alone)
    ahead = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=AGENTS)
    asked = 0
    with backend.reader(topic) as reader:
        reader.assign(0)
        for msgs, _ in ahead.batches(reader.batches(batch_size=batch)):
            for m in msgs:
                for a in AGENTS:
                    mine = recorded[a]
                    for event_id in [e for e in mine["effects"] if parse_step(e)[0] == m.offset()]:
                        assert ahead.agent(a).effect(event_id).offset == mine["effects"][event_id]
                        asked += 1
                    if m.offset() in mine["digests"]:
                        assert ahead.agent(a).digest_at(m.offset()) == mine["digests"][m.offset()]
                        asked += 1
                    # A step that called nothing: no record, however far it read.
                    assert ahead.agent(a).effect(output_id(a, m.offset(), 99)) is None
    ahead.close()
    assert asked == sum(len(r["effects"]) + len(r["digests"]) for r in recorded.values())
    assert ahead.done and ahead.max_step == {a: recorded[a]["top"] for a in AGENTS}


def test_a_history_started_at_a_checkpoint_answers_every_later_step_as_one_from_zero(relay_log):
    # A checkpoint holds everything its agent folded before its position: the history from there is
    # the rest, the same parameter for the debugger's snapshots and a live agent's restart.
    backend, topic, decoder = relay_log
    recorded = _recorded(backend, topic, decoder)
    end = backend.watermarks(topic)[1]
    for start in (1, end // 4, end // 2, end - 5):
        from_there = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=AGENTS, start=start)
        from_there.read_to_end()
        for a in AGENTS:
            h = from_there.agent(a)
            for event_id, off in recorded[a]["effects"].items():
                if parse_step(event_id)[0] >= start:
                    assert h.effect(event_id).offset == off
                elif off < start:
                    assert h.effect(event_id) is None  # folded before the checkpoint: its business
            for step, digest in recorded[a]["digests"].items():
                if step >= start:
                    assert h.digest_at(step) == digest, (start, a, step)


def test_a_cut_history_knows_nothing_at_or_past_the_cut_and_which_steps_the_cut_hides(relay_log):
    backend, topic, decoder = relay_log
    end = backend.watermarks(topic)[1]
    cut = end // 2
    whole = _recorded(backend, topic, decoder)
    past = steps_past(backend=backend, topic=topic, decoder=decoder, agents=AGENTS, start=cut)
    h = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=AGENTS, end=cut, past=past,
                   committed=dict.fromkeys(AGENTS, -1))
    h.read_to_end()
    assert h.read_to == max(m.offset() for m in backend.messages(topic) if m.offset() < cut) + 1
    for a in AGENTS:
        for event_id, off in whole[a]["effects"].items():
            assert (h.agent(a).effect(event_id) is not None) == (off < cut)
        hidden = {s for s in past[a] if s < cut}
        assert all(h.agent(a).past_cut(s) for s in hidden)
        assert h.agent(a).reach() == max(h.max_step[a], max(past[a], default=-1)) + 1


class _CountingCommitted(InMemoryLog):
    def __init__(self, inner: InMemoryLog) -> None:  # the same log, its group lookups counted
        self.__dict__.update(inner.__dict__)
        self.asked = 0

    def committed(self, group: str, topic: str) -> int | None:
        self.asked += 1
        return super().committed(group, topic)


def test_how_far_a_live_agent_got_is_asked_of_its_group_once_and_only_when_a_fold_needs_it(relay_log):
    backend, topic, decoder = relay_log
    counting = _CountingCommitted(backend)
    h = LogHistory(backend=counting, topic=topic, decoder=decoder, agents=AGENTS)
    h.read_to_end()
    assert counting.asked == 0
    committed = backend.committed(agent_group(topic, "r1"), topic)
    reach = h.agent("r1").reach()
    assert counting.asked == 1 and h.agent("r1").reach() == reach and counting.asked == 1
    assert reach >= h.max_step["r1"] + 1 and (committed is None or reach >= committed)
    told = LogHistory(backend=counting, topic=topic, decoder=decoder, agents=AGENTS, committed={"r1": 10**9})
    assert told.agent("r1").reach() == 10**9 and counting.asked == 1  # the replayer asks once, before it forks


def test_a_digest_is_found_again_when_a_fold_starts_over_earlier(relay_log):
    # The debugger's cursor going back restores a checkpoint and folds again: the digests it asked for
    # already are asked for again, from an earlier step on.
    backend, topic, decoder = relay_log
    recorded = _recorded(backend, topic, decoder)["r2"]["digests"]
    h = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=AGENTS)
    h.read_to_end()
    steps = sorted(recorded)
    for step in steps:
        assert h.agent("r2").digest_at(step) == recorded[step]
    for step in steps[len(steps) // 2:]:
        assert h.agent("r2").digest_at(step) == recorded[step]
    assert h.agent("r2").digest_at(steps[-1] + 1) is None
