"""The profile hook: on every call inside a handler, is this a refused row?

It runs for every call and return of a guarded thread, so its common path is a compare and one
dict lookup: for a C call, the function object among the refused and the known-harmless ones
(then, for a C method, its ``self``'s type in :data:`~._rules.BY_TYPE`); for a Python call, the code's qualified name in
:data:`~._rules.CODES`; a return, two compares. Everything else — a row's condition, the
exemptions, naming the call, raising — is the rare path. While a Logger call runs, a lighter
profile function stands in (below): logging's own reads cost no lookups and no stack walks.

CPython uninstalls a profile function that raises. Until the next line, exception or call
reinstalls it, a one-shot trace function stands in (see :mod:`swarmlog.guard`). A frame's own
trace function (a debugger's, coverage's) is wrapped, not replaced, and gets its event.

Where it is built, the common path runs in C (:mod:`swarmlog.guard._native`, below): it answers
the common events itself from the same tables and hands every other one to :func:`hook`, as
CPython hands every event to a Python profile function. The events come through one of two APIs
(below): a profile function (``sys.setprofile``) on CPython 3.11, sys.monitoring on 3.12 and later
(:mod:`swarmlog.guard._monitoring`), which hands them over in a profile function's shape. Either
way :func:`install` puts the guard in place on this thread, :func:`getprofile` returns
:func:`hook` while it is there, and :func:`uninstall` takes it away.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidSetting
from . import _monitoring
from ._callsite import CallSite
from ._exemptions import EXCEPTION_TEXT, LOG, MESSAGE, calling_library, exemption
from ._rules import (
    BY_CLASS,
    BY_TYPE,
    CODES,
    EXACT,
    LOOK_UP_AS_CLASS,
    Entries,
    called_from_exempt,
    code_entries,
    rules_for_class,
    rules_for_type,
)
from ._state import ThreadState, innermost_guard, thread_state
from .errors import ForbiddenCall
from .table import Row

__all__ = ["GuardHook", "HOOK_ENV", "apply", "getprofile", "hook", "hook_in_use", "install", "setprofile",
           "uninstall"]

_PACKAGE = __name__.rpartition(".")[0]
# This thread's hook: set, read, installed and taken away through the API in use (`_select`, below):
# sys.setprofile and sys.getprofile for a profile function, the guard's own per-thread slot under
# sys.monitoring. The guard switches its hook off through a C callable that is no C function: under
# a profile function calling it is no event, so the hook does not see the guard's own
# setprofile(None) (it would only excuse it, at a cost twice a step: leaving the handler and
# entering allowed()).
setprofile: Callable[[Any], object]
getprofile: Callable[[], object]
install: Callable[[], object]
uninstall: Callable[[], object]
_rearms = True  # a hook that raises is uninstalled (a profile function): re-arm it (below)
# Bound once, called by name: CPython 3.11 compiles `IMPORTED_NAME.get(x)` as an attribute load
# (it takes an imported name for a module), which builds a bound method on every call.
_by_type_get = BY_TYPE.get
_by_class_get = BY_CLASS.get
_codes_get = CODES.get
# The refused C functions, and every module-level C function seen so far that is not one (as
# `()`): len, isinstance, getattr... are then one lookup, like time.time. A function of a module
# can match no other rule (rules on C methods go by the type of `self`, here a module).
_functions: dict[object, tuple[Row, ...]] = dict(EXACT)
_functions_get = _functions.get
_FUNCTIONS_LIMIT = 8192
_MODULE = types.ModuleType


def _harmless(fn: object) -> None:
    if len(_functions) > _FUNCTIONS_LIMIT:  # functions made at run time must not pile up
        _functions.clear()
        _functions.update(EXACT)
    _functions[fn] = ()


def hook(frame: types.FrameType, event: str, arg: object) -> None:
    if event == "c_call":
        rows = _functions_get(arg)
        if rows is not None:
            if rows:
                _c_call(frame, arg.__self__, rows)  # type: ignore[attr-defined]
            return
        self_ = arg.__self__  # type: ignore[attr-defined]
        klass = type(self_)
        by_name = _by_type_get(klass)
        if by_name is None:
            by_name = rules_for_type(klass)
        if not by_name:
            if klass is _MODULE:
                _harmless(arg)
            return
        if by_name is LOOK_UP_AS_CLASS:
            by_name = _by_class_get(self_)
            if by_name is None:
                by_name = rules_for_class(self_)
        if by_name:
            rules = by_name.get(arg.__name__)  # type: ignore[attr-defined]
            if rules:
                for rule in rules:
                    if rule.matches(arg, self_):
                        _c_call(frame, self_, rule.rows)
                        return
    elif event == "call":
        code = frame.f_code
        candidates = _codes_get(code.co_qualname)
        if candidates is not None:
            for candidate, entries in candidates:
                if candidate is code:
                    _py_call(frame, entries)
                    return


def _c_call(frame: types.FrameType, self_: object, rows: tuple[Row, ...]) -> None:
    if rows[-1].when is None and _excused(rows[-1], frame):
        # Refused whatever the arguments (time.localtime: the clock, or given seconds the zone),
        # and excused here (a Logger call's own record): no need to read the arguments.
        return
    site = None
    for row in rows:
        if row.when is not None:
            site = site or CallSite(frame, self_)
            if not row.when(site):
                continue
        _violation(row, frame, frame)
        return


def _py_call(frame: types.FrameType, entries: Entries) -> None:
    if entries is _LOGGER_CALL:
        _enter_logger_call(frame)
        return
    for bound, row in entries:
        if bound is not None and _first_arg(frame) is not bound:
            continue
        if row.when is not None and not row.when(frame):
            continue
        _violation(row, frame.f_back, frame)
        return


def _first_arg(frame: types.FrameType) -> object:
    code = frame.f_code
    if not code.co_argcount:
        return None
    return frame.f_locals.get(code.co_varnames[0])


def _named(frame: types.FrameType | None, base: types.FrameType | None) -> Row | None:
    """The outermost refused row among the Python frames from ``frame`` up to the guard."""
    found = None
    f = frame
    while f is not None and f is not base:
        for bound, row in code_entries(f.f_code):
            if (bound is None or _first_arg(f) is bound) and (row.when is None or row.when(f)):
                found = row
                break
        f = f.f_back
    return found


def _excused(row: Row, caller: types.FrameType | None) -> bool:
    """Whether the refused call ``caller`` made of ``row`` is not the handler's doing."""
    if caller is not None and caller.f_globals.get("__name__", "").startswith(_PACKAGE):
        return True  # the guard's own code
    if row.unless_called_from and called_from_exempt(row, caller):
        return True
    st = thread_state()
    guard = st.stack[-1] if st.stack and st.stack[-1].guards else innermost_guard(st)  # the hook runs under a guard
    return exemption(row, caller, getattr(guard, "base", None)) is not None


