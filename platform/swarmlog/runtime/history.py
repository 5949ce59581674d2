"""An agent's recorded history as its fold needs it: the one seam between the log and every fold.

A replayed step must be told what its agent recorded for it, and all of it lies in the log
*after* the step's input: the effects and LLM calls it made (by event id, served to the
handler while it runs) and the digest of the state it left (compared right after it). A live
agent must also know where its history ends (past its last recorded step, a step runs live),
and a replay whether the live agent ever got to a step (a step it never ran cannot be checked:
unverified, not divergent). :class:`RecordedHistory` is all an
:class:`~swarmlog.runtime.engine.AgentCore` asks; :class:`LogHistory` is the one reader that
answers it, for every fold:

* **A first pass** (:func:`first_pass`): the live worker (``_worker``) and a restarted
  simulated agent (:mod:`.driven`). A live agent must know where its history ends before its
  first step, so it reads everything first.
* **Ahead of the fold** (:meth:`LogHistory.batches`): the swarm replay (``_replayer``, split
  across processes by ``_processes``) and the debugger (:mod:`swarmlog.debug`: ``Session``,
  ``swarmlog debug``, ``state --at``, the stepper). The fold's own reader is scanned as it
  reads, and read ahead only as far as a step needs: every message is read once.

Either way from offset zero or from a **checkpoint's position** (``start``: the debugger's
snapshots today; a live agent or a swarm replay started from a verified checkpoint is the same
parameter, not another reader: a checkpoint holds everything its agent recorded before its
position, and this reads what it recorded from there on), and never past a **cut** (``end``).

How it reads ahead:

* **Scanned as read.** Each batch is scanned before the fold takes it: every message's
  route, its routing headers checked against its envelope
  (:meth:`~swarmlog.schema.codec.Decoder.route`: a lying header is a
  :class:`~swarmlog.errors.RoutingHeaderMismatch`; the debugger routes by the envelope alone,
  reading no header), each agent's highest recorded step, its recorded effects and state
  digests. The fold routes by the routes the scan computed: each message is routed once.
* **Read ahead only as far as a step needs.** Before a replayed step at offset X of agent A
  looks up an effect, :meth:`LogHistory.settle` reads on, keeping what it reads for the fold,
  until an A record of a later step shows (A's records come in step order: its transactions
  commit in order) or A's digest record of X or later; before it looks up its digest, until
  that digest record shows (the last record of the transaction that holds X, after every step
  of it). In a live run's log that is the end of the batch A consumed with X, so the fold's own
  reading nearly always gets there first. An agent that records no digests
  (``SWARMLOG_STATE_DIGEST_EVERY=0``, an old log) makes the history scan on to the end once,
  as a first pass would have.
* **Memory is bounded.** Past :data:`AHEAD_KEPT` messages kept ahead (an agent whose next
  record is far on, or never comes), the history scans on with a reader of its own from where
  scanning got, keeping nothing; the fold's reader reads those messages again later, and
  scanning them again changes nothing (only their routes are computed).
* **Exact at a cut.** Nothing at or past ``end`` is scanned: a replay cut at N computes the
  prefix's state alone, however long the log has grown since. What lies past the cut is only
  *looked at*, by :func:`steps_past`: which steps have outputs there, so that a step whose
  outputs the cut left out is reported unverified rather than as a divergence.

What a fold is told does not depend on how the history was read (first or ahead, which reader,
how far ahead): ``tests/unit/test_recorded_history.py`` holds the two ways equal on the same
logs, and ``tests/unit/test_fold_contract.py`` every fold's first divergence.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Protocol

from ..errors import SwarmlogError
from ..events import Event
from ..guard import allowed
from ..log.base import BATCH, LogBackend
from ..log.protocol import H_STEP, HISTORY_RECORDS, STATE_DIGEST, Headers, Route, agent_group, parse_step
from ..schema.codec import Decoder
from .digests import DigestRecord, RecordedDigests

logger = logging.getLogger(__name__)

__all__ = [
    "AHEAD_BATCH",
    "AHEAD_KEPT",
    "NO_LIVE_STEPS",
    "AgentHistory",
    "LogHistory",
    "NoHistory",
    "RecordedHistory",
    "first_pass",
    "steps_past",
]

NO_LIVE_STEPS = sys.maxsize
"""``last_step`` of a replay's history (the swarm replayer's, the debugger's): every recorded output
is history, nothing runs live. Also a live history's :meth:`~RecordedHistory.reach`: the live agent
is the one running."""

AHEAD_KEPT = 50_000
"""Messages read ahead of the fold and kept for it, at most; past it, the history reads on alone."""

AHEAD_BATCH = 500
"""Messages the history's own reader reads at a time while a fold waits: it reads only until the
asking agent's next record shows, so a replay's full batch would mostly be scanned for nothing."""


class RecordedHistory(Protocol):
    """What one agent's fold (:class:`~swarmlog.runtime.engine.AgentCore`) asks of what the agent recorded."""

    last_step: int
    """Steps at or below it are history, replayed and checked; above it a live agent runs live. A replay's
    is :data:`NO_LIVE_STEPS`. An attribute: the live path reads it for every own output it reads back."""

    def effect(self, event_id: str) -> Event | None:
        """The recorded effect or LLM call with this id (None: the log holds none)."""

    def digest_at(self, step: int) -> bytes | None:
        """The recorded digest of the state after ``step`` (None: none recorded; digests off, K > 1, ...)."""

    @property
    def last_digest(self) -> DigestRecord | None:
        """The agent's latest ``state.digest`` record (the greatest position)."""

    @property
    def digests_recorded(self) -> int:
        """Per-step digests read so far."""

    def reach(self) -> int:
        """How far (exclusive) the live agent is known to have got: its group's committed offset, or past
        its last recorded step, whichever is further (:data:`NO_LIVE_STEPS` in a live history)."""

    def past_cut(self, step: int) -> bool:
        """``step`` has outputs past a replay's cut: what they were cannot be read, so what the step
        writes now cannot be checked."""


