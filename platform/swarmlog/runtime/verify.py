"""Checking a replayed step against the record: its outputs, its effects, where it diverges.

A replayed step's recorded outputs come *after* its input in the log. So its outputs wait in
``pending`` until the recorded outputs arrive (``<agent>@<step>#<i>`` says which is which); they
must match one for one. Because an agent's transactions commit in order, a recorded output of a
later step proves every earlier step's outputs have all arrived, so whatever is still pending for
an earlier step was never written: a divergence. Effects and LLM calls cannot wait (the handler
needs their result at once); they come from the agent's recorded history (:mod:`.history`).

:class:`VerifySink` is where a replayed step's outputs go; :class:`RecordCheck` is the part of
:class:`~.engine.AgentCore` that compares them with the record and reports divergences.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..context import Context, Output
from ..errors import EffectDiverged, FailedStepChanged, NondeterminismError, PatchUnknown, StateDiverged
from ..events import Event
from ..log.protocol import HANDLER_FAILED, PATCH_INDEX, PATCH_MARKER, RECORDED_EFFECTS, parse_step
from .anomalies import Watch
from .history import RecordedHistory
from .outcomes import Divergence

__all__ = ["RecordCheck", "Unreached", "VerifySink"]


class Unreached(Exception):
    """A replayed step needs a record the live agent never made: it never got this far."""

    def __init__(self, step: int) -> None:
        self.step = step


class VerifySink:
    """Replayed steps: outputs wait for their recorded counterparts; effects come from the history."""

    __slots__ = ("core",)

    def __init__(self, core: RecordCheck) -> None:
        self.core = core

    def write(self, out: Output, *, locate: bool) -> int | None:
        core = self.core
        rec = core.history.effect(out.event_id) if locate else None
        if locate:
            if rec is None:
                raise EffectDiverged(offset=core.ctx.now(), agent=core.name,
                                     detail=f"the step now makes a {out.event_type} the log does not have",
                                     replayed=out.payload)
            core.check(out, rec)
            return rec.offset
        core.pending.setdefault(core.ctx._step, {})[out.event_id] = out  # ctx.now(), one call less
        return None

    def recorded(self, event_id: str) -> Event | None:
        history = self.core.history
        rec = history.effect(event_id)
        if rec is None:
            parsed = parse_step(event_id)
            if parsed is not None and parsed[1] == PATCH_INDEX:
                return None  # no marker: the step was recorded on the unpatched path (ctx.patched is False)
            step = self.core.ctx.now()
            if history.past_cut(step) or step >= history.reach():
                # The record lies past the cut, or the live agent never got here. Kept in the step's signal as well:
                # a handler that catches it has not made the step replay (engine.AgentCore.step raises it again).
                exc = Unreached(step)
                self.core.ctx.signal = exc
                raise exc
            raise EffectDiverged(offset=self.core.ctx.now(), agent=self.core.name,
                                 detail="the step now calls an effect or LLM the log has no record of")
        return rec


class RecordCheck:
    """Replayed steps' outputs against the record, and the divergences found (strict: raised)."""

    name: str
    history: RecordedHistory
    ctx: Context
    watch: Watch
    strict: bool
    on_divergence: Callable[[Divergence], None] | None
    divergences: list[Divergence]
    pending: dict[int, dict[str, Output]]
    last_recorded_step: int
    unverified: int | None
    stopped: bool
    stopped_at: int | None
    checked_from: int
    _raised: NondeterminismError | None
    _held: tuple[int, StateDiverged] | None

    def live(self, offset: int) -> bool:
        raise NotImplementedError

    def _check_own(self, event: Event) -> None:
        """One of the agent's own records read back: check it against what the replayed step wrote, or
        note how far the agent has recorded."""
        parsed = parse_step(event.event_id)
        if parsed is None:
            return  # a wall-clock firing: a recorded fact, nothing to check
        step = parsed[0]
        if step > self.last_recorded_step:
            self.last_recorded_step = step
        if step < self.checked_from:
            return  # written live by the fold a checkpoint restored (its state digest vouched for it)
        if self._held is not None and step > self._held[0]:
            self._unwritten_before(step)  # and the held state divergence, in its place among them
        if not self.pending:
            if step <= self.history.last_step and not self.live(step) and event.event_type not in RECORDED_EFFECTS:
                self._diverge(self._no_longer_written(step, event))
            return
        self._unwritten_before(step)
        outs = self.pending.get(step)
        out = outs.pop(event.event_id, None) if outs is not None else None
        if outs is not None and not outs:
            del self.pending[step]
        if out is None:
            if event.event_type not in RECORDED_EFFECTS:
                self._diverge(self._no_longer_written(step, event))
            return
        self.check(out, event)

    def _no_longer_written(self, step: int, event: Event) -> NondeterminismError:
        """The divergence for a recorded output of ``step`` the step no longer writes: one that names what
        to do when the output is a patch marker (older code) or a recorded failure (a fix not versioned)."""
        if event.event_type == PATCH_MARKER:
            return PatchUnknown(offset=step, agent=self.name, patch_id=event.payload["patch_id"])
        if event.event_type == HANDLER_FAILED:
            return FailedStepChanged(offset=step, agent=self.name, error_type=event.payload["error_type"],
                                     message=event.payload["message"], replayed=None)
        return NondeterminismError(offset=step, agent=self.name, recorded=_brief(event),
                                   detail="the log has an output this step no longer writes")

    def _unwritten_before(self, step: int) -> None:
        """Everything still pending for a step before ``step`` was never written: a record of ``step``
        or later has been read, and an agent's records come in step order. A held state divergence
        is reported in its place among them (after the outputs of its own step)."""
        # Steps run in offset order, so ``pending`` holds them in increasing order: the earliest is the first key.
        pending = self.pending
        while pending:
            earlier = next(iter(pending))
            if earlier >= step:
                break
            if self._held is not None and earlier > self._held[0]:
                self._release_held()
            for unwritten in pending.pop(earlier).values():
                self._diverge(NondeterminismError(offset=earlier, agent=self.name, replayed=_brief_out(unwritten),
                                                  detail="the step now writes an event the log does not have"))
        if self._held is not None and self._held[0] < step:
            self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._diverge(held[1])

    def check(self, out: Output, rec: Event) -> None:
        if (out.event_type, out.to, out.payload, out.causes) != (rec.event_type, rec.to, rec.payload, rec.causes):
            step = parse_step(out.event_id)
            if rec.event_type == HANDLER_FAILED and step is not None:
                self._diverge(FailedStepChanged(offset=step[0], agent=self.name, error_type=rec.payload["error_type"],
                                                message=rec.payload["message"], replayed=_brief_out(out)))
                return
            self._diverge(NondeterminismError(offset=step[0] if step else rec.offset, agent=self.name,
                                              detail=f"output {out.event_id} differs from the log",
                                              recorded=_brief(rec), replayed=_brief_out(out)))

    def finish(self) -> None:
        """End of a replay: outputs still pending were never written.

        A step past both how far the live agent is known to have got (its group's committed
        offset, its last recorded step: the history's ``reach``) and its last recorded output
        may simply never have run live (an unfinished run, a stopped agent), and a step whose
        outputs lie past a replay's cut cannot be compared with them: neither's outputs are
        divergences, and ``unverified`` says from where on nothing could be checked (so are the
        outputs of a step at or past it: a step that stopped there, needing a record the live run
        never made or that lies past the cut).
        """
        parked = self.watch.parked
        if parked is not None:  # it could not read its input there: nothing from there on was checked
            self.unverified = parked.offset if self.unverified is None else min(self.unverified, parked.offset)
        history = self.history
        bound = max(self.last_recorded_step + 1, history.reach())
        for step, outs in sorted(self.pending.items()):
            if self._held is not None and step > self._held[0]:
                self._release_held()
            unverified = self.unverified
            if step >= bound or history.past_cut(step) or unverified is not None and step >= unverified:
                self.unverified = step if self.unverified is None else min(self.unverified, step)
                continue
            for out in outs.values():
                self._diverge(NondeterminismError(offset=step, agent=self.name, replayed=_brief_out(out),
                                                  detail="the step now writes an event the log does not have"))
        self.pending.clear()
        self._release_held()

    def _diverge(self, exc: NondeterminismError) -> None:
        if exc is self._raised:  # recorded where it was detected, and on its way out (strict)
            raise exc
        held = self._held
        if held is not None and exc is not held[1] and (exc.offset is None or exc.offset > held[0]):
            self._release_held()  # a later step's divergence: the held state one is the first (strict: raised)
        kind = "state" if isinstance(exc, StateDiverged) else "effect" if isinstance(exc, EffectDiverged) else "output"
        d = Divergence(offset=exc.offset if exc.offset is not None else -1, agent=self.name, detail=exc.detail,
                       recorded=exc.recorded, replayed=exc.replayed, kind=kind)
        self.divergences.append(d)
        if self.on_divergence is not None:
            self.on_divergence(d)
        if self.strict:
            self._raised = exc
            raise exc
        if isinstance(exc, EffectDiverged):
            self.stopped = True  # the handler cannot go on without the result: stop this agent here
            self.stopped_at = d.offset


def _brief(event: Event) -> dict[str, Any]:
    # A copy: in a swarm replay the same decoded event goes on to the handler of the agent it
    # is addressed to, which may change it (``_dispatch``); the report keeps what the log says.
    # ``offset``: where the differing record sits, so a timeline marks that row, not only the step's input.
    return copy.deepcopy({"event_type": event.event_type, "to": event.to, "payload": event.payload,
                          "causes": event.causes, "offset": event.offset})


def _brief_out(out: Output) -> dict[str, Any]:
    return {"event_type": out.event_type, "to": out.to, "payload": out.payload, "causes": out.causes}
