"""The report of a swarm replay: what an operator reads after the replay Job ran.

One JSON document (the Job's log line, and a row of Postgres' ``replay_reports``): the
swarm, topic and consumer group; the range replayed and its stream hash; each agent's state
hash and steps; whether the code diverged, the first divergence and up to
``MAX_DIVERGENCES`` of them; the agents whose last steps the live run never got to (so could
not be checked); and the replay token, which ``swarmlog replay --verify`` checks later.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..runtime import SwarmReplayResult
from ..token import ReplayToken

__all__ = ["MAX_DIVERGENCES", "swarm_report"]

MAX_DIVERGENCES = 100
"""Divergences listed in full; ``divergences`` still counts them all."""


def swarm_report(result: SwarmReplayResult, *, swarm: str, topic: str, group: str | None,
                 token: ReplayToken | None) -> dict[str, Any]:
    """The report as a JSON-ready dict (``kind`` is ``swarmlog.replay-report``); ``token`` None for a replay
    from checkpoints (its tail only: no token attests to that)."""
    doc: dict[str, Any] = {"kind": "swarmlog.replay-report", "swarm": swarm, "topic": topic, "group": group,
                           "run_id": token.run_id if token else None, "seed": token.seed if token else None,
                           "code_version": token.code_version if token else None}
    doc.update(result.to_json())
    doc["divergence_list"] = [d.to_json() for d in result.divergences[:MAX_DIVERGENCES]]
    doc["anomaly_count"] = len(result.anomalies) + result.anomalies_omitted
    doc["anomalies"] = doc.get("anomalies", [])[:MAX_DIVERGENCES]  # the first ones; the count says how many
    doc["token"] = asdict(token) if token is not None else None
    return doc
