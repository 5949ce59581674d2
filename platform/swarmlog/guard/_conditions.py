"""Conditions of the table's conditional rows: when a call is refused, decided from its arguments.

A condition for a C function receives the :class:`~swarmlog.guard._callsite.CallSite` (its
``self`` and the arguments the guard can read); one for a Python function receives the
function's own frame at its first line, whose locals are its arguments. Both run on the
guard's rare path only: when a call of a conditional row's function has been seen.

What a condition does when the guard cannot read an argument is part of the row's decision:
"refused only when the argument is provably absent" (``time.gmtime(obj.ts())`` passes) or
"refused unless provably harmless" (``sqlite3.connect(path)`` is refused whatever ``path`` is,
unless it is the literal ``":memory:"``). docs/agents.md lists the first kind among what the guard
cannot see.
"""

from __future__ import annotations

import _io
import asyncio
import os
import random
import sys
import types
from collections.abc import Callable

from ._callsite import MISSING, UNKNOWN, CallSite

SiteCondition = Callable[[CallSite], bool]
FrameCondition = Callable[[types.FrameType], bool]


# --- C functions: from the call site ---------------------------------------------------------


def arg_absent(position: int, name: str | None = None) -> SiteCondition:
    """Refused when the argument is not passed, or is ``None``; passes when the guard cannot tell."""
    def condition(site: CallSite) -> bool:
        return site.absent(position, name) is True
    condition.__qualname__ = f"arg_absent({position}, {name!r})"
    return condition


def arg_given(position: int, name: str | None = None, *, default: object = None) -> SiteCondition:
    """Refused when the argument is passed with a value other than ``default`` (or one the
    guard cannot read)."""
    def condition(site: CallSite) -> bool:
        value = site.arg(position, name)
        return value is not MISSING and (value is UNKNOWN or value != default)
    condition.__qualname__ = f"arg_given({position}, {name!r})"
    return condition


def arg_not(position: int, name: str | None, harmless: object) -> SiteCondition:
    """Refused unless the argument is provably ``harmless`` (``sqlite3.connect(":memory:")``)."""
    def condition(site: CallSite) -> bool:
        return site.arg(position, name) != harmless
    condition.__qualname__ = f"arg_not({position}, {name!r}, {harmless!r})"
    return condition


def naive_self(site: CallSite) -> bool:
    """A ``datetime`` without ``tzinfo``: converting it reads the machine's time zone."""
    return getattr(site.self_, "tzinfo", None) is None


def blocking_with_timeout(site: CallSite) -> bool:
    """``SimpleQueue.get(block=True, timeout=t)`` with a real timeout: waits on the wall clock."""
    block = site.arg(0, "block")
    return block is not False and site.absent(1, "timeout") is not True


def seeds_from_entropy(site: CallSite) -> bool:
    # _random.Random.seed(None) seeds from OS entropy, and seeding random's module-level
    # generator changes what every other user of `random` sees.
    return site.self_ is random._inst or site.absent(0) is not False


def converts_local(site: CallSite) -> bool:
    # dt.astimezone() converts to the local zone; a naive dt is taken to be local time.
    return naive_self(site) or site.absent(0, "tz") is True


def reads_a_file(site: CallSite) -> bool:
    # A text or buffered stream over BytesIO (io.TextIOWrapper(io.BytesIO(data))) reads memory;
    # one over a FileIO reads a file, a pipe or the terminal opened outside the handler.
    obj: object = site.self_
    for _ in range(4):
        if isinstance(obj, (_io.FileIO, _io.BufferedRWPair)):
            return True
        inner = getattr(obj, "buffer", None) if isinstance(obj, _io.TextIOWrapper) else \
            getattr(obj, "raw", None) if isinstance(obj, (_io.BufferedReader, _io.BufferedRandom)) else None
        if inner is None:
            return False
        obj = inner
    return False


def no_running_loop(site: CallSite) -> bool:
    """``asyncio.get_event_loop()`` with no loop running on this thread: it would make a loop of
    its own (or hand over one made outside the step). Inside an async step it returns the step's
    own loop, the one running, as ``asyncio.get_running_loop()`` does."""
    return asyncio._get_running_loop() is None


# --- Python functions: from the function's own arguments --------------------------------------


def local_given(name: str) -> FrameCondition:
    """Refused when the argument ``name`` is not ``None`` (a timeout was given)."""
    def condition(frame: types.FrameType) -> bool:
        return frame.f_locals.get(name) is not None
    condition.__qualname__ = f"local_given({name!r})"
    return condition


def local_none(name: str) -> FrameCondition:
    """Refused when the argument ``name`` is ``None`` (no seed was given)."""
    def condition(frame: types.FrameType) -> bool:
        return frame.f_locals.get(name) is None
    condition.__qualname__ = f"local_none({name!r})"
    return condition


def blocking_local_timeout(frame: types.FrameType) -> bool:
    """``Queue.get(block=True, timeout=t)`` / ``put``: waits on the wall clock."""
    return bool(frame.f_locals.get("block", True)) and frame.f_locals.get("timeout") is not None


def relative_path(frame: types.FrameType) -> bool:
    """``os.path.abspath(path)``: only a relative path needs the working directory."""
    path = frame.f_locals.get("path")
    try:
        return not os.path.isabs(path)  # type: ignore[arg-type]
    except TypeError:
        return True


def relative_self(frame: types.FrameType) -> bool:
    """``Path.absolute()``: only a relative path needs the working directory."""
    path = frame.f_locals.get("self")
    return not getattr(path, "is_absolute", lambda: False)()


def not_a_source_file(frame: types.FrameType) -> bool:
    """``linecache``: refused unless the file is the source of code this process runs."""
    filename = frame.f_locals.get("filename")
    return isinstance(filename, str) and not is_source_file(filename, frame)


# --- what counts as source code ---------------------------------------------------------------

_sources: set[str] = set()
_sources_seen = -1  # len(sys.modules) when _sources was built


def _module_files() -> set[str]:
    global _sources_seen
    if len(sys.modules) != _sources_seen:
        _sources_seen = len(sys.modules)
        found = set()
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)  # not getattr(module, "__file__"): no module __getattr__
            file = namespace.get("__file__") if isinstance(namespace, dict) else None
            if isinstance(file, str):
                found.add(file)
        _sources.clear()
        _sources.update(found)
    return _sources


def is_source_file(filename: str, frame: types.FrameType | None = None) -> bool:
    """Whether ``filename`` is source code of this process: a pseudo-file (``<string>``), the
    file of a loaded module, the file of code on the stack, or of code in the traceback of the
    exception being handled. Reading it is reading the program, not data."""
    if filename.startswith("<") and filename.endswith(">"):
        return True
    if filename in _module_files():
        return True
    f = frame
    while f is not None:
        if f.f_code.co_filename == filename:
            return True
        f = f.f_back
    exc = sys.exc_info()[1]
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                return True
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return False
