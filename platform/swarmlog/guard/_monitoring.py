"""The guard's events on CPython 3.12 and later: a sys.monitoring (PEP 669) tool of its own.

A profile function (``sys.setprofile``) is per thread and sees every call and every return; on
3.12, CPython runs it on top of sys.monitoring, switching the interpreter's events on when a
thread installs one and off when the last one leaves, which makes it re-instrument the code it
runs next — twice a step, as the guard enters and leaves a handler. Used directly, sys.monitoring
does better for the guard (bench/README.md has the measurements):

* Events are on for every thread once the first guard is entered, and stay on; which hook a
  thread has (none outside handlers) is a per-thread slot the callbacks read first. Entering and
  leaving a handler only sets the slot.
* The start of a Python function no row names answers ``DISABLE``: CPython never reports that
  function's start again. A profile function pays for every Python call of a handler, every
  time; here only the first call of each function costs anything.
* A C method called as ``obj.method()`` arrives as its descriptor and ``obj``: the common case
  (a type with no rules) needs no bound method made per call.
* A callback that raises raises where the event happened, and the hook stays: nothing re-arms.

The callbacks are C functions (:mod:`swarmlog.guard._native`) where swarmlog was compiled, else
the Python ones below, which do the same with a Python call per event. Either hands the rare
event to the thread's hook in a profile function's shape, ``(frame, event, arg)``, so
:func:`swarmlog.guard._hook.hook` and its scopes serve every API alike.

The tool id is one of the two PEP 669 leaves unassigned (4, else 3), so a debugger, coverage.py,
cProfile (ids 0-2) and Hypothesis's explain phase (3) keep theirs and run beside the guard; it is
claimed when the guard is imported, where the choice of hook is made and logged (no id free: the
profile hook, and the reason says so). The events are the process's, like the profile hook's tables: what differs per
thread is only the slot.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AVAILABLE", "TOOL_NAME", "Events", "claim", "python_events"]

AVAILABLE = sys.version_info >= (3, 12) and hasattr(sys, "monitoring")
TOOL_NAME = "swarmlog.guard"
# 0-2 are the debugger's, coverage's and profilers', 5 the optimizer's; of the two left, Hypothesis's
# explain phase takes 3 (hypothesis.internal.scrutineer), so 4 first.
_UNASSIGNED_IDS = (4, 3)

_BuiltinFunction = types.BuiltinFunctionType
_MethodDescriptor = types.MethodDescriptorType


def claim() -> int | None:
    """A tool id for the guard (the one it already holds, on a second call), or None if none is free."""
    if not AVAILABLE or sys.version_info < (3, 12):  # the second half for mypy, which checks this as 3.11
        return None
    mon = sys.monitoring
    for tool in _UNASSIGNED_IDS:
        if mon.get_tool(tool) == TOOL_NAME:
            return tool
    for tool in _UNASSIGNED_IDS:
        if mon.get_tool(tool) is None:
            mon.use_tool_id(tool, TOOL_NAME)
            return tool
    return None


@dataclass(frozen=True, slots=True)
class Events:
    """The guard's sys.monitoring tool, with one set of callbacks registered (C or Python)."""

    tool: int
    install: Callable[[], object]
    setprofile: Callable[[Any], object]
    getprofile: Callable[[], object]

    def turn_off(self) -> None:
        """No events (when the guard switches to the profile API, in tests and benchmarks)."""
        if sys.version_info < (3, 12):  # for mypy, which checks this as 3.11 too
            raise RuntimeError("sys.monitoring is CPython 3.12+")
        mon = sys.monitoring
        mon.set_events(self.tool, 0)
        for code in watched_returns():
            mon.set_local_events(self.tool, code, 0)


def watched_returns() -> tuple[types.CodeType, ...]:
    """The functions whose return a scope's hook waits for (a Logger call's, in :mod:`._hook`)."""
    from ._exemptions import EXCEPTION_TEXT, LOG, MESSAGE

    return LOG, MESSAGE, EXCEPTION_TEXT


def _turn_on(tool: int) -> None:
    """The events the guard needs, for every thread: calls and starts always; a return only of the
    functions a scope waits for (local events), and any unwinding (which cannot be local)."""
    if sys.version_info < (3, 12):  # for mypy, which checks this as 3.11 too
        raise RuntimeError("sys.monitoring is CPython 3.12+")
    mon = sys.monitoring
    ev = mon.events
    mon.set_events(tool, ev.CALL | ev.PY_START | ev.PY_RESUME | ev.PY_UNWIND)
    for code in watched_returns():
        mon.set_local_events(tool, code, ev.PY_RETURN)


