"""Agent frameworks on swarmlog: a LangGraph step with swarmlog beside the same graph without it, against the
same loopback stub model (``swarmlog.testing.StubServer``), in one process with repetitions interleaved.

The graph is LangGraph's quickstart agent (a model node, a tool node, a loop): per invocation two model
calls (the first asks for a tool, the second answers) and one tool call. Timed, ``STEPS`` invocations:

* ``langgraph.step_swarmlog``: as a handler runs it — inside ``guarded()`` (the determinism guard's profile
  hook, LangGraph's own bookkeeping let through), ``ChatOpenAI`` on a recorded ``httpx2`` client (each
  exchange redacted and built into its record; appending to Kafka is left out: it is the same
  ``_output`` for every recorded call, measured by the swarm benchmarks).
* ``langgraph.step_plain``: the same graph, ``ChatOpenAI`` on its own client, no guard: the program
  without swarmlog.
"""

from __future__ import annotations

from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, interleave, log, reps, row, timed
from .llm_clients import _ListRecorder

STEPS = env_int("BENCH_FRAMEWORK_STEPS", 100)


def _model(request: dict[str, Any]) -> Any:
    from swarmlog.testing import tool_call_reply

    if request["messages"][-1].get("role") == "tool":
        return "4 words"
    return tool_call_reply(("word_count", {"text": "a distributed append-only log"}))


def _graph(llm: Any) -> Any:
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


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    import httpx2
    from langchain_openai import ChatOpenAI

    from swarmlog.guard import guarded
    from swarmlog.llm.http import RecordedHTTP, transport_type
    from swarmlog.testing import StubServer

    with_swarmlog, plain = Run("langgraph.step_swarmlog", STEPS), Run("langgraph.step_plain", STEPS)
    question = {"messages": [("user", "how many words?")]}
    with StubServer(_model) as server:
        recorder = _ListRecorder()
        recorded = httpx2.Client(transport=transport_type(httpx2)(RecordedHTTP(ctx=recorder, library=httpx2,
                                                                               retries=0)))

        def swarmlog_steps() -> None:
            for _ in range(STEPS):
                with guarded(agent="bench", offset=0):  # a step builds its model on ctx.http(), as a handler does
                    llm = ChatOpenAI(model="stub", api_key="sk-bench", base_url=server.base_url,
                                     http_client=recorded, max_retries=0)
                    _graph(llm).invoke(question)

        def plain_steps() -> None:
            for _ in range(STEPS):
                llm = ChatOpenAI(model="stub", api_key="sk-bench", base_url=server.base_url, max_retries=0)
                _graph(llm).invoke(question)

        swarmlog_steps()
        plain_steps()  # warm up: imports, connections, caches

        def measure(r: int, which: Run, fn: Any) -> None:
            seconds, _ = timed(fn)
            which.add(seconds)
            log(f"{which.name} rep {r}: {STEPS / seconds:,.1f} steps/s")

        interleave(reps(5), lambda r: measure(r, with_swarmlog, swarmlog_steps),
                   lambda r: measure(r, plain, plain_steps))
        assert len(recorder.records) == 2 * STEPS * (1 + reps(5))  # two recorded model calls a step
    per_step_ms = {r.name: round(r.seconds / STEPS * 1e3, 2) for r in (with_swarmlog, plain)}
    return [row(with_swarmlog, plain, per_step_ms=per_step_ms)]
