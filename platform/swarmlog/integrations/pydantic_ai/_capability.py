"""A run of pydantic-ai agents inside a step: ``await agent.run(prompt, capabilities=[recorded(ctx)])``.

:func:`recorded` is a pydantic-ai capability, given per run (never on the agent, never a process global), that
uses the extension points pydantic-ai offers durable-execution engines:

* ``get_wrapper_model``: every model request through :class:`~._model.RecordedModel` (an ``llm.call``);
* ``after_tool_execute``: every tool's result recorded when it returns (``effect.recorded``, ``tool <name>``;
  checked, not served, on replay: :mod:`swarmlog.integrations._recorded`);
* ``wrap_run``: sync tools run inline, on the step's loop (pydantic-ai's ``disable_threads``), not on a thread;
* ``get_default_run_id`` / ``get_default_conversation_id``: the run's ids derived from the step (``ctx.uuid()``),
  where pydantic-ai would draw a uuid7 from the clock and OS entropy, so they are the same on replay.

Delegation between swarmlog agents is a message: :func:`conversation` gives a run's messages as pydantic-ai's own
JSON (structured data for ``ctx.send``), :func:`messages_from` reads them back into ``message_history``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai._utils import disable_threads
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models import Model

from .._recorded import tool_result
from ._model import RecordedModel, messages_json

__all__ = ["Recorded", "conversation", "messages_from", "recorded"]


@dataclass
class Recorded(AbstractCapability[Any]):
    """The capability :func:`recorded` gives (see the module)."""

    ctx: Any = None

    def get_wrapper_model(self, model: Model) -> Model | None:
        return None if isinstance(model, RecordedModel) else RecordedModel(model, ctx=self.ctx)

    def get_default_run_id(self) -> str | None:
        return str(self.ctx.uuid())

    def get_default_conversation_id(self, run_id: str) -> str | None:
        from pydantic_ai.durable_exec import conversation_id_from_run_id

        return conversation_id_from_run_id(run_id)

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        # pydantic-ai runs a sync tool (or instructions function) on a worker thread; a step may start none:
        # its own switch (the one its Temporal integration uses) runs them inline, on the step's loop, guarded.
        with disable_threads():
            return await handler()

    async def after_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, result: Any) -> Any:
        await tool_result(self.ctx, tool=call.tool_name, call_id=call.tool_call_id, arguments=args, result=result)
        return result


def recorded(ctx: Any) -> Recorded:
    """The capability that records a pydantic-ai run in the step's log:
    ``agent.run(..., capabilities=[recorded(ctx)])``."""
    return Recorded(ctx=ctx)


def conversation(messages: list[ModelMessage]) -> list[Any]:
    """A run's messages (``result.all_messages()``) as pydantic-ai's JSON, for a message to another swarmlog agent
    (structured data, not a string inside one); the times and run ids stamped per run are left out."""
    return messages_json(messages)


def messages_from(data: list[Any]) -> list[ModelMessage]:
    """Messages sent by :func:`conversation`, back as pydantic-ai's, for ``agent.run(..., message_history=...)``."""
    return ModelMessagesTypeAdapter.validate_python(data)
