"""A run of SDK agents inside a step (``Runner.run(agent, input, **recorded(ctx))``); handoffs between swarmlog agents.

:func:`recorded` gives ``Runner.run`` / ``Runner.run_streamed`` two keyword arguments, per run (never a process
global): the ``run_config`` with a :class:`~._model.RecordedProvider` (each model call an ``llm.call``), and
``hooks`` that record each function tool's result when it returns (``effect.recorded``, ``tool <name>``;
checked, not served, on replay: :mod:`swarmlog.integrations._recorded`).

Handoffs happen inside the run, in one step, as the SDK does them. Or, the user's choice, an SDK agent is
a swarmlog agent of its own: :func:`swarm_agent` stands it in as the target of a handoff, and when the run
ends there, :func:`handoff_of` gives the conversation so far — the SDK's input items, as structured data —
for ``ctx.send`` to carry to that agent, which goes on with ``Runner.run(its_agent, conversation)``. The
timeline then shows who handed what to whom.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Tool,
    Usage,
)
from agents.tool import FunctionTool
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from .._recorded import jsonable, tool_result
from ._model import RecordedProvider

__all__ = ["HandOff", "handoff_of", "recorded", "send_handoff", "swarm_agent"]


def recorded(ctx: Any, *, provider: Any = None, run_config: RunConfig | None = None,
             hooks: RunHooks[Any] | None = None) -> dict[str, Any]:
    """``run_config`` and ``hooks`` for ``Runner.run(agent, input, **recorded(ctx))`` in an ``async def`` handler.

    ``provider``: where live model calls go (an SDK ``ModelProvider``, built once; default ``OpenAIProvider()``).
    ``run_config``: the program's own, kept but for its ``model_provider``. ``hooks``: the program's own run
    hooks, still called. On replay the SDK's tracing is off (a replay exports nothing); live it is as
    configured.
    """
    config = run_config if run_config is not None else RunConfig()
    changes: dict[str, Any] = {"model_provider": RecordedProvider(ctx, live=provider)}
    if not ctx._live:
        changes["tracing_disabled"] = True
    return {"run_config": dataclasses.replace(config, **changes), "hooks": _RecordingHooks(ctx, hooks)}


class _RecordingHooks(RunHooks[Any]):
    """Records each function tool's result when it returns; the program's own hooks are called as before."""

    def __init__(self, ctx: Any, inner: RunHooks[Any] | None) -> None:
        self.ctx = ctx
        self.inner = inner if inner is not None else RunHooks()

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object) -> None:
        if isinstance(tool, FunctionTool):
            await tool_result(self.ctx, tool=tool.name, call_id=getattr(context, "tool_call_id", None),
                              arguments=getattr(context, "tool_arguments", None), result=result)
        await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        await self.inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        await self.inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        await self.inner.on_agent_end(context, agent, output)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        await self.inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self.inner.on_tool_start(context, agent, tool)


# --- handoffs between swarmlog agents ------------------------------------------------------------------------


class _HandOffModel(Model):
    """The model of an SDK agent that stands in for a swarmlog agent: it answers at once, asking nothing of
    anyone (so there is nothing to record), and the run ends there; :func:`handoff_of` finds it."""

    def __init__(self, to: str) -> None:
        self.to = to

    async def get_response(self, system_instructions: Any, input: Any, model_settings: ModelSettings,  # noqa: A002
                           tools: list[Tool], output_schema: Any, handoffs: Any, tracing: ModelTracing,
                           **kwargs: Any) -> ModelResponse:
        text = ResponseOutputText(type="output_text", text=f"handed off to swarmlog agent {self.to!r}",
                                  annotations=[])
        message = ResponseOutputMessage(id="handoff", type="message", role="assistant", status="completed",
                                        content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a handoff to a swarmlog agent ends the run: Runner.run_streamed reaches it "
                                  "through get_response")


def swarm_agent(agent: Agent[Any], to: str) -> Agent[Any]:
    """``agent`` as the target of a handoff that goes to the swarmlog agent ``to``, as a message.

    The model sees the same handoff (its name and description come from ``agent``); when it takes it, the
    run ends, and :func:`handoff_of` gives the conversation to send. ``to`` runs ``agent`` itself on it.
    """
    return agent.clone(model=_HandOffModel(to), tools=[], handoffs=[], input_guardrails=[], output_guardrails=[],
                       output_type=None, hooks=None)


@dataclasses.dataclass(frozen=True)
class HandOff:
    """A run that ended in a handoff to another swarmlog agent."""

    to: str
    """The swarmlog agent handed to."""
    agent: str
    """The SDK agent's name."""
    source: str
    """The SDK agent that handed off."""
    conversation: list[dict[str, Any]]
    """The conversation so far, as the SDK's input items (the handoff's own call and output included)."""

    def body(self) -> dict[str, Any]:
        """The message's body: structured data, which ``ctx.send`` writes as JSON (not a string inside one)."""
        return {"from": self.source, "agent": self.agent, "conversation": self.conversation}


def handoff_of(result: Any) -> HandOff | None:
    """The handoff a run (``Runner.run``'s result, or a finished ``run_streamed``) ended in, if it ended at
    an agent made by :func:`swarm_agent`; else None."""
    last = result.last_agent
    model = getattr(last, "model", None)
    if not isinstance(model, _HandOffModel):
        return None
    items = jsonable(result.to_input_list())
    if items and items[-1].get("id") == "handoff" and items[-1].get("type", "message") == "message":
        items = items[:-1]  # the stand-in's own answer: not part of the conversation handed on
    sources = [getattr(item, "source_agent", None) for item in result.new_items if type(item).__name__ ==
               "HandoffOutputItem"]
    source = sources[-1].name if sources and sources[-1] is not None else ""
    return HandOff(to=model.to, agent=last.name, source=source, conversation=items)


def send_handoff(ctx: Any, result: Any, *, kind: str = "handoff") -> HandOff | None:
    """If the run ended in a handoff to a swarmlog agent, send it the conversation (an ``agent.message`` of
    ``kind``, body :meth:`HandOff.body`) and return it; else return None and send nothing."""
    handoff = handoff_of(result)
    if handoff is not None:
        ctx.send(handoff.to, kind, handoff.body())
    return handoff
