"""The runtime decides by error type: what stops an agent's replay and what does not (in memory)."""

from __future__ import annotations

from typing import Any

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.errors import NondeterminismError
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run


def _work(n: int) -> dict[str, int]:
    return {"n": n}


class _Sender(Agent):
    @on("run.started")
    def start(self, ctx, event):
        for i in range(3):
            ctx.send("w", "job", str(i))


class _Worker(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"jobs": 0}

    @on_message("job")
    def job(self, ctx, event):
        self.state["jobs"] += 1
        ctx.effect("work", _work, int(event.body))
        ctx.send("s", "done", event.body)


class _WorkerWritesOtherwise(_Worker):
    @on_message("job")
    def job(self, ctx, event):
        self.state["jobs"] += 1
        ctx.effect("work", _work, int(event.body))
        ctx.send("s", "done", "something else")  # an output divergence: the handler could go on


class _WorkerWhoseWordsMentionEffects(_Worker):
    @on_message("job")
    def job(self, ctx, event):
        self.state["jobs"] += 1
        # Text that an error-message check would take for an effect divergence; its type says otherwise.
        raise NondeterminismError(offset=ctx.now(), agent="w", detail="an effect or LLM the log has no record of")


class _WorkerCallingAnotherEffect(_Worker):
    @on_message("job")
    def job(self, ctx, event):
        self.state["jobs"] += 1
        ctx.effect("other-work", _work, int(event.body))  # the log recorded "work": cannot be served


def _swarm(worker: type[_Worker]) -> Swarm:
    return Swarm(name="decisions", agents=lambda: [_Sender("s"), worker("w")], code_version="1")


def _recorded(backend, run_settings) -> None:
    start_run(settings=run_settings, swarm=_swarm(_Worker), run_id="r", seed=1, backend=backend)
    run_agents(settings=run_settings, swarm=_swarm(_Worker), until_quiet=0.3, backend=backend)


def test_an_output_divergence_is_reported_and_the_agents_replay_goes_on(backend, run_settings, registry):
    _recorded(backend, run_settings)
    result = replay_swarm(settings=run_settings, swarm=_swarm(_WorkerWritesOtherwise), registry=registry,
                          backend=backend)
    assert len(result.divergences) == 3  # one per job: every step still ran
    assert result.states["w"]["jobs"] == 3


def test_a_divergence_whose_text_mentions_effects_does_not_stop_the_agent(backend, run_settings, registry):
    _recorded(backend, run_settings)
    result = replay_swarm(settings=run_settings, swarm=_swarm(_WorkerWhoseWordsMentionEffects), registry=registry,
                          backend=backend)
    assert result.states["w"]["jobs"] == 3


def test_an_effect_the_log_cannot_serve_stops_that_agent_at_that_step(backend, run_settings, registry):
    _recorded(backend, run_settings)
    result = replay_swarm(settings=run_settings, swarm=_swarm(_WorkerCallingAnotherEffect), registry=registry,
                          backend=backend)
    first = result.first_divergence
    assert first is not None and first.agent == "w"
    assert result.states["w"]["jobs"] == 1  # stopped at the first job: nothing after it could be served


def test_an_agent_stopped_cleanly_has_committed_past_its_last_transaction_marker(backend, run_settings, registry):
    """Lag 0 in Kafka's terms: a caught-up agent's committed offset is the log end, markers included."""
    from swarmlog.log.protocol import agent_group

    _recorded(backend, run_settings)
    end = backend.watermarks(run_settings.topic)[1]
    for agent in ("s", "w"):
        assert backend.committed(agent_group(run_settings.topic, agent), run_settings.topic) == end
