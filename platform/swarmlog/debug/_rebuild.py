"""The debugger's rebuild: some agents of a swarm folded from offset zero or a snapshot to any offset.

Internal; :class:`swarmlog.debug.Session` is the face. The fold is the replayer's
(``runtime._replayer``): every message, in offset order, goes through
:meth:`~swarmlog.runtime.engine.AgentCore.process` of every agent folded, with effects and
LLM calls served from the log, every output checked against it and every step's state
against its recorded digest — the agents' recorded history read by the seam every fold reads
it by (:class:`~swarmlog.runtime.history.LogHistory`: ahead of the fold, as far as a step
needs, from offset zero or the snapshot's position). Two things differ:

* **Any subset of agents, from any point.** Agents' folds are independent in a replay
  (each reads its inputs from the log, never from another agent), so ``state reviewer
  --at N`` folds the reviewer alone, from its latest snapshot at or before N, and reads
  the log from there once: ``state --at N`` costs the tail after the snapshot (and what a
  step before N needs of its records just past N), not the whole log.
* **Steps are observed.** Each agent's outputs pass through a tap, and the fold can
  report every step it makes (input, state before and after, outputs, divergences)
  for a stepping view.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..agent import Agent, Swarm
from ..context import Output
from ..errors import SnapshotStale, SwarmlogError
from ..events import Event
from ..log.base import LogBackend
from ..log.hashing import canonical
from ..log.protocol import Route
from ..observe import tracing
from ..runtime.anomalies import LogProbe
from ..runtime.checkpoint import capture, copy_state, restore
from ..runtime.engine import AgentCore
from ..runtime.history import LogHistory
from ..runtime.outcomes import Divergence
from ..schema.codec import Decoder

logger = logging.getLogger(__name__)


TAIL_BATCH = 100
"""Messages the fold's reader asks for, and scans, at a time. ``consume(n, timeout)`` returns before
its timeout only once n messages are queued, and one fetch response of the debugger's readers
(``SHORT_READ_TUNING``, 64 KiB) holds ~200: with the replay's 5,000 a fold's reads waited out their
timeouts, tens of ms a query of ``state --at N`` (bench/README.md, "Time travel with snapshots").
Small batches also leave unrouted what a fold that stops at N never takes; a call's overhead is noise
beside the fold's own cost of a message."""


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One agent handling one offset: what it read, what it did, the state before and after."""

    offset: int
    """The offset of the input (``ctx.now()`` of the step)."""
    agent: str
    number: int | None
    """The agent's handler runs so far, this one included (``--step K`` counts these); None when no
    handler ran (a logical timer fired while the agent read an event it does not handle)."""
    event: Event | None
    """The input (None: the agent only read past it)."""
    handler: str | None
    """``Class.method`` of the handler that ran."""
    before: dict[str, Any]
    after: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    """What the code wrote in this step: event id, type, recipient, payload, causes."""
    divergences: list[Divergence] = field(default_factory=list)
    """Divergences found while this step ran (others of it may show later, when its recorded outputs arrive)."""

    def to_json(self) -> dict[str, Any]:
        e = self.event
        return {"offset": self.offset, "agent": self.agent, "number": self.number, "handler": self.handler,
                "event": None if e is None else {"event_type": e.event_type, "agent": e.agent_id, "to": e.to,
                                                 "payload": e.payload, "causes": list(e.causes)},
                "before": self.before, "after": self.after, "outputs": self.outputs,
                "divergences": [d.to_json() for d in self.divergences]}


class _Tap:
    """An agent's replayed outputs, seen on their way to the verifier."""

    __slots__ = ("inner", "outputs")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.outputs: list[Output] = []

    def write(self, out: Output, *, locate: bool) -> int | None:
        self.outputs.append(out)
        return self.inner.write(out, locate=locate)

    def recorded(self, event_id: str) -> Event | None:
        return self.inner.recorded(event_id)


