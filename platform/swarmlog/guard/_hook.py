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

Where it is built, the common path runs in C (:mod:`swarmlog.guard._native`, below): a profile
function that answers the common events itself from the same tables and hands every other one
to :func:`hook`, as CPython hands every event to a Python profile function. Either way
:func:`install` puts the guard in place, ``sys.getprofile()`` returns :func:`hook`, and
:func:`uninstall` (``sys.setprofile(None)``) takes it away.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import InvalidSetting
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

__all__ = ["GuardHook", "HOOK_ENV", "apply", "hook", "hook_in_use", "install", "setprofile", "uninstall"]

_PACKAGE = __name__.rpartition(".")[0]
setprofile = sys.setprofile
getprofile = sys.getprofile
# The guard switches its hook off through a C callable that is no C function: calling it is no
# profile event, so the hook does not see the guard's own sys.setprofile(None) (it would only
# excuse it, at a cost twice a step: leaving the handler and entering allowed()).
uninstall = functools.partial(setprofile, None)
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
_GUARD_ENTER_CODE: types.CodeType | None = None  # set by _scope (it imports this module)


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
            setprofile(resume)  # type: ignore[arg-type]
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


# --- which profile function a guard installs: the C one, or `hook` itself ---------------------
#
# Decided once, at import, for the whole process: the C profile function where it is built (on
# CPython 3.11, with a compiler at install time), else `hook` as a Python profile function.
# SWARMLOG_GUARD_HOOK=python asks for the Python one (to compare them, or to rule the C one out);
# =native insists on the C one (an error where it is not built). Read here, not in
# swarmlog.settings: the guard is chosen when it is imported, before any Settings exists, and for
# every caller of `guarded()` (library callers pass no Settings), as the interpreter's hash seed
# is read by swarmlog.runtime.interpreter.

HOOK_ENV = "SWARMLOG_GUARD_HOOK"


@dataclass(frozen=True, slots=True)
class GuardHook:
    """Which profile function a guard installs in this process (``native``: the C one), and why."""

    native: bool
    why: str

    def __str__(self) -> str:
        return f"{'native' if self.native else 'Python'} profile hook ({self.why})"


try:
    from . import _native
except ImportError as exc:  # not built here: no compiler at install time, or not CPython 3.11
    _native = None  # type: ignore[assignment]
    _NOT_BUILT = (f"{_PACKAGE}._native is not built: swarmlog was installed where it could not be compiled"
                  if importlib.util.find_spec(f"{_PACKAGE}._native") is None
                  else f"{_PACKAGE}._native does not load: {exc}")
else:
    _native.bind(hook, _functions, BY_TYPE, CODES)
    _NOT_BUILT = ""


# install() makes the chosen hook this thread's profile function. Either installer is a C callable:
# no Python frame, so no profile event under a Python profile function (a Logger call's, above)
# when it puts the full hook back.
install: Callable[[], object]
_in_use: GuardHook


def _select(chosen: GuardHook) -> None:
    """Install the C profile function from now on (``chosen.native``), or ``hook`` itself."""
    global install, _in_use
    if chosen.native and _native is None:
        raise InvalidSetting(variable=HOOK_ENV, value="native", problem=_NOT_BUILT,
                             hint="python, or a C compiler when swarmlog is installed (then native is the default)")
    install = _native.install if chosen.native else functools.partial(setprofile, hook)
    _in_use = chosen


def _choose(environ: Mapping[str, str] | None = None) -> GuardHook:
    """The profile function the environment asks for (default: the C one where it is built)."""
    env = os.environ if environ is None else environ
    asked = env.get(HOOK_ENV, "").strip().lower()
    if asked == "python":
        return GuardHook(native=False, why=f"{HOOK_ENV}=python")
    if asked == "native":
        return GuardHook(native=True, why=f"C, swarmlog.guard._native; {HOOK_ENV}=native")  # _select checks it
    if asked:
        raise InvalidSetting(variable=HOOK_ENV, value=env[HOOK_ENV], problem="not a profile hook the guard has",
                             hint="native (the default where it is built) or python")
    if _native is None:
        return GuardHook(native=False, why=_NOT_BUILT)
    return GuardHook(native=True, why="C, swarmlog.guard._native")


def hook_in_use() -> GuardHook:
    """Which profile function a guard installs in this process, and why (for logs, tests, benchmarks)."""
    return _in_use


_select(_choose())
