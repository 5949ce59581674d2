"""Nondeterminism (:class:`NondeterminismError`): replayed code departs from the log. Among it, code changed
while runs are in flight (:mod:`swarmlog.runtime.patches`, ``.failures``): a patch the log records and this code
does not call (:class:`PatchUnknown`), a recorded failure this code no longer fails (:class:`FailedStepChanged`)."""

from __future__ import annotations

from ._base import SwarmlogError

__all__ = ["NondeterminismError", "EffectDiverged", "StateDiverged", "PatchUnknown", "FailedStepChanged"]


class NondeterminismError(SwarmlogError):
    """Replayed code did something the log says it did not do the first time."""

    def __init__(self, *, offset: int | None, agent: str | None, detail: str,
                 recorded: object = None, replayed: object = None) -> None:
        self.offset = offset
        self.agent = agent
        self.detail = detail
        self.recorded = recorded
        self.replayed = replayed
        parts = [detail]
        if agent is not None or offset is not None:
            parts.insert(0, f"agent {agent!r} at offset {offset}:")
        if recorded is not None or replayed is not None:
            parts.append(f"(recorded: {recorded!r}; now: {replayed!r})")
        super().__init__(" ".join(parts))


class EffectDiverged(NondeterminismError):
    """A recorded effect or LLM call cannot be served: the log has no record of it here, or a
    different one. The handler cannot go on without its result, so this agent's replay stops."""


class StateDiverged(NondeterminismError):
    """The agent's state after a step is not the one the live run recorded, though the step's outputs
    may all agree: nondeterminism that reached only the state (``id()`` ordering, a C extension's
    value). Everything the agent does later may differ; its later digests are not reported again."""

    def __init__(self, *, offset: int, agent: str, recorded_digest: str, replayed_digest: str,
                 diff: list[str] | None = None) -> None:
        self.recorded_digest = recorded_digest
        self.replayed_digest = replayed_digest
        self.diff = diff
        """How the live state and the replayed one differ, when the live state is known
        (:class:`swarmlog.runtime.LiveStates`); None otherwise."""
        detail = "the state after this step differs from the one the live run recorded"
        if diff is None:
            detail += " (the log holds its digest, not the state itself)"
        super().__init__(offset=offset, agent=agent, detail=detail, recorded={"state_digest": recorded_digest},
                         replayed={"state_digest": replayed_digest, **({"diff": diff} if diff is not None else {})})


class PatchUnknown(NondeterminismError):
    """The log records that a step took the patched path of ``ctx.patched(patch_id)``, and the code
    replaying it does not call that patch there: older code, or a patch removed too early."""

    def __init__(self, *, offset: int, agent: str, patch_id: str) -> None:
        self.patch_id = patch_id
        super().__init__(offset=offset, agent=agent, recorded={"patch": patch_id},
                         detail=f"the log records that this step ran with patch {patch_id!r} "
                                f"(ctx.patched({patch_id!r})), which this code does not call here: it is older "
                                f"than the code that wrote the log. Run code that has the patch (or "
                                f"ctx.deprecate_patch({patch_id!r}) once the patch is retired)")


class FailedStepChanged(EffectDiverged):
    """A step the log records as failed (``handler.failed``) does not fail, or fails otherwise, with
    this code: a fix deployed without a versioned step, so the recorded failure no longer replays.
    The step cannot go on where it failed live (an :class:`EffectDiverged`: the replay of this agent stops)."""

    def __init__(self, *, offset: int, agent: str, error_type: str, message: str, replayed: object) -> None:
        self.error_type = error_type
        self.message = message
        super().__init__(offset=offset, agent=agent, recorded={"failed": f"{error_type}: {message}"},
                         replayed=replayed,
                         detail=f"this step failed live ({error_type}: {message}) and this code does not fail "
                                f"the same way there. Put the fix behind a versioned step "
                                f"(`if ctx.patched('fix-...'):` new code, `else:` the old), so the recorded "
                                f"failure replays as it happened, then let the run go on from the failed step "
                                f"with `swarmlog retry` (docs/evolution.md)")
