"""One read of a whole log, for the commands that answer a question of it as the engine would.

``swarmlog retry`` (:mod:`.failures`), ``swarmlog check unhandled`` (:mod:`.unhandled`) and
``swarmlog patches`` (:mod:`.patches`) each read a log from its start to its end. A log holds
whatever any producer put in it, and the engine decides what to do with what is not a plain event
(:mod:`.anomalies`, docs/edges.md); a scan decides alike, so that a command and the agents agree:

* **A message that is not a readable event** (garbage, a truncated body, trailing bytes, a schema
  nobody here knows) is named with its offset and why (:attr:`LogScan.unreadable`, logged, and
  printed by each command) and skipped: one bad message must not stop the whole answer.
* **A copy of an event** (a second message with an event id already read) is named
  (:attr:`LogScan.repeated`) and not yielded: the engine never handles a copy, so a command must not
  count it either (a copied ``handler.failed`` after its retry is not a second failure to retry).
  What is remembered of the ids is bounded as an agent's is (:class:`~.anomalies.Watch`).
* **Routing is the envelope's**: every message is decoded, and where it goes is what its envelope
  says, as a live agent reads it; a routing header that lies cannot steer a scan.

Every message is decoded once; a scan keeps nothing of it but what its command keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaNotFound, SwarmlogError
from ..events import Event
from ..log.base import LogBackend
from ..schema.codec import Decoder
from ..schema.registry import EventSchema, SchemaRegistry
from .anomalies import REPEATED, Anomaly, Presence, Watch

logger = logging.getLogger(__name__)

__all__ = ["LogScan", "Unreadable"]

_LOGGED = 20
"""Unreadable messages a scan logs one a line; the rest are counted in one line at its end."""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A message of the log that is not a readable event: where, what error, and why."""

    offset: int
    kind: str
    """The error's type (``UndecodableMessage``, ``TrailingBytesInValue``, ``SchemaNotFound``, ...)."""
    error: str

    def describe(self) -> str:
        return f"offset {self.offset}: not a readable event ({self.kind}), skipped: {self.error}"

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "kind": self.kind, "error": self.error}


class LogScan:
    """Iterate over the events of ``topic``'s log from its start to its end, in offset order, each once.

    What is not yielded is named: :attr:`unreadable` (messages that are not events) and
    :attr:`repeated` (copies of events already yielded). Iterate once."""

    __slots__ = ("backend", "topic", "decoder", "unreadable", "_watch", "read")

    def __init__(self, *, backend: LogBackend, topic: str, registry: SchemaRegistry) -> None:
        self.backend = backend
        self.topic = topic
        self.decoder = Decoder(registry)
        self.unreadable: list[Unreadable] = []
        self.read = 0
        """Messages read so far."""
        self._watch = Watch(agent=f"(scan of {topic})", presence=Presence(topic=topic))

    @property
    def repeated(self) -> list[Anomaly]:
        """The copies skipped (:data:`~.anomalies.REPEATED` anomalies, with the first event's offset): the first
        and the latest :data:`~.anomalies.KEPT_ANOMALIES` (:attr:`repeats` counts them all)."""
        return [a for a in self._watch.anomalies if a.kind == REPEATED]

    @property
    def repeats(self) -> int:
        """How many copies were skipped."""
        return self._watch.counts.get(REPEATED, 0)

    def __iter__(self) -> Iterator[Event]:
        from_message = Event.from_message
        for m, writer, rec in self.records():
            yield from_message(m, writer, rec)

    def records(self) -> Iterator[tuple[Any, EventSchema, dict[str, Any]]]:
        """The same events as iterating the scan, each as its message, writer schema and decoded record (in
        its type's newest version), no :class:`~swarmlog.events.Event` built: for a command that reads a
        field or two of most events and more of few (``patches``)."""
        decode, repeated = self.decoder.decode, self._watch.repeated_id
        with self.backend.reader(self.topic) as reader:
            reader.assign(0)
            for batch in reader.batches():
                for m in batch:
                    self.read += 1
                    offset = m.offset()
                    try:
                        # Every body is read whole, even of a command that needs only the envelope: what is
                        # not a readable event (a truncated body, bytes after it) is named, as the engine
                        # names an input it cannot read, and the body is where it shows.
                        writer, rec = decode(m.value(), offset)
                    except SchemaNotFound as exc:  # what its headers say it is (a newer version, most often)
                        self._unreadable(offset, self.decoder.unknown_writer(exc, m.headers()))
                        continue
                    except SwarmlogError as exc:
                        self._unreadable(offset, exc)
                        continue
                    if not repeated(rec["event_id"], offset, rec["agent_id"]):
                        yield m, writer, rec
        if len(self.unreadable) > _LOGGED:
            logger.warning("%s: %d messages are not readable events, skipped (the first %d logged above)",
                           self.topic, len(self.unreadable), _LOGGED)

    def _unreadable(self, offset: int, error: SwarmlogError) -> None:
        found = Unreadable(offset=offset, kind=type(error).__name__, error=str(error))
        self.unreadable.append(found)
        if len(self.unreadable) <= _LOGGED:
            logger.warning("%s: %s", self.topic, found.describe())

    def findings(self) -> list[tuple[int, str, str]]:
        """``(offset, kind, text)`` of every message skipped, in offset order: for
        :func:`swarmlog.terminal.bounded`, which a command prints."""
        found = [(u.offset, u.kind, u.describe()) for u in self.unreadable]
        found += [(a.offset, "repeated event id", f"offset {a.offset}: {a.detail}") for a in self.repeated]
        return sorted(found)

    def report(self, *, full: bool = False) -> list[str]:
        """Lines for a terminal naming what the scan skipped (none: nothing was): one a line, or a summary
        per kind past :data:`swarmlog.terminal.CAP` unless ``full``."""
        from ..terminal import bounded

        findings = self.findings()
        if not findings:
            return []
        head = (f"{self.topic}: skipped {len(self.unreadable)} message(s) that are not readable events and "
                f"{self.repeats} copy(ies) of an event (a repeated event id):")
        lines = [head, *(f"  {line}" for line in bounded(findings, full=full))]
        omitted = self.repeats - len(self.repeated)
        if omitted:
            lines.append(f"  and {omitted:,} more copies, counted and not kept one by one")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"unreadable": [u.to_json() for u in self.unreadable], "repeats": self.repeats,
                "repeated": [{"offset": a.offset, "first": a.first, "detail": a.detail} for a in self.repeated]}
