"""The determinism guard: inside an agent's handler, reading the clock, process-wide randomness,
OS entropy, the network, the file system or starting a process raises :class:`ForbiddenCall`,
which names the call and the ``ctx`` method to use instead.

The runtime wraps every handler call in :func:`guarded`; swarmlog's own code performs recorded
I/O (``ctx.effect``, ``ctx.llm``) inside :func:`allowed`::

    with guarded(agent="planner", offset=42):
        handler(ctx, event)            # time.time() in here raises ForbiddenCall

    # inside ctx.effect, when the effect really runs:
    with allowed():
        result = fn()                  # may use the network, the clock, files

How it works, and why this way
------------------------------
A per-thread profile hook (``sys.setprofile``), installed only while a handler runs, sees every
call into a C function (the ``c_call`` event) together with the function object. The forbidden
functions are all C functions (``time.time``, ``datetime.datetime.now``, ``os.urandom``,
``socket.socket.connect``, ``open``, the bound methods of ``random``'s hidden module-level
``Random``), so matching the *object* catches every import style — ``from time import time``,
``import time as t``, a reference stashed in a dict at import time — which patching module
attributes cannot, and ``datetime.datetime`` cannot be patched at all. Forbidden *Python*
functions (``uuid.uuid4``, ``random.randint``, ``pathlib.Path.read_text``, ``secrets.*``) all end
in one of those C functions; they appear in :data:`DENY_LIST` so the error names the function the
handler called (found by walking the stack) rather than its innards, and the tests prove each one
is caught.

``sys.setprofile`` affects only the calling thread, so a timer thread or a Kafka client's
callback thread keeps working while a handler runs; outside handlers no hook is installed and
nothing costs anything. An audit hook (``sys.addaudithook``) was not used: it can never be
removed, it runs on every audited event of every thread, it has no events for the clock or
``random``, and its ``open`` event also fires for ``import``.

A profile hook that raises is uninstalled by CPython. A handler that swallows the
:class:`ForbiddenCall` (``except Exception: pass``) must not run unguarded afterwards, so before
raising the hook arms a one-shot trace function on the stack's frames that reinstalls it at the
next line, exception or call; and the guard remembers the violation and raises it again when the
handler returns normally, so a swallowed violation still fails the handler.
"""

from __future__ import annotations

import gc
import importlib
import random
import sys
import threading
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import NondeterminismError

__all__ = ["DEBUGGER_MODULES", "DENY_LIST", "Forbidden", "ForbiddenCall", "TRUSTED_LIBRARIES", "allowed", "guarded",
           "is_guarded", "trust_library"]


class ForbiddenCall(NondeterminismError):
    """A handler called something whose result or effect the log does not record."""

    def __init__(self, *, offset: int | None, agent: str | None, call: str, use: str,
                 reason: str, intercepted: str | None = None) -> None:
        """``call`` is what the handler called; ``intercepted`` the C function the guard
        stopped, if different (``uuid.uuid4`` is stopped at ``os.urandom``)."""
        self.call = call
        self.use = use
        self.reason = reason
        self.intercepted = intercepted
        detail = (f"{call}() is forbidden inside an agent handler: it {reason}, which the log "
                  f"does not record, so a replay would diverge. Use {use} instead.")
        if intercepted is not None and intercepted != call:
            detail += f" (intercepted at {'() / '.join(intercepted.split(' / '))}())"
        super().__init__(offset=offset, agent=agent, detail=detail)


# --- the deny-list ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forbidden:
    """One deny-list entry: ``call`` is the dotted path a handler would use."""

    call: str
    use: str
    reason: str
    optional: bool = False
    """The entry may not exist on this platform (its public callers are caught another way)."""
    when: Callable[[types.FrameType, object], bool] | None = field(default=None, compare=False)
    """For C methods: forbidden only if ``when(calling_frame, self)`` is true."""


_NOW = ("ctx.now()", "reads the clock")
_SLEEP = ("ctx.timer(...)", "waits on the wall clock")
_RANDOM = ("ctx.random()", "draws from the process-wide random generator")
_RESEED = ("ctx.random()", "changes the process-wide random generator")
_UNSEEDED = ("ctx.random() (random.Random(seed) with an explicit seed is fine)",
             "seeds the generator from OS entropy when given no seed")
