"""One sink, many swarms: mirrors every topic matching a pattern into Postgres, each exactly once.

``swarmlog sink --topics-pattern '^swarm\\..*'``. Each swarm has its own single-partition
topic; this sink reads all of them through one consumer (:mod:`swarmlog.kafka.multi_reader`)
and one Postgres connection, into the same ``events`` table as :mod:`.postgres_sink`.

Exactly once, per topic, for the same reasons as the one-topic sink:

* Each topic's position (the next offset to mirror) is its own row of ``sink_positions``.
* A transaction may hold rows of many topics: it locks the position rows of all of them
  (``FOR UPDATE``, in topic order, so two sinks never deadlock), checks each is where this
  sink left it, COPYs the rows, writes the dead letters, advances every position it
  accounts for, and COMMITs. All or nothing, for every topic in it.
* On start, each topic is assigned at its position in Postgres; a sink SIGKILLed before
  COMMIT re-reads what that transaction held, one killed after starts after it.
* A position that moved under it (a second sink) fails the check: the transaction rolls
  back and every topic is read again from its position in Postgres.

New swarms: every ``refresh_interval_ms`` the broker's topics are matched against the
pattern again (:mod:`swarmlog.kafka.discovery`); a new one gets its position row (0) and is
assigned there. Before the assignment changes, everything read so far is committed, so a
topic is never read twice into one transaction. A topic that disappears is dropped.

Throughput: as in the one-topic sink, a transaction runs on a second thread while the main
thread consumes and decodes the next batches into the next transaction. Messages come in
runs of one topic (fetches are per partition); each run is one COPY chunk built by that
topic's RowBuilder, and all chunks of a transaction go into one COPY.

The position is also committed to the sink's consumer group (``swarmlog-sink`` unless told)
after each Postgres COMMIT, for ``kafka-consumer-groups.sh --describe`` and lag exporters;
advisory, as in :mod:`.postgres_sink`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

from swarmlog.errors import PostgresUnavailable
from swarmlog.kafka.discovery import TopicPattern, discover
from swarmlog.kafka.multi_reader import MultiTopicReader
from swarmlog.log.hotloop import fewer_collections, prompt_thread_switches
from swarmlog.log.protocol import sink_group
from swarmlog.observe import Family
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_rows import COPY_SIGNATURE, COPY_TRAILER, CopyBatch, RowBuilder, dead_letter
from .postgres_sink import (
    _COPY_EVENTS,
    _INSERT_DEAD,
    _INSERT_EVENT,
    _TRANSACTION_BYTES,
    _redact,
    connect,
)

__all__ = ["PatternSink", "PatternStats"]

_LOCK_POSITIONS = ("SELECT topic, next_offset FROM sink_positions WHERE topic = ANY(%s) ORDER BY topic "
                   "FOR UPDATE")
_SET_POSITIONS = ("UPDATE sink_positions AS p SET next_offset = v.n, updated_at = now() "
                  "FROM unnest(%s::text[], %s::bigint[]) AS v(t, n) WHERE p.topic = v.t")
# The rows exist before the first transaction, so that FOR UPDATE always has a row to lock:
# without it two new sinks would both "insert" position 0 and race.
_NEW_POSITIONS = ("INSERT INTO sink_positions (topic, next_offset) SELECT t, 0 FROM unnest(%s::text[]) AS t "
                  "ON CONFLICT DO NOTHING")
_READ_POSITIONS = "SELECT topic, next_offset FROM sink_positions WHERE topic = ANY(%s)"
_PROGRESS_EVERY_S = 30.0

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class PatternStats:
    positions: dict[str, int] = field(default_factory=dict)
    """Per topic: the next offset to mirror, as committed in Postgres."""
    rows: int = 0
    dead_letters: int = 0
    transactions: int = 0
    topic_rows: dict[str, int] = field(default_factory=dict)
    topic_dead: dict[str, int] = field(default_factory=dict)


class PatternSink:
    """Mirrors every topic ``pattern`` matches. ``run()`` until stopped or, with ``until_end``, caught up
    on every topic (those found at the start, and any found while it runs)."""

    def __init__(self, *, settings: Settings, pattern: TopicPattern, group: str | None = None,
                 registry: SchemaRegistry | None = None, poll_timeout: float = 0.02, batch_size: int = 5000,
                 transaction_size: int = 50_000, refresh_interval_ms: int = 10_000) -> None:
        settings.check_database_url()  # a sink is nothing without its mirror: a bad URL is refused first
        self.settings = settings
        self.pattern = pattern
        self.group = group or sink_group()
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.decoder = Decoder(self.registry)
        self.poll_timeout = poll_timeout
        self.batch_size = batch_size
        self.transaction_size = transaction_size
        self.refresh_interval_s = refresh_interval_ms / 1000
        self.stats = PatternStats()
        self._builders: dict[str, RowBuilder] = {}
        # The caches every topic's RowBuilder shares (schemas, writers, names): built once, not per topic.
        self._rows = RowBuilder(topic="", decoder=self.decoder)
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._reported = (0, 0.0)
        self._just_written: dict[str, int] = {}  # the positions the last transaction committed
        self._advised: dict[str, int] = {}  # what the consumer group was last told, per topic

    def stop(self) -> None:
        """Ask the sink to write what it has consumed so far, then return."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def _builder(self, topic: str) -> RowBuilder:
        b = self._builders.get(topic)
        if b is None:
            b = self._builders[topic] = RowBuilder(topic=topic, decoder=self.decoder, like=self._rows)
        return b

    # -- the loop ----------------------------------------------------------------------------

    def run(self, *, until_end: bool = False, on_batch: Callable[[PatternStats], None] | None = None) -> PatternStats:
        with connect(self.settings) as conn, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="swarmlog-sink-db") as db, \
                MultiTopicReader(settings=self.settings, group=self.group) as reader, \
                fewer_collections(), prompt_thread_switches():  # see swarmlog.log.hotloop
            require_schema(conn, database=_redact(self.settings.database_url))
            conn.autocommit = False
            logger.info("sink: mirroring the topics matching %r into Postgres (consumer group %s)",
                        self.pattern.pattern, self.group)
            self._reported = (0, time.monotonic())
            self._look(conn, reader)
            next_look = time.monotonic() + self.refresh_interval_s
            in_flight: Future[bool] | None = None
            pending: list[tuple[str, CopyBatch]] = []
            try:
                while not self._stop.is_set():
                    runs = reader.runs(batch_size=self.batch_size, timeout=self.poll_timeout)
                    builder = self._builder
                    for t, run in runs:
                        pending.append((t, builder(t).build_copy(run)))
                    if in_flight is not None and (in_flight.done() or not runs or self._full(pending)):
                        ok = self._settle(in_flight, reader, on_batch)
                        in_flight = None
                        if not ok:
                            pending = []
                            self._reseek(conn, reader)
                            continue
                    if in_flight is None and pending:
                        in_flight = db.submit(self._write, conn, pending, self._expected(pending))
                        pending = []
                    elif in_flight is None and not runs:
                        self._caught_up(reader)
                        if until_end and reader.all_at_end() and time.monotonic() < next_look:
                            break
                    if time.monotonic() >= next_look:
                        # A barrier: everything read is committed before the assignment changes.
                        if in_flight is not None:
                            ok = self._settle(in_flight, reader, on_batch)
                            in_flight = None
                            if not ok:
                                pending = []
                                self._reseek(conn, reader)
                        if pending:
                            if not self._settle(db.submit(self._write, conn, pending, self._expected(pending)),
                                                reader, on_batch):
                                self._reseek(conn, reader)
                            pending = []
                        self._look(conn, reader)
                        next_look = time.monotonic() + self.refresh_interval_s
                if in_flight is not None:
                    self._settle(in_flight, reader, on_batch)
                    in_flight = None
                if pending:
                    self._settle(db.submit(self._write, conn, pending, self._expected(pending)), reader, on_batch)
            finally:
                if in_flight is not None:  # leaving on an error: let the transaction end first
                    in_flight.exception()
        s = self.stats
        logger.info("sink: stopped (%d topics, %d rows, %d dead letters mirrored by this process)",
                    len(s.positions), s.rows, s.dead_letters)
        return s

    def _expected(self, pending: list[tuple[str, CopyBatch]]) -> dict[str, int]:
        positions = self.stats.positions
        return {t: positions[t] for t, _ in pending}

    def _full(self, pending: list[tuple[str, CopyBatch]]) -> bool:
        return (sum(len(b.messages) for _, b in pending) >= self.transaction_size
                or sum(len(b.data) for _, b in pending) >= _TRANSACTION_BYTES)

    def _settle(self, in_flight: Future[bool], reader: MultiTopicReader,
                on_batch: Callable[[PatternStats], None] | None) -> bool:
        """Wait for the db thread's transaction: True if it committed, False if it was fenced."""
        written: bool = in_flight.result()
        if written:
            # Advisory, after the Postgres COMMIT (see postgres_sink.PostgresSink._advise).
            reader.commit_advisory(self._just_written)
            self._progress()
            if on_batch is not None:
                on_batch(self.stats)
        return written

    def _caught_up(self, reader: MultiTopicReader) -> None:
        # Nothing in flight or pending: for a topic at its end, everything before the end is in
        # Postgres; the end may lie past the last row (a transaction marker), and the tools'
        # lag is counted to it.
        positions = self.stats.positions
        ends = reader.ends
        advise = {t: ends[t] for t in reader.at_end if ends.get(t, 0) > self._advised.get(t, 0)
                  and ends[t] >= positions.get(t, 0)}
        if advise:
            self._advised.update(advise)
            reader.commit_advisory(advise)

    def _progress(self) -> None:
        rows, when = self._reported
        now = time.monotonic()
        if now - when >= _PROGRESS_EVERY_S and self.stats.rows != rows:
            logger.info("sink: %d rows in the last %.0f s over %d topics (%d rows, %d dead letters by this process)",
                        self.stats.rows - rows, now - when, len(self.stats.positions), self.stats.rows,
                        self.stats.dead_letters)
            self._reported = (self.stats.rows, now)

    def metric_families(self) -> list[Family]:
        s = self.stats
        # Copies (atomic under the GIL): the scrape runs on another thread while topics come and go.
        positions, topic_rows, topic_dead = dict(s.positions), dict(s.topic_rows), dict(s.topic_dead)
        return [
            Family("swarmlog_sink_topics", "gauge", "Topics the sink mirrors (those its pattern matches).", (),
                   [((), len(positions))]),
            Family("swarmlog_sink_position", "gauge", "The next offset to mirror, committed in Postgres.",
                   ("topic",), [((t,), p) for t, p in positions.items()]),
            Family("swarmlog_sink_rows", "counter", "Events mirrored into Postgres by this process.", ("topic",),
                   [((t,), n) for t, n in topic_rows.items()]),
            Family("swarmlog_sink_dead_letters", "counter",
                   "Messages written to dead_letters by this process (undecodable, or refused by Postgres).",
                   ("topic",), [((t,), n) for t, n in topic_dead.items()]),
            Family("swarmlog_sink_transactions", "counter", "Postgres transactions committed.", (),
                   [((), s.transactions)]),
        ]

    # -- topics coming and going -------------------------------------------------------------

    def _look(self, conn: psycopg.Connection[Any], reader: MultiTopicReader) -> None:
        """Match the broker's topics again: assign the new ones at their positions, drop the gone ones."""
        found = discover(self.settings, self.pattern, client=reader.consumer)
        for name, partitions in found.refused.items():
            if name not in self._refused:
                self._refused.add(name)
                logger.warning("sink: topic %s matches %r but has %d partitions, so it is no swarm's log "
                               "(one partition is the swarm's total order): not mirrored", name,
                               self.pattern.pattern, partitions)
        gone = reader.assigned - found.topics - found.unsettled
        if gone:
            logger.warning("sink: %d topic(s) gone from the broker, no longer mirrored: %s", len(gone),
                           ", ".join(sorted(gone)[:10]))
            reader.remove(gone)
            for t in gone:
                self.stats.positions.pop(t, None)
                self._builders.pop(t, None)
        new = sorted(found.topics - reader.assigned)
        if new:
            positions = self._positions(conn, new, create=True)
            self.stats.positions.update(positions)
            reader.add(positions)
            logger.info("sink: mirroring %d new topic(s): %s%s", len(new), ", ".join(new[:10]),
                        " ..." if len(new) > 10 else "")

    def _reseek(self, conn: psycopg.Connection[Any], reader: MultiTopicReader) -> None:
        # Another sink moved a position: what was decoded after the fenced transaction is dropped;
        # every topic reads on from where its position is now.
        positions = self._positions(conn, sorted(reader.assigned), create=False)
        self.stats.positions.update(positions)
        reader.add(positions)

    def _positions(self, conn: psycopg.Connection[Any], topics: list[str], *, create: bool) -> dict[str, int]:
        try:
            with conn.cursor() as cur:
                if create:
                    cur.execute(_NEW_POSITIONS, (topics,))
                cur.execute(_READ_POSITIONS, (topics,))
                found = dict(cur.fetchall())
            conn.commit()
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=_redact(self.settings.database_url),
                                     detail=str(exc).strip()) from None
        return {t: int(found.get(t, 0)) for t in topics}

    # -- one transaction (on the db thread) --------------------------------------------------

    def _write(self, conn: psycopg.Connection[Any], pending: list[tuple[str, CopyBatch]],
               expected: dict[str, int]) -> bool:
        topics = sorted(expected)
        ends: dict[str, int] = {}
        rows: dict[str, int] = {}
        dead_count: dict[str, int] = {}
        for t, b in pending:  # in offset order per topic: the last batch's end is the topic's
            ends[t] = b.next_offset
            rows[t] = rows.get(t, 0) + b.rows
            dead_count[t] = dead_count.get(t, 0) + len(b.dead)
        dead = [d for _, b in pending for d in b.dead]
        try:
            with conn.cursor() as cur:
                if not self._lock(cur, expected, topics):
                    conn.rollback()
                    return False
                if any(rows.values()):
                    with cur.copy(_COPY_EVENTS) as copy:
                        copy.write(b"".join([COPY_SIGNATURE, *(b.data for _, b in pending), COPY_TRAILER]))
                if dead:
                    cur.executemany(_INSERT_DEAD, dead)
                cur.execute(_SET_POSITIONS, (topics, [ends[t] for t in topics]))
            conn.commit()
        except psycopg.DataError:
            # A row Postgres refuses: the transaction again, row by row (as postgres_sink does).
            conn.rollback()
            done = self._write_slowly(conn, pending, expected, topics, ends)
            if done is None:
                return False
            rows, dead_count = done
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=_redact(self.settings.database_url),
                                     detail=str(exc).strip()) from None
        self._account(ends, rows, dead_count)
        return True

    def _account(self, ends: dict[str, int], rows: dict[str, int], dead: dict[str, int]) -> None:
        s = self.stats
        s.positions.update(ends)
        s.transactions += 1
        for t, n in rows.items():
            s.rows += n
            s.topic_rows[t] = s.topic_rows.get(t, 0) + n
        for t, n in dead.items():
            if n:
                s.dead_letters += n
                s.topic_dead[t] = s.topic_dead.get(t, 0) + n
                logger.warning("sink: %d message(s) of %s dead-lettered (table dead_letters) before offset %d",
                               n, t, ends[t])
        self._just_written = ends

    def _lock(self, cur: psycopg.Cursor[Any], expected: dict[str, int], topics: Iterable[str]) -> bool:
        cur.execute(_LOCK_POSITIONS, (list(topics),))
        found = dict(cur.fetchall())
        return all(int(found.get(t, 0)) == o for t, o in expected.items())

    def _write_slowly(self, conn: psycopg.Connection[Any], pending: list[tuple[str, CopyBatch]],
                      expected: dict[str, int], topics: list[str],
                      ends: dict[str, int]) -> tuple[dict[str, int], dict[str, int]] | None:
        """Each message in a savepoint: (rows, dead letters) per topic, or None if fenced."""
        rows: dict[str, int] = {}
        dead_count: dict[str, int] = {}
        with conn.cursor() as cur:
            if not self._lock(cur, expected, topics):
                conn.rollback()
                return None
            for t, b in pending:
                # Its own RowBuilder: this runs on the db thread while the main one decodes.
                built, dead = RowBuilder(topic=t, decoder=Decoder(self.registry)).build(b.messages)
                by_offset = {m.offset(): m for m in b.messages}
                for row in built:
                    try:
                        with conn.transaction():  # a savepoint
                            cur.execute(_INSERT_EVENT, row)
                        rows[t] = rows.get(t, 0) + 1
                    except psycopg.DataError as exc:
                        dead.append(dead_letter(t, by_offset[row[1]], f"Postgres refused the row: {exc}"))
                for d in dead:
                    cur.execute(_INSERT_DEAD, d)
                dead_count[t] = dead_count.get(t, 0) + len(dead)
            cur.execute(_SET_POSITIONS, (topics, [ends[t] for t in topics]))
        conn.commit()
        return rows, dead_count
