"""One agent's fold kept in memory by a session: its state at any offset from a capture a few offsets back.

A query of ``state AGENT --at N`` from the snapshot topic restores the latest snapshot at or
before N and folds the tail. Two things make that slow on a long log, whatever the interval:
a capture holds every event id its agent ever took (what tells a repeated event from a new
one), so it grows with the log and its parse grows with it; and a tail's first step asks the
log whether the offsets its causes name held a message (one read each).

:meth:`swarmlog.debug.Session.index` folds the agent once, from offset zero to the end of the
log as it is then, and keeps:

* **a capture every** ``every`` **offsets** (:func:`~swarmlog.runtime.checkpoint.capture`),
  without its ids: the fold that went to the end took them all, each first at some offset, so
  the ids a fold restored at P has taken are those first taken before P
  (:meth:`~swarmlog.runtime.anomalies.Watch.share_ids`: read through, never copied), kept once
  for all captures (:class:`KeptIds`: 16 bytes an id);
* **which offsets held a message** (one byte an offset), which answers the tail's questions
  about offsets before its start without reading the log.

A query at N ≤ the index's end restores the capture at or before N and folds at most
``every`` offsets of tail through the same :class:`~swarmlog.debug._rebuild.Rebuild` as
every other fold: the tail's outputs are checked against the log as before, and the log must
still hold the last message the capture folded (else :class:`~swarmlog.errors.SnapshotStale`,
and the session drops the index and folds from zero). The answer is the fold from zero's:
a capture restored whole and its tail fold to what the whole fold reaches (the ground
snapshots stand on, :mod:`swarmlog.runtime.checkpoint`); ``tests/unit/test_state_index.py``
compares them at random offsets.

**Memory.** Captures are kept as compressed JSON and take ``max_bytes`` at most: past it, every
other one is dropped and ``every`` doubles. Beside them, 16 bytes per event the agent took and one byte
per offset of the log. :attr:`AgentIndex.memory` says how much of each.
"""

from __future__ import annotations

import json
import logging
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..runtime.anomalies import Presence
from ..runtime.checkpoint import capture
from ..runtime.engine import AgentCore

__all__ = ["DEFAULT_INDEX_BYTES", "DEFAULT_INDEX_EVERY", "AgentIndex", "IndexMemory", "KeptIds"]

logger = logging.getLogger(__name__)

DEFAULT_INDEX_EVERY = 32
"""Offsets between two kept captures: a query folds at most this many offsets of tail."""
DEFAULT_INDEX_BYTES = 64 << 20
"""The captures' bytes (compressed JSON) an index keeps at most (then it keeps every other one)."""


@dataclass(frozen=True, slots=True)
class IndexMemory:
    """What an index holds, in bytes (captures: compressed) and entries."""

    captures: int
    capture_bytes: int
    ids: int
    offsets: int

    def to_json(self) -> dict[str, int]:
        return {"captures": self.captures, "capture_bytes": self.capture_bytes, "ids": self.ids,
                "offsets": self.offsets}


_id_hash = hash
"""How an id is kept (its ``hash()``: this process's, never written anywhere). A name of its own so a
test can make every id collide."""


class KeptIds:
    """The event ids one fold took, each with the offset it was first taken at, in 16 bytes an id.

    A fold restored at P has taken exactly the ids first taken before P; it asks, for each event it
    takes, whether that id is one of them (a copy of an earlier event is named, not handled). A dict
    of them took several times as much (bench/README.md, "Time travel at random offsets"); here each
    is its ``hash()`` and its offset, two sorted arrays, and a match is confirmed by reading the event
    id at that offset from the log: only a real repeat, or two ids of one hash, costs that read, and
    the answer stays exact.
    """

    __slots__ = ("_hashes", "_offsets", "_read_id", "_read_ids")

    def __init__(self, ids: dict[str, int], *, read_id: Callable[[int], str | None],
                 read_ids: Callable[[set[int], int], Iterator[tuple[str, int]]]) -> None:
        pairs = sorted((_id_hash(event_id), offset) for event_id, offset in ids.items())
        self._hashes = array("q", [h for h, _ in pairs])
        self._offsets = array("q", [o for _, o in pairs])
        self._read_id = read_id
        self._read_ids = read_ids

    def __len__(self) -> int:
        return len(self._hashes)

    def first(self, event_id: str, before: int) -> int | None:
        """The offset ``event_id`` was first taken at, if before ``before`` (None: not taken before it)."""
        hashes, h = self._hashes, _id_hash(event_id)
        i = bisect_left(hashes, h)
        while i < len(hashes) and hashes[i] == h:
            offset = self._offsets[i]
            if offset < before and self._read_id(offset) == event_id:
                return offset
            i += 1
        return None

    def listed(self, before: int) -> Iterator[tuple[str, int]]:
        """Every id first taken before ``before``, in offset order, read back from the log (a capture of a
        fold restored from the index: never on a query's path)."""
        return self._read_ids({o for o in self._offsets if o < before}, before)


