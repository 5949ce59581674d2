"""Sinks of many swarms: every topic matching a pattern mirrored into Postgres exactly once, by one sink or a group.

``swarmlog sink --topics-pattern '^swarm\\..*'``. Each swarm has its own single-partition
topic; a sink reads the topics it holds through one consumer (:mod:`swarmlog.kafka.multi_reader`)
and one Postgres connection, into the same ``events`` table as :mod:`.postgres_sink`. Run
several (``replicas`` in the chart) and they split the topics: every sink of the pattern
joins one Kafka consumer group (``swarmlog-sink`` unless told) and asks it for every topic
the pattern matches; the group's cooperative-sticky assignor spreads them, as Kafka Connect
spreads a sink's topics over its workers, and moves them when sinks come and go.

Exactly once, per topic, whatever the group does:

* Each topic's row of ``sink_positions`` holds its position (the next offset to mirror) and
  its owner, the sink that holds it (:mod:`.sink_owners`).
* **Assigned**: before reading a topic the group gave it, a sink *claims* its row: locks it,
  names itself the owner, reads the position, commits; and the topic is read from there.
  The lock waits for a transaction of the previous owner still holding the row, so the
  claim reads the position that transaction left.
* **A transaction** may hold rows of many topics: it locks the rows of all of them (in topic
  order: two sinks never deadlock), checks that each still names this sink and is at the
  position this sink left it, COPYs the rows, writes the dead letters, advances every
  position, COMMITs. All or nothing, for every topic in it.
* **Revoked** (the group moves topics to another sink; the other sink gets them only after
  this returns): the transaction in flight is committed first, so its rows are in before the
  next owner reads the position; batches decoded but not yet written for those topics are
  dropped, and the next owner reads them again from the position; the rows are released.
* **Lost** (this sink's session ended: it stalled, or the broker could not hear it, and the
  group gave its topics away without asking): the same, except that the next owner may
  already have claimed them. Then what this sink still has in flight for them fails the
  check and rolls back; it can never commit a topic once another sink has claimed it.
* **Fenced** (a transaction found a row not as it left it): the transaction rolls back and
  every topic in it is read again from its position as committed. A topic now claimed by
  another sink is paused, not read, until the group assigns this sink something again
  (a sink that claimed late, its own session already over, soon rejoins the group, and that
  rebalance lets the sink the group chose claim the topic back). A topic whose position moved
  under the same owner (a one-topic sink on it too) is read on from there.
* **SIGKILL** at any instant: the transaction in flight either committed or did not; the
  group gives the sink's topics to the others once its session times out (``session.timeout.ms``,
  10 s), and they claim them at the positions committed. No gap, no duplicate: the primary key
  ``(topic, seq)`` would refuse a duplicate even if this reasoning were wrong.
* **Frozen** in the middle of a transaction (SIGSTOP, a hung node whose connection stays up):
  its row locks make the next owner's claim wait, until Postgres ends the transaction itself
  (``_SESSION_TIMEOUTS``, set on the sink's own connection), or the sink wakes and finishes it.
  Either way the claim then reads the position that transaction left.

New swarms: every ``refresh_interval_ms`` the broker's topics are matched against the
pattern again (:mod:`swarmlog.kafka.discovery`) and the sink asks the group for the new
list: new topics are assigned to some sink of the group, gone ones revoked.

``until_end``: the sink stops once every topic the pattern matched is mirrored up to where its
log ended when the sink found it (the last stable offset), whichever sink of the group
mirrored it; a caught-up topic's position is moved past the transaction markers at its end,
so that "mirrored to the end" can be read in Postgres.

Throughput: as in the one-topic sink, a transaction runs on a second thread while the main
thread consumes and decodes the next batches into the next transaction. Messages come in
runs of one topic (fetches are per partition); each run is one COPY chunk built by that
topic's RowBuilder, and all chunks of a transaction go into one COPY. A group's callbacks run
on the main thread, between two batches.

The positions are also committed to the consumer group after each Postgres COMMIT, for
``kafka-consumer-groups.sh --describe`` and lag exporters; advisory, as in :mod:`.postgres_sink`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

from swarmlog.errors import PostgresUnavailable, ServiceUnavailable
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.discovery import TopicPattern, discover
from swarmlog.kafka.multi_reader import MultiTopicReader, stable_ends
from swarmlog.log.hotloop import fewer_collections, prompt_thread_switches
from swarmlog.log.protocol import sink_group
from swarmlog.observe import Family
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import sink_owners
from .pattern_writes import TopicsWriter
from .postgres_migrations import require_schema
from .postgres_rows import CopyBatch, RowBuilder
from .postgres_sink import _TRANSACTION_BYTES, _redact, connect
from .sink_owners import Fence

__all__ = ["PatternSink", "PatternStats", "owner_name"]

_PROGRESS_EVERY_S = 30.0
# A sink frozen in the middle of a transaction (SIGSTOP, a hung node whose TCP connection stays
# up) holds its rows' locks, and the sink the group gives its topics to waits for them in its
# claim. Postgres ends such a transaction itself after this long, whether the statement hangs
# (a COPY waiting for data) or the session sits idle in it; a live sink's statements and
# transactions take seconds.
_SESSION_TIMEOUTS = ("SET statement_timeout = '120s'", "SET idle_in_transaction_session_timeout = '120s'")
# With until_end: how often the positions of every topic are read to see whether the whole
# pattern is mirrored (only while this sink has nothing to do).
_DONE_CHECK_EVERY_S = 0.2

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class PatternStats:
    positions: dict[str, int] = field(default_factory=dict)
    """Per topic this sink holds: the next offset to mirror, as committed in Postgres."""
    rows: int = 0
    dead_letters: int = 0
    transactions: int = 0
    topic_rows: dict[str, int] = field(default_factory=dict)
    topic_dead: dict[str, int] = field(default_factory=dict)
    handovers: dict[str, int] = field(default_factory=lambda: {"assigned": 0, "revoked": 0, "lost": 0})
    """Topics the group gave this sink, took back (revoked), or took without asking (lost)."""
    fenced: int = 0
    """Transactions rolled back because a topic's row was not as this sink left it."""


