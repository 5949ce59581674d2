"""An LLM-using swarm runs live against a local OpenAI-compatible server, then replays with that
server stopped: every response comes from the log, the model is never called again."""

from __future__ import annotations

import httpx
import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.llm import OpenAIChat, content
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer


class Asker(Agent):
    def initial_state(self):
        return {"answers": []}

    @on("run.started")
    def start(self, ctx, event):
        for q in ("capital of France?", "2+2?", "colour of the sky?"):
            ctx.send("oracle", "question", q)

    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"].append(event.body)


class Oracle(Agent):
    def initial_state(self):
        return {"asked": 0}

    @on_message("question")
    def question(self, ctx, event):
        self.state["asked"] += 1
        reply = ctx.llm({"model": "stub-1", "temperature": 0.7,
                         "messages": [{"role": "user", "content": event.body}]})
        ctx.send(event.agent_id, "answer", content(reply))


def _swarm(base_url: str) -> Swarm:
    return Swarm(name="oracle", agents=lambda: [Asker("asker"), Oracle("oracle")], code_version="oracle-1",
                 llm=OpenAIChat(base_url=base_url, api_key_env=None, timeout=2.0, max_retries=0))


def test_llm_swarm_replays_with_its_llm_endpoint_unreachable(settings, registry):
    answers = iter(["Paris", "4", "blue"])
    with StubServer(lambda request: next(answers)) as server:
        swarm = _swarm(server.base_url)
        start_run(settings=settings, swarm=swarm, run_id="llm", seed=1)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.0)}
        assert server.request_count == 3
        base_url = server.base_url
    assert sorted(live["asker"].state["answers"]) == ["4", "Paris", "blue"]

    # The endpoint is gone: a live call would fail...
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{base_url}/chat/completions", json={}, timeout=1.0)
    # ...and replay never makes one.
    result = replay_swarm(settings=settings, swarm=_swarm(base_url), registry=registry)
    assert result.divergences == []
    assert result.agents == {name: r.state_hash for name, r in live.items()}
    assert result.states["asker"]["answers"] == live["asker"].state["answers"]


def test_a_changed_llm_request_is_reported_as_a_divergence(settings, registry):
    with StubServer(lambda request: "ok") as server:
        swarm = _swarm(server.base_url)
        start_run(settings=settings, swarm=swarm, run_id="llm2", seed=1)
        run_agents(settings=settings, swarm=swarm, until_quiet=1.0)

    class ColderOracle(Oracle):
        @on_message("question")
        def question(self, ctx, event):
            ctx.llm({"model": "stub-1", "temperature": 0.0, "messages": [{"role": "user", "content": event.body}]})

    changed = Swarm(name="oracle", agents=lambda: [Asker("asker"), ColderOracle("oracle")], code_version="oracle-2")
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    first = result.first_divergence
    assert first is not None and first.agent == "oracle" and "LLM request differs" in first.detail
    assert '"temperature":0.7' in first.recorded["payload"]["request_json"]
