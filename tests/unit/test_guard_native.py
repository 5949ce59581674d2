"""The guard's C profile hook (swarmlog.guard._native): built where it can be, installed when built,
the Python hook to everything that looks at the profile function, raising and re-arming as the
Python hook does, per thread, sharing the Python hook's tables, and leaking nothing.

Everything else the guard guarantees runs under both hooks: tests/unit/test_guard.py and
test_guard_table.py take the ``guard_hook`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import gc
import logging
import shutil
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
from swarmlog.guard import ForbiddenCall, GuardHook, _hook, _rules, allowed, guarded, hook_in_use
from swarmlog.runtime import run_agents, start_run

from ..conftest import cannot_run_here

_native = _hook._native
needs_native = pytest.mark.usefixtures("_native_built")


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


@needs_native
def test_the_native_hook_is_the_one_a_guard_installs_when_built() -> None:
    chosen = _hook._choose({})  # no SWARMLOG_GUARD_HOOK
    assert chosen == GuardHook(native=True, why="C, swarmlog.guard._native")
    before = hook_in_use()
    _hook._select(chosen)
    try:
        assert hook_in_use().native and _hook.install is _native.install
        assert str(hook_in_use()) == "native profile hook (C, swarmlog.guard._native)"
    finally:
        _hook._select(before)


def test_the_environment_chooses_the_python_hook_or_insists_on_the_native_one() -> None:
    assert _hook._choose({"SWARMLOG_GUARD_HOOK": "python"}) == GuardHook(native=False,
                                                                          why="SWARMLOG_GUARD_HOOK=python")
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
    assert _hook._choose({}) == GuardHook(native=False, why="swarmlog.guard._native is not built: (test)")


def test_sys_getprofile_is_the_python_hook_under_either_hook(guard_hook: str) -> None:
    with guarded(agent="a", offset=1):
        inside = sys.getprofile()
        with allowed():
            in_effect = sys.getprofile()
        after_effect = sys.getprofile()
    assert inside is _hook.hook and in_effect is None and after_effect is _hook.hook
    assert sys.getprofile() is None


# --- the C hook, watched: a hook of the test's own bound in place of the Python hook -----------------


@pytest.fixture
def handed_over() -> Iterator[list[tuple[str, object]]]:
    """The events the C profile function hands to the Python hook, recorded on their way to it."""
    assert _native is not None
    seen: list[tuple[str, object]] = []

    def recording(frame: object, event: str, arg: object) -> None:
        seen.append((event, arg if event == "c_call" else frame.f_code.co_qualname))  # type: ignore[attr-defined]
        _hook.hook(frame, event, arg)  # type: ignore[arg-type]

    before = _hook.hook_in_use()
    _hook._select(GuardHook(native=True, why="tests"))
    _native.bind(recording, _hook._functions, _rules.BY_TYPE, _rules.CODES)
    try:
        yield seen
    finally:
        _native.bind(_hook.hook, _hook._functions, _rules.BY_TYPE, _rules.CODES)
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


@needs_native
def test_bind_takes_a_callable_and_exact_dicts_only() -> None:
    # A dict subclass could run Python code inside the C hook's lookups.
    assert _native is not None
    with pytest.raises(TypeError, match="dicts"):
        _native.bind(_hook.hook, _hook._functions, _rules.BY_TYPE, type("Codes", (dict,), {})())
    with pytest.raises(TypeError, match="callable"):
        _native.bind(42, _hook._functions, _rules.BY_TYPE, _rules.CODES)  # type: ignore[arg-type]
    bound = _native.bound()
    assert bound is not None and bound[0] is _hook.hook and bound[3] is _rules.CODES  # unchanged


# --- raising, re-arming, threads --------------------------------------------------------------------


def test_a_raise_uninstalls_the_hook_and_the_next_event_rearms_it(guard_hook: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    at_rearm: list[object] = []
    rearm = _hook.rearm

    def watched_rearm() -> object:
        at_rearm.append(sys.getprofile())
        return rearm()

    monkeypatch.setattr(_hook, "rearm", watched_rearm)
    seen: list[object] = []

    def handler() -> None:
        try:
            time.time()
        except ForbiddenCall:
            seen.append(sys.getprofile())
        try:
            time.monotonic()  # the same frame: refused again
        except ForbiddenCall as exc:
            seen.append(exc.call)

    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            handler()
    # CPython took the hook away when it raised, as it does a Python profile function that raises;
    # the one-shot trace function put it back at the next event.
    assert at_rearm and all(profile is None for profile in at_rearm)
    assert seen == [_hook.hook, "time.monotonic"]
    assert sys.getprofile() is None and sys.gettrace() is None


@needs_native
def test_after_a_raise_the_native_hook_is_the_one_rearmed(handed_over: list[tuple[str, object]]) -> None:
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
    assert handed_over == []  # re-armed natively: the plain calls stayed in C


def test_a_frames_changed_locals_dict_is_discarded_as_a_python_profile_function_does(guard_hook: str) -> None:
    # CPython's trampoline refreshes a frame's materialised locals dict before calling a Python
    # profile function and writes it back after: a change made to the dict in between is dropped.
    # The C hook does the same whenever it hands an event over, and nothing otherwise.
    def handler() -> tuple[int, int]:
        x = 1
        sys._getframe().f_locals["x"] = 2
        time.gmtime(0)  # a row with a condition on its argument: handed to the Python hook, allowed
        before = x
        sys._getframe().f_locals["x"] = 3
        len("not handed over")
        return before, x

    with guarded(agent="a", offset=1):
        assert handler() == (1, 1)
    assert handler() == (1, 1)  # and unguarded, the dict is never written back either


def test_each_thread_has_its_own_hook(guard_hook: str) -> None:
    inside = threading.Barrier(4, timeout=10)  # three threads and this one, two of them guarded
    outcome: dict[str, object] = {}

    def guarded_thread(agent: str) -> None:
        with pytest.raises(ForbiddenCall):  # the swallowed one, raised again as the guard exits
            with guarded(agent=agent, offset=2):
                with allowed():  # waiting reads the clock
                    inside.wait()
                outcome[f"{agent} profile"] = sys.getprofile()
                try:
                    time.time()
                except ForbiddenCall as exc:
                    outcome[agent] = exc.agent
                with allowed():
                    inside.wait()

    def free_thread() -> None:
        inside.wait()
        outcome["free profile"] = sys.getprofile()
        outcome["free"] = time.time() > 0
        inside.wait()

    threads = [threading.Thread(target=guarded_thread, args=(agent,)) for agent in ("a", "b")]
    threads.append(threading.Thread(target=free_thread))
    for t in threads:
        t.start()
    inside.wait()
    outcome["main profile"] = sys.getprofile()  # this thread runs no handler meanwhile
    inside.wait()
    for t in threads:
        t.join(10)
    assert outcome == {"a profile": _hook.hook, "a": "a", "b profile": _hook.hook, "b": "b",
                       "free profile": None, "free": True, "main profile": None}


# --- reference counts: nothing kept, nothing lost ------------------------------------------------------


def _answered_in_c(n: int) -> None:
    for i in range(n):
        len("ab") + _plain(i)


def _gmtime_with_seconds(n: int) -> None:
    secs = 86400
    for _ in range(n):
        time.gmtime(secs)  # a refused row with a condition on its argument: the Python hook lets it pass


@needs_native
@pytest.mark.parametrize(("run", "collide"), [
    (_answered_in_c, False),
    (_gmtime_with_seconds, False),  # a C call handed to the Python hook
    (_answered_in_c, True),  # a Python call handed to the Python hook: _plain's name is a row's, its code is not
], ids=["answered-in-c", "c-call-handed-over", "python-call-handed-over"])
def test_a_hundred_thousand_hooked_calls_leave_every_reference_count_and_the_heap_as_they_were(
        run: Callable[[int], None], collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    qualname = _plain.__code__.co_qualname
    if collide:
        monkeypatch.setitem(_rules.CODES, qualname, ((_plain.__code__.replace(co_name="other"), ()),))
    watched = (_hook.hook, _hook._functions, _rules.BY_TYPE, _rules.CODES, time.gmtime, len, _plain,
               _plain.__code__, qualname)
    with guarded(agent="a", offset=1):
        run(1000)  # the caches warm: the harmless functions and types learned
    gc.collect()
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
    gc.collect()
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