_ENTROPY = ("ctx.random() (or ctx.effect(...) to record a real secret)", "reads OS entropy")
_UUID = ("ctx.uuid()", "derives from the clock, the host and OS entropy")
_NETWORK = ("ctx.http() (an httpx client for any SDK), ctx.llm(...) or ctx.effect(...)", "talks to the network")
_FILES = ("ctx.effect(...)", "touches the file system")
_PROCESS = ("ctx.effect(...)", "starts a process")


def _seeds_from_entropy(frame: types.FrameType, rng: object) -> bool:
    # _random.Random.seed(None) seeds from OS entropy, and seeding random's module-level
    # generator changes what every other user of `random` sees. Random.seed passes its
    # argument `a` through, so a seed is provably given only when called from there.
    if rng is random._inst:
        return True
    if frame.f_code is random.Random.seed.__code__:
        return frame.f_locals.get("a") is None
    return True


# One row per entry, deliberately not generated from lists of names: tests/test_guard.py
# checks each row resolves to a real callable and is caught, so a typo cannot hide a hole.
DENY_LIST: tuple[Forbidden, ...] = (
    # the clock
    Forbidden("time.time", *_NOW),
    Forbidden("time.time_ns", *_NOW),
    Forbidden("time.monotonic", *_NOW),
    Forbidden("time.monotonic_ns", *_NOW),
    Forbidden("time.perf_counter", *_NOW),
    Forbidden("time.perf_counter_ns", *_NOW),
    Forbidden("time.process_time", *_NOW),
    Forbidden("time.process_time_ns", *_NOW),
    Forbidden("time.thread_time", *_NOW),
    Forbidden("time.thread_time_ns", *_NOW),
    Forbidden("time.clock_gettime", *_NOW),
    Forbidden("time.clock_gettime_ns", *_NOW),
    Forbidden("datetime.datetime.now", *_NOW),
    Forbidden("datetime.datetime.utcnow", *_NOW),
    Forbidden("datetime.datetime.today", *_NOW),
    Forbidden("datetime.date.today", *_NOW),
    Forbidden("time.sleep", *_SLEEP),
    # module-level random (a seeded random.Random(seed) of the handler's own is fine)
    Forbidden("random.random", *_RANDOM),
    Forbidden("random.getrandbits", *_RANDOM),
    Forbidden("random.randbytes", *_RANDOM),
    Forbidden("random.randint", *_RANDOM),
    Forbidden("random.randrange", *_RANDOM),
    Forbidden("random.choice", *_RANDOM),
    Forbidden("random.choices", *_RANDOM),
    Forbidden("random.shuffle", *_RANDOM),
    Forbidden("random.sample", *_RANDOM),
    Forbidden("random.uniform", *_RANDOM),
    Forbidden("random.triangular", *_RANDOM),
    Forbidden("random.gauss", *_RANDOM),
    Forbidden("random.normalvariate", *_RANDOM),
    Forbidden("random.lognormvariate", *_RANDOM),
    Forbidden("random.expovariate", *_RANDOM),
    Forbidden("random.vonmisesvariate", *_RANDOM),
    Forbidden("random.gammavariate", *_RANDOM),
    Forbidden("random.betavariate", *_RANDOM),
    Forbidden("random.paretovariate", *_RANDOM),
    Forbidden("random.weibullvariate", *_RANDOM),
    Forbidden("random.seed", *_RESEED),
    Forbidden("random.Random", *_UNSEEDED),
    Forbidden("_random.Random.seed", *_UNSEEDED, when=_seeds_from_entropy),
    # OS entropy
    Forbidden("os.urandom", *_ENTROPY),
    Forbidden("os.getrandom", *_ENTROPY, optional=True),
    Forbidden("secrets.token_bytes", *_ENTROPY),
    Forbidden("secrets.token_hex", *_ENTROPY),
    Forbidden("secrets.token_urlsafe", *_ENTROPY),
    Forbidden("secrets.randbelow", *_ENTROPY),
    Forbidden("secrets.randbits", *_ENTROPY),
    Forbidden("secrets.choice", *_ENTROPY),
    Forbidden("uuid.uuid1", *_UUID),
    Forbidden("uuid.uuid4", *_UUID),
    Forbidden("uuid._generate_time_safe", *_UUID, optional=True),  # libuuid, behind uuid1
    # the network (httpx, urllib, requests all end in these)
    Forbidden("socket.socket.connect", *_NETWORK),
    Forbidden("socket.socket.connect_ex", *_NETWORK),
    Forbidden("socket.socket.sendto", *_NETWORK),
    Forbidden("socket.create_connection", *_NETWORK),
    Forbidden("socket.getaddrinfo", *_NETWORK),
    Forbidden("_socket.getaddrinfo", *_NETWORK),
    Forbidden("socket.gethostbyname", *_NETWORK),
    Forbidden("socket.gethostbyname_ex", *_NETWORK),
    Forbidden("socket.gethostbyaddr", *_NETWORK),
    # the file system
    Forbidden("open", *_FILES),
    Forbidden("io.open", *_FILES),
    Forbidden("os.open", *_FILES),
    Forbidden("pathlib.Path.open", *_FILES),
    Forbidden("pathlib.Path.read_text", *_FILES),
    Forbidden("pathlib.Path.write_text", *_FILES),
    Forbidden("pathlib.Path.read_bytes", *_FILES),
    Forbidden("pathlib.Path.write_bytes", *_FILES),
    # processes
    Forbidden("os.system", *_PROCESS),
    Forbidden("os.posix_spawn", *_PROCESS, optional=True),
    Forbidden("os.posix_spawnp", *_PROCESS, optional=True),
    Forbidden("subprocess.Popen", *_PROCESS),
    Forbidden("_posixsubprocess.fork_exec", *_PROCESS, optional=True),  # behind Popen on POSIX
)

