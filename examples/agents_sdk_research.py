"""A triage agent that hands a question to a researcher (two tools, one doing HTTP) whose findings a writer
streams into a report — written with the OpenAI Agents SDK as its docs write it, run as a swarmlog swarm.

Each SDK agent that the program hands off to is a swarmlog agent of its own: the triage's handoff to the
researcher is a message carrying the conversation (``swarm_agent``, ``send_handoff``); the researcher's tools
run inside its step (``fetch_page`` over ``ctx.async_http_transport()``, ``word_count`` pure); the writer's
model call is streamed (``Runner.run_streamed``). Lines marked ``# swarmlog`` are what running it on swarmlog
changed. ``docs/integrations/openai-agents.md`` walks through it; ``tests/integration/test_openai_agents_swarm.py``
runs it on Kafka against a stub model server.

Where it calls: ``RESEARCH_LLM_URL`` (an OpenAI-compatible ``/v1``, chat completions) and ``RESEARCH_TOOLS_URL``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx
from agents import Agent, OpenAIProvider, RunContextWrapper, Runner, function_tool

from swarmlog import Agent as SwarmAgent  # swarmlog
from swarmlog import Swarm, on, on_message  # swarmlog
from swarmlog.integrations.openai_agents import recorded, send_handoff, swarm_agent  # swarmlog

LLM_URL = os.environ.get("RESEARCH_LLM_URL", "https://api.openai.com/v1")
TOOLS_URL = os.environ.get("RESEARCH_TOOLS_URL", "http://127.0.0.1:8080")
INSTRUCTIONS = "You research a topic: fetch its page, count its words, then answer in one line."


@dataclass
class Tools:
    pages: httpx.AsyncClient


@function_tool
async def fetch_page(wrapper: RunContextWrapper[Tools], topic: str) -> str:
    """Fetch the reference page about a topic."""
    return (await wrapper.context.pages.get(f"/tools/pages/{topic}")).text


def make_word_count(count=len):
    @function_tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return count(text.split())

    return word_count


def build_agents(*, instructions: str = INSTRUCTIONS, count=len) -> tuple[Agent, Agent, Agent]:
    researcher = Agent(name="Researcher", instructions=instructions, model="gpt-stub",
                       handoff_description="Looks a topic up and answers in one line.",
                       tools=[fetch_page, make_word_count(count)])
    writer = Agent(name="Writer", instructions="Write the findings up as a short report.", model="gpt-stub")
    triage = Agent(name="Triage", instructions="Hand every question to the researcher.", model="gpt-stub",
                   handoffs=[swarm_agent(researcher, "researcher")])  # swarmlog: the handoff is a message
    return triage, researcher, writer


class Triage(SwarmAgent):  # swarmlog
    def __init__(self, name, *, agents, provider):
        super().__init__(name)
        self.triage, self.provider = agents[0], provider

    @on("run.started")  # swarmlog
    async def start(self, ctx, event):
        result = await Runner.run(self.triage, "Tell me about kafka", **recorded(ctx, provider=self.provider))
        send_handoff(ctx, result)  # swarmlog: the conversation, to the agent it was handed to


class Researcher(SwarmAgent):
    def __init__(self, name, *, agents, provider, tools_url):
        super().__init__(name)
        self.researcher, self.provider, self.tools_url = agents[1], provider, tools_url

    def initial_state(self):
        return {"answers": []}

    @on_message("handoff")
    async def research(self, ctx, event):
        pages = httpx.AsyncClient(base_url=self.tools_url, transport=ctx.async_http_transport(httpx))  # swarmlog
        result = await Runner.run(self.researcher, event.json()["conversation"], context=Tools(pages=pages),
                                  **recorded(ctx, provider=self.provider))
        self.state["answers"].append(result.final_output)
        ctx.send("writer", "findings", {"answer": result.final_output})


class Writer(SwarmAgent):
    def __init__(self, name, *, agents, provider):
        super().__init__(name)
        self.writer, self.provider = agents[2], provider

    def initial_state(self):
        return {"reports": []}

    @on_message("findings")
    async def write(self, ctx, event):
        result = Runner.run_streamed(self.writer, event.json()["answer"], **recorded(ctx, provider=self.provider))
        text = []
        async for item in result.stream_events():
            if item.type == "raw_response_event" and item.data.type == "response.output_text.delta":
                text.append(item.data.delta)
        self.state["reports"].append("".join(text))


def make_swarm(*, llm_url: str = LLM_URL, tools_url: str = TOOLS_URL, instructions: str = INSTRUCTIONS,
               count=len) -> Swarm:
    # Built once, where the program builds its clients: it reads OPENAI_API_KEY only when a live call is made.
    provider = OpenAIProvider(base_url=llm_url, api_key=os.environ.get("OPENAI_API_KEY"), use_responses=False)
    agents = build_agents(instructions=instructions, count=count)
    return Swarm(name="agents-sdk-research", code_version="oa-1", agents=lambda: [
        Triage("triage", agents=agents, provider=provider),
        Researcher("researcher", agents=agents, provider=provider, tools_url=tools_url),
        Writer("writer", agents=agents, provider=provider)])


swarm = make_swarm()
