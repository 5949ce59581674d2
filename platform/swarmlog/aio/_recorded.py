"""The awaitable forms of ``ctx.effect`` and ``ctx.llm``: one concurrent recorded call each.

Each is what its sync form is — the same record, the same check on replay, the same result — made
a call of the step's loop (:mod:`._calls`) so that several can be in flight at once:

* ``await ctx.async_effect(name, fn, *args)``: live, ``fn(*args)`` runs on a worker thread of
  the agent's (an ``async def`` fn on a fresh asyncio loop there), outside the guard; its JSON
  result (or its failure, raised as :class:`~swarmlog.errors.EffectFailed`) is recorded as an
  ``effect.recorded``. On replay the record is served.
* ``await ctx.async_llm(request)``: live, the swarm's LLM client's ``complete(request)`` on a
  worker thread; request and response recorded as an ``llm.call``. Unlike ``ctx.llm``, a failure
  is recorded too (``llm.call`` v2's ``error``) and raised as :class:`EffectFailed` live and on
  replay alike: in an async step the *order* of outcomes is part of the record, failures included.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError, EffectDiverged, EffectFailed
from ..log.hashing import canonical
from ..log.protocol import EFFECT_RECORDED, LLM_CALL
from ._calls import StepContext

__all__ = ["async_effect", "async_llm"]


async def async_effect(ctx: StepContext, name: str, fn: Callable[..., Any], *args: Any) -> Any:
    args_json = canonical(list(args))
    run = ctx.run_effect

    def work() -> dict[str, Any]:
        error = None
        result_json: str | None
        try:
            if run is not None:
                result = run(name, fn, args)
            elif inspect.iscoroutinefunction(fn):
                result = asyncio.run(fn(*args))  # on the worker's thread, a loop of its own
            else:
                result = fn(*args)
            result_json = canonical(result)
        except Exception as exc:  # recorded, then raised to the coroutine as EffectFailed
            result_json, error = None, f"{type(exc).__name__}: {exc}"
        return {"name": name, "args_json": args_json, "result_json": result_json, "error": error}

    def check(recorded: dict[str, Any]) -> None:
        if recorded["name"] != name or recorded["args_json"] != args_json:
            raise EffectDiverged(offset=ctx.now(), agent=ctx.agent,
                                 detail=f"effect {name!r} with args {args_json} is not what the log recorded here",
                                 recorded={"effect": recorded["name"], "args": recorded["args_json"]},
                                 replayed={"effect": name, "args": args_json})

    shown = args_json if len(args_json) <= 60 else args_json[:59] + "…"
    payload = await ctx._step_loop().calls.issue(event_type=EFFECT_RECORDED, what=f"effect {name!r} {shown}",
                                                 work=work, check=check)
    if payload["error"] is not None:
        raise EffectFailed(name=name, error=payload["error"])
    return json.loads(payload["result_json"])


async def async_llm(ctx: StepContext, request: dict[str, Any]) -> dict[str, Any]:
    request_json = canonical(request)
    model = str(request.get("model", ""))
    client = ctx.llm_client
    loop = ctx._step_loop()
    if client is None and loop.calls.mode != "replay":
        raise ConfigurationError("ctx.async_llm() needs an LLM client: Swarm(..., llm=OpenAIChat(...))")

    def work() -> dict[str, Any]:
        try:
            response_json, error = canonical(client.complete(request)), None
        except Exception as exc:
            response_json, error = None, f"{type(exc).__name__}: {exc}"
        return {"model": model, "request_json": request_json, "response_json": response_json, "error": error}

    def check(recorded: dict[str, Any]) -> None:
        if recorded["request_json"] != request_json:
            raise EffectDiverged(offset=ctx.now(), agent=ctx.agent,
                                 detail="the LLM request differs from the recorded one",
                                 recorded={LLM_CALL: recorded["request_json"]}, replayed={LLM_CALL: request_json})

    payload = await loop.calls.issue(event_type=LLM_CALL, what=f"llm {model or '?'}", work=work, check=check)
    if payload["error"] is not None:
        raise EffectFailed(name=f"llm {model}", error=payload["error"])
    return json.loads(payload["response_json"])
