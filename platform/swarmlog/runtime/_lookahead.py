"""A swarm replay's log, read once: each batch scanned as it is read, and read ahead as far as a step needs.

Internal; the swarm replayer (``_replayer``) folds through it. A replayed step needs two
records its agent wrote *after* the step's input: its recorded effects and LLM calls (while
the handler runs) and its state digest (right after). Both lie in the agent's transaction
that holds the step's outputs, the digest record last in it (``digests``). The replayer
used to read the whole log twice for them, an index pass (``_index``) and then the fold;
here every message is read once:

* **Scanned as read.** Each batch is scanned before the fold takes it: every message's
  route, its routing headers checked against its envelope
  (:meth:`~swarmlog.schema.codec.Decoder.route`: a lying header is a
  :class:`~swarmlog.errors.RoutingHeaderMismatch`, as the index pass made it), each agent's
  highest recorded step, its recorded effects and state digests. The fold routes by the
  routes the scan computed: each message is routed once.
* **Read ahead only as far as a step needs.** Before a replayed step at offset X of agent A
  looks up an effect, :meth:`Lookahead.settle` reads on, keeping what it reads for the fold,
  until an A record of a later step shows (A's records come in step order) or A's digest
  record of X or later; before it looks up its digest, until that digest record shows (the
  last record of the transaction that holds X, after every step of it). In a live run's log
  that is the end of the batch A consumed with X, so the fold's own reading nearly always
  gets there first. An agent that records no digests (``SWARMLOG_STATE_DIGEST_EVERY=0``, an
  old log) makes the lookahead scan on to the end once, as a first pass would have.
* **Memory is bounded.** Past :data:`AHEAD_KEPT` messages kept ahead (an agent whose next
  record is far on, or never comes), the lookahead scans on with a reader of its own from
  where scanning got, keeping nothing; the fold's reader reads those messages again later,
  and scanning them again changes nothing (only their routes are computed).
* **Exact at a cut.** Nothing at or past ``end`` is scanned: a replay cut at N computes the
  prefix's state alone, as the index pass that stopped at N did.

Everything a step is told is what the index pass would have told it (the unit tests hold
the two equal on the same logs); only when it is learnt differs.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import SwarmlogError
from ..events import Event
from ..guard import allowed
from ..log.base import BATCH, LogBackend
from ..protocol import H_STEP, RECORDED_EFFECTS, STATE_DIGEST, Headers, Route, parse_step
from ..schema.codec import Decoder
from ._index import NO_LIVE_STEPS, OwnIndex
from .digests import DigestRecord, RecordedDigests

logger = logging.getLogger(__name__)

AHEAD_KEPT = 50_000
"""Messages read ahead of the fold and kept for it, at most; past it, the lookahead reads on alone."""

READ_BATCH = BATCH
"""Messages the fold's reader reads at a time (the replay's batch)."""

AHEAD_BATCH = 500
"""Messages the lookahead's own reader reads at a time: it reads only until the asking agent's
next record shows, so a replay's full batch would mostly be scanned for nothing."""

