"""The Postgres sink: mirrors one swarm's topic into the ``events`` table, exactly once.

Exactly-once, and why it holds under SIGKILL at any instant:

* The sink's position (the next offset to mirror) lives in Postgres, in
  ``sink_positions``, not in Kafka's consumer-group offsets.
* Each batch (or run of consecutive batches) is one Postgres transaction: lock
  the position row, COPY the rows, write the dead letters, advance the position,
  COMMIT. Either all of it is durable or none of it is.
* On start (and after any rollback) the sink reads the position and assigns
  the partition there. A sink killed before COMMIT re-reads that batch; one
  killed after COMMIT starts after it. No gap, no duplicate; the primary key
  ``(topic, seq)`` would reject a duplicate even if this reasoning were wrong.
* The position is also committed to the sink's own consumer group
  (:func:`swarmlog.log.protocol.sink_group`) after each Postgres commit, for Kafka's tools
  (``kafka-consumer-groups.sh --describe`` shows the lag). Advisory: never read back.
* ``SELECT ... FOR UPDATE`` on the position row fences a second sink on the same
  topic: whichever commits second sees the position moved, rolls back, and
  re-seeks. Two sinks are correct, just wasteful.

The consumer is ``read_committed``, so events of aborted agent transactions
are never mirrored.

A message that does not decode, or a row Postgres refuses (jsonb rejects
``\\u0000``, for instance), goes to ``dead_letters`` with its offset, the error,
the raw bytes and its headers (``bytea`` all, so nothing in them can be refused),
in the same transaction, and the sink keeps going: one poison message never stops
the mirror. The row-by-row redo puts every row, dead letters too, in a savepoint.

**Postgres away.** When the connection fails (a restart, a failover, a network
cut), the sink logs it, waits with exponential backoff and reconnects, for as long
as it takes (``give_up_after`` bounds it). It then reads its position again — the
truth, whether or not the last COMMIT reached the server — and re-seeks the topic
there, so it resumes exactly: no gap, no duplicate, and no restart of the process.

**Least privilege.** The sink creates nothing: ``swarmlog mirror migrate``
(:mod:`swarmlog_connectors.postgres_migrations`) makes the tables, as the owner,
and the sink runs as a role that may only insert into them and move its position.
It refuses to start against an older schema (:class:`~swarmlog.errors.MirrorNotMigrated`).

Throughput: a transaction runs on a second thread while the main thread consumes
and decodes the next batches (psycopg waits for Postgres with the GIL released).
One transaction at a time, and the next is handed over only after the previous
one committed, so every transaction still checks and advances the position it
expects, in offset order. Batches decoded while a transaction runs go into the
next one together (up to ``transaction_size`` messages): when Postgres is the
slower side, fewer, larger transactions. When a transaction finds itself fenced,
the batches decoded after it are dropped and the sink re-seeks. Postgres is the slower
side, so the time it waits is what the sink loses: the main thread decodes a slice of
``_HANDOVER_EVERY`` messages at a time and hands the db thread its next transaction
between slices, and while the sink runs the collector runs less often and threads switch
sooner (:mod:`swarmlog.log.hotloop`: the batches waiting for their transaction are many live
objects, and the db thread needs the GIL back between the chunks of its COPY).

It logs where it resumes, when it has caught up, dead letters as they happen, and its
progress every ``_PROGRESS_EVERY_S`` seconds; :meth:`PostgresSink.metric_families` gives
its position, lag and counts at scrape time.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from swarmlog.errors import DatabasePermissionDenied, PostgresUnavailable, ServiceUnavailable
from swarmlog.kafka.backend import KafkaBackend
from swarmlog.kafka.reader import LogReader, watermarks
from swarmlog.log.base import ReadPosition
from swarmlog.log.hotloop import fewer_collections, prompt_thread_switches
from swarmlog.log.protocol import sink_group
from swarmlog.observe import Family
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_rows import (
    COPY_SIGNATURE,
    COPY_TRAILER,
    DEAD_LETTER_COLUMNS,
    EVENT_COLUMNS,
    CopyBatch,
    RowBuilder,
    dead_letter,
    safe_text,
)

__all__ = ["PostgresCheck", "PostgresSink", "SinkStats", "connect", "denied"]

# Binary: no text escaping to do in Python, no text parsing of integers, arrays and
# timestamps in Postgres (RowBuilder.build_copy writes the stream).
_COPY_EVENTS = sql.SQL("COPY events ({}) FROM STDIN (FORMAT binary)").format(
    sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)))
_INSERT_EVENT = sql.SQL("INSERT INTO events ({}) VALUES ({})").format(
    sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)), sql.SQL(", ").join(sql.Placeholder() * len(EVENT_COLUMNS))
)
# The header arrays are cast: psycopg cannot tell the type of an empty list, or of one of NULLs.
_INSERT_DEAD = sql.SQL("INSERT INTO dead_letters ({}) VALUES ({}, %s::bytea[], %s::bytea[]) ON CONFLICT DO NOTHING"
                       ).format(sql.SQL(", ").join(map(sql.Identifier, DEAD_LETTER_COLUMNS)),
                                sql.SQL(", ").join(sql.Placeholder() * (len(DEAD_LETTER_COLUMNS) - 2)))
# A grouped transaction also stops growing at this much COPY data, so that large events
# cannot make the batches decoded ahead of Postgres hold more memory than this.
_TRANSACTION_BYTES = 64 * 1024 * 1024
# Messages decoded between two looks at whether the db thread is free (see _mirror).
_HANDOVER_EVERY = 1000
# Waiting for Postgres to come back: half a second, doubling up to 30 s between attempts.
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 30.0
_PROGRESS_EVERY_S = 30.0

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class SinkStats:
    position: int = 0
    """The next offset to mirror, as committed in Postgres."""
    rows: int = 0
    dead_letters: int = 0
    batches: int = 0
    caught_up_to: int = -1
    """The log end (exclusive) the sink last found with everything before it committed; -1 before."""


def denied(conn: psycopg.Connection[Any], action: str, exc: psycopg.Error) -> DatabasePermissionDenied:
    """psycopg's permission error as swarmlog's, naming the role and what to grant."""
    return DatabasePermissionDenied(role=conn.info.user, database=conn.info.dbname, action=action,
                                    detail=str(exc).strip().splitlines()[0])


def connect(settings: Settings, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection to the mirror, given up on after the connect timeout."""
    conninfo = settings.database_conninfo()  # first: a URL libpq refuses is a bad setting (exit 2), not an outage
    # libpq's own connect_timeout (whole seconds, at least 2), unless the URL or the caller sets one.
    if "connect_timeout" not in kwargs and "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(conninfo):
        kwargs["connect_timeout"] = max(2, math.ceil(settings.connect_timeout))
    try:
        return psycopg.connect(conninfo, autocommit=True, **kwargs)
    except psycopg.OperationalError as exc:
        raise PostgresUnavailable(address=_redact(settings.database_url),
                                 detail=str(exc).strip()) from None


