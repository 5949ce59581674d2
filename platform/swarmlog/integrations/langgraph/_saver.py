"""A LangGraph checkpointer whose checkpoints are events of the swarm's Kafka log.

``SwarmlogSaver`` is a ``BaseCheckpointSaver`` (sync and async methods): a LangGraph user keeps
the graph, passes ``checkpointer=SwarmlogSaver(...)``, and every checkpoint and pending write
becomes an event of the swarm's topic — in the log's total order beside the swarm's messages,
mirrored into Postgres by the sink, covered by replay tokens, readable with ``swarmlog log``::

    from swarmlog.integrations.langgraph import SwarmlogSaver

    with SwarmlogSaver.from_env() as saver:                 # SWARMLOG_* settings, SWARMLOG_TOPIC
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "incident-42"}})

**Writes go to the log, reads come from the mirror.** ``put`` and ``put_writes`` append one event
each (validated, ``acks=all``, idempotent producer) and return once Kafka acknowledged it: the log
is the truth and the write is durable when the call returns. ``get_tuple`` and ``list`` query the
Postgres mirror the sink keeps (``events``), folding the thread's records in offset order
(:mod:`._fold` says how deletions, upserts and channel blobs resolve). ``delete_thread``,
``delete_for_runs``, ``prune`` and ``copy_thread`` are records too: the log is append-only, so a
deletion takes checkpoints out of view — for every reader, from its offset on — and the bytes stay
in the log (and its mirror) like every other event, for replay and audit.

What is exact, and why:

* **Read-your-writes.** A read waits until the mirror's position (``sink_positions``, written in the
  same Postgres transaction as the rows: the sink is exactly-once) has passed the offset of this
  saver's last write, so it sees that write and everything before it in the log — other writers'
  records included. A mirror that does not get there within ``read_timeout`` is a
  :class:`~swarmlog.errors.MirrorBehind` naming both offsets (is ``swarmlog sink`` running for the
  topic?), never a silently stale answer.
* **Order.** Which of two concurrent writers' records came first is their offsets' order, the same
  for every reader, the mirror, replay and a restored copy. A deletion covers exactly what was
  written before it.
* **What another process wrote** is seen once the mirror has it: a reader that has written nothing
  gets the mirror as it is (the sink's lag: milliseconds in ``make bench``'s latency row).
* Checkpoint ids come from LangGraph (uuid6, time-ordered), and "latest" is the highest id, as in
  LangGraph's own savers. Channel versions are LangGraph's default integers, deterministic.

The swarm's agents never receive these events: no agent handles their types.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...errors import ConfigurationError, MirrorBehind, PostgresUnavailable
from ...log.append import EventLog
from ...settings import Settings
from ._fold import CHECKPOINT, DELETED, WRITES, CheckpointRow, ThreadFold, WriteRow

__all__ = ["SwarmlogSaver"]

logger = logging.getLogger(__name__)

_FIRST_WAIT_S = 0.002
_MAX_WAIT_S = 0.05

# One thread's records, without the channel values and writes' bytes (fetched for what is returned).
_THREAD_ROWS = """
    SELECT seq, event_type, payload - 'blobs' - 'writes',
           CASE WHEN event_type = %(ckpt)s THEN
                (SELECT coalesce(jsonb_agg(jsonb_build_array(b->>'channel', b->>'version')), '[]'::jsonb)
                 FROM jsonb_array_elements(payload->'blobs') b) END,
           CASE WHEN event_type = %(writes)s THEN
                (SELECT coalesce(jsonb_agg(jsonb_build_array(w->>'idx', w->>'channel')), '[]'::jsonb)
                 FROM jsonb_array_elements(payload->'writes') w) END
    FROM events
    WHERE topic = %(topic)s AND event_type IN (%(ckpt)s, %(writes)s, %(deleted)s)
      AND ({thread_filter}
           OR (event_type = %(deleted)s AND payload->'run_ids' <> '[]'::jsonb))
    ORDER BY seq"""
_ONE_THREAD = "payload->>'thread_id' = %(thread)s OR (event_type = %(deleted)s AND payload->'thread_ids' ? %(thread)s)"
_ALL_THREADS = "TRUE"


class SwarmlogSaver(BaseCheckpointSaver[int]):
    """LangGraph's checkpointer on a swarm's Kafka topic and its Postgres mirror (see the module).

    Keyword-only: ``settings`` (Kafka, Postgres, the topic), ``topic`` (default ``settings.topic``),
    ``writer`` (the ``agent_id`` of its events; default ``"langgraph"``), ``run_id`` (of its events),
    ``serde`` (LangGraph's serializer; default its ``JsonPlusSerializer``), ``read_timeout``
    (seconds a read waits for the mirror to have this saver's last write).
    """

    def __init__(self, *, settings: Settings, topic: str | None = None, writer: str = "langgraph", run_id: str = "",
                 serde: SerializerProtocol | None = None, read_timeout: float = 30.0) -> None:
        super().__init__(serde=serde)
        self.settings = settings
        self.topic = topic or settings.topic
        if not self.topic:
            raise ConfigurationError("SwarmlogSaver needs a topic: SWARMLOG_TOPIC, or SwarmlogSaver(topic=...)")
        self.writer = writer
        self.read_timeout = read_timeout
        self._lock = threading.Lock()  # one producer and one connection, used by one call at a time
        self._log = EventLog(settings=settings, topic=self.topic, run_id=run_id)
        try:
            self._db = psycopg.connect(settings.database_conninfo(), autocommit=True)
        except psycopg.OperationalError as exc:
            self._log.close()
            raise PostgresUnavailable(address=settings.database_url.rpartition("@")[2],
                                     detail=str(exc).strip()) from None
        self._written = -1
        """The offset of this saver's last record: reads wait for the mirror to pass it."""

    @classmethod
    def from_env(cls, **kwargs: Any) -> SwarmlogSaver:
        """A saver on ``SWARMLOG_BOOTSTRAP_SERVERS``, ``SWARMLOG_DATABASE_URL`` and ``SWARMLOG_TOPIC``."""
        return cls(settings=Settings.from_env(), **kwargs)

    def close(self) -> None:
        with self._lock:
            try:
                self._log.close()
            finally:
                self._db.close()

    def __enter__(self) -> SwarmlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes: events of the log ----------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
        values = checkpoint["channel_values"]
        blobs = [self._blob(channel, version, values[channel] if channel in values else None, channel in values)
                 for channel, version in new_versions.items()]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        payload = {
            "thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint_json": json.dumps(body, separators=(",", ":")),
            "metadata_json": json.dumps(get_serializable_checkpoint_metadata(config, metadata),
                                        separators=(",", ":"), default=str),
            "blobs": blobs, "copied_from": None}
        self._append([(CHECKPOINT, payload)])
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        configurable = config["configurable"]
        rows = []
        for i, (channel, value) in enumerate(writes):
            type_, data = self.serde.dumps_typed(value)
            rows.append({"idx": WRITES_IDX_MAP.get(channel, i), "channel": channel, "type": type_, "data": data})
        self._append([(WRITES, {
            "thread_id": str(configurable["thread_id"]), "checkpoint_ns": str(configurable.get("checkpoint_ns", "")),
            "checkpoint_id": configurable["checkpoint_id"], "task_id": task_id, "task_path": task_path,
            "writes": rows})])

    def delete_thread(self, thread_id: str) -> None:
        self._append([(DELETED, {"thread_ids": [str(thread_id)], "run_ids": [], "keep_latest": False,
                                 "reason": "delete_thread"})])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self._append([(DELETED, {"thread_ids": [], "run_ids": [str(r) for r in run_ids], "keep_latest": False,
                                     "reason": "delete_for_runs"})])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigurationError(f"prune(strategy={strategy!r}): swarmlog's checkpointer knows 'keep_latest' "
                                     f"and 'delete'")
        if thread_ids:
            self._append([(DELETED, {"thread_ids": [str(t) for t in thread_ids], "run_ids": [],
                                     "keep_latest": strategy == "keep_latest", "reason": "prune"})])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every checkpoint of the source in view, each with all its channel values (not only the ones it
        changed: its ancestors may be out of view) and its pending writes, written for the target."""
        fold = self._fold(str(source_thread_id))
        records: builtins.list[tuple[str, dict[str, Any]]] = []
        for row in sorted(fold.visible(), key=lambda r: r.seq):
            blobs = self._resolved_blobs(fold, row, raw=True)
            records.append((CHECKPOINT, {
                "thread_id": str(target_thread_id), "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id, "parent_checkpoint_id": row.parent_checkpoint_id,
                "checkpoint_json": json.dumps(row.checkpoint, separators=(",", ":")),
                "metadata_json": json.dumps(row.metadata, separators=(",", ":")),
                "blobs": blobs, "copied_from": str(source_thread_id)}))
            writes = self._writes_of(fold.pending_writes(row.key))
            by_task: dict[tuple[str, str], builtins.list[dict[str, Any]]] = {}
            for w in writes:
                by_task.setdefault((w.task_path, w.task_id), []).append(
                    {"idx": w.idx, "channel": w.channel, "type": w.type, "data": w.data})
            for (path, task), ws in by_task.items():
                records.append((WRITES, {"thread_id": str(target_thread_id), "checkpoint_ns": row.checkpoint_ns,
                                         "checkpoint_id": row.checkpoint_id, "task_id": task, "task_path": path,
                                         "writes": ws}))
        if records:
            self._append(records)

    # -- reads: the mirror ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
        wanted = get_checkpoint_id(config)
        fold = self._fold(thread_id)
        for row in fold.visible():  # newest first
            if row.checkpoint_ns == checkpoint_ns and (wanted is None or row.checkpoint_id == wanted):
                return self._tuple(fold, row)
        return None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        thread_id = configurable.get("thread_id")
        checkpoint_ns = configurable.get("checkpoint_ns")
        wanted = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before is not None else None
        fold = self._fold(None if thread_id is None else str(thread_id))
        found = 0
        for row in fold.visible():
            if thread_id is not None and row.thread_id != str(thread_id):
                continue
            if checkpoint_ns is not None and row.checkpoint_ns != checkpoint_ns:
                continue
            if wanted is not None and row.checkpoint_id != wanted:
                continue
            if before_id is not None and row.checkpoint_id >= before_id:
                continue
            if filter and any(row.metadata.get(k, _MISSING) != v for k, v in filter.items()):
                continue
            if limit is not None and found >= limit:
                return
            found += 1
            yield self._tuple(fold, row)

    # -- async: the same calls, off the event loop ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    # -- internals --------------------------------------------------------------------------

    def _blob(self, channel: str, version: Any, value: Any, present: bool) -> dict[str, Any]:
        if not present:
            return {"channel": channel, "version": str(version), "type": "empty", "data": b""}
        type_, data = self.serde.dumps_typed(value)
        return {"channel": channel, "version": str(version), "type": type_, "data": data}

    def _append(self, records: builtins.list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            for event_type, payload in records:
                self._log.produce(event_type, payload, agent=self.writer)
            offsets = self._log.flush()
            self._written = max(self._written, offsets[-1])

    def _wait_for_mirror(self) -> None:
        """Read-your-writes: until the mirror's position is past this saver's last record."""
        if self._written < 0:
            return
        deadline = time.monotonic() + self.read_timeout
        wait = _FIRST_WAIT_S
        while True:
            row = self._db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (self.topic,)).fetchone()
            position = row[0] if row is not None else 0
            if position > self._written:
                return
            if time.monotonic() >= deadline:
                raise MirrorBehind(topic=self.topic, written=self._written, mirrored=position,
                                   waited_s=self.read_timeout)
            time.sleep(wait)
            wait = min(wait * 2, _MAX_WAIT_S)

    def _fold(self, thread_id: str | None) -> ThreadFold:
        with self._lock:
            self._wait_for_mirror()
            sql = _THREAD_ROWS.format(thread_filter=_ONE_THREAD if thread_id is not None else _ALL_THREADS)
            rows = self._db.execute(sql, {"topic": self.topic, "thread": thread_id, "ckpt": CHECKPOINT,
                                          "writes": WRITES, "deleted": DELETED}).fetchall()
        fold = ThreadFold()
        for seq, event_type, payload, blob_keys, write_keys in rows:
            if event_type == CHECKPOINT:
                fold.checkpoint(CheckpointRow.from_payload(seq, payload, blob_keys))
            elif event_type == WRITES:
                key = (payload["thread_id"], payload["checkpoint_ns"], payload["checkpoint_id"])
                fold.writes(key, [WriteRow(seq, payload["task_id"], payload.get("task_path", ""), int(idx), channel,
                                           "", b"") for idx, channel in write_keys])
            else:
                fold.deleted(seq=seq, thread_ids=payload["thread_ids"], run_ids=payload["run_ids"],
                             keep_latest=payload["keep_latest"])
        return fold

    def _fetch(self, seqs: set[int], field: str) -> dict[int, builtins.list[dict[str, Any]]]:
        """The ``blobs`` or ``writes`` arrays of these records (bytes from the mirror's base64)."""
        if not seqs:
            return {}
        with self._lock:
            rows = self._db.execute(f"SELECT seq, payload->'{field}' FROM events WHERE topic = %s AND seq = ANY(%s)",
                                    (self.topic, sorted(seqs))).fetchall()
        return {seq: [{**item, "data": _b64(item["data"])} for item in items] for seq, items in rows}

    def _resolved_blobs(self, fold: ThreadFold, row: CheckpointRow, *, raw: bool = False) -> Any:
        versions = row.checkpoint.get("channel_versions", {})
        sources = {ch: fold.blob_source(row, ch, str(v)) for ch, v in versions.items()}
        fetched = self._fetch({s for s in sources.values() if s is not None}, "blobs")
        out_raw: builtins.list[dict[str, Any]] = []
        values: dict[str, Any] = {}
        for ch, seq in sources.items():
            if seq is None:
                continue
            version = str(versions[ch])
            blob = next(b for b in fetched[seq] if b["channel"] == ch and b["version"] == version)
            if blob["type"] == "empty":
                continue
            out_raw.append(blob)
            values[ch] = self.serde.loads_typed((blob["type"], blob["data"]))
        return out_raw if raw else values

    def _writes_of(self, rows: builtins.list[WriteRow]) -> builtins.list[WriteRow]:
        fetched = self._fetch({w.seq for w in rows}, "writes")
        out = []
        for w in rows:
            item = next(x for x in fetched[w.seq] if x["idx"] == w.idx and x["channel"] == w.channel)
            out.append(WriteRow(w.seq, w.task_id, w.task_path, w.idx, w.channel, item["type"], item["data"]))
        return out

    def _tuple(self, fold: ThreadFold, row: CheckpointRow) -> CheckpointTuple:
        checkpoint = {**row.checkpoint, "channel_values": self._resolved_blobs(fold, row)}
        writes = [(w.task_id, w.channel, self.serde.loads_typed((w.type, w.data)))
                  for w in self._writes_of(fold.pending_writes(row.key))]
        config: RunnableConfig = {"configurable": {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns,
                                                   "checkpoint_id": row.checkpoint_id}}
        parent: RunnableConfig | None = None
        if row.parent_checkpoint_id is not None:
            parent = {"configurable": {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns,
                                       "checkpoint_id": row.parent_checkpoint_id}}
        return CheckpointTuple(config=config, checkpoint=checkpoint,  # type: ignore[arg-type]
                               metadata=row.metadata, parent_config=parent,  # type: ignore[arg-type]
                               pending_writes=writes)


_MISSING = object()


def _b64(text: str) -> bytes:
    import base64

    return base64.b64decode(text)