# Code that may do a forbidden thing on a handler's behalf without making the handler
# nondeterministic: log records carry a timestamp, and tracebacks and warnings read source
# lines through linecache. A denied call with a frame of these modules on the stack passes.
_EXEMPT_MODULES = ("logging", "linecache")

# HTTP clients and the SDKs built on them read the clock and OS entropy for their own
# bookkeeping while a handler uses ctx.http(): timeouts and timings, retry jitter and backoff,
# idempotency keys and multipart boundaries, cookie expiry (http.cookiejar, under httpx's
# cookie jar); and the trace ids and span times of OpenTelemetry, which the SDKs put in request
# headers. None of it flows into what the handler gets back,
# which is the recorded response. So a call of these kinds whose *caller* (the frame that
# called the denied function, or the stdlib wrapper around it such as uuid.uuid4) is in one of
# these packages passes. The network, files and processes stay forbidden from them: an SDK
# client not built on ctx.http() still fails at its first connect.
# swarmlog's own tracing times a step's recorded calls from inside the handler (when each asks
# for its record and when it writes it); the times go only into spans, never into the step.
TRUSTED_LIBRARIES: set[str] = {"httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "opentelemetry",
                                "http.cookiejar", "swarmlog.observe.tracing"}
"""Packages (or exact modules) whose own clock and entropy reads pass inside handlers."""
_TRUSTED_REASONS = frozenset({_NOW[1], _SLEEP[1], _RANDOM[1], _UNSEEDED[1], _ENTROPY[1], _UUID[1]})


def trust_library(package: str) -> None:
    """Let ``package``'s own code read the clock and OS entropy inside handlers (never the
    network, files or processes): for an SDK other than openai/anthropic that you hand
    ``ctx.http()``, and that times or retries its requests itself."""
    TRUSTED_LIBRARIES.add(package)


