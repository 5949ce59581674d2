"""What an agent's fold names instead of handling: a repeated event id, an input it cannot read, a hole.

Every tool that runs an agent's code over a log — the live worker, ``replay --swarm``, the debugger,
the simulator — drives the one engine (:mod:`.engine`), and the engine asks this module, so they all
decide alike (issue 28; docs/edges.md):

* **A repeated event id** (:data:`REPEATED`). An event id names one event of the log. A second
  message with an id the agent has already taken — an input addressed to it, or one of its own
  records — is a copy (re-sent by a producer or a copy tool): named at its offset, never handled a
  second time, and never a divergence of the agent that wrote the first (its restart would
  otherwise find "an output this step no longer writes" and stop for good).
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
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..errors import HistoryHoles, SchemaNotFound, SwarmlogError
from ..events import Event
from ..log.base import History

logger = logging.getLogger(__name__)

__all__ = ["NEWER_SCHEMA", "REPEATED", "UNREADABLE", "Anomaly", "LogProbe", "Presence", "Watch", "is_newer_schema"]

REPEATED = "repeated"
"""A second message with an event id the agent already took: a copy, not handled."""
UNREADABLE = "unreadable"
"""An input addressed to the agent that no schema can read (garbage, trailing bytes): named, skipped."""
NEWER_SCHEMA = "newer_schema"
"""An input addressed to the agent written with a newer version of a type it knows: it parks there."""

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
    """The offsets a fold has read messages at, one byte each: what tells a lost event (a hole) from an
    offset that never held one a reader sees (a transaction marker, an aborted record).

    A fold of many agents (``replay --swarm``) marks each message once here and every agent's engine
    asks it; a live agent's engine reads every message and marks them itself.
    """

    __slots__ = ("topic", "_marks", "_base", "before")

    def __init__(self, *, topic: str = "", start: int | None = 0) -> None:
        """``start``: the first offset of the read range (None: the first offset marked — an engine
        that marks what it reads itself, from offset zero or from a snapshot's position)."""
        self.topic = topic
        self._base = start
        self._marks = bytearray()
        self.before: Callable[[int], bool] | None = None
        """Whether an offset before the read range holds a message, asked of the log (a fold that starts
        from a snapshot: :class:`LogProbe`); None: nothing is said of those offsets."""

    def mark(self, offset: int) -> None:
        # Every message of a fold comes through here: one store, and the rare cases apart. Offsets only
        # ascend from the first, so ``offset - base`` is never negative.
        try:
            self._marks[offset - self._base] = 1  # type: ignore[operator]
        except (IndexError, TypeError):
            self._grow(offset)

    def _grow(self, offset: int) -> None:
        if self._base is None:
            self._base = offset
        i = offset - self._base
        marks = self._marks
        if i >= len(marks):
            marks.extend(bytes(max(i + 1 - len(marks), 65_536)))
        marks[i] = 1

    def missing(self, event: Event) -> list[int]:
        """The causes of ``event`` at earlier offsets of the read range that hold no message (before the
        range, nothing can be said: a fold from a snapshot, a log whose beginning was deleted)."""
        return self.absent(event.causes, event.offset)

    def absent(self, offsets: Any, before: int) -> list[int]:
        """Those of ``offsets`` in the read range before ``before`` that hold no message."""
        base, marks = self._base, self._marks
        if base is None:
            return []
        lost = [c for c in offsets if base <= c < before and (c - base >= len(marks) or not marks[c - base])]
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
            with self.backend.reader(self.topic) as reader:
                reader.assign(offset)
                found = [m for batch in reader.batches(end=offset + 1) for m in batch]
            held = self._known[offset] = bool(found) and found[0].offset() == offset
        return held


class IdsBefore:
    """The ids a fold restored at some offset has taken: those another fold of the same agent took before
    it (``first``: the offset an id was first taken at there, None: not before it; ``listed``: all of them,
    in that order), then its own. What :class:`Watch` asks of its ids; the other fold's are never copied."""

    __slots__ = ("_first", "_listed", "_own")

    def __init__(self, first: Callable[[str], int | None], listed: Callable[[], Iterator[tuple[str, int]]]) -> None:
        self._first = first
        self._listed = listed
        self._own: dict[str, int] = {}

    def setdefault(self, event_id: str, offset: int) -> int:
        first = self._first(event_id)
        if first is not None:
            return first
        return self._own.setdefault(event_id, offset)

    def items(self) -> Iterator[tuple[str, int]]:
        # The order a fold from zero would hold them in: by the offset each was first taken at.
        yield from self._listed()
        yield from self._own.items()


class Watch:
    """One agent's: the event ids it has taken, the anomalies it named, and whether it is parked."""

    __slots__ = ("agent", "presence", "anomalies", "parked", "_ids")

    def __init__(self, *, agent: str, presence: Presence) -> None:
        self.agent = agent
        self.presence = presence
        self.anomalies: list[Anomaly] = []
        self.parked: Anomaly | None = None
        """The input the agent could not read and parked at (:data:`NEWER_SCHEMA`); None: not parked."""
        self._ids: dict[str, int] = {}  # event id -> the offset of the first event with it the agent took

    def take(self, event: Event) -> bool:
        """Whether the agent may take ``event`` (an input addressed to it, or one of its own records):
        False for a copy of one it took (:meth:`repeated`); :class:`~swarmlog.errors.HistoryHoles` if a
        cause names an offset that lost its event. The engine's one call per event it decodes."""
        off = event.offset
        if self._ids.setdefault(event.event_id, off) != off:
            return not self.repeated(event)
        causes = event.causes
        if causes:
            p = self.presence
            base, marks = p._base, p._marks
            if base is not None:
                n = len(marks)
                for c in causes:
                    i = c - base
                    if 0 <= i < n and c < off and not marks[i] or n <= i and c < off \
                            or i < 0 and p.before is not None:
                        self.check_causes(event)  # raises, naming every lost one
                        break
        return True

    def repeated(self, event: Event) -> bool:
        """Whether ``event`` repeats an id the agent already took (then it is named, and not to be
        handled or checked); else its id is remembered."""
        first = self._ids.setdefault(event.event_id, event.offset)
        if first == event.offset:
            return False
        self._name(Anomaly(event.offset, self.agent, REPEATED, (
            f"event id {event.event_id!r} repeats the event at offset {first}: a copy (re-sent by a producer or a "
            f"copy tool), not handled"), first))
        return True

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
            self.anomalies.append(anomaly)
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

    def capture(self) -> dict[str, Any]:
        """What a snapshot keeps of this watch (:mod:`._checkpoint`): the ids taken, the anomalies named."""
        return {"ids": list(self._ids.items()), "anomalies": [list(a) for a in self.anomalies],
                "parked": list(self.parked) if self.parked is not None else None}

    def share_ids(self, first: Callable[[str], int | None], listed: Callable[[], Iterator[tuple[str, int]]]) -> None:
        """Take as this fold's the ids another fold of the same agent took before this one's start, read
        through and never copied (:class:`IdsBefore`): a fold restored from a session's kept index
        (:mod:`swarmlog.debug.index`), whose capture left its ids out because the fold that went
        further holds them all."""
        self._ids = IdsBefore(first, listed)  # type: ignore[assignment]

    def restore(self, doc: dict[str, Any] | None) -> None:
        if not doc:
            return
        self._ids = {event_id: offset for event_id, offset in doc["ids"]}
        self.anomalies = [Anomaly(*a) for a in doc["anomalies"]]
        self.parked = Anomaly(*doc["parked"]) if doc["parked"] is not None else None

    def _name(self, anomaly: Anomaly) -> None:
        self.anomalies.append(anomaly)
        n = len(self.anomalies)
        if n <= _LOGGED:
            logger.warning("agent %s at offset %d: %s", self.agent, anomaly.offset, anomaly.detail)
        elif n % 1000 == 0:
            logger.warning("agent %s: %d messages named and not handled so far (the last at offset %d: %s)",
                           self.agent, n, anomaly.offset, anomaly.kind)
