"""Long runs on the in-memory log: a run continued on a new topic (``swarmlog continue``) goes on from its
seeds to the states the run reaches on one topic, its link is written once however often it is retried,
what cannot be carried over is refused, and a replay of the new topic follows the link (docs/long-runs.md).
The same on the real broker, with processes and signals: tests/integration/test_long_runs.py."""

from __future__ import annotations

import pytest

from swarmlog.client import Client
from swarmlog.continuation import continue_run
from swarmlog.errors import ContinueRefused, RunContinuedElsewhere
from swarmlog.log.memory import InMemoryLog
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import find_run, run_agents, start_run
from swarmlog.runtime.continued import read_link
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from tests.swarms_continued import rally, rally_changed


def _settings(topic: str) -> Settings:
    return Settings(topic=topic)


def _run(log: InMemoryLog, topic: str, swarm=rally) -> dict:
    return {r.agent: r.state for r in run_agents(settings=_settings(topic), swarm=swarm, until_quiet=0.2,
                                                  backend=log)}


def _serve(log: InMemoryLog, topic: str) -> None:
    Client(settings=_settings(topic), backend=log).send("a", "serve", "")


def _played(log: InMemoryLog, topic: str, serves: int) -> None:
    for _ in range(serves):
        _serve(log, topic)
        _run(log, topic)


@pytest.fixture
def log() -> InMemoryLog:
    log = InMemoryLog()
    for topic in ("old", "one"):
        log.create_topic(topic)
        start_run(settings=_settings(topic), swarm=rally, run_id="r", seed=7, backend=log)
    return log


def test_a_run_continued_on_a_new_topic_reaches_the_states_of_the_run_on_one_topic(log):
    _played(log, "old", 2)
    _serve(log, "old")  # its timer comes due 20 events later, past the rally it starts: on the new topic
    _run(log, "old")
    assert _run(log, "old")["a"]["ticks"] == 2
    done = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    assert done.created and set(done.agents) == {"a", "b"}
    _played(log, "new", 2)
    _played(log, "one", 5)
    continued, one = _run(log, "new"), _run(log, "one")
    assert continued == one
    assert continued["a"]["ticks"] == 4  # the timer that spans the continuation fired
    # The new topic's run is the old one's: the link says so as run.started does.
    run = find_run(_settings("new"), "new", SchemaRegistry.load(_settings("new").schema_dirs()), backend=log)
    assert run is not None and (run.run_id, run.seed, run.offset) == ("r", 7, 0)


def test_continuing_again_writes_the_link_once(log):
    _played(log, "old", 1)
    first = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    again = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    assert first.created and not again.created and again.from_end == first.from_end
    link = read_link(backend=log, topic="new", registry=SchemaRegistry.load(_settings("new").schema_dirs()))
    assert link is not None and link.end == 3 and set(link.seeds) == {"a", "b"}
    assert log.watermarks("new")[1] <= 4  # the link, two seeds (and the in-memory log's commit marker)


def test_continue_refuses_a_message_no_agent_has_handled_yet(log):
    _played(log, "old", 1)
    _serve(log, "old")  # in flight: the swarm is not run after it
    with pytest.raises(ContinueRefused, match="has not handled the old topic up to its end") as refused:
        continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    assert refused.value.from_topic == "old" and "until it is quiet" in refused.value.remedy
    assert read_link(backend=log, topic="new", registry=SchemaRegistry.load(_settings("new").schema_dirs())) is None


def test_continue_refuses_a_topic_that_holds_other_events(log):
    _played(log, "old", 1)
    with pytest.raises(ContinueRefused, match="holds events already"):
        continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="one", backend=log)


def test_a_replay_of_the_new_topic_follows_the_link_and_names_a_divergence_in_the_old_part(log):
    _played(log, "old", 1)
    end = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new",
                       backend=log).from_end
    _played(log, "new", 1)
    clean = replay_swarm(settings=_settings("new"), swarm=rally, backend=log)
    assert clean.divergences == [] and clean.link.status == "verified" and clean.link.ok
    assert clean.link.seeds == {"a": "same", "b": "same"}
    changed = replay_swarm(settings=_settings("new"), swarm=rally_changed, backend=log)
    assert changed.link.status == "diverged" and changed.link.diverged
    first = changed.link.first_divergence
    assert first is not None and first.agent == "b" and first.offset < end


def test_with_the_old_part_deleted_the_new_topic_replays_from_its_seeds_and_says_so(log):
    _played(log, "old", 1)
    continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    log.delete_records("old", before=5)  # retention took the old topic's start
    _played(log, "new", 1)
    result = replay_swarm(settings=_settings("new"), swarm=rally, backend=log)
    assert result.divergences == [] and result.link.status == "incomplete" and result.link.ok
    assert "cannot be re-verified from zero" in result.link.detail
    assert result.to_json()["continues"]["status"] == "incomplete"