class Rebuild:
    """Agents of ``swarm`` rebuilt over ``topic``, each folded from its own start (zero or a checkpoint)."""

    def __init__(self, *, backend: LogBackend, topic: str, swarm: Swarm, decoder: Decoder, agents: list[str],
                 starts: dict[str, dict[str, Any]] | None = None, last: tuple[int, int] | None = None,
                 check_states: bool = True, probe: Callable[[int], bool] | None = None) -> None:
        """``starts``: agent -> a :func:`~swarmlog.runtime.checkpoint.capture` to resume that agent from
        (all at one position); ``last``: the (offset, crc32) of the last message folded before it, which
        the log must still hold — else :class:`SnapshotStale` (another log now has this topic's name).
        ``check_states=False``: no step's state is compared with its recorded digest (a rebuild asked
        for states only: it reads no further ahead than effects need, and computes no digest)."""
        self.backend = backend
        self.topic = topic
        self.swarm = swarm
        self.decoder = decoder
        self.names = list(agents)
        starts = starts or {}
        start = min((doc["position"] for doc in starts.values()), default=0) if len(starts) == len(agents) else 0
        # By the envelope alone, as the debugger always read: no header can steer the rebuild, and a log
        # with a lying one (which a replay refuses, naming it) still opens here.
        self.history = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=self.names, start=start,
                                  check=None, check_states=check_states)
        """What the agents recorded from ``start`` on (their effects, digests, how far each got), read ahead
        of this fold through its own reader."""
        built = {a.name: a for a in swarm.agents()}
        self._tracing = tracing.current()
        self._replay = self._tracing.start_replay(by="debugger") if self._tracing is not None else None
        self.cores: dict[str, AgentCore] = {}
        self.taps: dict[str, _Tap] = {}
        self.resume: dict[str, int] = {}
        """Agent -> the offset its fold resumes at (it skips the messages before)."""
        self.probe: Callable[[int], bool] = probe or LogProbe(backend=backend, topic=topic)
        """Whether an offset holds a message, asked of the log (or of a session's index, ``probe``): see
        :meth:`_core`."""
        for name in self.names:
            core = self._core(built[name])
            if name in starts:
                restore(core, starts[name])
                self.resume[name] = core.position
            self.cores[name] = core
        self.position = start
        """Every message before this offset has been folded (by every agent that had started)."""
        self.ended = False
        self._last: Any = None  # the last message folded
        self._resumed_after = last
        self._check = last
        self._feed: _Tail | None = None
        self._next_route: tuple[int, Route] | None = None  # the route of the message messages() yielded last
        self._last_json: dict[str, str] = {}

    def _core(self, agent: Agent) -> AgentCore:
        core = AgentCore(agent=agent, decoder=self.decoder, history=self.history.agent(agent.name), live_sink=None,
                         strict=False, topic=self.topic)
        # A core restored from a snapshot or a cursor's checkpoint knows which offsets held messages only
        # from there on: a cause before is asked of the log, so a hole is found as from offset zero.
        core.watch.presence.before = self.probe
        if self._tracing is not None:  # the debugger's steps are a replay: a trace of their own, marked
            core.tracer = self._tracing.step_tracer(topic=self.topic, agent=agent.name, replay=self._replay)
        tap = _Tap(core.verify_sink)
        core.verify_sink = tap  # type: ignore[assignment]
        self.taps[agent.name] = tap
        return core

    # -- folding -------------------------------------------------------------------------------

    def apply(self, m: Any, *, observe: bool = False) -> list[AgentStep]:
        """Fold one message into every agent that has reached it; with ``observe``, the steps it made."""
        off = m.offset()
        nxt = self._next_route
        self._next_route = None
        if nxt is not None and nxt[0] == off:
            r = nxt[1]  # routed as the history scanned it
        else:
            r = self.decoder.envelope_route(m)  # a message folded again (a cursor going back)
        steps: list[AgentStep] = []
        resume = self.resume
        for name, core in self.cores.items():
            if resume and off < resume.get(name, 0):
                continue
            if not observe:
                core.process(m, r)
                continue
            tap = self.taps[name]
            tap.outputs.clear()
            n_steps, n_div = core.steps, len(core.divergences)
            before = self._last_json.get(name)
            if before is None:
                before = self._last_json[name] = canonical(copy_state(core.agent.state, agent=name))
            core.process(m, r)
            if core.steps == n_steps and not tap.outputs:
                continue
            after = canonical(copy_state(core.agent.state, agent=name))
            self._last_json[name] = after
            ran = core.steps > n_steps
            event = _event_of(self, m) if ran or tap.outputs else None
            handler = None
            if ran and event is not None:
                fn = core.agent.handler_for(event)
                handler = getattr(getattr(fn, "__wrapped__", fn), "__qualname__", None)
            steps.append(AgentStep(offset=off, agent=name, number=core.steps if ran else None,
                              event=event if ran else None, handler=handler,
                              before=_loads(before), after=_loads(after),
                              outputs=[_out_json(o) for o in tap.outputs],
                              divergences=list(core.divergences[n_div:])))
        self.position = off + 1
        self._last = m
        return steps

    @property
    def last_message(self) -> tuple[int, int] | None:
        """(offset, crc32 of the value) of the last message folded: what a snapshot taken now checks on resume."""
        m = self._last
        if m is None:
            return self._resumed_after
        return m.offset(), zlib.crc32(m.value() or b"")

    def _opened_feed(self) -> _Tail:
        if self._feed is None:
            check = self._check
            self._feed = _Tail(self.backend, self.topic, check[0] if check is not None else self.position,
                               history=self.history)
            if check is not None:
                head = self._feed.peek()
                first = head[0] if head is not None else None
                if first is None or first.offset() != check[0] or zlib.crc32(first.value() or b"") != check[1]:
                    raise SnapshotStale(topic=self.topic, offset=check[0])
                self._feed.pop()
        return self._feed

    def next_offset(self) -> int | None:
        """The offset of the next message :meth:`messages` would yield (None: none yet, at the end).

        Offsets are ordered, not contiguous (transaction markers): the only way to know
        that the next message lies at or past an offset is to look at it."""
        head = self._opened_feed().peek()
        return None if head is None else int(head[0].offset())

    def messages(self, end: int | None = None) -> Iterator[Any]:
        """The log's messages from the fold's position up to ``end`` (exclusive), read once."""
        feed = self._opened_feed()
        while True:
            head = feed.peek()
            if head is None:
                self.ended = True
                self.position = max(self.position, feed.end_offset)
                return
            m, r = head
            if end is not None and m.offset() >= end:
                self.position = max(self.position, end)
                return
            feed.pop()
            self._next_route = (m.offset(), r)
            yield m

    def run_to(self, end: int | None, *, observe: Callable[[list[AgentStep]], None] | None = None) -> None:
        """Fold every message before ``end`` (None: to the end of the log)."""
        for m in self.messages(end):
            steps = self.apply(m, observe=observe is not None)
            if steps and observe is not None:
                observe(steps)

    def finish(self) -> None:
        """The end of the log: outputs still waiting for their record were never written."""
        self.history.read_to_end()  # how far each live agent got decides what a pending output means
        for core in self.cores.values():
            core.finish()

    def state(self, agent: str) -> dict[str, Any]:
        """A copy of ``agent``'s state as folded so far."""
        return copy_state(self.cores[agent].agent.state, agent=agent)

    def capture(self, agent: str) -> dict[str, Any]:
        return capture(self.cores[agent])

    def divergences(self) -> list[Divergence]:
        return sorted((d for c in self.cores.values() for d in c.divergences), key=Divergence.sort_key)

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
        self.history.close()
        if self._tracing is not None and self._replay is not None:
            replay, self._replay = self._replay, None
            self._tracing.end_replay(replay, swarm=self.swarm, divergences=self.divergences())

    def __enter__(self) -> Rebuild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Tail:
    """The fold's reader: the log's messages from its start, each with its route, one at a time, with a
    look at the next.

    Read :data:`TAIL_BATCH` at a time through the history (:meth:`LogHistory.batches`), which scans
    each batch just before the fold takes it — or sooner, when a step needs a record further on:
    then the batches it read ahead wait there for the fold, scanned, and the log is read once.
    Small batches leave unrouted what a fold that stops at an offset never takes."""

    def __init__(self, backend: LogBackend, topic: str, start: int, *, history: LogHistory) -> None:
        self._reader: Any = backend.reader(topic)
        self._reader.assign(start)
        self._batches = history.batches(self._reader.batches(batch_size=TAIL_BATCH))
        self._batch: list[Any] = []
        self._routes: list[Route] = []
        self._i = 0

    @property
    def end_offset(self) -> int:
        return int(self._reader.position.end_offset)

    def peek(self) -> tuple[Any, Route] | None:
        """The next message and its route (None: the end of the log)."""
        while self._i >= len(self._batch):
            nxt = next(self._batches, None)
            if nxt is None:
                return None
            self._batch, self._routes = nxt
            self._i = 0
        return self._batch[self._i], self._routes[self._i]

    def pop(self) -> None:
        self._i += 1

    def close(self) -> None:
        self._reader.close()


def _event_of(fold: Rebuild, m: Any) -> Event | None:
    try:
        writer, rec = fold.decoder.decode(m.value(), m.offset())
    except SwarmlogError:
        return None
    return Event.from_message(m, writer, rec)


def _loads(text: str) -> dict[str, Any]:
    import json

    return json.loads(text)


def _out_json(o: Output) -> dict[str, Any]:
    return {"event_id": o.event_id, "event_type": o.event_type, "to": o.to, "payload": o.payload,
            "causes": list(o.causes)}
