"""One agent's fold kept in memory by a session: its state at any offset from a capture a few offsets back.

A query of ``state AGENT --at N`` from the snapshot topic restores the latest snapshot at or
before N and folds the tail after it: thousands of offsets with the usual interval, and a
tail's first step asks the log whether the offsets its causes name held a message (one read
each).

:meth:`swarmlog.debug.Session.index` folds the agent once, from offset zero to the end of the
log as it is then, and keeps:

* **a capture every** ``every`` **offsets** (:func:`~swarmlog.runtime.checkpoint.capture`,
  compressed);
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
other one is dropped and ``every`` doubles. Beside them, one byte per offset of the log.
:attr:`AgentIndex.memory` says how much of each.
"""

from __future__ import annotations

import json
import logging
import zlib
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.anomalies import Presence
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
    offsets: int

    def to_json(self) -> dict[str, int]:
        return {"captures": self.captures, "capture_bytes": self.capture_bytes, "offsets": self.offsets}


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
        self._presence: Presence | None = None
        self._probe = probe

    # -- building (the session's one fold) ------------------------------------------------------

    def keep(self, core: AgentCore, *, at: int, last: tuple[int, int]) -> None:
        """Keep ``core``'s fold just before offset ``at`` (``last``: the message it folded last)."""
        doc = capture(core)
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
        """The fold reached ``end``: the offsets it read answer every restored fold's questions about them."""
        self._presence = core.watch.presence
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
                           offsets=len(p._marks) if p is not None else 0)
