"""Restart from a verified checkpoint: a live agent's fold, written in its own transaction.

Public inside the package. Without checkpoints a restarted agent rebuilds from offset zero:
it reads every message of the topic and re-runs every step it ever took, so its restart
costs as much as the log is long. With ``SWARMLOG_CHECKPOINT_EVERY=N`` (N > 0) a live agent
also keeps, every N steps, its whole fold (:func:`.checkpoint.capture`: state, timers,
counters, the run's seed) beside the log, and a restart starts from the latest one, after
checking it against the log, and reads only what came after it. With N = 0 (the default) a
restart does not look for checkpoints at all.

**Where.** In the log's snapshot topic, ``<topic>.snapshots``
(:func:`~swarmlog.log.protocol.snapshot_topic`), in the debugger's snapshot record format
(:mod:`swarmlog.runtime.snapshots`: key = agent; headers say agent, offset and code version):
so the debugger's time travel (``state AGENT --at N``) starts from a live agent's checkpoints
as it does from its own snapshots. A checkpoint is a snapshot with one more field,
``checkpoint``: the step whose recorded state digest vouches for it.

**When, and what is exactly-once here.** A checkpoint is written into the agent's open
transaction, after the batch's outputs and its ``state.digest`` record, and the transaction
commits them together with the agent's consumer position (:meth:`~swarmlog.log.base.AgentChannel.send_beside`:
one Kafka transaction spans the log's partition and the snapshot topic's). Either the batch's
outputs, its digests, its position *and* the checkpoint all become visible (to ``read_committed``
readers, which every swarmlog reader is), or none does. A SIGKILL anywhere before the commit
leaves the transaction open; the next life's fence aborts it, the checkpoint with it, and the next
life resumes from the previous checkpoint and re-runs the aborted batch's steps live: nothing
lost, nothing written twice (``tests/integration/test_checkpoints.py``). A SIGKILL during the commit
cannot split it: once the coordinator has decided to commit, it commits both partitions.
What is *not* transactional: the snapshot topic itself is created (once, idempotently) before
the first transaction that writes to it.

**Verified, or not used.** A checkpoint taken at position P was written in the same transaction
as the agent's ``state.digest`` record of its last step S before P, which lies in the log at P or
later. A restart reads the log from P (:func:`.history.first_pass`, ``start=P``), restores the
checkpoint into a fresh :class:`~.engine.AgentCore`, and compares the digest of the restored state
with the digest the log recorded for S. If they differ (a damaged or forged checkpoint, another
run's), or the log holds no digest for S, or the checkpoint cannot be read or restored, the agent
logs a warning naming why and rebuilds from offset zero instead, as it would without checkpoints.
``--from-zero`` (``run_agents(from_zero=True)``) skips checkpoints and re-verifies every step.

**What a resumed agent skips**, and a rebuild from zero would check: the steps before P are not
re-run, so a change of code that would make one of them write other outputs goes unnoticed by the
restart (a ``replay --swarm`` still reports it: it folds from zero). The log's digest covers the
agent's state, not the rest of the fold (its timers' counts, its event counter): those are as the
checkpoint says. Steps after P are replayed and checked as before, each against its output
records and its state digest.

A checkpoint is only written of a fold that is clean (nothing diverged, nothing unverified) and has
nothing waiting to be checked, with state digests on (``SWARMLOG_STATE_DIGEST_EVERY`` > 0: a
checkpoint no digest vouches for would not be used).
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

from ..errors import SwarmlogError, TopicNotFound
from ..log.base import AgentChannel, LogBackend, Message
from ..log.protocol import H_AGENT, H_SNAPSHOT_AT, H_SNAPSHOT_CODE
from ..schema.registry import SchemaRegistry
from .checkpoint import StateNotCapturable, capture, clean, restore
from .digests import DigestRecord, state_digest
from .engine import AgentCore
from .history import AgentHistory
from .snapshots import SNAPSHOT_FORMAT, SnapshotStore

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKPOINT_FIELD",
    "LOOK_BACK",
    "Checkpoint",
    "Checkpoints",
]

LOOK_BACK = 64
"""Records of the snapshot topic read at a time, from its end, looking for an agent's latest checkpoint."""

