"""The official SDKs, unchanged, inside handlers through ctx.http(): a swarm runs live against the
stub server on the real broker, then replays with the stub stopped.

Must show (issue 15): live one request per call; replay makes zero requests and reproduces every
agent's state exactly (streams included); a changed prompt is a divergence naming the request; no
API key in the log, the mirror, a replay token or an error.

Must show (issue 27): docs/sdks.md's agents as printed (the sync SDKs, and the async ones beside them), keys
from ``ctx.credential``, endpoints from ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``, replay in-process and as
``swarmlog replay --swarm`` with neither variable set and the stub stopped, making no request.
"""

from __future__ import annotations

import json
import subprocess
import sys

import anthropic
import httpx
import httpx2
import openai
import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.kafka.reader import LogReader
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer, tool_call_reply
from swarmlog.token import token_from
from swarmlog_connectors.postgres_sink import PostgresSink

from ..conftest import REPO, subprocess_env
from ..docs_code import forget_modules, parse, write_files
from .conftest import read_log

KEY = "sk-swarmlog-test-SECRET-0123456789abcdef"
WRONG_KEY = "sk-wrong-key-ABCDEFGHIJ-9876543210"
QUESTIONS = ("capital of France?", "weather in Paris?")
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "today's weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLAUDE_TOOL = {"name": "get_weather", "description": "today's weather in a city",
               "input_schema": WEATHER_TOOL["function"]["parameters"]}


def script(request: dict) -> str | dict:
    """The stub's model: asks for the weather tool when asked about weather, then answers."""
    last = request["messages"][-1]
    content = last.get("content")
    if last.get("role") == "tool" or (isinstance(content, list) and content
                                      and content[0].get("type") == "tool_result"):
        return "sunny, 21C, says the tool"
    text = content if isinstance(content, str) else json.dumps(content)
    if "weather" in text and request.get("tools"):
        return tool_call_reply(("get_weather", {"city": "Paris"}))
    return f"answer to {text}"


def get_weather(city: str) -> str:
    return f"{city}: sunny, 21C"


class Asker(Agent):
    def initial_state(self):
        return {"answers": {}}

    @on("run.started")
    def start(self, ctx, event):
        for agent in ("gpt", "claude", "legacy"):
            for q in QUESTIONS:
                ctx.send(agent, "question", q)

    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"].setdefault(event.agent_id, []).append(event.json())


class GPT(Agent):
    """openai.OpenAI on ctx.http(): plain, streamed, and a tool-call round trip, per question."""

    library = httpx2

    def __init__(self, name: str, *, base_url: str, key: str = KEY, prompt: str = "{}") -> None:
        super().__init__(name)
        self.base_url, self.key, self.prompt = base_url, key, prompt

    def initial_state(self):
        return {"asked": 0}

    @on_message("question")
    def question(self, ctx, event):
        client = openai.OpenAI(api_key=self.key, base_url=self.base_url, http_client=ctx.http(self.library))
        messages = [{"role": "user", "content": self.prompt.format(event.body)}]
        plain = client.chat.completions.create(model="gpt-stub", messages=messages)
        stream = client.chat.completions.create(model="gpt-stub", messages=messages, stream=True,
                                                stream_options={"include_usage": True})
        deltas = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        tooled = client.chat.completions.create(model="gpt-stub", messages=messages, tools=[WEATHER_TOOL])
        msg = tooled.choices[0].message
        if msg.tool_calls:
            call = msg.tool_calls[0]
            result = get_weather(**json.loads(call.function.arguments))
            follow = [*messages, msg.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": result}]
            tooled = client.chat.completions.create(model="gpt-stub", messages=follow, tools=[WEATHER_TOOL])
        self.state["asked"] += 1
        ctx.send(event.agent_id, "answer", {"plain": plain.choices[0].message.content, "stream": deltas,
                                            "tools": tooled.choices[0].message.content, "id": plain.id})


class Legacy(GPT):
    """The same SDK on an httpx (not httpx2) client: ctx.http(httpx)."""

    library = httpx


class Claude(Agent):
    """anthropic.Anthropic on ctx.http(): plain, streamed, and a tool-use round trip, per question."""

    def __init__(self, name: str, *, base_url: str, key: str = KEY, prompt: str = "{}") -> None:
        super().__init__(name)
        self.base_url, self.key, self.prompt = base_url, key, prompt

    def initial_state(self):
        return {"asked": 0, "errors": []}

    @on_message("question")
    def question(self, ctx, event):
        client = anthropic.Anthropic(api_key=self.key, base_url=self.base_url, http_client=ctx.http())
        messages = [{"role": "user", "content": self.prompt.format(event.body)}]
        try:
            plain = client.messages.create(model="claude-stub", max_tokens=64, messages=messages)
        except anthropic.AuthenticationError as exc:
            self.state["errors"].append(str(exc))
            ctx.send(event.agent_id, "answer", {"error": str(exc)})
            return
        with client.messages.stream(model="claude-stub", max_tokens=64, messages=messages) as stream:
            deltas = list(stream.text_stream)
        tooled = client.messages.create(model="claude-stub", max_tokens=64, messages=messages, tools=[CLAUDE_TOOL])
        if tooled.stop_reason == "tool_use":
            use = next(b for b in tooled.content if b.type == "tool_use")
            follow = [*messages, {"role": "assistant", "content": [b.model_dump() for b in tooled.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                    "content": get_weather(**use.input)}]}]
            tooled = client.messages.create(model="claude-stub", max_tokens=64, messages=follow, tools=[CLAUDE_TOOL])
        self.state["asked"] += 1
        ctx.send(event.agent_id, "answer", {"plain": plain.content[0].text, "stream": deltas,
                                            "tools": tooled.content[0].text, "id": plain.id})


