"""What a LangGraph thread holds, folded from its records in log order (pure: no I/O).

The checkpointer writes three kinds of record to the swarm's topic (``langgraph.checkpoint``,
``langgraph.writes``, ``langgraph.deleted``) and never changes one; what ``get_tuple`` and ``list``
see is this fold of them, in offset order. The log's order decides every question a database
would decide by locking:

* **A deletion covers what was written before it.** ``delete_thread``, ``delete_for_runs`` and
  ``prune`` are records; a checkpoint (and its writes) is out of view once a deletion at a higher
  offset covers it, and a checkpoint written after the deletion is not covered, whichever process
  wrote either. ``prune(keep_latest)`` keeps, per (thread, namespace), the checkpoint with the
  highest id among those in view at the deletion's offset.
* **The same checkpoint written twice**: the later record is the checkpoint (an upsert).
* **Pending writes** of one task are idempotent per (task, index) as in LangGraph's own savers: a
  regular write keeps its first record, a special one (ERROR, INTERRUPT, ...: negative index) its
  last; they are returned in ``writes_sort_key`` order (task path, task id, index).
* **Channel values** are stored once per (channel, version), in the checkpoint that changed them.
  A checkpoint's value for a channel is the blob of that version found first walking back from the
  checkpoint through its parents, then, failing that, the newest blob of that (channel, version)
  in its namespace since the thread was last deleted. Walking the parents is what keeps two
  branches of a time-travelled thread apart when both reach the same version number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...log.protocol import LANGGRAPH_CHECKPOINT, LANGGRAPH_DELETED, LANGGRAPH_WRITES

__all__ = ["CHECKPOINT", "DELETED", "WRITES", "CheckpointRow", "ThreadFold", "WriteRow"]

CHECKPOINT = LANGGRAPH_CHECKPOINT
WRITES = LANGGRAPH_WRITES
DELETED = LANGGRAPH_DELETED

Key = tuple[str, str, str]
"""(thread_id, checkpoint_ns, checkpoint_id)."""


@dataclass(slots=True)
class CheckpointRow:
    """One ``langgraph.checkpoint`` record, as read back (blobs as ``(channel, version)`` keys only)."""

    seq: int
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    blob_keys: frozenset[tuple[str, str]]

    @property
    def key(self) -> Key:
        return (self.thread_id, self.checkpoint_ns, self.checkpoint_id)

    @classmethod
    def from_payload(cls, seq: int, payload: dict[str, Any], blob_keys: Iterable[tuple[str, str]]) -> CheckpointRow:
        return cls(seq=seq, thread_id=payload["thread_id"], checkpoint_ns=payload["checkpoint_ns"],
                   checkpoint_id=payload["checkpoint_id"], parent_checkpoint_id=payload.get("parent_checkpoint_id"),
                   checkpoint=json.loads(payload["checkpoint_json"]), metadata=json.loads(payload["metadata_json"]),
                   blob_keys=frozenset((c, v) for c, v in blob_keys))


@dataclass(slots=True)
class WriteRow:
    """One write of a ``langgraph.writes`` record (its value still serialized)."""

    seq: int
    task_id: str
    task_path: str
    idx: int
    channel: str
    type: str
    data: bytes


@dataclass(slots=True)
class _Deletion:
    seq: int
    thread_ids: frozenset[str]
    run_ids: frozenset[str]
    keep_latest: bool


@dataclass
class ThreadFold:
    """The records of some threads folded in offset order: what is in view, and where every blob is.

    Feed it :meth:`checkpoint`, :meth:`writes` and :meth:`deleted` in ascending ``seq``; then ask
    :meth:`visible`, :meth:`pending_writes` and :meth:`blob_source`.
    """

    _visible: dict[Key, CheckpointRow] = field(default_factory=dict)
    _every: dict[tuple[str, str], dict[str, list[CheckpointRow]]] = field(default_factory=dict)
    """(thread, ns) -> checkpoint id -> its records in log order, in view or not (blobs outlive views)."""
    _writes: dict[Key, dict[tuple[str, int], WriteRow]] = field(default_factory=dict)
    _reset_at: dict[str, int] = field(default_factory=dict)
    """thread -> offset of the last deletion that covered the whole thread (blobs before it are gone)."""

    def checkpoint(self, row: CheckpointRow) -> None:
        self._visible[row.key] = row
        self._every.setdefault((row.thread_id, row.checkpoint_ns), {}).setdefault(row.checkpoint_id, []).append(row)

    def writes(self, key: Key, rows: Iterable[WriteRow]) -> None:
        held = self._writes.setdefault(key, {})
        for w in rows:
            slot = (w.task_id, w.idx)
            if w.idx < 0 or slot not in held:  # special writes are upserted, regular ones kept first
                held[slot] = w

    def deleted(self, *, seq: int, thread_ids: Iterable[str], run_ids: Iterable[str], keep_latest: bool) -> None:
        d = _Deletion(seq, frozenset(thread_ids), frozenset(run_ids), keep_latest)
        keep: set[Key] = set()
        if d.keep_latest:
            latest: dict[tuple[str, str], Key] = {}
            for key in self._visible:
                if key[0] in d.thread_ids:
                    tn = (key[0], key[1])
                    if tn not in latest or key[2] > latest[tn][2]:
                        latest[tn] = key
            keep = set(latest.values())
        else:
            for thread in d.thread_ids:
                self._reset_at[thread] = seq
        for key, row in list(self._visible.items()):
            if row.seq > seq or key in keep:
                continue
            if key[0] in d.thread_ids or row.metadata.get("run_id") in d.run_ids:
                del self._visible[key]
                self._writes.pop(key, None)
        for key in [k for k in self._writes if k[0] in d.thread_ids and k not in self._visible]:
            del self._writes[key]  # writes to a checkpoint that was never (or no longer) in view

    # -- questions ---------------------------------------------------------------------------

    def visible(self) -> list[CheckpointRow]:
        """Every checkpoint in view, newest first (descending checkpoint id, as LangGraph lists)."""
        return sorted(self._visible.values(), key=lambda r: r.checkpoint_id, reverse=True)

    def pending_writes(self, key: Key) -> list[WriteRow]:
        held = self._writes.get(key)
        if not held:
            return []
        return sorted(held.values(), key=lambda w: (w.task_path, w.task_id, w.idx))

    def blob_source(self, row: CheckpointRow, channel: str, version: str) -> int | None:
        """The offset of the record holding ``row``'s value of ``channel`` at ``version`` (see the module)."""
        wanted = (channel, version)
        chain = self._every.get((row.thread_id, row.checkpoint_ns), {})
        seen: set[str] = set()
        current: CheckpointRow | None = row
        while current is not None and current.checkpoint_id not in seen:
            if wanted in current.blob_keys:
                return current.seq
            seen.add(current.checkpoint_id)
            parent = current.parent_checkpoint_id
            records = chain.get(parent) if parent is not None else None
            current = _latest_before(records, current.seq) if records else None
        since = self._reset_at.get(row.thread_id, -1)
        found = [r.seq for records in chain.values() for r in records
                 if wanted in r.blob_keys and since < r.seq <= row.seq]
        return max(found) if found else None


def _latest_before(records: list[CheckpointRow], seq: int) -> CheckpointRow | None:
    """The last record of a parent written before its child (an upsert after it is another checkpoint)."""
    before = [r for r in records if r.seq < seq]
    return before[-1] if before else records[-1]
