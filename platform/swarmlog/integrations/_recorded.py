"""What the agent-framework integrations record: a framework's model calls and tool results, as calls of an async step.

Both the OpenAI Agents SDK and pydantic-ai let one replace the *model* (a ``Model`` object asked for
each response) and observe each *tool* result. This module is the one implementation both layers use:

* **A model call** (:func:`model_call`) is one concurrent recorded call of the step (:mod:`swarmlog.aio`),
  an ``llm.call`` whose request is what the framework asked of its model — model name, instructions, the
  conversation's items, the tools offered, settings — and whose response is what the model answered
  (output items, tool calls, usage), each as readable JSON the framework's own types dump to and load
  from. Live, the framework's real model is asked on :class:`LiveLoop`; on replay the record is served
  and **nothing of the live side is built**: no client, no API key, no base URL, no network. A replayed
  request that differs from the recorded one is a :class:`~swarmlog.integrations.errors.ModelRequestDiverged`
  naming the first differing JSON path (``request.instructions``, ``request.input[3].output``) and, for a
  tool's result inside the conversation, the tool.
* **A tool result** (:func:`tool_result`) is recorded as an ``effect.recorded`` named ``tool <name>`` when
  the tool returns, with its arguments and its result. A tool is code of the program, like a handler:
  replay runs it again (its own HTTP on ``ctx.async_http()`` served from its own records) and *checks*
  its result against the record, so a changed tool is named where it changed
  (:class:`~swarmlog.integrations.errors.ToolResultDiverged`), not only later, in the next model request.

Why the live model runs on one loop of its own, in its own thread: the frameworks' model objects hold
an ``httpx.AsyncClient`` (inside ``AsyncOpenAI``), whose connection pool belongs to the event loop it
first ran on, and users build those objects once, at module level, shared by every agent of the process
(the frameworks' docs do). A step's loop (:mod:`swarmlog.aio._loop`) has no selector and may not touch a
socket; the recorded-call workers each would need a loop per call (a client per call: tens of
milliseconds to build, no connection reuse). So live model calls — and only they — run on one
process-wide asyncio loop, started on first use from a worker thread (never inside a handler, never on
replay). It carries no decision of any agent's: what reaches a step is the recorded response.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import EffectFailed
from ..guard import allowed
from ..log.hashing import canonical
from ..log.protocol import EFFECT_RECORDED, LLM_CALL
from .errors import ModelRequestDiverged, ToolResultDiverged

__all__ = ["LiveLoop", "jsonable", "model_call", "tool_result"]

logger = logging.getLogger(__name__)

TOOL_PREFIX = "tool "
"""An ``effect.recorded`` whose name starts so is a framework tool's result (checked, not served, on replay)."""


class LiveLoop:
    """The one asyncio loop, in a daemon thread, on which the frameworks' live model calls run (see the module)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, make: Callable[[], Awaitable[Any]]) -> Any:
        """``await make()`` on the live loop, from a worker thread; its result, or what it raised."""
        loop = cls._loop
        if loop is None:
            with cls._lock:
                loop = cls._loop
                if loop is None:
                    loop = cls._loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="swarmlog-live-models", daemon=True).start()

        async def call() -> Any:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), loop).result()


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: pydantic models and dataclasses dumped as their JSON; anything else as its str."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str, serialize_unknown=True)


async def model_call(ctx: Any, *, model: str, request: dict[str, Any],
                     live: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """One model call of the step, recorded as an ``llm.call`` (see the module): the response, as JSON data.

    ``request`` is what is recorded and compared on replay; ``live()`` asks the framework's real model
    (on :class:`LiveLoop`) and returns the response as JSON data. A failure is recorded too and raised as
    :class:`~swarmlog.errors.EffectFailed`, live and on replay alike.
    """
    request_json = canonical(request)
    run = ctx.run_effect

    def work() -> dict[str, Any]:
        try:
            if run is not None:  # the simulator answers from its model of the call, by the model's name
                response = run(f"llm {model}", lambda r: LiveLoop.run(live), (request,))
            else:
                response = LiveLoop.run(live)
            response_json, error = canonical(response), None
        except Exception as exc:  # recorded, then raised to the framework as EffectFailed
            response_json, error = None, f"{type(exc).__name__}: {exc}"
        return {"model": model, "request_json": request_json, "response_json": response_json, "error": error}

    def check(recorded: dict[str, Any]) -> None:
        if recorded["request_json"] != request_json:
            raise ModelRequestDiverged.between(offset=ctx.now(), agent=ctx.agent, model=model,
                                               recorded=json.loads(recorded["request_json"]), replayed=request)

    payload = await ctx._step_loop().calls.issue(event_type=LLM_CALL, what=f"llm {model}", work=work, check=check)
    if payload["error"] is not None:
        raise EffectFailed(name=f"llm {model}", error=payload["error"])
    response: dict[str, Any] = json.loads(payload["response_json"])
    return response


async def tool_result(ctx: Any, *, tool: str, call_id: str | None, arguments: Any, result: Any) -> None:
    """Record that ``tool`` (called with ``arguments``) returned ``result`` (see the module); on replay,
    check it: a different result is a :class:`~swarmlog.integrations.errors.ToolResultDiverged`."""
    name = TOOL_PREFIX + tool
    args_json = canonical(_arguments(arguments))
    with allowed():  # dumping the framework's own result types: pydantic's serializers, nothing of the world
        result_json = canonical(jsonable(result))
    payload = {"name": name, "args_json": args_json, "result_json": result_json, "error": None}

    def check(recorded: dict[str, Any]) -> None:
        if recorded["name"] != name or recorded["args_json"] != args_json or recorded["result_json"] != result_json:
            raise ToolResultDiverged(offset=ctx.now(), agent=ctx.agent, tool=tool, call_id=call_id,
                                     recorded_name=recorded["name"].removeprefix(TOOL_PREFIX),
                                     recorded_args=recorded["args_json"], replayed_args=args_json,
                                     recorded_result=recorded["result_json"], replayed_result=result_json)

    await ctx._step_loop().calls.issue(event_type=EFFECT_RECORDED, what=f"tool {tool!r}", work=lambda: payload,
                                       check=check)


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return jsonable(arguments)