class _PostgresAway(Exception):
    """The connection failed (psycopg's OperationalError): wait, reconnect, resume from the position."""

    def __init__(self, cause: psycopg.Error | str) -> None:
        self.cause = cause
        super().__init__(str(cause).strip())


class PostgresCheck:
    """A health check (:class:`swarmlog.observe.Health`): ``SELECT 1`` on a connection of its own."""

    def __init__(self, settings: Settings, *, timeout_s: int = 5) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection[Any] | None = None

    def __call__(self) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.settings, connect_timeout=self.timeout_s)
            self._conn.execute("SELECT 1")
        except psycopg.Error as exc:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            raise PostgresUnavailable(address=_redact(self.settings.database_url),
                                     detail=str(exc).strip()) from None


class PostgresSink:
    """Mirrors ``topic`` into Postgres. ``run()`` until stopped or, with ``until_end``, caught up.

    ``batch_size`` messages are consumed and decoded at a time; a transaction holds one
    batch, or several (up to ``transaction_size`` messages) when Postgres is behind. While
    Postgres is away the sink retries with backoff; ``give_up_after`` seconds of it (None:
    never) end ``run()`` with :class:`~swarmlog.errors.ServiceUnavailable`.
    """

    def __init__(self, *, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                 poll_timeout: float = 0.02, batch_size: int = 5000, transaction_size: int = 50_000,
                 group: str | None = None, give_up_after: float | None = None) -> None:
        settings.check_database_url()  # a sink is nothing without its mirror: a bad URL is refused first
        self.settings = settings
        self.topic = topic or settings.topic
        self.group = group or sink_group(self.topic)
        """The consumer group the position is also committed to, for Kafka's tools (see _advise)."""
        self._reader: LogReader | None = None
        self._advised = 0
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.rows = RowBuilder(topic=self.topic, decoder=Decoder(self.registry))
        self.poll_timeout = poll_timeout
        self.batch_size = batch_size
        self.transaction_size = transaction_size
        self.give_up_after = give_up_after
        self.stats = SinkStats()
        self._connected_at = 0.0  # monotonic time of the last connection that worked
        self._stop = threading.Event()
        self.log_end: int | None = None
        """The high watermark, when something (the health checker) last asked; for the lag metric."""
        self._reported = (0, 0, 0.0)  # rows, dead letters, when: what the last progress line said

    def stop(self) -> None:
        """Ask the sink to write what it has consumed so far, then return."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: the sink writes what it has consumed so far, then ``run()`` returns."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self, *, until_end: bool = False, on_batch: Callable[[SinkStats], None] | None = None) -> SinkStats:
        """Mirror until stopped (or, with ``until_end``, caught up); ``on_batch`` after each commit."""
        backend = KafkaBackend(self.settings)
        try:
            backend.warn_if_history_is_finite(self.topic)
        finally:
            backend.close()
        with LogReader(settings=self.settings, topic=self.topic, group=self.group, advisory=True) as reader, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="swarmlog-sink-db") as db, \
                fewer_collections(), prompt_thread_switches():  # see swarmlog.log.hotloop
            self._reader = reader
            away_since: float | None = None
            delay = _BACKOFF_FIRST_S
            while not self._stop.is_set():
                try:
                    self._session(reader, db, until_end=until_end, on_batch=on_batch,
                                  resumed=away_since is not None)
                    break  # stopped, or caught up
                except _PostgresAway as away:
                    now = time.monotonic()
                    if away_since is None or self._connected_at > away_since:
                        away_since, delay = now, _BACKOFF_FIRST_S  # a new outage, not the same one
                    if self.give_up_after is not None and now - away_since >= self.give_up_after:
                        raise PostgresUnavailable(address=_redact(self.settings.database_url),
                                                 detail=f"{away} (retried for {now - away_since:.0f} s)") from None
                    logger.warning("sink: Postgres at %s is unavailable (%s); mirrored up to offset %d; "
                                   "connecting again in %.1f s", _redact(self.settings.database_url), away,
                                   self.stats.position, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, _BACKOFF_MAX_S)
        logger.info("sink: stopped at offset %d (%d rows, %d dead letters mirrored by this process)",
                    self.stats.position, self.stats.rows, self.stats.dead_letters)
        return self.stats

    def _session(self, reader: LogReader, db: ThreadPoolExecutor, *, until_end: bool,
                 on_batch: Callable[[SinkStats], None] | None, resumed: bool) -> None:
        """Mirror over one connection until stopped or caught up; :class:`_PostgresAway` if it fails."""
        try:
            # A bounded connect (connect): a server that accepts the TCP connection but does not
            # answer (stopped, overloaded) is retried like one that refuses it.
            conn = connect(self.settings)
        except ServiceUnavailable as exc:
            raise _PostgresAway(exc.detail) from None
        try:
            try:
                require_schema(conn, database=_redact(self.settings.database_url))
                conn.autocommit = False
                position = self._read_position(conn)
                conn.commit()
            except psycopg.OperationalError as exc:
                raise _PostgresAway(exc) from None
            self._connected_at = time.monotonic()
            if resumed:
                logger.warning("sink: Postgres at %s is back: resuming at offset %d",
                               _redact(self.settings.database_url), position)
            else:
                logger.info("sink: mirroring topic %s into Postgres from offset %d", self.topic, position)
            low = watermarks(self.settings, self.topic)[0]
            if position < low:
                logger.warning("sink: topic %r starts at offset %d: offsets %d..%d were deleted (retention) before "
                               "the mirror had them; mirroring from %d", self.topic, low, position, low - 1, low)
            self._reported = (self.stats.rows, self.stats.dead_letters, time.monotonic())
            # The position in Postgres is the truth: whatever was decoded, or committed without
            # the client hearing of it, before the connection failed, is read again from here.
            reader.assign(position)
            self.stats.position = position
            self._mirror(conn, reader, db, until_end=until_end, on_batch=on_batch)
        except psycopg.errors.InsufficientPrivilege as exc:
            conn.rollback()
            raise denied(conn, "read and write the mirror's rows", exc) from None
        finally:
            conn.close()

    def _mirror(self, conn: psycopg.Connection[Any], reader: LogReader, db: ThreadPoolExecutor, *, until_end: bool,
                on_batch: Callable[[SinkStats], None] | None) -> None:
        # The transaction running on the db thread: only one, as the next one's expected
        # position is this one's end, which holds only once it committed.
        in_flight: Future[bool] | None = None
        pending: list[CopyBatch] = []  # decoded batches for the next transaction
        try:
            while not self._stop.is_set():
                fenced = False
                for batch in reader.batches(follow=not until_end, timeout=self.poll_timeout,
                                            batch_size=self.batch_size):
                    # Decoded a slice at a time, so that a db thread that finished finds its next
                    # transaction within a slice's decoding, not a whole batch's (sink.swarmlog):
                    # Postgres is the slower side, and the time it waits is the sink's throughput.
                    for piece in _slices(batch):
                        if piece:
                            pending.append(self.rows.build_copy(piece))
                        # While the db thread is busy, keep decoding into the next transaction
                        # (until it is full: see _full); hand over when the db thread is free,
                        # or at once when the log is idle (latency).
                        if in_flight is not None and (in_flight.done() or not piece or self._full(pending)):
                            fenced = not self._settle(in_flight, on_batch)
                            in_flight = None
                            if fenced:
                                break
                        if in_flight is None and pending:
                            in_flight = db.submit(self._write, conn, pending, self.stats.position)
                            pending = []
                        elif in_flight is None and not piece:
                            self._caught_up(reader.position)
                    if fenced or self._stop.is_set():
                        break
                if not fenced and in_flight is not None:  # caught up, or stopping
                    fenced = not self._settle(in_flight, on_batch)
                    in_flight = None
                if not fenced and pending:
                    fenced = not self._settle(db.submit(self._write, conn, pending, self.stats.position),
                                              on_batch)
                pending = []
                if fenced:
                    # Another sink moved the position: what was decoded after the fenced
                    # transaction is dropped; read on from where the position is now.
                    try:
                        position = self._read_position(conn)
                        conn.commit()
                    except psycopg.OperationalError as exc:
                        raise _PostgresAway(exc) from None
                    reader.consumer.assign([])
                    reader.assign(position)
                    self.stats.position = position
                elif until_end:
                    self._caught_up(reader.position)
                    return
        finally:
            if in_flight is not None:  # leaving on an error: let the transaction end first
                in_flight.exception()

    # -- what an operator sees ---------------------------------------------------------------

    def _caught_up(self, read: ReadPosition) -> None:
        if not read.reached_end_of_log:
            return
        if self.stats.caught_up_to < 0:
            logger.info("sink: caught up at offset %d", read.end_offset)
        self.stats.caught_up_to = max(read.end_offset, self.stats.position)
        self._advise(self.stats.caught_up_to)

    def _advise(self, next_offset: int) -> None:
        # The position is also committed to the sink's consumer group, AFTER the Postgres
        # COMMIT, so that `kafka-consumer-groups.sh --describe` and lag exporters see how far
        # the mirror is. Advisory only: Postgres stays the truth, the sink never reads the
        # group's offset back (a resume reads sink_positions), and a commit that fails or is
        # lost costs a stale lag in those tools, nothing in the mirror. Caught up, it is the
        # end of the log (past a final transaction marker: lag 0), not the last row's offset + 1.
        if self._reader is not None and next_offset > self._advised:
            self._advised = next_offset
            self._reader.commit_advisory(next_offset)

    def _progress(self) -> None:
        rows, dead, when = self._reported
        stats = self.stats
        if stats.dead_letters > dead:
            logger.warning("sink: %d message(s) dead-lettered (table dead_letters) before offset %d",
                           stats.dead_letters - dead, stats.position)
        now = time.monotonic()
        if now - when >= _PROGRESS_EVERY_S and stats.rows != rows:
            logger.info("sink: mirrored up to offset %d: %d rows in the last %.0f s (%d rows, %d dead letters "
                        "by this process)", stats.position, stats.rows - rows, now - when, stats.rows,
                        stats.dead_letters)
            self._reported = (stats.rows, stats.dead_letters, now)
        elif stats.dead_letters > dead:
            self._reported = (rows, stats.dead_letters, when)

    def lag(self) -> int | None:
        """Offsets in the log not yet mirrored (transaction markers included); None if the end is unknown."""
        if self.log_end is None:
            return None
        return max(0, self.log_end - max(self.stats.position, self.stats.caught_up_to))

    def metric_families(self) -> list[Family]:
        stats = self.stats
        topic = (self.topic,)
        families = [
            Family("swarmlog_sink_position", "gauge", "The next offset to mirror, committed in Postgres.",
                   ("topic",), [(topic, stats.position)]),
            Family("swarmlog_sink_rows", "counter", "Events mirrored into Postgres by this process.", ("topic",),
                   [(topic, stats.rows)]),
            Family("swarmlog_sink_dead_letters", "counter",
                   "Messages written to dead_letters by this process (undecodable, or refused by Postgres).",
                   ("topic",), [(topic, stats.dead_letters)]),
            Family("swarmlog_sink_transactions", "counter", "Postgres transactions committed (batches).",
                   ("topic",), [(topic, stats.batches)]),
        ]
        lag = self.lag()
        if lag is not None:
            families.append(Family("swarmlog_sink_lag_offsets", "gauge",
                                   "The log end minus the sink's position: offsets not yet mirrored.", ("topic",),
                                   [(topic, lag)]))
        return families

    def _full(self, pending: list[CopyBatch]) -> bool:
        return (sum(len(b.messages) for b in pending) >= self.transaction_size
                or sum(len(b.data) for b in pending) >= _TRANSACTION_BYTES)

    def _settle(self, in_flight: Future[bool], on_batch: Callable[[SinkStats], None] | None) -> bool:
        """Wait for the db thread's transaction: True if it committed, False if it was fenced."""
        written = in_flight.result()
        if written:
            self._advise(self.stats.position)
            self._progress()
            if on_batch is not None:
                on_batch(self.stats)
        return written

    # -- one transaction (on the db thread) --------------------------------------------------

    def _write(self, conn: psycopg.Connection[Any], batches: list[CopyBatch], expected: int) -> bool:
        rows = sum(b.rows for b in batches)
        dead = [d for b in batches for d in b.dead]
        next_offset = batches[-1].next_offset
        try:
            with conn.cursor() as cur:
                if self._lock_position(cur) != expected:
                    conn.rollback()
                    return False
                if rows:
                    with cur.copy(_COPY_EVENTS) as copy:
                        copy.write(b"".join([COPY_SIGNATURE, *(b.data for b in batches), COPY_TRAILER]))
                if dead:
                    cur.executemany(_INSERT_DEAD, dead)
                self._set_position(cur, next_offset)
            conn.commit()
            dead_count = len(dead)
        except ROW_REFUSALS as exc:
            # A row Postgres refuses (bad jsonb text, ...), or a second event with an id already
            # mirrored (events_by_event_id): redo the transaction row by row, dead-lettering the bad
            # ones. A duplicate *offset* (the primary key) is not one of these: with the position
            # fenced it cannot happen, and if it did, stopping loudly is right.
            if not refused_one_by_one(exc):
                raise
            conn.rollback()
            done = self._write_slowly(conn, [m for b in batches for m in b.messages], expected, next_offset)
            if done is None:
                return False
            rows, dead_count = done
        except psycopg.errors.InsufficientPrivilege as exc:
            conn.rollback()
            raise denied(conn, "write the mirror's rows", exc) from None
        except psycopg.OperationalError as exc:
            raise _PostgresAway(exc) from None
        self.stats.position = next_offset
        self.stats.rows += rows
        self.stats.dead_letters += dead_count
        self.stats.batches += len(batches)
        return True

    def _write_slowly(self, conn: psycopg.Connection[Any], messages: list[Any], expected: int,
                      next_offset: int) -> tuple[int, int] | None:
        """The messages row by row, each in a savepoint: (rows, dead letters), or None if fenced."""
        # Its own RowBuilder: this runs on the db thread while the main one decodes the next batch.
        rows, dead = RowBuilder(topic=self.topic, decoder=Decoder(self.registry)).build(messages)
        by_offset = {m.offset(): m for m in messages}
        with conn.cursor() as cur:
            if self._lock_position(cur) != expected:
                conn.rollback()
                return None
            refused = []
            for row in rows:
                try:
                    with conn.transaction():  # a savepoint
                        cur.execute(_INSERT_EVENT, row)
                except ROW_REFUSALS as exc:
                    refused.append(refused_row(cur, self.topic, by_offset[row[1]], row, exc))
            for d in dead + refused:
                self._insert_dead_letter(conn, cur, d)
            self._set_position(cur, next_offset)
        conn.commit()
        return len(rows) - len(refused), len(dead) + len(refused)

    def _insert_dead_letter(self, conn: psycopg.Connection[Any], cur: psycopg.Cursor[Any],
                            row: tuple[Any, ...]) -> None:
        # Every column but the error is bytea, which takes any bytes, and the error is made
        # safe for text (dead_letter): nothing here should be refusable. The savepoint is for
        # what nobody foresaw: then the letter is kept with its bytes and a plain error.
        try:
            with conn.transaction():
                cur.execute(_INSERT_DEAD, row)
        except psycopg.DataError as exc:
            logger.error("sink: offset %d: Postgres refused its dead letter (%s); keeping its bytes with a plain "
                         "error", row[1], exc)
            with conn.transaction():
                cur.execute(_INSERT_DEAD, (*row[:2], safe_text(f"dead letter refused by Postgres ({exc}); "
                                                               f"{row[2]!r}").encode("ascii", "backslashreplace")
                                           .decode("ascii"), *row[3:]))

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