class NoHistory:
    """The history of an agent that has recorded nothing yet: a new run's first life (the simulator's)."""

    __slots__ = ("last_step",)

    def __init__(self) -> None:
        self.last_step = -1

    def effect(self, event_id: str) -> Event | None:
        return None

    def digest_at(self, step: int) -> bytes | None:
        return None

    @property
    def last_digest(self) -> DigestRecord | None:
        return None

    @property
    def digests_recorded(self) -> int:
        return 0

    def reach(self) -> int:
        return NO_LIVE_STEPS

    def past_cut(self, step: int) -> bool:
        return False


class AgentHistory:
    """One agent's :class:`RecordedHistory`, answered by a :class:`LogHistory` (made by :meth:`LogHistory.agent`)."""

    __slots__ = ("name", "last_step", "_log", "_effects", "digests", "_past", "_past_top", "_committed")

    def __init__(self, log: LogHistory, name: str, *, past: Collection[int], committed: int | None) -> None:
        self.name = name
        self.last_step = -1 if log.live else NO_LIVE_STEPS
        """A live history's is set by the first pass (:meth:`LogHistory.read_to_end`)."""
        self._log = log
        self._effects = log.effects
        self.digests = RecordedDigests()
        """The agent's recorded per-step digests, as scanned so far."""
        self._past = frozenset(past)
        self._past_top = max(self._past, default=-1)
        self._committed = committed  # None: not asked of the group yet

    def effect(self, event_id: str) -> Event | None:
        rec = self._effects.get(event_id)
        if rec is not None:
            return rec
        log = self._log
        if log.done:
            return None
        parsed = parse_step(event_id)
        if parsed is None:
            return None
        # Asked from inside a handler, under the determinism guard: reading the log on is
        # swarmlog's own I/O serving the record, as running an effect live is.
        with allowed():
            log.settle(self.name, parsed[0])
        return self._effects.get(event_id)

    def digest_at(self, step: int) -> bytes | None:
        log = self._log
        if not log.check_states:
            return None
        if not log.done and log.digested_to[self.name] < step:
            with allowed():
                log.settle(self.name, step, digest=True)
        return self.digests.at(step)

    @property
    def last_digest(self) -> DigestRecord | None:
        return self.digests.last

    @property
    def digests_recorded(self) -> int:
        return len(self.digests)

    def reach(self) -> int:
        log = self._log
        if log.live:
            return NO_LIVE_STEPS
        committed = self._committed
        if committed is None:
            committed = self._committed = log.committed_position(self.name)
        return max(committed, max(log.max_step[self.name], self._past_top) + 1)

    def past_cut(self, step: int) -> bool:
        return step in self._past


