"""Recorded calls an async step makes concurrently: issued in order, delivered in a recorded order.

A recorded call (``ctx.async_http()``'s requests, ``ctx.async_llm``, ``ctx.async_effect``) is
*issued* when the coroutine makes it and *delivered* when its result is handed back to the
coroutine. Between the two, other calls may be issued and delivered: that is the concurrency
``asyncio.gather``, ``TaskGroup`` and ``as_completed`` give.

* **Identity.** Each call is numbered in the order the step issues it (``call`` 0, 1, ...). The
  loop is deterministic given the deliveries before a call, so the number depends on the code,
  never on timing.
* **Delivery is the record.** A call's record (``http.exchange`` v2, ``llm.call`` v2,
  ``effect.recorded`` v2) is written when its result is delivered, as the step's next output: the
  order of a step's records *is* the order results reached the coroutine, and each carries its
  call's number and the step's virtual time at delivery (``delivered_at``). Deliveries happen only
  when no callback is ready (:mod:`._loop`), one at a time, so the coroutine reacts to each result
  before the next arrives — the same live and on replay.
* **Live**, each call's I/O runs at once on a worker thread of the agent's own (outside the guard,
  as the I/O of ``ctx.http()`` runs inside ``allowed()``): the network I/O of concurrent calls
  overlaps. The loop waits, really, for the first completion or the next timer, whichever comes
  first, and records what it delivered and when (virtual time advances by the real time waited).
* **On replay** nothing runs: the loop reads the step's next record, and delivers the call it names
  — checked to be the same call (the same request, effect or prompt) — at its recorded virtual
  time, or fires a timer due before it. A record naming a call the step has not made, or a call in
  flight with no record, is an :class:`~swarmlog.aio.errors.AsyncCallDiverged` naming the call and
  its place in the step.
* **In the simulator** (``ctx.run_effect`` set) each call is answered at once by its model, and the
  schedule chooses which of the calls in flight is delivered next — or that the next timer fires
  first (``ctx.choose_completion``).

A call the coroutine cancels (``wait_for`` timing out, a cancelled task) is dropped: its live I/O
may still complete, unrecorded — it reached the world at least once, as every live call does
across a crash.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import EffectDiverged
from ..events import Event
from ..guard import allowed
from ..log.protocol import output_id
from .errors import AsyncCallDiverged

__all__ = ["Calls", "Flight", "StepContext"]

logger = logging.getLogger(__name__)

MAX_WORKERS = 64
"""Threads one agent runs live calls on, at most: more concurrent calls than this wait for one to end."""

_LIVE, _REPLAY, _SIMULATED = "live", "replay", "simulated"


class StepContext(Protocol):
    """What the async machinery needs of ``ctx`` (:class:`swarmlog.context.Context`)."""

    agent: str
    run_effect: Any
    llm_client: Any
    choose_completion: Callable[[list[str]], int] | None
    _live: bool
    _sink: Any
    _step: int
    _index: int
    _effects: list[int]

    def now(self) -> int: ...

    def _require_sink(self) -> Any: ...

    def _output(self, event_type: str, payload: dict[str, Any], to: str | None, *, locate: bool = False,
                event_id: str | None = None) -> int: ...

    def _step_loop(self) -> Any: ...


class Flight:
    """One recorded call, issued and not yet delivered."""

    __slots__ = ("call", "event_type", "what", "check", "future", "outcome", "started_ns")

    def __init__(self, call: int, event_type: str, what: str, check: Callable[[dict[str, Any]], None],
                 future: asyncio.Future[dict[str, Any]]) -> None:
        self.call = call
        self.event_type = event_type
        self.what = what
        self.check = check
        self.future = future
        self.outcome: dict[str, Any] | BaseException | None = None
        """The payload live work made (or the exception it raised); None until it is known."""
        self.started_ns = 0

    def __repr__(self) -> str:
        return f"call #{self.call} ({self.what})"


class Calls:
    """The recorded calls of one agent's async steps (see the module)."""

    def __init__(self, *, loop: Any, ctx: StepContext) -> None:
        self.loop = loop
        """The :class:`~._loop.StepLoop` whose calls these are."""
        self.ctx = ctx
        self.flying: dict[int, Flight] = {}
        """Issued and not delivered, by call number (in the order they were issued)."""
        self.issued = 0
        self.delivered = 0
        self.mode = _REPLAY
        self._arrived: queue.SimpleQueue[tuple[Flight, Any]] = queue.SimpleQueue()
        self._workers: _Workers | None = None

    # -- a step ---------------------------------------------------------------------------------

    def new_step(self) -> None:
        self.flying.clear()
        self.issued = self.delivered = 0

    def begin(self, *, live: bool, simulated: bool) -> None:
        self.mode = (_SIMULATED if simulated else _LIVE) if live else _REPLAY

    def abandon(self) -> None:
        """The step ended with calls in flight (it failed): their results, if they come, are stale."""
        self.flying.clear()

    # -- issuing ----------------------------------------------------------------------------------

    def issue(self, *, event_type: str, what: str, work: Callable[[], dict[str, Any]],
              check: Callable[[dict[str, Any]], None]) -> asyncio.Future[dict[str, Any]]:
        """Issue one call: ``work()`` makes its payload live (on a worker thread; in the simulator at
        once, from its model); ``check(recorded_payload)`` raises the divergence if a recorded call is
        not this one. Returns the future the coroutine awaits: the payload, once delivered."""
        ctx = self.ctx
        ctx._require_sink()
        loop = self.loop
        if asyncio.get_running_loop() is not loop:  # pragma: no cover - a step's coroutines run on its loop
            raise RuntimeError("a recorded call was made outside the step's loop")
        call = self.issued
        self.issued = call + 1
        flight = Flight(call, event_type, what, check, loop.create_future())
        self.flying[call] = flight
        mode = self.mode
        if mode == _LIVE:
            with allowed():  # swarmlog's own machinery: timing a span, starting its worker threads
                if getattr(ctx._sink, "call_started", None) is not None:
                    flight.started_ns = time.time_ns()
                workers = self._workers
                if workers is None:
                    workers = self._workers = _Workers(name=f"swarmlog-calls:{ctx.agent}")
                workers.submit(lambda: self._arrived.put((flight, _outcome(work))))
        elif mode == _SIMULATED:
            with allowed():
                flight.outcome = _outcome(work, simulated=True)
        return flight.future

    # -- delivering -------------------------------------------------------------------------------

    def advance(self, deadline: float | None) -> None:
        """Nothing is ready: deliver the next call's result, or fire the timer due at ``deadline``."""
        for call in [c for c, f in self.flying.items() if f.future.done()]:
            del self.flying[call]  # cancelled by the coroutine (wait_for timing out): never delivered
        mode = self.mode
        if mode == _REPLAY:
            self._advance_replay(deadline)
        elif mode == _LIVE:
            self._advance_live(deadline)
        else:
            self._advance_simulated(deadline)

    def _advance_live(self, deadline: float | None) -> None:
        loop = self.loop
        if not self.flying:
            self._timer_or_stall(deadline)
            return
        base = loop.time()
        # Waiting for the world, outside the handler's guard: a worker's completion, or the real
        # time until the next timer, as the virtual clock maps to it while calls are in flight.
        with allowed():
            started = time.monotonic()
        while True:
            with allowed():
                elapsed = time.monotonic() - started
                wait = None if deadline is None else max(0.0, deadline - base - elapsed)
                try:
                    arrived: tuple[Flight, Any] | None = self._arrived.get(timeout=wait)
                except queue.Empty:
                    arrived = None
                elapsed = time.monotonic() - started
            if arrived is None:
                loop.fired(deadline)
                return
            flight, outcome = arrived
            if self.flying.get(flight.call) is not flight:
                continue  # a call cancelled since, or of an earlier step: nobody awaits it
            at = base + elapsed
            if deadline is not None:
                at = min(at, deadline)  # it came before the timer: it is delivered first, on replay too
            self._deliver(flight, outcome, loop.delivered_at(at))
            return

    def _advance_simulated(self, deadline: float | None) -> None:
        loop = self.loop
        flights = list(self.flying.values())
        if not flights:
            self._timer_or_stall(deadline)
            return
        n = len(flights) + (deadline is not None)
        choose = self.ctx.choose_completion
        i = 0
        if choose is not None and n > 1:
            options = [repr(f) for f in flights] + (["the next timer fires"] if deadline is not None else [])
            i = choose(options)
        if i == len(flights):
            loop.fired(deadline)
            return
        flight = flights[i]
        self._deliver(flight, flight.outcome, loop.delivered_at(loop.time()))

    def _advance_replay(self, deadline: float | None) -> None:
        loop = self.loop
        rec = self._next_record()
        if rec is None:
            if deadline is not None:
                loop.fired(deadline)
                return
            if self.flying:
                first = next(iter(self.flying.values()))
                raise self._diverged(first.call, first.what,
                                     f"call #{first.call} ({first.what}) has no record in the log: the live run did "
                                     f"not make this call here (or its result never reached the coroutine)")
            raise loop.stalled()
        payload = rec.payload
        at = payload["delivered_at"]
        if deadline is not None and at > deadline:
            loop.fired(deadline)  # the live run's timer fired before this result came
            return
        flight = self.flying.get(payload["call"])
        if flight is None:
            made = ", ".join(repr(f) for f in self.flying.values()) or "none in flight"
            raise self._diverged(payload["call"], _recorded_what(rec),
                                 f"the log delivers the result of call #{payload['call']} ({_recorded_what(rec)}) "
                                 f"here, which this step has not made (calls in flight: {made})", recorded=rec)
        if flight.event_type != rec.event_type:
            raise self._diverged(flight.call, flight.what,
                                 f"call #{flight.call} is now {flight.what}, where the log recorded "
                                 f"{_recorded_what(rec)}", recorded=rec)
        flight.check(payload)
        self._deliver(flight, payload, loop.delivered_at(at), event_id=rec.event_id)

    def _next_record(self) -> Event | None:
        """The step's next recorded output, if it is the delivery of a concurrent call."""
        ctx = self.ctx
        sink = ctx._require_sink()
        try:
            rec = sink.recorded(output_id(ctx.agent, ctx._step, ctx._index))
        except EffectDiverged:
            return None  # the next output is not a recorded call (a message, or nothing)
        if rec is None or rec.payload.get("call") is None:
            return None
        return rec

    def _timer_or_stall(self, deadline: float | None) -> None:
        if deadline is None:
            raise self.loop.stalled()
        self.loop.fired(deadline)

    def _deliver(self, flight: Flight, outcome: Any, at: float, *, event_id: str | None = None) -> None:
        del self.flying[flight.call]
        self.delivered += 1
        future = flight.future
        if isinstance(outcome, BaseException):
            # Live work that failed in a way no record describes (recorded I/O records its own
            # failures): the coroutine gets the exception, and a replay finds no record here.
            future.set_exception(outcome)
            return
        ctx = self.ctx
        if event_id is None:
            outcome = {**outcome, "call": flight.call, "delivered_at": at}
        started = getattr(ctx._sink, "call_started", None)
        if started is not None and flight.started_ns:
            started(output_id(ctx.agent, ctx._step, ctx._index), flight.started_ns)
        ctx._effects.append(ctx._output(flight.event_type, outcome, ctx.agent, locate=True, event_id=event_id))
        future.set_result(outcome)

    def _diverged(self, call: int | None, what: str, detail: str, *, recorded: Any = None) -> AsyncCallDiverged:
        ctx = self.ctx
        rec = None
        if recorded is not None:
            rec = {"event_type": recorded.event_type, "offset": recorded.offset, "call": recorded.payload.get("call"),
                   "delivered_at": recorded.payload.get("delivered_at")}
        return AsyncCallDiverged(offset=ctx.now(), agent=ctx.agent, call=call, what=what,
                                 detail=f"{detail} (after {self.delivered} delivered result(s) of this step)",
                                 delivered=self.delivered, recorded=rec)


