"""What the console reads from the Postgres mirror, as the read-only ``swarmlog_reader`` role.

Every connection this module opens switches to the reader role (``SET ROLE``) and makes its
transactions read-only, whatever the login role it was given may do: the console is a window
on the mirror and must never change it, even when an operator starts it with the database
owner's URL. A login role that is not a member of ``swarmlog_reader`` is refused with what
to grant.

Paging is keyset paging on ``seq`` within a run (the index ``events_by_run (run_id, seq)``):
a page of a 200,000-event run costs what the first page costs, never an ``OFFSET`` scan.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..errors import ConfigurationError, PostgresUnavailable
from ..events import Event
from ..log.protocol import HANDLER_FAILED, RUN_STARTED, STATE_DIGEST

logger = logging.getLogger(__name__)

READER_ROLE = "swarmlog_reader"
"""The mirror's read-only group role (``swarmlog_connectors.postgres_migrations.READER_ROLE``)."""

_EVENT_COLUMNS = "topic, seq, event_id, run_id, agent_id, event_type, schema_version, recipient, causes, payload, " \
                 "logged_at"

# Statuses, most telling first: a run shows the first that holds.
DIVERGED = "diverged"
"""The newest replay report of the run found the code departing from the log."""
FAILED = "step failed"
"""A handler raised (a ``handler.failed`` event)."""
RUNNING = "running"
"""Events were appended lately (``quiet_after``)."""
VERIFIED = "verified"
"""The newest replay report of the run reproduced it, or a saved replay token covers it."""
AT_REST = "at rest"
STATUSES = (DIVERGED, FAILED, RUNNING, VERIFIED, AT_REST)


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run the mirror holds: what the runs page lists."""

    topic: str
    run_id: str
    swarm: str | None
    seed: int | None
    code_version: str | None
    agents: list[str]
    events: int
    first_seq: int
    last_seq: int
    first_at: dt.datetime | None
    last_at: dt.datetime | None
    failures: int
    report_id: int | None
    report_diverged: bool | None
    token_covers: bool
    status: str


@dataclass(frozen=True, slots=True)
class Report:
    """One published replay report (table ``replay_reports``)."""

    id: int
    topic: str
    swarm: str
    run_id: str | None
    code_version: str | None
    end_offset: int
    events: int
    diverged: bool
    divergences: int
    first_divergence: dict[str, Any] | None
    agents: Any
    created_at: dt.datetime


class MirrorReader:
    """The console's read-only view of the mirror (``database_conninfo``: a libpq connection string)."""

    def __init__(self, *, conninfo: str, address: str, role: str = READER_ROLE, quiet_after: float = 60.0) -> None:
        self._conninfo = conninfo
        self._address = address
        self.role = role
        self.quiet_after = quiet_after
        self._local = threading.local()  # one connection per server thread: psycopg connections are not shared

    # -- connections -------------------------------------------------------------------------------

    def connection(self) -> psycopg.Connection[Any]:
        """This thread's connection, as the reader role, read-only."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, row_factory=dict_row)
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=self._address, detail=str(exc).strip()) from None
        try:
            conn.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(self.role)))
        except psycopg.errors.InsufficientPrivilege:
            conn.close()
            raise ConfigurationError(
                f"the console reads the mirror as the role {self.role!r}, and this login role is not a member "
                f"of it: GRANT {self.role} TO <the console's login role> (`swarmlog mirror migrate` creates "
                f"{self.role})") from None
        except psycopg.errors.InvalidParameterValue:
            conn.close()
            raise ConfigurationError(f"the role {self.role!r} does not exist: run `swarmlog mirror migrate` "
                                     f"as the database owner") from None
        # Belt and braces: a read-only session refuses every write before privileges are even asked.
        conn.execute("SET default_transaction_read_only = on")
        self._local.conn = conn
        return conn

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                yield cur
        except psycopg.OperationalError as exc:
            conn.close()  # a broken connection is opened again by the next request
            raise PostgresUnavailable(address=self._address, detail=str(exc).strip()) from None

    def _all(self, query: str, args: Any = None) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            return list(cur.execute(query, args).fetchall())

    def _one(self, query: str, args: Any = None) -> dict[str, Any] | None:
        rows = self._all(query, args)
        return rows[0] if rows else None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    # -- runs -----------------------------------------------------------------------------------------

    def runs(self) -> list[RunRow]:
        """Every run of every topic the mirror holds, the newest first."""
        return self._runs("TRUE", {})

    def run(self, topic: str, run_id: str) -> RunRow | None:
        """One run (its aggregate reads only its own rows, by the index on (run_id, seq))."""
        rows = self._runs("run_id = %(run)s AND topic = %(topic)s", {"run": run_id, "topic": topic})
        return rows[0] if rows else None

    def _runs(self, where: str, args: dict[str, Any]) -> list[RunRow]:
        rows = self._all(f"""
            WITH r AS (
                SELECT topic, run_id, count(*) AS events, min(seq) AS first_seq, max(seq) AS last_seq,
                       min(logged_at) AS first_at, max(logged_at) AS last_at,
                       count(*) FILTER (WHERE event_type = '{HANDLER_FAILED}') AS failures
                FROM events WHERE {where} GROUP BY topic, run_id
            ), started AS (
                SELECT DISTINCT ON (topic, run_id) topic, run_id, payload
                FROM events WHERE {where} AND event_type = '{RUN_STARTED}' ORDER BY topic, run_id, seq
            ), report AS (
                SELECT DISTINCT ON (topic, coalesce(run_id, '')) id, topic, run_id, diverged
                FROM replay_reports ORDER BY topic, coalesce(run_id, ''), id DESC
            )
            SELECT r.*, s.payload AS started,
                   coalesce(rr.id, tr.id) AS report_id, coalesce(rr.diverged, tr.diverged) AS report_diverged,
                   EXISTS (SELECT 1 FROM replay_tokens t WHERE t.topic = r.topic AND t.start_offset <= r.first_seq
                           AND t.end_offset > r.last_seq) AS token_covers,
                   extract(epoch FROM now() - r.last_at) AS idle_s
            FROM r
            LEFT JOIN started s ON s.topic = r.topic AND s.run_id = r.run_id
            LEFT JOIN report rr ON rr.topic = r.topic AND rr.run_id = r.run_id
            -- a report published without a run id speaks for the topic: for its runs that end before its end
            LEFT JOIN report tr ON tr.topic = r.topic AND tr.run_id IS NULL AND rr.id IS NULL
            ORDER BY r.last_at DESC NULLS LAST, r.topic, r.first_seq""", args)
        return [self._run_row(r) for r in rows]

    def _run_row(self, r: dict[str, Any]) -> RunRow:
        started = r.get("started") or {}
        idle = r.get("idle_s")
        if r["report_diverged"]:
            status = DIVERGED
        elif r["failures"]:
            status = FAILED
        elif idle is not None and float(idle) < self.quiet_after:
            status = RUNNING
        elif r["report_diverged"] is False or r["token_covers"]:
            status = VERIFIED
        else:
            status = AT_REST
        seed = started.get("seed")
        return RunRow(topic=r["topic"], run_id=r["run_id"], swarm=started.get("swarm"),
                      seed=int(seed) if seed is not None else None, code_version=started.get("code_version"),
                      agents=list(started.get("agents") or []), events=int(r["events"]), first_seq=int(r["first_seq"]),
                      last_seq=int(r["last_seq"]), first_at=r["first_at"], last_at=r["last_at"],
                      failures=int(r["failures"]), report_id=r["report_id"], report_diverged=r["report_diverged"],
                      token_covers=bool(r["token_covers"]), status=status)

    # -- a run's events ---------------------------------------------------------------------------------

    def page(self, topic: str, run_id: str, *, at: int, size: int) -> list[Event]:
        """Up to ``size`` events of the run from offset ``at`` on (keyset: ``seq >= at``), less its state digests
        (the log's checksums of steps, which a timeline does not draw)."""
        rows = self._all(f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = %s AND topic = %s AND seq >= %s "
                         f"AND event_type <> '{STATE_DIGEST}' ORDER BY seq LIMIT %s", (run_id, topic, at, size))
        return [_event(r) for r in rows]

    def page_before(self, topic: str, run_id: str, *, before: int, size: int) -> int | None:
        """Where the page of ``size`` events that ends just before ``before`` starts (None: nothing before)."""
        row = self._one(f"SELECT min(seq) AS s FROM (SELECT seq FROM events WHERE run_id = %s AND topic = %s "
                        f"AND seq < %s AND event_type <> '{STATE_DIGEST}' ORDER BY seq DESC LIMIT %s) p",
                        (run_id, topic, before, size))
        return int(row["s"]) if row and row["s"] is not None else None

    def last_page(self, topic: str, run_id: str, *, size: int) -> int | None:
        return self.page_before(topic, run_id, before=2 ** 62, size=size)

    def event(self, topic: str, seq: int) -> Event | None:
        row = self._one(f"SELECT {_EVENT_COLUMNS} FROM events WHERE topic = %s AND seq = %s", (topic, seq))
        return _event(row) if row else None

    def events_at(self, topic: str, seqs: list[int]) -> dict[int, Event]:
        if not seqs:
            return {}
        rows = self._all(f"SELECT {_EVENT_COLUMNS} FROM events WHERE topic = %s AND seq = ANY(%s)", (topic, seqs))
        return {int(r["seq"]): _event(r) for r in rows}

    def caused(self, topic: str, run_id: str, seq: int, *, limit: int = 100) -> list[Event]:
        """The events of the run that name ``seq`` among their causes, in order (the first ``limit``)."""
        rows = self._all(f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = %s AND topic = %s AND seq > %s "
                         f"AND %s = ANY(causes) ORDER BY seq LIMIT %s", (run_id, topic, seq, seq, limit))
        return [_event(r) for r in rows]

    def next_of(self, topic: str, run_id: str, *, after: int, agent: str | None = None,
                event_type: str | None = None) -> int | None:
        """The offset of the run's next event after ``after`` written by ``agent`` or of ``event_type``
        (``type:kind`` for a message kind)."""
        where, args = ["topic = %s", "run_id = %s", "seq > %s"], [topic, run_id, after]
        if agent:
            where.append("agent_id = %s")
            args.append(agent)
        if event_type:
            kind = None
            if ":" in event_type:
                event_type, kind = event_type.split(":", 1)
            where.append("event_type = %s")
            args.append(event_type)
            if kind is not None:
                where.append("payload->>'kind' = %s")
                args.append(kind)
        row = self._one(f"SELECT seq FROM events WHERE {' AND '.join(where)} ORDER BY seq LIMIT 1", args)
        return int(row["seq"]) if row else None

    def agents_and_types(self, topic: str, run_id: str, started: RunRow | None = None) -> tuple[list[str], list[str]]:
        """The run's writers and event types (for the jump menus), from the started run's record and the types
        the mirror holds for the topic (an index-only walk, not a scan of the run)."""
        types = [r["event_type"] for r in self._all(
            f"WITH RECURSIVE t(ty) AS (SELECT min(event_type) FROM events WHERE topic = %(t)s "
            "UNION ALL SELECT (SELECT min(event_type) FROM events WHERE topic = %(t)s AND event_type > t.ty) "
            "FROM t WHERE t.ty IS NOT NULL) SELECT ty AS event_type FROM t WHERE ty IS NOT NULL "
            f"AND ty <> '{STATE_DIGEST}'", {"t": topic})]
        agents = list(started.agents) if started is not None else []
        return agents, types

    # -- replay reports and model calls -------------------------------------------------------------------

    def reports(self, topic: str, run_id: str | None = None) -> list[Report]:
        rows = self._all("SELECT id, topic, swarm, run_id, code_version, end_offset, events, diverged, divergences, "
                         "first_divergence, agents, created_at FROM replay_reports WHERE topic = %s "
                         "AND (run_id = %s OR run_id IS NULL OR %s::text IS NULL) ORDER BY id DESC",
                         (topic, run_id, run_id))
        return [Report(**r) for r in rows]

    def report(self, report_id: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM replay_reports WHERE id = %s", (report_id,))

    def model_calls(self, topic: str, run_id: str, *, limit: int = 500) -> list[dict[str, Any]]:
        """The run's model calls from the ``llm_calls`` view (migration 0005): model, tokens, latency."""
        return self._all("SELECT seq, agent_id, source, api, model, status, streamed, input_tokens, output_tokens, "
                         "total_tokens, latency_ms, messages FROM llm_calls WHERE topic = %s AND run_id = %s "
                         "ORDER BY seq LIMIT %s", (topic, run_id, limit))


def _event(r: dict[str, Any]) -> Event:
    at = r.get("logged_at")
    ts = int(at.timestamp() * 1000) if isinstance(at, dt.datetime) else None
    return Event(int(r["seq"]), r["event_type"], int(r["schema_version"]), r["event_id"], r["run_id"], r["agent_id"],
                 r["recipient"], list(r["causes"] or []), r["payload"], ts)
