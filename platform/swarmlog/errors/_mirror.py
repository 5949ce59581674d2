"""The Postgres mirror (:class:`MirrorError`): unreachable, not migrated, not permitted, or behind the log.
psycopg's errors become these where the mirror is written and read (:mod:`swarmlog_connectors`)."""

from __future__ import annotations

from ._base import Retriable, ServiceUnavailable, SwarmlogError

__all__ = ["MirrorError", "PostgresUnavailable", "DatabasePermissionDenied", "MirrorNotMigrated",
           "MirrorMigrationFailed", "MirrorBehind"]


class MirrorError(SwarmlogError):
    """The Postgres mirror: unreachable, not migrated, not permitted, or behind the log."""


class PostgresUnavailable(MirrorError, ServiceUnavailable, Retriable):
    """Postgres (the mirror) could not be reached."""

    def __init__(self, *, address: str, detail: str, hint: str | None = None) -> None:
        super().__init__(service="Postgres", address=address, detail=detail, hint=hint)


class DatabasePermissionDenied(MirrorError):
    """The Postgres role may not do what the mirror needs (read its position, write rows)."""

    def __init__(self, *, role: str, database: str, action: str, detail: str) -> None:
        self.role = role
        self.database = database
        self.action = action
        self.detail = detail
        super().__init__(
            f"Postgres role {role!r} may not {action} in database {database!r} ({detail}). The sink needs only "
            f"the group role `swarmlog mirror migrate` creates: GRANT swarmlog_sink TO {role} (the migration, "
            f"run as the database owner, makes the tables and grants that role what mirroring needs).")


class MirrorNotMigrated(MirrorError):
    """The mirror's tables are missing or older than the sink writes: migrations are a separate step."""

    def __init__(self, *, database: str, found: int, required: int) -> None:
        self.database = database
        self.found = found
        self.required = required
        super().__init__(
            f"the mirror at {database} has schema version {found}, the sink needs {required}. Run "
            f"`swarmlog mirror migrate` as the database owner (on Kubernetes the chart's migrate hook Job does), "
            f"then start the sink again; the sink itself needs only the swarmlog_sink role")


class MirrorMigrationFailed(MirrorError):
    def __init__(self, *, detail: str) -> None:
        self.detail = detail
        super().__init__(f"migrating the mirror's schema failed: {detail}")


class MirrorBehind(MirrorError, Retriable):
    """A reader that must see its own writes waited for the Postgres mirror in vain (the sink is
    stopped, or far behind): LangGraph's checkpointer (:mod:`swarmlog.integrations.langgraph`)."""

    def __init__(self, *, topic: str, written: int, mirrored: int, waited_s: float) -> None:
        self.topic = topic
        self.written = written
        self.mirrored = mirrored
        self.waited_s = waited_s
        super().__init__(f"the mirror of topic {topic!r} has not reached offset {written} (this process's last "
                         f"write) after {waited_s:g} s: it is at {mirrored}. Is `swarmlog sink` running for this "
                         f"topic (`swarmlog mirror status`, the sink's /readyz)? The write itself is in the log")
