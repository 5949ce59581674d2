"""pydantic-ai on swarmlog (``pip install 'swarmlog[pydantic-ai]'``; docs/integrations/pydantic-ai.md).

In an ``async def`` handler, an agent run as pydantic-ai's docs write it, with one capability more::

    result = await agent.run(event.body, deps=deps, capabilities=[recorded(ctx)])

* every model request is an ``llm.call`` in the log (pydantic-ai's messages, tools and settings; its
  response's parts and usage); a streamed request (``run_stream``, ``iter``) is served as the same stream;
* every tool's result is recorded (``effect.recorded``, ``tool <name>``) and checked on replay; a tool's own
  HTTP goes through ``ctx.async_http()`` (in the run's ``deps``);
* the run's ids come from the step, not from the clock; replay serves the model calls from the log;
* delegation stays inside the run (a tool that runs another agent), or goes to another swarmlog agent as a
  message carrying the conversation (:func:`conversation`, :func:`messages_from`).
"""

from ._capability import Recorded, conversation, messages_from, recorded
from ._model import RecordedModel

__all__ = ["Recorded", "RecordedModel", "conversation", "messages_from", "recorded"]
