"""A triage agent that hands a question to a researcher (a LangGraph graph: two tools, one doing HTTP) whose
findings a writer streams into a report — written in LangGraph's quickstart style, run as a swarmlog swarm.

The researcher is LangGraph's quickstart agent (Graph API: a model node, a tool node, a loop), run in a step;
its model is ``ChatOpenAI`` on ``ctx.http()`` and ``fetch_page`` reads pages over ``ctx.http_transport()``, so
every model call and the tool's HTTP are ``http.exchange`` records; ``word_count`` is pure. The handoffs are
swarmlog messages carrying the conversation as structured data (``convert_to_openai_messages``). The writer's
model call is streamed. Lines marked ``# swarmlog`` are what running it on swarmlog changed.
``docs/integrations/langgraph.md`` walks through it; ``tests/integration/test_langgraph_swarm.py`` runs it on
Kafka against a stub model server.

Where it calls: ``RESEARCH_LLM_URL`` (an OpenAI-compatible ``/v1``) and ``RESEARCH_TOOLS_URL``; its key is
``OPENAI_API_KEY``, live only (``ctx.credential``).
"""

from __future__ import annotations

import os
from typing import Literal

import httpx
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage, convert_to_openai_messages
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

from swarmlog import Agent, Swarm, on, on_message  # swarmlog

LLM_URL = os.environ.get("RESEARCH_LLM_URL", "https://api.openai.com/v1")
TOOLS_URL = os.environ.get("RESEARCH_TOOLS_URL", "http://127.0.0.1:8080")
INSTRUCTIONS = "You are a researcher. Look the topic up, count its words, then answer in one line."


def build_researcher(llm, pages, *, instructions=INSTRUCTIONS, count=len):  # swarmlog: model and client passed in
    @tool
    def fetch_page(topic: str) -> str:
        """Fetch the reference page about a topic."""
        return pages.get(f"/tools/pages/{topic}").text

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


class Triage(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("researcher", "question", {"topic": "kafka"})  # the handoff, as structured data


class Researcher(Agent):
    def __init__(self, name, *, llm_url, tools_url, instructions=INSTRUCTIONS, count=len):
        super().__init__(name)
        self.llm_url, self.tools_url, self.instructions, self.count = llm_url, tools_url, instructions, count

    def initial_state(self):
        return {"answers": [], "calls": 0}

    @on_message("question")  # swarmlog
    def research(self, ctx, event):
        llm = ChatOpenAI(model="gpt-stub", api_key=ctx.credential("OPENAI_API_KEY"), base_url=self.llm_url,  # swarmlog
                         http_client=ctx.http(), max_retries=0)
        pages = httpx.Client(base_url=self.tools_url, transport=ctx.http_transport(httpx))  # swarmlog
        graph = build_researcher(llm, pages, instructions=self.instructions, count=self.count)
        out = graph.invoke({"messages": [HumanMessage(f"Tell me about {event.json()['topic']}")]})
        conversation = convert_to_openai_messages(out["messages"])  # ids left out: LangGraph draws them
        self.state["answers"].append(out["messages"][-1].content)
        self.state["calls"] += sum(1 for m in conversation if m["role"] == "tool")
        ctx.send("writer", "findings", {"answer": out["messages"][-1].content,  # swarmlog: the handoff
                                        "conversation": conversation})


class Writer(Agent):
    def __init__(self, name, *, llm_url):
        super().__init__(name)
        self.llm_url = llm_url

    def initial_state(self):
        return {"reports": []}

    @on_message("findings")  # swarmlog
    def write(self, ctx, event):
        llm = ChatOpenAI(model="gpt-stub", api_key=ctx.credential("OPENAI_API_KEY"), base_url=self.llm_url,  # swarmlog
                         http_client=ctx.http(), max_retries=0, streaming=True)
        self.state["reports"].append(write_report(llm, event.json()["answer"]))


def make_swarm(*, llm_url: str = LLM_URL, tools_url: str = TOOLS_URL, instructions: str = INSTRUCTIONS,
               count=len) -> Swarm:
    return Swarm(name="langgraph-research", code_version="lg-1", agents=lambda: [
        Triage("triage"),
        Researcher("researcher", llm_url=llm_url, tools_url=tools_url, instructions=instructions, count=count),
        Writer("writer", llm_url=llm_url)])


swarm = make_swarm()
