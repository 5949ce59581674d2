"""State digests in the record: what an agent's state was after its steps, written beside its outputs.

Public inside the package (the replay token reads the records too). Nondeterminism that
reaches an output is caught by comparing outputs; the kind that reaches only an agent's
state (``id()`` ordering, a C extension's value, a set of objects iterated in address order)
would be invisible. So the live agent records, for its steps, the sha256 of its state's
canonical JSON (the same digest as :func:`swarmlog.log.hashing.state_hash`), and every replay
and every restart recomputes it at the same step and compares
(:class:`~swarmlog.errors.StateDiverged`).

**Where and when.** One ``state.digest`` record per transaction, written last in it,
after the batch's outputs: the digests commit exactly when the steps they describe do
(an aborted batch loses both, and the next life re-runs those steps live and records
them again). The record carries the ``sl.step`` header of its last step, so the next
life's first pass counts those steps as history (replayed and checked, never recorded
twice), including steps that wrote no output.

**Which steps.** Every K-th step of the agent (K = ``SWARMLOG_STATE_DIGEST_EVERY``,
default 1) and the last step of every transaction, so the state is pinned at least
wherever the agent commits. The digest costs one canonical JSON encoding of the state
per digested step: a few microseconds for the small states of most agents (``make
bench`` measures it on the swarm); an agent with a large state sets K higher and a
divergence is then located to within K steps. K=0 records nothing (old logs, which
have no digests, replay as before: nothing to check).

**A stop.** An agent that stops cleanly once caught up writes a final record (``final``)
with the digest of its state as of its position, so a replay token can be made from the
log alone afterwards, even for an agent that never stepped.

Every fold reads the digests through the agent's recorded history (:mod:`.history`: a restart
by its first pass, a swarm replay and the debugger ahead of the fold), so each is compared right
after its step's handler: a strict replay or a restart raises at the step itself.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from ..errors import StateNotSerialisable
from ..log.hashing import canonical_json, sha256_digest

__all__ = [
    "DIGEST_SIZE",
    "DigestRecord",
    "DigestRecorder",
    "RecordedDigests",
    "state_digest",
]

DIGEST_SIZE = 32


def state_digest(state: Any, *, agent: str = "", offset: int = -1) -> bytes:
    """sha256 of the state's canonical JSON (the bytes of :func:`swarmlog.log.hashing.state_hash`);
    :class:`~swarmlog.errors.StateNotSerialisable` (naming ``agent`` and ``offset``) if it has none."""
    try:
        text = canonical_json(state)
    except (TypeError, ValueError) as exc:  # not JSON, or a circular reference
        raise StateNotSerialisable(agent=agent, offset=offset, detail=str(exc)) from None
    return sha256_digest(text)


@dataclass(frozen=True, slots=True)
class DigestRecord:
    """One ``state.digest`` record's payload, as read back."""

    steps: list[int]
    digests: list[bytes]
    position: int
    state: bytes
    final: bool
    every: int

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DigestRecord:
        return cls(steps=list(payload["steps"]), digests=list(payload["digests"]), position=payload["position"],
                   state=payload["state"], final=payload["final"], every=payload["every"])

    def payload(self) -> dict[str, Any]:
        return {"steps": self.steps, "digests": self.digests, "position": self.position, "state": self.state,
                "final": self.final, "every": self.every}


class RecordedDigests:
    """An agent's recorded per-step digests, in step order, looked up as the fold reaches each step.

    40 bytes a digested step (an int64 and 32 digest bytes), whatever the log's size.
    """

    __slots__ = ("_steps", "_digests", "_cursor", "_sorted", "last")

    def __init__(self) -> None:
        self._steps = array("q")
        self._digests = bytearray()
        self._cursor = 0
        self._sorted = True
        self.last: DigestRecord | None = None
        """The agent's record with the greatest position (the latest, on a tie)."""

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, record: DigestRecord) -> None:
        steps = self._steps
        for step, digest in zip(record.steps, record.digests, strict=True):
            if steps and step < steps[-1]:
                self._sorted = False
            steps.append(step)
            self._digests += digest
        if self.last is None or record.position >= self.last.position:
            self.last = record

    def at(self, step: int) -> bytes | None:
        """The recorded digest of the state after ``step``, if the log has one.

        Steps are asked for in ascending order (the fold's): a cursor walks the
        recorded steps once. A fold that starts again earlier (the debugger's cursor going
        back) is looked up by bisection.
        """
        if not self._sorted:
            self._sort()
        steps = self._steps
        i = self._cursor
        n = len(steps)
        if i and steps[i - 1] >= step:
            i = bisect_left(steps, step)
        while i < n and steps[i] < step:
            i += 1
        self._cursor = i
        if i < n and steps[i] == step:
            return bytes(self._digests[i * DIGEST_SIZE:(i + 1) * DIGEST_SIZE])
        return None

    def _sort(self) -> None:
        order = sorted(range(len(self._steps)), key=self._steps.__getitem__)
        d = self._digests
        self._steps = array("q", (self._steps[i] for i in order))
        self._digests = bytearray(b"".join(d[i * DIGEST_SIZE:(i + 1) * DIGEST_SIZE] for i in order))
        self._sorted = True
        self._cursor = 0  # records added while the fold reads (read ahead of it): walk again from the start


class DigestRecorder:
    """The live side: digests of the steps of the open transaction, until they are written."""

    __slots__ = ("agent", "every", "steps", "digests", "last_step", "last", "_digested_last")

    def __init__(self, *, agent: str, every: int, last: DigestRecord | None = None) -> None:
        """``last``: the agent's latest record in the log when this life started (its history's)."""
        self.agent = agent
        self.every = every
        self.last = last
        """The agent's latest record: the log's, then the last one this life took to write."""
        self.steps: list[int] = []
        self.digests: list[bytes] = []
        self.last_step: int | None = None
        """The last live step not yet in a written record (None: everything is written)."""
        self._digested_last = False

    def stepped(self, step: int, state: Any, count: int) -> None:
        """After the live step at ``step``, the agent's ``count``-th step."""
        self.last_step = step
        if count % self.every == 0:
            self.steps.append(step)
            self.digests.append(state_digest(state, agent=self.agent, offset=step))
            self._digested_last = True
        else:
            self._digested_last = False

    @property
    def pending(self) -> bool:
        return self.last_step is not None

    def take(self, state: Any, *, position: int, final: bool) -> DigestRecord:
        """The record of everything since the last one (the state is the one after the last step)."""
        if self.last_step is not None and self._digested_last:
            digest = self.digests[-1]  # nothing has run since that step
        else:
            digest = state_digest(state, agent=self.agent, offset=self.last_step if self.last_step is not None
                                  else position)
            if self.last_step is not None:
                self.steps.append(self.last_step)  # the transaction's last step is always digested
                self.digests.append(digest)
        record = DigestRecord(steps=self.steps, digests=self.digests, position=position, state=digest,
                              final=final, every=self.every)
        self.steps, self.digests, self.last_step, self._digested_last = [], [], None, False
        self.last = record
        return record
