"""Agent frameworks on swarmlog: a step of each framework's program with swarmlog beside the same program without
it, against the same loopback stub model (``swarmlog.testing.StubServer``), in one process, repetitions
interleaved.

Each framework runs the same program in its documented style — an agent with one pure tool
(``word_count``): per step two model calls (the first asks for the tool, the second answers) and one
tool call — ``STEPS`` steps timed per repetition:

* ``<framework>.step_swarmlog``: as a handler runs it, driven as the runtime drives a live step
  (``ctx.begin(live=True)``, the handler under ``guarded()``, an ``async def`` one through
  ``ctx.run``) on a real :class:`~swarmlog.context.Context`, into a sink that keeps the outputs
  (each record validated and handed over as to a transaction; the Kafka append itself is the same
  for every recorded call and is measured by the swarm benchmarks):

  - ``langgraph``: LangGraph's quickstart graph, ``ChatOpenAI`` on ``ctx.http()`` (each exchange an
    ``http.exchange``);
  - ``openai_agents``: ``await Runner.run(agent, q, **recorded(ctx, provider=...))`` (each model call
    an ``llm.call``, the tool's result an ``effect.recorded``);
  - ``pydantic_ai``: ``await agent.run(q, capabilities=[recorded(ctx)])`` (the same records).

* ``<framework>.step_plain``: the same program without swarmlog: no ``ctx``, no guard, the framework's
  own client (the async frameworks on one event loop of their own, as a program has).
* ``<framework>.step_swarmlog_unguarded``: ``step_swarmlog`` with the determinism guard off — not how a
  handler runs; it says how much of the overhead is the guard's profile hook over the framework's code.

Rows report wall time per step (``us_per_step``, the seconds column) and the process's CPU time per step
(``cpu_us_per_step``: every thread, the stub server's included, the same for both sides); on a shared
machine the CPU time is the steadier of the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from inspect import isawaitable
from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, interleave, log, reps, row

STEPS = env_int("BENCH_FRAMEWORK_STEPS", 100)
QUESTION = "how many words?"
KEY = "sk-bench-0123456789"


def _model(request: dict[str, Any]) -> Any:
    from swarmlog.testing import tool_call_reply

    if request["messages"][-1].get("role") == "tool":
        return "4 words"
    return tool_call_reply(("word_count", {"text": "a distributed append-only log"}))


class _Keep:
    """A live step's sink: keeps count of the outputs (what a transaction would be handed)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def write(self, out: Any, *, locate: bool) -> int | None:
        self.n += 1
        return self.n

    def recorded(self, event_id: str) -> Any:
        return None


def _live_steps(ctx: Any, handler: Callable[[Any], Any], n: int, sink: _Keep, *, guard: bool = True) -> None:
    from swarmlog.guard import guarded

    for i in range(n):
        ctx.begin(step=i, event=None, sink=sink, live=True)
        with guarded(agent=ctx.agent, offset=i) if guard else contextlib.nullcontext():
            result = handler(ctx)
            if result is not None and isawaitable(result):
                ctx.run(result)
        ctx.end()


# --- the programs ------------------------------------------------------------------------------------------------


def _langgraph(llm: Any) -> Any:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph

    @tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    llm_with_tools = llm.bind_tools([word_count])

    def llm_call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm_with_tools.invoke(state["messages"])]}

    def tool_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [ToolMessage(content=str(word_count.invoke(c["args"])), tool_call_id=c["id"])
                             for c in state["messages"][-1].tool_calls]}

    builder = StateGraph(MessagesState)
    builder.add_node("llm_call", llm_call)
    builder.add_node("tool_node", tool_node)
    builder.add_edge(START, "llm_call")
    builder.add_conditional_edges("llm_call", lambda s: "tool_node" if s["messages"][-1].tool_calls else END,
                                  ["tool_node", END])
    builder.add_edge("tool_node", "llm_call")
    return builder.compile()


def _langgraph_pair(url: str) -> tuple[Callable[[Any], Any], Callable[[], Any]]:
    from langchain_openai import ChatOpenAI

    question = {"messages": [("user", QUESTION)]}

    def with_swarmlog(ctx: Any) -> None:  # a step builds its model on ctx.http(), as a handler does
        llm = ChatOpenAI(model="stub", api_key=ctx.credential("BENCH_KEY"), base_url=url, http_client=ctx.http(),
                         max_retries=0)
        _langgraph(llm).invoke(question)

    def plain() -> None:
        llm = ChatOpenAI(model="stub", api_key=KEY, base_url=url, max_retries=0)
        _langgraph(llm).invoke(question)

    return with_swarmlog, plain


