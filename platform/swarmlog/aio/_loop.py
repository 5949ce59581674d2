"""The event loop an async step runs on: one per agent, owned by the runtime, deterministic.

A handler's coroutine (an ``async def`` handler, or ``ctx.run(coro)`` from a sync one) runs on a
:class:`StepLoop`: a real :class:`asyncio.BaseEventLoop` — so asyncio-based libraries (sniffio,
anyio, httpx's and the SDKs' async clients) see a normal running asyncio loop, with tasks,
futures, ``call_soon``/``call_later``, ``asyncio.timeout`` and ``wait_for`` as they know them —
with three parts replaced, which is what makes it deterministic:

* **No selector.** Nothing in the loop waits on the OS's readiness events: there are no sockets,
  pipes or signals in a step (``add_reader``, ``sock_*``, transports, subprocesses and signal
  handlers are refused with :class:`~swarmlog.guard.ForbiddenCall`). Ready callbacks run in FIFO
  order, one batch per turn, exactly as asyncio runs them.
* **A virtual clock.** ``loop.time()`` is the step's virtual time: 0.0 when the step begins, moved
  only by the loop itself. With nothing in flight, the loop jumps straight to the next timer:
  ``asyncio.sleep(30)`` costs no wall time. Nothing here reads the machine's clock on the
  handler's behalf.
* **Recorded calls are the only input.** When no callback is ready, the only things that can
  happen next are a recorded call's result being *delivered* (:mod:`._calls`) or a timer firing.
  Which one, and at what virtual time, is decided by the world live (the first call to complete,
  waited for really, or the timer if it is due first, mapped to the real time that passed) and
  recorded; on replay by the record; in the simulator by the schedule. Given that sequence, the
  loop is a function of the code: the same live, on replay, in every process.

A step ends when its coroutine ends. Work it leaves scheduled — a task still pending, a timer, a
call in flight — is a :class:`~swarmlog.aio.errors.StepLeftWork` naming it (a step is one
transaction: nothing may run on outside it); a coroutine that waits with nothing in flight and no
timer is a :class:`~swarmlog.aio.errors.StepStalled`. ``run_in_executor(None, ...)`` and
``asyncio.to_thread`` run their function inline, on the handler's thread under the guard (the
default executor is the step itself); any other executor is refused.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import sys
import threading
from asyncio import base_events, events, tasks
from collections.abc import Awaitable, Callable
from typing import Any

from ..guard import ForbiddenCall, allowed
from ..guard._exemptions import calling_library
from ..guard._state import innermost_guard, thread_state
from ._calls import Calls, StepContext
from .errors import NestedRun, StepCancelled, StepLeftWork, StepStalled

__all__ = ["StepLoop"]

logger = logging.getLogger(__name__)

_RESOLUTION = 1e-9
"""The loop's clock resolution, a constant (asyncio reads the OS's): a timer due within it of now
fires now. Above zero, or a timer due exactly now would be polled for forever by ``_run_once``."""

_MAX_WAIT: float = base_events.MAXIMUM_SELECT_TIMEOUT  # type: ignore[attr-defined]
"""How far ahead asyncio's ``_run_once`` asks its selector to wait at most (a day)."""

_REFUSED_IO = {
    # name: (kind, what it does)
    "add_reader": ("network", "waits on a file descriptor's readiness, which the OS decides"),
    "add_writer": ("network", "waits on a file descriptor's readiness, which the OS decides"),
    "remove_reader": ("network", "waits on a file descriptor's readiness, which the OS decides"),
    "remove_writer": ("network", "waits on a file descriptor's readiness, which the OS decides"),
    "sock_recv": ("network", "talks to the network"),
    "sock_recv_into": ("network", "talks to the network"),
    "sock_recvfrom": ("network", "talks to the network"),
    "sock_recvfrom_into": ("network", "talks to the network"),
    "sock_sendall": ("network", "talks to the network"),
    "sock_sendto": ("network", "talks to the network"),
    "sock_connect": ("network", "talks to the network"),
    "sock_accept": ("network", "talks to the network"),
    "_make_socket_transport": ("network", "talks to the network"),
    "_make_ssl_transport": ("network", "talks to the network"),
    "_make_datagram_transport": ("network", "talks to the network"),
    "_make_read_pipe_transport": ("files", "reads a pipe, whose data the OS delivers"),
    "_make_write_pipe_transport": ("files", "writes a pipe"),
    "_make_subprocess_transport": ("concurrency", "starts a process"),
    "add_signal_handler": ("process", "uses the process's signals"),
    "remove_signal_handler": ("process", "uses the process's signals"),
}
_IO_USE = ("ctx.async_http() (an httpx.AsyncClient for any SDK), ctx.async_llm(...) or ctx.async_effect(...), "
           "whose results are recorded")