class AgentIndex:
    """Captures of one agent's fold from offset zero, every ``every`` offsets up to ``end``."""

    def __init__(self, *, agent: str, every: int, max_bytes: int, probe: Callable[[int], bool],
                 read_id: Callable[[int], str | None],
                 read_ids: Callable[[set[int], int], Iterator[tuple[str, int]]]) -> None:
        self.agent = agent
        self.every = every
        self.max_bytes = max_bytes
        self.end = 0
        """Every offset before it is covered: a query at N <= end starts from a capture."""
        self._at: list[int] = []
        self._docs: list[bytes] = []
        self._lasts: list[tuple[int, int]] = []
        self._sizes: list[int] = []
        self._bytes = 0
        self._ids: KeptIds | None = None
        self._read_id = read_id
        self._read_ids = read_ids
        self._presence: Presence | None = None
        self._probe = probe

    # -- building (the session's one fold) ------------------------------------------------------

    def keep(self, core: AgentCore, *, at: int, last: tuple[int, int]) -> None:
        """Keep ``core``'s fold just before offset ``at`` (``last``: the message it folded last)."""
        watch = core.watch
        ids, watch._ids = watch._ids, {}  # left out: the fold that goes on holds them all (see the module)
        try:
            doc = capture(core)
        finally:
            watch._ids = ids
        # Kept as compressed JSON: a capture is mostly its outputs awaiting their record, alike from one
        # capture to the next; as Python objects it took several times its JSON size, compressed a
        # fraction of it, so twice as many fit the same bound. A query inflates and parses only the
        # one it restores.
        kept = zlib.compress(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), 1)
        size = len(kept)
        self._at.append(at)
        self._docs.append(kept)
        self._lasts.append(last)
        self._sizes.append(size)
        self._bytes += size
        if self._bytes > self.max_bytes and len(self._at) > 1:
            self._thin()

    def _thin(self) -> None:
        """Every other capture dropped, ``every`` doubled: the memory bound holds, tails get twice as long."""
        keep = range(0, len(self._at), 2)
        self._at = [self._at[i] for i in keep]
        self._docs = [self._docs[i] for i in keep]
        self._lasts = [self._lasts[i] for i in keep]
        self._sizes = [self._sizes[i] for i in keep]
        self._bytes = sum(self._sizes)
        self.every *= 2
        logger.info("index of %s: past %d bytes of captures, now one every %d offsets", self.agent, self.max_bytes,
                    self.every)

    def finish(self, core: AgentCore, *, end: int) -> None:
        """The fold reached ``end``: its ids and the offsets it read are what every capture shares."""
        self._ids = KeptIds(core.watch._ids, read_id=self._read_id, read_ids=self._read_ids)
        self._presence = core.watch.presence
        self.end = end

    # -- reading ----------------------------------------------------------------------------------

    def start(self, at: int) -> tuple[int, dict[str, Any], tuple[int, int]] | None:
        """The latest capture at or before ``at`` (its offset, the capture, its last message); None: none."""
        if at > self.end or self._ids is None:
            return None
        k = bisect_right(self._at, at) - 1
        if k < 0:
            return None
        return self._at[k], json.loads(zlib.decompress(self._docs[k])), self._lasts[k]

    def share(self, core: AgentCore, *, at: int) -> None:
        """Give ``core``, just restored from the capture at ``at``, the ids its agent took before ``at``."""
        ids = self._ids
        assert ids is not None  # start() answers only once the fold has finished
        core.watch.share_ids(lambda event_id: ids.first(event_id, at), lambda: ids.listed(at))

    def held(self, offset: int) -> bool:
        """Whether ``offset`` (before the index's end) holds a message: from the fold's marks, else the log."""
        p = self._presence
        if p is not None and p._base is not None and p._base <= offset < self.end:
            i = offset - p._base
            return i < len(p._marks) and bool(p._marks[i])
        return self._probe(offset)

    @property
    def memory(self) -> IndexMemory:
        p = self._presence
        return IndexMemory(captures=len(self._at), capture_bytes=self._bytes,
                           ids=len(self._ids) if self._ids is not None else 0,
                           offsets=len(p._marks) if p is not None else 0)
