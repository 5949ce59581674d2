"""LangGraph graphs run inside handlers, as swarmlog steps: every model call (ChatOpenAI on ctx.http()) and every
tool's HTTP is recorded, on the real broker, against a stub model server and a stub page server.

Must show (issue 27, LangGraph): the program of ``swarmlog.examples.langgraph_research`` — a multi-agent program
in LangGraph's documented style (its quickstart's Graph API agent: a model node, a tool node, two tools of which
one does HTTP; a streamed model call; a handoff between agents) — runs as a swarm; replay with both servers
stopped and no API key makes no request and reproduces every state; a changed instruction is a divergence
naming the agent, the step and the JSON path; a changed tool result is a divergence naming the tool; SIGKILL of
the researcher's process between its two model calls reaches the same end with nothing written twice.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import httpx2
import pytest

from swarmlog.examples import langgraph_research as program
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer, tool_call_reply

from .conftest import read_log, sigkill_in_a_step_then_run_again, subprocess_env

KEY = "sk-test-0123456789"
PAGE = "a distributed append-only log"


def swarm_of(model_url, pages_url, **researcher):
    return program.make_swarm(llm_url=model_url, tools_url=pages_url, **researcher)


# --- the stub servers ----------------------------------------------------------------------------------------------


def model(request: dict) -> str | dict:
    """The researcher asks for the page, then its word count, then answers; the writer streams its report."""
    messages = request["messages"]
    tools = [m for m in messages if m.get("role") == "tool"]
    if not request.get("tools"):
        return f"REPORT: {messages[-1]['content']}"
    if not tools:
        return tool_call_reply(("fetch_page", {"topic": "kafka"}))
    if len(tools) == 1:
        return tool_call_reply(("word_count", {"text": tools[0]["content"]}))
    return f"kafka: {tools[0]['content']} ({tools[1]['content']} words)"


class Pages:
    """A page server the researcher's HTTP tool reads (a thread, loopback only); with ``gate``, each request
    waits until it is set."""

    def __init__(self, *, gate: threading.Event | None = None) -> None:
        self.requests: list[str] = []
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                pages.requests.append(self.path)
                if gate is not None:
                    gate.wait(60)
                body = PAGE.encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Pages:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _count_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for lib in (httpx, httpx2):
        original = lib.HTTPTransport.handle_request

        def counting(self, request, _original=original):
            seen.append(f"{request.method} {request.url}")
            return _original(self, request)

        monkeypatch.setattr(lib.HTTPTransport, "handle_request", counting)
    return seen


@pytest.fixture
def recorded(settings, registry, monkeypatch):
    """The swarm run live once against both stub servers, which are stopped afterwards; the key is set live only."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with StubServer(model) as server, Pages() as pages:
        swarm = swarm_of(server.base_url, pages.url)
        start_run(settings=settings, swarm=swarm, run_id="langgraph", seed=5)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
        counts = {"model": server.request_count, "pages": len(pages.requests)}
    monkeypatch.delenv("OPENAI_API_KEY")
    return swarm, live, counts, server.base_url, pages.url


