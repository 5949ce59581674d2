"""``swarmlog mirror verify``: the Postgres mirror compared with the log, row by row.

Nothing in the sink's exactly-once machinery notices a row changed after it was
written (an ``UPDATE`` of a payload, a deleted row, a row inserted by hand). This
check does: it reads the log up to the sink's position, builds for each batch the
rows the sink would write now — with the sink's own :class:`RowBuilder`, so both
sides are encoded identically — COPYs them into a temporary table, and lets
Postgres compare them with ``events`` (jsonb compared as values, not as text). Each
row that differs (and in which columns), is missing, or is extra is named by its
offset; so are dead letters that differ from the message at their offset.

The range is what the sink's position accounts for: rows past it are extra (the
sink never wrote them), and log events past it are "not mirrored yet", not missing.
With a token (``--token``), the log itself is first checked against the token, so
the mirror is compared with a history the token vouches for; the mirror holds
decoded rows, not the log's bytes, so it cannot be checked against a token alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from swarmlog.kafka.reader import LogReader, watermarks
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_rows import COPY_SIGNATURE, COPY_TRAILER, EVENT_COLUMNS, RowBuilder
from .postgres_sink import _redact, connect

__all__ = ["MirrorCheck", "RowProblem", "verify_mirror"]

logger = logging.getLogger(__name__)

_COMPARED = [c for c in EVENT_COLUMNS if c not in ("topic", "seq")]
_TEMP = sql.Identifier("mirror_verify_expected")
_CREATE_TEMP = sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE events)").format(_TEMP)
_COPY_TEMP = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(
    _TEMP, sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)))
_INSERT_TEMP = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
    _TEMP, sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)),
    sql.SQL(", ").join(sql.Placeholder() * len(EVENT_COLUMNS)))
_DIFFERING_COLUMNS = sql.SQL(", ").join(
    sql.SQL("CASE WHEN e.{c} IS DISTINCT FROM m.{c} THEN {name} END").format(c=sql.Identifier(c),
                                                                           name=sql.Literal(c))
    for c in _COMPARED)
# Rows of one range of offsets, on both sides, that are not identical: FULL JOIN on the offset.
_COMPARE = sql.SQL("""
    SELECT coalesce(e.seq, m.seq), e.seq IS NULL, m.seq IS NULL, array_remove(ARRAY[{cols}], NULL)
      FROM {temp} e
      FULL JOIN (SELECT * FROM events WHERE topic = %(topic)s AND seq >= %(lo)s AND seq < %(hi)s) m
        ON e.seq = m.seq
     WHERE e.seq IS NULL OR m.seq IS NULL OR ({e_cols}) IS DISTINCT FROM ({m_cols})
     ORDER BY 1
""").format(cols=_DIFFERING_COLUMNS, temp=_TEMP,
            e_cols=sql.SQL(", ").join(sql.SQL("e.{}").format(sql.Identifier(c)) for c in _COMPARED),
            m_cols=sql.SQL(", ").join(sql.SQL("m.{}").format(sql.Identifier(c)) for c in _COMPARED))


@dataclass(frozen=True, slots=True)
class RowProblem:
    """One row of the mirror that is not what the log says."""

    offset: int
    problem: str
    """``differs``, ``missing``, ``extra``, ``dead letter differs``, ``dead letter missing``,
    ``extra dead letter``."""
    columns: tuple[str, ...] = ()
    """With ``differs``: the columns whose values differ."""

    def __str__(self) -> str:
        cols = f" ({', '.join(self.columns)})" if self.columns else ""
        return f"offset {self.offset}: {self.problem}{cols}"


@dataclass(slots=True)
class MirrorCheck:
    topic: str
    log_start: int
    log_end: int
    position: int
    """The sink's position: the mirror accounts for offsets before it."""
    rows_checked: int = 0
    problems: list[RowProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "topic": self.topic, "log_start": self.log_start, "log_end": self.log_end,
                "sink_position": self.position, "rows_checked": self.rows_checked,
                "problems": [{"offset": p.offset, "problem": p.problem, "columns": list(p.columns)}
                             for p in self.problems]}


