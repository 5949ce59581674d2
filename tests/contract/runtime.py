"""The agent runtime's behaviour on any log backend, as one test suite.

Steps, restarts, a life that dies mid-transaction, timers, effects and divergence:
``tests/unit/test_contract_memory.py`` runs it on the in-memory log (no broker, in
seconds), ``tests/integration/test_contract_kafka.py`` on the real broker. A subclass
provides the fixtures ``backend``, ``run_settings`` (settings whose ``topic`` is a fresh
topic on that backend) and ``registry``, and ``quiet`` (seconds of stillness that mean
a swarm is done).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.errors import GroupNotAtStart, NondeterminismError, RunAlreadyRecorded, RunNotStarted, UsageError
from swarmlog.log.append import EventLog
from swarmlog.log.base import LogBackend
from swarmlog.log.protocol import agent_group, parse_step, replay_group
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run, wait_for_run
from swarmlog.schema.codec import Decoder

from .. import swarms


def events(backend: LogBackend, topic: str, registry: Any) -> list[tuple[int, str, dict[str, Any]]]:
    decoder = Decoder(registry)
    out = []
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                writer, rec = decoder.decode(m.value(), m.offset())
                out.append((m.offset(), writer.event_type, rec))
    return out


def assert_exactly_once(backend: LogBackend, topic: str, registry: Any) -> None:
    """No output written twice, and every hop handled by the agent it was sent to."""
    log = events(backend, topic, registry)
    ids = Counter(rec["event_id"] for _, _, rec in log)
    assert [i for i, n in ids.items() if n > 1] == [], "an output was written twice"
    handled = {(rec["agent_id"], parse_step(rec["event_id"])[0]) for _, _, rec in log  # type: ignore[index]
               if parse_step(rec["event_id"]) is not None}
    hops = [(off, rec["to"]) for off, t, rec in log if t == "agent.message" and rec["payload"]["kind"] == "hop"]
    assert hops
    assert [(off, to) for off, to in hops if (to, off) not in handled] == [], "hops nobody handled"


class _Crash(BaseException):
    """The process dies: nothing after this line of the worker runs."""


class _DyingChannel:
    """A channel whose life ends between sending a batch's outputs and committing them."""

    def __init__(self, inner: Any, after_commits: int) -> None:
        self._inner = inner
        self._commits_left = after_commits

    def commit(self, position: int) -> None:
        if self._commits_left == 0:
            raise _Crash()
        self._commits_left -= 1
        self._inner.commit(position)

    def abort(self) -> None:
        pass  # a dead process aborts nothing: the next life's fence must

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _DyingBackend:
    def __init__(self, inner: LogBackend, after_commits: int) -> None:
        self._inner = inner
        self._after = after_commits

    def agent_channel(self, topic: str, agent: str) -> Any:
        return _DyingChannel(self._inner.agent_channel(topic, agent), self._after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Timed(Agent):
    """A logical timer and a wall-clock timeout beside a ping-pong, and what each handler saw."""

    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    def other(self) -> str:
        return "u" if self.name == "t" else "t"

    @on("run.started")
    def start(self, ctx, event):
        if self.name == "t":
            ctx.timer("after-three", after_events=3)
            ctx.timeout("soon", seconds=0.05)
            ctx.send(self.other(), "ping", "1")

    @on_message("ping")
    def ping(self, ctx, event):
        self.state["seen"].append(["ping", event.body, ctx.now()])
        if int(event.body) < 8:
            ctx.send(self.other(), "ping", str(int(event.body) + 1))

    @on_timer("after-three")
    def logical(self, ctx, event):
        self.state["seen"].append(["logical", event.payload["set_offset"], ctx.now()])

    @on_timer("soon")
    def wall(self, ctx, event):
        self.state["seen"].append(["wall", event.payload["clock"], ctx.now()])


class _Clocky(Agent):
    @on("run.started")
    def start(self, ctx, event):
        import time

        self.state["t"] = time.time()


class RuntimeContract:
    quiet: float = 1.0
    cut_stride: int = 1
    """Every how many offsets the long logs are cut (every offset on a fast backend)."""

    def _run(self, backend, settings, swarm, **kw: Any):
        return run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet, backend=backend, **kw)

    def test_a_live_run_replays_to_identical_states_with_no_divergence(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="live", seed=11, backend=backend)
        live = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        result = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)
        assert result.divergences == []
        assert result.agents == live
        assert sum(result.steps.values()) > swarms.CHAINS * swarms.TTL
        assert_exactly_once(backend, run_settings.topic, registry)

    def test_effects_run_live_once_and_are_served_from_the_log_on_replay(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="fx", seed=3, backend=backend)
        before = swarms.CALLS["lookup"]
        self._run(backend, run_settings, swarms.relay)
        live_calls = swarms.CALLS["lookup"] - before
        recorded = [rec for _, t, rec in events(backend, run_settings.topic, registry) if t == "effect.recorded"]
        assert live_calls > 0 and len(recorded) == live_calls
        again = swarms.CALLS["lookup"]
        replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)
        assert swarms.CALLS["lookup"] == again  # served from the log, never run again

    def test_a_restart_rebuilds_from_zero_and_writes_nothing_twice(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="restart", seed=5, backend=backend)
        first = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        n = len(events(backend, run_settings.topic, registry))
        second = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        assert second == first
        assert len(events(backend, run_settings.topic, registry)) == n

    def test_a_life_that_dies_before_its_commit_loses_and_duplicates_nothing(self, backend, run_settings,
                                                                               registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="die", seed=7, backend=backend)
        with pytest.raises(_Crash):
            # r0 dies at its first commit: the run's first hops sit in its open transaction.
            self._run(_DyingBackend(backend, after_commits=0), run_settings, swarms.relay, agents=["r0"])
        assert [t for _, t, _ in events(backend, run_settings.topic, registry)] == ["run.started"]
        live = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        assert_exactly_once(backend, run_settings.topic, registry)
        result = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)
        assert result.divergences == [] and result.agents == live

    def test_timers_and_timeouts_fire_once_at_a_place_every_replay_sees(self, backend, run_settings, registry):
        swarm = Swarm(name="timed", agents=lambda: [_Timed("t"), _Timed("u")], code_version="1")
        start_run(settings=run_settings, swarm=swarm, run_id="timers", seed=1, backend=backend)
        live, other = self._run(backend, run_settings, swarm)
        kinds = [s[0] for s in live.state["seen"]]
        assert kinds.count("logical") == 1 and kinds.count("wall") == 1 and kinds.count("ping") == 4
        fired = [(off, rec["payload"]) for off, t, rec in events(backend, run_settings.topic, registry)
                 if t == "timer.fired"]
        assert sorted(p["clock"] for _, p in fired) == ["events", "wallclock"]
        result = replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend)
        assert result.divergences == [] and result.states == {"t": live.state, "u": other.state}

    def test_changed_code_says_where_it_first_diverges(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="whatif", seed=11, backend=backend)
        self._run(backend, run_settings, swarms.relay)
        same = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)
        changed = replay_swarm(settings=run_settings, swarm=swarms.relay_changed, registry=registry,
                               backend=backend)
        assert same.divergences == [] and changed.divergences
        first = changed.first_divergence
        assert first is not None
        assert first.recorded["payload"]["kind"] == "hop" and first.replayed["payload"]["kind"] == "finished"
        with pytest.raises(NondeterminismError) as strict:
            replay_swarm(settings=run_settings, swarm=swarms.relay_changed, registry=registry, backend=backend,
                         strict=True)
        assert strict.value.offset == first.offset and strict.value.agent == first.agent

    def test_a_handler_reading_the_clock_stops_its_agent_with_a_named_error(self, backend, run_settings):
        swarm = Swarm(name="clocky", agents=lambda: [_Clocky("c")], code_version="1")
        start_run(settings=run_settings, swarm=swarm, run_id="clock", seed=1, backend=backend)
        with pytest.raises(NondeterminismError) as err:
            self._run(backend, run_settings, swarm)
        assert err.value.agent == "c" and "time.time" in str(err.value) and "ctx.now()" in str(err.value)

    def test_after_a_group_reset_an_agent_rebuilds_then_handles_new_input_once(self, backend, run_settings,
                                                                                registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="reset", seed=3, backend=backend)
        first = {r.agent: r for r in self._run(backend, run_settings, swarms.relay)}
        n = len(events(backend, run_settings.topic, registry))
        backend.reset_group(agent_group(run_settings.topic, "r1"), run_settings.topic, 0)
        (again,) = self._run(backend, run_settings, swarms.relay, agents=["r1"])
        assert again.state_hash == first["r1"].state_hash
        assert len(events(backend, run_settings.topic, registry)) == n
        with EventLog(settings=run_settings, registry=registry, run_id="reset", backend=backend) as log:
            new_input = log.append("agent.message", {"kind": "hop", "body": json.dumps({"chain": 99, "ttl": 0})},
                                   agent="operator", to="r1")
        self._run(backend, run_settings, swarms.relay, agents=["r1"])
        self._run(backend, run_settings, swarms.relay, agents=["r1"])  # and once more: idempotent
        outputs = [rec for _, _, rec in events(backend, run_settings.topic, registry)
                   if rec["event_id"].startswith(f"r1@{new_input}#") and rec["event_type"] == "agent.message"]
        assert [o["payload"]["kind"] for o in outputs] == ["finished"]
        assert replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry,
                            backend=backend).divergences == []

    # -- the replay Job: its own consumer group, the agents untouched ----------------------

    def test_a_swarm_replay_as_its_own_group_resets_it_commits_its_end_and_leaves_agents_alone(
            self, backend, run_settings, registry):
        topic = run_settings.topic
        start_run(settings=run_settings, swarm=swarms.relay, run_id="grp", seed=13, backend=backend)
        live = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        agents_at = {a: backend.committed(agent_group(topic, a), topic) for a in live}
        group = replay_group(topic)
        backend.reset_group(group, topic, 5)  # somewhere else: the replay must reset it first
        result = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend,
                              group=group)
        assert result.divergences == [] and result.agents == live
        assert backend.committed(group, topic) == result.end_offset
        assert {a: backend.committed(agent_group(topic, a), topic) for a in live} == agents_at

    def test_a_swarm_replay_without_reset_needs_its_group_at_the_log_start(self, backend, run_settings, registry):
        topic = run_settings.topic
        start_run(settings=run_settings, swarm=swarms.relay, run_id="noreset", seed=2, backend=backend)
        live = {r.agent: r.state_hash for r in self._run(backend, run_settings, swarms.relay)}
        group = replay_group(topic)
        backend.reset_group(group, topic, 3)
        with pytest.raises(GroupNotAtStart) as err:
            replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend, group=group,
                         reset=False)
        assert err.value.committed == 3
        backend.reset_group(group, topic, 0)  # what kafka-consumer-groups --reset-offsets --to-earliest does
        result = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend,
                              group=group, reset=False)
        assert result.agents == live

    def test_a_swarm_replay_refuses_an_agents_own_group(self, backend, run_settings, registry):
        with pytest.raises(UsageError, match="agent 'r1'"):
            replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend,
                         group=agent_group(run_settings.topic, "r1"))

    # -- starting the run ---------------------------------------------------------------------

    def test_the_run_starts_exactly_once_when_starters_race(self, backend, run_settings, registry):
        import threading

        starters = 4
        barrier = threading.Barrier(starters)
        results: list[Any] = []
        errors: list[BaseException] = []

        def start() -> None:
            barrier.wait()
            try:
                results.append(start_run(settings=run_settings, swarm=swarms.relay, run_id="race", seed=9,
                                         registry=registry, backend=backend))
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=start) for _ in range(starters)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, [repr(e) for e in errors]
        log = events(backend, run_settings.topic, registry)
        assert [t for _, t, _ in log] == ["run.started"]
        assert sum(r.created for r in results) == 1
        assert {(r.run_id, r.seed, r.offset) for r in results} == {("race", 9, log[0][0])}

    # -- waiting for the run ------------------------------------------------------------------

    def test_an_agent_waits_a_bounded_time_for_run_started_then_fails(self, backend, run_settings, registry, caplog):
        with caplog.at_level("WARNING", logger="swarmlog.runtime.runner"), pytest.raises(RunNotStarted) as err:
            wait_for_run(settings=run_settings, timeout=0.5, registry=registry, backend=backend)
        assert err.value.topic == run_settings.topic and err.value.waited_s >= 0.5
        assert "no run.started" in caplog.text

    def test_an_agent_finds_a_run_started_while_it_waits(self, backend, run_settings, registry):
        import threading

        starter = threading.Timer(0.5, lambda: start_run(settings=run_settings, swarm=swarms.relay, run_id="late",
                                                         seed=8, backend=backend))
        starter.start()
        try:
            run = wait_for_run(settings=run_settings, timeout=30, run_id="late", seed=8, registry=registry,
                               backend=backend)
        finally:
            starter.join()
        assert run is not None and (run.run_id, run.seed) == ("late", 8)

    def test_an_agent_configured_for_another_run_refuses_the_recorded_one(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="this", seed=1, backend=backend)
        with pytest.raises(RunAlreadyRecorded):
            wait_for_run(settings=run_settings, timeout=5, run_id="this", seed=2, registry=registry, backend=backend)

    # -- what an operator sees ----------------------------------------------------------------

    def test_a_live_agent_reports_its_steps_commits_and_that_it_caught_up(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="metrics", seed=4, backend=backend)
        seen: list[Any] = []
        results = self._run(backend, run_settings, swarms.relay, on_started=seen.extend)
        by_name = {w.agent.name: w for w in seen}
        for r in results:
            w = by_name[r.agent]
            families = {f.name: f for f in w.metric_families()}
            (((agent,), steps),) = families["swarmlog_agent_steps"].samples
            assert agent == r.agent and steps == r.steps
            assert families["swarmlog_agent_live"].samples == [((r.agent,), 1.0)]
            assert families["swarmlog_agent_rebuild_progress"].samples == [((r.agent,), 1.0)]
            assert w.readiness() is None
            assert w.liveness(stall_timeout=900) is None
            assert "has not turned" in (w.liveness(stall_timeout=-1) or "")
            assert w.step_latency.count == r.steps
            assert w.commit_latency.count == w.transactions > 0

    def test_the_code_that_wrote_a_log_replays_cleanly_at_every_cut(self, backend, run_settings, registry):
        # A cut between a step and its outputs (or its effects, or a timer's firing) leaves them
        # unverified, never divergent; and the state at a cut depends only on what precedes it.
        timed = Swarm(name="timed", agents=lambda: [_Timed("t"), _Timed("u")], code_version="1")
        for swarm, stride in ((timed, 1), (swarms.relay, self.cut_stride)):
            settings = run_settings.model_copy(update={"topic": f"{run_settings.topic}-{swarm.name}"})
            backend.create_topic(settings.topic)
            start_run(settings=settings, swarm=swarm, run_id="cuts", seed=2, backend=backend)
            live = {r.agent: r.state_hash for r in self._run(backend, settings, swarm)}
            end = backend.watermarks(settings.topic)[1]
            for cut in [*range(0, end, stride), end]:
                result = replay_swarm(settings=settings, swarm=swarm, registry=registry, backend=backend, to=cut)
                assert result.divergences == [], (swarm.name, cut, result.first_divergence)
                assert all(offset < cut for offset in result.unverified_from.values())
            assert result.agents == live and result.unverified_from == {}