def _violation(row: Row, caller: types.FrameType | None, innermost: types.FrameType) -> None:
    """Raise ForbiddenCall for a refused row, unless it is not the handler's doing."""
    if _excused(row, caller):
        return
    st = thread_state()
    guard = st.stack[-1] if st.stack and st.stack[-1].guards else innermost_guard(st)
    base = getattr(guard, "base", None)
    named = _named(innermost, base) or row
    exc = ForbiddenCall(offset=getattr(guard, "offset", None), agent=getattr(guard, "agent", None),
                        call=named.call, case=named.case, kind=named.kind, use=named.use, reason=named.why,
                        intercepted=row.call if row is not named else None,
                        library=calling_library(caller or innermost, base))
    for scope in st.stack:
        if scope.guards and scope.violation is None:
            scope.violation = exc
    if _rearms:
        _arm_rearm(st, caller or innermost)
    raise exc


def apply(st: ThreadState) -> None:
    """Install the hook iff the innermost scope on this thread is a guard (slow path)."""
    if st.yielded:
        return
    want = bool(st.stack) and st.stack[-1].guards
    st.scope_hooks = None
    if want:
        install()
    elif st.hooked:
        uninstall()
    st.hooked = want


# --- a Logger call: what logging does for itself, at the cost of two compares ---------------
#
# A Logger call (`log.info(...)`) stamps a record with the clock, the process and the thread,
# renders it and hands it to handlers; it returns nothing, so the handler sees none of it (the
# rule in `_exemptions`). Checking each of those reads against the table and walking the stack to
# excuse it cost a stamped log call more than logging itself costs. So while `Logger._log` runs,
# the thread's profile function is a lighter one that refuses nothing and watches for two things
# only: `Logger._log`'s own return (then the full hook is back), and the two places where the
# handler's own code runs inside a Logger call — rendering the message (`LogRecord.getMessage`
# calls an argument's `__str__`) and an exception's text (`traceback._safe_string`). Inside
# those the full hook runs again, under the same rule as before (a refused call there is
# refused). A guard entered inside a Logger call (a log handler that runs agents) gets the full
# hook back for good. Whatever else reinstalls the full hook (`allowed()`, re-arming after a
# raise) only makes the rest of the Logger call stricter.
#
# The profile functions are closures over the frame they wait for; the thread state keeps them
# referenced while they are installed, so replacing one from inside itself frees nothing in use.

class _Scope(tuple):
    """A :data:`~._rules.CODES` entry that is a scope, not a row: no entries (so nothing that
    reads the table's rows sees it), told apart by identity."""

    __slots__ = ()


