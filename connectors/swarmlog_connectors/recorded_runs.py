"""The runs the Postgres mirror holds: what ``swarmlog regress --from-mirror`` replays.

A run is a topic whose first event is ``run.started`` (one topic holds one run), or ``run.continued``:
a run's part on a topic it went on on (``swarmlog continue``, docs/long-runs.md; each part is listed, and
replayed, as the run it is). Its payload names the swarm, and ``logged_at`` is the broker's append time,
which is what "the runs of the last week" means to an operator (never an ordering: the offset is the
run's only clock).

The query goes through ``sink_positions`` (one row per mirrored topic) and, per topic, the
``events_by_type`` index on (topic, event_type, seq): it reads one row per run, never the
events of the runs, however large the mirror.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import NamedTuple

from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_sink import _redact, connect

__all__ = ["RecordedRun", "recorded_runs"]

logger = logging.getLogger(__name__)

_RUNS = """
SELECT s.topic, r.run_id, r.payload->>'swarm', r.payload->>'code_version', r.logged_at
  FROM sink_positions s
  CROSS JOIN LATERAL (SELECT e.run_id, e.payload, e.logged_at FROM events e
                       WHERE e.topic = s.topic AND e.event_type IN ('run.started', 'run.continued')
                       ORDER BY e.seq LIMIT 1) r
 WHERE (%(swarm)s::text IS NULL OR r.payload->>'swarm' = %(swarm)s)
   AND (%(since)s::timestamptz IS NULL OR r.logged_at >= %(since)s)
 ORDER BY r.logged_at, s.topic
"""


class RecordedRun(NamedTuple):
    """One run the mirror holds: its topic, its id, the swarm and code version that started it, and when."""

    topic: str
    run_id: str
    swarm: str
    code_version: str
    started_at: dt.datetime | None


def recorded_runs(settings: Settings, *, swarm: str | None = None,
                  since: dt.datetime | None = None) -> list[RecordedRun]:
    """The runs in the mirror, oldest first: of ``swarm`` only (None: every swarm's), started at
    ``since`` or later (None: all). A run the sink has not mirrored yet is not listed."""
    with connect(settings) as conn:
        require_schema(conn, database=_redact(settings.database_url))
        rows = conn.execute(_RUNS, {"swarm": swarm, "since": since}).fetchall()
    logger.info("the mirror lists %d run(s)%s%s", len(rows), f" of swarm {swarm}" if swarm else "",
                f" since {since.isoformat()}" if since else "")
    return [RecordedRun(*row) for row in rows]
