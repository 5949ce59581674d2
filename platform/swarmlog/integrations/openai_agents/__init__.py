"""The OpenAI Agents SDK on swarmlog (``pip install 'swarmlog[openai-agents]'``; docs/integrations/openai-agents.md).

In an ``async def`` handler, a run of SDK agents as the SDK's docs write it, with two keyword arguments more::

    result = await Runner.run(triage, event.body, **recorded(ctx))

* every model call is an ``llm.call`` in the log (the SDK's input items, tools and settings; its output
  items, tool calls and usage), ``Runner.run_streamed`` recorded and served as the same stream;
* every function tool's result is recorded (``effect.recorded``, ``tool <name>``) and checked on replay;
  a tool's own HTTP goes through ``ctx.async_http()`` (given to it as the run's context);
* replay serves the model calls from the log: no API key, no base URL, no reachable model;
* handoffs stay inside the run, or go to another swarmlog agent as a message carrying the conversation
  (:func:`swarm_agent`, :func:`send_handoff`).
"""

from ._model import RecordedModel, RecordedProvider
from ._run import HandOff, handoff_of, recorded, send_handoff, swarm_agent

__all__ = ["HandOff", "RecordedModel", "RecordedProvider", "handoff_of", "recorded", "send_handoff", "swarm_agent"]
