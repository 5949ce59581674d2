"""Async agents, replayed exactly: ``async def`` handlers on a deterministic, runtime-owned loop.

::

    import asyncio, openai
    from swarmlog import Agent, on_message

    class Researcher(Agent):
        @on_message("question")
        async def ask(self, ctx, event):
            client = openai.AsyncOpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.async_http())
            weather, news = await asyncio.gather(ctx.async_http().get(WEATHER), ctx.async_http().get(NEWS))
            reply = await client.chat.completions.create(model="gpt-4o-mini", messages=[...])
            ctx.send(event.agent_id, "answer", reply.choices[0].message.content)

Each step's coroutine runs on the agent's :class:`~._loop.StepLoop`: no selector, no threads of
its own, ready callbacks in FIFO order, a virtual clock (``asyncio.sleep(30)`` costs nothing).
Recorded calls made concurrently really overlap live, and each is recorded with its identity
(the order the step made it in) when its result is delivered: the log holds the order results
reached the coroutine, and replay delivers them in that order (:mod:`._calls`). The user guide is
``docs/async.md``.
"""

from __future__ import annotations

from .errors import AsyncCallDiverged, AsyncStepError, NestedRun, StepCancelled, StepLeftWork, StepStalled

__all__ = ["AsyncCallDiverged", "AsyncStepError", "NestedRun", "StepCancelled", "StepLeftWork", "StepStalled"]
