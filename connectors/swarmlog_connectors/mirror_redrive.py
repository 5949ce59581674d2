"""``swarmlog mirror redrive``: dead letters that read now, moved into the mirror's events.

Why: in a rolling upgrade the writers go first. A sink still on the older schemas cannot read an
event a newer writer wrote (``SchemaNotFound``: "a newer agent.message (v4) than this reader
knows"), so it dead-letters it — kept whole, the mirror going on. Once the sink (or whoever runs
this) knows the newer schema, each such letter is an event like any other: redrive reads the log
at every dead-lettered offset, builds the row the sink would write now (the sink's own
:class:`~swarmlog_connectors.postgres_rows.RowBuilder`), and in one transaction per letter inserts
it into ``events`` and deletes the letter. The log is the truth: a letter whose offset the log no
longer holds (deleted since) is rebuilt from the bytes the letter kept, without its append time.

What still does not read stays a dead letter, with the reason it fails now. A letter whose event
id the mirror already has (a repeated id) stays one by design: an event id names one event.
Safe beside a running sink: the letters' offsets lie behind its position, which this never moves.
After a redrive, ``swarmlog mirror verify`` finds the rows as the sink would have written them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg

from swarmlog.kafka.backend import KafkaBackend
from swarmlog.log.base import messages_at
from swarmlog.log.memory import MemoryMessage
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .postgres_migrations import require_schema
from .postgres_rows import RowBuilder
from .postgres_sink import _INSERT_EVENT, ROW_REFUSALS, _redact, connect, denied, refused_row

logger = logging.getLogger(__name__)

__all__ = ["Redrive", "redrive"]


@dataclass(slots=True)
class Redrive:
    """What a redrive did with each of a topic's dead letters."""

    topic: str
    moved: list[int] = field(default_factory=list)
    """Offsets whose letter is now an event row."""
    kept: dict[int, str] = field(default_factory=dict)
    """Offset -> why its letter still does not read."""

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "moved": self.moved, "kept": [{"offset": o, "error": e}
                                                                   for o, e in sorted(self.kept.items())]}


def redrive(*, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None) -> Redrive:
    """Move every dead letter of ``topic`` that reads now into ``events``; keep the others."""
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    rows = RowBuilder(topic=topic, decoder=Decoder(registry))
    result = Redrive(topic=topic)
    with connect(settings) as conn:
        require_schema(conn, database=_redact(settings.database_url))
        try:
            letters = {int(seq): (raw, key, keys, values) for seq, raw, key, keys, values in conn.execute(
                "SELECT seq, raw, key, header_keys, header_values FROM dead_letters WHERE topic = %s ORDER BY seq",
                (topic,)).fetchall()}
        except psycopg.errors.InsufficientPrivilege as exc:
            raise denied(conn, "read the dead letters", exc) from None
        if not letters:
            return result
        messages = _from_the_log(settings, topic, letters)
        conn.autocommit = False
        for seq in sorted(letters):
            message = messages.get(seq) or _from_the_letter(seq, *letters[seq])
            built, dead = rows.build([message])
            if dead:
                result.kept[seq] = dead[0][2]
                continue
            try:
                with conn.cursor() as cur:
                    try:
                        with conn.transaction():  # a savepoint: a repeated id keeps its letter
                            cur.execute(_INSERT_EVENT, built[0])
                    except ROW_REFUSALS as exc:
                        result.kept[seq] = refused_row(cur, topic, message, built[0], exc)[2]
                        conn.rollback()
                        continue
                    cur.execute("DELETE FROM dead_letters WHERE topic = %s AND seq = %s", (topic, seq))
                conn.commit()
            except psycopg.errors.InsufficientPrivilege as exc:
                conn.rollback()
                raise denied(conn, "move a dead letter into the mirror's events", exc) from None
            result.moved.append(seq)
    logger.info("mirror redrive of %s: %d dead letter(s) moved into events, %d kept", topic, len(result.moved),
                len(result.kept))
    return result


def _from_the_log(settings: Settings, topic: str, letters: dict[int, Any]) -> dict[int, Any]:
    """The log's messages at the dead-lettered offsets it still holds (its bytes are the truth)."""
    backend = KafkaBackend(settings)
    try:
        return messages_at(backend, topic, letters)
    finally:
        backend.close()


def _from_the_letter(seq: int, raw: Any, key: Any, keys: list[Any], values: list[Any]) -> Any:
    """A letter's own bytes as a message (its offset is gone from the log): no append time."""
    headers: Any = [(bytes(k).decode("utf-8", "surrogateescape"), None if v is None else bytes(v))
               for k, v in zip(keys, values, strict=True)]
    return _Untimed(seq, None if raw is None else bytes(raw), None if key is None else bytes(key), headers or None, 0)


class _Untimed(MemoryMessage):
    __slots__ = ()

    def timestamp(self) -> tuple[int, int]:
        return 0, 0  # TIMESTAMP_NOT_AVAILABLE: logged_at NULL