def test_a_langgraph_swarm_replays_with_the_servers_stopped_no_key_and_no_request(recorded, settings, registry,
                                                                                monkeypatch):
    swarm, live, counts, model_url, pages_url = recorded
    # Live: three model calls for the researcher (two tool rounds and the answer), one streamed for the writer.
    assert counts == {"model": 4, "pages": 1}
    assert live["researcher"].state == {"answers": ["kafka: a distributed append-only log (4 words)"], "calls": 2}
    assert live["writer"].state["reports"] == ["REPORT: Write it up: kafka: a distributed append-only log (4 words)"]
    log = read_log(settings, registry)
    exchanges = [r for r in log if r.event_type == "http.exchange"]
    assert len(exchanges) == 5 and all(KEY[3:] not in json.dumps(r.record) for r in exchanges)
    streamed = [e for e in exchanges if json.loads(e.record["payload"]["request_body"] or "{}").get("stream")]
    assert len(streamed) == 1
    handoff = next(r for r in log if r.event_type == "agent.message" and r.record["payload"]["kind"] == "findings")
    conversation = json.loads(handoff.record["payload"]["body"])["conversation"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]

    # Replay: both servers are stopped and no key is set anywhere; nothing reaches the network.
    assert "OPENAI_API_KEY" not in os.environ
    network = _count_network(monkeypatch)
    result = replay_swarm(settings=settings, swarm=swarm_of(model_url, pages_url), registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.agents == {name: r.state_hash for name, r in live.items()}
    assert result.states["writer"] == live["writer"].state


def test_a_changed_instruction_is_a_divergence_naming_the_agent_step_and_path(recorded, settings, registry,
                                                                             monkeypatch):
    _, _, _, model_url, pages_url = recorded
    network = _count_network(monkeypatch)
    changed = swarm_of(model_url, pages_url, instructions=program.INSTRUCTIONS.replace("one line", "two lines"))
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    assert network == []
    first = result.first_divergence
    assert first is not None and first.agent == "researcher"
    question = next(r.offset for r in read_log(settings, registry)
                    if r.event_type == "agent.message" and r.record["payload"]["kind"] == "question")
    assert first.offset == question  # the researcher's step: the message it handled
    assert first.recorded["part"] == "body.messages[0].content"
    assert "answer in one line" in json.dumps(first.recorded["value"])


def test_a_changed_tool_result_is_a_divergence_naming_the_tool(recorded, settings, registry, monkeypatch):
    _, _, _, model_url, pages_url = recorded
    network = _count_network(monkeypatch)
    changed = swarm_of(model_url, pages_url, count=lambda words: len(words) + 1)  # word_count now counts wrong
    result = replay_swarm(settings=settings, swarm=changed, registry=registry)
    assert network == []
    first = result.first_divergence
    assert first is not None and first.agent == "researcher"
    assert first.recorded["part"] == "body.messages[5].content"  # after the system message
    assert "tool 'word_count'" in first.detail
    assert (first.recorded["value"], first.replayed["value"]) == ("4", "5")


def test_sigkill_between_the_researchers_two_model_calls_reaches_the_same_end_and_writes_nothing_twice(
        settings, registry):
    release = threading.Event()
    researcher_calls: list[int] = []

    def counting(request: dict) -> str | dict:
        if request.get("tools"):
            researcher_calls.append(len(request["messages"]))
        return model(request)

    # The page server holds the researcher's step in its tool, its first model call answered, until it is killed.
    with StubServer(counting) as server, Pages(gate=release) as pages:
        env = subprocess_env(settings)
        env.update(RESEARCH_LLM_URL=server.base_url, RESEARCH_TOOLS_URL=pages.url, OPENAI_API_KEY=KEY)

        def between() -> None:
            release.set()
            assert len(researcher_calls) == 1

        sigkill_in_a_step_then_run_again(settings=settings, swarm=program.swarm,
                                         target="swarmlog.examples.langgraph_research:swarm", env=env,
                                         reached=lambda: bool(pages.requests), between=between)
        urls = (server.base_url, pages.url)
    # Its step ran again, from its start: the first model call made again (live calls are at-least-once).
    assert len(researcher_calls) == 4 and len(pages.requests) == 2
    log = read_log(settings, registry)
    ids = Counter(e.record["event_id"] for e in log)
    assert [i for i, n in ids.items() if n > 1] == []  # nothing written twice
    findings = [e for e in log if e.event_type == "agent.message" and e.record["payload"]["kind"] == "findings"]
    assert [json.loads(e.record["payload"]["body"])["answer"] for e in findings] == [f"kafka: {PAGE} (4 words)"]
    # The aborted life's exchanges are not in the committed log: three model calls, the page, the writer's stream.
    assert sum(e.event_type == "http.exchange" for e in log) == 5
    replayed = replay_swarm(settings=settings, swarm=swarm_of(*urls), registry=registry)
    assert replayed.divergences == []
    assert replayed.states["researcher"] == {"answers": [f"kafka: {PAGE} (4 words)"], "calls": 2}
    assert replayed.states["writer"]["reports"] == [f"REPORT: Write it up: kafka: {PAGE} (4 words)"]
