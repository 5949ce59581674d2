"""Per-agent state snapshots: where a replay to offset N starts instead of offset zero.

A snapshot is one agent's whole fold (:mod:`swarmlog.runtime.checkpoint`: its state,
timers, outputs awaiting their record, counters, the run's seed) just before an offset,
tagged with what made it: the **code version** of the swarm
(:func:`swarmlog.runtime.code_version`), a digest of the **schema versions** events were
read into, and the snapshot **format**. They live in a topic of their own beside the log
(:func:`swarmlog.log.protocol.snapshot_topic`: ``<topic>.snapshots``, one record per agent
and offset, key = agent, headers say agent, offset and code version so a reader picks
one without parsing the rest), so the log holds only what the swarm did, and the
snapshots go wherever the log goes.

**Which one is used.** Replay to N starts from the latest snapshot at or before N whose
code version, schema digest and format are this process's — never from another one:
a snapshot made by other code or read through other schemas holds a state this code
would not have built. Those are skipped and *reported* (``ignored``), and the caller
(the CLI) says so. A snapshot also names the last message it folded (offset and CRC);
if the log no longer holds that message as it was, the topic was re-made, and the
fold refuses it (:class:`~swarmlog.errors.SnapshotStale`).

**Why a snapshot and its tail equal the full replay.** Replay is a pure fold of the
log: given the same code, schemas and messages, an agent's fold at N is the same
whether it got there from zero or from a capture at S < N restored whole (timers and
pending outputs included). Snapshots are only written of folds that are *clean* — no
divergence, nothing unverifiable — so resuming one never hides a divergence that a
full replay would report. ``tests/unit/test_debug_engine.py`` checks equality on a long
log at many offsets, and ``bench/snapshots.py`` measures what they save.

Snapshots are a cache: deleting ``<topic>.snapshots`` loses nothing but time, and
``swarmlog snapshot`` (or :func:`take_snapshots`) makes them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AppendFailed, TopicNotFound
from ..log.base import LogBackend, message_at
from ..log.protocol import H_AGENT, H_SNAPSHOT_AT, H_SNAPSHOT_CODE, snapshot_topic
from ..schema.registry import SchemaRegistry

__all__ = ["Chosen", "DEFAULT_EVERY", "Ignored", "SNAPSHOT_FORMAT", "SnapshotInfo", "SnapshotStore",
           "VALUES_KEPT_BYTES", "schema_digest"]

logger = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 1
"""What a snapshot record holds; bump when it changes meaning (older ones are then ignored, and reported)."""
DEFAULT_EVERY = 10_000
"""Offsets between two snapshots of an agent when none is asked for."""


VALUES_KEPT_BYTES = 64 << 20
"""Snapshot bytes a store keeps in memory between looks, at most; a record past it is read again when chosen."""


def schema_digest(registry: SchemaRegistry) -> str:
    """What the schemas make of the log: each event type's newest version and its fingerprint."""
    lines = [f"{t}:{registry.latest(t).version}:{registry.latest(t).fingerprint_hex}" for t in registry.event_types()]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One snapshot record, as its headers describe it."""

    agent: str
    at: int
    """The state is the agent's just before this offset."""
    code_version: str
    record_offset: int
    """Where the record is in the snapshots topic."""


@dataclass(frozen=True, slots=True)
class Ignored:
    """A snapshot that was not used, and why."""

    agent: str
    at: int
    reason: str

    def __str__(self) -> str:
        return f"{self.agent}@{self.at}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Chosen:
    """Where a fold of some agents starts: their snapshots at one offset (or nothing: offset zero)."""

    at: int | None
    folds: dict[str, dict[str, Any]]
    """Agent -> the captured fold to restore."""
    last: tuple[int, int] | None
    """(offset, crc32) of the last message those folds read."""
    ignored: list[Ignored]


