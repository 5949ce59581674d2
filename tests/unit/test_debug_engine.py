"""The debugging engine on the in-memory log: state at any offset, snapshots, steps, the cursor, forks.

The oracle for "the state just before N" is the replayer's own machinery — an
``AgentCore`` given the agents' history read whole first (``runtime.history``) and fed every
message before N — so the engine's fold (effects looked up ahead, resumed from snapshots)
is checked against the fold every replay and every live agent uses.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from swarmlog.debug import Session, fork
from swarmlog.errors import ForkPointInsideStep, TopicExists
from swarmlog.log.hashing import state_hash
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import RUN_FORKED, route
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.checkpoint import FOLD_FIELDS, WIRING_FIELDS, copy_state, decode_value, encode_value
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import LogHistory, NoHistory
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .. import swarms


@pytest.fixture(scope="module")
def long_log() -> tuple[InMemoryLog, Settings]:
    """A real run of a 5-agent swarm (random draws, effects, logical timers, broadcasts): ~1,300 offsets."""
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarms.relay_long, run_id="long", seed=11, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay_long, until_quiet=0.3, backend=backend)
    return backend, settings


def oracle_states(backend: InMemoryLog, settings: Settings, registry: SchemaRegistry,
                  offsets: list[int]) -> dict[int, dict[str, Any]]:
    """Every agent's state just before each of ``offsets``, by the replayer's fold with a full index."""
    decoder = Decoder(registry)
    agents = swarms.relay_long.agents()
    history = LogHistory(backend=backend, topic=settings.topic, decoder=decoder, agents=[a.name for a in agents])
    history.read_to_end()
    cores = [AgentCore(agent=a, decoder=decoder, history=history.agent(a.name), live_sink=None, strict=True)
             for a in agents]
    out: dict[int, dict[str, Any]] = {}
    wanted = sorted(offsets)
    msgs = backend.messages(settings.topic)
    i = 0
    for n in wanted:
        while i < len(msgs) and msgs[i].offset() < n:
            r = route(msgs[i].headers())
            for c in cores:
                c.process(msgs[i], r)
            i += 1
        out[n] = {c.name: copy_state(c.agent.state) for c in cores}
    return out


def test_the_state_before_any_offset_is_what_the_replayers_fold_with_a_full_index_gives(long_log, registry):
    backend, settings = long_log
    end = backend.watermarks(settings.topic)[1]
    offsets = list(range(0, end + 3, 53)) + [end]
    expected = oracle_states(backend, settings, registry, offsets)
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry,
                      snapshots=False)
    for n in offsets:
        for agent in ("r0", "r3"):
            assert session.state(agent, at=n).state == expected[n][agent], (agent, n)


def test_snapshot_plus_tail_equals_full_replay(long_log, registry):
    backend, settings = long_log
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    taken = session.snapshot(every=97)
    assert taken.skipped == {} and len(taken.offsets) > 10
    assert taken.records == 5 * len(taken.offsets)
    plain = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry, snapshots=False)
    end = backend.watermarks(settings.topic)[1]
    used = set()
    for n in range(0, end + 2, 61):
        every = session.states(at=n)
        assert {a: (s.state, s.steps) for a, s in every.items()} == \
            {a: (s.state, s.steps) for a, s in plain.states(at=n).items()}, n
        one = session.state("r1", at=n)  # one agent folded alone, from its own snapshot
        assert (one.state, one.steps, one.from_snapshot) == (every["r1"].state, every["r1"].steps,
                                                             every["r1"].from_snapshot)
        used.add(one.from_snapshot)
    assert len(used) > 10  # the snapshots were used, each from the latest one at or before n
    # The whole swarm from the last snapshot to the end: the live run's hashes, no divergence.
    full = replay_swarm(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    resumed = session.replay()
    assert resumed.from_snapshot == taken.offsets[-1]
    assert resumed.divergences == [] and full.divergences == []
    assert {a: state_hash(s) for a, s in resumed.states.items()} == full.agents


def test_a_snapshot_of_another_code_version_is_never_used_silently(long_log, registry, caplog):
    backend, settings = long_log
    Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry).snapshot(every=200)
    changed = Session(settings=settings, swarm=swarms.relay_changed_long, backend=backend, registry=registry)
    with caplog.at_level(logging.WARNING, logger="swarmlog.debug"):
        st = changed.state("r1", at=900)
    assert st.from_snapshot is None  # folded from offset zero
    assert st.ignored and all("code version 'long-1'" in i.reason for i in st.ignored)
    assert any("not used" in r.getMessage() for r in caplog.records)


def test_snapshots_keep_sets_tuples_bytes_and_key_order_as_they_were():
    state = {"z": 1, "a": {3, 1}, "t": (1, "x"), "b": b"\x00\xff", "n": {1: "one", (2, 3): "pair"},
             "$sl:set": "a user's key that looks like a tag", "f": frozenset({"q"}), "nested": [{"k": (None,)}]}
    back = decode_value(encode_value(state))
    assert back == state
    assert list(back) == list(state)
    assert type(back["a"]) is set and type(back["t"]) is tuple and type(back["b"]) is bytes
    assert type(back["f"]) is frozenset and type(back["nested"][0]["k"]) is tuple


def test_every_attribute_of_the_agent_core_is_either_captured_or_wiring():
    registry = SchemaRegistry.load(Settings().schema_dirs())
    core = AgentCore(agent=swarms.relay_long.agents()[0], decoder=Decoder(registry), history=NoHistory(),
                     live_sink=None)
    unknown = set(vars(core)) - FOLD_FIELDS - WIRING_FIELDS
    assert unknown == set(), f"new AgentCore state {unknown}: add it to runtime/checkpoint.py (capture/restore)"


def test_each_step_shows_the_state_before_and_after_and_the_next_step_starts_where_it_ended(long_log, registry):
    backend, settings = long_log
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    steps = session.steps(start=0, end=400)
    assert steps and all(0 <= s.offset < 400 for s in steps)
    last_after: dict[str, Any] = {}
    for s in steps:
        if s.agent in last_after:
            assert s.before == last_after[s.agent]
        last_after[s.agent] = s.after
    hop = next(s for s in steps if s.handler == "Relay.hop")
    assert hop.event is not None and hop.event.kind == "hop"
    assert hop.after["hops"] == hop.before["hops"] + 1
    assert any(o["event_type"] == "agent.message" for o in hop.outputs)
    # The K-th step of an agent is the K-th of its steps with a handler.
    r2 = [s for s in steps if s.agent == "r2" and s.number is not None]
    assert session.step("r2", 3) == r2[2]


def test_the_cursor_steps_forward_and_back_to_the_same_states(long_log, registry):
    backend, settings = long_log
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    with session.cursor(at=100, checkpoint_every=16) as cursor:
        seen = [(cursor.position, cursor.states())]
        for _ in range(60):
            assert cursor.forward() is not None
            seen.append((cursor.position, cursor.states()))
        for position, states in reversed(seen[:-1]):
            assert cursor.back()
            assert (cursor.position, cursor.states()) == (position, states)
        # Breakpoints: the next step of r4, then the previous one of any agent with a hop. The log
        # comes from a live run of threads, so what follows offset 100 varies: a hop is passed first,
        # so that going back has one to find whatever r4's step is.
        hop = cursor.next_step(lambda s: s.handler == "Relay.hop")
        assert hop is not None and cursor.state(hop.agent) == hop.after
        step = cursor.next_step(lambda s: s.agent == "r4")
        assert step is not None and step.agent == "r4"
        assert cursor.state("r4") == step.after
        at = cursor.position
        back = cursor.prev_step(lambda s: s.handler == "Relay.hop")
        assert back is not None and cursor.position <= back.offset < at
        assert cursor.state(back.agent) == back.before
        cursor.goto(300)
        assert cursor.position <= 300
        assert cursor.states() == {a: st.state for a, st in session.states(at=cursor.position).items()}


def test_the_first_divergence_of_changed_code_is_where_the_replay_says(long_log, registry):
    backend, settings = long_log
    session = Session(settings=settings, swarm=swarms.relay_changed_long, backend=backend, registry=registry)
    first = session.first_divergence()
    expected = replay_swarm(settings=settings, swarm=swarms.relay_changed_long, backend=backend,
                            registry=registry).first_divergence
    assert first is not None and expected is not None
    assert (first.offset, first.agent, first.detail) == (expected.offset, expected.agent, expected.detail)


def test_a_fork_holds_the_prefix_at_its_offsets_and_says_where_it_came_from(long_log, registry):
    backend, settings = long_log
    at = 600
    source = backend.messages(settings.topic)
    try:
        forked = fork(settings=settings, at=at, to_topic="relay-fork", backend=backend, registry=registry)
    except ForkPointInsideStep as exc:
        at = exc.first
        forked = fork(settings=settings, at=at, to_topic="relay-fork", backend=backend, registry=registry)
    copy = backend.messages("relay-fork")
    prefix = [m for m in source if m.offset() < at]
    assert [(m.offset(), m.value(), m.timestamp()) for m in copy[:-1]] == \
        [(m.offset(), m.value(), m.timestamp()) for m in prefix]
    assert forked.events == len(prefix) and forked.forked_offset >= at
    decoder = Decoder(registry)
    writer, rec = decoder.decode(copy[-1].value())
    assert writer.event_type == RUN_FORKED
    assert rec["payload"]["source_topic"] == settings.topic and rec["payload"]["at"] == at
    with pytest.raises(TopicExists):
        fork(settings=settings, at=at, to_topic="relay-fork", backend=backend, registry=registry)


def test_a_fork_inside_one_steps_outputs_is_refused_with_the_offsets_that_work(long_log, registry):
    backend, settings = long_log
    msgs = backend.messages(settings.topic)
    headers = [dict(m.headers() or ()) for m in msgs]
    # Two records of one agent's one step, next to each other: cutting between them splits the step.
    i = next(i for i in range(len(msgs) - 1) if headers[i].get("sl.step") is not None
             and headers[i].get("sl.step") == headers[i + 1].get("sl.step")
             and headers[i].get("sl.agent") == headers[i + 1].get("sl.agent"))
    with pytest.raises(ForkPointInsideStep) as err:
        fork(settings=settings, at=msgs[i + 1].offset(), to_topic="relay-bad-fork", backend=backend,
             registry=registry)
    assert err.value.first <= msgs[i].offset() and err.value.last >= msgs[i + 1].offset()
    assert err.value.step == int(headers[i]["sl.step"])


def test_goto_an_offset_just_past_a_gap_stops_before_it(long_log, registry):
    # Offsets are ordered, not contiguous: after the message before a gap, the position is still below
    # the next message's offset, which must not be folded by a goto to it.
    backend, settings = long_log
    offs = [m.offset() for m in backend.messages(settings.topic)]
    after_gap = next(b for a, b in zip(offs, offs[1:], strict=False) if b > a + 1 and a > 50)
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    with session.cursor(at=0) as cursor:
        cursor.goto(after_gap)
        assert cursor.last_event is not None and cursor.last_event.offset < after_gap
        assert cursor.states() == {a: s.state for a, s in session.states(at=after_gap).items()}
        assert cursor.forward() is not None and cursor.last_event.offset == after_gap


def test_the_cursor_goes_back_to_any_point_it_read_and_keeps_what_each_message_made(long_log, registry):
    backend, settings = long_log
    session = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry)
    with session.cursor(at=0, checkpoint_every=50) as cursor:
        cursor.goto(900)
        folded = cursor.folded
        assert [o for o, _ in folded] == [m.offset() for m in backend.messages(settings.topic) if m.offset() < 900]
        assert cursor.origin == 0 and cursor.last_event is not None and cursor.last_event.offset == folded[-1][0]
        made = dict(folded)
        cursor.goto(123)  # one checkpoint restored, not 700 single steps back
        assert cursor.states() == {a: s.state for a, s in session.states(at=123).items()}
        assert dict(cursor.folded) == {o: steps for o, steps in made.items() if o < 123}


class _CountingBackend:
    """The in-memory log, counting the messages its readers hand out, by topic."""

    def __init__(self, inner: InMemoryLog) -> None:
        self.inner = inner
        self.read: dict[str, int] = {}
        self.readers: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reader(self, topic: str, *, group: str | None = None) -> Any:
        inner = self.inner.reader(topic, group=group)
        self.readers[topic] = self.readers.get(topic, 0) + 1
        counts = self.read

        class Counted:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def batches(self, **kw: Any) -> Any:
                for batch in inner.batches(**kw):
                    counts[topic] = counts.get(topic, 0) + len(batch)
                    yield batch

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                inner.close()

        return Counted()


def test_a_fold_reads_the_log_once_though_its_handlers_look_ahead_for_effects(long_log, registry):
    # The history's reads ahead are the fold's own reader reading on: what it reads waits for the
    # fold, so the tail is read once, by one reader (it was read twice, by two, bench/snapshots.py).
    backend, settings = long_log
    counting = _CountingBackend(backend)
    end = backend.watermarks(settings.topic)[1]
    at = end // 2
    session = Session(settings=settings, swarm=swarms.relay_long, backend=counting, registry=registry,  # type: ignore[arg-type]
                      snapshots=False)
    got = session.state("r2", at=at)
    plain = Session(settings=settings, swarm=swarms.relay_long, backend=backend, registry=registry, snapshots=False)
    assert got.state == plain.state("r2", at=at).state
    assert counting.readers[settings.topic] == 1
    before = sum(1 for m in backend.messages(settings.topic) if m.offset() < at)
    assert before <= counting.read[settings.topic] < 2 * before


def test_a_history_past_its_bound_reads_on_alone_and_every_state_is_the_same(long_log, registry, monkeypatch):
    # Past AHEAD_KEPT messages held for the fold, the history reads on with a reader of its own
    # and keeps nothing: the answers must not change, whichever reader saw a record first.
    from swarmlog.debug import _rebuild
    from swarmlog.runtime import history

    backend, settings = long_log
    end = backend.watermarks(settings.topic)[1]
    offsets = list(range(0, end + 3, 89)) + [end]
    expected = oracle_states(backend, settings, registry, offsets)
    monkeypatch.setattr(history, "AHEAD_KEPT", 2)
    monkeypatch.setattr(_rebuild, "TAIL_BATCH", 3)
    counting = _CountingBackend(backend)
    session = Session(settings=settings, swarm=swarms.relay_long, backend=counting, registry=registry,  # type: ignore[arg-type]
                      snapshots=False)
    for n in offsets:
        assert session.state("r3", at=n).state == expected[n]["r3"], n
    assert counting.readers[settings.topic] > len(offsets)  # the history's own readers did read


def test_a_session_sees_snapshots_written_after_its_first_look(long_log, registry):
    # A session keeps the snapshot records it has read and reads only what was written since:
    # snapshots taken meanwhile (by another session, another process) are used by its next query.
    backend, settings = long_log
    copy = InMemoryLog()  # snapshots of its own, not the module's log's
    copy.create_copy(settings.topic, backend.messages(settings.topic))
    end = copy.watermarks(settings.topic)[1]
    reader = Session(settings=settings, swarm=swarms.relay_long, backend=copy, registry=registry)
    assert reader.state("r1", at=end // 2).from_snapshot is None  # none yet
    writer = Session(settings=settings, swarm=swarms.relay_long, backend=copy, registry=registry)
    taken = writer.snapshot(every=200, to=end // 3)
    assert taken.offsets
    later = reader.state("r1", at=end // 2)
    assert later.from_snapshot == taken.offsets[-1]
    taken2 = writer.snapshot(every=200)
    again = reader.state("r1", at=end // 2)
    assert again.from_snapshot == max(o for o in taken2.offsets if o <= end // 2)
    plain = Session(settings=settings, swarm=swarms.relay_long, backend=copy, registry=registry, snapshots=False)
    assert again.state == plain.state("r1", at=end // 2).state