def _register(tool: int, on_call: Callable[..., object], on_start: Callable[..., object],
              on_return: Callable[..., object]) -> None:
    if sys.version_info < (3, 12):  # for mypy, which checks this as 3.11 too
        raise RuntimeError("sys.monitoring is CPython 3.12+")
    mon = sys.monitoring
    ev = mon.events
    mon.register_callback(tool, ev.CALL, on_call)
    mon.register_callback(tool, ev.PY_START, on_start)
    mon.register_callback(tool, ev.PY_RESUME, on_start)  # a generator resumed: a call, as for a profile function
    mon.register_callback(tool, ev.PY_RETURN, on_return)
    mon.register_callback(tool, ev.PY_UNWIND, on_return)


def native_events(tool: int, native: types.ModuleType, hook: object, functions: dict, by_type: dict, codes: dict,
                  watched_starts: list[types.CodeType], bound_selves: tuple[object, ...]) -> Events:
    """The C callbacks, bound to the Python hook and its tables."""
    if sys.version_info < (3, 12):  # for mypy, which checks this as 3.11 too
        raise RuntimeError("sys.monitoring is CPython 3.12+")
    native.bind(hook, functions, by_type, codes, sys.monitoring.MISSING, sys.monitoring.DISABLE, watched_starts,
                bound_selves, functools.partial(_turn_on, tool))
    _register(tool, native.on_call, native.on_start, native.on_return)
    return Events(tool=tool, install=native.install, setprofile=native.setprofile, getprofile=native.getprofile)


def python_events(tool: int, hook: Callable[..., object], functions: dict, by_type: dict, codes: dict,
                  watched_starts: list[types.CodeType], bound_selves: tuple[object, ...]) -> Events:
    """The Python callbacks: what :mod:`swarmlog.guard._native`'s do, where it is not built. The
    common C call (a function known to be harmless, a method of a type with no rules) is answered
    here, without a second Python call; everything else goes to the thread's hook."""
    if sys.version_info < (3, 12):  # for mypy, which checks this as 3.11 too
        raise RuntimeError("sys.monitoring is CPython 3.12+")
    mon = sys.monitoring
    missing, disable = mon.MISSING, mon.DISABLE
    getframe = sys._getframe
    functions_get, by_type_get, codes_get = functions.get, by_type.get, codes.get
    module = types.ModuleType
    on = [False]

    class Slot(threading.local):
        current: Callable[..., object] | None = None  # this thread's hook; None outside handlers

    slot = Slot()

    def setprofile(obj: Callable[..., object] | None) -> None:
        if obj is not None and not on[0]:
            _turn_on(tool)
            on[0] = True
        slot.current = obj

    def on_call(code: types.CodeType, offset: int, fn: object, arg0: object) -> object:
        current = slot.current
        if current is None:
            return None
        if type(fn) is _MethodDescriptor:
            if arg0 is missing:
                return None
            klass = type(arg0)
            if (current is hook and klass is not module and not by_type_get(klass, True)
                    and not any(arg0 is s for s in bound_selves)):
                return None
            try:
                fn = fn.__get__(arg0, klass)
            except TypeError:  # a `self` of the wrong type: the call itself raises
                return None
        elif isinstance(fn, _BuiltinFunction):
            if current is hook and functions_get(fn) == ():
                return None
        else:
            return None
        current(getframe(1), "c_call", fn)
        return None

    def on_start(code: types.CodeType, offset: int) -> object:
        named = codes_get(code.co_qualname) is not None
        if not named and not any(code is c for c in watched_starts):
            return disable
        current = slot.current
        if current is not None and (named or current is not hook):
            current(getframe(1), "call", None)
        return None

    def on_return(code: types.CodeType, offset: int, value: object) -> object:
        current = slot.current
        if current is not None and current is not hook:
            current(getframe(1), "return", None)
        return None

    _register(tool, on_call, on_start, on_return)
    return Events(tool=tool, install=functools.partial(setprofile, hook), setprofile=setprofile,
                  getprofile=lambda: slot.current)
