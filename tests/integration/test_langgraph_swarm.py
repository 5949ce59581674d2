"""LangGraph graphs run inside handlers, as swarmlog steps: every model call (ChatOpenAI on ctx.http()) and every
tool's HTTP is recorded, on the real broker, against a stub model server and a stub page server.

Must show (issue 27, LangGraph): a multi-agent program in LangGraph's documented style (its quickstart's
Graph API agent: a model node, a tool node, two tools of which one does HTTP; a streamed model call; a
handoff between agents) runs as a swarm; replay with both servers stopped and no API key makes no request
and reproduces every state; a changed instruction is a divergence naming the agent, the step and the JSON
path; a changed tool result is a divergence naming the tool.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import httpx
import httpx2
import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage, convert_to_openai_messages
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer, tool_call_reply

from .conftest import read_log

INSTRUCTIONS = "You are a researcher. Look the topic up, count its words, then answer in one line."


# --- the program, in LangGraph's quickstart style (Graph API: a model node, a tool node, a loop) ---------------
# What running it under swarmlog changed is marked `# swarmlog`: the model and the page client come from the
# step (ctx.http()), so the graph is built per step; the handoffs are swarmlog messages.


def build_researcher(llm, pages, *, instructions=INSTRUCTIONS, count=len):  # swarmlog: model and client passed in
    @tool
    def fetch_page(topic: str) -> str:
        """Fetch the reference page about a topic."""
        return pages.get(f"/pages/{topic}").text

    @tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return count(text.split())

    tools = [fetch_page, word_count]
    tools_by_name = {t.name: t for t in tools}
    llm_with_tools = llm.bind_tools(tools)

    def llm_call(state: MessagesState) -> dict:
        return {"messages": [llm_with_tools.invoke([SystemMessage(instructions), *state["messages"]])]}

    def tool_node(state: MessagesState) -> dict:
        result = []
        for call in state["messages"][-1].tool_calls:
            observation = tools_by_name[call["name"]].invoke(call["args"])
            result.append(ToolMessage(content=str(observation), tool_call_id=call["id"]))
        return {"messages": result}

    def should_continue(state: MessagesState) -> Literal["tool_node", "__end__"]:
        return "tool_node" if state["messages"][-1].tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("llm_call", llm_call)
    builder.add_node("tool_node", tool_node)
    builder.add_edge(START, "llm_call")
    builder.add_conditional_edges("llm_call", should_continue, ["tool_node", END])
    builder.add_edge("tool_node", "llm_call")
    return builder.compile()


def write_report(llm, findings: str) -> str:
    """The writer: one streamed model call."""
    return "".join(chunk.content for chunk in llm.stream([HumanMessage(f"Write it up: {findings}")]))


# --- the swarm ---------------------------------------------------------------------------------------------------


class Triage(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("researcher", "question", {"topic": "kafka"})  # the handoff, as structured data


class Researcher(Agent):
    def __init__(self, name, *, model_url, pages_url, instructions=INSTRUCTIONS, count=len):
        super().__init__(name)
        self.model_url, self.pages_url, self.instructions, self.count = model_url, pages_url, instructions, count

    def initial_state(self):
        return {"answers": [], "calls": 0}

    @on_message("question")
    def research(self, ctx, event):
        llm = ChatOpenAI(model="gpt-stub", api_key="sk-test-0123456789", base_url=self.model_url,  # swarmlog
                         http_client=ctx.http(), max_retries=0)
        pages = httpx.Client(base_url=self.pages_url, transport=ctx.http_transport(httpx))  # swarmlog
        graph = build_researcher(llm, pages, instructions=self.instructions, count=self.count)
        out = graph.invoke({"messages": [HumanMessage(f"Tell me about {event.json()['topic']}")]})
        conversation = convert_to_openai_messages(out["messages"])  # ids left out: LangGraph draws them
        self.state["answers"].append(out["messages"][-1].content)
        self.state["calls"] += sum(1 for m in conversation if m["role"] == "tool")
        ctx.send("writer", "findings", {"answer": out["messages"][-1].content, "conversation": conversation})


class Writer(Agent):
    def __init__(self, name, *, model_url):
        super().__init__(name)
        self.model_url = model_url

    def initial_state(self):
        return {"reports": []}

    @on_message("findings")
    def write(self, ctx, event):
        llm = ChatOpenAI(model="gpt-stub", api_key="sk-test-0123456789", base_url=self.model_url,  # swarmlog
                         http_client=ctx.http(), max_retries=0, streaming=True)
        self.state["reports"].append(write_report(llm, event.json()["answer"]))


def swarm_of(model_url, pages_url, **researcher) -> Swarm:
    return Swarm(name="langgraph-research", code_version="lg-1", agents=lambda: [
        Triage("triage"), Researcher("researcher", model_url=model_url, pages_url=pages_url, **researcher),
        Writer("writer", model_url=model_url)])


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
    """A page server the researcher's HTTP tool reads (a thread, loopback only)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                pages.requests.append(self.path)
                body = b"a distributed append-only log"
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
def recorded(settings, registry):
    """The swarm run live once against both stub servers, which are stopped afterwards."""
    with StubServer(model) as server, Pages() as pages:
        swarm = swarm_of(server.base_url, pages.url)
        start_run(settings=settings, swarm=swarm, run_id="langgraph", seed=5)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
        counts = {"model": server.request_count, "pages": len(pages.requests)}
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
    assert len(exchanges) == 5 and all("sk-test" not in json.dumps(r.record) for r in exchanges)
    streamed = [e for e in exchanges if json.loads(e.record["payload"]["request_body"] or "{}").get("stream")]
    assert len(streamed) == 1
    handoff = next(r for r in log if r.event_type == "agent.message" and r.record["payload"]["kind"] == "findings")
    conversation = json.loads(handoff.record["payload"]["body"])["conversation"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]

    # Replay: both servers are stopped and no key is set anywhere; nothing reaches the network.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
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
    changed = swarm_of(model_url, pages_url, instructions=INSTRUCTIONS.replace("one line", "two lines"))
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
