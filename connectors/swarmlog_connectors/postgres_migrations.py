"""The mirror's schema, in versions: ``swarmlog mirror migrate`` applies them, the sink only checks.

Why a separate step: creating tables and indexes needs a role that owns them; mirroring
needs only ``INSERT`` into them. Run as the database owner (a Helm hook Job, an operator,
CI), :func:`migrate` applies every version the database lacks and grants two group roles
(``NOLOGIN``; give them to login roles with ``GRANT swarmlog_sink TO <user>``):

* **the sink's** (:data:`WRITER_ROLE`): ``INSERT`` on ``events`` and ``dead_letters``,
  ``SELECT, INSERT, UPDATE`` on ``sink_positions`` (the position row is locked with
  ``SELECT ... FOR UPDATE``), ``INSERT`` on ``replay_reports`` (the replay Job publishes
  there with the same credentials; and ``SELECT`` of its ``id``, which the insert returns),
  ``SELECT`` on the version table. Nothing else: it cannot create, alter or drop anything,
  nor read the mirror.
* **readers'** (:data:`READER_ROLE`): ``SELECT`` on the mirror's tables and the view ``llm_calls``
  (``psql``, :class:`swarmlog_connectors.mirror.Mirror`, dashboards, ``swarmlog ui``).

The sink refuses to run against a database whose schema is older than the one it writes
(:class:`~swarmlog.errors.MirrorNotMigrated`, saying which command to run).

Versions are the files ``migrations/NNNN_<what>.sql``, applied in order, each once, all
pending ones in one transaction (Postgres DDL is transactional: a failed migration leaves
the database as it was). ``swarmlog_migrations`` records which ran. Numbers are handed out
to changes while they are made, so they may skip one that has not landed yet: each version
is applied whenever the database lacks it, and the schema is "at version N" once every
version up to N that this package knows is applied.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from swarmlog.errors import MirrorMigrationFailed, MirrorNotMigrated

__all__ = ["Migration", "READER_ROLE", "SCHEMA_VERSION", "VERSION_TABLE", "WRITER_ROLE", "migrate", "migrations",
           "require_schema", "schema_version"]

logger = logging.getLogger(__name__)

WRITER_ROLE = "swarmlog_sink"
"""The group role the sink's login role needs (``GRANT swarmlog_sink TO <user>``)."""
READER_ROLE = "swarmlog_reader"
"""The group role for querying the mirror."""

VERSION_TABLE = "swarmlog_migrations"
# Serialises concurrent migrations of one database (two Helm releases upgrading at once).
_LOCK_KEY = 0x5357_4C47  # "SWLG"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every version of the mirror's schema, in order."""
    found = []
    for entry in resources.files("swarmlog_connectors").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(version=int(match[1]), name=match[2], sql=entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions) or not versions or versions[0] != 1:
        raise MirrorMigrationFailed(detail=f"migrations must be numbered from 1, each number once: {versions}")
    return found


SCHEMA_VERSION = migrations()[-1].version
"""The schema version this sink writes: the newest migration."""


def migrate(conn: psycopg.Connection[Any], *, writer_role: str = WRITER_ROLE,
            reader_role: str = READER_ROLE) -> list[Migration]:
    """Apply the versions the database lacks and (re)grant the roles; return those applied.

    Idempotent: a second run applies nothing and grants what is already granted.
    """
    applied: list[Migration] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, name text NOT NULL, "
                                 "applied_at timestamptz NOT NULL DEFAULT now())").format(
                sql.Identifier(VERSION_TABLE)))
            done = {int(v) for (v,) in conn.execute(
                sql.SQL("SELECT version FROM {}").format(sql.Identifier(VERSION_TABLE))).fetchall()}
            for m in migrations():
                if m.version in done:
                    continue
                logger.info("mirror schema: applying version %d (%s)", m.version, m.name)
                conn.execute(m.sql.encode())  # bytes: a script of several statements, no parameters
                conn.execute(sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(
                    sql.Identifier(VERSION_TABLE)), (m.version, m.name))
                applied.append(m)
            for role in (writer_role, reader_role):
                _ensure_role(conn, role)
            _grant(conn, writer_role=writer_role, reader_role=reader_role)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise MirrorMigrationFailed(detail=f"{str(exc).strip()}; run `swarmlog mirror migrate` as the database "
                                           f"owner (a role that may create tables and roles)") from None
    return applied


def _ensure_role(conn: psycopg.Connection[Any], role: str) -> None:
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
        return
    try:
        with conn.transaction():  # a savepoint: another database's migration may create it first
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        logger.info("mirror schema: created role %s", role)
    except psycopg.errors.DuplicateObject:
        pass


def _grant(conn: psycopg.Connection[Any], *, writer_role: str, reader_role: str) -> None:
    writer, reader = sql.Identifier(writer_role), sql.Identifier(reader_role)
    for statement in (
        "GRANT SELECT ON {versions} TO {writer}, {reader}",
        "GRANT INSERT ON events, dead_letters TO {writer}",
        "GRANT SELECT, INSERT, UPDATE ON sink_positions TO {writer}",
        "GRANT INSERT, SELECT (id) ON replay_reports TO {writer}",  # INSERT ... RETURNING id reads it
        "GRANT USAGE ON SEQUENCE replay_reports_id_seq TO {writer}",  # its bigserial id
        "GRANT SELECT, INSERT, UPDATE ON replay_tokens TO {writer}",  # token create --save replaces a token
        "GRANT SELECT ON events, dead_letters, sink_positions, replay_reports, replay_tokens TO {reader}",
        "GRANT SELECT ON llm_calls TO {reader}",  # a view over events (0005): model, tokens, latency
    ):
        conn.execute(sql.SQL(statement).format(versions=sql.Identifier(VERSION_TABLE), writer=writer, reader=reader))


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The version up to which every known version is applied (0: none, or not migrated yet); past
    :data:`SCHEMA_VERSION`, the newest applied (a newer package migrated the database)."""
    try:
        with conn.transaction():
            applied = {int(v) for (v,) in conn.execute(
                sql.SQL("SELECT version FROM {}").format(sql.Identifier(VERSION_TABLE))).fetchall()}
    except psycopg.errors.UndefinedTable:
        return 0
    return complete_up_to(applied)


def complete_up_to(applied: set[int]) -> int:
    """The version up to which every version this package knows is in ``applied`` (0: not even the
    first); past :data:`SCHEMA_VERSION`, the newest of ``applied``."""
    found = 0
    for m in migrations():
        if m.version not in applied:
            return found
        found = m.version
    return max(applied, default=found)


def require_schema(conn: psycopg.Connection[Any], *, database: str) -> int:
    """The database's schema version; :class:`MirrorNotMigrated` if older than this sink's."""
    found = schema_version(conn)
    if found < SCHEMA_VERSION:
        raise MirrorNotMigrated(database=database, found=found, required=SCHEMA_VERSION)
    if found > SCHEMA_VERSION:
        logger.warning("the mirror's schema is version %d, newer than this sink's %d: upgrade the sink",
                       found, SCHEMA_VERSION)
    return found