def sdk_swarm(server: StubServer, *, prompt: str = "{}", claude_key: str = KEY) -> Swarm:
    """The swarm; ``prompt`` is the template the LLM agents put each question in."""
    openai_url, anthropic_url = server.base_url, server.anthropic_base_url
    return Swarm(name="sdks", code_version="sdks-1", agents=lambda: [
        Asker("asker"), GPT("gpt", base_url=openai_url, prompt=prompt),
        Claude("claude", base_url=anthropic_url, key=claude_key, prompt=prompt),
        Legacy("legacy", base_url=openai_url, prompt=prompt)])


# One request per SDK call: per question, plain, stream and one with tools; the weather question's
# tool call takes one more request; for each of the three LLM agents.
SDK_CALLS = 3 * (3 * len(QUESTIONS) + 1)


def _count_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request that reaches either library's network transport (the one door out)."""
    seen: list[str] = []
    for lib in (httpx, httpx2):
        original = lib.HTTPTransport.handle_request

        def counting(self, request, _original=original):
            seen.append(f"{request.method} {request.url}")
            return _original(self, request)

        monkeypatch.setattr(lib.HTTPTransport, "handle_request", counting)
    return seen


def _raw_log_bytes(settings) -> bytes:
    out = []
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                out.append(m.value() or b"")
                out.extend(k.encode() + (v or b"") for k, v in (m.headers() or ()))
    return b"\n".join(out)


