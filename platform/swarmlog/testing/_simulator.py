"""The simulator: a swarm's unchanged agents in one thread on the in-memory log, one chosen step at a time.

Each agent is the runtime's own: an :class:`~swarmlog.runtime.engine.AgentCore` (the same
``ctx``, the same determinism guard, the same timers) on a transactional channel of an
:class:`~swarmlog.log.InMemoryLog`, its outputs encoded by the live worker's sink, one
transaction per step — driven by :class:`~swarmlog.runtime.driven.DrivenAgent`. So
the log a simulated run leaves has the bytes, headers, ids and offsets the real runtime
would have written for the same interleaving: it replays with ``replay_swarm`` and,
copied to Kafka (:mod:`swarmlog.testing._export`), with ``swarmlog replay --swarm``.

**What the schedule decides** (:mod:`swarmlog.testing._schedule`), at each point where
more than one thing can happen next, listed in this order (the first is the default):

1. an agent runs its due step (the oldest input first; ties in the swarm's agent order).
   When the step's input arrived and when it runs are apart by however long the agent,
   its effects and its model took: latency is ordering;
2. an agent reads its own ``timer.cancelled`` while the timeout is still armed (until
   then a live agent may still fire it: the timeout-after-cancel race);
3. a wall-clock timeout fires (earliest due first). It may fire while other steps are
   due — the work they stand for took longer than the timeout — but never after a
   later timeout while its own agent was idle (an idle agent fires on time); firing
   moves simulated time to its due time, and the agent fires every timeout due by then
   in one go, as the worker does between batches;
4. inside an async step (:mod:`swarmlog.aio`), which of the recorded calls in flight is delivered
   next — the first one made, by default — or that the next timer (``asyncio.sleep``,
   ``wait_for``'s timeout) fires before any of them: the order concurrent calls complete in,
   which live is the network's to decide and a replay reproduces from the log;
5. with ``crashes=N``, up to N times a run: an agent's process dies between running its
   due step and committing it. Its transaction stays open until the agent's next life
   starts at once, fences it off (aborting it), rebuilds from offset zero and runs the
   step again, live — its effects and LLM calls too: they are at-least-once across a
   crash, and the model answers them again.

Simulated time is the log's clock (``LogAppendTime`` stamps): it starts at
:data:`EPOCH_MS`, a step takes :data:`STEP_MS` unless a timeout is due sooner, and only a
firing moves it further. Nothing reads the machine's clock; a run is a function of the
swarm, its models and its schedule.

**When a run ends.** When nothing can happen any more (*at rest*: no step due, no timeout
armed), or after ``max_steps``. Then its checks run: the declared end state
(``end_state(states)``; at rest without it is a *deadlock*), then each invariant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..agent import Agent, Swarm
from ..errors import NondeterminismError, UnmodelledEffect
from ..llm import completion
from ..log.hashing import canonical
from ..log.memory import InMemoryLog
from ..log.protocol import HTTP_EXCHANGE, TIMER_CANCELLED
from ..runtime import start_run
from ..runtime.driven import DrivenAgent
from ..runtime.history import NoHistory
from ..runtime.timers import Timer
from ..schema.codec import Decoder, Encoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from ._run import SimRun, Step, Violation
from ._schedule import Chooser, Model, Schedule, answer, chooser_for

logger = logging.getLogger(__name__)

SIM_TOPIC = "swarmlog.sim"
"""The in-memory topic every run writes (an export names its own Kafka topic)."""
EPOCH_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z: where simulated time starts, in every run."""
STEP_MS = 1
"""Simulated time a step takes when no timeout is due sooner."""

_MISSING = object()


class _Abandon(BaseException):
    """Leaves a step the simulation cannot answer, past every ``except Exception`` in the runtime
    (which would record it as the handler's failure); the simulator raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Recording:
    """A chooser that remembers every choice: the run's :class:`Schedule`."""

    __slots__ = ("inner", "choices", "sizes", "drew", "completions")

    def __init__(self, inner: Chooser) -> None:
        self.inner = inner
        self.choices: list[int] = []
        self.sizes: list[int] = []
        self.drew = False
        self.completions: list[str] = []
        """The step's completion orders chosen away from the default, for its report."""

    def choose(self, n: int, what: str) -> int:
        c = self.inner.choose(n, what)
        self.choices.append(c)
        self.sizes.append(n)
        return c

    def draw(self, strategy: Any, what: str) -> Any:
        self.drew = True
        return self.inner.draw(strategy, what)


