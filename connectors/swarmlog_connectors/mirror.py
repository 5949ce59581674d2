"""The Postgres mirror from Python: a small read-only query API for notebooks.

The sink (``swarmlog sink``) mirrors a topic into the ``events`` table, exactly once; this
reads it back as :class:`MirroredEvent` rows, in the log's order (``seq`` is the Kafka
offset)::

    from swarmlog_connectors.mirror import Mirror

    with Mirror.from_env() as m:                       # SWARMLOG_DATABASE_URL, SWARMLOG_TOPIC
        m.runs()                                       # [Run(run_id, first_seq, last_seq, events)]
        m.events(run_id="incident-42", agent="reviewer", event_type="llm.call")
        m.causes(1200)                                 # what event 1200 depended on, transitively
        m.effects(1200)                                # what depended on it
        pandas.DataFrame(m.events(agent="reviewer"))   # rows are NamedTuples

Every query is parameterised and uses the table's indexes on (topic, agent, seq),
(topic, type, seq) and (run, seq), except :meth:`Mirror.effects`, which scans the topic's
``causes`` arrays (fine for a notebook, not for a hot path). The mirror may lag the log; the
log stays the truth (``swarmlog replay``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, NamedTuple

import psycopg

from swarmlog.errors import ConfigurationError, PostgresUnavailable
from swarmlog.redaction import SecretStr
from swarmlog.settings import Settings

__all__ = ["Mirror", "MirroredEvent", "Run"]

logger = logging.getLogger(__name__)

_COLUMNS = "seq, event_id, run_id, agent_id, event_type, schema_version, recipient, causes, payload, logged_at"


class MirroredEvent(NamedTuple):
    """One row of ``events``: an event as the sink mirrored it (``payload`` parsed from jsonb)."""

    seq: int
    event_id: str
    run_id: str
    agent_id: str
    event_type: str
    schema_version: int
    to: str | None
    causes: list[int]
    payload: dict[str, Any]
    logged_at: dt.datetime | None


class Run(NamedTuple):
    run_id: str
    first_seq: int
    last_seq: int
    events: int


class Mirror:
    """Queries over one topic's rows in the mirror. Keyword-only: ``database_url``, ``topic``."""

    def __init__(self, *, database_url: str, topic: str, password: SecretStr | None = None) -> None:
        if not topic:
            raise ConfigurationError("Mirror(topic=...) is required: the mirror holds every swarm's topic")
        self.topic = topic
        # Through Settings, so that a password (in the URL or apart) is a SecretStr from here on.
        db = Settings(database_url=database_url, database_password=password)
        self.database_url = db.database_url  # without its password
        try:
            self._conn = psycopg.connect(db.database_conninfo(), autocommit=True)
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=self.database_url.rpartition("@")[2],
                                     detail=str(exc).strip()) from None

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> Mirror:
        """The mirror and topic of ``SWARMLOG_DATABASE_URL`` (``SWARMLOG_DATABASE_PASSWORD``) and ``SWARMLOG_TOPIC``."""
        s = settings or Settings.from_env()
        return cls(database_url=s.database_url, topic=s.topic, password=s.database_password)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------------------

    def events(self, *, run_id: str | None = None, agent: str | None = None, event_type: str | None = None,
               since: int | None = None, until: int | None = None, limit: int | None = None) -> list[MirroredEvent]:
        """Events in log order, filtered by run, writing agent, type, and ``since <= seq < until``."""
        where: list[str] = ["topic = %s"]
        args: list[Any] = [self.topic]
        for clause, value in (("run_id = %s", run_id), ("agent_id = %s", agent), ("event_type = %s", event_type),
                              ("seq >= %s", since), ("seq < %s", until)):
            if value is not None:
                where.append(clause)
                args.append(value)
        sql = f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        return self._rows(sql, args)

    def event(self, seq: int) -> MirroredEvent | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM events WHERE topic = %s AND seq = %s", [self.topic, seq])
        return rows[0] if rows else None

    def runs(self) -> list[Run]:
        """Every run in the topic, in the order it started."""
        cur = self._conn.execute("SELECT run_id, min(seq), max(seq), count(*) FROM events WHERE topic = %s "
                                 "GROUP BY run_id ORDER BY min(seq)", (self.topic,))
        return [Run(*r) for r in cur.fetchall()]

    def causes(self, seq: int, *, depth: int | None = None) -> list[MirroredEvent]:
        """The events ``seq`` depends on: its causes, theirs, ... (``depth`` levels; all by default),
        in log order. Causes always precede their effects, so the walk ends."""
        sql = f"""
            WITH RECURSIVE chain(seq, depth) AS (
                SELECT unnest(causes), 1 FROM events WHERE topic = %(t)s AND seq = %(s)s
              UNION
                SELECT unnest(e.causes), c.depth + 1 FROM events e JOIN chain c ON e.topic = %(t)s AND e.seq = c.seq
                WHERE %(d)s::int IS NULL OR c.depth < %(d)s::int
            )
            SELECT {', '.join('e.' + c.strip() for c in _COLUMNS.split(','))}
            FROM events e WHERE e.topic = %(t)s AND e.seq IN (SELECT seq FROM chain) ORDER BY e.seq"""
        return self._rows(sql, {"t": self.topic, "s": seq, "d": depth})

    def effects(self, seq: int) -> list[MirroredEvent]:
        """The events that name ``seq`` among their causes (direct effects), in log order."""
        return self._rows(f"SELECT {_COLUMNS} FROM events WHERE topic = %s AND seq > %s AND %s = ANY(causes) "
                          f"ORDER BY seq", [self.topic, seq, seq])

    def _rows(self, sql: str, args: Any) -> list[MirroredEvent]:
        return [MirroredEvent(*r) for r in self._conn.execute(sql, args).fetchall()]
