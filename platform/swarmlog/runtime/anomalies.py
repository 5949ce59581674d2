"""What an agent's fold names instead of handling: a repeated event id, an input it cannot read, a hole.

Every tool that runs an agent's code over a log — the live worker, ``replay --swarm``, the debugger,
the simulator — drives the one engine (:mod:`.engine`), and the engine asks this module, so they all
decide alike (issue 28; docs/edges.md):

* **A repeated event id** (:data:`REPEATED`). An event id names one event of the log. A second
  message with an id the agent has already taken — an input addressed to it, or one of its own
  records — is a copy (re-sent by a producer or a copy tool): named at its offset, never handled a
  second time, and never a divergence of the agent that wrote the first (its restart would
  otherwise find "an output this step no longer writes" and stop for good). What it remembers is
  bounded (:class:`Watch`): an agent's ids (``agent@step#i``) come in the order their writer's
  steps ran, so ids of older steps are known to be taken without being kept one by one.
* **An input it cannot read**, addressed to it. Written by a newer version of a schema this reader
  knows — a writer upgraded before the readers (:data:`NEWER_SCHEMA`) — it **parks** the agent at
  that offset: nothing after it is handled, nothing past it committed, the agent says so (log,
  readiness, metrics) and goes on once it is upgraded and rebuilds (the message waits in the log).
  Anything else (bytes after the event, a truncated body, a schema nobody knows): never readable by
  any upgrade, so named and skipped (:data:`UNREADABLE`) — parking on it would wedge the agent.
* **A hole**: a cause that names an offset no message holds any more (or a state digest record whose
  last step does). Causes are checked when
  written (:mod:`swarmlog.log.append`), so the log lost that event since (compaction keeps only the
  newest message per key): what the agent would rebuild is not the run, so it stops
  (:class:`~swarmlog.errors.HistoryHoles`) naming the offsets. :class:`Presence` knows which offsets
  hold messages; a fold that feeds many agents shares one; a fold from a snapshot asks the log
  about a cause before its start (:class:`LogProbe`).

The decisions depend only on the log and on the schemas the reader knows, so a live agent and a
replay with the same schemas name the same anomalies at the same offsets.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

from ..errors import HistoryHoles, SchemaNotFound, SwarmlogError
from ..events import Event
from ..log.base import History, message_at
from ..log.protocol import writer_step

logger = logging.getLogger(__name__)

__all__ = ["KEPT_ANOMALIES", "NEWER_SCHEMA", "REPEATED", "UNREADABLE", "Anomaly", "LogProbe", "Presence",
           "RecentIdStore", "Watch", "is_newer_schema"]

REPEATED = "repeated"
"""A second message with an event id the agent already took: a copy, not handled."""
UNREADABLE = "unreadable"
"""An input addressed to the agent that no schema can read (garbage, trailing bytes): named, skipped."""
NEWER_SCHEMA = "newer_schema"
"""An input addressed to the agent written with a newer version of a type it knows: it parks there."""

RECENT_IDS = 4096
"""Ids of agents' steps a :class:`Watch` keeps one by one (with the offset that held each), the latest it took."""

KEPT_ANOMALIES = 1000
"""Anomalies a :class:`Watch` keeps one by one: the latest this many, and the first of each kind; the rest
are counted (:attr:`Watch.counts`), not kept."""

_LOGGED = 20
"""Anomalies an agent logs one a line; after that, every thousandth (a summary of how many)."""


def is_newer_schema(error: SwarmlogError) -> bool:
    """Whether ``error`` says a message was written with a newer version of a type this reader knows."""
    return isinstance(error, SchemaNotFound) and error.version is not None \
        and error.known_version is not None and error.version > error.known_version


class Anomaly(NamedTuple):
    """One message an agent's fold named instead of handling it."""

    offset: int
    agent: str
    kind: str
    """:data:`REPEATED`, :data:`UNREADABLE` or :data:`NEWER_SCHEMA`."""
    detail: str
    first: int | None = None
    """With :data:`REPEATED`: the offset of the first event with the id."""

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "agent": self.agent, "kind": self.kind, "detail": self.detail,
                "first": self.first}

    def __str__(self) -> str:
        return f"agent {self.agent} at offset {self.offset}: {self.detail}"