class LogHistory:
    """What ``agents`` recorded in ``topic``, read once: by a first pass or ahead of a fold (see the module)."""

    def __init__(self, *, backend: LogBackend, topic: str, decoder: Decoder, agents: Collection[str],
                 live: bool = False, start: int = 0, end: int | None = None,
                 check: tuple[int, int] | None = (0, 1),
                 past: Mapping[str, Collection[int]] | None = None,
                 committed: Mapping[str, int] | None = None, check_states: bool = True) -> None:
        """``live``: the agents run live past their last recorded step (a first pass first), else every step is history
        (a replay). ``start``: the offset to read from (0, or a checkpoint's position); ``end``: a cut
        (nothing at or past it is read). ``check``: ``(k, n)``, the routing headers of the messages whose
        offset is k modulo n are checked against their envelopes; the others are routed by their envelopes
        alone — for n folds of the same log side by side, each checking its own share (``_replayer``'s
        processes), so that every header is checked once and a lie anywhere fails the replay. ``check=None``:
        every message routed by its envelope alone, no header read (so none can steer the fold, and none is
        checked: the debugger, which opens a log whatever its headers say). ``past``: per agent, the steps
        with outputs past the cut (:func:`steps_past`). ``committed``: per agent, its group's committed offset
        (-1: none), when the caller asked already; else the group is asked when a step's record is missing.
        ``check_states=False``: no step's digest is given (:meth:`AgentHistory.digest_at` is None), so the
        fold compares no state — for a fold asked for states, not for where they depart (the debugger's
        ``state --at``), which then reads no further than a step's effects need."""
        self.backend = backend
        self.topic = topic
        self.decoder = decoder
        self.live = live
        self.end = end
        self.check_states = check_states
        self.max_step: dict[str, int] = dict.fromkeys(agents, -1)
        """Agent -> its highest recorded step scanned so far (outputs, effects, digest records)."""
        self.digested_to: dict[str, int] = dict.fromkeys(agents, -1)
        """Agent -> the last step of its latest digest record scanned so far."""
        self.effects: dict[str, Event] = {}
        """Event id -> the recorded effect or LLM call with that id (every agent's: ids name their agent)."""
        past = past or {}
        self._agents = {name: AgentHistory(self, name, past=past.get(name, ()),
                                           committed=committed.get(name) if committed is not None else None)
                        for name in agents}
        self.read_to = start
        """Every message from ``start`` up to this offset has been scanned."""
        self.end_offset = start
        """Where the history's own reader stopped, past any transaction markers (:meth:`read_to_end`)."""
        self.done = False
        """Everything up to the end (or ``end``) has been scanned."""
        self._kept: deque[tuple[list[Any], list[Route]]] = deque()
        self._kept_n = 0
        self._source: Iterator[list[Any]] | None = None
        self._source_done = False
        self._own: Any = None  # (reader, its batches) once reading on alone
        self._check = check

    def agent(self, name: str) -> AgentHistory:
        """The history of one of the agents."""
        return self._agents[name]

    # -- the fold's side ---------------------------------------------------------------------

    def batches(self, source: Iterator[list[Any]]) -> Iterator[tuple[list[Any], list[Route]]]:
        """The batches of ``source`` (the fold's reader from ``start``, in offset order), each with its
        messages' routes; what the history read ahead through ``source`` comes out here, in order."""
        self._source = source
        kept = self._kept
        while True:
            if kept:
                item = kept.popleft()
                self._kept_n -= len(item[0])
                yield item
                continue
            if self._source_done:
                return
            batch = self._next_source()
            if batch is None:
                return
            yield batch, self._scan(batch)

    def settle(self, agent: str, step: int, *, digest: bool = False) -> None:
        """Read on until every record ``agent`` wrote for ``step`` has been scanned (or the end).

        An effect of ``step`` comes before any record of a later step (the live agent wrote it
        while ``step``'s handler ran), and before the digest record of ``step``'s transaction. A
        digest comes only in that record, the transaction's last, after the records of every step
        of the transaction: for a ``digest``, only a digest record of ``step`` or later settles it
        (an agent that records none is read to the end, as a first pass would have read it)."""
        if digest:
            while not self.done and self.digested_to[agent] < step:
                self._read_on()
            return
        while not self.done and self.max_step[agent] <= step and self.digested_to[agent] < step:
            self._read_on()

    def read_to_end(self) -> int:
        """Scan everything not scanned yet, to the end of the log (or the cut), keeping nothing for a fold;
        the offset read up to. A live history's first pass: each agent's last recorded step is known after it."""
        while not self.done:
            self._read_alone(batch_size=BATCH)
        if self.live:
            for name, history in self._agents.items():
                history.last_step = self.max_step[name]
        return self.end_offset

    def committed_position(self, agent: str) -> int:
        """How far ``agent``'s group committed (-1: it never did), asked of the log."""
        with allowed():  # asked from inside a handler, as reading on is
            at = self.backend.committed(agent_group(self.topic, agent), self.topic)
        return at if at is not None else -1

    def close(self) -> None:
        if self._own is not None:
            self._own[0].close()
            self._own = None

    # -- reading and scanning ----------------------------------------------------------------

    def _read_on(self) -> None:
        if self._own is None and self._source is not None and not self._source_done \
                and self._kept_n < AHEAD_KEPT:
            batch = self._next_source()
            if batch is not None:
                self._kept.append((batch, self._scan(batch)))
                self._kept_n += len(batch)
        else:
            self._read_alone()

    def _next_source(self) -> list[Any] | None:
        assert self._source is not None, "LogHistory.batches() first"
        for batch in self._source:
            if batch:
                return batch
        self._source_done = True
        if self._own is None:
            self.done = True
        return None

    def _read_alone(self, *, batch_size: int | None = None) -> None:
        if self._own is None:
            reader = self.backend.reader(self.topic)
            reader.assign(self.read_to)
            self._own = (reader, reader.batches(end=self.end, batch_size=batch_size or AHEAD_BATCH))
            logger.debug("history of %s: reading on alone from offset %d", self.topic, self.read_to)
        for batch in self._own[1]:
            if batch:
                self._scan(batch)
                return
        self.end_offset = max(self.end_offset, int(self._own[0].position.end_offset))
        self.close()
        self.done = True

    def _scan(self, batch: list[Any]) -> list[Route]:
        """Every message's route; what it tells of an agent of the history, once per offset.

        With ``check=None`` every message is routed by its envelope alone, and an agent's step is its
        event id's (:meth:`~swarmlog.schema.codec.Decoder.step`), as ``sl.step`` would say."""
        check = self._check
        if check is None:
            k, n = 0, 1
            by_envelope = self.decoder.envelope_route
            routes = [by_envelope(m) for m in batch]
        else:
            checked = self.decoder.route
            k, n = check
            if n == 1:
                routes = [checked(m) for m in batch]
            else:
                # A message whose headers another fold checks is routed by its envelope alone (its
                # step, which only the history's agents' messages need, is read below).
                by_envelope = self.decoder.envelope_route
                routes = [checked(m) if m.offset() % n == k else by_envelope(m) for m in batch]
        read_to = self.read_to
        if batch[-1].offset() < read_to:
            return routes  # scanned already, by the history's own reader (or before a checkpoint)
        max_step = self.max_step
        step_of = self.decoder.step
        for m, r in zip(batch, routes, strict=True):
            etype, who, _, step = r
            top = max_step.get(who)
            if top is None:
                continue
            off = m.offset()
            if off < read_to:
                continue
            if check is None:
                step = step_of(m)
            elif n > 1 and off % n != k:  # the step route() gives: its sl.step header's (checked by another fold)
                step = _header_step(m.headers())
            if step is not None and step > top:
                max_step[who] = step
            if etype == STATE_DIGEST:
                self._digest(m, who, step)
            elif etype in HISTORY_RECORDS:  # recorded I/O and patch markers, served by id
                self._effect(m)
        self.read_to = batch[-1].offset() + 1
        return routes

    def _digest(self, m: Any, who: str, step: int | None) -> None:
        try:
            _, rec = self.decoder.decode(m.value(), m.offset())
        except SwarmlogError:
            return  # not an event: the fold reports it where it folds it
        record = DigestRecord.from_payload(rec["payload"])
        self._agents[who].digests.add(record)
        last = step if step is not None else max(record.steps, default=-1)
        if last > self.digested_to[who]:
            self.digested_to[who] = last

    def _effect(self, m: Any) -> None:
        try:
            writer, rec = self.decoder.decode(m.value(), m.offset())
        except SwarmlogError:
            return
        if parse_step(rec["event_id"]) is not None:
            self.effects[rec["event_id"]] = Event.from_message(m, writer, rec)


