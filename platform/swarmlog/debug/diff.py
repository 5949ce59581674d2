"""What changed in an agent's state between two offsets (``swarmlog state AGENT --diff A B``).

A change has a path into the state (dict keys and list indexes), a kind — ``added``,
``removed`` or ``changed`` — and the values before and after. Dicts are compared key by
key and lists index by index, recursively, so that appending to a list shows as one
``added`` item rather than a changed list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Change", "StateDiff", "diff"]


@dataclass(frozen=True, slots=True)
class Change:
    path: tuple[str | int, ...]
    kind: str
    """``added``, ``removed`` or ``changed``."""
    before: Any = None
    after: Any = None

    def path_text(self) -> str:
        text = ""
        for p in self.path:
            text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
        return text or "(the whole state)"

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "kind": self.kind, "before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True)
class StateDiff:
    """An agent's state at ``start`` and at ``end`` (each "just before" that offset), and the changes."""

    agent: str
    start: int
    end: int
    before: Any
    after: Any
    changes: list[Change] = field(default_factory=list)
    steps: int = 0
    """Handler runs of the agent in between."""

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "from": self.start, "to": self.end, "steps": self.steps,
                "changes": [c.to_json() for c in self.changes], "before": self.before, "after": self.after}


def diff(before: Any, after: Any, path: tuple[str | int, ...] = ()) -> list[Change]:
    """The changes that turn ``before`` into ``after``, in key order of ``before`` then new keys."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Change] = []
        for k in before:
            if k not in after:
                out.append(Change((*path, k), "removed", before=before[k]))
            else:
                out.extend(diff(before[k], after[k], (*path, k)))
        out.extend(Change((*path, k), "added", after=after[k]) for k in after if k not in before)
        return out
    if isinstance(before, list) and isinstance(after, list):
        out = []
        for i, (b, a) in enumerate(zip(before, after, strict=False)):
            out.extend(diff(b, a, (*path, i)))
        out.extend(Change((*path, i), "removed", before=before[i]) for i in range(len(after), len(before)))
        out.extend(Change((*path, i), "added", after=after[i]) for i in range(len(before), len(after)))
        return out
    if before == after and type(before) is type(after):
        return []
    return [Change(path, "changed", before=before, after=after)]
