"""A triage agent that delegates a question to a researcher (two tools, one doing HTTP) whose findings a writer
streams into a report — written with pydantic-ai as its docs write it, run as a swarmlog swarm.

The triage agent delegates through a tool, as pydantic-ai's docs show; here the tool hands the question to
the researcher, a swarmlog agent of its own, as a message carrying the conversation (``conversation``).
The researcher's tools run inside its step (``fetch_page`` on the run's ``deps``, an ``httpx.AsyncClient``
over ``ctx.async_http_transport()``; ``word_count`` pure); the writer streams (``run_stream``). Lines marked
``# swarmlog`` are what running it on swarmlog changed. ``docs/integrations/pydantic-ai.md`` walks through it;
``tests/integration/test_pydantic_ai_swarm.py`` runs it on Kafka against a stub model server.

Where it calls: ``RESEARCH_LLM_URL`` (an OpenAI-compatible ``/v1``) and ``RESEARCH_TOOLS_URL``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import httpx
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from swarmlog import Agent as SwarmAgent  # swarmlog
from swarmlog import Swarm, on, on_message  # swarmlog
from swarmlog.integrations.pydantic_ai import conversation, messages_from, recorded  # swarmlog

LLM_URL = os.environ.get("RESEARCH_LLM_URL", "https://api.openai.com/v1")
TOOLS_URL = os.environ.get("RESEARCH_TOOLS_URL", "http://127.0.0.1:8080")
INSTRUCTIONS = "You research a topic: fetch its page, count its words, then answer in one line."


@dataclass
class Deps:
    pages: httpx.AsyncClient | None = None
    handed: list = field(default_factory=list)  # swarmlog: what the delegation tool hands on


def build_agents(model, *, instructions: str = INSTRUCTIONS, count=len) -> tuple[Agent, Agent, Agent]:
    triage = Agent(model, deps_type=Deps, instructions="Delegate every question to the researcher.")
    researcher = Agent(model, deps_type=Deps, instructions=instructions)
    writer = Agent(model, instructions="Write the findings up as a short report.")

    @triage.tool
    async def ask_researcher(ctx: RunContext[Deps], question: str) -> str:
        """Delegate a question to the researcher."""
        ctx.deps.handed.append(question)  # swarmlog: sent as a message, not run here
        return "the researcher will answer"

    @researcher.tool
    async def fetch_page(ctx: RunContext[Deps], topic: str) -> str:
        """Fetch the reference page about a topic."""
        return (await ctx.deps.pages.get(f"/tools/pages/{topic}")).text

    @researcher.tool_plain
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return count(text.split())

    return triage, researcher, writer


class Triage(SwarmAgent):  # swarmlog
    def __init__(self, name, *, agents):
        super().__init__(name)
        self.triage = agents[0]

    @on("run.started")  # swarmlog
    async def start(self, ctx, event):
        deps = Deps()
        result = await self.triage.run("Tell me about kafka", deps=deps, capabilities=[recorded(ctx)])
        for question in deps.handed:  # swarmlog: the delegation, with the conversation so far
            ctx.send("researcher", "question", {"question": question,
                                                "conversation": conversation(result.all_messages())})


class Researcher(SwarmAgent):
    def __init__(self, name, *, agents, tools_url):
        super().__init__(name)
        self.researcher, self.tools_url = agents[1], tools_url

    def initial_state(self):
        return {"answers": []}

    @on_message("question")
    async def research(self, ctx, event):
        pages = httpx.AsyncClient(base_url=self.tools_url, transport=ctx.async_http_transport(httpx))  # swarmlog
        body = event.json()
        result = await self.researcher.run(body["question"], deps=Deps(pages=pages), capabilities=[recorded(ctx)],
                                           message_history=messages_from(body["conversation"]))
        self.state["answers"].append(result.output)
        ctx.send("writer", "findings", {"answer": result.output})


class Writer(SwarmAgent):
    def __init__(self, name, *, agents):
        super().__init__(name)
        self.writer = agents[2]

    def initial_state(self):
        return {"reports": []}

    @on_message("findings")
    async def write(self, ctx, event):
        async with self.writer.run_stream(event.json()["answer"], capabilities=[recorded(ctx)]) as response:
            text = [chunk async for chunk in response.stream_text(delta=True)]
        self.state["reports"].append("".join(text))


def make_swarm(*, llm_url: str = LLM_URL, tools_url: str = TOOLS_URL, instructions: str = INSTRUCTIONS,
               count=len) -> Swarm:
    # pydantic-ai's OpenAIProvider refuses to be built without a key; a replay sends nothing, so any will do there.
    key = os.environ.get("OPENAI_API_KEY", "unused-on-replay")  # swarmlog
    model = OpenAIChatModel("gpt-stub", provider=OpenAIProvider(base_url=llm_url, api_key=key))
    agents = build_agents(model, instructions=instructions, count=count)
    return Swarm(name="pydantic-ai-research", code_version="pa-1", agents=lambda: [
        Triage("triage", agents=agents), Researcher("researcher", agents=agents, tools_url=tools_url),
        Writer("writer", agents=agents)])


swarm = make_swarm()
