"""A debugging session: a swarm's code over its recorded log, at any offset, step by step.

:class:`Session` is what a notebook, a test, ``swarmlog state``/``debug``/``snapshot``, and
interactive views (a stepping TUI, a timeline) call. Everything it says is what the
*swarm's code* rebuilds from the log — the same fold as ``swarmlog replay --swarm``,
effects and LLM responses served from the log, nothing written to it:

* :meth:`Session.state` — one agent's state just before offset N (from the latest usable
  snapshot at or before N); :meth:`Session.diff` — what changed between two offsets.
* :meth:`Session.steps` / :meth:`Session.step` — the steps of a range (or an agent's K-th):
  input, handler, state before and after, outputs, divergences.
* :meth:`Session.cursor` — a :class:`Cursor` that moves forward and back one message at a
  time, or to the next / previous step matching a predicate (breakpoints).
* :meth:`Session.first_divergence` — where this code first departs from the recorded run.
* :meth:`Session.debug` — rebuild everything before a step, run that step's handler under
  the debugger, then carry on the replay.
* :meth:`Session.snapshot` — write periodic snapshots (:mod:`swarmlog.runtime.snapshots`).

``session.log`` is a :class:`~swarmlog.debug.logview.LogView` of the same topic: the
events decoded, with their causes both ways.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..agent import Swarm
from ..errors import ConfigurationError, SnapshotStale, UsageError
from ..kafka.backend import backend_for
from ..log.base import LogBackend
from ..runtime import code_version
from ..runtime.anomalies import Anomaly, LogProbe
from ..runtime.checkpoint import StateNotCapturable, capture, clean, restore
from ..runtime.outcomes import Divergence
from ..runtime.snapshots import DEFAULT_EVERY, Chosen, Ignored, SnapshotStore
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from ._debugger import HandlerTrap, Stop
from ._rebuild import AgentStep, Rebuild
from .diff import StateDiff, diff
from .index import DEFAULT_INDEX_BYTES, DEFAULT_INDEX_EVERY, AgentIndex
from .logview import LoggedEvent, LogView

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentState:
    """An agent's state just before offset ``at``, as the swarm's code rebuilds it."""

    agent: str
    at: int
    state: dict[str, Any]
    steps: int
    """Handler runs of the agent before ``at``."""
    from_snapshot: int | None
    """The snapshot the fold started from (its offset), None: from offset zero."""
    ignored: list[Ignored] = field(default_factory=list)
    """Later snapshots not used (another code version, other schemas), and why."""

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "at": self.at, "state": self.state, "steps": self.steps,
                "from_snapshot": self.from_snapshot, "ignored_snapshots": [str(i) for i in self.ignored]}


@dataclass(slots=True)
class Replayed:
    """A whole replay by the session (to the end of the log, or ``end``)."""

    end: int
    states: dict[str, dict[str, Any]]
    steps: dict[str, int]
    divergences: list[Divergence]
    from_snapshot: int | None
    stops: list[Stop] = field(default_factory=list)
    """``debug``: the steps the debugger stopped at."""
    unverified_from: dict[str, int] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)
    """What the agents named instead of handling (a repeated id, an input they cannot read), in offset
    order, as ``replay --swarm`` names them (:mod:`swarmlog.runtime.anomalies`)."""

    @property
    def first_divergence(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    def to_json(self) -> dict[str, Any]:
        return {"end": self.end, "steps": self.steps, "divergences": [d.to_json() for d in self.divergences],
                "from_snapshot": self.from_snapshot, "stops": [s.to_json() for s in self.stops],
                "unverified_from": self.unverified_from, "anomalies": [a.to_json() for a in self.anomalies]}


@dataclass(frozen=True, slots=True)
class SnapshotsTaken:
    offsets: list[int]
    """The offsets snapshots were written at."""
    records: int
    skipped: dict[str, str]
    """Agent -> why none of it was written at some offset (a divergence, a state a snapshot cannot keep)."""
    from_snapshot: int | None
    end: int


class Session:
    """``swarm``'s code over the log of ``topic`` (``backend``: Kafka by default)."""

    def __init__(self, *, settings: Settings, swarm: Swarm, topic: str | None = None,
                 registry: SchemaRegistry | None = None, backend: LogBackend | None = None,
                 snapshots: bool = True, index_after: int = 0) -> None:
        """``snapshots=False``: every fold starts at offset zero (what snapshots save is measured so).
        ``index_after``: :meth:`index` an agent once :meth:`state` has been asked about it this many times
        (0: only when asked to) — what a long-lived process that answers many queries wants (the console)."""
        self.settings = settings
        self.swarm = swarm
        self.topic = topic or settings.topic
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.backend = backend_for(settings, backend, short_reads=True)
        self.decoder = Decoder(self.registry)
        self.code_version = code_version(swarm)
        self.log = LogView(settings=settings, topic=self.topic, registry=self.registry, backend=self.backend)
        self.store = SnapshotStore(backend=self.backend, topic=self.topic, registry=self.registry,
                                   code_version=self.code_version)
        self.use_snapshots = snapshots
        self._indexes: dict[str, AgentIndex] = {}
        self._index_after = index_after
        self._asked: dict[str, int] = {}
        self._probe = LogProbe(backend=self.backend, topic=self.topic)
        """Which offsets hold a message, asked of the log once each for every fold of this session."""

    @property
    def agents(self) -> list[str]:
        return list(self.swarm.agent_names)

    def _check_agent(self, agent: str) -> None:
        if agent not in self.swarm.agent_names:
            raise ConfigurationError(f"swarm {self.swarm.name!r} has no agent {agent!r} "
                                     f"(agents: {', '.join(self.swarm.agent_names)})")

    # -- folds ---------------------------------------------------------------------------------

    def _choose(self, agents: list[str], before: int | None,
                fits: Callable[[dict[str, dict[str, Any]]], bool] | None = None) -> Chosen:
        if not self.use_snapshots:
            return Chosen(at=None, folds={}, last=None, ignored=[])
        chosen = self.store.choose(agents=agents, before=before if before is not None else 2**62, fits=fits)
        if chosen.ignored:
            # Never silently: a snapshot of other code or other schemas would hold a state this code
            # would not have built, so it is skipped — and said.
            logger.warning("%d snapshot(s) later than the one used were not used: %s%s", len(chosen.ignored),
                           "; ".join(str(i) for i in chosen.ignored[:3]), " ..." if len(chosen.ignored) > 3 else "")
        return chosen

    @contextmanager
    def _rebuild(self, agents: list[str], before: int | None,
                 fits: Callable[[dict[str, dict[str, Any]]], bool] | None = None, *,
                 check_states: bool = True) -> Iterator[Rebuild]:
        """``agents`` rebuilt from the latest usable snapshot at or before ``before``."""
        chosen = self._choose(agents, before, fits)
        rebuild = Rebuild(backend=self.backend, topic=self.topic, swarm=self.swarm, decoder=self.decoder,
                          agents=agents, starts=chosen.folds, last=chosen.last, check_states=check_states,
                          probe=self._probe)
        rebuild.chosen = chosen  # type: ignore[attr-defined]
        try:
            yield rebuild
        finally:
            rebuild.close()

    def _run(self, agents: list[str], before: int | None, body: Callable[[Rebuild], Any],
             fits: Callable[[dict[str, dict[str, Any]]], bool] | None = None, *, check_states: bool = True) -> Any:
        """``body`` of a rebuild of ``agents``; ``check_states=False`` for the queries that return states
        and never divergences (``state``, ``states``, ``diff``): what a state is does not depend on
        comparing it with its recorded digest, and not comparing spares reading ahead to the digests."""
        try:
            with self._rebuild(agents, before, fits, check_states=check_states) as rebuild:
                return body(rebuild)
        except SnapshotStale as exc:
            logger.warning("%s; folding %s from offset zero instead", exc, ", ".join(agents))
            previous, self.use_snapshots = self.use_snapshots, False
            try:
                with self._rebuild(agents, before, fits, check_states=check_states) as rebuild:
                    return body(rebuild)
            finally:
                self.use_snapshots = previous

    # -- travel in time -----------------------------------------------------------------------

    def index(self, agent: str, *, every: int = DEFAULT_INDEX_EVERY,
              max_bytes: int = DEFAULT_INDEX_BYTES) -> AgentIndex:
        """Fold ``agent`` once from offset zero to the end of the log, keeping its fold every ``every``
        offsets in memory (:mod:`swarmlog.debug.index`): later :meth:`state` calls of this agent at an
        offset before that end fold at most ``every`` offsets of tail. Costs one fold from zero (what a
        query without snapshots costs); it holds at most ``max_bytes`` of captures, plus the step ids its
        fold remembered and a bit per offset (``AgentIndex.memory``). Call it again to cover what the
        log gained since."""
        self._check_agent(agent)
        if every < 1:
            raise UsageError("an index keeps a capture every 1 offset at least")
        built = AgentIndex(agent=agent, every=every, max_bytes=max_bytes, probe=self._probe)
        with Rebuild(backend=self.backend, topic=self.topic, swarm=self.swarm, decoder=self.decoder, agents=[agent],
                     check_states=False, probe=self._probe) as rebuild:
            core = rebuild.cores[agent]
            built.recording(core)
            due = every
            for m in rebuild.messages():
                off = m.offset()
                if off >= due and rebuild.last_message is not None:
                    built.keep(core, at=off, last=rebuild.last_message)
                    due = off + built.every
                rebuild.apply(m)
            built.finish(core, end=rebuild.position)
        self._indexes[agent] = built
        logger.info("index of %s: %d captures to offset %d (%s)", agent, built.memory.captures, built.end,
                    built.memory.to_json())
        return built

    def _index_when_asked(self, agent: str) -> None:
        if not self._index_after or agent in self._indexes:
            return
        asked = self._asked[agent] = self._asked.get(agent, 0) + 1
        if asked >= self._index_after:
            logger.info("%s asked about %d times: indexing it (one fold from offset zero)", agent, asked)
            self.index(agent)

    def _state_from_index(self, agent: str, at: int) -> AgentState | None:
        """``state`` from the session's index of ``agent`` (None: no index covers ``at``)."""
        idx = self._indexes.get(agent)
        start = idx.start(at) if idx is not None else None
        if idx is None or start is None:
            return None
        base, doc, last = start
        try:
            with Rebuild(backend=self.backend, topic=self.topic, swarm=self.swarm, decoder=self.decoder,
                         agents=[agent], starts={agent: doc}, last=last, check_states=False,
                         probe=idx.held) as rebuild:
                idx.share(rebuild.cores[agent], at=base)
                rebuild.run_to(at)
                return AgentState(agent=agent, at=at, state=rebuild.state(agent), steps=rebuild.cores[agent].steps,
                                  from_snapshot=base)
        except SnapshotStale as exc:
            # The log no longer holds what the index folded (the topic was made again): forget it.
            logger.warning("%s; the session's index of %s is dropped", exc, agent)
            del self._indexes[agent]
            return None

    def state(self, agent: str, *, at: int) -> AgentState:
        """``agent``'s state just before offset ``at`` (past the end: at the end of the log)."""
        self._check_agent(agent)
        if self.use_snapshots:
            self._index_when_asked(agent)
            kept = self._state_from_index(agent, at)
            if kept is not None:
                return kept

        def body(rebuild: Rebuild) -> AgentState:
            rebuild.run_to(at)
            chosen: Chosen = rebuild.chosen  # type: ignore[attr-defined]
            return AgentState(agent=agent, at=at, state=rebuild.state(agent), steps=rebuild.cores[agent].steps,
                              from_snapshot=chosen.at, ignored=chosen.ignored)

        return self._run([agent], at, body, check_states=False)

    def states(self, *, at: int) -> dict[str, AgentState]:
        """Every agent's state just before ``at``."""

        def body(rebuild: Rebuild) -> dict[str, AgentState]:
            rebuild.run_to(at)
            chosen: Chosen = rebuild.chosen  # type: ignore[attr-defined]
            return {a: AgentState(agent=a, at=at, state=rebuild.state(a), steps=rebuild.cores[a].steps,
                                  from_snapshot=chosen.at, ignored=chosen.ignored) for a in rebuild.names}

        return self._run(self.agents, at, body, check_states=False)

    def diff(self, agent: str, start: int, end: int) -> StateDiff:
        """What changed in ``agent``'s state from just before ``start`` to just before ``end``."""
        self._check_agent(agent)
        if end < start:
            raise UsageError(f"--diff {start} {end}: the second offset must not be before the first")
        if self.use_snapshots:
            self._index_when_asked(agent)
            first = self._state_from_index(agent, start)
            last = self._state_from_index(agent, end) if first is not None else None
            if first is not None and last is not None:
                return StateDiff(agent=agent, start=start, end=end, before=first.state, after=last.state,
                                 changes=diff(first.state, last.state), steps=last.steps - first.steps)

        def body(rebuild: Rebuild) -> StateDiff:
            rebuild.run_to(start)
            before, steps0 = rebuild.state(agent), rebuild.cores[agent].steps
            rebuild.run_to(end)
            after = rebuild.state(agent)
            return StateDiff(agent=agent, start=start, end=end, before=before, after=after,
                             changes=diff(before, after), steps=rebuild.cores[agent].steps - steps0)

        return self._run([agent], start, body, check_states=False)

    def steps(self, *, start: int = 0, end: int | None = None, agent: str | None = None) -> list[AgentStep]:
        """Every step of ``[start, end)`` (of one agent, or all), in offset order."""
        agents = [agent] if agent is not None else self.agents
        if agent is not None:
            self._check_agent(agent)

        def body(rebuild: Rebuild) -> list[AgentStep]:
            rebuild.run_to(start)
            out: list[AgentStep] = []
            rebuild.run_to(end, observe=out.extend)
            return out

        return self._run(agents, start, body)

    def step(self, agent: str, number: int) -> AgentStep:
        """``agent``'s ``number``-th handler run (1 = its first)."""
        self._check_agent(agent)
        if number < 1:
            raise UsageError("steps are counted from 1")

        def body(rebuild: Rebuild) -> AgentStep:
            for m in rebuild.messages():
                for s in rebuild.apply(m, observe=rebuild.cores[agent].steps == number - 1):
                    if s.agent == agent and s.number == number:
                        return s
            raise UsageError(f"agent {agent!r} ran {rebuild.cores[agent].steps} handler(s) in this log, "
                             f"not {number}")

        return self._run([agent], None, body, fits=lambda folds: folds[agent]["steps"] < number)

    def cursor(self, *, at: int = 0, checkpoint_every: int = 200) -> Cursor:
        """A :class:`Cursor` with every agent's state just before ``at``. Close it when done."""
        return Cursor(self, at=at, checkpoint_every=checkpoint_every)

    # -- whole replays ------------------------------------------------------------------------

    def replay(self, *, to: int | None = None) -> Replayed:
        """Every agent to ``to`` (default: the end of the log), with every divergence found."""
        return self._replay(to=to, before=to)

    def first_divergence(self) -> Divergence | None:
        """Where this code first departs from what the log recorded (None: nowhere)."""
        return self.replay().first_divergence

    def _replay(self, *, to: int | None, before: int | None, traps: Callable[[Rebuild], list[HandlerTrap]]
                | None = None, fits: Callable[[dict[str, dict[str, Any]]], bool] | None = None) -> Replayed:
        def body(rebuild: Rebuild) -> Replayed:
            armed = traps(rebuild) if traps is not None else []
            rebuild.run_to(to)
            if rebuild.ended:
                rebuild.finish()
            chosen: Chosen = rebuild.chosen  # type: ignore[attr-defined]
            return Replayed(end=rebuild.position, states={a: rebuild.state(a) for a in rebuild.names},
                            steps={a: c.steps for a, c in rebuild.cores.items()}, divergences=rebuild.divergences(),
                            from_snapshot=chosen.at, stops=[s for t in armed for s in t.stops],
                            unverified_from={a: c.unverified for a, c in rebuild.cores.items()
                                             if c.unverified is not None},
                            anomalies=sorted((a for c in rebuild.cores.values() for a in c.watch.anomalies),
                                             key=lambda a: (a.offset, a.agent)))

        return self._run(self.agents, before, body, fits)

    def debug(self, *, at: int | None = None, agent: str | None = None, step: int | None = None,
              divergence: bool = False, to: int | None = None,
              on_stop: Callable[[Stop], None] | None = None) -> Replayed:
        """Rebuild everything before the chosen step, run its handler under the debugger, carry on.

        The step: the handler(s) of offset ``at`` (of ``agent`` only, if given); or ``agent``'s
        ``step``-th handler run; or, with ``divergence``, the step where the code first departs
        from the log. The debugger is ``breakpoint()``'s (pdb unless ``PYTHONBREAKPOINT`` says
        otherwise); it stops at the handler's first line. Leaving it carries on the replay, to
        ``to`` or the end of the log. ``on_stop`` is told each step just before the debugger takes over.
        """
        chosen_modes = sum(x for x in (at is not None, step is not None, divergence))
        if chosen_modes != 1:
            raise UsageError("debug one step: give --at OFFSET, --agent A --step K, or --divergence")
        if agent is not None:
            self._check_agent(agent)
        if divergence:
            first = self.first_divergence()
            if first is None:
                raise UsageError(f"this code ({self.code_version}) does not diverge from the log: there is no "
                                 f"divergence to stop at")
            at, agent = first.offset, first.agent
        if step is not None:
            if agent is None:
                raise UsageError("--step K counts one agent's handler runs: give --agent too")
            k, who = step, agent

            def traps(rebuild: Rebuild) -> list[HandlerTrap]:
                return [HandlerTrap(rebuild.cores[who], when=lambda _off, n: n == k, on_stop=on_stop)]

            return self._replay(to=to, before=None, traps=traps, fits=lambda folds: folds[who]["steps"] < k)
        target = at
        names = [agent] if agent is not None else self.agents

        def traps_at(rebuild: Rebuild) -> list[HandlerTrap]:
            return [HandlerTrap(rebuild.cores[n], when=lambda off, _n: off == target, on_stop=on_stop) for n in names]

        return self._replay(to=to, before=at, traps=traps_at)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, *, every: int = DEFAULT_EVERY, to: int | None = None) -> SnapshotsTaken:
        """Fold every agent from the latest usable snapshot to ``to`` (the end of the log), keeping
        a snapshot of each agent at every multiple of ``every``."""
        if every < 1:
            raise UsageError("--every must be at least 1")

        def body(rebuild: Rebuild) -> SnapshotsTaken:
            chosen: Chosen = rebuild.chosen  # type: ignore[attr-defined]
            last_at = chosen.at if chosen.at is not None else 0
            offsets: list[int] = []
            records = 0
            skipped: dict[str, str] = {}
            for m in rebuild.messages(to):
                boundary = (m.offset() // every) * every
                if boundary > last_at and rebuild.last_message is not None:
                    docs = {}
                    for name, core in rebuild.cores.items():
                        if not clean(core):
                            skipped[name] = "its fold diverged from the log or could not be checked"
                            continue
                        try:
                            docs[name] = capture(core)
                        except StateNotCapturable as exc:
                            skipped[name] = str(exc)
                    if docs:
                        records += self.store.write(at=boundary, folds=docs, last=rebuild.last_message)
                        offsets.append(boundary)
                    last_at = boundary
                rebuild.apply(m)
            return SnapshotsTaken(offsets=offsets, records=records, skipped=skipped, from_snapshot=chosen.at,
                                  end=rebuild.position)

        return self._run(self.agents, to, body)


class Cursor:
    """A place in the log with every agent's state just before it, moving one message at a time.

    ``forward()`` folds the next message and returns the steps it made; ``back()`` returns to
    before the last message folded (restoring an in-memory checkpoint and re-folding the few
    messages after it, which it keeps); ``next_step``/``prev_step`` move to the next/previous
    step that matches (an agent, an event type, any predicate: breakpoints).
    """

    def __init__(self, session: Session, *, at: int, checkpoint_every: int) -> None:
        self.session = session
        self._every = max(1, checkpoint_every)
        self._ctx = session._rebuild(session.agents, at)
        self._rebuild = self._ctx.__enter__()
        self._rebuild.run_to(at)
        self._origin = at
        self._history: list[tuple[Any, list[AgentStep]]] = []
        """Every message folded since the start, with the steps it made."""
        self._index = 0
        """How many of ``_history`` are folded now."""
        self._checkpoints: dict[int, dict[str, dict[str, Any]]] = {0: self._capture()}
        self._messages = self._rebuild.messages()

    def _capture(self) -> dict[str, dict[str, Any]]:
        return {name: capture(core) for name, core in self._rebuild.cores.items()}

    @property
    def position(self) -> int:
        """Every message before this offset is folded."""
        if self._index == 0:
            return self._origin
        return int(self._history[self._index - 1][0].offset()) + 1

    @property
    def last_steps(self) -> list[AgentStep]:
        """The steps the last message folded made."""
        return self._history[self._index - 1][1] if self._index else []

    @property
    def last_event(self) -> LoggedEvent | None:
        """The last message folded, decoded — whether or not any agent handled it (None: none yet)."""
        if self._index == 0:
            return None
        return self.session.log.read(self._history[self._index - 1][0])

    @property
    def origin(self) -> int:
        """Where this cursor started: :meth:`back` goes no further (open another cursor to)."""
        return self._origin

    def state(self, agent: str) -> dict[str, Any]:
        return self._rebuild.state(agent)

    def states(self) -> dict[str, dict[str, Any]]:
        return {a: self._rebuild.state(a) for a in self._rebuild.names}

    def divergences(self) -> list[Divergence]:
        return self._rebuild.divergences()

    def forward(self) -> list[AgentStep] | None:
        """Fold the next message; its steps (possibly none). None at the end of the log."""
        if self._index < len(self._history):
            m, steps = self._history[self._index]
            self._rebuild.apply(m)
        else:
            m = next(self._messages, None)
            if m is None:
                return None
            steps = self._rebuild.apply(m, observe=True)
            self._history.append((m, steps))
        self._index += 1
        if self._index % self._every == 0 and self._index not in self._checkpoints:
            self._checkpoints[self._index] = self._capture()
        return steps

    def back(self) -> bool:
        """Un-rebuild the last message folded; False at the start."""
        if self._index == 0:
            return False
        self._rewind(self._index - 1)
        return True

    def _rewind(self, target: int) -> None:
        """Back to ``target`` messages of the history folded: one checkpoint restored, at most
        ``checkpoint_every`` messages folded again, however far back ``target`` is."""
        base = max(k for k in self._checkpoints if k <= target)
        rebuild = self._rebuild
        for name, doc in self._checkpoints[base].items():
            core = rebuild._core(next(a for a in self.session.swarm.agents() if a.name == name))
            restore(core, doc)
            rebuild.cores[name] = core
        rebuild._last_json.clear()
        for m, _ in self._history[base:target]:
            rebuild.apply(m)
        self._index = target

    @property
    def folded(self) -> list[tuple[int, list[AgentStep]]]:
        """Every message this cursor has folded up to its position: (offset, the steps it made), in order."""
        return [(int(m.offset()), steps) for m, steps in self._history[: self._index]]

    def goto(self, offset: int) -> None:
        """Move to just before ``offset`` (within what this cursor has read, or forward)."""
        if self.position > offset and self._index > 0:
            # Back in one move: the history's offsets are ordered, so the target is a bisection away.
            target = bisect_left(self._history, offset, hi=self._index, key=lambda h: int(h[0].offset()))
            self._rewind(target)
        while self.position < offset:
            # Look at the next message before folding it: past a gap (a transaction marker) the
            # position is still below ``offset`` while the next message already lies at or after it.
            if self._index < len(self._history):
                nxt: int | None = self._history[self._index][0].offset()
            else:
                nxt = self._rebuild.next_offset()
            if nxt is None or nxt >= offset:
                break
            if self.forward() is None:
                break

    def next_step(self, where: Callable[[AgentStep], bool] | None = None) -> AgentStep | None:
        """Fold forward to the next step matching ``where`` (any step when None); None at the end."""
        while True:
            steps = self.forward()
            if steps is None:
                return None
            for s in steps:
                if where is None or where(s):
                    return s

    def prev_step(self, where: Callable[[AgentStep], bool] | None = None) -> AgentStep | None:
        """Move back to just before the previous step matching ``where``; None if there is none."""
        for i in range(self._index - 1, -1, -1):  # the steps are kept: look first, then move once
            for s in reversed(self._history[i][1]):
                if where is None or where(s):
                    self._rewind(i)
                    return s
        if self._index:
            self._rewind(0)
        return None

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