ROW_REFUSALS = (psycopg.DataError, psycopg.errors.UniqueViolation)
"""What Postgres may refuse one row for, whose message then becomes a dead letter (:func:`refused_row`):
data it will not store (jsonb's ``\u0000``), or an event id the topic's mirror already has."""


def refused_one_by_one(exc: Exception) -> bool:
    """Whether a transaction that failed with ``exc`` is redone row by row, the refused rows dead-lettered:
    a DataError, or a repeated event id (the index migration 0006 made) — never a repeated offset."""
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return exc.diag.constraint_name == "events_by_event_id"
    return isinstance(exc, psycopg.DataError)


def refused_row(cur: psycopg.Cursor[Any], topic: str, message: Any, row: tuple[Any, ...],
                exc: Exception) -> tuple[Any, ...]:
    """The dead letter of a row Postgres refused on its own (in a savepoint, rolled back): the message whole,
    and why. Re-raises what is not a row's refusal (:func:`refused_one_by_one`). Both sinks' row-by-row
    paths (postgres_sink, pattern_writes) and ``mirror redrive`` use it."""
    if not refused_one_by_one(exc):
        raise exc
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return dead_letter(topic, message, repeated_id(cur, topic, row))
    return dead_letter(topic, message, f"Postgres refused the row: {exc}")


