"""Stepping through a whole run (what ``swarmlog step`` drives), on a real run on the in-memory log:
every state the stepper shows is the session's own, forward and back past where its cursor began."""

from __future__ import annotations

import threading

import pytest

from swarmlog.debug import Session
from swarmlog.debug.breakpoints import Breakpoint, parse
from swarmlog.debug.stepper import Stepper
from swarmlog.errors import UsageError
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import H_TYPE, STATE_DIGEST
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .. import swarms


@pytest.fixture(scope="module")
def long_log() -> tuple[InMemoryLog, Settings]:
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarms.relay_long, run_id="step", seed=11, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay_long, until_quiet=0.3, backend=backend)
    return backend, settings


def session_of(long_log, registry, swarm=swarms.relay_long) -> Session:
    backend, settings = long_log
    return Session(settings=settings, swarm=swarm, backend=backend, registry=registry)


def offsets(long_log) -> list[int]:
    """The offsets the stepper stops at: every message but the state digests (the log's record of
    the state a step left, folded on the way)."""
    backend, settings = long_log
    return [m.offset() for m in backend.messages(settings.topic) if _header(m, H_TYPE) != STATE_DIGEST.encode()]


def _header(m, name: str) -> bytes | None:
    return next((v for k, v in m.headers() or () if k == name), None)


def test_the_current_event_is_the_one_just_folded_whether_or_not_an_agent_handled_it(long_log, registry):
    session = session_of(long_log, registry)
    with Stepper(session=session) as st:
        assert st.current is None and st.steps == [] and st.position == 0
        seen_unhandled = seen_handled = False
        for _ in range(40):
            assert st.forward()
            e = st.current
            assert e is not None and st.position == e.offset + 1
            if st.steps:
                seen_handled = True
                assert all(s.offset == e.offset for s in st.steps)
                assert {s.agent: s.after for s in st.steps} == {s.agent: st.states()[s.agent] for s in st.steps}
            else:
                seen_unhandled = True  # an effect's record, a timer set: nobody handles those
        assert seen_handled and seen_unhandled


def test_going_back_past_where_the_cursor_began_reaches_offset_zero_with_the_sessions_states(long_log, registry):
    session = session_of(long_log, registry)
    offs = offsets(long_log)
    with Stepper(session=session, at=offs[30], window=7) as st:
        assert st.cursor.origin == offs[30]
        trail = []
        while st.back():
            trail.append(st.current.offset if st.current is not None else None)
        assert st.position == 0 and st.current is None
        assert trail[:-1] == list(reversed(offs[:29]))[:len(trail) - 1]  # one event at a time, none skipped
        for n in (offs[5], offs[17]):
            st.goto(n)
            assert st.states() == {a: s.state for a, s in session.states(at=n).items()}


def test_show_makes_an_offset_current_far_ahead_or_behind(long_log, registry):
    session = session_of(long_log, registry)
    offs = offsets(long_log)
    with Stepper(session=session, window=20) as st:
        for n in (offs[-40], offs[12], offs[600]):
            assert st.show(n)
            assert st.current is not None and st.current.offset == n
            assert st.states() == {a: s.state for a, s in session.states(at=n + 1).items()}
        assert st.back() and st.current is not None and st.current.offset == offs[599]
        assert not st.show(offs[-1] + 10)  # past the end


def test_breakpoints_on_an_agent_a_type_and_a_predicate_stop_at_the_matching_steps_both_ways(long_log, registry):
    session = session_of(long_log, registry)
    steps = session.steps()
    want_agent = [s.offset for s in steps if s.agent == "r3"]
    want_type = [s.offset for s in steps if s.event is not None and s.event.kind == "finished"]
    want_if = [s.offset for s in steps if s.after.get("ticks") == 2 and s.before.get("ticks") == 1]
    assert len(want_agent) > 3 and want_type and want_if
    with Stepper(session=session) as st:
        for bp, want in ((Breakpoint.agent("r3"), want_agent), (parse("type agent.message:finished"), want_type),
                         (parse("if before.get('ticks') == 1 and after.get('ticks') == 2"), want_if)):
            st.goto(0)
            got = []
            while (hit := st.next_break([bp])) is not None:
                assert hit.breakpoint is bp and st.current is not None and st.current.offset == hit.step.offset
                got.append(hit.step.offset)
            assert sorted(set(got)) == sorted(set(want)), bp
            end = st.current.offset if st.current is not None else None
            back = []
            while (hit := st.prev_break([bp])) is not None:
                assert st.current is not None and st.current.offset == hit.step.offset
                back.append(hit.step.offset)
            # Reverse from the end of the log: every match before the event it started on.
            assert sorted(set(back)) == sorted({o for o in want if end is None or o < end}), bp


def test_a_predicate_that_raises_stops_there_and_says_why(long_log, registry):
    session = session_of(long_log, registry)
    bp = Breakpoint.predicate("after['no such key'] > 1")
    with Stepper(session=session) as st:
        hit = st.next_break([bp])
        assert hit is not None and bp.last_error is not None and "KeyError" in bp.last_error
    with pytest.raises(UsageError, match="not a Python expression"):
        Breakpoint.predicate("after[")
    with pytest.raises(UsageError, match="agent NAME"):
        parse("stop somewhere")


def test_a_search_stops_when_told_to(long_log, registry):
    session = session_of(long_log, registry)
    stop = threading.Event()
    stop.set()
    with Stepper(session=session) as st:
        assert st.next_break([Breakpoint.agent("nobody")], stop=stop) is None
        assert 0 < st.position < offsets(long_log)[-1]  # it gave up after one event, not at the end


def test_the_first_divergence_is_found_once_and_becomes_current(long_log, registry):
    changed = session_of(long_log, registry, swarms.relay_changed_long)
    expected = changed.first_divergence()
    assert expected is not None
    with Stepper(session=changed) as st:
        d = st.to_divergence()
        assert d == expected and st.current is not None and st.current.offset == expected.offset
        assert any(s.agent == expected.agent for s in st.steps)
    with Stepper(session=session_of(long_log, registry)) as same:
        assert same.to_divergence() is None and same.position == 0


def test_state_digests_are_folded_on_the_way_never_current(long_log, registry):
    backend, settings = long_log
    every = [m.offset() for m in backend.messages(settings.topic)]
    stops = offsets(long_log)
    assert len(stops) < len(every)  # the live run recorded digests: there is something to skip
    session = session_of(long_log, registry)
    # Checkpoints close together: the way back crosses many of them, each step refolding a few messages.
    with Stepper(session=session, checkpoint_every=25) as st:
        seen = []
        while st.forward():
            seen.append(st.current.offset)
        assert seen == stops
        # The cursor folded every digest on the way (and checked it), and stopped before the run's
        # final ones, which no event follows.
        assert every[-1] > stops[-1]
        assert [off for off, _ in st.cursor.folded] == [o for o in every if o <= stops[-1]]
        back = []
        while st.back():
            back.append(st.current.offset if st.current is not None else None)
        assert back == [*reversed(stops[:-1]), None]
