"""Which sink of a group may write a topic's rows: claims on ``sink_positions`` rows, and the fence.

Sinks of one pattern split its topics through a Kafka consumer group
(:mod:`.pattern_sink`); Kafka decides which sink *should* mirror a topic, this module makes
sure only that one *can*. Each topic's row of ``sink_positions`` carries, beside the
position, the ``owner``: the sink that claimed the topic last (migration 0007).

* **Claim** (:func:`claim`), when the group assigns topics to a sink: lock their rows, set
  ``owner`` to the sink, read the positions, COMMIT. The lock waits for a transaction of the
  previous owner that holds the rows (one it had in flight when it lost the topic), so the
  position read is the one that transaction left, committed or rolled back: never a
  position that is about to move.
* **The fence** (:func:`fenced`), first thing in every transaction that writes rows: lock
  the rows of its topics and check that each still names this sink *and* is at the
  position it expects. Anything else rolls the whole transaction back. Once another sink's
  claim has committed, the sink that lost the topic fails this check on every later
  transaction: it can never commit the topic again, whatever it still has in flight or
  decoded. The position check alone would already keep the mirror exact (rows are written
  only at the position where the previous ones ended); the owner makes a takeover final
  instead of a race that the slower sink loses by rolling back.
* **Release** (:func:`release`), when the group takes topics away from a sink that is still
  running: ``owner`` back to NULL, only where it still names that sink. Not needed for
  correctness (the next claim takes the row whoever owns it: the group is the judge of who
  is alive); it lets ``SELECT owner, count(*) FROM sink_positions GROUP BY owner`` show
  what each sink holds.

Rows are always locked in topic order (``ORDER BY topic FOR UPDATE``): a claim of one sink
and a transaction of another that share rows then wait for each other, never deadlock.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = ["Fence", "Row", "claim", "fenced", "read", "release"]

logger = logging.getLogger(__name__)

# The rows exist before anything locks them: FOR UPDATE has no row to lock for a topic
# without one, and two sinks would both "insert" position 0 and race.
_CREATE = ("INSERT INTO sink_positions (topic, next_offset) SELECT t, 0 FROM unnest(%s::text[]) AS t "
           "ON CONFLICT DO NOTHING")
_LOCK = "SELECT topic, next_offset, owner FROM sink_positions WHERE topic = ANY(%s) ORDER BY topic FOR UPDATE"
_CLAIM = "UPDATE sink_positions SET owner = %s, claimed_at = now() WHERE topic = ANY(%s)"
_RELEASE = ("UPDATE sink_positions SET owner = NULL WHERE topic IN "
            "(SELECT topic FROM sink_positions WHERE topic = ANY(%s) AND owner = %s ORDER BY topic FOR UPDATE)")
_READ = "SELECT topic, next_offset, owner FROM sink_positions WHERE topic = ANY(%s)"


@dataclass(frozen=True, slots=True)
class Row:
    """A topic's row of ``sink_positions``: where its mirror ends, and which sink holds it."""

    position: int
    owner: str | None


@dataclass(frozen=True, slots=True)
class Fence:
    """A topic a transaction may not write: its row moved away from what the sink expected."""

    topic: str
    expected: int
    """The position the transaction was to write from."""
    found: Row


def claim(conn: psycopg.Connection[Any], *, owner: str, topics: Collection[str]) -> dict[str, Row]:
    """Make ``owner`` the sink that holds ``topics`` (creating their rows at 0 if new); their rows
    as they were before the claim (the position to resume at, and the previous owner). Commits."""
    ordered = sorted(topics)
    if not ordered:
        return {}
    with conn.cursor() as cur:
        cur.execute(_CREATE, (ordered,))
        cur.execute(_LOCK, (ordered,))
        before = {t: Row(position=int(p), owner=o) for t, p, o in cur.fetchall()}
        cur.execute(_CLAIM, (owner, ordered))
    conn.commit()
    return before


def release(conn: psycopg.Connection[Any], *, owner: str, topics: Collection[str]) -> None:
    """``topics`` no longer held by ``owner`` (only those it still holds: another may have claimed them). Commits."""
    if topics:
        conn.execute(_RELEASE, (sorted(topics), owner))
    conn.commit()


def read(conn: psycopg.Connection[Any], topics: Collection[str]) -> dict[str, Row]:
    """The rows of ``topics`` as committed now. Commits (ends the read's transaction)."""
    found = {t: Row(position=int(p), owner=o) for t, p, o in conn.execute(_READ, (sorted(topics),)).fetchall()}
    conn.commit()
    return found


def fenced(cur: psycopg.Cursor[Any], *, owner: str | None, expected: Mapping[str, int]) -> list[Fence]:
    """Lock the rows of ``expected``'s topics, in topic order, for the rest of the transaction; the
    topics whose row is not at its expected position or (``owner`` given) not held by ``owner``."""
    cur.execute(_LOCK, (sorted(expected),))
    rows = {t: Row(position=int(p), owner=o) for t, p, o in cur.fetchall()}
    out = []
    for t, at in expected.items():
        row = rows.get(t, Row(position=0, owner=None))
        if row.position != at or (owner is not None and row.owner != owner):
            out.append(Fence(topic=t, expected=at, found=row))
    return out
