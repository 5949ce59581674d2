"""The guard's C hook (swarmlog.guard._native): built where it can be, installed when built, the Python
hook to everything that looks at the thread's hook, raising as the Python hook does (re-armed after a
raise where it is a profile function, left in place under sys.monitoring), per thread, sharing the Python
hook's tables, and leaking nothing. The API per version: a profile function on CPython 3.11,
sys.monitoring from 3.12 (and what sys.monitoring adds: a tool id of its own, starts disabled only where
no row needs them, a fallback to a profile function when no tool id is free).

Everything else the guard guarantees runs under every hook: tests/unit/test_guard.py and
test_guard_table.py take the ``guard_hook`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator

import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.errors import InvalidSetting
from swarmlog.guard import ForbiddenCall, GuardHook, _hook, _monitoring, _rules, allowed, guarded, hook_in_use
from swarmlog.runtime import run_agents, start_run

from ..conftest import REPO, cannot_run_here

_native = _hook._native
needs_native = pytest.mark.usefixtures("_native_built")
MONITORING = sys.version_info >= (3, 12)
API = "monitoring" if MONITORING else "profile"
needs_monitoring = pytest.mark.skipif(not MONITORING, reason="sys.monitoring is CPython 3.12+")


@pytest.fixture
def _native_built() -> None:
    if _native is None:
        cannot_run_here("swarmlog.guard._native is not built here")


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "").split()
    return shutil.which(cc[0]) if cc else None


def test_the_native_hook_is_built_wherever_a_compiler_was_there_to_build_it() -> None:
    # The extension is optional (a machine without a compiler installs the Python hook), so
    # nothing else would notice an editable install or a wheel that silently left it out.
    if _compiler() is None:
        cannot_run_here("no C compiler: the Python hook is the one")
    assert _native is not None, _hook._NOT_BUILT


def test_the_api_is_a_profile_function_on_3_11_and_sys_monitoring_from_3_12() -> None:
    assert hook_in_use().api == API
    assert _hook._TOOL is None if not MONITORING else sys.monitoring.get_tool(_hook._TOOL) == _monitoring.TOOL_NAME
    if MONITORING:  # 3 is the id Hypothesis's explain phase traces with (the simulate fixture runs Hypothesis)
        assert sys.monitoring.get_tool(3) != _monitoring.TOOL_NAME
    if _native is not None:
        assert _native.API == API


@needs_native
def test_the_native_hook_is_the_one_a_guard_installs_when_built() -> None:
    chosen = _hook._choose({})  # no SWARMLOG_GUARD_HOOK
    api = f"; sys.monitoring tool {_hook._TOOL}" if MONITORING else ""
    assert chosen == GuardHook(native=True, why=f"C, swarmlog.guard._native{api}", api=API)
    before = hook_in_use()
    _hook._select(chosen)
    try:
        assert hook_in_use().native and _hook.install is _native.install
        assert str(hook_in_use()) == f"native {API} hook (C, swarmlog.guard._native{api})"
    finally:
        _hook._select(before)


def test_the_environment_chooses_the_python_hook_or_insists_on_the_native_one() -> None:
    python = _hook._choose({"SWARMLOG_GUARD_HOOK": "python"})
    assert (python.native, python.api) == (False, API) and python.why.startswith("SWARMLOG_GUARD_HOOK=python")
    assert _hook._choose({"SWARMLOG_GUARD_HOOK": " Native "}).native
    assert _hook._choose({}).native is (_native is not None)
    with pytest.raises(InvalidSetting) as caught:
        _hook._choose({"SWARMLOG_GUARD_HOOK": "c"})
    assert caught.value.variable == "SWARMLOG_GUARD_HOOK" and "python" in str(caught.value)


def test_insisting_on_the_native_hook_where_it_is_not_built_is_an_invalid_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_hook, "_native", None)
    monkeypatch.setattr(_hook, "_NOT_BUILT", "swarmlog.guard._native is not built: (test)")
    with pytest.raises(InvalidSetting, match="SWARMLOG_GUARD_HOOK='native': swarmlog.guard._native is not built"):
        _hook._select(_hook._choose({"SWARMLOG_GUARD_HOOK": "native"}))
    assert not _hook._choose({}).native
    assert _hook._choose({}).why.startswith("swarmlog.guard._native is not built: (test)")


def test_the_threads_hook_is_the_python_hook_under_either_hook(guard_hook: str) -> None:
    with guarded(agent="a", offset=1):
        inside = _hook.getprofile()
        profile_inside = sys.getprofile()
        with allowed():
            in_effect = _hook.getprofile()
        after_effect = _hook.getprofile()
    assert inside is _hook.hook and in_effect is None and after_effect is _hook.hook
    assert _hook.getprofile() is None
    # A profile function is what sys.getprofile() returns; sys.monitoring leaves sys.setprofile to profilers.
    assert profile_inside is (_hook.hook if hook_in_use().api == "profile" else None)


# --- the C hook, watched: a hook of the test's own bound in place of the Python hook -----------------


@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, object]]]:
    """The events the C hook hands to the Python hook, recorded on their way to it."""
    assert _native is not None
    seen: list[tuple[str, object]] = []
    real = _hook.hook

    def recording(frame: object, event: str, arg: object) -> None:
        seen.append((event, arg if event == "c_call" else frame.f_code.co_qualname))  # type: ignore[attr-defined]
        real(frame, event, arg)  # type: ignore[arg-type]

    before = _hook.hook_in_use()
    monkeypatch.setattr(_hook, "hook", recording)  # what _select binds the C hook to
    _hook._select(GuardHook(native=True, why="tests"))
    try:
        yield seen
    finally:
        monkeypatch.undo()
        _hook._select(before)


def _plain(x: int) -> int:
    return x + 1


@needs_native
def test_the_common_calls_never_reach_the_python_hook(handed_over: list[tuple[str, object]]) -> None:
    table, parts = {"a": 1}, ["x", "y"]
    with guarded(agent="a", offset=1):
        for i in range(3):  # seen once, then known: a module's function, a method of a type seen before
            _plain(i) + len(parts) + table.get("a", 0) + len("".join(parts)) + abs(-i)
        handed_over.clear()
        for i in range(1000):
            _plain(i) + len(parts) + table.get("a", 0) + len("".join(parts)) + abs(-i)
    assert handed_over == []  # the guard's own exit included: it switches the hook off unseen


@needs_native
def test_a_refused_call_reaches_the_python_hook_and_is_refused(handed_over: list[tuple[str, object]]) -> None:
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            time.time()
    assert ("c_call", time.time) in handed_over
    with pytest.raises(ForbiddenCall, match=r"uuid\.uuid4\(\)"):
        with guarded(agent="a", offset=1):
            uuid.uuid4()
    assert ("call", "uuid4") in handed_over


@needs_native
def test_the_tables_are_the_python_hooks_own_dicts_even_past_the_harmless_cache_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _native is not None
    bound = _native.bound()
    assert bound is not None
    assert bound[0] is _hook.hook and bound[1] is _hook._functions
    assert bound[2] is _rules.BY_TYPE and bound[3] is _rules.CODES
    learned = (abs, len, hash, repr, ord, chr)
    for fn in learned:  # not known yet: each is learned by the Python hook, which clears the cache first
        _hook._functions.pop(fn, None)
    monkeypatch.setattr(_hook, "_FUNCTIONS_LIMIT", 0)
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            abs(1), len(""), hash(1), repr(1), ord("a"), chr(97)
            time.time()  # refused after the cache was cleared and refilled with EXACT
    after = _native.bound()
    assert after is not None and all(a is b for a, b in zip(after, bound, strict=True))
    assert len(_hook._functions) == len(_rules.EXACT) + 1  # cleared in place, the last one learned


def _bind_arguments(hook: object, codes: object) -> tuple[object, ...]:
    tables = (hook, _hook._functions, _rules.BY_TYPE, codes)
    if not MONITORING:
        return tables
    return (*tables, sys.monitoring.MISSING, sys.monitoring.DISABLE, _hook._WATCHED_STARTS, _hook._bound_selves(),
            lambda: None)


@needs_native
def test_bind_takes_a_callable_and_exact_dicts_only() -> None:
    # A dict subclass could run Python code inside the C hook's lookups.
    assert _native is not None
    with pytest.raises(TypeError, match="dicts"):
        _native.bind(*_bind_arguments(_hook.hook, type("Codes", (dict,), {})()))
    with pytest.raises(TypeError, match="callable"):
        _native.bind(*_bind_arguments(42, _rules.CODES))
    with pytest.raises(TypeError, match="arguments"):
        _native.bind(_hook.hook)
    bound = _native.bound()
    assert bound is not None and bound[0] is _hook.hook and bound[3] is _rules.CODES  # unchanged


# --- raising, re-arming, threads --------------------------------------------------------------------


def test_a_raise_uninstalls_a_profile_hook_until_the_next_event_rearms_it_and_leaves_a_monitoring_one(
        guard_hook: str, monkeypatch: pytest.MonkeyPatch) -> None:
    at_rearm: list[object] = []
    rearm = _hook.rearm

    def watched_rearm() -> object:
        at_rearm.append(_hook.getprofile())
        return rearm()

    monkeypatch.setattr(_hook, "rearm", watched_rearm)
    seen: list[object] = []

    def handler() -> None:
        try:
            time.time()
        except ForbiddenCall:
            seen.append(_hook.getprofile())
            seen.append(sys.gettrace())
        try:
            time.monotonic()  # the same frame: refused again
        except ForbiddenCall as exc:
            seen.append(exc.call)

    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            handler()
    if hook_in_use().api == "profile":
        # CPython took the hook away when it raised, as it does a Python profile function that raises;
        # the one-shot trace function put it back at the next event.
        assert at_rearm and all(profile is None for profile in at_rearm)
        assert seen[0] is _hook.hook and seen[2] == "time.monotonic"
    else:
        # A sys.monitoring callback that raises stays: nothing to re-arm, no trace function armed.
        assert at_rearm == [] and seen == [_hook.hook, None, "time.monotonic"]
    assert _hook.getprofile() is None and sys.gettrace() is None


@needs_native
def test_after_a_raise_the_native_hook_is_the_one_in_place(handed_over: list[tuple[str, object]]) -> None:
    def handler() -> None:
        try:
            time.time()
        except ForbiddenCall:
            pass
        _plain(0) + len("x")  # seen once (a module's function is learned by the Python hook), then known
        handed_over.clear()
        for i in range(100):
            _plain(i) + len("x")

    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            handler()
    assert handed_over == []  # re-armed natively (or never taken away): the plain calls stayed in C


def test_a_handler_sees_its_frames_locals_as_it_does_unguarded(guard_hook: str) -> None:
    # Up to 3.12 a frame's f_locals is a snapshot dict: CPython's trampoline refreshes it before calling a
    # Python profile function and writes it back after, so a change made to it in between is dropped, and
    # the C profile hook does the same whenever it hands an event over. From 3.13 f_locals writes through
    # (PEP 667). Either way the guard, handing events over or not, changes nothing the handler sees.
    def handler() -> tuple[int, int]:
        x = 1
        sys._getframe().f_locals["x"] = 2
        time.gmtime(0)  # a row with a condition on its argument: handed to the Python hook, allowed
        before = x
        sys._getframe().f_locals["x"] = 3
        len("not handed over")
        return before, x

    unguarded = handler()
    with guarded(agent="a", offset=1):
        assert handler() == unguarded
    assert unguarded == ((2, 3) if sys.version_info >= (3, 13) else (1, 1))


def test_each_thread_has_its_own_hook(guard_hook: str) -> None:
    inside = threading.Barrier(4, timeout=10)  # three threads and this one, two of them guarded
    outcome: dict[str, object] = {}

    def guarded_thread(agent: str) -> None:
        with pytest.raises(ForbiddenCall):  # the swallowed one, raised again as the guard exits
            with guarded(agent=agent, offset=2):
                with allowed():  # waiting reads the clock
                    inside.wait()
                outcome[f"{agent} profile"] = _hook.getprofile()
                try:
                    time.time()
                except ForbiddenCall as exc:
                    outcome[agent] = exc.agent
                with allowed():
                    inside.wait()

    def free_thread() -> None:
        inside.wait()
        outcome["free profile"] = _hook.getprofile()
        outcome["free"] = time.time() > 0
        inside.wait()

    threads = [threading.Thread(target=guarded_thread, args=(agent,)) for agent in ("a", "b")]
    threads.append(threading.Thread(target=free_thread))
    for t in threads:
        t.start()
    inside.wait()
    outcome["main profile"] = _hook.getprofile()  # this thread runs no handler meanwhile
    inside.wait()
    for t in threads:
        t.join(10)
    assert outcome == {"a profile": _hook.hook, "a": "a", "b profile": _hook.hook, "b": "b",
                       "free profile": None, "free": True, "main profile": None}


# --- sys.monitoring (CPython 3.12+): what it adds ----------------------------------------------------------


@needs_monitoring
def test_a_rows_function_first_started_outside_handlers_is_still_refused_inside_one(guard_hook: str) -> None:
    # The start of a function no row names is disabled for good, whichever thread saw it; a row's
    # function, or one a Logger call's hook watches, is never disabled, whoever called it first.
    def elsewhere() -> None:
        for _ in range(3):
            uuid.uuid4(), _plain(1), logging.makeLogRecord({"msg": "%s", "args": ("x",)}).getMessage()

    with guarded(agent="warm", offset=0):  # the events are on
        pass
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    with pytest.raises(ForbiddenCall, match=r"uuid\.uuid4\(\)"):
        with guarded(agent="a", offset=1):
            _plain(2)
            uuid.uuid4()


class _ClockInStr:
    def __str__(self) -> str:
        return f"{time.time()}"


@needs_monitoring
def test_the_guard_runs_beside_cprofile_a_profile_function_and_a_trace_function() -> None:
    import cProfile

    profiler = cProfile.Profile()  # from 3.12 itself a sys.monitoring tool (its own id)
    profiled: list[str] = []
    traced: list[str] = []

    def profile_function(frame: object, event: str, arg: object) -> None:
        profiled.append(event)

    def trace_function(frame: object, event: str, arg: object) -> object:
        traced.append(event)
        return trace_function

    previous = sys.gettrace()
    profiler.enable()
    sys.setprofile(profile_function)
    sys.settrace(trace_function)
    try:
        with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
            with guarded(agent="a", offset=1):
                str(_ClockInStr())
    finally:
        sys.settrace(previous)
        sys.setprofile(None)
        profiler.disable()
    assert "call" in profiled and "call" in traced
    assert any(getattr(entry.code, "co_name", None) == "__str__" for entry in profiler.getstats())


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO / "platform")})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@needs_monitoring
def test_the_events_are_off_until_a_guard_is_first_entered_then_on_for_good() -> None:
    # A process that imports swarmlog but runs no handler (the sink, most commands) pays nothing.
    out = _python("import sys, swarmlog, swarmlog.runtime\n"
                  "from swarmlog.guard import _hook, guarded\n"
                  "tool = _hook._TOOL\n"
                  "print(sys.monitoring.get_events(tool))\n"
                  "with guarded(agent='a', offset=0):\n"
                  "    pass\n"
                  "print(sys.monitoring.get_events(tool) != 0)")
    assert out.splitlines() == ["0", "True"]


@needs_monitoring
def test_with_no_sys_monitoring_tool_id_free_the_guard_is_a_profile_function() -> None:
    out = _python("import sys, time\n"
                  "sys.monitoring.use_tool_id(3, 'another tool')\n"
                  "sys.monitoring.use_tool_id(4, 'yet another')\n"
                  "from swarmlog.guard import ForbiddenCall, guarded, hook_in_use\n"
                  "print(hook_in_use())\n"
                  "try:\n"
                  "    with guarded(agent='a', offset=0):\n"
                  "        time.time()\n"
                  "except ForbiddenCall as exc:\n"
                  "    print(exc.call)")
    hook, refused = out.splitlines()
    assert hook.startswith("Python profile hook") and "no sys.monitoring tool id free" in hook
    assert refused == "time.time"


# --- reference counts: nothing kept, nothing lost ------------------------------------------------------


def _answered_in_c(n: int) -> None:
    for i in range(n):
        len("ab") + _plain(i)


def _gmtime_with_seconds(n: int) -> None:
    secs = 86400
    for _ in range(n):
        time.gmtime(secs)  # a refused row with a condition on its argument: the Python hook lets it pass


_SOCKET = socket.socket()


def _socket_method(n: int) -> None:
    for _ in range(n):
        _SOCKET.fileno()  # a C method of a type with rules (connect...): handed over, as a method bound per call


def _collect_and_freeze() -> None:
    """A full collection, then what is alive frozen: the collection after the test's calls walks only
    what they made, not the heap the session grew before (the counts compared are exact either way)."""
    gc.collect()
    gc.freeze()


def _restart_events() -> None:
    """Let sys.monitoring report every start again (a test changed which names rows have)."""
    if hook_in_use().api == "monitoring":
        sys.monitoring.restart_events()


@needs_native
@pytest.mark.parametrize(("run", "collide"), [
    (_answered_in_c, False),
    (_gmtime_with_seconds, False),  # a C call handed to the Python hook
    (_socket_method, False),  # a C method handed to the Python hook
    (_answered_in_c, True),  # a Python call handed to the Python hook: _plain's name is a row's, its code is not
], ids=["answered-in-c", "c-call-handed-over", "c-method-handed-over", "python-call-handed-over"])
def test_a_hundred_thousand_hooked_calls_leave_every_reference_count_and_the_heap_as_they_were(
        run: Callable[[int], None], collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    qualname = _plain.__code__.co_qualname
    if collide:
        monkeypatch.setitem(_rules.CODES, qualname, ((_plain.__code__.replace(co_name="other"), ()),))
        _restart_events()  # _plain's start was disabled, its name being no row's until now
    watched = (_hook.hook, _hook._functions, _rules.BY_TYPE, _rules.CODES, time.gmtime, len, _plain,
               _plain.__code__, qualname, _SOCKET, socket.socket.fileno)
    with guarded(agent="a", offset=1):
        run(1000)  # the caches warm: the harmless functions and types learned
    _collect_and_freeze()
    counts = [sys.getrefcount(o) for o in watched]
    nones = sys.getrefcount(None)  # what the Python hook returns: not exact (anything may hold None), but a
    tracemalloc.start()            # reference kept per call would be 100,000
    try:
        before = tracemalloc.get_traced_memory()[0]
        with guarded(agent="a", offset=1):
            run(100_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(o) for o in watched] == counts
    assert abs(sys.getrefcount(None) - nones) < 1000
    assert grown < 64 * 1024, f"{grown} bytes kept after 100,000 hooked calls"


def test_a_thousand_raises_and_rearms_leave_every_reference_count_as_it_was(guard_hook: str) -> None:
    def handler() -> None:
        for _ in range(1000):
            try:
                time.time()
            except ForbiddenCall:
                pass

    def once() -> None:
        with pytest.raises(ForbiddenCall):
            with guarded(agent="a", offset=1):
                handler()

    once()
    _collect_and_freeze()
    watched = (_hook.hook, time.time, handler.__code__)
    counts = [sys.getrefcount(o) for o in watched]
    once()
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == counts


# --- an agent says which hook it runs with ---------------------------------------------------------------


class _Idle(Agent):
    @on("run.started")
    def start(self, ctx, event):
        pass


def test_an_agent_process_logs_which_hook_its_guard_installs(backend, run_settings, registry,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    swarm = Swarm(name="hooks", agents=lambda: [_Idle("idle")], code_version="1")
    start_run(settings=run_settings, swarm=swarm, run_id="hooks", seed=1, backend=backend, registry=registry)
    with caplog.at_level(logging.INFO, logger="swarmlog.runtime"):
        run_agents(settings=run_settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.2)
    lines = [r.getMessage() for r in caplog.records if "determinism guard" in r.getMessage()]
    assert lines == [f"determinism guard: {hook_in_use()}"]
