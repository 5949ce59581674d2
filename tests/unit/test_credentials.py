"""``ctx.credential``: an SDK's key is the environment's live, a placeholder on replay, and never in the log.

The same worker, context and replayer as on Kafka, on ``InMemoryLog``, against the stub server (the
swarm on the real broker, with the SDKs as docs/sdks.md prints them: tests/integration/test_http_swarm.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.llm import CredentialMissing
from swarmlog.log.protocol import HANDLER_FAILED, HTTP_EXCHANGE
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer

from ..contract.runtime import events

KEY = "sk-unit-credential-SECRET-0123456789"
TOOL_KEY = "tool-unit-SECRET-9876543210"
ASK = [{"role": "user", "content": "hi"}]


class Asker(Agent):
    """Both official SDKs, sync and async, given their keys by ctx.credential and their endpoints by the
    deployment (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``); a tool that takes its key in the JSON body."""

    def __init__(self, name: str, *, tools_url: str) -> None:
        super().__init__(name)
        self.tools_url = tools_url

    def initial_state(self):
        return {"answers": []}

    @on("run.started")
    async def start(self, ctx, event):
        import anthropic
        import openai
        gpt = openai.OpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.http())
        claude = anthropic.AsyncAnthropic(api_key=ctx.credential("ANTHROPIC_API_KEY"), http_client=ctx.async_http())
        agpt = openai.AsyncOpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.async_http())
        sync_claude = anthropic.Anthropic(api_key=ctx.credential("ANTHROPIC_API_KEY"), http_client=ctx.http())
        tool = ctx.http(httpx).post(f"{self.tools_url}/search", json={"api_key": ctx.credential("TOOL_KEY"), "q": "x"})
        self.state["answers"] += [
            gpt.chat.completions.create(model="m", messages=ASK).choices[0].message.content,
            (await claude.messages.create(model="m", max_tokens=8, messages=ASK)).content[0].text,
            (await agpt.chat.completions.create(model="m", messages=ASK)).choices[0].message.content,
            sync_claude.messages.create(model="m", max_tokens=8, messages=ASK).content[0].text,
            tool.json()]


def _swarm(tools_url: str) -> Swarm:
    # The SDKs are imported here, not at the top: only the worker that runs these tests pays for them
    # (anthropic's import is the unit suite's costliest). Here, before the run, as a module-level import
    # did: the handler's own `import` then only looks them up.
    import anthropic  # noqa: F401
    import openai  # noqa: F401

    return Swarm(name="keys", agents=lambda: [Asker("asker", tools_url=tools_url)], code_version="1")


def _live_env(monkeypatch: pytest.MonkeyPatch, server: StubServer) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("TOOL_KEY", TOOL_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)


def _nothing_of_the_live_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TOOL_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_the_sdks_get_the_live_key_and_replay_needs_no_key_no_base_url_and_no_server(
        backend, run_settings, registry, monkeypatch):
    seen: list[Any] = []
    with StubServer(routes={"/search": lambda request: (seen.append(request.body), "found")[1]}) as server:
        _live_env(monkeypatch, server)
        swarm = _swarm(f"http://127.0.0.1:{server.port}")
        start_run(settings=run_settings, swarm=swarm, run_id="keys", seed=1, backend=backend, registry=registry)
        [live] = run_agents(settings=run_settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.3)
        sent = [r.headers.get("x-api-key") or r.headers.get("authorization", "") for r in server.requests
                if r.path != "/search"]
    assert live.state["answers"] == ["echo: hi"] * 4 + ["found"]
    assert len(sent) == 4 and all(KEY in h for h in sent)  # live: the environment's key, as each SDK sends it
    assert seen == [{"api_key": TOOL_KEY, "q": "x"}]
    exchanges = [rec["payload"] for _, t, rec in events(backend, run_settings.topic, registry) if t == HTTP_EXCHANGE]
    assert len(exchanges) == 5
    text = json.dumps(exchanges)
    assert KEY not in text and TOOL_KEY not in text  # the tool's key scrubbed from its body, as a header's is
    [search] = [e for e in exchanges if e["url"].endswith("/search")]
    assert json.loads(search["request_body"]) == {"api_key": "<redacted>", "q": "x"}

    _nothing_of_the_live_env(monkeypatch)  # and the server is stopped
    network: list[str] = []
    for lib in (httpx, httpx2):  # the one door out of recorded HTTP
        monkeypatch.setattr(lib.HTTPTransport, "handle_request", lambda self, request: network.append(str(request.url)))
    result = replay_swarm(settings=run_settings, swarm=swarm, backend=backend, registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.states["asker"] == live.state


def test_a_credential_unset_live_fails_the_step_naming_the_variable(backend, run_settings, registry, monkeypatch):
    _nothing_of_the_live_env(monkeypatch)
    swarm = _swarm("http://127.0.0.1:9")
    start_run(settings=run_settings, swarm=swarm, run_id="nokey", seed=1, backend=backend, registry=registry)
    run_agents(settings=run_settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.3)
    [failed] = [rec["payload"] for _, t, rec in events(backend, run_settings.topic, registry) if t == HANDLER_FAILED]
    assert failed["error_type"] == "CredentialMissing"
    assert "OPENAI_API_KEY is not set" in failed["message"] and "A replay does not need it" in failed["message"]
    assert issubclass(CredentialMissing, Exception)


def test_a_credential_is_read_only_in_a_step_and_only_by_a_variables_name(backend, run_settings, registry):
    from swarmlog.context import Context
    from swarmlog.errors import ConfigurationError, OutsideStep
    from swarmlog.llm.credentials import read_credential

    with pytest.raises(OutsideStep):
        Context(agent="a", registry=registry).credential("OPENAI_API_KEY")
    with pytest.raises(ConfigurationError, match="name an environment variable"):
        read_credential("sk-a-key-by-mistake", agent="a", live=True)
    assert read_credential("OPENAI_API_KEY", agent="a", live=False) == \
        "swarmlog-replay-placeholder-for-OPENAI_API_KEY"


def test_swarm_llm_takes_an_sdks_class_and_builds_the_client_only_at_the_first_live_call(monkeypatch):
    import anthropic
    import openai

    from swarmlog.llm import SDKChat

    _nothing_of_the_live_env(monkeypatch)
    swarm = Swarm(name="s", agents=list, llm=openai.OpenAI)  # openai.OpenAI() would refuse: no key here
    assert isinstance(swarm.llm, SDKChat) and "not built yet" in repr(swarm.llm)
    with StubServer(lambda request: "hi there") as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        reply = swarm.llm.complete({"model": "m", "messages": ASK})
        assert reply["choices"][0]["message"]["content"] == "hi there" and swarm.llm.api == "chat.completions"
        claude = Swarm(name="s", agents=list, llm=lambda: anthropic.Anthropic(api_key=KEY,
                                                                             base_url=server.anthropic_base_url)).llm
        assert claude.complete({"model": "m", "max_tokens": 8, "messages": ASK})["content"][0]["text"] == "hi there"
        assert claude.api == "messages" and server.request_count == 2