class Lookahead:
    """Effects, state digests and each agent's highest recorded step, for the fold of ``agents``."""

    def __init__(self, *, backend: LogBackend, topic: str, decoder: Decoder, agents: list[str],
                 start: int = 0, end: int | None = None, check: tuple[int, int] = (0, 1)) -> None:
        """``check``: ``(k, n)``, the routing headers of the messages whose offset is k modulo n are
        checked against their envelopes (:meth:`~swarmlog.schema.codec.Decoder.route`); the others
        are routed by their envelopes alone — for n folds of the same log side by side, each
        checking its own share (``_replayer``'s processes), so that every header is checked once
        and a lie anywhere fails the replay. Default: every message checked."""
        self.backend = backend
        self.topic = topic
        self.decoder = decoder
        self.end = end
        self.max_step: dict[str, int] = dict.fromkeys(agents, -1)
        """Agent -> its highest recorded step scanned so far (outputs, effects, digest records)."""
        self.digested_to: dict[str, int] = dict.fromkeys(agents, -1)
        """Agent -> the last step of its latest digest record scanned so far."""
        self.effects: dict[str, Event] = {}
        self.indexes: dict[str, OwnIndex] = {
            name: OwnIndex(last_step=NO_LIVE_STEPS, effects=_Effects(self, name), digests=_Digests(self, name))
            for name in agents}
        self.read_to = start
        """Every message before this offset has been scanned."""
        self.done = False
        """Everything up to the end (or ``end``) has been scanned."""
        self._kept: deque[tuple[list[Any], list[Route]]] = deque()
        self._kept_n = 0
        self._source: Iterator[list[Any]] | None = None
        self._source_done = False
        self._own: Any = None  # (reader, its batches) once reading on alone
        self._check = check
        self.on_miss: Callable[[str], None] | None = None
        """Called with the agent when a step asks for an effect the log does not hold (once settled)."""

    # -- the fold's side ---------------------------------------------------------------------

    def batches(self, source: Iterator[list[Any]]) -> Iterator[tuple[list[Any], list[Route]]]:
        """The batches of ``source`` (the fold's reader, in offset order), each with its messages' routes."""
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

    def _read_on(self) -> None:
        if self._own is None and self._kept_n < AHEAD_KEPT and not self._source_done:
            batch = self._next_source()
            if batch is not None:
                self._kept.append((batch, self._scan(batch)))
                self._kept_n += len(batch)
        else:
            self._read_alone()

    def close(self) -> None:
        if self._own is not None:
            self._own[0].close()
            self._own = None

    # -- reading and scanning ----------------------------------------------------------------

    def _next_source(self) -> list[Any] | None:
        assert self._source is not None, "Lookahead.batches() first"
        for batch in self._source:
            if batch:
                return batch
        self._source_done = True
        if self._own is None:
            self.done = True
        return None

    def _read_alone(self) -> None:
        if self._own is None:
            reader = self.backend.reader(self.topic)
            reader.assign(self.read_to)
            self._own = (reader, reader.batches(end=self.end, batch_size=AHEAD_BATCH))
            logger.debug("replay of %s: reading ahead alone from offset %d", self.topic, self.read_to)
        for batch in self._own[1]:
            if batch:
                self._scan(batch)
                return
        self.close()
        self.done = True

    def _scan(self, batch: list[Any]) -> list[Route]:
        """Every message's route; what it tells of a folded agent, once per offset."""
        checked = self.decoder.route
        k, n = self._check
        if n == 1:
            routes = [checked(m) for m in batch]
        else:
            # A message whose headers another fold checks is routed by its envelope alone (its
            # step, which only the folded agents' messages need, is read below).
            by_envelope = self.decoder.envelope_route
            routes = [checked(m) if m.offset() % n == k else by_envelope(m) for m in batch]
        read_to = self.read_to
        if batch[-1].offset() < read_to:
            return routes  # scanned already, by the lookahead's own reader
        max_step = self.max_step
        for m, r in zip(batch, routes, strict=True):
            etype, who, _, step = r
            top = max_step.get(who)
            if top is None:
                continue
            off = m.offset()
            if off < read_to:
                continue
            if n > 1 and off % n != k:  # the step route() gives: its sl.step header's (checked by another fold)
                step = _header_step(m.headers())
            if step is not None and step > top:
                max_step[who] = step
            if etype == STATE_DIGEST:
                self._digest(m, who, step)
            elif etype in RECORDED_EFFECTS:
                self._effect(m)
        self.read_to = batch[-1].offset() + 1
        return routes

    def _digest(self, m: Any, who: str, step: int | None) -> None:
        try:
            _, rec = self.decoder.decode(m.value(), m.offset())
        except SwarmlogError:
            return  # not an event: replay reports it where it folds it
        record = DigestRecord.from_payload(rec["payload"])
        self.indexes[who].digests.add(record)
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


class _Effects(dict):
    """``OwnIndex.effects`` of one agent, answered by the lookahead (only ``get`` is ever asked)."""

    def __init__(self, lookahead: Lookahead, agent: str) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.agent = agent

    def get(self, event_id: str, default: Any = None) -> Any:
        la = self.lookahead
        rec = la.effects.get(event_id)
        if rec is not None:
            return rec
        parsed = parse_step(event_id)
        if parsed is not None and not la.done:
            # Asked from inside a handler, under the determinism guard: reading the log on is
            # swarmlog's own I/O serving the record, as running an effect live is.
            with allowed():
                la.settle(self.agent, parsed[0])
            rec = la.effects.get(event_id)
        if rec is None:
            if la.on_miss is not None:
                la.on_miss(self.agent)
            return default
        return rec


class _Digests(RecordedDigests):
    """``OwnIndex.digests`` of one agent: a step's digest is looked up once the lookahead settled it."""

    __slots__ = ("lookahead", "agent")

    def __init__(self, lookahead: Lookahead, agent: str) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.agent = agent

    def at(self, step: int) -> bytes | None:
        la = self.lookahead
        if not la.done and la.digested_to[self.agent] < step:
            la.settle(self.agent, step, digest=True)
        return super().at(step)