def owner_name() -> str:
    """A name for one sink's life: its host (the pod, on Kubernetes), process and a random part."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class PatternSink:
    """Mirrors the topics ``pattern`` matches that the group gives it. ``run()`` until stopped or,
    with ``until_end``, until every matching topic is mirrored to where it ended (see the module)."""

    def __init__(self, *, settings: Settings, pattern: TopicPattern, group: str | None = None,
                 registry: SchemaRegistry | None = None, poll_timeout: float = 0.02, batch_size: int = 5000,
                 transaction_size: int = 50_000, refresh_interval_ms: int = 10_000,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        settings.check_database_url()  # a sink is nothing without its mirror: a bad URL is refused first
        self.settings = settings
        self.pattern = pattern
        self.group = group or sink_group()
        self.owner = owner_name()
        """What this sink writes in ``sink_positions.owner`` for the topics it holds."""
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.decoder = Decoder(self.registry)
        self._writer = TopicsWriter(owner=self.owner, registry=self.registry,
                                    database=_redact(settings.database_url))
        self.poll_timeout = poll_timeout
        self.batch_size = batch_size
        self.transaction_size = transaction_size
        self.refresh_interval_s = refresh_interval_ms / 1000
        self.consumer_config = dict(consumer_config or {})
        self.stats = PatternStats()
        self._builders: dict[str, RowBuilder] = {}
        # The caches every topic's RowBuilder shares (schemas, writers, names): built once, not per topic.
        self._rows = RowBuilder(topic="", decoder=self.decoder)
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._reported = (0, 0.0)
        # One run's machinery (see run()); the group's callbacks reach it through self.
        self._conn: psycopg.Connection[Any] | None = None
        self._db: ThreadPoolExecutor | None = None
        self._reader: MultiTopicReader | None = None
        self._on_batch: Callable[[PatternStats], None] | None = None
        self._in_flight: Future[list[Fence]] | None = None
        """The transaction on the db thread: only one, as the next one's expected positions are
        this one's ends, which hold only once it committed."""
        self._pending: list[tuple[str, CopyBatch]] = []
        """Batches decoded for the next transaction, in offset order per topic."""
        self._read_to: dict[str, int] = {}
        """Per topic held: the offset after the last message decoded into a batch (or its position)."""
        self._fences: list[Fence] = []
        """What the last transaction found moved (it rolled back): to act on between two batches."""
        self._taken: set[str] = set()
        """Assigned topics another sink claimed after this one: paused until the group rebalances."""
        self._rebalanced = False
        self._just_written: dict[str, int] = {}  # the positions the last transaction committed
        self._advised: dict[str, int] = {}  # what the consumer group was last told, per topic
        self._targets: dict[str, int] | None = None  # until_end: where each topic's log ended when found
        self._next_done_check = 0.0
        self._subscribed: frozenset[str] = frozenset()
        self._closing = False  # the run is over: the group's last revoke keeps the final positions
        self._broken = False  # the run failed: the group's last revoke leaves Postgres alone

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
        # Leaving the block closes the reader first: it leaves the group, and the group's last
        # revoke (self.revoked) still has the db thread and the connection.
        with connect(self.settings) as conn, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="swarmlog-sink-db") as db, \
                MultiTopicReader(settings=self.settings, group=self.group, rebalance=self,
                                 consumer_config=self.consumer_config) as reader:
            self._conn, self._db, self._reader, self._on_batch = conn, db, reader, on_batch
            try:
                with fewer_collections(), prompt_thread_switches():  # see swarmlog.log.hotloop
                    require_schema(conn, database=_redact(self.settings.database_url))
                    for statement in _SESSION_TIMEOUTS:
                        conn.execute(statement)
                    conn.autocommit = False
                    logger.info("sink: mirroring the topics matching %r into Postgres as %s, a sink of consumer "
                                "group %s", self.pattern.pattern, self.owner, self.group)
                    self._reported = (0, time.monotonic())
                    if until_end:
                        self._targets = {}
                    self._loop(until_end=until_end)
                    if self._in_flight is not None:
                        self._settle()
                    if self._pending and not self._fences:
                        self._submit()
                        self._settle()
                self._closing = True
            except BaseException:
                self._broken = True
                if self._in_flight is not None:  # leaving on an error: let the transaction end first
                    self._in_flight.exception()
                raise
        s = self.stats
        logger.info("sink: stopped (%d topics held at the end, %d rows, %d dead letters mirrored by this process; "
                    "%d topics assigned, %d revoked, %d lost, %d transactions fenced)", len(s.positions), s.rows,
                    s.dead_letters, s.handovers["assigned"], s.handovers["revoked"], s.handovers["lost"], s.fenced)
        return s

    def _loop(self, *, until_end: bool) -> None:
        reader = self._reader
        assert reader is not None
        self._look(first=True)
        next_look = time.monotonic() + self.refresh_interval_s
        builder = self._builder
        read_to = self._read_to
        while not self._stop.is_set():
            runs = reader.runs(batch_size=self.batch_size, timeout=self.poll_timeout)  # the group's callbacks too
            if self._fences:
                self._recover()  # this call's runs are dropped with the rest: read again from the positions
                continue
            if self._rebalanced:
                self._rebalanced = False
                self._retake()
            pending = self._pending
            for t, run in runs:
                # A topic's messages go in from its position, each once: anything before what was
                # already decoded (fetched before the topic was assigned again) is not read twice.
                start = read_to.get(t)
                if start is None:  # not held (any more)
                    continue
                if run[0].offset() < start:
                    run = [m for m in run if m.offset() >= start]
                    if not run:
                        continue
                pending.append((t, builder(t).build_copy(run)))
                read_to[t] = run[-1].offset() + 1
            in_flight = self._in_flight
            if in_flight is not None and (in_flight.done() or not runs or self._full(pending)):
                if not self._settle():
                    self._recover()
                    continue
            if self._in_flight is None and self._pending:
                self._submit()
            elif self._in_flight is None and not runs:
                self._caught_up()
                if until_end and self._in_flight is None and self._mirrored():
                    break
            if time.monotonic() >= next_look:
                self._look()
                next_look = time.monotonic() + self.refresh_interval_s

    def _expected(self, pending: list[tuple[str, CopyBatch]]) -> dict[str, int]:
        positions = self.stats.positions
        return {t: positions[t] for t, _ in pending}

    def _full(self, pending: list[tuple[str, CopyBatch]]) -> bool:
        return (sum(len(b.messages) for _, b in pending) >= self.transaction_size
                or sum(len(b.data) for _, b in pending) >= _TRANSACTION_BYTES)

    def _submit(self) -> None:
        assert self._db is not None and self._conn is not None and self._in_flight is None
        pending, self._pending = self._pending, []
        self._in_flight = self._db.submit(self._write, self._conn, pending, self._expected(pending))

    def _settle(self) -> bool:
        """Wait for the db thread's transaction: True if it committed, False if it was fenced
        (then :attr:`_fences` says why, for :meth:`_recover`)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return True
        fences = in_flight.result()
        if fences:
            self._fences.extend(fences)
            self.stats.fenced += 1
            return False
        # Advisory, after the Postgres COMMIT (see postgres_sink.PostgresSink._advise).
        assert self._reader is not None
        self._reader.commit_advisory(self._just_written)
        self._advised.update(self._just_written)
        self._progress()
        if self._on_batch is not None:
            self._on_batch(self.stats)
        return True

    def _caught_up(self) -> None:
        # Nothing in flight or pending: for a topic at its end, everything before the end is in
        # Postgres. The end may lie past the last row (transaction markers): the position moves
        # there too, in a transaction of its own, so that Postgres says the topic is mirrored to
        # its end (until_end reads it) and Kafka's tools count the lag to it.
        reader = self._reader
        assert reader is not None
        positions, ends = self.stats.positions, reader.ends
        ahead = {t: ends[t] for t in reader.at_end if t in positions and ends.get(t, 0) > positions[t]}
        if ahead:
            self._pending = [(t, CopyBatch(data=b"", rows=0, dead=[], next_offset=end, messages=[]))
                             for t, end in ahead.items()]
            for t, end in ahead.items():
                self._read_to[t] = end
            self._submit()
            return
        advise = {t: positions[t] for t in reader.at_end if t in positions and positions[t] > self._advised.get(t, 0)}
        if advise:
            self._advised.update(advise)
            reader.commit_advisory(advise)

    def _mirrored(self) -> bool:
        """until_end: is every topic mirrored up to where its log ended when this sink found it?"""
        now = time.monotonic()
        if now < self._next_done_check or self._pending:
            return False
        self._next_done_check = now + _DONE_CHECK_EVERY_S
        targets = self._targets or {}
        rows = self._postgres(sink_owners.read, self._conn, targets)
        behind = [t for t, end in targets.items() if (rows[t].position if t in rows else 0) < end]
        return not behind

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
            Family("swarmlog_sink_topics", "gauge", "Topics this sink holds (its share of those its pattern "
                   "matches).", (), [((), len(positions))]),
            Family("swarmlog_sink_position", "gauge", "The next offset to mirror, committed in Postgres.",
                   ("topic",), [((t,), p) for t, p in positions.items()]),
            Family("swarmlog_sink_rows", "counter", "Events mirrored into Postgres by this process.", ("topic",),
                   [((t,), n) for t, n in topic_rows.items()]),
            Family("swarmlog_sink_dead_letters", "counter",
                   "Messages written to dead_letters by this process (undecodable, or refused by Postgres).",
                   ("topic",), [((t,), n) for t, n in topic_dead.items()]),
            Family("swarmlog_sink_transactions", "counter", "Postgres transactions committed.", (),
                   [((), s.transactions)]),
            Family("swarmlog_sink_handovers", "counter", "Topics the consumer group assigned to this sink, "
                   "revoked from it, or lost (taken without a revoke).", ("event",),
                   [((e,), n) for e, n in s.handovers.items()]),
            Family("swarmlog_sink_fenced", "counter", "Transactions rolled back because a topic's row in "
                   "sink_positions was not as this sink left it (another sink claimed the topic).", (),
                   [((), s.fenced)]),
        ]

    # -- the group: topics coming and going ----------------------------------------------------

    def _look(self, *, first: bool = False) -> None:
        """Match the broker's topics again and ask the group for them (new ones go to some sink of it)."""
        reader = self._reader
        assert reader is not None
        try:
            found = discover(self.settings, self.pattern, client=reader.consumer)
        except ServiceUnavailable as exc:
            if first:
                raise
            # The topics mirrored so far go on being read (the consumer says itself if the broker
            # is really gone); a stall of this process (a SIGSTOP, a paused VM) also times out a
            # request that was under way, and is no reason to stop.
            logger.warning("sink: could not list the broker's topics to look for new swarms (%s); looking again "
                           "in %.0f s", exc.detail, self.refresh_interval_s)
            return
        for name, partitions in found.refused.items():
            if name not in self._refused:
                self._refused.add(name)
                logger.warning("sink: topic %s matches %r but has %d partitions, so it is no swarm's log "
                               "(one partition is the swarm's total order): not mirrored", name,
                               self.pattern.pattern, partitions)
        # A topic the broker reports an error for (being created, deleted, leaderless) keeps its place.
        topics = found.topics | (found.unsettled & self._subscribed)
        gone = self._subscribed - topics
        if gone:
            logger.warning("sink: %d topic(s) gone from the broker, no longer mirrored: %s", len(gone),
                           ", ".join(sorted(gone)[:10]))
        new = sorted(topics - self._subscribed)
        if self._targets is not None:
            if new:
                try:
                    ends = stable_ends(admin_client(self.settings), new, bootstrap=self.settings.bootstrap_servers)
                except ServiceUnavailable as exc:
                    if first:
                        raise
                    logger.warning("sink: could not read where %d new topic(s) end (%s); looking again in %.0f s",
                                   len(new), exc.detail, self.refresh_interval_s)
                    return
                self._targets.update(ends)
            for t in gone:
                self._targets.pop(t, None)
        if reader.subscribe(topics) and new:
            logger.info("sink: %d new topic(s) for the group: %s%s", len(new), ", ".join(new[:10]),
                        " ..." if len(new) > 10 else "")
        self._subscribed = frozenset(topics)

    def assigned(self, topics: list[str]) -> dict[str, int]:
        """The group gave this sink ``topics``: claim them in Postgres, and read each from its position."""
        self._rebalanced = True  # see _retake
        if not topics or self._broken:
            return dict.fromkeys(topics, 0)
        # The connection is the db thread's until its transaction ends; and a fenced one is
        # recovered from (_recover) once the callback returns.
        self._settle()
        rows = self._postgres(sink_owners.claim, self._conn, owner=self.owner, topics=topics)
        positions = {t: rows[t].position for t in topics}
        self.stats.positions.update(positions)
        self._read_to.update(positions)
        self._taken.difference_update(topics)
        self.stats.handovers["assigned"] += len(topics)
        from_others = sorted({r.owner for r in rows.values() if r.owner not in (None, self.owner)})
        logger.info("sink: the group gave this sink %d topic(s), now %d: %s%s%s", len(topics),
                    len(self.stats.positions), ", ".join(sorted(topics)[:5]), " ..." if len(topics) > 5 else "",
                    f" (taken over from {', '.join(from_others[:3])})" if from_others else "")
        return positions

    def revoked(self, topics: list[str]) -> None:
        """The group moves ``topics`` to another sink once this returns: finish with them."""
        self._hand_over(topics, lost=False)

    def lost(self, topics: list[str]) -> None:
        """The group gave ``topics`` to others without a revoke (this sink's session ended)."""
        self._hand_over(topics, lost=True)

    def _hand_over(self, topics: list[str], *, lost: bool) -> None:
        gone = set(topics)
        if not gone:
            return
        self.stats.handovers["lost" if lost else "revoked"] += len(gone)
        if not self._broken:
            # The transaction in flight commits (or is fenced) before the topics change hands: its
            # rows are in before the next owner claims them, and the claim waits for its locks.
            self._settle()
            # Decoded, not written: dropped. The next owner reads them again from the position.
            self._pending = [(t, b) for t, b in self._pending if t not in gone]
            self._postgres(sink_owners.release, self._conn, owner=self.owner, topics=gone)
        if lost:
            logger.warning("sink: %d topic(s) lost (this sink's session in consumer group %s ended: it stalled, or "
                           "the broker could not hear it; the group gave them to other sinks): %s", len(gone),
                           self.group, ", ".join(sorted(gone)[:10]))
        elif not self._closing:
            logger.info("sink: %d topic(s) handed over to another sink of the group: %s%s", len(gone),
                        ", ".join(sorted(gone)[:5]), " ..." if len(gone) > 5 else "")
        for t in gone:
            self._taken.discard(t)
            self._builders.pop(t, None)
            self._read_to.pop(t, None)
            if not self._closing:
                self.stats.positions.pop(t, None)

    def _recover(self) -> None:
        """A transaction was fenced and rolled back: read every topic held again from its row as
        committed now; stop reading those another sink has claimed since."""
        fences, self._fences = self._fences, []
        self._pending = []
        held = list(self.stats.positions)
        rows = self._postgres(sink_owners.read, self._conn, held)
        mine: dict[str, int] = {}
        taken: dict[str, str | None] = {}
        for t in held:
            row = rows.get(t)
            if row is not None and row.owner == self.owner:
                mine[t] = row.position
            else:
                taken[t] = None if row is None else row.owner
        for f in fences:
            if f.topic in taken:
                logger.warning("sink: topic %s is now held by %s: this sink stops mirroring it (it rolled back its "
                               "transaction from offset %d) until the group assigns it again", f.topic,
                               taken[f.topic] or "no sink", f.expected)
            else:
                logger.warning("sink: the position of topic %s moved under this sink (expected %d, found %d: another "
                               "writer of the same topic, such as a one-topic sink?): reading on from %d", f.topic,
                               f.expected, f.found.position, f.found.position)
        if taken:
            reader = self._reader
            assert reader is not None
            reader.pause(taken)
            self._taken.update(taken)
            for t in taken:
                self.stats.positions.pop(t, None)
                self._builders.pop(t, None)
                self._read_to.pop(t, None)
            unowned = [t for t, o in taken.items() if o is None]
            if unowned:  # nobody holds them (an operator cleared the owner), and the group says: this sink
                self._retake(unowned)
        self._seek(mine)

    def _retake(self, topics: Collection[str] | None = None) -> None:
        """Claim again the topics another sink took while the group still assigns them to this one.

        Done after a rebalance: a sink that claimed a topic late (its session already over) has
        rejoined the group by then, and claims it again only if the group gives it to it.
        """
        reader = self._reader
        assert reader is not None
        candidates = set(self._taken) if topics is None else set(topics)
        self._taken -= candidates
        wanted = sorted(candidates & reader.assigned)
        if not wanted:
            return
        self._settle()
        if self._fences:  # the connection is free, but the positions moved: _recover reads them all
            self._taken.update(wanted)
            return
        rows = self._postgres(sink_owners.claim, self._conn, owner=self.owner, topics=wanted)
        positions = {t: rows[t].position for t in wanted}
        logger.info("sink: claimed %d topic(s) back (the group still assigns them to this sink): %s", len(wanted),
                    ", ".join(wanted[:10]))
        self._pending = [(t, b) for t, b in self._pending if t not in positions]
        self._seek(positions)

    def _seek(self, positions: dict[str, int]) -> None:
        reader = self._reader
        assert reader is not None
        self.stats.positions.update(positions)
        self._read_to.update(positions)
        reader.seek(positions)

    def _postgres(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call`` on the connection, its failure to reach Postgres as :class:`ServiceUnavailable`."""
        try:
            return call(*args, **kwargs)
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=_redact(self.settings.database_url),
                                     detail=str(exc).strip()) from None

    # -- one transaction (on the db thread) --------------------------------------------------

    def _write(self, conn: psycopg.Connection[Any], pending: list[tuple[str, CopyBatch]],
               expected: dict[str, int]) -> list[Fence]:
        """The batches in one transaction (:mod:`.pattern_writes`): [] once committed, else the
        fences that rolled it back."""
        done = self._writer.write(conn, pending, expected)
        if isinstance(done, list):
            return done
        s = self.stats
        s.positions.update(done.ends)
        s.transactions += 1
        for t, n in done.rows.items():
            s.rows += n
            s.topic_rows[t] = s.topic_rows.get(t, 0) + n
        for t, n in done.dead.items():
            if n:
                s.dead_letters += n
                s.topic_dead[t] = s.topic_dead.get(t, 0) + n
                logger.warning("sink: %d message(s) of %s dead-lettered (table dead_letters) before offset %d",
                               n, t, done.ends[t])
        self._just_written = done.ends
        return []