def _trusted(frame: types.FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module in TRUSTED_LIBRARIES or module.partition(".")[0] in TRUSTED_LIBRARIES


DEBUGGER_MODULES = frozenset({"pdb", "bdb", "ipdb", "pudb", "debugpy", "pydevd", "_pydevd_bundle", "_pydev_bundle",
                              "_pydevd_frame_eval"})
"""Debuggers: what they do on their own account (``~/.pdbrc``, source files, their clocks) is not the
handler's. A debugger's prompt runs inside a trace function, where CPython calls no profile hook at
all; but one entered from inside a handler (``breakpoint()``, ``pdb.set_trace()``) sets itself up
first, in the handler's thread. A denied call passes when it is made by a debugger module's frame,
or by the standard library on a debugger's behalf — never when handler code sits between the call
and the debugger (a handler run *by* a debugger, ``pdb.runcall(handler)``, stays guarded)."""


def _for_debugger(frame: types.FrameType | None) -> bool:
    while frame is not None:
        top = frame.f_globals.get("__name__", "").partition(".")[0]
        if top in DEBUGGER_MODULES:
            return True
        if top not in sys.stdlib_module_names:
            return False
        frame = frame.f_back
    return False


def resolve(call: str) -> object:
    """The object a dotted path names (``"socket.socket.connect"``); raises LookupError."""
    parts = call.split(".")
    if len(parts) == 1:
        parts = ["builtins", *parts]
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                obj = getattr(obj, name)
        except AttributeError:
            break
        return obj
    raise LookupError(f"deny-list entry {call!r} does not resolve to anything")


@dataclass(frozen=True, slots=True)
class _MethodRule:
    """A C method forbidden on any instance (or, for a classmethod, any subclass) of ``owner``."""

    owner: type
    descriptor: object
    classmethod: bool
    entry: Forbidden

    def matches(self, fn: object, self_: object, frame: types.FrameType) -> bool:
        if self.classmethod:
            bound = self.descriptor.__get__(None, self_)  # type: ignore[attr-defined]
        else:
            bound = self.descriptor.__get__(self_)  # type: ignore[attr-defined]
        # Equal bound builtins share `self` and the C function, so an override does not match.
        if fn != bound:
            return False
        return self.entry.when is None or self.entry.when(frame, self_)


_exact: dict[object, tuple[Forbidden, ...]] = {}  # C function object -> entries naming it
_method_rules: list[_MethodRule] = []  # C methods forbidden on any instance / subclass
# id(code) -> (code, bound self or None, entry): Python entries, to name the call in errors
_named: dict[int, list[tuple[types.CodeType, object, Forbidden]]] = {}


def _find_descriptor(owner: type, name: str) -> object:
    for klass in owner.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    raise LookupError(f"{owner.__qualname__} has no attribute {name!r}")


def _register(entry: Forbidden) -> None:
    try:
        obj = resolve(entry.call)
    except LookupError:
        if entry.optional:
            return
        raise
    if obj is None and entry.optional:
        return
    if entry.when is not None and not isinstance(obj, types.MethodDescriptorType):
        raise TypeError(f"deny-list entry {entry.call!r}: `when` needs a C method")
    if isinstance(obj, types.BuiltinFunctionType):  # C function, or a C method bound to its self
        owner = obj.__self__
        if isinstance(owner, type):  # a classmethod: also forbid it on subclasses
            _method_rules.append(_MethodRule(owner, _find_descriptor(owner, obj.__name__),
                                             True, entry))
        _exact[obj] = (*_exact.get(obj, ()), entry)
        return
    if isinstance(obj, types.MethodDescriptorType):  # a C method of any instance
        _method_rules.append(_MethodRule(obj.__objclass__, obj, False, entry))
        return
    if isinstance(obj, types.MethodType):  # a Python method bound to one instance
        code, self_ = obj.__func__.__code__, obj.__self__
    elif isinstance(obj, types.FunctionType):
        code, self_ = obj.__code__, None
    elif isinstance(obj, type) and isinstance(vars(obj).get("__init__"), types.FunctionType):
        code, self_ = vars(obj)["__init__"].__code__, None
    else:
        raise TypeError(f"deny-list entry {entry.call!r} resolves to {obj!r}, which the guard "
                        f"cannot match")
    _named.setdefault(id(code), []).append((code, self_, entry))


for _entry in DENY_LIST:
    _register(_entry)

# What the hook learns about the `self` of C methods, so that it pays one dict lookup per C
# call on a type it has seen before: type of an instance -> {method name: rules}, and for
# classmethods (whose self is a class) class -> {method name: rules}. {} means "nothing here".
_rules_by_type: dict[type, dict[str, list[_MethodRule]]] = {}
_rules_by_class: dict[type, dict[str, list[_MethodRule]]] = {}
_BY_CLASS: dict[str, list[_MethodRule]] = {"": []}  # in _rules_by_type: look self up as a class
_CACHE_LIMIT = 4096  # classes created at run time (namedtuple, create_model) must not pile up


def _learn(cache: dict[type, dict[str, list[_MethodRule]]], klass: type,
           classmethods: bool) -> dict[str, list[_MethodRule]]:
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
    if not classmethods and issubclass(klass, type):
        cache[klass] = _BY_CLASS
        return _BY_CLASS
    found: dict[str, list[_MethodRule]] = {}
    for rule in _method_rules:
        if rule.classmethod == classmethods and issubclass(klass, rule.owner):
            found.setdefault(rule.descriptor.__name__, []).append(rule)  # type: ignore[attr-defined]
    for rules in found.values():  # the most derived owner names the call
        rules.sort(key=lambda r: klass.__mro__.index(r.owner))
    cache[klass] = found
    return found


# --- per-thread state -----------------------------------------------------------------------


class _ThreadState:
    __slots__ = ("stack", "hooked", "yielded", "rearm_frames", "rearm_trace")

    def __init__(self) -> None:
        self.stack: list[guarded | allowed] = []  # innermost scope last
        self.hooked = False  # whether _hook is (meant to be) this thread's profile function
        self.yielded = False  # another profiler was installed first: stay out of its way
        self.rearm_frames: list[types.FrameType] | None = None
        self.rearm_trace: object = None


_local = threading.local()
_getprofile = sys.getprofile
_setprofile = sys.setprofile
_warned_profiler = False


def _thread_state() -> _ThreadState:
    try:
        return _local.state
    except AttributeError:
        st = _local.state = _ThreadState()
        return st


def is_guarded() -> bool:
    """Whether the calling thread is inside a handler (and not inside :func:`allowed`)."""
    stack = _thread_state().stack
    return bool(stack) and stack[-1].__class__ is guarded


def _apply(st: _ThreadState) -> None:
    """Install the hook iff the innermost scope on this thread is a guard (slow path)."""
    if st.yielded:
        return
    want = bool(st.stack) and st.stack[-1].__class__ is guarded
    if want or st.hooked:
        _setprofile(_hook if want else None)
    st.hooked = want


# The enter/exit methods below run with the hook installed on one side or the other, and
# every call they make costs a hook event: they avoid calls (`del stack[-1]`, not .pop())
# and switch the hook off first and on last.


class guarded:
    """Forbid nondeterministic calls on this thread for the duration of a handler call.

    Re-entrant: nested guards stack, and the innermost names the agent and offset in errors.
    Other threads are never affected. If the handler swallows a :class:`ForbiddenCall`, the
    guard raises it again on a normal exit.
    """

    __slots__ = ("agent", "offset", "violation", "_st")

    def __init__(self, *, agent: str, offset: int) -> None:
        self.agent = agent
        self.offset = offset
        self.violation: ForbiddenCall | None = None

    def __enter__(self) -> guarded:
        try:
            st = _local.state
        except AttributeError:
            st = _thread_state()
        self._st = st
        st.stack.append(self)
        if not st.hooked and not st.yielded:
            profiler = _getprofile()
            if profiler is None:
                _setprofile(_hook)
                st.hooked = True
            else:
                st.yielded = True
                _warn_profiler(profiler)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        st = self._st
        stack = st.stack
        if stack[-1] is self:
            del stack[-1]
        else:
            stack.remove(self)
        if st.hooked and (not stack or stack[-1].__class__ is not guarded):
            _setprofile(None)
            st.hooked = False
        if not stack:
            st.yielded = False
        if st.rearm_frames is not None and not st.hooked:
            _disarm(st)
        if exc_type is None and self.violation is not None:
            # The handler swallowed a ForbiddenCall; it still must not count as a success.
            raise self.violation


class allowed:
    """Let swarmlog's own code do a forbidden thing inside a handler (``ctx.effect`` running the
    effect live, ``ctx.llm`` calling the model). Not for handlers: what runs in here is not
    replayed unless the caller records its result."""

    __slots__ = ("_st",)

    def __enter__(self) -> allowed:
        try:
            st = _local.state
        except AttributeError:
            st = _thread_state()
        self._st = st
        if st.hooked:
            _setprofile(None)
            st.hooked = False
        st.stack.append(self)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        st = self._st
        stack = st.stack
        if stack[-1] is self:
            del stack[-1]
        else:
            stack.remove(self)
        if stack and stack[-1].__class__ is guarded and not st.yielded:
            _setprofile(_hook)
            st.hooked = True


def _warn_profiler(profiler: object) -> None:
    global _warned_profiler
    if not _warned_profiler:
        _warned_profiler = True
        warnings.warn(f"swarmlog's determinism guard is off while another profiler ({profiler!r}) "
                      f"is installed: both use sys.setprofile", RuntimeWarning, stacklevel=3)


# --- the hook -------------------------------------------------------------------------------


def _hook(frame: types.FrameType, event: str, fn: object) -> None:
    # Runs for every call and return inside a handler: keep the common path to a compare
    # and, for C calls, two dict lookups.
    if event != "c_call":
        return
    entries = _exact.get(fn)
    if entries is not None:
        _violation(frame, entries[0], " / ".join(e.call for e in entries))
        return
    self_ = fn.__self__  # type: ignore[attr-defined]
    by_name = _rules_by_type.get(type(self_))
    if by_name is None:
        by_name = _learn(_rules_by_type, type(self_), False)
    if by_name is _BY_CLASS:
        by_name = _rules_by_class.get(self_)
        if by_name is None:
            by_name = _learn(_rules_by_class, self_, True)
    if by_name:
        rules = by_name.get(fn.__name__)  # type: ignore[attr-defined]
        if rules:
            for rule in rules:
                if rule.matches(fn, self_, frame):
                    _violation(frame, rule.entry, rule.entry.call)
                    return


def _violation(frame: types.FrameType, entry: Forbidden, intercepted: str) -> None:
    """Raise ForbiddenCall for a denied C call, unless exempt; name what the handler called."""
    call = entry.call
    # A gc callback runs wherever a collection happens to start, in whatever thread allocated;
    # it is not the handler's logic and nothing it does flows into the handler's state
    # (hypothesis, for one, times collections with perf_counter from such a callback).
    gc_codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    if _for_debugger(frame):
        return
    f: types.FrameType | None = frame
    caller: types.FrameType | None = frame  # the frame that called what the handler is charged with
    while f is not None:  # rare path: cost does not matter here
        module = f.f_globals.get("__name__", "")
        if module.partition(".")[0] in _EXEMPT_MODULES or f.f_code in gc_codes:
            return
        for code, self_, named in _named.get(id(f.f_code), ()):
            if code is f.f_code and (self_ is None or _first_arg(f) is self_):
                entry, call = named, named.call  # keep going: the outermost names the call
                caller = f.f_back
        f = f.f_back
    if caller is not None and entry.reason in _TRUSTED_REASONS and _trusted(caller):
        return
    st = _thread_state()
    guard = next((s for s in reversed(st.stack) if isinstance(s, guarded)), None)
    exc = ForbiddenCall(offset=guard.offset if guard else None,
                        agent=guard.agent if guard else None,
                        call=call, use=entry.use, reason=entry.reason, intercepted=intercepted)
    for scope in st.stack:
        if isinstance(scope, guarded) and scope.violation is None:
            scope.violation = exc
    _arm_rearm(st, frame)
    raise exc


def _first_arg(frame: types.FrameType) -> object:
    code = frame.f_code
    if not code.co_argcount:
        return None
    return frame.f_locals.get(code.co_varnames[0])


# CPython uninstalls a profile function that raises. Until the next line, exception or call
# reinstalls it, a one-shot trace function stands in (see the module docstring). A frame's own
# trace function (a debugger's, coverage's) is wrapped, not replaced, and gets its event.


class _RearmThen:
    """A frame's trace function for one event: re-arm the guard, then hand over to ``local``."""

    __slots__ = ("local",)

    def __init__(self, local: object) -> None:
        self.local = local

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> object:
        _rearm()  # puts `local` back as the frame's trace function
        if self.local is None:
            return None
        return self.local(frame, event, arg)  # type: ignore[operator]


def _arm_rearm(st: _ThreadState, frame: types.FrameType) -> None:
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


def _disarm(st: _ThreadState) -> object:
    previous, frames = st.rearm_trace, st.rearm_frames or []
    st.rearm_trace = st.rearm_frames = None
    for f in frames:
        if isinstance(f.f_trace, _RearmThen):
            f.f_trace = f.f_trace.local  # type: ignore[assignment]
    sys.settrace(previous)  # type: ignore[arg-type]
    return previous


def _rearm() -> object:
    st = _thread_state()
    if st.rearm_frames is None:
        return st.rearm_trace
    previous = _disarm(st)
    _apply(st)
    return previous


def _rearm_global(frame: types.FrameType, event: str, arg: object) -> object:
    previous = _rearm()
    if previous is not None:
        return previous(frame, event, arg)  # type: ignore[operator]
    return None