CHECKPOINT_FIELD = "checkpoint"
"""The field of a snapshot record that makes it a live agent's checkpoint: ``{"step": S}``."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A live agent's checkpoint as read back: its fold just before ``at``, vouched for by the digest of ``step``."""

    agent: str
    at: int
    step: int
    fold: dict[str, Any]


class Checkpoints:
    """One agent's checkpoints of one log: written by its live life, read back by the next one."""

    def __init__(self, *, backend: LogBackend, topic: str, registry: SchemaRegistry, code_version: str,
                 agent: str, every: int) -> None:
        """``every``: live steps between two checkpoints (0: none written; the latest is still read)."""
        self.agent = agent
        self.every = every
        self.store = SnapshotStore(backend=backend, topic=topic, registry=registry, code_version=code_version)
        self._backend = backend
        self._written_at_step = 0  # core.steps when the last one was written (or the fold resumed)
        self.written = 0
        """Checkpoints written by this process whose transaction committed."""
        self._topic_made = False

    # -- reading -----------------------------------------------------------------------------

    def latest(self, *, before: int) -> Checkpoint | None:
        """The latest checkpoint of the agent at or before offset ``before`` this code can restore (None: none).

        Only this code version's and these schemas' (:meth:`SnapshotStore.unusable`): another code's
        fold is not this code's fold. A debugger's snapshot is not a checkpoint (no digest vouches
        for it) and is passed over.

        Read backwards from the snapshot topic's end, a window at a time (:data:`LOOK_BACK`, doubled
        each time), headers first: the topic keeps every checkpoint and snapshot ever written, and a
        restart that read them all would again cost as much as the run is long. Every live agent
        writes one every N steps, so an agent's latest is near the end.
        """
        topic = self.store.snapshot_topic
        try:
            with self._backend.reader(topic):
                pass  # TopicNotFound at once, where asking a missing topic's watermarks would wait
        except TopicNotFound:
            return None
        low, high = self._backend.watermarks(topic)
        window = LOOK_BACK
        me = self.agent.encode()
        while high > low:
            start = max(low, high - window)
            for m in reversed(self._window(topic, start, high)):
                h = dict(m.headers() or ())
                if h.get(H_AGENT) != me:
                    continue
                try:
                    at = int(h[H_SNAPSHOT_AT])
                except (KeyError, ValueError):
                    continue
                if at > before:
                    continue
                code = h.get(H_SNAPSHOT_CODE, b"").decode(errors="replace")
                if code != self.store.code_version:  # told by its headers: its value is not parsed
                    logger.info("agent %s: checkpoint at offset %d not used: made by code version %r, this is %r",
                                self.agent, at, code, self.store.code_version)
                    continue
                try:
                    doc = json.loads(m.value() or b"")
                except ValueError:
                    doc = None
                reason = self.store.unusable(doc) if isinstance(doc, dict) else "not a snapshot record"
                if reason is not None:
                    logger.info("agent %s: checkpoint at offset %d not used: %s", self.agent, at, reason)
                    continue
                fold = doc.get("fold")
                if not isinstance(fold, dict) or CHECKPOINT_FIELD not in fold:
                    continue  # a debugger's snapshot
                try:
                    step = int(fold[CHECKPOINT_FIELD]["step"])
                except (KeyError, TypeError, ValueError):
                    logger.info("agent %s: checkpoint at offset %d not used: it names no step", self.agent, at)
                    continue
                return Checkpoint(agent=self.agent, at=at, step=step, fold=fold)
            high, window = start, window * 2
        return None

    def _window(self, topic: str, start: int, end: int) -> list[Message]:
        with self._backend.reader(topic) as reader:
            reader.assign(start)
            return [m for batch in reader.batches(end=end) for m in batch]

    def resume(self, core: AgentCore, history: AgentHistory, checkpoint: Checkpoint) -> str | None:
        """Restore ``checkpoint`` into ``core`` (fresh, its ``history`` read from the checkpoint's position)
        if the log vouches for it; None when done, else why it was refused (``core`` is then spoilt)."""
        expected = history.digest_at(checkpoint.step)
        if expected is None:
            return (f"the log holds no state digest of step {checkpoint.step} after offset {checkpoint.at} "
                    f"(a checkpoint of another log, or state digests were off)")
        try:
            restore(core, checkpoint.fold)
            actual = state_digest(core.agent.state, agent=self.agent, offset=checkpoint.step)
        except SwarmlogError as exc:  # CheckpointUnreadable, a hash seed the interpreter lacks, a state not JSON
            return str(exc)
        if core.position != checkpoint.at:
            return f"its fold is at offset {core.position}, its record says {checkpoint.at}"
        if actual != expected:
            return (f"its state digests to {actual.hex()[:16]}…, the log recorded {expected.hex()[:16]}… "
                    f"for step {checkpoint.step}")
        self._written_at_step = core.steps
        return None

    # -- writing -----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Make the snapshot topic before the first transaction writes to it (idempotent)."""
        if self.every > 0 and not self._topic_made:
            self._backend.create_topic(self.store.snapshot_topic)
            self._topic_made = True

    def due(self, core: AgentCore) -> bool:
        """A checkpoint is due in the transaction being committed: ``every`` steps since the last, and the
        fold is one a checkpoint may keep (clean, nothing pending, its state digested)."""
        return (self.every > 0 and core.steps - self._written_at_step >= self.every and clean(core)
                and not core.pending and core.recorder is not None)

    def started(self, core: AgentCore) -> None:
        """A new life's fold (rebuilt from offset zero): the next checkpoint is ``every`` steps after its start."""
        self._written_at_step = core.steps

    def write(self, channel: AgentChannel, core: AgentCore, record: DigestRecord, last: Message) -> bool:
        """Write the checkpoint of ``core`` into ``channel``'s open transaction, beside ``record`` (the
        transaction's ``state.digest`` record, already written) and after ``last`` (the last message
        folded). Nothing is written if the record digested no step (nothing then vouches for it)."""
        if not record.steps or last.offset() != core.position - 1:
            return False
        try:
            fold = capture(core)
        except StateNotCapturable as exc:
            # Not a reason to abort the batch (its outputs are fine): this agent goes on without checkpoints.
            logger.warning("agent %s: no more checkpoints: %s", self.agent, exc)
            self.every = 0
            return False
        # Every step before the position ran live in this fold: its outputs, read after the
        # position by the resumed fold, are this fold's own writing, not records to check.
        fold["checked_from"] = core.position
        fold[CHECKPOINT_FIELD] = {"step": record.steps[-1]}
        store = self.store
        doc = {"format": SNAPSHOT_FORMAT, "topic": store.topic, "agent": self.agent, "at": core.position,
               "code_version": store.code_version, "schemas": store.schemas,
               "last": [last.offset(), zlib.crc32(last.value() or b"")], "fold": fold}
        headers = [(H_AGENT, self.agent.encode()), (H_SNAPSHOT_AT, str(core.position).encode()),
                   (H_SNAPSHOT_CODE, store.code_version.encode())]
        # Not canonical JSON: key order is the state's own (a handler may depend on it).
        channel.send_beside(store.snapshot_topic, json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(),
                            self.agent.encode(), headers)
        self._written_at_step = core.steps
        logger.debug("agent %s: checkpoint at offset %d (step %d) into the transaction", self.agent, core.position,
                     record.steps[-1])
        return True
