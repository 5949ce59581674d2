"""The debugging engine's fold: some agents of a swarm, from offset zero or a snapshot, to any offset.

Internal; :class:`swarmlog.debug.Session` is the face. The fold is the replayer's
(``runtime._replayer``): every message, in offset order, goes through
:meth:`AgentCore.process` of every agent folded, with effects and LLM calls served from
the log and every output checked against it. Three things differ:

* **Any subset of agents, from any point.** Agents' folds are independent in a replay
  (each reads its inputs from the log, never from another agent), so ``state reviewer
  --at N`` folds the reviewer alone, from its latest snapshot at or before N.
* **Effects are looked up ahead, not indexed first.** A replayed step needs its
  recorded effects while its handler runs, and they come after its input in the log.
  The replayer indexes the whole log first; this fold reads the log once, and every
  message is scanned for the lookahead as it is read (its route, a folded agent's
  recorded step, a recorded effect). When a handler asks for an effect not seen yet, the
  fold's reader reads on — the messages it reads ahead are kept for the fold, not read
  again — only until the question is settled: the record is found, or the agent's next
  step shows it was never written (an agent's transactions commit in order, so its
  records come in step order), or the log ends. ``state --at N`` then costs the tail
  after the snapshot, read once, not the whole log.
* **Steps are observed.** Each agent's outputs pass through a tap, and the fold can
  report every step it makes (input, state before and after, outputs, divergences)
  for a stepping view.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..agent import Agent, Swarm
from ..context import Output
from ..errors import SnapshotStale, SwarmlogError
from ..events import Event
from ..guard import allowed
from ..log.base import LogBackend
from ..log.hashing import canonical
from ..log.protocol import (
    RECORDED_EFFECTS,
    Route,
    agent_group,
    parse_step,
)
from ..observe import tracing
from ..runtime._checkpoint import capture, copy_state, restore
from ..runtime._core import AgentCore, Divergence
from ..runtime._index import NO_LIVE_STEPS, OwnIndex
from ..schema.codec import Decoder

logger = logging.getLogger(__name__)

AHEAD_KEPT = 50_000
"""Messages read ahead of the fold for the lookahead and kept for the fold, at most. Past it (a
handler asking for an effect whose answer lies far on, or never comes), the lookahead reads on
with a reader of its own, :data:`LOOKAHEAD_BATCH` at a time, keeping nothing for the fold."""

TAIL_BATCH = 100
"""Messages the fold's reader asks for, and scans, at a time. ``consume(n, timeout)`` returns before
its timeout only once n messages are queued, and one fetch response of the debugger's readers
(``SHORT_READ_TUNING``, 64 KiB) holds ~200: with the replay's 5,000 a fold's reads waited out their
timeouts, tens of ms a query of ``state --at N`` (bench/README.md, "Time travel with snapshots").
Small batches also leave unrouted what a fold that stops at N never takes; the fold spends ~30 µs
a message, so a call's overhead is noise."""

LOOKAHEAD_BATCH = 500
"""Messages the lookahead's own reader reads at a time: it reads only until the asking agent's next
step shows, so a full batch (5,000) would mostly be routed for nothing."""



@dataclass(frozen=True, slots=True)
class Step:
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


