"""The OpenAI Agents SDK on swarmlog, on the real broker, against a stub model server (and its tool routes).

Must show (issue 27, the OpenAI Agents SDK): the program of ``swarmlog.examples.agents_sdk_research`` — a
triage agent handing off to a researcher (two tools, one doing HTTP) whose findings a writer streams, in the
SDK's documented style — runs as a swarm; every model call is a readable ``llm.call`` and every tool result a
record; replay with the server stopped and no API key makes no request and reproduces every state; a changed
instruction is a divergence naming the agent, the step and the JSON path; a changed tool result is a divergence
naming the tool; SIGKILL of the researcher's process between its two model calls reaches the same end with
nothing written twice.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

import httpx
import httpx2
import pytest

from swarmlog.examples import agents_sdk_research as program
from swarmlog.log.protocol import EFFECT_RECORDED, LLM_CALL
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer, tool_call_reply

from .conftest import read_log, sigkill_in_a_step_then_run_again, subprocess_env

# The SDK's tracing would export to OpenAI's backend: never from a test (read once, on the SDK's first trace).
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
PAGE = "a distributed append-only log"
SERVED = json.dumps(PAGE)  # the stub answers a route with JSON: the page arrives quoted


def model(request: dict[str, Any]) -> str | dict[str, Any]:
    """Triage hands off; the researcher fetches the page, counts its words, answers; the writer streams a report."""
    messages = request["messages"]
    offered = [t["function"]["name"] for t in request.get("tools") or ()]
    if "transfer_to_researcher" in offered:
        return tool_call_reply(("transfer_to_researcher", {}))
    if "fetch_page" in offered:
        called = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
        results = {called.get(m.get("tool_call_id")): m["content"] for m in messages if m.get("role") == "tool"}
        if "fetch_page" not in results:
            return tool_call_reply(("fetch_page", {"topic": "kafka"}))
        if "word_count" not in results:
            return tool_call_reply(("word_count", {"text": results["fetch_page"]}))
        return f"kafka: {results['fetch_page']} ({results['word_count']} words)"
    return f"REPORT: {messages[-1]['content']}"


def _page(request: Any) -> str:
    return PAGE


def _count_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for lib in (httpx, httpx2):
        for transport in (lib.HTTPTransport, lib.AsyncHTTPTransport):
            name = "handle_request" if transport is lib.HTTPTransport else "handle_async_request"
            original = getattr(transport, name)

            def counting(self, request, _original=original):
                seen.append(f"{request.method} {request.url}")
                return _original(self, request)

            monkeypatch.setattr(transport, name, counting)
    return seen


@pytest.fixture
def recorded(settings, registry, monkeypatch):
    """The program run live once against the stub, which is stopped afterwards."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    with StubServer(model, routes={"/tools/pages/kafka": _page}) as server:
        urls = {"llm_url": server.base_url, "tools_url": f"http://127.0.0.1:{server.port}"}
        swarm = program.make_swarm(**urls)
        start_run(settings=settings, swarm=swarm, run_id="agents-sdk", seed=3)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
        paths = [r.path for r in server.requests]
    monkeypatch.delenv("OPENAI_API_KEY")
    return live, paths, urls