class Presence:
    """The offsets a fold has read messages at, one bit each: what tells a lost event (a hole) from an
    offset that never held one a reader sees (a transaction marker, an aborted record).

    A fold of many agents (``replay --swarm``) marks each message once here and every agent's engine
    asks it; a live agent's engine reads every message and marks them itself — every live agent of a
    process keeps its own, so a bit, not a byte, per offset of the run.
    """

    __slots__ = ("topic", "_bits", "_base", "before")

    def __init__(self, *, topic: str = "", start: int | None = 0) -> None:
        """``start``: the first offset of the read range (None: the first offset marked — an engine
        that marks what it reads itself, from offset zero or from a snapshot's position)."""
        self.topic = topic
        self._base = start
        self._bits = bytearray()
        self.before: Callable[[int], bool] | None = None
        """Whether an offset before the read range holds a message, asked of the log (a fold that starts
        from a snapshot: :class:`LogProbe`); None: nothing is said of those offsets."""

    def mark(self, offset: int) -> None:
        # Every message of a fold comes through here: one bit set, and the rare cases apart. Offsets only
        # ascend from the first, so ``offset - base`` is never negative.
        try:
            i = offset - self._base  # type: ignore[operator]
            self._bits[i >> 3] |= 1 << (i & 7)
        except (IndexError, TypeError):
            self._grow(offset)

    def _grow(self, offset: int) -> None:
        if self._base is None:
            self._base = offset
        i = offset - self._base
        bits = self._bits
        if i >> 3 >= len(bits):
            bits.extend(bytes(max((i >> 3) + 1 - len(bits), 8_192)))
        bits[i >> 3] |= 1 << (i & 7)

    def holds(self, offset: int) -> bool | None:
        """Whether the fold read a message at ``offset``; None before the read range (nothing marked there)."""
        base = self._base
        if base is None or offset < base:
            return None
        i = offset - base
        return (i >> 3) < len(self._bits) and bool(self._bits[i >> 3] >> (i & 7) & 1)

    @property
    def nbytes(self) -> int:
        """What the marks take."""
        return len(self._bits)

    def missing(self, event: Event) -> list[int]:
        """The causes of ``event`` at earlier offsets of the read range that hold no message (before the
        range, nothing can be said: a fold from a snapshot, a log whose beginning was deleted)."""
        return self.absent(event.causes, event.offset)

    def absent(self, offsets: Any, before: int) -> list[int]:
        """Those of ``offsets`` in the read range before ``before`` that hold no message."""
        base, bits = self._base, self._bits
        if base is None:
            return []
        n = len(bits)
        lost = [c for c in offsets if base <= c < before
                and ((c - base) >> 3 >= n or not bits[(c - base) >> 3] >> ((c - base) & 7) & 1)]
        ask = self.before
        if ask is not None:
            lost += [c for c in offsets if 0 <= c < base and not ask(c)]
        return sorted(lost)


class LogProbe:
    """Whether an offset holds a message, read from the log once per offset: what a fold that starts from a
    snapshot asks about a cause before its start (:attr:`Presence.before`). Such causes are few (the first
    steps' after a snapshot, an old timer's set); each costs one read."""

    __slots__ = ("backend", "topic", "_known")

    def __init__(self, *, backend: Any, topic: str) -> None:
        self.backend = backend
        self.topic = topic
        self._known: dict[int, bool] = {}

    def __call__(self, offset: int) -> bool:
        held = self._known.get(offset)
        if held is None:
            held = self._known[offset] = message_at(self.backend, self.topic, offset) is not None
        return held


class RecentIdStore(Protocol):
    """What a :class:`Watch` needs of its memory of the latest step ids: an insertion-ordered map of
    id -> (offset, writer, step) that drops its oldest (an ``OrderedDict``, or the debugger index's)."""

    def get(self, event_id: str, /) -> tuple[int, str, int] | None: ...

    def __setitem__(self, event_id: str, kept: tuple[int, str, int], /) -> None: ...

    def __len__(self) -> int: ...

    def popitem(self, last: bool = ...) -> tuple[str, tuple[int, str, int]]: ...

    def items(self) -> Iterable[tuple[str, tuple[int, str, int]]]: ...


