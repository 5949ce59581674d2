"""One agent's fold kept in memory by a session: its state at any offset from a capture a few offsets back.

A query of ``state AGENT --at N`` from the snapshot topic restores the latest snapshot at or
before N and folds the tail. Two things make that slow on a long log, whatever the interval:
a capture holds every event id its agent ever took (what tells a repeated event from a new
one), so it grows with the log and its parse grows with it; and a tail's first step asks the
log whether the offsets its causes name held a message (one read each).

:meth:`swarmlog.debug.Session.index` folds the agent once, from offset zero to the end of the
log as it is then, and keeps:

* **a capture every** ``every`` **offsets** (:func:`~swarmlog.runtime.checkpoint.capture`),
  without its ids: the fold that went to the end holds them all, each with the offset it was
  first taken at, so the ids a fold restored at P has taken are those first taken before P
  (:meth:`~swarmlog.runtime.anomalies.Watch.share_ids`: read through, never copied);
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

**Memory.** Captures are kept as JSON and take ``max_bytes`` at most: past it, every other one
is dropped and ``every`` doubles. Beside them, the agent's ids (one entry per event it took)
and one byte per offset of the log. :attr:`AgentIndex.memory` says how much of each.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.anomalies import Presence
from ..runtime.checkpoint import capture
from ..runtime.engine import AgentCore

__all__ = ["DEFAULT_INDEX_BYTES", "DEFAULT_INDEX_EVERY", "AgentIndex", "IndexMemory"]

logger = logging.getLogger(__name__)

DEFAULT_INDEX_EVERY = 64
"""Offsets between two kept captures: a query folds at most this many offsets of tail."""
DEFAULT_INDEX_BYTES = 64 << 20
"""The captures' JSON bytes an index keeps at most (then it keeps every other one)."""


@dataclass(frozen=True, slots=True)
class IndexMemory:
    """What an index holds, in bytes (captures: their JSON size) and entries."""

    captures: int
    capture_bytes: int
    ids: int
    offsets: int

    def to_json(self) -> dict[str, int]:
        return {"captures": self.captures, "capture_bytes": self.capture_bytes, "ids": self.ids,
                "offsets": self.offsets}


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
        self._ids: dict[str, int] = {}
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
        # Kept as JSON bytes: a capture is mostly its outputs awaiting their record, and as Python
        # objects it takes several times its JSON size; a query parses only the one it restores.
        kept = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
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
        self._ids = core.watch._ids
        self._presence = core.watch.presence
        self.end = end

    # -- reading ----------------------------------------------------------------------------------

    def start(self, at: int) -> tuple[int, dict[str, Any], tuple[int, int]] | None:
        """The latest capture at or before ``at`` (its offset, the capture, its last message); None: none."""
        if at > self.end:
            return None
        k = bisect_right(self._at, at) - 1
        if k < 0:
            return None
        return self._at[k], json.loads(self._docs[k]), self._lasts[k]

    def share(self, core: AgentCore, *, at: int) -> None:
        """Give ``core``, just restored from the capture at ``at``, the ids its agent took before ``at``."""
        core.watch.share_ids(self._ids, before=at)

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
        return IndexMemory(captures=len(self._at), capture_bytes=self._bytes, ids=len(self._ids),
                           offsets=len(p._marks) if p is not None else 0)