_LOGGER_CALL: Entries = _Scope()
_LOG_CODE = LOG
_MESSAGE_CODE, _EXCEPTION_TEXT_CODE = MESSAGE, EXCEPTION_TEXT
_GUARD_ENTER_CODE: types.CodeType | None = None  # set by _scope (it imports this module): watch_guard_entry
# The functions whose start a Logger call's hook watches though no row names them: under
# sys.monitoring their start is never disabled (the C callbacks read this list, in place).
_WATCHED_STARTS: list[types.CodeType] = [_MESSAGE_CODE, _EXCEPTION_TEXT_CODE]


def watch_guard_entry(code: types.CodeType) -> None:
    """``guarded.__enter__``'s code: a guard entered inside a Logger call takes the full hook back."""
    global _GUARD_ENTER_CODE
    _GUARD_ENTER_CODE = code
    _WATCHED_STARTS.append(code)


def _enter_logger_call(top: types.FrameType) -> None:
    st = thread_state()

    def logger_call(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            if code is _MESSAGE_CODE or code is _EXCEPTION_TEXT_CODE:
                _render(st, frame, logger_call)
            elif code is _GUARD_ENTER_CODE:
                st.scope_hooks = None
                install()
        elif event == "return" and frame is top:
            st.scope_hooks = None
            install()

    st.scope_hooks = (logger_call,)
    setprofile(logger_call)


def _render(st: ThreadState, at: types.FrameType, resume: object) -> None:
    """The handler's code may run from here until ``at`` returns: the full hook, then ``resume``."""

    def rendering(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "return" and frame is at:
            st.scope_hooks = (resume,)
            setprofile(resume)
            return
        hook(frame, event, arg)

    st.scope_hooks = (resume, rendering)
    setprofile(rendering)


def _register_logger_call() -> None:
    if code_entries(_LOG_CODE):
        raise TypeError("logging.Logger._log is a row of the guard's table and a Logger-call scope")
    others = tuple(pair for pair in CODES.get(_LOG_CODE.co_qualname, ()) if pair[0] is not _LOG_CODE)
    CODES[_LOG_CODE.co_qualname] = (*others, (_LOG_CODE, _LOGGER_CALL))


_register_logger_call()


# --- re-arming after a raise ---------------------------------------------------------------


class _RearmThen:
    """A frame's trace function for one event: re-arm the guard, then hand over to ``local``."""

    __slots__ = ("local",)

    def __init__(self, local: object) -> None:
        self.local = local

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> object:
        rearm()  # puts `local` back as the frame's trace function
        if self.local is None:
            return None
        return self.local(frame, event, arg)  # type: ignore[operator]


def _arm_rearm(st: ThreadState, frame: types.FrameType) -> None:
    if st.rearm_frames is None:
        st.rearm_trace = sys.gettrace()
        st.rearm_frames = []
    f: types.FrameType | None = frame
    while f is not None:
        if not isinstance(f.f_trace, _RearmThen):
            f.f_trace = _RearmThen(f.f_trace)
            st.rearm_frames.append(f)
        f = f.f_back
    sys.settrace(_rearm_global)  # type: ignore[arg-type]


def disarm(st: ThreadState) -> object:
    """Take the stand-in trace functions away; return the thread's own trace function."""
    previous, frames = st.rearm_trace, st.rearm_frames or []
    st.rearm_trace = st.rearm_frames = None
    for f in frames:
        if isinstance(f.f_trace, _RearmThen):
            f.f_trace = f.f_trace.local  # type: ignore[assignment]
    sys.settrace(previous)  # type: ignore[arg-type]
    return previous


def rearm() -> object:
    st = thread_state()
    if st.rearm_frames is None:
        return st.rearm_trace
    previous = disarm(st)
    apply(st)
    return previous


def _rearm_global(frame: types.FrameType, event: str, arg: object) -> object:
    previous = rearm()
    if previous is not None:
        return previous(frame, event, arg)  # type: ignore[operator]
    return None


# --- which hook a guard installs, through which API ------------------------------------------
#
# Decided once, at import, for the whole process: the C hook where it is built (with a compiler at
# install time), else `hook` itself; on CPython 3.11 as a profile function, on 3.12 and later
# through sys.monitoring (a profile function there costs more: bench/guard.py measures both, and
# bench/README.md has the figures), unless no sys.monitoring tool id is free. SWARMLOG_GUARD_HOOK=python
# asks for the Python hook (to compare them, or to rule the C one out); =native insists on the C one
# (an error where it is not built). Read here, not in swarmlog.settings: the guard is chosen when it
# is imported, before any Settings exists, and for every caller of `guarded()` (library callers
# pass no Settings), as the interpreter's hash seed is read by swarmlog.runtime.interpreter.

HOOK_ENV = "SWARMLOG_GUARD_HOOK"
PROFILE, MONITORING = "profile", "monitoring"

try:
    from . import _native
except ImportError as exc:  # not built here: no compiler at install time, or not CPython 3.11+
    _native = None  # type: ignore[assignment]
    _NOT_BUILT = (f"{_PACKAGE}._native is not built: swarmlog was installed where it could not be compiled"
                  if importlib.util.find_spec(f"{_PACKAGE}._native") is None
                  else f"{_PACKAGE}._native does not load: {exc}")
else:
    _NOT_BUILT = ""

_TOOL = _monitoring.claim()
_API = MONITORING if _TOOL is not None else PROFILE
_API_WHY = (f"sys.monitoring tool {_TOOL}" if _TOOL is not None else
            "" if not _monitoring.AVAILABLE else
            f"sys.setprofile: no sys.monitoring tool id free of {_monitoring._UNASSIGNED_IDS}")


@dataclass(frozen=True, slots=True)
class GuardHook:
    """Which hook a guard installs in this process (``native``: the C one), through which API
    (``profile``: a profile function; ``monitoring``: sys.monitoring), and why."""

    native: bool
    why: str
    api: str = _API

    def __str__(self) -> str:
        return f"{'native' if self.native else 'Python'} {self.api} hook ({self.why})"


_in_use: GuardHook
_events: _monitoring.Events | None = None  # the tool's callbacks, while an API of sys.monitoring is in use


def _bound_selves() -> tuple[object, ...]:
    """The objects rows name C methods of one by one (random's hidden ``Random``): a call of their
    methods as ``obj.method()`` is looked up as the bound method, not by ``obj``'s type."""
    selves = {id(fn.__self__): fn.__self__ for fn in EXACT  # type: ignore[attr-defined]
              if not isinstance(fn.__self__, (types.ModuleType, type))}  # type: ignore[attr-defined]
    return tuple(selves.values())


def _native_problem(api: str) -> str:
    """Why the C hook cannot serve through ``api`` here ("" if it can)."""
    if _native is None:
        return _NOT_BUILT
    if _native.API != api:
        return f"{_PACKAGE}._native is built as a {_native.API} hook on this Python; {_API_WHY}"
    return ""


def _select(chosen: GuardHook) -> None:
    """Install the chosen hook through the chosen API from now on."""
    global install, setprofile, getprofile, uninstall, _rearms, _in_use, _events
    problem = _native_problem(chosen.api) if chosen.native else ""
    if problem:
        raise InvalidSetting(variable=HOOK_ENV, value="native", problem=problem,
                             hint="python, or a C compiler when swarmlog is installed (then native is the default)")
    if chosen.api == MONITORING:
        if _TOOL is None:
            raise ValueError(f"the guard cannot use sys.monitoring here: {_API_WHY or 'CPython 3.11'}")
        if chosen.native:
            _events = _monitoring.native_events(_TOOL, _native, hook, _functions, BY_TYPE, CODES, _WATCHED_STARTS,
                                                _bound_selves())
        else:
            _events = _monitoring.python_events(_TOOL, hook, _functions, BY_TYPE, CODES, _WATCHED_STARTS,
                                                _bound_selves())
        install, setprofile, getprofile = _events.install, _events.setprofile, _events.getprofile
        _rearms = False
    else:
        if _events is not None:
            _events.turn_off()
            _events = None
        if chosen.native:
            _native.bind(hook, _functions, BY_TYPE, CODES)
        install = _native.install if chosen.native else functools.partial(sys.setprofile, hook)
        setprofile, getprofile = sys.setprofile, sys.getprofile
        _rearms = True
    uninstall = functools.partial(setprofile, None)
    _in_use = chosen


def _choose(environ: Mapping[str, str] | None = None) -> GuardHook:
    """The hook the environment asks for (default: the C one where it is built)."""
    env = os.environ if environ is None else environ
    asked = env.get(HOOK_ENV, "").strip().lower()
    api = f"; {_API_WHY}" if _API_WHY else ""
    if asked == "python":
        return GuardHook(native=False, why=f"{HOOK_ENV}=python{api}")
    if asked == "native":
        return GuardHook(native=True, why=f"C, swarmlog.guard._native{api}; {HOOK_ENV}=native")  # _select checks it
    if asked:
        raise InvalidSetting(variable=HOOK_ENV, value=env[HOOK_ENV], problem="not a hook the guard has",
                             hint="native (the default where it is built) or python")
    problem = _native_problem(_API)
    if problem:
        return GuardHook(native=False, why=problem if _native is not None else _NOT_BUILT + api)
    return GuardHook(native=True, why=f"C, swarmlog.guard._native{api}")


def hook_in_use() -> GuardHook:
    """Which hook a guard installs in this process, through which API, and why (for logs, tests, benchmarks)."""
    return _in_use


_select(_choose())