def test_an_agents_sdk_swarm_records_every_call_and_replays_with_the_server_stopped_and_no_key(
        recorded, settings, registry, monkeypatch):
    live, paths, urls = recorded
    # Live: triage 1 model call, researcher 3 (fetch, count, answer) and its page, writer 1 streamed.
    assert Counter(paths) == {"/v1/chat/completions": 5, "/tools/pages/kafka": 1}
    answer = f"kafka: {SERVED} (4 words)"
    assert live["researcher"].state == {"answers": [answer]}
    assert live["writer"].state == {"reports": [f"REPORT: {answer}"]}
    log = read_log(settings, registry)
    calls = [r.record["payload"] for r in log if r.event_type == LLM_CALL]
    assert len(calls) == 5 and all("sk-test" not in json.dumps(c) for c in calls)
    first = json.loads(calls[0]["request_json"])  # readable: the SDK's own request, not bytes on the wire
    assert first["instructions"] == "Hand every question to the researcher."
    assert [h["name"] for h in first["handoffs"]] == ["transfer_to_researcher"]
    streamed = [c for c in calls if json.loads(c["request_json"])["stream"]]
    assert len(streamed) == 1 and len(json.loads(streamed[0]["response_json"])["events"]) > 3
    assert json.loads(calls[1]["response_json"])["usage"]["input_tokens"] > 0
    tools = [r.record["payload"] for r in log if r.event_type == EFFECT_RECORDED]
    assert [(t["name"], json.loads(t["result_json"])) for t in tools] == [("tool fetch_page", SERVED),
                                                                         ("tool word_count", 4)]
    handoff = next(r for r in log if r.event_type == "agent.message" and r.record["payload"]["kind"] == "handoff")
    body = json.loads(handoff.record["payload"]["body"])  # structured: items, not a JSON string in a string
    assert body["from"] == "Triage" and body["agent"] == "Researcher"
    assert [i.get("type", "message") for i in body["conversation"]] == ["message", "function_call",
                                                                       "function_call_output"]

    network = _count_network(monkeypatch)  # the server is stopped, and no key is set anywhere
    result = replay_swarm(settings=settings, swarm=program.make_swarm(**urls), registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.agents == {name: r.state_hash for name, r in live.items()}
    assert result.states["writer"] == live["writer"].state


def test_a_changed_instruction_is_a_divergence_naming_the_agent_step_and_path(recorded, settings, registry):
    _, _, urls = recorded
    changed = program.make_swarm(**urls, instructions=program.INSTRUCTIONS.replace("one line", "two lines"))
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    first = result.first_divergence
    assert first is not None and first.agent == "researcher"
    handoff = next(r.offset for r in read_log(settings, registry)
                   if r.event_type == "agent.message" and r.record["payload"]["kind"] == "handoff")
    assert first.offset == handoff  # the researcher's step: the message it handled
    assert first.recorded["part"] == "request.instructions"
    assert "answer in one line" in first.recorded["value"] and "two lines" in first.replayed["value"]


def test_a_changed_tool_result_is_a_divergence_naming_the_tool(recorded, settings, registry):
    _, _, urls = recorded
    changed = program.make_swarm(**urls, count=lambda words: len(words) + 1)  # word_count now counts wrong
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    first = result.first_divergence
    assert first is not None and first.agent == "researcher"
    assert "tool 'word_count'" in first.detail and "returned '5'" in first.detail
    assert (first.recorded["result"], first.replayed["result"]) == ("4", "5")


def test_sigkill_between_the_researchers_two_model_calls_reaches_the_same_end_and_writes_nothing_twice(
        settings, registry):
    release = threading.Event()
    researcher_calls: list[int] = []

    def blocking_page(request: Any) -> str:
        release.wait(60)  # the researcher's step waits here, its first model call answered, until it is killed
        return PAGE

    def counting(request: dict[str, Any]) -> str | dict[str, Any]:
        if any(t["function"]["name"] == "fetch_page" for t in request.get("tools") or ()):
            researcher_calls.append(len(request["messages"]))
        return model(request)

    with StubServer(counting, routes={"/tools/pages/kafka": blocking_page}) as server:
        env = subprocess_env(settings)
        env.update(RESEARCH_LLM_URL=server.base_url, RESEARCH_TOOLS_URL=f"http://127.0.0.1:{server.port}",
                   OPENAI_API_KEY="sk-test-0123456789", OPENAI_AGENTS_DISABLE_TRACING="1")

        def between() -> None:
            release.set()
            assert len(researcher_calls) == 1

        sigkill_in_a_step_then_run_again(settings=settings, swarm=program.swarm,
                                         target="swarmlog.examples.agents_sdk_research:swarm", env=env,
                                         reached=lambda: any(r.path.startswith("/tools/") for r in server.requests),
                                         between=between)
        urls = {"llm_url": server.base_url, "tools_url": f"http://127.0.0.1:{server.port}"}
    assert len(researcher_calls) == 4  # its step ran again: the first model call made again (at-least-once)
    log = read_log(settings, registry)
    ids = Counter(e.record["event_id"] for e in log)
    assert [i for i, n in ids.items() if n > 1] == []  # nothing written twice
    findings = [e for e in log if e.event_type == "agent.message" and e.record["payload"]["kind"] == "findings"]
    assert [json.loads(e.record["payload"]["body"])["answer"] for e in findings] == [f"kafka: {SERVED} (4 words)"]
    assert sum(e.event_type == LLM_CALL for e in log) == 5  # the aborted life's calls are not in the committed log
    replayed = replay_swarm(settings=settings, swarm=program.make_swarm(**urls), registry=registry)
    assert replayed.divergences == []
    assert replayed.states["writer"]["reports"] == [f"REPORT: kafka: {SERVED} (4 words)"]