def _outcome(work: Callable[[], dict[str, Any]], *, simulated: bool = False) -> Any:
    """``work()``'s payload, or what it raised. In the simulator a BaseException (the simulator
    abandoning a call it has no model for) goes on out, past the coroutine's ``except Exception``."""
    try:
        return work()
    except Exception as exc:
        return exc
    except BaseException as exc:
        if simulated:
            raise
        return exc


def _recorded_what(rec: Event) -> str:
    p = rec.payload
    if "method" in p:
        return f"{p['method']} {p['url']}"
    if "name" in p:
        return f"effect {p['name']!r}"
    return f"llm {p.get('model') or '?'}"


class _Workers:
    """The threads one agent's live calls run on: started on demand, idle ones reused, daemons
    (a call still running when the process exits is not waited for: it was never recorded)."""

    __slots__ = ("name", "jobs", "lock", "threads", "idle", "waiting")

    def __init__(self, *, name: str) -> None:
        self.name = name
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.idle = 0
        self.waiting = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            self.waiting += 1
            start = self.waiting > self.idle and self.threads < MAX_WORKERS
            if start:
                self.threads += 1
        self.jobs.put(job)
        if start:
            threading.Thread(target=self._work, name=f"{self.name}#{self.threads}", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self.lock:
                self.idle += 1
            job = self.jobs.get()
            with self.lock:
                self.idle -= 1
                self.waiting -= 1
            try:
                job()
            except BaseException:  # a job reports its own outcome; this is a bug, not the call's
                logger.exception("%s: a recorded call's worker failed", self.name)
