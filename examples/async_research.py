"""An async research assistant, written the way LLM code is written today, run as a swarmlog agent.

The program (:func:`research`) is plain async Python: ``openai.AsyncOpenAI`` plans, two HTTP tools
run at once under ``asyncio.gather`` (each an ``httpx.AsyncClient`` request), and a writer call
answers from their results. It knows nothing of swarmlog. Run on its own, its entry point is
:func:`main`, with an ``httpx.AsyncClient`` of its own.

As a swarmlog agent only the entry point changes: the :class:`Researcher`'s ``async def`` handler
awaits the same :func:`research`, handing it ``ctx.async_http(httpx)``, an ``httpx.AsyncClient``
whose every request is recorded. Live, the two tool requests still overlap on the wire; the log
holds the order their responses came back in, and a replay — with every server stopped — serves
them in that order.

Where it calls: ``RESEARCH_LLM_URL`` (an OpenAI-compatible ``/v1``) and ``RESEARCH_TOOLS_URL``
(``GET /tools/weather?city=`` and ``GET /tools/news?topic=``), read once at import;
``tests/integration/test_async_agents.py`` points them at a stub server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx
import openai

from swarmlog import Agent, Swarm, on, on_message

LLM_URL = os.environ.get("RESEARCH_LLM_URL", "https://api.openai.com/v1")
TOOLS_URL = os.environ.get("RESEARCH_TOOLS_URL", "http://127.0.0.1:8080")
API_KEY = os.environ.get("OPENAI_API_KEY", "sk-no-key-needed-on-replay")
QUESTION = "What is Paris like today?"

PLANNER = "You are a research planner. Call the tools you need, all at once."
TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "today's weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "news", "description": "today's headlines about a topic",
                                      "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}}}},
]


# --- the program: plain async Python ------------------------------------------------------------


async def call_tool(http: httpx.AsyncClient, tools_url: str, call: Any) -> dict[str, Any]:
    """One tool call, as an HTTP request; its answer as the tool message the model reads."""
    response = await http.get(f"{tools_url}/tools/{call.function.name}", params=json.loads(call.function.arguments))
    response.raise_for_status()
    return {"role": "tool", "tool_call_id": call.id, "content": response.text}


async def research(question: str, *, http: httpx.AsyncClient, llm_url: str = LLM_URL, tools_url: str = TOOLS_URL,
                   api_key: str = API_KEY, planner: str = PLANNER) -> str:
    """Plan with the model, run the tools it asks for concurrently, then write the answer."""
    client = openai.AsyncOpenAI(api_key=api_key, base_url=llm_url, http_client=http)
    messages: list[Any] = [{"role": "system", "content": planner}, {"role": "user", "content": question}]
    plan = await client.chat.completions.create(model="planner", messages=messages, tools=TOOLS)
    asked = plan.choices[0].message
    results = await asyncio.gather(*(call_tool(http, tools_url, call) for call in asked.tool_calls or ()))
    messages += [asked.model_dump(exclude_none=True), *results]
    answer = await client.chat.completions.create(model="writer", messages=messages)
    return answer.choices[0].message.content or ""


async def main() -> None:
    """The program's own entry point, without swarmlog."""
    async with httpx.AsyncClient() as http:
        print(await research(sys.argv[1] if len(sys.argv) > 1 else QUESTION, http=http))


# --- as a swarmlog agent: only the entry point is wrapped ---------------------------------------


class Researcher(Agent):
    def __init__(self, name: str, *, planner: str = PLANNER, llm_url: str = LLM_URL,
                 tools_url: str = TOOLS_URL) -> None:
        super().__init__(name)
        self.planner, self.llm_url, self.tools_url = planner, llm_url, tools_url

    def initial_state(self) -> dict[str, Any]:
        return {"answers": []}

    @on_message("question")
    async def question(self, ctx, event):
        answer = await research(event.body, http=ctx.async_http(httpx), llm_url=self.llm_url,
                                tools_url=self.tools_url, planner=self.planner)
        self.state["answers"].append(answer)
        ctx.send(event.agent_id, "answer", answer)


class Desk(Agent):
    """Asks the question when the run starts and keeps the answer."""

    def initial_state(self) -> dict[str, Any]:
        return {"answers": []}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("researcher", "question", QUESTION)

    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"].append(event.body)


def make_swarm(*, planner: str = PLANNER, llm_url: str = LLM_URL, tools_url: str = TOOLS_URL) -> Swarm:
    return Swarm(name="async-research", code_version="async-research-1",
                 agents=lambda: [Desk("desk"), Researcher("researcher", planner=planner, llm_url=llm_url,
                                                          tools_url=tools_url)])


CHANGED_PLANNER = "You are a careful research planner. Call the tools you need, all at once."
"""The planner's prompt changed: a replay with it diverges at ``body.messages[0].content``."""

swarm = make_swarm()
changed = make_swarm(planner=CHANGED_PLANNER)


if __name__ == "__main__":
    asyncio.run(main())
