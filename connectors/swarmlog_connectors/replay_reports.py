"""Publishing a swarm replay's report into Postgres (table ``replay_reports``).

The replay Job's log already holds the report as JSON; the table is where an operator (or
a dashboard) finds the latest verdict of a topic without reading pod logs, which Kubernetes
drops with the pod::

    SELECT id, created_at, diverged, divergences, agents FROM replay_reports
     WHERE topic = 'swarmlog.research' ORDER BY id DESC LIMIT 1;
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from swarmlog.errors import PostgresUnavailable
from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_sink import _redact, connect

__all__ = ["publish_report"]

logger = logging.getLogger(__name__)

_INSERT = """
INSERT INTO replay_reports (topic, consumer_group, swarm, run_id, code_version, end_offset, events, stream_hash,
                            agents, diverged, divergences, first_divergence, report)
VALUES (%(topic)s, %(group)s, %(swarm)s, %(run_id)s, %(code_version)s, %(end_offset)s, %(events)s,
        %(stream_hash)s, %(agents)s, %(diverged)s, %(divergences)s, %(first_divergence)s, %(report)s)
RETURNING id
"""


def _no_nul(value: Any) -> Any:
    """``value`` with every NUL character in its strings spelled ``\\u0000`` (jsonb refuses NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000") if "\x00" in value else value
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nul(v) for v in value]
    return value


def publish_report(settings: Settings, report: dict[str, Any]) -> int:
    """Insert ``report`` (:func:`swarmlog.replaying.report.swarm_report`) and return its row id."""
    doc = _no_nul(json.loads(json.dumps(report, default=str)))
    first = doc.get("first_divergence")
    params = {
        "topic": doc["topic"], "group": doc.get("group"), "swarm": doc["swarm"], "run_id": doc.get("run_id"),
        "code_version": doc.get("code_version"), "end_offset": doc["end_offset"], "events": doc["events"],
        "stream_hash": doc["stream_hash"], "agents": Jsonb(doc["agents"]), "diverged": bool(doc["diverged"]),
        "divergences": int(doc["divergences"]), "first_divergence": Jsonb(first) if first is not None else None,
        "report": Jsonb(doc),
    }
    with connect(settings) as conn:
        try:
            # The table is made by `swarmlog mirror migrate`; publishing needs only INSERT on it
            # (the swarmlog_sink role has it), never the right to create it.
            require_schema(conn, database=_redact(settings.database_url))
            row = conn.execute(_INSERT, params).fetchone()
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=_redact(settings.database_url),
                                     detail=str(exc).strip()) from None
    assert row is not None
    logger.info("replay report %d published to Postgres (table replay_reports)", row[0])
    return int(row[0])
