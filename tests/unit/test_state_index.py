"""A session's kept index of one agent's fold (``Session.index``): answers equal to the fold from zero."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from swarmlog.debug import Session
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import route
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .. import swarms


def _run(seed: int) -> InMemoryLog:
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = _settings()
    start_run(settings=settings, swarm=swarms.relay_long, run_id=f"long-{seed}", seed=seed, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay_long, until_quiet=0.3, backend=backend)
    return backend


def _settings() -> Settings:
    return Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")


@pytest.fixture(scope="module")
def long_log() -> InMemoryLog:
    """A real run of a 5-agent swarm (random draws, effects, logical timers, broadcasts): ~1,300 offsets."""
    return _run(11)


def _answers(session: Session, agent: str, offsets: list[int]) -> list[tuple[Any, int]]:
    return [(a.state, a.steps) for a in (session.state(agent, at=n) for n in offsets)]


def test_an_indexed_session_answers_random_offsets_as_the_fold_from_zero(long_log, registry):
    end = long_log.watermarks("relay")[1]
    offsets = random.Random(7).sample(range(end + 2), 80) + [0, 1, end, end + 5]
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry)
    index = session.index("r1", every=17)
    assert index.end == end and index.memory.captures > end // 17 - 5
    from_zero = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry,
                        snapshots=False)
    assert _answers(session, "r1", offsets) == _answers(from_zero, "r1", offsets)
    starts = [session.state("r1", at=n).from_snapshot for n in offsets]
    assert all(s is not None and n - s <= 2 * 17 for s, n in zip(starts, offsets, strict=True) if s is not None)
    assert sum(s is not None for s in starts) >= 70  # the index was used (all but the offsets before its first capture)


def test_a_repeated_event_before_a_capture_is_still_not_handled_after_it(long_log, registry):
    """What a restored fold remembers of the ids it took comes from the capture: a copy of an event taken
    before it, appended at the end, is named and not handled, as from offset zero."""
    copy = InMemoryLog()
    copy.create_copy("relay", long_log.messages("relay"))
    first = next(m for m in long_log.messages("relay") if route(m.headers()).to == "r1")
    appender = copy.appender("relay")
    appender.send(first.value(), first.key(), first.headers())
    appender.flush(5.0)
    end = copy.watermarks("relay")[1]
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=copy, registry=registry)
    session.index("r1", every=17)
    from_zero = Session(settings=_settings(), swarm=swarms.relay_long, backend=copy, registry=registry,
                        snapshots=False)
    kept = session.state("r1", at=end)
    assert kept.from_snapshot is not None and kept.from_snapshot > first.offset()
    assert (kept.state, kept.steps) == (from_zero.state("r1", at=end).state, from_zero.state("r1", at=end).steps)
    assert kept.steps == from_zero.state("r1", at=end - 1).steps  # the copy was not handled


def test_the_index_memory_bound_holds_and_answers_stay_exact(long_log, registry):
    end = long_log.watermarks("relay")[1]
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry)
    unbounded = session.index("r2", every=5).memory
    index = session.index("r2", every=5, max_bytes=unbounded.capture_bytes // 5)
    assert index.memory.capture_bytes <= unbounded.capture_bytes // 5
    assert index.every >= 5 * 4 and index.memory.captures < unbounded.captures // 3
    offsets = random.Random(3).sample(range(end), 40)
    from_zero = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry,
                        snapshots=False)
    assert _answers(session, "r2", offsets) == _answers(from_zero, "r2", offsets)


class _Switch:
    """A backend whose log can be replaced under a session: a topic deleted and made again."""

    def __init__(self, log: InMemoryLog) -> None:
        self.log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)


def test_an_index_of_a_log_made_again_is_not_used(long_log, registry, caplog):
    switch = _Switch(long_log)
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=switch, registry=registry)  # type: ignore[arg-type]
    session.index("r1", every=17)
    other = _run(12)
    switch.log = other
    end = other.watermarks("relay")[1]
    from_zero = Session(settings=_settings(), swarm=swarms.relay_long, backend=other, registry=registry,
                        snapshots=False)
    with caplog.at_level(logging.WARNING, logger="swarmlog.debug.session"):
        for n in (end // 2, end):
            got = session.state("r1", at=n)
            assert (got.state, got.steps) == (from_zero.state("r1", at=n).state, from_zero.state("r1", at=n).steps)
    assert "index of r1 is dropped" in caplog.text


def test_a_session_told_to_indexes_an_agent_once_asked_and_its_diffs_equal_the_fold_from_zero(long_log, registry):
    end = long_log.watermarks("relay")[1]
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry,
                      index_after=2)
    from_zero = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry,
                        snapshots=False)
    session.state("r4", at=end // 3)
    assert "r4" not in session._indexes  # once is not yet
    session.state("r4", at=end // 2)
    assert session._indexes["r4"].end == end
    for start, stop in ((0, end), (end // 5, end // 5 + 40), (end // 2, end // 2)):
        kept, zero = session.diff("r4", start, stop), from_zero.diff("r4", start, stop)
        assert (kept.before, kept.after, kept.changes, kept.steps) == (zero.before, zero.after, zero.changes,
                                                                      zero.steps)


def test_a_restored_fold_remembers_the_ids_a_fold_from_zero_remembers_there(long_log, registry, monkeypatch):
    """A capture leaves out what the watch remembers of the step ids it took; the index gives it back from
    the one fold it made: the same ids, offsets and order as a fold from zero has at that offset, and the
    same after the tail (its oldest dropped as from zero)."""
    from swarmlog.debug import index as index_module
    from swarmlog.debug._rebuild import Rebuild
    from swarmlog.runtime import anomalies
    from swarmlog.schema.codec import Decoder

    monkeypatch.setattr(anomalies, "RECENT_IDS", 40)  # small, so that the watch drops ids and sets floors
    monkeypatch.setattr(index_module, "RECENT_IDS", 40)
    session = Session(settings=_settings(), swarm=swarms.relay_long, backend=long_log, registry=registry)
    index = session.index("r0", every=25)
    end = index.end
    for n in (end // 4, end // 2, end - 3):
        base, doc, last = index.start(n)  # type: ignore[misc]
        decoder = Decoder(registry)
        with Rebuild(backend=long_log, topic="relay", swarm=swarms.relay_long, decoder=decoder, agents=["r0"],
                     starts={"r0": doc}, last=last, check_states=False) as restored, \
                Rebuild(backend=long_log, topic="relay", swarm=swarms.relay_long, decoder=decoder, agents=["r0"],
                        check_states=False) as whole:
            index.share(restored.cores["r0"], at=base)
            whole.run_to(base)
            assert restored.cores["r0"].watch.capture() == whole.cores["r0"].watch.capture()
            assert len(whole.cores["r0"].watch.capture()["recent"]) == 40
            restored.run_to(n)
            whole.run_to(n)
            assert restored.cores["r0"].watch.capture() == whole.cores["r0"].watch.capture()
