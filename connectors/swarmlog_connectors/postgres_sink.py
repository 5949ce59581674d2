"""The Postgres sink: mirrors one swarm's topic into the ``events`` table, exactly once.

Exactly-once, and why it holds under SIGKILL at any instant:

* The sink's position (the next offset to mirror) lives in Postgres, in
  ``sink_positions``, not in Kafka's consumer-group offsets.
* Each batch is one Postgres transaction: lock the position row, COPY the
  batch's rows, write its dead letters, advance the position, COMMIT. Either all
  of it is durable or none of it is.
* On start (and after any rollback) the sink reads the position and assigns
  the partition there. A sink killed before COMMIT re-reads that batch; one
  killed after COMMIT starts after it. No gap, no duplicate; the primary key
  ``(topic, seq)`` would reject a duplicate even if this reasoning were wrong.
* ``SELECT ... FOR UPDATE`` on the position row fences a second sink on the same
  topic: whichever commits second sees the position moved, rolls back, and
  re-seeks. Two sinks are correct, just wasteful.

The consumer is ``read_committed``, so events of aborted agent transactions
are never mirrored.

A message that does not decode, or a row Postgres refuses (jsonb rejects
``\\u0000``, for instance), goes to ``dead_letters`` with its offset, the error
and the raw bytes, in the same transaction, and the sink keeps going.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from swarmlog.codec import Decoder
from swarmlog.errors import ServiceUnavailable
from swarmlog.reader import LogReader
from swarmlog.schemas import SchemaRegistry
from swarmlog.settings import Settings

from .postgres_rows import DEAD_LETTER_COLUMNS, EVENT_COLUMNS, RowBuilder, dead_letter

_COPY_EVENTS = sql.SQL("COPY events ({}) FROM STDIN").format(sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)))
_INSERT_EVENT = sql.SQL("INSERT INTO events ({}) VALUES ({})").format(
    sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)), sql.SQL(", ").join(sql.Placeholder() * len(EVENT_COLUMNS))
)
_INSERT_DEAD = sql.SQL("INSERT INTO dead_letters ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
    sql.SQL(", ").join(map(sql.Identifier, DEAD_LETTER_COLUMNS)),
    sql.SQL(", ").join(sql.Placeholder() * len(DEAD_LETTER_COLUMNS)),
)
# Serialises concurrent CREATE TABLE IF NOT EXISTS (which is not race-free in Postgres).
_DDL_LOCK_KEY = 0x5357_4C47  # "SWLG"


@dataclass(slots=True)
class SinkStats:
    position: int = 0
    rows: int = 0
    dead_letters: int = 0
    batches: int = 0


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    """Create the mirror's tables and indexes if they are missing."""
    ddl = resources.files("swarmlog_connectors").joinpath("postgres_schema.sql").read_text()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        conn.execute(ddl)  # type: ignore[arg-type]


def connect(settings: Settings) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(settings.database_url, autocommit=True)
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(service="Postgres", address=_redact(settings.database_url),
                                 detail=str(exc).strip()) from None


