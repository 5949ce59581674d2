"""One transaction of the many-topic sink: batches of many topics in, every position advanced, or nothing.

:class:`TopicsWriter` writes what :mod:`.pattern_sink` decoded, on its db thread: it fences
the transaction first (:func:`.sink_owners.fenced`: each topic's row still names this sink
and is at the position the batches start from), then COPYs the rows of every topic in one
stream, writes the dead letters, advances each topic's position to where its last batch
ends, and COMMITs. A row Postgres refuses (jsonb has no ``\\u0000``) sends the transaction
round again message by message, each in a savepoint, the refused ones dead-lettered, as
:mod:`.postgres_sink` does for one topic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from swarmlog.errors import PostgresUnavailable
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry

from . import sink_owners
from .postgres_rows import COPY_SIGNATURE, COPY_TRAILER, CopyBatch, RowBuilder
from .postgres_sink import _COPY_EVENTS, _INSERT_DEAD, _INSERT_EVENT, ROW_REFUSALS, refused_one_by_one, refused_row
from .sink_owners import Fence

__all__ = ["TopicsWriter", "Written"]

_SET_POSITIONS = ("UPDATE sink_positions AS p SET next_offset = v.n, updated_at = now() "
                  "FROM unnest(%s::text[], %s::bigint[]) AS v(t, n) WHERE p.topic = v.t")

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Written:
    """A committed transaction, per topic: its new position, rows and dead letters."""

    ends: dict[str, int]
    rows: dict[str, int]
    dead: dict[str, int]


class TopicsWriter:
    """Writes the transactions of the sink named ``owner`` into the mirror at ``database`` (for errors)."""

    def __init__(self, *, owner: str, registry: SchemaRegistry, database: str) -> None:
        self.owner = owner
        self.registry = registry
        self.database = database

    def write(self, conn: psycopg.Connection[Any], pending: list[tuple[str, CopyBatch]],
              expected: dict[str, int]) -> Written | list[Fence]:
        """``pending`` (in offset order per topic) in one transaction from the positions ``expected``:
        what it committed, or the fences that rolled it back."""
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
                fences = sink_owners.fenced(cur, owner=self.owner, expected=expected)
                if fences:
                    conn.rollback()
                    return fences
                if any(rows.values()):
                    with cur.copy(_COPY_EVENTS) as copy:
                        copy.write(b"".join([COPY_SIGNATURE, *(b.data for _, b in pending), COPY_TRAILER]))
                if dead:
                    cur.executemany(_INSERT_DEAD, dead)
                cur.execute(_SET_POSITIONS, (topics, [ends[t] for t in topics]))
            conn.commit()
        except ROW_REFUSALS as exc:
            # A row Postgres refuses (bad jsonb text), or a second event with an id the topic's mirror has
            # (events_by_event_id): the transaction again, row by row, as postgres_sink does.
            if not refused_one_by_one(exc):
                raise
            conn.rollback()
            return self._slowly(conn, pending, expected, topics, ends)
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(address=self.database, detail=str(exc).strip()) from None
        return Written(ends=ends, rows=rows, dead=dead_count)

    def _slowly(self, conn: psycopg.Connection[Any], pending: list[tuple[str, CopyBatch]], expected: dict[str, int],
                topics: list[str], ends: dict[str, int]) -> Written | list[Fence]:
        """Each message in a savepoint."""
        rows: dict[str, int] = {}
        dead_count: dict[str, int] = {}
        with conn.cursor() as cur:
            fences = sink_owners.fenced(cur, owner=self.owner, expected=expected)
            if fences:
                conn.rollback()
                return fences
            for t, b in pending:
                # Its own RowBuilder: this runs on the db thread while the main one decodes.
                built, dead = RowBuilder(topic=t, decoder=Decoder(self.registry)).build(b.messages)
                by_offset = {m.offset(): m for m in b.messages}
                for row in built:
                    try:
                        with conn.transaction():  # a savepoint
                            cur.execute(_INSERT_EVENT, row)
                        rows[t] = rows.get(t, 0) + 1
                    except ROW_REFUSALS as exc:
                        dead.append(refused_row(cur, t, by_offset[row[1]], row, exc))
                for d in dead:
                    cur.execute(_INSERT_DEAD, d)
                dead_count[t] = dead_count.get(t, 0) + len(dead)
            cur.execute(_SET_POSITIONS, (topics, [ends[t] for t in topics]))
        conn.commit()
        return Written(ends=ends, rows=rows, dead=dead_count)
