"""The swarm replay's dispatcher: each message only to the agents it concerns, decoded once.

The oracle is the fold without it: every agent's ``AgentCore`` fed every message of the log
(what the live worker does for its one agent). The dispatcher must leave every core exactly
as that fold does, and no handler may see what another agent's handler did to its event.
"""

from __future__ import annotations

from typing import Any

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import route
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime._dispatch import Dispatcher
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import LogHistory
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .. import swarms


def _cores(backend: InMemoryLog, topic: str, registry: SchemaRegistry, swarm: Swarm) -> list[AgentCore]:
    decoder = Decoder(registry)
    agents = swarm.agents()
    history = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=[a.name for a in agents])
    history.read_to_end()
    return [AgentCore(agent=a, decoder=decoder, history=history.agent(a.name), live_sink=None, strict=False)
            for a in agents]


def _fold_state(core: AgentCore) -> dict[str, Any]:
    return {"state": core.agent.state, "events_seen": core.events_seen, "position": core.position,
            "steps": core.steps, "last_recorded_step": core.last_recorded_step, "pending": core.pending,
            "timers": core.timers, "divergences": core.divergences, "unverified": core.unverified,
            "stopped": core.stopped, "seed": core.ctx.seed}


def _run(swarm: Swarm, seed: int) -> tuple[InMemoryLog, Settings]:
    backend = InMemoryLog()
    backend.create_topic("t")
    settings = Settings(topic="t", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarm, run_id="r", seed=seed, backend=backend)
    run_agents(settings=settings, swarm=swarm, until_quiet=0.3, backend=backend)
    return backend, settings


def test_the_dispatcher_leaves_every_core_as_folding_every_message_into_every_core_does(registry):
    # relay_long uses every door of ctx: random draws, effects, logical timers, broadcasts.
    backend, settings = _run(swarms.relay_long, seed=5)
    msgs = backend.messages("t")
    every = _cores(backend, "t", registry, swarms.relay_long)
    for m in msgs:
        r = route(m.headers())
        for core in every:
            core.process(m, r)
    routed = _cores(backend, "t", registry, swarms.relay_long)
    dispatch = Dispatcher(cores=routed)
    for m in msgs:
        dispatch.apply(m, route(m.headers()))
    dispatch.sync()
    assert sum(c.steps for c in every) > len(every)  # the log has steps to compare, not only run.started
    assert any(c.timers or c.events_seen for c in every)
    for a, b in zip(every, routed, strict=True):
        assert _fold_state(b) == _fold_state(a), a.name


class _Toucher(Agent):
    """Changes the event it is given, and records what it was given."""

    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    @on("run.started")
    def start(self, ctx, event):
        if self.name == "a0":
            ctx.broadcast("note", {"n": 1})
            ctx.send("a1", "note", {"n": 2})

    @on_message("note")
    def note(self, ctx, event):
        self.state["seen"].append([event.agent_id, event.payload["body"], list(event.causes)])
        event.payload["body"] = "changed by " + self.name
        event.causes.append(-1)


_touchers = Swarm(name="touchers", agents=lambda: [_Toucher(n) for n in ("a0", "a1", "a2", "a3")],
                  code_version="touch-1")


def test_a_handler_that_changes_its_event_changes_nothing_another_agent_sees(registry):
    backend, settings = _run(_touchers, seed=1)
    live = replay_swarm(settings=settings, swarm=_touchers, registry=registry, backend=backend)
    assert live.divergences == []
    # The broadcast reached three agents, each with the body as written, and a1 got its message too.
    seen = {name: state["seen"] for name, state in live.states.items()}
    assert [body for _, body, _ in seen["a1"]] == ['{"n":1}', '{"n":2}']
    assert [body for _, body, _ in seen["a2"]] == ['{"n":1}']
    assert seen["a2"] == seen["a3"]
    assert seen["a0"] == []
