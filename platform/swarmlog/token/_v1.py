"""Replay tokens, version 1: still read and verified; new tokens are version 2 (``_document``).

A version 1 token bundles what identifies a run's history and what replaying it must
give: the topic, the run id and seed from ``run.started``, the code version that ran,
the offsets replayed (``[start_offset, end_offset)``), the hash of the event stream
over that range, and each agent's state hash (of a plain replay's ledger or of the
swarm's agents). ``swarmlog replay --verify t.json`` replays the same range and says
what differs.

A version 1 token pins the whole range with one stream hash, so a mismatch says only
*that* the history differs; version 2's chain says where. Signatures are checked by
the same policy for both versions (:func:`swarmlog.token.check_signature`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOKEN_VERSION = 1


@dataclass(frozen=True)
class ReplayToken:
    topic: str
    run_id: str | None
    seed: int | None
    code_version: str | None
    start_offset: int
    end_offset: int
    events: int
    stream_hash: str
    agents: dict[str, str]
    reducer: str
    """What the agent hashes are of: ``ledger`` (plain replay) or ``swarm:<name>`` (agents' state)."""
    version: int = TOKEN_VERSION
    signature: str | None = field(default=None, compare=False)

    def body(self) -> bytes:
        doc = asdict(self)
        doc.pop("signature")
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def signed(self, key: bytes | None) -> ReplayToken:
        if not key:
            return self
        sig = hmac.new(key, self.body(), hashlib.sha256).hexdigest()
        return ReplayToken(**{**asdict(self), "signature": sig})

    def save(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")


def mismatches(expected: ReplayToken, actual: ReplayToken) -> list[str]:
    """What differs between a token and a fresh replay of its range (empty: they agree)."""
    out = []
    for name in ("topic", "run_id", "seed", "start_offset", "end_offset", "events", "stream_hash", "reducer"):
        a, b = getattr(expected, name), getattr(actual, name)
        if a != b:
            out.append(f"{name}: token has {a!r}, the log now gives {b!r}")
    for agent in sorted(set(expected.agents) | set(actual.agents)):
        a, b = expected.agents.get(agent), actual.agents.get(agent)
        if a != b:
            out.append(f"agent {agent}: token has state {a}, replay gives {b}")
    return out


def token_from(result: Any, *, topic: str, run: Any, code_version: str | None, reducer: str,
               start_offset: int | None = None) -> ReplayToken:
    # The real start: a replay from a log whose history was deleted did not start at 0.
    start = start_offset if start_offset is not None else getattr(result, "start_offset", 0)
    return ReplayToken(topic=topic, run_id=run.run_id if run else None, seed=run.seed if run else None,
                       code_version=code_version, start_offset=start, end_offset=result.end_offset,
                       events=result.events, stream_hash=result.stream_hash, agents=dict(result.agents),
                       reducer=reducer)
