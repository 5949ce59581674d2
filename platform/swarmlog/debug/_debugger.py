"""Stopping in a real debugger at one step of a replay: ``swarmlog debug``.

Internal; :meth:`swarmlog.debug.Session.debug` is the face.

**Which step.** A :class:`HandlerTrap` replaces an agent's handler methods, on that one
instance, with a wrapper that runs the real handler — and, for the step chosen (an
offset, or the K-th handler run), runs it under the debugger. Nothing else changes: the
wrapper is called exactly where the runtime would call the handler, inside the
determinism guard, with the ``ctx`` and event of the replay, so every input, effect and
LLM response the handler sees is the one the log recorded.

**Which debugger.** Python's own choice: :func:`sys.breakpointhook`, i.e. ``pdb`` unless
``PYTHONBREAKPOINT`` names another (``ipdb.set_trace``, ``pudb.set_trace``, an IDE's hook).
A one-shot trace function waits for the handler's frame to be entered and calls the hook
from there, so the debugger stops at the handler's first line, in its frame (``self``,
``ctx``, ``event`` at hand), not in swarmlog's wrapper.

**The determinism guard and the debugger.** The guard is a profile hook
(``sys.setprofile``); debuggers are trace functions (``sys.settrace``). CPython calls
neither hook while a trace function runs, so everything the debugger does at its prompt
— reading source files, ``~/.pdbrc``, evaluating what the engineer types — is outside
the guard, while the handler's own code, stepped line by line, stays guarded: a clock
read in the handler still raises :class:`~swarmlog.errors.NondeterminismError` under the
debugger. (A debugger entered from inside a handler, by ``breakpoint()`` or
``pdb.set_trace()``, sets itself up before its first trace event; the guard lets
debugger modules do that, see :data:`swarmlog.guard.DEBUGGER_MODULES`.)

**Leaving the debugger carries on the replay.** ``continue`` lets the handler finish and
the fold go on. ``quit`` raises ``BdbQuit`` inside the handler; the trap then puts the
agent's state and the step's outputs back as they were when the step began and runs
the handler again, undebugged, so the replay goes on exactly as if nobody had stopped.
"""

from __future__ import annotations

import bdb
import functools
import inspect
import logging
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..events import Event
from ..runtime.checkpoint import copy_state
from ..runtime.engine import AgentCore

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Stop:
    """One step the debugger stopped at."""

    agent: str
    offset: int
    number: int
    """The agent's handler runs so far, this one included."""
    handler: str
    event: Event
    quit: bool = False
    """The engineer left with ``quit``: the step was run again without the debugger."""
    attached: bool = True
    """False when no debugger took over (``PYTHONBREAKPOINT=0``): the handler just ran."""

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "offset": self.offset, "number": self.number, "handler": self.handler,
                "event_type": self.event.event_type, "kind": self.event.kind, "quit": self.quit,
                "attached": self.attached}


def run_under_debugger(fn: Callable[..., Any], *args: Any,
                       drive: Callable[[Any], Any] | None = None) -> tuple[Any, bool]:
    """Call ``fn(*args)`` with the configured debugger stopped at ``fn``'s first line.

    ``drive``: what runs an awaitable ``fn`` returns (an ``async def`` handler's coroutine:
    ``ctx.run``), under the same trace, so the debugger stops at the coroutine's first line when
    the step's loop first runs it. Returns ``fn``'s result and whether a debugger attached.
    """
    code = getattr(fn, "__func__", fn).__code__
    attached = [False]

    def enter(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call" or frame.f_code is not code:
            return None
        sys.settrace(None)
        sys.breakpointhook()  # the debugger's set_trace, called from this frame's first event
        attached[0] = frame.f_trace is not None or sys.gettrace() is not None
        return frame.f_trace  # what the debugger set for the handler's frame

    previous = sys.gettrace()
    sys.settrace(enter)
    try:
        result = fn(*args)
        if drive is not None and inspect.isawaitable(result):
            result = drive(result)
        return result, attached[0]
    finally:
        if sys.gettrace() is enter:  # fn never ran its frame (it raised first)
            sys.settrace(previous)


class HandlerTrap:
    """Runs the handler of one chosen step of ``core``'s agent under the debugger."""

    def __init__(self, core: AgentCore, *, when: Callable[[int, int], bool],
                 on_stop: Callable[[Stop], None] | None = None) -> None:
        """``when(offset, number)``: whether to stop at the agent's ``number``-th handler run, at ``offset``."""
        self.core = core
        self.when = when
        self.on_stop = on_stop
        self.stops: list[Stop] = []
        agent = core.agent
        for attr in sorted(set(type(agent)._handlers.values())):
            setattr(agent, attr, self._trap(getattr(agent, attr)))

    def _trap(self, original: Callable[[Any, Event], None]) -> Callable[[Any, Event], None]:
        core = self.core

        @functools.wraps(original)
        def trapped(ctx: Any, event: Event) -> None:
            offset, number = ctx.now(), core.steps
            if not self.when(offset, number):
                return original(ctx, event)
            stop = Stop(agent=core.name, offset=offset, number=number,
                        handler=getattr(original, "__qualname__", repr(original)), event=event)
            self.stops.append(stop)
            if self.on_stop is not None:
                self.on_stop(stop)
            # What the step must go back to if the engineer quits in the middle of it.
            state = copy_state(core.agent.state, agent=core.name)
            divergences = len(core.divergences)
            pending = dict(core.pending.get(offset, {}))
            try:
                _, stop.attached = run_under_debugger(original, ctx, event, drive=ctx.run)
                return None
            except bdb.BdbQuit:
                sys.settrace(None)
                stop.quit = True
                logger.info("agent %s, offset %d: the debugger quit; the step runs again without it", core.name,
                            offset)
                core.agent.state = state
                del core.divergences[divergences:]
                if pending:
                    core.pending[offset] = pending
                else:
                    core.pending.pop(offset, None)
                ctx.begin(step=offset, event=event, sink=core.verify_sink)
                return original(ctx, event)

        return trapped