class SnapshotStore:
    """The snapshots of one log (``topic``), kept in ``<topic>.snapshots``."""

    def __init__(self, *, backend: LogBackend, topic: str, registry: SchemaRegistry, code_version: str) -> None:
        self.backend = backend
        self.topic = topic
        self.snapshot_topic = snapshot_topic(topic)
        self.code_version = code_version
        self.schemas = schema_digest(registry)
        self._seen: list[tuple[SnapshotInfo, bytes | None]] = []
        """Every record read so far, in topic order, with its value (None past :data:`VALUES_KEPT_BYTES`)."""
        self._read_to = 0
        self._kept_bytes = 0
        self._exists = False

    # -- reading ------------------------------------------------------------------------------

    def _records(self, agents: set[str] | None) -> list[tuple[SnapshotInfo, bytes]]:
        self._read_new()
        out: list[tuple[SnapshotInfo, bytes]] = []
        for info, value in self._seen:
            if agents is None or info.agent in agents:
                out.append((info, value if value is not None else self._read_value(info)))
        return out

    def _read_new(self) -> None:
        """Read the records written since the last look (all of them, the first time).

        A session asks on every query (``state --at N``, each move of a stepping view), and the
        topic only grows: reading it whole each time cost a reader and every record's bytes per
        query (tens of ms with a few hundred snapshots, bench/snapshots.py). So what was read is
        kept, and a look first asks the topic's end, a watermark request, and reads only past
        what it has. A topic that now ends before that was made again: read from the start.
        """
        if self._exists:
            _, high = self.backend.watermarks(self.snapshot_topic)
            if high == self._read_to:
                return
            if high < self._read_to:
                self._forget()
        try:
            reader = self.backend.reader(self.snapshot_topic)
        except TopicNotFound:
            self._exists = False
            self._forget()
            return
        self._exists = True
        with reader:
            reader.assign(self._read_to)
            for batch in reader.batches():
                for m in batch:
                    h = dict(m.headers() or ())
                    try:
                        info = SnapshotInfo(agent=h[H_AGENT].decode(), at=int(h[H_SNAPSHOT_AT]),
                                            code_version=h[H_SNAPSHOT_CODE].decode(), record_offset=m.offset())
                    except (KeyError, ValueError):
                        logger.warning("%s: the record at offset %d is not a snapshot; skipped", self.snapshot_topic,
                                       m.offset())
                        continue
                    value = m.value() or b""
                    if self._kept_bytes + len(value) <= VALUES_KEPT_BYTES:
                        self._kept_bytes += len(value)
                        self._seen.append((info, value))
                    else:
                        self._seen.append((info, None))  # read again if chosen
            self._read_to = max(self._read_to, reader.position.end_offset)

    def _forget(self) -> None:
        self._seen, self._read_to, self._kept_bytes = [], 0, 0

    def _read_value(self, info: SnapshotInfo) -> bytes:
        m = message_at(self.backend, self.snapshot_topic, info.record_offset)
        return b"" if m is None else m.value() or b""  # gone: "not JSON", so not used

    def kept(self) -> list[SnapshotInfo]:
        """Every snapshot kept, of every code version, in the order they were written."""
        return [info for info, _ in self._records(None)]

    def choose(self, *, agents: list[str], before: int,
               fits: Callable[[dict[str, dict[str, Any]]], bool] | None = None) -> Chosen:
        """The latest offset at or before ``before`` at which every one of ``agents`` has a usable snapshot
        (and, with ``fits``, whose captured folds — agent -> fold — it accepts).

        Only the records the choice needs are parsed: the headers say each record's agent, offset
        and code version, so the candidates are taken latest first and a record's JSON is read
        only when every agent has one at that offset — a long log's hundreds of snapshots cost
        one read of their headers, not one parse each (``state --at N``, bench/snapshots.py).
        """
        by_at: dict[int, dict[str, bytes]] = {}
        ignored: list[Ignored] = []
        wanted = set(agents)
        for info, value in self._records(wanted):
            if info.at > before:
                continue
            if info.code_version != self.code_version:
                ignored.append(Ignored(info.agent, info.at, f"made by code version {info.code_version!r}, this is "
                                                            f"{self.code_version!r}"))
                continue
            by_at.setdefault(info.at, {})[info.agent] = value  # a later record of the same agent and offset wins
        for at in sorted(by_at, reverse=True):
            values = by_at[at]
            if set(values) != wanted:
                continue
            docs: dict[str, dict[str, Any]] = {}
            for agent, value in values.items():
                try:
                    doc = json.loads(value)
                except ValueError:
                    ignored.append(Ignored(agent, at, "not JSON"))
                    continue
                reason = self.unusable(doc)
                if reason is not None:
                    ignored.append(Ignored(agent, at, reason))
                    continue
                docs[agent] = doc
            if set(docs) != wanted:
                continue
            lasts = {tuple(d["last"]) for d in docs.values()}
            folds = {a: d["fold"] for a, d in docs.items()}
            if len(lasts) == 1 and (fits is None or fits(folds)):
                last = lasts.pop()
                return Chosen(at=at, folds=folds,
                              last=(int(last[0]), int(last[1])), ignored=[i for i in ignored if i.at > at])
        return Chosen(at=None, folds={}, last=None, ignored=ignored)

    def unusable(self, doc: dict[str, Any]) -> str | None:
        """Why the snapshot record ``doc`` cannot be restored by this store's code and schemas (None: it can)."""
        if doc.get("format") != SNAPSHOT_FORMAT:
            return f"snapshot format {doc.get('format')!r}, this swarmlog reads {SNAPSHOT_FORMAT}"
        if doc.get("topic") != self.topic:
            return f"a snapshot of topic {doc.get('topic')!r}"
        if doc.get("schemas") != self.schemas:
            return f"read through other schema versions (digest {doc.get('schemas')}, these are {self.schemas})"
        return None

    # -- writing ------------------------------------------------------------------------------

    def write(self, *, at: int, folds: dict[str, dict[str, Any]], last: tuple[int, int]) -> int:
        """Keep one snapshot per agent of ``folds``, all just before ``at``; returns how many."""
        self.backend.create_topic(self.snapshot_topic)
        appender = self.backend.appender(self.snapshot_topic)
        try:
            for agent, fold in folds.items():
                doc = {"format": SNAPSHOT_FORMAT, "topic": self.topic, "agent": agent, "at": at,
                       "code_version": self.code_version, "schemas": self.schemas, "last": list(last), "fold": fold}
                headers = [(H_AGENT, agent.encode()), (H_SNAPSHOT_AT, str(at).encode()),
                           (H_SNAPSHOT_CODE, self.code_version.encode())]
                # Not canonical JSON: key order is the state's own (a handler may depend on it).
                appender.send(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), agent.encode(),
                              headers)
            delivered = appender.flush(30.0)
        finally:
            appender.close()
        if delivered.errors or delivered.pending:
            raise AppendFailed(topic=self.snapshot_topic,
                               detail="; ".join(delivered.errors.values()) or f"{delivered.pending} unacknowledged")
        return len(folds)