class EffectLookahead:
    """Recorded effects and LLM calls, read ahead of the fold as far as a handler needs them."""

    def __init__(self, *, backend: LogBackend, topic: str, decoder: Decoder, agents: list[str], start: int) -> None:
        self.backend = backend
        self.topic = topic
        self.decoder = decoder
        self.effects: dict[str, Event] = {}
        self.max_step = {a: -1 for a in agents}
        self.done = False
        self.read_to = start
        """Every message before this offset has been scanned."""
        self.routes: dict[int, Route] = {}
        """Offset -> the route of a message read and not folded yet, for the fold to take instead of
        routing it again. The log is immutable, so an offset's route is the same whoever reads it."""
        self.tail: _Tail | None = None
        """The fold's reader (set by the fold when it opens the log): reading ahead is reading it on."""
        self._reader: Any = None
        self._batches: Iterator[list[Any]] | None = None

    def lookup(self, agent: str, event_id: str) -> Event | None:
        rec = self.effects.get(event_id)
        if rec is not None:
            return rec
        parsed = parse_step(event_id)
        if parsed is None or agent not in self.max_step:
            return None
        step = parsed[0]
        while not self.done and self.max_step[agent] <= step:
            self._read_batch()
        return self.effects.get(event_id)

    def last_step(self, agent: str) -> int:
        """The agent's highest recorded step seen so far."""
        return self.max_step.get(agent, -1)

    def scan(self, batch: list[Any], *, keep: bool = True) -> None:
        """See each message of ``batch`` (read in offset order, by the fold's reader or the own one):
        its route (kept for the fold with ``keep``), a folded agent's step, a recorded effect.
        Scanning a message again changes nothing."""
        if not batch:
            return
        max_step = self.max_step
        route = self.decoder.envelope_route
        step_of = self.decoder.step
        routes = self.routes
        for m in batch:
            # By the envelope alone, the step too (from the event id): no header is read, so none
            # can move where an agent's history ends.
            r = route(m)
            if keep:
                routes[m.offset()] = r
            etype, who, _, _ = r
            if who not in max_step:
                continue
            step = step_of(m)
            if step is not None and step > max_step[who]:
                max_step[who] = step
            if etype in RECORDED_EFFECTS:
                try:
                    writer, rec = self.decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue  # not an event: the fold reports it where it reads it
                if parse_step(rec["event_id"]) is not None:
                    self.effects[rec["event_id"]] = Event.from_message(m, writer, rec)
        self.read_to = max(self.read_to, batch[-1].offset() + 1)

    def _read_batch(self, *, keep: bool = True) -> None:
        """Read on by one batch: the fold's reader while what it holds ahead is short of
        :data:`AHEAD_KEPT` (and ``keep``), else a reader of its own from where scanning got."""
        tail = self.tail
        if keep and tail is not None and self._batches is None and len(tail) < AHEAD_KEPT:
            if not tail.scan_more():
                self.done = True
            return
        if self._batches is None:
            self._reader = self.backend.reader(self.topic)
            self._reader.assign(self.read_to)
            self._batches = self._reader.batches(batch_size=LOOKAHEAD_BATCH)
        try:
            batch = next(self._batches)
        except StopIteration:
            self.close()
            self.done = True
            return
        self.scan(batch, keep=False)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._batches = None


class _LookaheadEffects(dict):
    """``OwnIndex.effects`` of one agent, answered by the lookahead (only ``get`` is ever asked)."""

    def __init__(self, lookahead: EffectLookahead, fold: SwarmFold, agent: str) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.fold = fold
        self.agent = agent

    def get(self, event_id: str, default: Any = None) -> Any:
        # Asked from inside a handler (ctx.effect, ctx.llm), under the determinism guard: reading
        # the log ahead is swarmlog's own I/O serving the record, as running an effect live is.
        with allowed():
            rec = self.lookahead.lookup(self.agent, event_id)
            if rec is None:
                self.fold._learn_reach(self.agent)
                return default
        return rec


