"""Recovering from a failed step: the failures a log records, and ``step.retried`` to run one again.

A handler that raises is recorded where it raised (``handler.failed``, an output of its step), and
replay expects the same failure there: a log is a history, and the failed attempt is part of it.
Recovery is therefore the same mechanism as deploying any other fix into a run in flight:

1. The fix goes behind a versioned step (``if ctx.patched("fix-..."):`` the fixed code, ``else:``
   the code that failed), so the failed step still replays as it was recorded, failure and all.
2. ``swarmlog retry`` appends a ``step.retried`` for each failed step not retried yet, addressed to
   the agent that failed (:func:`append_retries`). The agent runs its handler again for the failed
   step's input, at the retry's offset: a live step, so it takes the patched path and records the
   marker that makes every later replay take it there too. The run goes on from there.

Why a new step at a new offset rather than running the old one again: the old step's outputs are
in the log, and a log is never rewritten; the retry's own offset is its fixed place in the total
order, so every replay runs it at the same point (after whatever the other agents did meanwhile).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import UsageError
from ..log.append import EventLog
from ..log.base import LogBackend
from ..log.protocol import HANDLER_FAILED, RUN_WRITER, STEP_RETRIED, parse_step
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from .scan import LogScan

logger = logging.getLogger(__name__)

__all__ = ["RecordedFailure", "append_retries", "recorded_failures"]


@dataclass(frozen=True, slots=True)
class RecordedFailure:
    """A step whose handler raised, as the log records it."""

    agent: str
    step: int
    """The offset of the step's input (the step that failed)."""
    offset: int
    """Where its ``handler.failed`` is."""
    error_type: str
    message: str
    retried_at: int | None = None
    """The offset of the ``step.retried`` that ran it again (None: not retried)."""

    def describe(self) -> str:
        state = f"retried at offset {self.retried_at}" if self.retried_at is not None else "not retried"
        return (f"agent {self.agent!r}: step at offset {self.step} failed with {self.error_type}: {self.message} "
                f"(handler.failed at offset {self.offset}; {state})")


def recorded_failures(*, backend: LogBackend, topic: str, registry: SchemaRegistry,
                      scan: LogScan | None = None) -> list[RecordedFailure]:
    """Every failed step of the log, in log order, with the retry that ran it again if any.

    As the engine reads them (:class:`.scan.LogScan`): a message that is not an event is named and
    skipped, and a copy of a ``handler.failed`` or of a ``step.retried`` counts for nothing, so this
    and the agents agree on which failures are open. ``scan``: the read to use (its :attr:`~.scan.LogScan.unreadable`
    are the caller's to report)."""
    failed: dict[tuple[str, int], RecordedFailure] = {}
    for event in scan if scan is not None else LogScan(backend=backend, topic=topic, registry=registry):
        etype = event.event_type
        if etype not in (HANDLER_FAILED, STEP_RETRIED):
            continue
        payload = event.payload
        if etype == HANDLER_FAILED:
            parsed = parse_step(event.event_id)
            if parsed is not None:
                failed[(event.agent_id, parsed[0])] = RecordedFailure(
                    agent=event.agent_id, step=parsed[0], offset=event.offset,
                    error_type=payload["error_type"], message=payload["message"])
            continue
        if event.to is None:
            continue
        key = (event.to, int(payload["failed_step"]))
        known = failed.get(key)
        if known is not None and known.retried_at is None:
            failed[key] = RecordedFailure(agent=known.agent, step=known.step, offset=known.offset,
                                          error_type=known.error_type, message=known.message,
                                          retried_at=event.offset)
    return sorted(failed.values(), key=lambda f: f.offset)


def append_retries(*, settings: Settings, backend: LogBackend, topic: str, registry: SchemaRegistry,
                   run_id: str, agent: str | None = None, step: int | None = None,
                   reason: str = "", scan: LogScan | None = None) -> list[tuple[RecordedFailure, int]]:
    """Append a ``step.retried`` for each failed step not retried yet (only ``agent``'s, only ``step``, if
    given); returns each failure with the offset of its retry. Asking for a step that did not fail, or
    was retried already, is a :class:`~swarmlog.errors.UsageError` naming what the log holds. ``scan``:
    as :func:`recorded_failures`."""
    failures = recorded_failures(backend=backend, topic=topic, registry=registry, scan=scan)
    chosen = [f for f in failures if (agent is None or f.agent == agent) and (step is None or f.step == step)]
    open_ = [f for f in chosen if f.retried_at is None]
    if (agent is not None or step is not None) and not open_:
        known = "; ".join(f.describe() for f in failures) or "no step of this run failed"
        raise UsageError(f"no failed step to retry matches{f' agent {agent!r}' if agent else ''}"
                         f"{f' step {step}' if step is not None else ''} in topic {topic!r}: {known}")
    if not open_:
        return []
    with EventLog(settings=settings, registry=registry, topic=topic, run_id=run_id, backend=backend) as log:
        for f in open_:
            log.produce(STEP_RETRIED, {"failed_step": f.step, "error_type": f.error_type, "reason": reason},
                        agent=RUN_WRITER, to=f.agent, causes=[f.step, f.offset])
        offsets = log.flush()
    for f, at in zip(open_, offsets, strict=True):
        logger.info("%s: step.retried appended at offset %d", f.describe(), at)
    return list(zip(open_, offsets, strict=True))
