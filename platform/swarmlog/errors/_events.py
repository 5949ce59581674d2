"""Events and schemas (:class:`EventError`): an event or a message that is not what the schemas and the log
protocol say it must be; beneath it :class:`SchemaError`, schemas that do not fit together or a message no
loaded schema reads (the CLI's exit 2)."""

from __future__ import annotations

from ._base import SwarmlogError

__all__ = ["EventError", "InvalidEvent", "InvalidCause", "DuplicateEventId", "UndecodableMessage",
           "TrailingBytesInValue", "RoutingHeaderMismatch", "SchemaError", "SchemaClash", "SchemaNotFound",
           "UnknownEventType"]


class EventError(SwarmlogError):
    """An event or a message is not what the schemas and the log protocol say it must be."""


class InvalidEvent(EventError):
    """An event failed validation before anything was written."""

    def __init__(self, *, event_type: str, field: str, problem: str) -> None:
        self.event_type = event_type
        self.field = field
        self.problem = problem
        super().__init__(f"invalid {event_type!r} event: field {field!r}: {problem}")


class InvalidCause(InvalidEvent):
    """An event's cause that cannot be one: negative, at or past the log's end (the writer's own offset
    is later still), or an offset that holds no event (a transaction marker, an aborted or deleted
    record, a message that is not an event). Refused before anything is written."""

    def __init__(self, *, event_type: str, cause: int, why: str) -> None:
        self.cause = cause
        self.why = why
        super().__init__(event_type=event_type, field="causes", problem=(
            f"cause {cause} {why}; a cause names an earlier event of the same log by its offset "
            f"(`swarmlog log` lists them)"))


class DuplicateEventId(InvalidEvent):
    """An event id this writer already appended: a second event with it would be a copy that every
    reader must name and skip. Refused before anything is written."""

    def __init__(self, *, event_type: str, event_id: str, offset: int | None) -> None:
        self.event_id = event_id
        self.offset = offset
        """Where the first event with the id is (None: still queued in this producer)."""
        where = f"at offset {offset}" if offset is not None else "(still queued, not acknowledged yet)"
        super().__init__(event_type=event_type, field="event_id", problem=(
            f"{event_id!r} was already appended by this log {where}: an event id names one event, and readers "
            f"skip a second one as a copy. Give the new event an id of its own; to finish an incomplete append, "
            f"append the same ids again after AppendIncomplete (written and queued ones are not sent twice)"))


class UndecodableMessage(EventError):
    """A message is not a swarmlog event (wrong framing, truncated, garbage)."""

    def __init__(self, *, offset: int | None, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        where = f"at offset {offset}" if offset is not None else ""
        super().__init__(f"undecodable message {where}: {reason}")


class TrailingBytesInValue(UndecodableMessage):
    """A message's value holds a whole event and then more bytes: a second event appended to it,
    or garbage. A value is exactly one event, so the message is not one: readers name it, the sink
    dead-letters it, and nothing vouches for the event alone while the log holds something else."""

    def __init__(self, *, offset: int | None, end: int, size: int) -> None:
        self.end = end
        """Where the event ends in the value (bytes)."""
        self.size = size
        """The value's size (bytes)."""
        super().__init__(offset=offset, reason=(
            f"the event ends at byte {end} of its {size}-byte value: {size - end} byte(s) follow it (a second "
            f"event or bytes appended to it). A message's value is exactly one event; fix the producer that "
            f"wrote it"))


class RoutingHeaderMismatch(EventError):
    """A message's routing header says something else than its envelope (its Avro body).

    Headers let readers skip a message without decoding it; a header that lies would route the
    message to the wrong agent, or to nobody. So wherever a header steers what happens, it is
    checked against the body, and a mismatch stops there instead of guessing.
    """

    def __init__(self, *, offset: int, header: str, header_value: str | None, envelope_value: str | None) -> None:
        self.offset = offset
        self.header = header
        self.header_value = header_value
        self.envelope_value = envelope_value
        said = "is absent" if header_value is None else f"says {header_value!r}"
        super().__init__(
            f"message at offset {offset}: header {header} {said}, but its envelope says {envelope_value!r}. "
            f"A producer wrote routing headers that do not match the event; fix that producer. "
            f"`swarmlog check causality` lists every such message; the sink dead-letters them")


class SchemaError(EventError):
    """The schema directory is inconsistent (duplicate fingerprints, bad names, bad Avro)."""


class SchemaClash(SchemaError):
    """One event type is defined in two schema directories (the built-ins and ``SWARMLOG_SCHEMA_PATH``)."""

    def __init__(self, *, event_type: str, first: str, second: str) -> None:
        self.event_type = event_type
        self.first = first
        self.second = second
        super().__init__(
            f"event type {event_type!r} is defined twice: {first} and {second}. An event type lives in one "
            f"schema directory, every version and its upcasters together; rename your type (e.g. "
            f"myteam.{event_type}) or drop that directory from SWARMLOG_SCHEMA_PATH")


class SchemaNotFound(SchemaError):
    """A message names a writer schema this process does not know.

    Where the message's routing headers say what it is (``sl.type``, ``sl.v``), the error says so:
    most often a writer already upgraded to a newer version than this reader (a rolling upgrade),
    which an upgraded reader reads — nothing is lost, the message waits in the log.
    """

    def __init__(self, *, offset: int | None, fingerprint: str, event_type: str | None = None,
                 version: int | None = None, known_version: int | None = None) -> None:
        self.offset = offset
        self.fingerprint = fingerprint
        self.event_type = event_type
        """What the message's ``sl.type`` header says it is (None: no header to go by)."""
        self.version = version
        """What its ``sl.v`` header says (None: none)."""
        self.known_version = known_version
        """The newest version of ``event_type`` this reader knows (None: not that type at all)."""
        where = f"at offset {offset} " if offset is not None else ""
        if event_type is not None and version is not None and known_version is not None and version > known_version:
            what = (f"; its routing headers say it is a newer {event_type} (v{version}) than this reader knows "
                    f"(up to v{known_version}): a writer was upgraded before this reader. Upgrade this reader (its "
                    f"swarmlog and schemas, or SWARMLOG_SCHEMA_PATH) to one that has {event_type} v{version}; the "
                    f"message stays in the log and is read then")
        elif event_type is not None and known_version is None:
            what = (f"; its routing headers say it is a {event_type}, an event type this reader does not know: "
                    f"add {event_type}'s schemas (SWARMLOG_SCHEMA_PATH)")
        elif event_type is not None:
            what = (f"; its routing headers say {event_type} v{version}, which this reader knows with another "
                    f"fingerprint: the writer's schema file differs from this reader's (a version edited after "
                    f"events were written with it?)")
        else:
            what = ("; deploy the schema that wrote it (built-in, or in a directory on SWARMLOG_SCHEMA_PATH: old "
                    "versions must stay there forever)")
        super().__init__(
            f"message {where}was written with schema fingerprint {fingerprint}, which no schema this "
            f"process loaded has{what}")


class UnknownEventType(SchemaError):
    def __init__(self, *, event_type: str, known: list[str]) -> None:
        self.event_type = event_type
        self.known = known
        super().__init__(
            f"no schema for event type {event_type!r}; add {event_type}/v1.avsc to a directory on "
            f"SWARMLOG_SCHEMA_PATH (known types: {', '.join(known) or 'none'})"
        )
