"""What can go wrong in an async step, as typed errors.

Two kinds, decided by type like every swarmlog error:

* **The step's own mistakes** (:class:`AsyncStepError` and below): a coroutine that returns
  while work it started is still scheduled (:class:`StepLeftWork`), one that waits for
  something nothing can ever deliver (:class:`StepStalled`), ``ctx.run`` called where a loop
  already runs (:class:`NestedRun`). They are deterministic — the same code does the same
  thing live and on replay — so the runtime treats them as the handler raising: the step's
  failure is recorded (``handler.failed``) and a replay expects it at the same place.
* **A replay that cannot go on** (:class:`AsyncCallDiverged`, an
  :class:`~swarmlog.errors.EffectDiverged`): a concurrent call the log cannot match. It names
  the call (its identity in the step, what it asks) and its place (what the log delivers there).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import EffectDiverged, RunError

__all__ = ["AsyncCallDiverged", "AsyncStepError", "NestedRun", "StepCancelled", "StepLeftWork", "StepStalled"]


class AsyncStepError(RunError):
    """An async step did something a step cannot do (see the module)."""

    def __init__(self, message: str, *, agent: str, offset: int) -> None:
        self.agent = agent
        self.offset = offset
        super().__init__(f"agent {agent!r}, step at offset {offset}: {message}")


class StepLeftWork(AsyncStepError):
    """The step's coroutine returned while work it started was still scheduled.

    ``left`` names each piece: a pending task (by its coroutine), a timer callback, a recorded
    call still in flight. A step ends when its coroutine ends, and its transaction with it, so
    nothing may outlive it: work that ran on after the step would run outside any step's record.
    """

    def __init__(self, *, agent: str, offset: int, handler: str, left: Sequence[str]) -> None:
        self.handler = handler
        self.left = list(left)
        super().__init__(
            f"the coroutine of {handler} returned while work it started was still scheduled: {'; '.join(self.left)}. "
            f"A step ends when its coroutine ends: await everything it starts (asyncio.gather, asyncio.TaskGroup), "
            f"or cancel it and await the cancellation", agent=agent, offset=offset)


class StepStalled(AsyncStepError):
    """The step's coroutine waits, and nothing can ever wake it: no recorded call is in flight and
    no timer is set (an ``asyncio.Event`` nobody sets, a future nobody resolves, a queue nobody fills).
    On a real event loop it would hang forever; here it is known at once."""

    def __init__(self, *, agent: str, offset: int, handler: str, waiting: Sequence[str]) -> None:
        self.handler = handler
        self.waiting = list(waiting)
        super().__init__(
            f"the coroutine of {handler} waits for something nothing in the step can deliver (no recorded call is in "
            f"flight and no timer is set): {'; '.join(self.waiting) or 'a future nobody resolves'}. Inside a step "
            f"only recorded calls (ctx.async_http(), ctx.async_llm, ctx.async_effect) and timers (asyncio.sleep, "
            f"timeouts) make progress on their own", agent=agent, offset=offset)


class StepCancelled(AsyncStepError):
    """The step's own coroutine was cancelled (``asyncio.current_task().cancel()``, or by a task it
    handed itself to). Raised instead of asyncio's ``CancelledError``, a ``BaseException`` that would
    stop the agent rather than fail the step."""

    def __init__(self, *, agent: str, offset: int, handler: str) -> None:
        self.handler = handler
        super().__init__(f"the coroutine of {handler} was cancelled before it returned", agent=agent, offset=offset)


class NestedRun(AsyncStepError):
    """``ctx.run(coro)`` was called while the step's loop already runs (inside an async step)."""

    def __init__(self, *, agent: str, offset: int) -> None:
        super().__init__("ctx.run(coro) was called inside an async step, whose loop is already running: await the "
                         "coroutine instead (ctx.run is how a sync handler runs one)", agent=agent, offset=offset)


class AsyncCallDiverged(EffectDiverged):
    """A concurrent recorded call of an async step that the log cannot match.

    ``call`` is the call's identity in the step (the order the step made its concurrent calls in:
    0, 1, ...; it depends on the code, never on timing), ``what`` what it asks (``POST https://...``,
    ``effect 'fetch'``, ``llm gpt-4o``); ``delivered`` how many calls' results the step had been
    delivered before this place. A divergence of kind ``effect``: the handler cannot be served, so
    the agent's replay stops here.
    """

    def __init__(self, *, offset: int, agent: str, call: int | None, what: str, detail: str, delivered: int,
                 recorded: object = None) -> None:
        self.call = call
        self.what = what
        self.delivered = delivered
        super().__init__(offset=offset, agent=agent, detail=detail, recorded=recorded,
                         replayed={"call": call, "what": what, "delivered_before": delivered})