class Watch:
    """One agent's: the event ids it has taken, the anomalies it named, and whether it is parked.

    **What it remembers, and why that is enough.** An id of an agent's step (``agent@step#i``,
    written by that agent: :func:`~swarmlog.log.protocol.writer_step`) comes after every id of the
    same agent's earlier steps: one agent writes its steps in order, each transaction after the last,
    to the one partition, and an aborted one is never read. So of those ids only the latest
    :data:`RECENT_IDS` the agent took are kept, with their offsets (a copy of one is named with the
    offset of the first); for each writer ``floor`` is the newest step an id was dropped of, and an id
    of an *earlier* step than that was taken before: it is a copy, named without its first offset.
    (An id of the floor's own step is not judged by the floor: its step may still be writing, its
    transaction interleaved with others. A copy of it that comes after RECENT_IDS others is missed.)
    Other ids — input appended by ``swarmlog append`` or a client, a wall-clock firing — are kept
    all: there is no order to lean on. So the memory of an agent's ids is bounded by RECENT_IDS and
    by the input appended to it, not by the length of the run, and so is a checkpoint's copy of it.

    **What it keeps of the anomalies it named**: how many of each kind (:attr:`counts`, exact), the
    first of each kind and the latest :data:`KEPT_ANOMALIES` (:attr:`anomalies`). A long run of copies
    or unreadable messages is a count, not a list that every checkpoint copies and every metrics scrape
    walks.
    """

    __slots__ = ("agent", "presence", "counts", "parked", "_ids", "recent", "_floor", "_firsts", "_latest")

    def __init__(self, *, agent: str, presence: Presence) -> None:
        self.agent = agent
        self.presence = presence
        self.counts: dict[str, int] = {}
        """Kind -> how many anomalies of it the agent named (all of them, kept or not)."""
        self._firsts: dict[str, Anomaly] = {}  # kind -> the first anomaly of it
        self._latest: deque[Anomaly] = deque(maxlen=KEPT_ANOMALIES)
        self.parked: Anomaly | None = None
        """The input the agent could not read and parked at (:data:`NEWER_SCHEMA`); None: not parked."""
        self._ids: dict[str, int] = {}  # an id outside the steps' grammar -> the offset of the first event with it
        # a step's id -> (offset, writer, step), oldest first (an OrderedDict drops its oldest in O(1))
        self.recent: RecentIdStore = OrderedDict()
        """The latest step ids taken, oldest first. Public for one reason: the debugger's index gives a
        restored fold a store that reads what its one fold from zero kept (:mod:`swarmlog.debug.index`)."""
        self._floor: dict[str, int] = {}  # writer -> the newest step of it whose id was dropped from recent

    def take(self, event: Event) -> bool:
        """Whether the agent may take ``event`` (an input addressed to it, or one of its own records):
        False for a copy of one it took (:meth:`repeated`); :class:`~swarmlog.errors.HistoryHoles` if a
        cause names an offset that lost its event. The engine's one call per event it decodes."""
        off = event.offset
        if self._remember(event.event_id, off, event.agent_id) != off:
            return not self._repeat(event.event_id, off)
        causes = event.causes
        if causes:
            p = self.presence
            base, bits = p._base, p._bits
            if base is not None:
                n = len(bits) << 3
                for c in causes:
                    i = c - base
                    if 0 <= i < n and c < off and not bits[i >> 3] >> (i & 7) & 1 or n <= i and c < off \
                            or i < 0 and p.before is not None:
                        self.check_causes(event)  # raises, naming every lost one
                        break
        return True

    def repeated(self, event: Event) -> bool:
        """Whether ``event`` repeats an id the agent already took (then it is named, and not to be
        handled or checked); else its id is remembered."""
        return self.repeated_id(event.event_id, event.offset, event.agent_id)

    def repeated_id(self, event_id: str, offset: int, writer_id: str) -> bool:
        """:meth:`repeated` by the event's id, offset and writer alone, for a reader that builds no
        :class:`Event` of what it reads (:meth:`.scan.LogScan.records`)."""
        return self._remember(event_id, offset, writer_id) != offset and self._repeat(event_id, offset)

    def _remember(self, event_id: str, off: int, writer_id: str) -> int | None:
        """The offset of the first event the agent took with the id of the event at ``off`` (written by
        ``writer_id``): ``off`` if it is the first (its id is remembered then), None if it is a copy of
        one no longer kept one by one."""
        ws = writer_step(event_id)
        if ws is None or ws[0] != writer_id:  # not a step's own id (appended input, a wall-clock firing)
            return self._ids.setdefault(event_id, off)
        recent = self.recent
        kept = recent.get(event_id)
        if kept is not None:
            return kept[0]
        writer, step = ws
        floor = self._floor.get(writer)
        if floor is not None and step < floor:
            return None  # an earlier step of its writer than one already dropped: taken before (see the class)
        recent[event_id] = (off, writer, step)
        if len(recent) > RECENT_IDS:
            _, (_, old_writer, old_step) = recent.popitem(last=False)
            if old_step > self._floor.get(old_writer, -1):
                self._floor[old_writer] = old_step
        return off

    def _repeat(self, event_id: str, offset: int) -> bool:
        first = self._first_kept(event_id)
        where = f"the event at offset {first}" if first is not None else "an event this agent took long before"
        self._name(Anomaly(offset, self.agent, REPEATED, (
            f"event id {event_id!r} repeats {where}: a copy (re-sent by a producer or a copy tool), not "
            f"handled"), first))
        return True

    def _first_kept(self, event_id: str) -> int | None:
        kept = self.recent.get(event_id)
        return kept[0] if kept is not None else self._ids.get(event_id)

    def unreadable(self, offset: int, error: SwarmlogError, *, record: int | None = None) -> Anomaly:
        """Name an input addressed to the agent that does not decode; a newer schema's parks the agent.

        ``record``: the offset of one of the agent's *own* records that does not decode, of the step at
        ``offset`` — written by a newer version of this agent, before this reader was upgraded. Only a
        newer schema's is named (it parks the fold at that step: what the step did cannot be checked);
        anything else the agent's own headers claim is not its record, and is left alone."""
        if is_newer_schema(error):
            what = (f"an input it cannot read yet ({error})" if record is None else
                    f"its own record at offset {record}, of this step, is of a schema it cannot read yet ({error}): "
                    f"a newer version of this agent wrote it")
            anomaly = Anomaly(offset, self.agent, NEWER_SCHEMA, (
                f"parked: {what}. Nothing after it is handled until this agent runs with the newer schema; it "
                f"then rebuilds and goes on from here"))
            self.parked = anomaly
            logger.error("agent %s: %s", self.agent, anomaly.detail)
            self._keep(anomaly)
            return anomaly
        anomaly = Anomaly(offset, self.agent, UNREADABLE, f"an input that is not a readable event, skipped: {error}")
        if record is None:
            self._name(anomaly)
        return anomaly

    def check_causes(self, event: Event) -> None:
        """:class:`~swarmlog.errors.HistoryHoles` if a cause of ``event`` names an offset that lost its event."""
        lost = self.presence.missing(event)
        if lost:
            self._holes(lost, event.offset)

    def check_step(self, step: int, offset: int) -> None:
        """:class:`~swarmlog.errors.HistoryHoles` if the step a record at ``offset`` names (a state digest's
        last) is an offset that no longer holds the input it handled."""
        if self.presence.absent((step,), offset):
            self._holes([step], offset)

    def _holes(self, lost: list[int], named_by: int) -> None:
        topic = self.presence.topic
        raise HistoryHoles(topic=topic, holes=dict.fromkeys(lost, named_by), remedy=History.remedy(topic))

    @property
    def anomalies(self) -> list[Anomaly]:
        """The anomalies kept, in offset order: the first of each kind and the latest :data:`KEPT_ANOMALIES`
        (:attr:`omitted` more were named and counted)."""
        latest = self._latest
        kept = set(latest)
        return sorted([*(a for a in self._firsts.values() if a not in kept), *latest], key=lambda a: a.offset)

    @property
    def named(self) -> int:
        """How many anomalies the agent named, kept or not."""
        return sum(self.counts.values())

    @property
    def omitted(self) -> int:
        """How many it named and does not keep one by one (counted in :attr:`counts`)."""
        return self.named - len(self.anomalies)

    def capture(self) -> dict[str, Any]:
        """What a snapshot keeps of this watch (:mod:`.checkpoint`): the ids taken as it remembers them
        (bounded: see the class), the anomalies kept and how many of each kind were named (bounded too)."""
        return {"ids": list(self._ids.items()),
                "recent": [[event_id, off, writer, step] for event_id, (off, writer, step) in self.recent.items()],
                "floor": self._floor.copy(),
                "anomalies": [list(a) for a in self.anomalies],
                "anomaly_counts": dict(self.counts),
                "parked": list(self.parked) if self.parked is not None else None}

    def restore(self, doc: dict[str, Any] | None) -> None:
        if not doc:
            return
        if "recent" in doc:
            self._ids = dict(doc["ids"])  # [event id, offset] pairs, built in C: a restore's largest part
            self.recent = OrderedDict((event_id, (off, writer, step)) for event_id, off, writer, step in doc["recent"])
            self._floor = dict(doc["floor"])
        else:  # a snapshot of a swarmlog that kept every id: taken again in the order it took them
            self._ids, self.recent, self._floor = {}, OrderedDict(), {}
            for event_id, offset in doc["ids"]:
                ws = writer_step(event_id)
                self._remember(event_id, offset, ws[0] if ws is not None else "")
        # A snapshot of a swarmlog that kept every anomaly has no counts: the list is all of them.
        anomalies = [Anomaly(*a) for a in doc["anomalies"]]
        self.counts, self._firsts, self._latest = {}, {}, deque(maxlen=KEPT_ANOMALIES)
        for a in anomalies:
            self._keep(a)
        if "anomaly_counts" in doc:
            self.counts = {kind: int(n) for kind, n in doc["anomaly_counts"].items()}
        self.parked = Anomaly(*doc["parked"]) if doc["parked"] is not None else None

    def _keep(self, anomaly: Anomaly) -> None:
        kind = anomaly.kind
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._firsts.setdefault(kind, anomaly)
        self._latest.append(anomaly)

    def _name(self, anomaly: Anomaly) -> None:
        self._keep(anomaly)
        n = self.named
        if n <= _LOGGED:
            logger.warning("agent %s at offset %d: %s", self.agent, anomaly.offset, anomaly.detail)
        elif n % 1000 == 0:
            logger.warning("agent %s: %d messages named and not handled so far (the last at offset %d: %s)",
                           self.agent, n, anomaly.offset, anomaly.kind)