def test_the_debugger_reads_a_continued_topic_from_its_seeds_and_the_old_one_as_itself(log):
    from swarmlog.debug import Session

    _played(log, "old", 2)
    end = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new",
                       backend=log).from_end
    live = _played(log, "new", 1) or _run(log, "new")
    new = Session(settings=_settings("new"), swarm=rally, backend=log, snapshots=False)
    old = Session(settings=_settings("old"), swarm=rally, backend=log, snapshots=False)
    # Just after the seeds, an agent's state on the new topic is its state at the old topic's end.
    assert new.state("a", at=3).state == old.state("a", at=end).state
    assert new.state("b", at=log.watermarks("new")[1]).state == live["b"]


def test_an_agent_left_on_the_old_topic_stops_at_its_end_and_says_where_the_run_went(log):
    _played(log, "old", 1)
    done = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    end = log.watermarks("old")[1]
    with pytest.raises(RunContinuedElsewhere) as moved:
        _run(log, "old")
    assert (moved.value.topic, moved.value.to_topic, moved.value.end) == ("old", "new", done.from_end)
    assert log.watermarks("old")[1] == end  # it wrote nothing more there
    with pytest.raises(ContinueRefused, match="went on on topic 'new' already"):
        continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="other", backend=log)


def test_the_log_view_names_where_each_part_of_a_continued_run_is(log):
    from swarmlog.debug.logview import LogView

    _played(log, "old", 1)
    end = continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new",
                       backend=log).from_end
    new = [e.line(width=200) for e in LogView(settings=_settings("new"), backend=log).events(end=3)]
    assert f"continues topic old [0, {end}) (`--topic old` reads it)" in new[0]
    assert "a's fold at the end of the topic it continues" in new[1]
    last = list(LogView(settings=_settings("old"), backend=log).events(start=end))[-1].line(width=200)
    assert f"the run goes on on topic new (this topic's part ends at offset {end})" in last


def test_continue_takes_each_agents_fold_from_its_verified_checkpoint_and_reaches_the_same_seeds(log):
    from swarmlog.runtime.digests import state_digest

    settings = Settings(topic="old", checkpoint_every=3)
    for _ in range(2):
        _serve(log, "old")
        run_agents(settings=settings, swarm=rally, until_quiet=0.2, backend=log)
    done = continue_run(settings=settings, swarm=rally, from_topic="old", to_topic="new", backend=log)
    assert set(done.resumed_from) == {"a", "b"} and all(0 < at < done.from_end for at in done.resumed_from.values())
    from_zero = replay_swarm(settings=settings, swarm=rally, backend=log, to=done.from_end)
    assert done.agents == {a: state_digest(s).hex() for a, s in from_zero.states.items()}


def test_a_run_continued_twice_replays_and_verifies_along_the_whole_chain(log):
    _played(log, "old", 1)
    continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    _played(log, "new", 1)
    continue_run(settings=_settings("new"), swarm=rally, from_topic="new", to_topic="newer", backend=log)
    _played(log, "one", 3)
    assert _played(log, "newer", 1) or _run(log, "newer") == _run(log, "one")
    result = replay_swarm(settings=_settings("newer"), swarm=rally, backend=log)
    assert [(c.topic, c.from_topic, c.status) for c in result.link.chain()] == [
        ("newer", "new", "verified"), ("new", "old", "verified")]
    changed = replay_swarm(settings=_settings("newer"), swarm=rally_changed, backend=log)
    assert changed.link.diverged and changed.link.earlier.status == "diverged"
    assert changed.link.first_divergence.offset < read_link(
        backend=log, topic="new", registry=SchemaRegistry.load(_settings("new").schema_dirs())).from_end


def test_starting_the_run_on_the_new_topic_finds_it_continued_and_writes_nothing(log):
    from swarmlog.errors import RunAlreadyRecorded

    _played(log, "old", 1)
    continue_run(settings=_settings("old"), swarm=rally, from_topic="old", to_topic="new", backend=log)
    end = log.watermarks("new")[1]
    # What the chart's run-start hook does on an upgrade to the new topic: the run is there already.
    run = start_run(settings=_settings("new"), swarm=rally, run_id="r", seed=7, backend=log)
    assert not run.created and log.watermarks("new")[1] == end
    with pytest.raises(RunAlreadyRecorded):
        start_run(settings=_settings("new"), swarm=rally, run_id="r", seed=8, backend=log)
