"""What a state divergence shows: the two digests, and a diff of the states when the live one is known.

Internal, with one public seam: :class:`LiveStates`. The log records digests, not
states (a state can be large; a digest per step is 32 bytes), so a replay that finds
a digest differing knows *that* and *where* the state departed, not *how*. Whatever
can give the live agent's state as of a step — snapshots the debugger takes, a store of
the live run's states — implements :class:`LiveStates` and is passed to
:func:`swarmlog.replay_swarm` (``live_states=``); the divergence then carries a
diff of the live state and the replayed one.
"""

from __future__ import annotations

from typing import Any, Protocol

DIFF_LIMIT = 20
"""Differences a divergence lists at most (a state that departs early differs everywhere later)."""


class LiveStates(Protocol):
    """The live agent's state right after one of its steps, when it is known."""

    def state_at(self, agent: str, step: int) -> Any | None:
        """The state ``agent`` had after its step at offset ``step`` in the live run, or None."""


def diff_states(live: Any, replayed: Any, *, limit: int = DIFF_LIMIT) -> list[str]:
    """Where two JSON-like states differ, one line per path: ``state.x[3]: live 1, replayed 2``."""
    out: list[str] = []
    _diff(live, replayed, "state", out, limit)
    return out


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}[{key!r}]"
            if key not in b:
                out.append(f"{sub}: live {a[key]!r}, missing in the replay")
            elif key not in a:
                out.append(f"{sub}: missing live, replayed {b[key]!r}")
            else:
                _diff(a[key], b[key], sub, out, limit)
            if len(out) >= limit:
                return
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out, limit)
        return
    if a != b or type(a) is not type(b):
        out.append(f"{path}: live {a!r}, replayed {b!r}")