class PostgresSink:
    """Mirrors ``topic`` into Postgres. ``run()`` until stopped or, with ``until_end``, caught up."""

    def __init__(self, *, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                 poll_timeout: float = 0.02, batch_size: int = 5000) -> None:
        self.settings = settings
        self.topic = topic or settings.topic
        self.registry = registry or SchemaRegistry.load(settings.schema_dir)
        self.rows = RowBuilder(topic=self.topic, decoder=Decoder(self.registry))
        self.poll_timeout = poll_timeout
        self.batch_size = batch_size
        self.stats = SinkStats()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the sink to finish its current batch and return."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the current batch, then ``run()`` returns."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self, *, until_end: bool = False, on_batch: Callable[[SinkStats], None] | None = None) -> SinkStats:
        with connect(self.settings) as conn:
            ensure_schema(conn)
            conn.autocommit = False
            position = self._read_position(conn)
            conn.commit()
            with LogReader(settings=self.settings, topic=self.topic) as reader:
                reader.assign(position)
                self.stats.position = position
                while not self._stop.is_set():
                    moved = False
                    for batch in reader.batches(follow=not until_end, timeout=self.poll_timeout,
                                                batch_size=self.batch_size):
                        if batch:
                            expected = self.stats.position
                            if not self._write(conn, batch, expected):
                                # Another sink moved the position: re-seek to where it is now.
                                position = self._read_position(conn)
                                conn.commit()
                                reader.consumer.assign([])
                                reader.assign(position)
                                self.stats.position = position
                                moved = True
                                break
                            if on_batch is not None:
                                on_batch(self.stats)
                        if self._stop.is_set():
                            break
                    if not moved and until_end:
                        break
        return self.stats

    # -- one batch, one transaction ------------------------------------------------------

    def _write(self, conn: psycopg.Connection[Any], batch: list[Any], expected: int) -> bool:
        rows, dead = self.rows.build(batch)
        next_offset = batch[-1].offset() + 1
        try:
            with conn.cursor() as cur:
                if self._lock_position(cur) != expected:
                    conn.rollback()
                    return False
                with cur.copy(_COPY_EVENTS) as copy:
                    for row in rows:
                        copy.write_row(row)
                if dead:
                    cur.executemany(_INSERT_DEAD, dead)
                self._set_position(cur, next_offset)
            conn.commit()
        except psycopg.DataError:
            # A row Postgres refuses (bad jsonb text, ...): redo the batch row by row,
            # dead-lettering the bad ones. A duplicate key is NOT caught: with the
            # position fenced it cannot happen, and if it did, stopping loudly is right.
            conn.rollback()
            if not self._write_slowly(conn, batch, rows, dead, expected, next_offset):
                return False
        except psycopg.OperationalError as exc:
            raise ServiceUnavailable(service="Postgres", address=_redact(self.settings.database_url),
                                     detail=str(exc).strip()) from None
        self.stats.position = next_offset
        self.stats.rows += len(rows)
        self.stats.dead_letters += len(dead)
        self.stats.batches += 1
        return True

    def _write_slowly(self, conn: psycopg.Connection[Any], batch: list[Any], rows: list[tuple[Any, ...]],
                      dead: list[tuple[Any, ...]], expected: int, next_offset: int) -> bool:
        by_offset = {m.offset(): m for m in batch}
        with conn.cursor() as cur:
            if self._lock_position(cur) != expected:
                conn.rollback()
                return False
            refused = []
            for row in rows:
                try:
                    with conn.transaction():  # a savepoint
                        cur.execute(_INSERT_EVENT, row)
                except psycopg.DataError as exc:
                    refused.append(dead_letter(self.topic, by_offset[row[1]], f"Postgres refused the row: {exc}"))
            for d in dead + refused:
                cur.execute(_INSERT_DEAD, d)
            self._set_position(cur, next_offset)
        conn.commit()
        rows[:] = [r for r in rows if r[1] not in {d[1] for d in refused}]
        dead.extend(refused)
        return True

    def _lock_position(self, cur: psycopg.Cursor[Any]) -> int:
        cur.execute("SELECT next_offset FROM sink_positions WHERE topic = %s FOR UPDATE", (self.topic,))
        row = cur.fetchone()
        return 0 if row is None else int(row[0])

    def _set_position(self, cur: psycopg.Cursor[Any], next_offset: int) -> None:
        cur.execute("UPDATE sink_positions SET next_offset = %s, updated_at = now() WHERE topic = %s",
                    (next_offset, self.topic))

    def _read_position(self, conn: psycopg.Connection[Any]) -> int:
        # The row exists before the first batch so that FOR UPDATE always has a row to
        # lock: without it two new sinks would both "insert" position 0 and race.
        conn.execute("INSERT INTO sink_positions (topic, next_offset) VALUES (%s, 0) ON CONFLICT DO NOTHING",
                     (self.topic,))
        row = conn.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (self.topic,)).fetchone()
        return 0 if row is None else int(row[0])


def _redact(url: str) -> str:
    """The database URL without its password, for error messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable SWARMLOG_DATABASE_URL)"
    host, port, db = info.get("host", "?"), info.get("port", "5432"), info.get("dbname", "?")
    return f"{host}:{port}/{db}"