def _refusing(name: str, kind: str, reason: str) -> Callable[..., Any]:
    def refused(self: StepLoop, *args: Any, **kwargs: Any) -> Any:
        raise self.refusal(f"loop.{name.lstrip('_')}", kind=kind, reason=reason, use=_IO_USE)

    refused.__name__ = refused.__qualname__ = name
    return refused


_SETTLE_TURNS = 8
"""Turns given to bare callbacks left ready when a step's coroutine returns (see StepLoop._settle_callbacks)."""

class StepLoop(base_events.BaseEventLoop):
    """The deterministic event loop of one agent's async steps (see the module).

    Internal: a :class:`~swarmlog.context.Context` makes one on its first async step and keeps it,
    so libraries that cache objects per loop find the same loop step after step.
    """

    # BaseEventLoop's own state and steps, which this loop drives (private: not in typeshed).
    _ready: collections.deque[asyncio.Handle]
    _scheduled: list[asyncio.TimerHandle]
    _timer_cancelled_count: int
    _thread_id: int | None
    _stopping: bool
    _asyncgens: Any
    _run_once: Callable[[], None]
    _check_closed: Callable[[], None]
    _asyncgen_firstiter_hook: Callable[[Any], None]

    def __init__(self, *, ctx: StepContext) -> None:
        # asyncio's constructor reads PYTHONASYNCIODEBUG and the OS's clock resolution: the
        # loop's own setup, not the handler's (its first async step may be what makes it).
        with allowed():
            super().__init__()
        self.set_debug(False)  # debug mode reads the stack and times callbacks: off, whatever the environment
        self._clock_resolution = _RESOLUTION
        self._selector = _Selector(self)
        self._now = 0.0
        self._floor = 0.0
        """The earliest virtual time the next delivery may take (see :meth:`fired`)."""
        self.ctx = ctx
        self.calls = Calls(loop=self, ctx=ctx)
        self.handler = ""
        """What the running step's coroutine is (for errors): ``Class.method``."""
        self._task_names = itertools.count()
        self._tasks: list[asyncio.Task[Any]] = []
        """The tasks made during the running step (``asyncio.all_tasks`` would walk every task of
        the process, at every step's end)."""
        self._finalizing: set[asyncio.Task[Any]] = set()

    # -- the clock --------------------------------------------------------------------------

    def time(self) -> float:
        """The step's virtual time, in seconds since it began."""
        return self._now

    def delivered_at(self, t: float) -> float:
        """Move the clock to a delivery at ``t`` (never backwards, never before a fired timer)."""
        t = max(t, self._floor, self._now)
        self._now = self._floor = t
        return t

    def fired(self, deadline: float) -> None:
        """Move the clock to a timer's deadline: the timer comes before any delivery not yet made.

        Why the floor: a delivery is recorded with its virtual time, and on replay a delivery at a
        time at or before the next timer's deadline comes before that timer. So once a timer has
        fired at D, every later delivery must be recorded after D, strictly, or a replay would put
        it before the timer it came after."""
        self._now = max(self._now, deadline)
        self._floor = math.nextafter(self._now, math.inf)

    # -- steps --------------------------------------------------------------------------------

    def new_step(self) -> None:
        """A step begins (``ctx.begin``): its clock starts at 0.0, its calls are numbered from 0."""
        self._now = self._floor = 0.0
        self._task_names = itertools.count()
        self.calls.new_step()

    def run_step(self, awaitable: Awaitable[Any]) -> Any:
        """Run ``awaitable`` to completion on this loop, on the calling (handler's) thread."""
        ctx = self.ctx
        if events._get_running_loop() is not None:
            raise NestedRun(agent=ctx.agent, offset=ctx.now())
        ctx._require_sink()
        self.handler = _name_of(awaitable)
        self.calls.begin(live=ctx._live, simulated=ctx.run_effect is not None)
        self._tasks.clear()
        task = self.create_task(awaitable) if asyncio.iscoroutine(awaitable) \
            else tasks.ensure_future(awaitable, loop=self)
        hooks = sys.get_asyncgen_hooks()
        self._thread_id = threading.get_ident()
        sys.set_asyncgen_hooks(firstiter=self._asyncgen_firstiter_hook, finalizer=self._asyncgen_finalizer_hook)
        events._set_running_loop(self)
        left: list[str] = []
        try:
            run_once = self._run_once
            while not task.done():
                self._stopping = False  # loop.stop() has nothing to stop: the step runs until its coroutine ends
                run_once()
            self._settle_finalizers()
            self._settle_callbacks(task)
            left = self._leftovers(task)
        except BaseException:
            self._abandon(task)
            raise
        finally:
            events._set_running_loop(None)
            self._thread_id = None
            sys.set_asyncgen_hooks(*hooks)
        if left:
            self._abandon(task)
            if task.cancelled() or task.exception() is None:
                raise StepLeftWork(agent=ctx.agent, offset=ctx.now(), handler=self.handler, left=left)
        self._tasks.clear()
        if task.cancelled():
            raise StepCancelled(agent=ctx.agent, offset=ctx.now(), handler=self.handler)
        return task.result()

    def stalled(self) -> StepStalled:
        """The error for a coroutine that waits with nothing in flight and no timer set."""
        waiting = [f"task {t.get_name()!r} ({_name_of(t.get_coro())})" for t in self._tasks if not t.done()]
        return StepStalled(agent=self.ctx.agent, offset=self.ctx.now(), handler=self.handler, waiting=waiting)

    def _leftovers(self, main: asyncio.Future[Any]) -> list[str]:
        left = [f"task {t.get_name()!r} ({_name_of(t.get_coro())})" for t in self._tasks
                if t is not main and not t.done()]
        left += [f"call #{f.call} ({f.what}) in flight" for f in self.calls.flying.values() if not f.future.done()]
        if not left:  # a bare callback or timer of the step's own, outside any task
            left += [f"callback {_callback_name(h)}" for h in self._ready if not h._cancelled]
            left += [f"timer {_callback_name(h)} due at {h.when():g} s (virtual)" for h in self._scheduled
                     if not h._cancelled]
        return left

    def _settle_finalizers(self) -> None:
        """Async generators the coroutine dropped are closed by tasks the loop schedules (asyncio's
        finalizer hook); run them now, or a generator freed as the coroutine returns would look
        like work left behind. Only what is ready: nothing is delivered and no time passes."""
        while self._finalizing and self._ready:
            self._run_once()
            self._finalizing = {t for t in self._finalizing if not t.done()}

    def _settle_callbacks(self, main: asyncio.Future[Any]) -> None:
        """Bare callbacks still ready when the coroutine returns, with no task of the step pending, run now, as a
        real loop would run them on its next turn: a library's own bookkeeping, such as anyio delivering a
        cancellation to a scope whose tasks have all finished since (it reschedules itself once, then sees
        nothing left to cancel). Nothing is delivered and no time passes; a callback that is still ready after
        a few turns (one that keeps rescheduling itself) is work left behind."""
        for _ in range(_SETTLE_TURNS):
            if not self._ready or any(t is not main and not t.done() for t in self._tasks):
                return
            self._run_once()

    def _abandon(self, main: asyncio.Future[Any]) -> None:
        """Drop everything the step left (it failed, or left work): close its coroutines here, on
        the handler's thread under its guard, rather than wherever the garbage collector would."""
        for t in self._tasks:
            t._log_destroy_pending = False  # type: ignore[attr-defined]
            coro = t.get_coro()  # None from 3.12 for a task that ran eagerly to its end
            if t is not main and not t.done() and coro is not None:
                try:
                    coro.close()
                except BaseException as exc:  # a finally block that awaits, or raises: the step failed anyway
                    logger.debug("agent %s: closing task %s of an abandoned step: %r", self.ctx.agent,
                                 t.get_name(), exc)
        main_coro = main.get_coro() if isinstance(main, asyncio.Task) else None
        if isinstance(main, asyncio.Task) and not main.done() and main_coro is not None:
            main._log_destroy_pending = False  # type: ignore[attr-defined]
            try:
                main_coro.close()
            except BaseException as exc:
                logger.debug("agent %s: closing an abandoned step's coroutine: %r", self.ctx.agent, exc)
        self._ready.clear()
        self._scheduled.clear()
        self._timer_cancelled_count = 0
        self._finalizing.clear()
        self._tasks.clear()
        self.calls.abandon()

    # -- what asyncio calls -------------------------------------------------------------------

    def create_task(self, coro: Any, *, name: str | None = None,  # type: ignore[override]
                    context: Any = None) -> asyncio.Task[Any]:
        # Named by the step and the order tasks were made in: asyncio's default names count tasks
        # process-wide ("Task-4711"), which a replay in another process would not reproduce.
        if name is None:
            name = f"{self.ctx.agent}@{self.ctx.now()}/task-{next(self._task_names)}"
        task = super().create_task(coro, name=name, context=context)
        self._tasks.append(task)
        return task

    def run_in_executor(self, executor: Any, func: Callable[..., Any],  # type: ignore[override]
                        *args: Any) -> asyncio.Future[Any]:
        """The default executor is the step itself: ``func(*args)`` runs here, inline, on the
        handler's thread and under its guard (``asyncio.to_thread`` too). Another executor would
        run it on a thread or process the guard does not watch and the log does not order."""
        self._check_closed()
        if executor is not None:
            raise self.refusal("loop.run_in_executor", kind="concurrency",
                               reason=f"runs code on {type(executor).__name__}'s threads or processes, which the "
                                      f"guard does not watch and the log does not order",
                               use="loop.run_in_executor(None, fn) or asyncio.to_thread(fn) (they run fn inline in "
                                   "an async step), or await ctx.async_effect(name, fn, ...) for I/O that should "
                                   "overlap")
        fut = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return fut

    def set_default_executor(self, executor: Any) -> None:
        raise self.refusal("loop.set_default_executor", kind="concurrency",
                           reason="would run asyncio.to_thread's work on threads the guard does not watch",
                           use="nothing: in an async step the default executor is the step itself (inline)")

    def _asyncgen_finalizer_hook(self, agen: Any) -> None:
        self._asyncgens.discard(agen)
        if self._thread_id is None:
            return  # freed between steps: nothing may run outside a step (its finally blocks do not run)
        self.call_soon(self._finalize, agen)

    def _finalize(self, agen: Any) -> None:
        self._finalizing.add(self.create_task(agen.aclose()))

    def _process_events(self, event_list: Any) -> None:
        pass  # no selector, no I/O events

    def _write_to_self(self) -> None:
        pass  # nothing blocks in a selector: the loop only ever waits in Calls.advance

    def refusal(self, call: str, *, kind: str, reason: str, use: str) -> ForbiddenCall:
        """A :class:`ForbiddenCall` for something the step's loop does not do, naming the installed
        library that asked for it, if one did (as the guard's own refusals do)."""
        ctx = self.ctx
        guard = innermost_guard(thread_state())
        library = calling_library(sys._getframe(2), getattr(guard, "base", None))
        return ForbiddenCall(offset=ctx.now(), agent=ctx.agent, call=call, use=use, reason=reason, kind=kind,
                             library=library)


for _name, (_kind, _reason) in _REFUSED_IO.items():
    setattr(StepLoop, _name, _refusing(_name, _kind, _reason))
del _name, _kind, _reason


class _Selector:
    """What ``BaseEventLoop._run_once`` polls when no callback is ready: the next delivery or timer."""

    __slots__ = ("loop",)

    def __init__(self, loop: StepLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> tuple[()]:
        if timeout == 0:
            return ()  # callbacks are ready: they run first, nothing is delivered in between
        loop = self.loop
        deadline: float | None = None
        if timeout is not None:
            # The head timer's own deadline (asyncio passed the time left until it, capped at a day).
            head: Any = loop._scheduled[0]
            deadline = head._when if timeout < _MAX_WAIT else loop._now + timeout
        loop.calls.advance(deadline)
        return ()

    def close(self) -> None:
        pass


def _name_of(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def _callback_name(handle: asyncio.Handle) -> str:
    cb = handle._callback  # type: ignore[attr-defined]
    return getattr(cb, "__qualname__", None) or repr(cb)
