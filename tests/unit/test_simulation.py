"""The simulator (swarmlog.testing): the swarm's own agents under chosen schedules, in memory.

The Must-show of issue 13 that needs no broker is here: exploration finds the case
study's deadlock by itself and shrinks it, the fixed reviewer survives every schedule,
and a second race (two workers claiming one task) is found and shrunk the same way.
The export to Kafka is in tests/integration/test_simulation_export.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.errors import EffectFailed, ScheduleMismatch, UnmodelledEffect
from swarmlog.examples import case_study, claims
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import MESSAGE, STATE_DIGEST, TIMER_CANCELLED, TIMER_FIRED, route
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import (
    Fail,
    Schedule,
    SimulationFailed,
    Simulator,
    no_handler_failed,
    no_message_ignored,
    one_of,
    schedules,
)
from swarmlog.testing._simulator import EPOCH_MS

from ..conftest import examples


def _case(swarm: Swarm = case_study.buggy, **kw: Any) -> Simulator:
    return Simulator(swarm, effects=case_study.MODELS, end_state=case_study.finished,
                     invariants=[no_message_ignored], **kw)


def _claims(swarm: Swarm = claims.buggy, **kw: Any) -> Simulator:
    return Simulator(swarm, effects=claims.MODELS, invariants=[claims.done_once, no_message_ignored], **kw)


# --- the same agents, the same log ---------------------------------------------------------------


def _double(n: int) -> int:
    return 2 * n


class _Ping(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    @on("run.started")
    def start(self, ctx, event):
        if self.name == "p":
            ctx.send("q", "ball", "0")

    @on_message("ball")
    def ball(self, ctx, event):
        n = int(event.body)
        self.state["seen"].append([n, ctx.effect("double", _double, n), ctx.random()])
        if n < 3:
            ctx.send("q" if self.name == "p" else "p", "ball", str(n + 1))


PING = Swarm(name="ping", agents=lambda: [_Ping("p"), _Ping("q")], code_version="1")


def test_a_simulated_run_writes_the_log_live_workers_write_for_the_same_interleaving(run_settings, monkeypatch):
    # One ball in flight: live workers have one possible order. The model of the effect is the
    # function itself, so the simulated log must be the live log, byte for byte, offset for offset.
    live = InMemoryLog()
    live.create_topic(run_settings.topic)
    start_run(settings=run_settings, swarm=PING, run_id="r", seed=5, backend=live)
    # Both without state digests: a digest record's `position` is how far a live agent happened to
    # have read (timing, which a simulated run has none of). With them: the next test.
    run_agents(settings=run_settings.model_copy(update={"state_digest_every": 0}), swarm=PING, until_quiet=0.3,
               backend=live)
    monkeypatch.setenv("SWARMLOG_STATE_DIGEST_EVERY", "0")
    run = Simulator(PING, effects={"double": _double}, seed=5, run_id="r").run()
    assert run.ok and run.at_rest
    shape = [(m.offset(), m.value(), m.headers()) for m in run.log.messages(run.topic)]
    assert shape == [(m.offset(), m.value(), m.headers()) for m in live.messages(run_settings.topic)]


def test_a_simulated_run_records_every_steps_state_and_its_replay_checks_each():
    # As the worker does: the digest of the state each live step left, last in its transaction, so that
    # a restarted agent (a crash's next life) and every replay compare states as well as outputs.
    run = Simulator(PING, effects={"double": _double}, seed=5, run_id="r").run()
    digests = [m for m in run.log.messages(run.topic) if route(m.headers()).event_type == STATE_DIGEST]
    replayed = run.replay()
    assert replayed.divergences == [] and len(digests) == sum(replayed.steps.values())
    assert replayed.states_checked == replayed.states_recorded == replayed.steps
    assert all(e.event_type != STATE_DIGEST for e in run.events())  # bookkeeping, not events of the swarm


def test_every_simulated_run_replays_with_no_divergence_to_the_same_states():
    sim = _case(crashes=1)
    found = sim.exhaust()
    assert found.complete and found.examples > 100
    for seed in range(40):  # a sample of them, crashes included
        run = sim.run(seed)
        replayed = run.replay()
        assert replayed.divergences == []
        assert replayed.states == run.states


def test_a_schedule_makes_the_same_run_every_time():
    sim = _case(crashes=2)
    for seed in range(20):
        run = sim.run(seed)
        again = sim.run(run.schedule)
        assert again.schedule == run.schedule
        assert [(m.offset(), m.value()) for m in again.log.messages(again.topic)] == \
            [(m.offset(), m.value()) for m in run.log.messages(run.topic)]
        assert again.steps == run.steps and again.violations == run.violations


def test_a_schedule_that_does_not_fit_the_swarm_is_refused_with_where_it_does_not():
    with pytest.raises(ScheduleMismatch) as info:
        _case().run(Schedule((5,)))
    assert (info.value.decision, info.value.choice, info.value.options) == (0, 5, 2)


# --- the case study --------------------------------------------------------------------------------


def test_the_default_schedule_of_the_case_study_reaches_its_end_state():
    run = _case().run()
    assert run.ok and run.states["coordinator"]["phase"] == "done"


def test_exploration_finds_the_case_study_deadlock_by_itself_and_shrinks_it_to_one_choice():
    found = _case(crashes=2).explore(max_examples=1000)
    print(f"\ncase study (buggy reviewer): {found}")
    run = found.failure
    assert run is not None and found.found_after is not None and found.found_after <= 50
    assert [v.check for v in run.violations] == ["deadlock"]
    assert run.schedule.deviations == 1 and len(run.steps) <= 8
    fire = next(s for s in run.steps if s.choice)
    assert (fire.kind, fire.agent, fire.timers) == ("fire", "reviewer", ("deadline",))
    assert fire.passed_over is not None and fire.passed_over.startswith("worker handles task")
    assert run.states["reviewer"] == {"phase": "timed_out", "ignored": 1}
    text = run.describe()
    print(text)
    assert "DEADLOCK" in text and "its timeout 'deadline' fires" in text and "(chosen over: worker handles task" in text
    assert "handles task_complete from worker" in text and "ignored: 0 → 1" in text


@pytest.mark.slow
def test_the_fixed_reviewer_survives_every_schedule_crashes_included():
    n = examples(1000)  # a survival: every example counts, so as many as the profile runs
    found = _case(case_study.fixed, crashes=2).explore(max_examples=n)
    print(f"\ncase study (fixed reviewer), Hypothesis: {found}")
    assert found.failure is None and found.examples >= n and found.distinct >= n
    every = _case(case_study.fixed, crashes=1).exhaust()
    print(f"case study (fixed reviewer), exhaustive: {every}")
    assert every.complete and every.failure is None and every.examples > 300


# --- a second race: two workers claiming the same task ----------------------------------------------


def test_exploration_finds_two_workers_claiming_the_same_task_and_shrinks_it():
    assert _claims().run().ok  # in the order where every message is handled at once, nothing shows
    found = _claims(crashes=1).explore(max_examples=1000)
    print(f"\nclaims (buggy board): {found}")
    run = found.failure
    assert run is not None and [v.check for v in run.violations] == ["done_once"]
    assert "t1 by alice and bob" in run.violations[0].message
    # The race needs alice slower than bob's whole review round trip: three steps put before hers.
    assert run.schedule.deviations == 3
    print(run.describe())
    assert all(s.passed_over == "alice handles offer @2" for s in run.steps if s.choice)
    every = _claims(claims.fixed).exhaust()
    assert every.complete and every.failure is None and every.examples > 100


def test_a_hypothesis_property_over_schedules_is_a_few_lines():
    sim = _claims(claims.fixed)

    @settings(max_examples=examples(50), deadline=None, database=None)
    @given(schedules())
    def the_board_never_gives_a_task_twice(schedule):
        sim.run(schedule).check()

    the_board_never_gives_a_task_twice()

    buggy = _claims()

    @settings(max_examples=200, deadline=None, database=None)  # a search: it stops at the first failure
    @given(schedules())
    def the_buggy_board_does(schedule):
        buggy.run(schedule).check()

    with pytest.raises(SimulationFailed, match="DONE_ONCE"):
        the_buggy_board_does()


# --- timeouts ---------------------------------------------------------------------------------------


class _Sleeper(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"fired": []}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timeout("t", seconds=0.1 if self.name == "early" else 0.2)

    @on_timer("t")
    def fired(self, ctx, event):
        self.state["fired"].append(ctx.log_time_ms())


def test_an_idle_agents_timeout_never_fires_after_a_later_one_and_simulated_time_jumps_to_it():
    sim = Simulator(Swarm(name="sleep", agents=lambda: [_Sleeper("early"), _Sleeper("late")], code_version="1"))
    every = sim.exhaust()
    assert every.complete and every.failure is None
    for prefix in [(), *((i,) for i in range(3))]:
        try:
            run = sim.run(Schedule(prefix))
        except ScheduleMismatch:
            continue
        order = [s.agent for s in run.steps if s.kind == "fire"]
        assert order == ["early", "late"]  # both idle: the 0.1 s timeout fires first, always
        stamps = [m.timestamp()[1] for m in run.log.messages(run.topic)]
        assert stamps == sorted(stamps) and stamps[0] == EPOCH_MS
        assert run.states["early"]["fired"][0] >= EPOCH_MS + 100
        assert run.states["late"]["fired"][0] >= EPOCH_MS + 200


class _Canceller(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"phase": "idle", "late_firings": 0}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timeout("t", seconds=1)

    @on_message("done")
    def done(self, ctx, event):
        ctx.cancel_timer("t")
        self.state["phase"] = "done"

    @on_timer("t")
    def fired(self, ctx, event):
        if self.state["phase"] == "done":
            self.state["late_firings"] += 1


class _Finisher(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("c", "done")


def test_a_timeout_can_fire_after_its_cancellation_is_written_until_its_agent_has_read_it():
    sim = Simulator(Swarm(name="cancel", agents=lambda: [_Canceller("c"), _Finisher("f")], code_version="1"))
    runs = [sim.run(Schedule(p)) for p in _all_prefixes(sim)]
    late = [r for r in runs if r.states["c"]["late_firings"]]
    # Fired while "done" was on its way (written before the cancellation), or fired after the
    # cancellation was written but before c read it back: both reach the handler after "done".
    orders = {tuple(e.event_type for e in r.events() if e.agent_id == "c") for r in late}
    assert orders == {("timer.set", TIMER_FIRED, TIMER_CANCELLED), ("timer.set", TIMER_CANCELLED, TIMER_FIRED)}
    assert any(s.kind == "read" for r in late for s in r.steps)


def _all_prefixes(sim: Simulator) -> list[tuple[int, ...]]:
    out, stack = [], [()]
    while stack:
        prefix = stack.pop()
        run = sim.run(Schedule(prefix))
        out.append(prefix)
        for i in range(len(run.schedule.choices) - 1, len(prefix) - 1, -1):
            stack.extend(run.schedule.choices[:i] + (alt,) for alt in range(1, run.sizes[i]))
    return out


# --- models: answers, failures, choices --------------------------------------------------------------


class _Caller(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"got": None, "failed": None, "llm": None}

    @on("run.started")
    def start(self, ctx, event):
        try:
            self.state["got"] = ctx.effect("fetch", _double, 21)
        except EffectFailed as exc:
            self.state["failed"] = exc.error
        reply = ctx.llm({"model": "m", "messages": [{"role": "user", "content": "yes or no?"}]})
        self.state["llm"] = reply["choices"][0]["message"]["content"]


CALLER = Swarm(name="caller", agents=lambda: [_Caller("a")], code_version="1")


def test_effect_and_llm_outcomes_are_choices_of_the_schedule_failures_included():
    sim = Simulator(CALLER, effects={"fetch": one_of(lambda n: n + 1, Fail(TimeoutError("too slow")))},
                    llm=one_of("yes", "no"))
    every = sim.exhaust()
    assert every.complete and every.examples == 4
    outcomes = {(r.states["a"]["got"], r.states["a"]["failed"], r.states["a"]["llm"])
                for r in (sim.run(Schedule(p)) for p in [(), (0, 1), (1,), (1, 1)])}
    assert outcomes == {(22, None, "yes"), (22, None, "no"), (None, "TimeoutError: too slow", "yes"),
                        (None, "TimeoutError: too slow", "no")}
    failed = sim.run(Schedule((1,)))
    (effect,) = [e for e in failed.events() if e.event_type == "effect.recorded"]
    assert effect.payload["error"] == "TimeoutError: too slow"  # recorded as a live failure would be
    assert failed.replay().divergences == []


def test_an_effect_without_a_model_is_a_configuration_error_not_a_handler_failure():
    with pytest.raises(UnmodelledEffect) as info:
        Simulator(CALLER, llm="yes").run()
    assert (info.value.agent, info.value.kind, info.value.name, info.value.offset) == ("a", "effect", "fetch", 0)
    with pytest.raises(UnmodelledEffect, match="llm="):
        Simulator(CALLER, effects={"fetch": 1}).run()


class _Browser(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.http().get("http://127.0.0.1:9/never-reached")


def test_a_raw_http_exchange_in_a_simulated_step_is_refused_before_any_request_is_made():
    sim = Simulator(Swarm(name="http", agents=lambda: [_Browser("a")], code_version="1"))
    with pytest.raises(UnmodelledEffect) as info:
        sim.run()
    assert (info.value.kind, info.value.name) == ("HTTP exchange", "http.exchange")
    assert "ctx.http() is not simulated" in str(info.value)


# --- invariants ---------------------------------------------------------------------------------------


class _Typo(Agent):
    @on("run.started")
    def start(self, ctx, event):
        if self.name == "a":
            ctx.send("b", "helo", "")
            ctx.send("nobody", "hello", "")

    @on_message("hello")
    def hello(self, ctx, event):
        raise ValueError("not today")


def test_a_message_nobody_handles_and_a_failing_handler_are_violations():
    sim = Simulator(Swarm(name="typo", agents=lambda: [_Typo("a"), _Typo("b")], code_version="1"),
                    invariants=[no_message_ignored, no_handler_failed])
    run = sim.run()
    assert [v.check for v in run.violations] == ["no_message_ignored"]
    assert "'helo' from a @2 reached no handler of b" in run.violations[0].message
    assert "addressed to 'nobody'" in run.violations[0].message
    kinds = [e.payload["kind"] for e in run.events() if e.event_type == MESSAGE]
    assert kinds == ["helo", "hello"]


class _Clocky(Agent):
    @on("run.started")
    def start(self, ctx, event):
        import time

        self.state["t"] = time.time()


def test_the_determinism_guard_is_on_in_simulation():
    run = Simulator(Swarm(name="clock", agents=lambda: [_Clocky("a")], code_version="1")).run()
    assert [v.check for v in run.violations] == ["runtime"]
    assert "time.time" in run.violations[0].message


def test_a_swarm_that_never_comes_to_rest_fails_its_end_state_within_max_steps():
    class Echo(Agent):
        @on("run.started")
        def start(self, ctx, event):
            if self.name == "a":
                ctx.send("b", "ping")

        @on_message("ping")
        def ping(self, ctx, event):
            ctx.send(event.agent_id, "ping")

    sim = Simulator(Swarm(name="echo", agents=lambda: [Echo("a"), Echo("b")], code_version="1"),
                    end_state=lambda states: False, max_steps=50)
    run = sim.run()
    assert not run.at_rest and len(run.steps) == 50
    assert [v.check for v in run.violations] == ["no end state"]


def test_without_hypothesis_exploring_is_a_missing_dependency_and_seeded_schedules_still_run(monkeypatch):
    import sys

    from swarmlog.errors import MissingDependency
    from swarmlog.testing import schedules

    sim = _claims()
    for name in [m for m in sys.modules if m == "hypothesis" or m.startswith("hypothesis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # what `import hypothesis` finds when it is not installed
    with pytest.raises(MissingDependency, match=r"swarmlog\[testing\]") as raised:
        sim.explore(max_examples=5)
    assert raised.value.program.startswith("Hypothesis")
    with pytest.raises(MissingDependency):
        schedules()
    assert sim.sample(20).failure is not None  # the claims race, found by seeds alone