def repeated_id(cur: psycopg.Cursor[Any], topic: str, row: tuple[Any, ...]) -> str:
    """The dead letter's error for a row whose event id is already mirrored: it names the first one."""
    event_id = row[EVENT_COLUMNS.index("event_id")]
    found = cur.execute("SELECT seq FROM events WHERE topic = %s AND event_id = %s", (topic, event_id)).fetchone()
    first = f"the event at offset {found[0]}" if found else "an event already mirrored"
    return (f"duplicate event id {event_id!r}: a second copy of {first}. An event id names one event: this "
            f"message (re-sent by a producer or a copy tool) is not mirrored as another, and no agent handles it")


def _slices(batch: list[Any]) -> list[list[Any]]:
    """``batch`` in slices of ``_HANDOVER_EVERY`` messages; an empty batch is one empty slice (the log is idle)."""
    if len(batch) <= _HANDOVER_EVERY:
        return [batch]
    return [batch[i:i + _HANDOVER_EVERY] for i in range(0, len(batch), _HANDOVER_EVERY)]


def _redact(url: str) -> str:
    """The database URL without its password, for error messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable SWARMLOG_DATABASE_URL)"
    host, port, db = info.get("host", "?"), info.get("port", "5432"), info.get("dbname", "?")
    return f"{host}:{port}/{db}"
