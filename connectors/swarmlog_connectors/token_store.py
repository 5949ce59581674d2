"""Replay tokens kept beside the log, in the mirror's database: ``token create --save``, ``token list``.

A table (``replay_tokens``) rather than a topic of their own: a token is a document
to look up by its id and to list by topic and range, which is what a table is for,
and a token of a long log (one checkpoint per K events) can outgrow a Kafka
message. Where a token is kept does not make it trustworthy — whoever can rewrite
the log may rewrite this table too — its signature does (``SWARMLOG_TOKEN_KEY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from swarmlog.errors import InvalidToken
from swarmlog.settings import Settings
from swarmlog.token import ReplayTokenV2, parse_token

from .postgres_migrations import require_schema
from .postgres_sink import _redact, connect

__all__ = ["SavedToken", "list_tokens", "load_saved", "save_token"]


@dataclass(frozen=True, slots=True)
class SavedToken:
    token_id: str
    topic: str
    version: int
    start_offset: int
    end_offset: int
    events: int
    chain_hash: str
    signed: bool
    saved_at: datetime


def save_token(settings: Settings, token: ReplayTokenV2) -> str:
    """Keep ``token``; its id. Saving the same token again (signed now, say) replaces it."""
    with connect(settings) as conn:
        require_schema(conn, database=_redact(settings.database_url))
        conn.execute(
            "INSERT INTO replay_tokens (token_id, topic, version, start_offset, end_offset, events, chain_hash, "
            "signed, body) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT (token_id) DO UPDATE "
            "SET signed = EXCLUDED.signed, body = EXCLUDED.body, saved_at = now()",
            (token.token_id, token.topic, token.version, token.start_offset, token.end_offset, token.events,
             token.chain_hash, token.signature is not None, json.dumps(token.to_json())))
    return token.token_id


def list_tokens(settings: Settings, *, topic: str | None = None) -> list[SavedToken]:
    with connect(settings) as conn:
        require_schema(conn, database=_redact(settings.database_url))
        rows = conn.execute(
            "SELECT token_id, topic, version, start_offset, end_offset, events, chain_hash, signed, saved_at "
            "FROM replay_tokens WHERE %(topic)s::text IS NULL OR topic = %(topic)s ORDER BY topic, end_offset, "
            "saved_at", {"topic": topic}).fetchall()
    return [SavedToken(*row) for row in rows]


def load_saved(settings: Settings, token_id: str) -> ReplayTokenV2:
    """The saved token whose id is (or starts with) ``token_id``."""
    with connect(settings) as conn:
        require_schema(conn, database=_redact(settings.database_url))
        rows = conn.execute("SELECT token_id, body FROM replay_tokens WHERE starts_with(token_id, %s)",
                            (token_id,)).fetchall()
    source = f"saved:{token_id}"
    if not rows:
        raise InvalidToken(source=source, problem="no saved token has this id (`swarmlog token list` shows them)")
    if len(rows) > 1:
        raise InvalidToken(source=source, problem=f"{len(rows)} saved tokens start with this id: give more of it")
    token = parse_token(rows[0][1], source=source)
    if not isinstance(token, ReplayTokenV2):
        raise InvalidToken(source=source, problem="not a version 2 token")
    return token