class _ModelLLM:
    """The LLM client of a simulated agent: its replies come from the simulation's model."""

    def __init__(self, model: Model, chooser: Chooser, agent: str, now: Callable[[], int]) -> None:
        self.model = model
        self.chooser = chooser
        self.agent = agent
        self.now = now

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        name = str(request.get("model") or "")
        if self.model is None:
            raise _Abandon(UnmodelledEffect(agent=self.agent, offset=self.now(), kind="LLM call", name=name))
        reply = answer(self.model, (request,), self.chooser, f"the LLM reply to {self.agent} at {self.now()}")
        if isinstance(reply, str):
            return completion(request, reply, model=name or "simulated")
        return reply


@dataclass(frozen=True, slots=True)
class _Option:
    kind: str  # "step" | "read" | "fire"
    agent: int  # index into the run's steppers
    offset: int | None = None  # the input's offset (step, read)
    timer: Timer | None = None  # fire


class Simulator:
    """Runs ``swarm`` under chosen schedules; see the module, and :meth:`run`.

    ``effects``: effect name -> model (see :mod:`swarmlog.testing._schedule`); ``llm``: the
    model of ``ctx.llm``'s replies. ``end_state(states) -> bool``: the state every run must
    come to rest in (else a deadlock). ``invariants``: functions of the :class:`SimRun`
    returning False or a message when violated (or raising ``AssertionError``).
    ``crashes``: how many agent lives a run may end before a commit (see the module).
    ``seed`` and ``run_id`` go into ``run.started`` (``ctx.random()`` derives from them).
    """

    def __init__(self, swarm: Swarm, *, effects: Mapping[str, Model] | None = None, llm: Model = None,
                 end_state: Callable[[dict[str, Any]], bool] | None = None,
                 invariants: Sequence[Callable[[SimRun], Any]] = (), max_steps: int = 1000, crashes: int = 0,
                 seed: int = 0, run_id: str = "sim", registry: SchemaRegistry | None = None) -> None:
        self.swarm = swarm
        self.crashes = crashes
        self.effects = dict(effects or {})
        self.llm = llm
        self.end_state = end_state
        self.invariants = list(invariants)
        self.max_steps = max_steps
        self.seed = seed
        self.run_id = run_id
        # The schema layers the runtime would load here (SWARMLOG_SCHEMA_DIR / _PATH: a swarm's own
        # event types); nothing else of the settings is used, and nothing connects anywhere.
        self.settings = Settings.from_env(topic=SIM_TOPIC)
        self.registry = registry or SchemaRegistry.load(self.settings.schema_dirs())
        # Shared by every run (one thread): plans and encoders are built once, not per run.
        self.decoder = Decoder(self.registry)
        self.encoders: dict[str, Encoder] = {}
        # The run's beginning as start_run writes it (run.started in a transaction of its own, so a
        # marker follows it), made once: every run's log starts as an offset-exact copy of it. It
        # records this process's string-hash seed, as any run does: the handlers run here, so an
        # exported run replays (swarmlog replay re-executes itself) with the seed they ran under.
        scratch = InMemoryLog(clock_ms=lambda: EPOCH_MS)
        scratch.create_topic(SIM_TOPIC)
        start_run(settings=self.settings, swarm=swarm, run_id=run_id, seed=seed, registry=self.registry,
                  backend=scratch)
        self._start = (scratch.messages(SIM_TOPIC), scratch.watermarks(SIM_TOPIC)[1])

    # -- one run -------------------------------------------------------------------------

    def run(self, schedule: Any = None) -> SimRun:
        """One run under ``schedule``: a :class:`Schedule` (None: the default order), a seed (int),
        a Hypothesis ``st.data()`` object or a value of :func:`schedules`. The result says what
        happened and what failed; :meth:`SimRun.check` raises if anything did."""
        chooser = _Recording(chooser_for(schedule))
        clock = [EPOCH_MS]
        log = InMemoryLog(clock_ms=lambda: clock[0])
        log.create_copy(SIM_TOPIC, self._start[0], end=self._start[1])
        agents = self.swarm.agents()
        steppers = [self._stepper(log, agent, chooser, fresh=True) for agent in agents]
        crashes_left = [self.crashes]
        holds = [self._hold(s) for s in steppers]
        snapshots = [canonical(a.state) for a in agents]
        initial = {a.name: snap for a, snap in zip(agents, snapshots, strict=True)}
        steps: list[Step] = []
        at_rest = False
        error: NondeterminismError | None = None
        read_to = [-1] * len(steppers)  # the log end each agent last read up to, with nothing left over
        try:
            while True:
                end = log.watermarks(SIM_TOPIC)[1]
                for i, s in enumerate(steppers):
                    if read_to[i] != end or s.buffered:
                        s.advance(holds[i])
                        if s.due is None and s.held is None:  # it read all there was
                            read_to[i] = end
                options = _options(steppers, crashes_left[0] > 0)
                if not options:
                    at_rest = True
                    break
                if len(steps) >= self.max_steps:
                    break
                n = len(options)
                c = chooser.choose(n, "what happens next") if n > 1 else 0
                steps.append(self._perform(log, clock, steppers, chooser, crashes_left, snapshots, options, c,
                                           len(steps) + 1))
        except _Abandon as exc:
            raise exc.error from None
        except NondeterminismError as exc:  # the guard, or a divergence: the runtime refused the step
            error = exc
        finally:
            for s in steppers:
                if error is None:
                    s.stop()  # as the workers of a run that ends cleanly: each group says how far it read
                else:
                    s.close()
        run = SimRun(swarm=self.swarm, schedule=Schedule(tuple(chooser.choices)), sizes=tuple(chooser.sizes),
                     steps=steps, states={s.name: s.core.agent.state for s in steppers}, at_rest=at_rest, log=log,
                     topic=SIM_TOPIC, decoder=self.decoder, error=error, max_steps=self.max_steps, initial=initial,
                     replayable=not chooser.drew)
        self._check(run)
        return run

    def _stepper(self, log: InMemoryLog, agent: Agent, chooser: _Recording, *, fresh: bool) -> DrivenAgent:
        cell: list[DrivenAgent] = []

        def now() -> int:
            return cell[0].core.ctx.now()

        effects = self.effects
        name = agent.name

        def run_effect(effect: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
            if effect == HTTP_EXCHANGE:  # ctx.http(): a raw request, nothing to answer it with
                raise _Abandon(UnmodelledEffect(agent=name, offset=now(), kind="HTTP exchange", name=effect))
            model = effects.get(effect, _MISSING)
            if model is _MISSING:
                raise _Abandon(UnmodelledEffect(agent=name, offset=now(), kind="effect", name=effect))
            return answer(model, args, chooser, f"effect {effect!r} of {name} at {now()}")

        # A new run's log holds its start and nothing else: nothing for a first pass to find. A later
        # life (after a crash) reads its history first and rebuilds from offset zero, as the worker does.
        stepper = DrivenAgent(backend=log, topic=SIM_TOPIC, agent=agent, decoder=self.decoder,
                               llm_client=_ModelLLM(self.llm, chooser, name, now), run_effect=run_effect,
                               encoders=self.encoders, history=NoHistory() if fresh else None,
                               digest_every=self.settings.state_digest_every)
        cell.append(stepper)

        def choose_completion(options: list[str]) -> int:
            # An async step's calls in flight (in the order it made them), and last the next timer
            # if one is set: which happens first. The default, the first call made, finishes first.
            c = chooser.choose(len(options), f"what {name}'s step at {now()} is delivered next")
            if c:
                chooser.completions.append(f"{options[c]} before {options[0]}")
            return c

        stepper.core.ctx.choose_completion = choose_completion
        return stepper

    @staticmethod
    def _hold(stepper: DrivenAgent) -> Callable[[Any], bool]:
        name = stepper.name

        def hold(r: Any) -> bool:
            return r.agent == name and r.event_type == TIMER_CANCELLED and bool(stepper.armed())

        return hold

    def _perform(self, log: InMemoryLog, clock: list[int], steppers: list[DrivenAgent], chooser: _Recording,
                 crashes_left: list[int], snapshots: list[str], options: list[_Option], c: int, number: int) -> Step:
        o = options[c]
        s = steppers[o.agent]
        start = log.watermarks(SIM_TOPIC)[1]
        handled = False
        fired: tuple[str, ...] = ()
        before = snapshots[o.agent]
        passed_over = _label(steppers, options[0]) if c else None
        kind = o.kind
        chooser.completions.clear()
        if kind in ("step", "crash"):
            if kind == "step" and s.due is not None and s.due[1] is None:
                kind = "timers"  # no input to handle: the read made logical timers due
            dues = [t.due_wall_ms for st in steppers for t in st.armed() if t.due_wall_ms is not None]
            now = clock[0] + STEP_MS
            if dues:
                now = min(now, min(dues) - 1)
            clock[0] = max(clock[0], now)
            if kind == "crash":
                _, handled = s.step_and_die()
                crashes_left[0] -= 1
                # The next life starts at once: its fence aborts the open transaction (readers were
                # held back at it anyway), and it rebuilds to the state before the lost step.
                steppers[o.agent] = self._stepper(log, self.swarm.agent(s.name), chooser, fresh=False)
            else:
                _, handled = s.step()
                snapshots[o.agent] = canonical(s.core.agent.state)
        elif kind == "read":
            s.read_held()
        else:
            assert o.timer is not None and o.timer.due_wall_ms is not None
            clock[0] = max(clock[0], o.timer.due_wall_ms)
            fired = tuple(t.name for t in s.fire(clock[0]))
        return Step(number=number, kind=kind, agent=s.name, input=o.offset, handled=handled,
                    wrote=(start, log.watermarks(SIM_TOPIC)[1]), at_ms=clock[0], options=len(options), choice=c,
                    passed_over=passed_over, timers=fired, state_before=before, state_after=snapshots[o.agent],
                    completions=tuple(chooser.completions))

    def _check(self, run: SimRun) -> None:
        if run.error is not None:
            run.violations.append(Violation("runtime", f"the runtime refused a step: {run.error}"))
            return
        if self.end_state is not None and not self.end_state(run.states):
            if run.at_rest:
                run.violations.append(Violation(
                    "deadlock", f"the swarm came to rest after {len(run.steps)} steps without reaching its end "
                                f"state: nothing is due, no timeout is armed, and end_state(states) is false"))
            else:
                run.violations.append(Violation(
                    "no end state", f"the swarm did not reach its end state within max_steps={self.max_steps} "
                                    f"steps (a livelock, or raise max_steps)"))
        for invariant in self.invariants:
            name = getattr(invariant, "__name__", type(invariant).__name__)
            try:
                verdict = invariant(run)
            except AssertionError as exc:
                verdict = str(exc) or False
            if verdict is False or isinstance(verdict, str):
                run.violations.append(Violation(name, verdict if isinstance(verdict, str) else f"{name} is false"))

    # -- many runs: see swarmlog.testing._explore -------------------------------------------

    def explore(self, *, max_examples: int = 1000, seed: int = 0) -> Any:
        """Hypothesis explores schedules and shrinks the first failure (:func:`~._explore.explore`)."""
        from ._explore import explore

        return explore(self, max_examples=max_examples, seed=seed)

    def sample(self, schedules: int = 1000, *, seed: int = 0) -> Any:
        """``schedules`` seeded random schedules, no Hypothesis (:func:`~._explore.sample`)."""
        from ._explore import sample

        return sample(self, schedules=schedules, seed=seed)

    def exhaust(self, *, limit: int = 100_000) -> Any:
        """Every schedule there is, depth-first, up to ``limit`` runs (:func:`~._explore.exhaust`)."""
        from ._explore import exhaust

        return exhaust(self, limit=limit)


def _options(steppers: list[DrivenAgent], crashes: bool) -> list[_Option]:
    """What can happen next, the default first (see the module)."""
    opts: list[_Option] = []
    for i, s in enumerate(steppers):
        if s.due is not None:
            opts.append(_Option("step", i, s.due[0]))
        elif s.held is not None:
            opts.append(_Option("read", i, s.held[0].offset()))
    opts.sort(key=lambda o: (o.offset, o.agent))
    armed = sorted(((t.due_wall_ms or 0, t.set_offset, i, t) for i, s in enumerate(steppers) for t in s.armed()),
                   key=lambda a: (a[0], a[1], a[2]))
    if armed:
        busy = [s.due is not None or s.held is not None for s in steppers]
        for due, _, i, t in armed:
            # An idle agent fires on time: a timeout due earlier whose agent is idle must fire first.
            if all(busy[j] for d, _, j, _ in armed if d < due):
                opts.append(_Option("fire", i, None, t))
    if crashes:
        opts.extend(_Option("crash", o.agent, o.offset) for o in list(opts) if o.kind == "step")
    return opts


def _label(steppers: list[DrivenAgent], o: _Option) -> str:
    """A short description of an option (what a chosen step was chosen over)."""
    s = steppers[o.agent]
    if o.kind == "fire":
        assert o.timer is not None
        return f"{s.name}'s timeout {o.timer.name!r} fires"
    if o.kind == "read":
        return f"{s.name} reads its timer.cancelled @{o.offset}"
    if o.kind == "crash":
        return f"{s.name} dies before committing its step @{o.offset}"
    event = s.due[1] if s.due is not None else None
    what = "its logical timers" if event is None else (event.kind or event.event_type)
    return f"{s.name} handles {what} @{o.offset}"