def test_sdks_through_ctx_http_replay_with_the_server_stopped_and_zero_requests(settings, registry, db, monkeypatch):
    network = _count_network(monkeypatch)
    with StubServer(script, api_key=KEY) as server:
        swarm = sdk_swarm(server)
        start_run(settings=settings, swarm=swarm, run_id="sdks", seed=3)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
        # Live: exactly one request per SDK call, each of them through the network once.
        assert server.request_count == SDK_CALLS
        assert len(network) == server.request_count
        streamed = [r for r in server.requests if isinstance(r.body, dict) and r.body.get("stream")]
        assert len(streamed) == 3 * len(QUESTIONS)
    answers = live["asker"].state["answers"]
    for agent in ("gpt", "claude", "legacy"):
        assert [a["plain"] for a in answers[agent]] == [f"answer to {q}" for q in QUESTIONS]
        assert answers[agent][1]["tools"] == "sunny, 21C, says the tool"
        assert "".join(answers[agent][0]["stream"]) == "answer to capital of France?"
        assert len(answers[agent][0]["stream"]) == 5  # word by word, as the stub streamed it

    exchanges = [r for r in read_log(settings, registry) if r.event_type == "http.exchange"]
    assert len(exchanges) == server.request_count

    # Replay: the stub is stopped, so any request would fail; none is made.
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{server.base_url}/chat/completions", json={}, timeout=1.0)
    network.clear()
    result = replay_swarm(settings=settings, swarm=sdk_swarm(server), registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.agents == {name: r.state_hash for name, r in live.items()}
    assert result.states["asker"] == live["asker"].state  # the streams' chunks included

    # No key anywhere: the log's bytes, the mirror, a replay token.
    raw = _raw_log_bytes(settings)
    assert KEY.encode() not in raw and KEY[3:].encode() not in raw
    assert b"<redacted>" in raw
    auth = [h for e in exchanges for h in e.record["payload"]["request_headers"] if h["name"] == "authorization"]
    assert auth and {h["value"] for h in auth} == {"<redacted>"}
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert stats.dead_letters == 0
    mirrored = db.execute("SELECT count(*), count(*) FILTER (WHERE payload::text LIKE %s) FROM events "
                          "WHERE topic = %s AND event_type = 'http.exchange'",
                          (f"%{KEY[3:]}%", settings.topic)).fetchone()
    assert mirrored == (len(exchanges), 0)
    assert db.execute("SELECT count(*) FROM events WHERE topic = %s AND payload::text LIKE %s",
                      (settings.topic, f"%{KEY[3:]}%")).fetchone() == (0,)
    token = token_from(result, topic=settings.topic, run=None, code_version="sdks-1", reducer="swarm:sdks")
    assert KEY[3:] not in json.dumps(token.__dict__)


def test_a_changed_prompt_is_a_divergence_naming_the_request(settings, registry, monkeypatch):
    with StubServer(script, api_key=KEY) as server:
        swarm = sdk_swarm(server)
        start_run(settings=settings, swarm=swarm, run_id="sdks-changed", seed=3)
        run_agents(settings=settings, swarm=swarm, until_quiet=1.5)
    network = _count_network(monkeypatch)
    changed = sdk_swarm(server, prompt="Answer briefly: {}")
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    assert network == []  # a divergent request is reported, never sent
    first = result.first_divergence
    assert first is not None
    assert f"POST {server.base_url}/chat/completions" in first.detail or \
        f"POST {server.anthropic_base_url}/v1/messages" in first.detail
    assert "body.messages[0].content" in first.detail
    assert "recorded 'capital of France?', now 'Answer briefly: capital of France?'" in first.detail
    assert first.recorded["part"] == "body.messages[0].content"
    assert KEY[3:] not in first.detail and KEY[3:] not in json.dumps(first.to_json())
    assert {d.agent for d in result.divergences} >= {"gpt", "claude", "legacy"}


def test_a_key_the_server_echoes_in_an_error_reaches_neither_the_log_nor_the_handler(settings, registry):
    with StubServer(script, api_key=KEY) as server:
        swarm = sdk_swarm(server, claude_key=WRONG_KEY)
        start_run(settings=settings, swarm=swarm, run_id="sdks-401", seed=3)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
    errors = live["claude"].state["errors"]
    assert len(errors) == len(QUESTIONS)
    assert all("401" in e and "Incorrect API key provided: <redacted>" in e for e in errors)
    assert WRONG_KEY[3:] not in json.dumps(live["claude"].state)
    assert WRONG_KEY[3:].encode() not in _raw_log_bytes(settings)
    # The recorded 401 replays as the same error, with nothing to contact.
    result = replay_swarm(settings=settings, swarm=sdk_swarm(server, claude_key=WRONG_KEY), registry=registry)
    assert result.divergences == []
    assert result.states["claude"] == live["claude"].state


class Oracle(Agent):
    def initial_state(self):
        return {"replies": []}

    @on("run.started")
    def start(self, ctx, event):
        for q in QUESTIONS:
            reply = ctx.llm({"model": "gpt-stub", "messages": [{"role": "user", "content": q}],
                             "tools": [WEATHER_TOOL]})
            self.state["replies"].append(reply["choices"][0]["message"])


def test_swarm_takes_an_openai_client_for_ctx_llm(settings, registry, monkeypatch):
    with StubServer(script, api_key=KEY) as server:
        client = openai.OpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
        swarm = Swarm(name="oracle", agents=lambda: [Oracle("oracle")], llm=client)
        start_run(settings=settings, swarm=swarm, run_id="sdk-llm", seed=1)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.0)}
        assert server.request_count == len(QUESTIONS)
    replies = live["oracle"].state["replies"]
    assert replies[0]["content"] == "answer to capital of France?"
    assert replies[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    calls = [r for r in read_log(settings, registry) if r.event_type == "llm.call"]
    assert len(calls) == len(QUESTIONS) and KEY[3:] not in json.dumps([c.record for c in calls])
    network = _count_network(monkeypatch)
    result = replay_swarm(settings=settings, swarm=Swarm(name="oracle", agents=lambda: [Oracle("oracle")],
                                                         llm=openai.OpenAI(api_key=KEY, base_url=server.base_url)),
                          registry=registry)
    assert network == [] and result.divergences == []
    assert result.states["oracle"] == live["oracle"].state


# --- the docs' example (docs/sdks.md), as printed: nothing of the live environment on replay -------------------

ASYNC_RESEARCH = '''
import asyncio

import anthropic
import openai

from swarmlog import Agent, Swarm, on, on_message

from research import Desk, Researcher


class AsyncResearcher(Agent):
    """research.Researcher's calls on the async SDKs, at once."""

    @on_message("question")
    async def ask(self, ctx, event):
        gpt = openai.AsyncOpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.async_http())
        claude = anthropic.AsyncAnthropic(api_key=ctx.credential("ANTHROPIC_API_KEY"), http_client=ctx.async_http())
        messages = [{"role": "user", "content": event.body}]

        async def streamed():
            async with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=512, messages=messages) as stream:
                return "".join([text async for text in stream.text_stream])

        reply, text = await asyncio.gather(gpt.chat.completions.create(model="gpt-4o-mini", messages=messages),
                                           streamed())
        ctx.send(event.agent_id, "answer", {"gpt": reply.choices[0].message.content, "claude": text})


class BothDesk(Desk):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("researcher", "question", "capital of France?")
        ctx.send("async-researcher", "question", "capital of Spain?")


swarm = Swarm(name="research", agents=lambda: [BothDesk("desk"), Researcher("researcher"),
                                               AsyncResearcher("async-researcher")], llm=openai.OpenAI)
'''
LIVE_ENVIRONMENT = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


def test_the_docs_sdk_agents_sync_and_async_replay_with_no_key_no_base_url_and_the_stub_stopped_making_no_request(
        settings, registry, monkeypatch, tmp_path):
    assert write_files(parse(REPO / "docs" / "sdks.md"), tmp_path) == ["research"]  # the page's module, as printed
    (tmp_path / "research_async.py").write_text(ASYNC_RESEARCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        _docs_sdk_agents_replay_with_nothing_of_the_live_environment(settings, registry, monkeypatch, tmp_path)
    finally:
        forget_modules(["research", "research_async"])


def _docs_sdk_agents_replay_with_nothing_of_the_live_environment(settings, registry, monkeypatch, tmp_path):
    import research_async

    with StubServer(lambda request: f"answer {len(request['messages'])}", api_key=KEY) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        start_run(settings=settings, swarm=research_async.swarm, run_id="docs-sdks", seed=5)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=research_async.swarm, until_quiet=1.5)}
        assert server.request_count == 4  # each researcher: one chat completion, one streamed message
        assert all(r.headers.get("x-api-key") == KEY or r.headers.get("authorization") == f"Bearer {KEY}"
                   for r in server.requests)
    assert live["desk"].state == {"answers": [{"gpt": "answer 1", "claude": "answer 1"}] * 2}
    exchanges = [r.record["payload"] for r in read_log(settings, registry) if r.event_type == "http.exchange"]
    assert {e["url"] for e in exchanges} == {f"{server.base_url}/chat/completions",
                                             f"{server.anthropic_base_url}/v1/messages"}
    assert KEY[3:] not in json.dumps(exchanges)

    for name in LIVE_ENVIRONMENT:
        monkeypatch.delenv(name)
    network = _count_network(monkeypatch)
    result = replay_swarm(settings=settings, swarm=research_async.swarm, registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.agents == {name: r.state_hash for name, r in live.items()}
    assert result.states["desk"] == live["desk"].state

    # `swarmlog replay --swarm`, as a process: no key, no base URL, nothing listening.
    env = {k: v for k, v in subprocess_env(settings).items() if k not in LIVE_ENVIRONMENT}
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm", "research_async:swarm", "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["divergences"] == 0 and report["divergence_list"] == []
