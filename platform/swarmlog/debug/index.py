"""One agent's fold kept in memory by a session: its state at any offset from a capture a few offsets back.

A query of ``state AGENT --at N`` from the snapshot topic restores the latest snapshot at or
before N and folds the tail after it: thousands of offsets with the usual interval, and a
tail's first step asks the log whether the offsets its causes name held a message (one read
each).

:meth:`swarmlog.debug.Session.index` folds the agent once, from offset zero to the end of the
log as it is then, and keeps:

* **a capture every** ``every`` **offsets** (:func:`~swarmlog.runtime.checkpoint.capture`,
  compressed), without what the agent's watch remembers of the step ids it took (up to
  :data:`~swarmlog.runtime.anomalies.RECENT_IDS` of them, the bulk of a small agent's capture);
* **every step id the fold remembered, once, in order** (:class:`TakenIds`): a fold restored at
  P is given the last ``RECENT_IDS`` of those taken before P (:class:`RecentIds`), exactly what
  a fold from zero remembers there;
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
other one is dropped and ``every`` doubles. Beside them, the remembered ids (their bytes, and five
8-byte numbers each) and one bit per offset of the log. :attr:`AgentIndex.memory` says how much
of each.
"""

from __future__ import annotations

import json
import logging
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..runtime.anomalies import RECENT_IDS, Presence
from ..runtime.checkpoint import capture
from ..runtime.engine import AgentCore

__all__ = ["DEFAULT_INDEX_BYTES", "DEFAULT_INDEX_EVERY", "AgentIndex", "IndexMemory"]

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
    ids_bytes: int
    offsets_bytes: int
    """The fold's marks of which offsets hold a message (one bit per offset)."""

    def to_json(self) -> dict[str, int]:
        return {"captures": self.captures, "capture_bytes": self.capture_bytes, "ids": self.ids,
                "ids_bytes": self.ids_bytes, "offsets_bytes": self.offsets_bytes}


class TakenIds:
    """Every step id the index's fold remembered, in the order it did (what :class:`~swarmlog.runtime.
    anomalies.Watch` keeps the latest :data:`~swarmlog.runtime.anomalies.RECENT_IDS` of), compactly:
    the ids in one buffer, their offsets, writers and steps in arrays. The watch of a fold from zero
    at P remembers exactly the last RECENT_IDS of those it had taken before P, so a capture leaves them
    out and a restored fold reads them here (:class:`RecentIds`): a capture stays the size of the
    agent's state, not of the watch's memory."""

    __slots__ = ("_text", "_ends", "_offsets", "_steps", "_writers", "_writer_names", "_by_hash", "_positions")

    def __init__(self) -> None:
        self._text = bytearray()
        self._ends = array("q")
        self._offsets = array("q")
        self._steps = array("q")
        self._writers = array("l")
        self._writer_names: dict[str, int] = {}
        self._by_hash = array("q")
        self._positions = array("q")

    def __len__(self) -> int:
        return len(self._ends)

    def add(self, event_id: str, kept: tuple[int, str, int]) -> None:
        off, writer, step = kept
        self._text += event_id.encode()
        self._ends.append(len(self._text))
        self._offsets.append(off)
        self._steps.append(step)
        self._writers.append(self._writer_names.setdefault(writer, len(self._writer_names)))

    def seal(self) -> None:
        """The fold is over: the lookup by id is built (each id's ``hash()`` and position, sorted)."""
        pairs = sorted((hash(self.event_id(i)), i) for i in range(len(self)))
        self._by_hash = array("q", [h for h, _ in pairs])
        self._positions = array("q", [i for _, i in pairs])

    def event_id(self, i: int) -> str:
        return self._text[self._ends[i - 1] if i else 0:self._ends[i]].decode()

    def entry(self, i: int) -> tuple[str, tuple[int, str, int]]:
        names = list(self._writer_names)
        return self.event_id(i), (self._offsets[i], names[self._writers[i]], self._steps[i])

    def find(self, event_id: str, lo: int, hi: int) -> int | None:
        """The position of ``event_id`` in ``[lo, hi)`` (None: not there)."""
        hashes, h = self._by_hash, hash(event_id)
        i = bisect_left(hashes, h)
        while i < len(hashes) and hashes[i] == h:
            pos = self._positions[i]
            if lo <= pos < hi and self.event_id(pos) == event_id:
                return pos
            i += 1
        return None

    @property
    def nbytes(self) -> int:
        return len(self._text) + 8 * (5 * len(self._ends))


class _Recording(OrderedDict[str, tuple[int, str, int]]):
    """The index fold's watch memory: every id it remembers is also added to the index's :class:`TakenIds`."""

    def __init__(self, taken: TakenIds) -> None:
        super().__init__()
        self.taken = taken

    def __setitem__(self, key: str, value: tuple[int, str, int]) -> None:
        self.taken.add(key, value)
        super().__setitem__(key, value)


