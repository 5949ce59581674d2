"""Which recorded runs still need a versioned step's old path: ``swarmlog patches``.

A patch (``ctx.patched("id")``, :meth:`swarmlog.Context.patched`) lives in the code in three stages:

1. ``if ctx.patched("id"): new else: old`` — while any recorded run you still replay (or that is
   still in flight) has steps recorded before the patch: they replay on the old path.
2. ``ctx.deprecate_patch("id"); new`` — once none has: every step takes the new path; the marker is
   still written and accepted, so code of stage 1 still replays what stage 2 writes during a rollout.
3. No call at all — once no recorded run you replay holds the patch's markers (code without the
   call would fail on them, naming the patch: :class:`~swarmlog.errors.PatchUnknown`).

This module reads the logs to say which stage a patch may move to. It looks at what the logs
record, not at code: a run "has steps recorded before the patch" when an agent that recorded the
patch's marker has outputs of steps before its first marker, or when the run holds no marker at all
(recorded wholly before the patch, or never on the patched code path). That errs on the side of
keeping the old path; to be exact for a given code change, replay the runs with the stage-2 code
(``swarmlog replay --swarm``): a run it replays clean does not need the old path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..log.base import LogBackend
from ..log.protocol import PATCH_MARKER, RUN_STARTED, RUN_WRITER, STATE_DIGEST, parse_step
from ..schema.registry import SchemaRegistry
from .scan import LogScan

logger = logging.getLogger(__name__)

__all__ = ["PatchInRun", "PatchVerdict", "patch_verdicts", "patches_in_run"]


@dataclass(slots=True)
class PatchInRun:
    """One patch as one run's log records it."""

    topic: str
    patch_id: str
    markers: int = 0
    first_marker: int = -1
    """The offset of the run's first marker of this patch."""
    agents: dict[str, int] = field(default_factory=dict)
    """Agent -> the step of its first marker of this patch."""
    steps_before: int = 0
    """Steps of those agents recorded before their first marker: they replay on the old path."""

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "patch": self.patch_id, "markers": self.markers,
                "first_marker": self.first_marker, "agents": dict(self.agents), "steps_before": self.steps_before}


def patches_in_run(*, backend: LogBackend, topic: str, registry: SchemaRegistry,
                   scan: LogScan | None = None) -> dict[str, PatchInRun]:
    """Every patch whose markers ``topic``'s log holds. Read as the engine reads (:class:`.scan.LogScan`):
    a message that is not an event is named and skipped, a copy is not a second step or marker."""
    found: dict[str, PatchInRun] = {}
    steps: dict[str, list[int]] = {}  # agent -> the steps it recorded outputs of, in order (distinct)
    # The records, not Events: of most events only the writer and the id are read (a marker's payload too).
    skipped = (RUN_STARTED, STATE_DIGEST)
    scan = scan if scan is not None else LogScan(backend=backend, topic=topic, registry=registry)
    for m, writer, rec in scan.records():
        etype, agent = writer.event_type, rec["agent_id"]
        if etype in skipped or agent == RUN_WRITER:
            continue
        parsed = parse_step(rec["event_id"])
        if parsed is None:
            continue
        step = parsed[0]
        seen = steps.get(agent)
        if seen is None:
            seen = steps[agent] = [step]
        elif seen[-1] != step:
            seen.append(step)
        if etype != PATCH_MARKER:
            continue
        patch_id = rec["payload"]["patch_id"]
        use = found.get(patch_id)
        if use is None:
            use = found[patch_id] = PatchInRun(topic=topic, patch_id=patch_id, first_marker=m.offset())
        use.markers += 1
        use.agents.setdefault(agent, step)
    for use in found.values():
        use.steps_before = sum(sum(1 for s in steps.get(agent, ()) if s < first) for agent, first in use.agents.items())
    return found


@dataclass(slots=True)
class PatchVerdict:
    """What the logs read say of one patch."""

    patch_id: str
    runs_with_marker: list[PatchInRun]
    runs_before: list[str]
    """Topics with steps recorded before the patch (or no marker of it at all): they need the old path."""

    @property
    def stage(self) -> str:
        """``keep`` (stage 1: the old path is still needed), ``deprecate`` (stage 2 is safe), ``remove``."""
        if self.runs_before:
            return "keep"
        return "deprecate" if self.runs_with_marker else "remove"

    def describe(self) -> str:
        if self.stage == "keep":
            return (f"patch {self.patch_id!r}: still needed — {len(self.runs_before)} run(s) have steps recorded "
                    f"before it, which replay on the old path: {', '.join(self.runs_before)}")
        if self.stage == "deprecate":
            return (f"patch {self.patch_id!r}: no run read replays a step on its old path — replace "
                    f"`if ctx.patched({self.patch_id!r})` by `ctx.deprecate_patch({self.patch_id!r})` and remove "
                    f"the old path; keep that call while these runs are replayed: "
                    f"{', '.join(r.topic for r in self.runs_with_marker)}")
        return f"patch {self.patch_id!r}: no run read records it — the call can be removed"

    def to_json(self) -> dict[str, object]:
        return {"patch": self.patch_id, "stage": self.stage, "runs_before": list(self.runs_before),
                "runs": [r.to_json() for r in self.runs_with_marker]}


def patch_verdicts(found: dict[str, dict[str, PatchInRun]], *, patch_ids: Iterable[str] = ()) -> list[PatchVerdict]:
    """Per patch (those recorded anywhere, and ``patch_ids``), across the runs read (topic -> its patches)."""
    ids = sorted({*patch_ids, *(p for patches in found.values() for p in patches)})
    verdicts = []
    for patch_id in ids:
        with_marker = [patches[patch_id] for patches in found.values() if patch_id in patches]
        before = [topic for topic, patches in found.items()
                  if patch_id not in patches or patches[patch_id].steps_before > 0]
        verdicts.append(PatchVerdict(patch_id=patch_id, runs_with_marker=with_marker, runs_before=before))
    return verdicts