def _header_step(headers: Headers | None) -> int | None:
    for key, value in headers or ():
        if key == H_STEP:
            return int(value)
    return None


def first_pass(*, backend: LogBackend, topic: str, decoder: Decoder, agents: Collection[str], start: int = 0,
               end: int | None = None, until: int | None = None,
               stopped: Callable[[], bool] = lambda: False) -> tuple[dict[str, AgentHistory], int]:
    """The live histories of ``agents``, read whole before their folds start, and the offset read up to
    (past any transaction markers: where a restarted agent has caught up with the log it found).

    ``until``: the log's end including open transactions (its high watermark), asked after the
    agent's fence. A ``read_committed`` read stops at the first transaction still open — another
    agent's, killed mid-transaction, stays open until its next life fences it or the broker's
    transaction timeout aborts it — and what lies past it, the agent's own committed outputs
    among them, is not read yet. A history that stopped there would take steps the agent already
    took for new ones and run them live again, writing their outputs twice. So the pass reads on
    until it has got past ``until``, waiting for such a transaction to end (or ``stopped()``)."""
    log = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=agents, live=True, start=start, end=end)
    try:
        read_to = log.read_to_end()
        waited_since = time.monotonic()
        said = 0.0
        while until is not None and read_to < until and (end is None or read_to < end) and not stopped():
            waited = time.monotonic() - waited_since
            if waited - said >= _HELD_BACK_SAY_EVERY_S or not said:
                said = max(waited, 1e-9)
                logger.info("history of %s: a transaction open at offset %d holds the read back (the log goes on to "
                            "%d); waiting for it to end (its writer's next life, or the broker's transaction "
                            "timeout, ends it)", topic, read_to, until)
            time.sleep(_HELD_BACK_POLL_S)
            log.done = False
            read_to = log.read_to_end()
    finally:
        log.close()
    return {name: log.agent(name) for name in agents}, read_to


_HELD_BACK_POLL_S = 0.1
"""How often a first pass held back by an open transaction looks again."""
_HELD_BACK_SAY_EVERY_S = 10.0


def steps_past(*, backend: LogBackend, topic: str, decoder: Decoder, agents: Collection[str],
               start: int) -> dict[str, set[int]]:
    """Per agent, the steps that have outputs at or after offset ``start`` (routes only, no payload decoded).

    An agent's outputs are in the log in step order (one producer, transactions committed in
    order), so a step found here has no output before ``start`` that comes after one found here.
    """
    past: dict[str, set[int]] = {name: set() for name in agents}
    with backend.reader(topic) as reader:
        reader.assign(start)
        route = decoder.route
        for batch in reader.batches():
            for m in batch:
                # The envelope's route, headers checked against it (RoutingHeaderMismatch): a lying
                # sl.agent or sl.step would call a diverged step merely unverified.
                _, agent, _, step = route(m)
                steps = past.get(agent)
                if steps is not None and step is not None:
                    steps.add(step)
    return past