class RecentIds:
    """What a fold restored at P remembers of the step ids it took: positions ``[lo, hi)`` of the index's
    :class:`TakenIds` (the last ``RECENT_IDS`` before P), then its own. The part of an ``OrderedDict`` a
    :class:`~swarmlog.runtime.anomalies.Watch` uses."""

    __slots__ = ("_taken", "_lo", "_hi", "_own")

    def __init__(self, taken: TakenIds, lo: int, hi: int) -> None:
        self._taken, self._lo, self._hi = taken, lo, hi
        self._own: OrderedDict[str, tuple[int, str, int]] = OrderedDict()

    def get(self, event_id: str) -> tuple[int, str, int] | None:
        own = self._own.get(event_id)
        if own is not None or self._lo >= self._hi:
            return own
        pos = self._taken.find(event_id, self._lo, self._hi)
        return None if pos is None else self._taken.entry(pos)[1]

    def __setitem__(self, event_id: str, kept: tuple[int, str, int]) -> None:
        self._own[event_id] = kept

    def __len__(self) -> int:
        return self._hi - self._lo + len(self._own)

    def popitem(self, last: bool = True) -> tuple[str, tuple[int, str, int]]:
        if last:
            raise TypeError("a watch drops its oldest id only")
        if self._lo < self._hi:
            self._lo += 1
            return self._taken.entry(self._lo - 1)
        return self._own.popitem(last=False)

    def items(self) -> Iterator[tuple[str, tuple[int, str, int]]]:
        for i in range(self._lo, self._hi):
            yield self._taken.entry(i)
        yield from self._own.items()


class AgentIndex:
    """Captures of one agent's fold from offset zero, every ``every`` offsets up to ``end``."""

    def __init__(self, *, agent: str, every: int, max_bytes: int, probe: Callable[[int], bool]) -> None:
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
        self._finished = False
        self.taken = TakenIds()
        self._taken_before: list[int] = []
        self._presence: Presence | None = None
        self._probe = probe

    # -- building (the session's one fold) ------------------------------------------------------

    def keep(self, core: AgentCore, *, at: int, last: tuple[int, int]) -> None:
        """Keep ``core``'s fold just before offset ``at`` (``last``: the message it folded last)."""
        watch = core.watch
        recent, watch.recent = watch.recent, OrderedDict()  # left out: the index holds them (TakenIds)
        try:
            doc = capture(core)
        finally:
            watch.recent = recent
        # Kept as compressed JSON: a capture is mostly its outputs awaiting their record, alike from one
        # capture to the next; as Python objects it took several times its JSON size, compressed a
        # fraction of it, so twice as many fit the same bound. A query inflates and parses only the
        # one it restores.
        kept = zlib.compress(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), 1)
        size = len(kept)
        self._at.append(at)
        self._taken_before.append(len(self.taken))
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
        self._taken_before = [self._taken_before[i] for i in keep]
        self._sizes = [self._sizes[i] for i in keep]
        self._bytes = sum(self._sizes)
        self.every *= 2
        logger.info("index of %s: past %d bytes of captures, now one every %d offsets", self.agent, self.max_bytes,
                    self.every)

    def finish(self, core: AgentCore, *, end: int) -> None:
        """The fold reached ``end``: the offsets it read answer every restored fold's questions about them."""
        self._presence = core.watch.presence
        self.taken.seal()
        self._finished = True
        self.end = end

    # -- reading ----------------------------------------------------------------------------------

    def start(self, at: int) -> tuple[int, dict[str, Any], tuple[int, int]] | None:
        """The latest capture at or before ``at`` (its offset, the capture, its last message); None: none."""
        if at > self.end or not self._finished:
            return None
        k = bisect_right(self._at, at) - 1
        if k < 0:
            return None
        return self._at[k], json.loads(zlib.decompress(self._docs[k])), self._lasts[k]

    def recording(self, core: AgentCore) -> None:
        """Have the index's fold (``core``, nothing folded yet) add every id its watch remembers here."""
        core.watch.recent = _Recording(self.taken)

    def share(self, core: AgentCore, *, at: int) -> None:
        """Give ``core``, just restored from the capture at ``at``, what its watch remembered of the step ids
        it took (a capture leaves them out): the last ``RECENT_IDS`` the index's fold had taken there."""
        k = self._taken_before[bisect_right(self._at, at) - 1]
        core.watch.recent = RecentIds(self.taken, max(0, k - RECENT_IDS), k)

    def held(self, offset: int) -> bool:
        """Whether ``offset`` (before the index's end) holds a message: from the fold's marks, else the log."""
        p = self._presence
        held = p.holds(offset) if p is not None and offset < self.end else None
        return self._probe(offset) if held is None else held

    @property
    def memory(self) -> IndexMemory:
        p = self._presence
        return IndexMemory(captures=len(self._at), capture_bytes=self._bytes, ids=len(self.taken),
                           ids_bytes=self.taken.nbytes,
                           offsets_bytes=p.nbytes if p is not None else 0)
