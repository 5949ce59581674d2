"""What stops a step's replay stops it, whatever the handler does with it.

A replayed effect that differs from the record (``EffectDiverged``), or one the live run never made
(the step lies past where the live agent got), is raised inside the handler, from ``ctx.effect``. A
handler that catches it (``except Exception``) and goes on, or raises something else, has not replayed
the step: the fold still reports the divergence, or stops unverified there — never a clean step, and
never a failure of the handler's own (``handler.failed``).
"""

from __future__ import annotations

from typing import Any

import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.errors import EffectDiverged
from swarmlog.log.protocol import route
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import LogHistory
from swarmlog.schema.codec import Decoder

ARG = {"value": 1}


def _work(n: int) -> dict[str, int]:
    return {"n": n * 10}


class Careful(Agent):
    """Catches everything ctx.effect raises, as handlers written against flaky services do."""

    reraise = False

    def initial_state(self) -> dict[str, Any]:
        return {"n": 0}

    @on("run.started")
    def start(self, ctx, event):
        try:
            got = ctx.effect("work", _work, ARG["value"])
        except Exception as exc:
            if self.reraise:
                raise RuntimeError("the service failed") from exc
            got = {"n": -1}
        self.state["n"] = got["n"]
        ctx.send("careful", "noted", str(got["n"]))


class Reraising(Careful):
    reraise = True


def _recorded(backend, run_settings, agent: type[Careful]) -> Swarm:
    swarm = Swarm(name="careful", agents=lambda: [agent("careful")], code_version="1")
    start_run(settings=run_settings, swarm=swarm, run_id="r", seed=1, backend=backend)
    run_agents(settings=run_settings, swarm=swarm, backend=backend, until_quiet=0.2)
    return swarm


@pytest.mark.parametrize("agent", [Careful, Reraising], ids=["goes-on", "raises-another"])
def test_a_changed_effect_the_handler_catches_is_still_an_effect_divergence(backend, run_settings, monkeypatch,
                                                                             agent):
    monkeypatch.setitem(ARG, "value", 1)
    swarm = _recorded(backend, run_settings, agent)
    monkeypatch.setitem(ARG, "value", 2)  # the code now asks the service something else
    result = replay_swarm(settings=run_settings, swarm=swarm, backend=backend, strict=False)
    assert [(d.kind, d.agent) for d in result.divergences] == [("effect", "careful")], result.divergences
    assert "not what the log recorded" in result.divergences[0].detail
    with pytest.raises(EffectDiverged):  # and a strict replay raises it
        replay_swarm(settings=run_settings, swarm=swarm, backend=backend, strict=True)


@pytest.mark.parametrize("agent", [Careful, Reraising], ids=["goes-on", "raises-another"])
def test_an_effect_the_live_run_never_made_stops_the_fold_unverified_though_the_handler_catches_it(
        backend, run_settings, registry, agent):
    # The run started, the agent never ran: its step's effect lies past where the live agent got.
    swarm = Swarm(name="careful", agents=lambda: [agent("careful")], code_version="1")
    start_run(settings=run_settings, swarm=swarm, run_id="r", seed=1, backend=backend)
    result = replay_swarm(settings=run_settings, swarm=swarm, backend=backend, strict=False)
    assert result.divergences == [] and result.unverified_from == {"careful": 0}
    decoder = Decoder(registry)
    history = LogHistory(backend=backend, topic=run_settings.topic, decoder=decoder, agents=["careful"])
    history.read_to_end()
    core = AgentCore(agent=agent("careful"), decoder=decoder, history=history.agent("careful"), live_sink=None,
                     strict=False)
    for m in backend.messages(run_settings.topic):
        core.process(m, route(m.headers()))
    core.finish()
    assert core.stopped and core.unverified == 0
    assert core.failures == {} and core.pending == {}  # no failure of its own, nothing written past the stop