def verify_mirror(*, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                  batch_size: int = 5000) -> MirrorCheck:
    """Compare the mirror's rows of ``topic`` with the log, up to the sink's position."""
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    rows = RowBuilder(topic=topic, decoder=Decoder(registry))
    with connect(settings) as conn, LogReader(settings=settings, topic=topic) as reader:
        require_schema(conn, database=_redact(settings.database_url))
        found = conn.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (topic,)).fetchone()
        position = int(found[0]) if found else 0
        low, high = watermarks(settings, topic)
        check = MirrorCheck(topic=topic, log_start=low, log_end=high, position=position)
        conn.execute(_CREATE_TEMP)
        reader.assign(low)
        lo = low
        for batch in reader.batches(end=position, batch_size=batch_size):
            hi = batch[-1].offset() + 1
            _compare_batch(conn, rows, topic, batch, lo, hi, check)
            lo = hi
        # Whatever the mirror holds outside the log's range that its position accounts for.
        for (seq,) in conn.execute("SELECT seq FROM events WHERE topic = %s AND (seq < %s OR seq >= %s) ORDER BY seq",
                                   (topic, low, lo)):
            check.problems.append(RowProblem(offset=seq, problem="extra"))
        for (seq,) in conn.execute("SELECT seq FROM dead_letters WHERE topic = %s AND (seq < %s OR seq >= %s) "
                                   "ORDER BY seq", (topic, low, lo)):
            check.problems.append(RowProblem(offset=seq, problem="extra dead letter"))
    check.problems.sort(key=lambda p: p.offset)
    return check


def _compare_batch(conn: psycopg.Connection[Any], rows: RowBuilder, topic: str, batch: list[Any], lo: int, hi: int,
                   check: MirrorCheck) -> None:
    copy = rows.build_copy(batch)
    dead = {d[1]: d for d in copy.dead}
    with conn.transaction():
        conn.execute(sql.SQL("TRUNCATE {}").format(_TEMP))
        try:
            with conn.transaction(), conn.cursor() as cur, cur.copy(_COPY_TEMP) as c:
                c.write(COPY_SIGNATURE + copy.data + COPY_TRAILER)
        except psycopg.DataError:
            # A row Postgres refuses: the sink dead-lettered it (its row-by-row path); do the same.
            built, _ = rows.build(copy.messages)
            for row in built:
                try:
                    with conn.transaction():
                        conn.execute(_INSERT_TEMP, row)
                except psycopg.DataError:
                    dead[row[1]] = (topic, row[1], "", next(m.value() for m in batch if m.offset() == row[1]))
        for seq, extra_here, missing_here, columns in conn.execute(_COMPARE, {"topic": topic, "lo": lo, "hi": hi}):
            if extra_here:
                check.problems.append(RowProblem(offset=seq, problem="extra"))
            elif missing_here:
                check.problems.append(RowProblem(offset=seq, problem="missing"))
            else:
                check.problems.append(RowProblem(offset=seq, problem="differs", columns=tuple(columns)))
        letters = dict(conn.execute("SELECT seq, raw FROM dead_letters WHERE topic = %s AND seq >= %s AND seq < %s",
                                    (topic, lo, hi)).fetchall())
    for seq, d in dead.items():
        if seq not in letters:
            check.problems.append(RowProblem(offset=seq, problem="dead letter missing"))
        elif bytes(letters[seq] or b"") != bytes(d[3] or b""):
            check.problems.append(RowProblem(offset=seq, problem="dead letter differs", columns=("raw",)))
    for seq in letters:
        if seq not in dead:
            check.problems.append(RowProblem(offset=seq, problem="extra dead letter"))
    check.rows_checked += copy.rows
