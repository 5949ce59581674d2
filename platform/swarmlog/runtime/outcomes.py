"""What a fold says about the steps it ran: a step that failed, a step that diverged.

Plain records, shared by the engine (:mod:`.engine`) that makes them, the checkpoints that keep
them (:mod:`.checkpoint`) and the reports, the debugger and the console that show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..events import Event

__all__ = ["KINDS", "Divergence", "FailedStep"]


@dataclass(slots=True, frozen=True)
class FailedStep:
    """A step whose handler raised (recorded as ``handler.failed``), not retried since."""

    offset: int
    agent: str
    input: Event
    """What the handler was given: a ``step.retried`` hands it to the handler again."""
    error_type: str
    message: str

    def describe(self) -> str:
        kind = self.input.payload.get("kind") if isinstance(self.input.payload, dict) else None
        what = f"{self.input.event_type}{f' {kind!r}' if kind else ''} at offset {self.input.offset}"
        return (f"agent {self.agent!r}: step at offset {self.offset} ({what}) failed with "
                f"{self.error_type}: {self.message}")


KINDS = ("output", "effect", "state")
"""What a divergence is about, in the order divergences at one offset are reported: what the step
wrote, what it asked of the world, and last the state it left (a changed output usually changes it too)."""


@dataclass(slots=True)
class Divergence:
    offset: int
    agent: str
    detail: str
    recorded: Any = None
    replayed: Any = None
    kind: str = "output"
    """``output``, ``effect`` or ``state`` (:data:`KINDS`)."""

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "agent": self.agent, "kind": self.kind, "detail": self.detail,
                "recorded": self.recorded, "replayed": self.replayed}

    def sort_key(self) -> tuple[int, int]:
        return self.offset, KINDS.index(self.kind)