class SwarmFold:
    """Agents of ``swarm`` folded over ``topic``, each from its own start (zero or a checkpoint)."""

    def __init__(self, *, backend: LogBackend, topic: str, swarm: Swarm, decoder: Decoder, agents: list[str],
                 starts: dict[str, dict[str, Any]] | None = None, last: tuple[int, int] | None = None) -> None:
        """``starts``: agent -> a :func:`~swarmlog.runtime._checkpoint.capture` to resume that agent from
        (all at one position); ``last``: the (offset, crc32) of the last message folded before it, which
        the log must still hold — else :class:`SnapshotStale` (another log now has this topic's name)."""
        self.backend = backend
        self.topic = topic
        self.swarm = swarm
        self.decoder = decoder
        self.names = list(agents)
        starts = starts or {}
        start = min((doc["position"] for doc in starts.values()), default=0) if len(starts) == len(agents) else 0
        self.lookahead = EffectLookahead(backend=backend, topic=topic, decoder=decoder, agents=self.names,
                                         start=start)
        built = {a.name: a for a in swarm.agents()}
        self._tracing = tracing.current()
        self._replay = self._tracing.start_replay(by="debugger") if self._tracing is not None else None
        self.cores: dict[str, AgentCore] = {}
        self.taps: dict[str, _Tap] = {}
        self.resume: dict[str, int] = {}
        """Agent -> the offset its fold resumes at (it skips the messages before)."""
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
        self._reach_known: set[str] = set()
        self._feed: _Tail | None = None
        self._last_json: dict[str, str] = {}

    def _core(self, agent: Agent) -> AgentCore:
        index = OwnIndex(last_step=NO_LIVE_STEPS)
        core = AgentCore(agent=agent, decoder=self.decoder, index=index, live_sink=None, strict=False)
        index.effects = _LookaheadEffects(self.lookahead, self, agent.name)
        if self._tracing is not None:  # the debugger's steps are a replay: a trace of their own, marked
            core.tracer = self._tracing.step_tracer(topic=self.topic, agent=agent.name, replay=self._replay)
        tap = _Tap(core.verify_sink)
        core.verify_sink = tap  # type: ignore[assignment]
        self.taps[agent.name] = tap
        return core

    def _learn_reach(self, agent: str) -> None:
        """An effect the log does not hold: how far the live agent got decides whether that is a
        divergence or a step it never ran (its group's position, or past its last recorded step)."""
        if agent in self._reach_known:
            return
        core = self.cores[agent]
        if self.lookahead.done:
            self._reach_known.add(agent)
            committed = self.backend.committed(agent_group(self.topic, agent), self.topic)
            core.reach = max(committed if committed is not None else -1, self.lookahead.last_step(agent) + 1)

    # -- folding -------------------------------------------------------------------------------

    def apply(self, m: Any, *, observe: bool = False) -> list[Step]:
        """Fold one message into every agent that has reached it; with ``observe``, the steps it made."""
        off = m.offset()
        routes = self.lookahead.routes
        r = routes.pop(off, None) if routes else None
        if r is None:
            r = self.decoder.envelope_route(m)  # by the envelope alone: no header can steer the fold
        steps: list[Step] = []
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
            steps.append(Step(offset=off, agent=name, number=core.steps if ran else None,
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
                               scan=self.lookahead.scan)
            self.lookahead.tail = self._feed
            if check is not None:
                first = self._feed.peek()
                if first is None or first.offset() != check[0] or zlib.crc32(first.value() or b"") != check[1]:
                    raise SnapshotStale(topic=self.topic, offset=check[0])
                self._feed.pop()
        return self._feed

    def next_offset(self) -> int | None:
        """The offset of the next message :meth:`messages` would yield (None: none yet, at the end).

        Offsets are ordered, not contiguous (transaction markers): the only way to know
        that the next message lies at or past an offset is to look at it."""
        m = self._opened_feed().peek()
        return None if m is None else int(m.offset())

    def messages(self, end: int | None = None) -> Iterator[Any]:
        """The log's messages from the fold's position up to ``end`` (exclusive), read once."""
        feed = self._opened_feed()
        while True:
            m = feed.peek()
            if m is None:
                self.ended = True
                self.position = max(self.position, feed.end_offset)
                return
            if end is not None and m.offset() >= end:
                self.position = max(self.position, end)
                return
            feed.pop()
            yield m

    def run_to(self, end: int | None, *, observe: Callable[[list[Step]], None] | None = None) -> None:
        """Fold every message before ``end`` (None: to the end of the log)."""
        for m in self.messages(end):
            steps = self.apply(m, observe=observe is not None)
            if steps and observe is not None:
                observe(steps)

    def finish(self) -> None:
        """The end of the log: outputs still waiting for their record were never written."""
        while not self.lookahead.done:  # how far each live agent got decides what a pending output means
            self.lookahead._read_batch(keep=False)
        for core in self.cores.values():
            self._learn_reach(core.name)
            core.finish()

    def state(self, agent: str) -> dict[str, Any]:
        """A copy of ``agent``'s state as folded so far."""
        return copy_state(self.cores[agent].agent.state, agent=agent)

    def capture(self, agent: str) -> dict[str, Any]:
        return capture(self.cores[agent])

    def divergences(self) -> list[Divergence]:
        return sorted((d for c in self.cores.values() for d in c.divergences), key=lambda d: d.offset)

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
        self.lookahead.tail = None
        self.lookahead.close()
        if self._tracing is not None and self._replay is not None:
            replay, self._replay = self._replay, None
            self._tracing.end_replay(replay, swarm=self.swarm, divergences=self.divergences())

    def __enter__(self) -> SwarmFold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Tail:
    """The fold's reader: the log's messages from its start, one at a time, with a look at the next.

    Messages are scanned for the lookahead (``scan``) in order, a read batch (:data:`TAIL_BATCH`)
    at a time, just before the fold takes them — or sooner, when the lookahead reads ahead for an
    effect's record: then they wait here for the fold, scanned, and the tail is read from Kafka
    once. Small batches leave unrouted what a fold that stops at an offset never takes."""

    def __init__(self, backend: LogBackend, topic: str, start: int, *,
                 scan: Callable[[list[Any]], None]) -> None:
        self._reader: Any = backend.reader(topic)
        self._reader.assign(start)
        self._batches = self._reader.batches(batch_size=TAIL_BATCH)
        self._scanned: deque[Any] = deque()
        self._scan = scan
        self.done = False
        """The reader has read to the end of the log."""

    @property
    def end_offset(self) -> int:
        return int(self._reader.position.end_offset)

    def __len__(self) -> int:
        return len(self._scanned)

    def scan_more(self) -> bool:
        """Read and scan the next batch (False: every message of the log has been scanned)."""
        if self.done:
            return False
        try:
            batch = next(self._batches)
        except StopIteration:
            self.done = True
            return False
        self._scan(batch)
        self._scanned.extend(batch)
        return True

    def peek(self) -> Any:
        while not self._scanned and self.scan_more():
            pass
        return self._scanned[0] if self._scanned else None

    def pop(self) -> Any:
        return self._scanned.popleft()

    def close(self) -> None:
        self._reader.close()


def _event_of(fold: SwarmFold, m: Any) -> Event | None:
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
