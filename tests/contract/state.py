"""State is part of the record, on any log backend: every step's state digest is written with its
outputs, and replay and every restart check it.

``tests/unit/test_contract_memory.py`` runs it on the in-memory log, ``tests/integration/
test_contract_kafka.py`` on the real broker (same fixtures as :mod:`tests.contract.runtime`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.errors import StateDiverged
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import parse_step
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.digests import state_digest

from .. import swarms
from .runtime import events


def digest_records(backend: Any, topic: str, registry: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(off, rec) for off, t, rec in events(backend, topic, registry) if t == "state.digest"]


def trap_step(backend: Any, topic: str, registry: Any) -> tuple[int, str]:
    """(offset, agent) of the hop at which :class:`tests.swarms.StateTrapRelay` springs its trap."""
    (hit,) = [(off, rec["to"]) for off, t, rec in events(backend, topic, registry)
              if t == "agent.message" and rec["payload"]["kind"] == "hop"
              and json.loads(rec["payload"]["body"]) == {"chain": swarms.TRAP_CHAIN, "ttl": swarms.TRAP_TTL}]
    return hit


class _Quiet(Agent):
    """Steps that write nothing: its state is recorded all the same."""

    def initial_state(self) -> dict[str, Any]:
        return {"got": []}

    @on_message("note")
    def note(self, ctx, event):
        self.state["got"].append(event.body)


class _Waiter(Agent):
    @on("run.started")
    def start(self, ctx, event):
        if self.name == "a":
            ctx.timer("two", after_events=2)
            ctx.send("b", "note", "x")

    @on_message("note")
    def note(self, ctx, event):
        self.state["notes"] = self.state.get("notes", 0) + 1


class _Noter(Agent):
    @on("run.started")
    def start(self, ctx, event):
        for i in range(7):
            ctx.send("q", "note", str(i))


_LIVE_STATES: dict[tuple[str, int], Any] = {}


class _Remembering(swarms.StateTrapRelay):
    """The trap, remembering each live state (a stand-in for the debugger's snapshots)."""

    remember = False

    @on_message("hop")
    def hop(self, ctx, event):
        super().hop(ctx, event)
        if self.remember:
            _LIVE_STATES[(self.name, ctx.now())] = copy.deepcopy(self.state)


class _Snapshots:
    def state_at(self, agent: str, step: int) -> Any | None:
        return _LIVE_STATES.get((agent, step))


class StateDigestContract:
    quiet: float = 1.0

    def _run(self, backend, settings, swarm, **kw: Any):
        return run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet, backend=backend, **kw)

    def test_every_step_records_its_state_digest_after_its_outputs(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="dig", seed=2, backend=backend)
        live = {r.agent: r for r in self._run(backend, run_settings, swarms.relay)}
        log = events(backend, run_settings.topic, registry)
        records = digest_records(backend, run_settings.topic, registry)
        for agent, result in live.items():
            mine = [(off, rec["payload"]) for off, rec in records if rec["agent_id"] == agent]
            steps = [s for _, p in mine for s in p["steps"]]
            assert len(steps) == result.steps and steps == sorted(steps)  # every step, once, in order
            # The last record holds the state the agent stopped in (its last step's transaction
            # recorded it; a stop writes no further record of the same state).
            assert mine[-1][1]["state"] == bytes.fromhex(result.state_hash)
            outputs = [(o, parse_step(rec["event_id"])) for o, t, rec in log
                       if rec["agent_id"] == agent and t != "state.digest"]
            for off, payload in mine:
                if not payload["steps"]:
                    continue
                last = payload["steps"][-1]
                # Written after every output of the steps it covers, before any output of a later step.
                assert all(o < off for o, step in outputs if step is not None and step[0] <= last)
                # (A logical timer's firing is an output of the step that made it due, which may be
                # one where no handler ran: no state changed there, so none is recorded.)
                assert all(o > off for o, step in outputs if step is not None and step[0] > last
                           and step[0] in steps)
        result = replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)
        assert result.divergences == []
        assert result.states_checked == result.states_recorded == {a: r.steps for a, r in live.items()}

    def test_steps_that_write_nothing_still_record_their_state(self, backend, run_settings, registry):
        swarm = Swarm(name="quiet", agents=lambda: [_Noter("n"), _Quiet("q")], code_version="1")
        start_run(settings=run_settings, swarm=swarm, run_id="q", seed=1, backend=backend)
        self._run(backend, run_settings, swarm)
        mine = [rec["payload"] for _, rec in digest_records(backend, run_settings.topic, registry)
                if rec["agent_id"] == "q"]
        steps = [s for p in mine for s in p["steps"]]
        assert len(steps) == 7
        assert mine[-1]["state"] == state_digest({"got": [str(i) for i in range(7)]})

    def test_a_restart_checks_every_recorded_state_and_writes_none_twice(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.relay, run_id="rs", seed=6, backend=backend)
        first = {r.agent: r for r in self._run(backend, run_settings, swarms.relay)}
        before = digest_records(backend, run_settings.topic, registry)
        again = {r.agent: r for r in self._run(backend, run_settings, swarms.relay)}
        assert {a: r.states_checked for a, r in again.items()} == {a: r.steps for a, r in first.items()}
        assert all(r.steps > 0 for r in first.values())
        assert digest_records(backend, run_settings.topic, registry) == before

    def test_a_state_only_divergence_is_reported_at_its_step_with_agent_offset_and_digests(
            self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.state_trap, run_id="trap", seed=8, backend=backend)
        live = {r.agent: r for r in self._run(backend, run_settings, swarms.state_trap)}
        offset, agent = trap_step(backend, run_settings.topic, registry)
        result = replay_swarm(settings=run_settings, swarm=swarms.state_trap, registry=registry, backend=backend)
        assert [d.kind for d in result.divergences] == ["state"]  # the first only; no output departed
        (d,) = result.divergences
        assert (d.offset, d.agent) == (offset, agent)
        assert d.recorded == {"state_digest": _recorded_digest(backend, run_settings.topic, registry, agent,
                                                               offset)}
        assert d.replayed["state_digest"] != d.recorded["state_digest"]
        assert result.agents[agent] != live[agent].state_hash
        assert all(result.agents[a] == live[a].state_hash for a in live if a != agent)
        with pytest.raises(StateDiverged) as strict:
            replay_swarm(settings=run_settings, swarm=swarms.state_trap, registry=registry, backend=backend,
                         strict=True)
        assert (strict.value.offset, strict.value.agent) == (offset, agent)

    def test_a_restart_refuses_to_go_on_from_a_state_the_run_never_had(self, backend, run_settings, registry):
        start_run(settings=run_settings, swarm=swarms.state_trap, run_id="trap2", seed=8, backend=backend)
        self._run(backend, run_settings, swarms.state_trap)
        offset, agent = trap_step(backend, run_settings.topic, registry)
        with pytest.raises(StateDiverged) as err:
            self._run(backend, run_settings, swarms.state_trap, agents=[agent])
        assert (err.value.offset, err.value.agent) == (offset, agent)

    def test_a_state_divergence_shows_a_diff_when_the_live_state_is_known(self, backend, run_settings, registry):
        swarm = Swarm(name="relay", agents=lambda: [_Remembering(n) for n in swarms._names()], code_version="t")
        start_run(settings=run_settings, swarm=swarm, run_id="diff", seed=8, backend=backend)
        _Remembering.remember = True
        try:
            self._run(backend, run_settings, swarm)
        finally:
            _Remembering.remember = False
        offset, agent = trap_step(backend, run_settings.topic, registry)
        result = replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend,
                              live_states=_Snapshots())
        (d,) = result.divergences
        assert (d.offset, d.agent) == (offset, agent)
        live_trap = _LIVE_STATES[(agent, offset)]["trap"]
        assert any(line.startswith("state['trap'][") and f"live {live_trap[1]}" in line
                   for line in d.replayed["diff"])

    def test_digest_records_are_not_events_a_logical_timer_counts(self, backend, run_settings, registry):
        swarm = Swarm(name="wait", agents=lambda: [_Waiter("a"), _Waiter("b")], code_version="1")
        start_run(settings=run_settings, swarm=swarm, run_id="w", seed=1, backend=backend)
        self._run(backend, run_settings, swarm)
        # After a's timer.set: its message to b (one event), then a's and b's digest records (none).
        assert len(digest_records(backend, run_settings.topic, registry)) >= 2
        assert "timer.fired" not in [t for _, t, _ in events(backend, run_settings.topic, registry)]
        with EventLog(settings=run_settings, registry=registry, run_id="w", backend=backend) as log:
            appended = [log.append("agent.message", {"kind": "other", "body": str(i)}, agent="op", to="c")
                        for i in range(2)]
        self._run(backend, run_settings, swarm)
        (fired,) = [rec for _, t, rec in events(backend, run_settings.topic, registry) if t == "timer.fired"]
        assert fired["causes"][1] == appended[0]  # the 2nd event after the timer.set

    def test_digests_off_record_nothing_and_replay_checks_nothing(self, backend, run_settings, registry):
        off = run_settings.model_copy(update={"state_digest_every": 0})
        start_run(settings=off, swarm=swarms.state_trap, run_id="off", seed=8, backend=backend)
        self._run(backend, off, swarms.state_trap)
        assert digest_records(backend, run_settings.topic, registry) == []
        result = replay_swarm(settings=off, swarm=swarms.state_trap, registry=registry, backend=backend)
        assert result.divergences == [] and set(result.states_recorded.values()) == {0}

    def test_every_kth_step_and_each_transactions_last_is_digested_and_checked(self, backend, run_settings,
                                                                               registry):
        k3 = run_settings.model_copy(update={"state_digest_every": 3})
        start_run(settings=k3, swarm=swarms.relay, run_id="k3", seed=4, backend=backend)
        live = {r.agent: r for r in self._run(backend, k3, swarms.relay)}
        records = digest_records(backend, run_settings.topic, registry)
        for agent, r in live.items():
            steps = [s for _, rec in records if rec["agent_id"] == agent for s in rec["payload"]["steps"]]
            assert r.steps // 3 <= len(steps) <= r.steps
        result = replay_swarm(settings=k3, swarm=swarms.relay, registry=registry, backend=backend)
        assert result.divergences == [] and result.states_checked == result.states_recorded
        assert sum(result.states_checked.values()) < sum(r.steps for r in live.values())


def _recorded_digest(backend: Any, topic: str, registry: Any, agent: str, step: int) -> str:
    for _, rec in digest_records(backend, topic, registry):
        if rec["agent_id"] == agent and step in rec["payload"]["steps"]:
            return rec["payload"]["digests"][rec["payload"]["steps"].index(step)].hex()
    raise AssertionError(f"no digest of {agent}'s step {step}")