def _openai_agents_pair(url: str) -> tuple[Callable[[Any], Any], Callable[[], Any]]:
    from agents import Agent, OpenAIProvider, RunConfig, Runner, function_tool

    from swarmlog.integrations.openai_agents import recorded

    @function_tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    agent = Agent(name="Counter", instructions="Count the words.", model="stub", tools=[word_count])
    provider = OpenAIProvider(base_url=url, api_key=KEY, use_responses=False)  # built once, as a program does
    config = RunConfig(model_provider=provider, tracing_disabled=True)

    async def with_swarmlog(ctx: Any) -> None:
        await Runner.run(agent, QUESTION, **recorded(ctx, provider=provider, run_config=RunConfig(
            tracing_disabled=True)))

    async def plain() -> None:
        await Runner.run(agent, QUESTION, run_config=config)

    return with_swarmlog, plain


def _pydantic_ai_pair(url: str) -> tuple[Callable[[Any], Any], Callable[[], Any]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from swarmlog.integrations.pydantic_ai import recorded

    agent = Agent(OpenAIChatModel("stub", provider=OpenAIProvider(base_url=url, api_key=KEY)),
                  instructions="Count the words.")

    @agent.tool_plain
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    async def with_swarmlog(ctx: Any) -> None:
        await agent.run(QUESTION, capabilities=[recorded(ctx)])

    async def plain() -> None:
        await agent.run(QUESTION)

    return with_swarmlog, plain


PROGRAMS: dict[str, Callable[[str], tuple[Callable[[Any], Any], Callable[[], Any]]]] = {
    "langgraph": _langgraph_pair, "openai_agents": _openai_agents_pair, "pydantic_ai": _pydantic_ai_pair}
# Records of one step with swarmlog: LangGraph's two exchanges; the others' two model calls and one tool result.
RECORDS_PER_STEP = {"langgraph": 2, "openai_agents": 3, "pydantic_ai": 3}


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    from swarmlog.context import Context
    from swarmlog.testing import StubServer

    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # the SDK would export traces to OpenAI's backend
    os.environ["BENCH_KEY"] = KEY  # what the handler's ctx.credential reads, live
    rows = []
    with StubServer(_model) as server:
        for framework, make in PROGRAMS.items():
            with_swarmlog, plain = make(server.base_url)
            ctx = Context(agent=framework, registry=registry)
            ctx.set_run(run_id="bench", seed=1)
            sink = _Keep()
            loop = asyncio.new_event_loop()  # the plain program's own loop, kept for its connections

            def swarmlog_steps(ctx: Any = ctx, step: Any = with_swarmlog, sink: _Keep = sink) -> None:
                _live_steps(ctx, step, STEPS, sink)

            def unguarded_steps(ctx: Any = ctx, step: Any = with_swarmlog, sink: _Keep = sink) -> None:
                _live_steps(ctx, step, STEPS, sink, guard=False)

            def plain_steps(step: Any = plain, loop: asyncio.AbstractEventLoop = loop) -> None:
                for _ in range(STEPS):
                    result = step()
                    if isawaitable(result):
                        loop.run_until_complete(result)

            swarmlog_steps()
            plain_steps()  # warm up: imports, connections, caches
            runs = (Run(f"{framework}.step_swarmlog", STEPS), Run(f"{framework}.step_plain", STEPS),
                    Run(f"{framework}.step_swarmlog_unguarded", STEPS))

            def measure(r: int, which: Run, fn: Callable[[], None]) -> None:
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                which.add(wall, us_per_step=wall / STEPS * 1e6, cpu_us_per_step=cpu / STEPS * 1e6)
                log(f"{which.name} rep {r}: {STEPS / wall:,.1f} steps/s, {cpu / STEPS * 1e3:.2f} ms CPU a step")

            pairs = tuple(zip(runs, (swarmlog_steps, plain_steps, unguarded_steps), strict=True))
            interleave(reps(5), *(lambda r, which=which, fn=fn: measure(r, which, fn) for which, fn in pairs))
            loop.close()
            assert sink.n == RECORDS_PER_STEP[framework] * STEPS * (1 + 2 * reps(5)), (framework, sink.n)
            swarmlog_cpu, plain_cpu, unguarded_cpu = (r.medians()["cpu_us_per_step"] for r in runs)
            rows.append(row(runs[0], runs[1], cpu_ratio=round(plain_cpu / swarmlog_cpu, 3)))
            rows.append(row(runs[2], runs[1], cpu_ratio=round(plain_cpu / unguarded_cpu, 3)))
    return rows
