"""Turning log messages into rows of the Postgres mirror (pure, no I/O).

The same rows in two shapes: :meth:`RowBuilder.build_copy` encodes a whole batch
as one binary ``COPY`` stream (the sink's hot path), :meth:`RowBuilder.build`
gives Python tuples (``INSERT`` on the sink's row-by-row slow path).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_json

from swarmlog.errors import SwarmlogError
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import EventSchema

__all__ = ["COPY_SIGNATURE", "COPY_TRAILER", "CopyBatch", "DEAD_LETTER_COLUMNS", "EVENT_COLUMNS", "RowBuilder",
           "array_literal", "dead_letter", "jsonb_text", "safe_text"]

EVENT_COLUMNS = (
    "topic", "seq", "event_id", "run_id", "agent_id", "event_type", "schema_version",
    "recipient", "causes", "payload", "logged_at",
)
DEAD_LETTER_COLUMNS = ("topic", "seq", "error", "raw", "key", "header_keys", "header_values")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot represent {type(value).__name__} in JSON")


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default).encode


def jsonb_text(payload: Any) -> str:
    """The payload as JSON text for the ``jsonb`` column (Avro bytes/fixed as standard base64)."""
    return _dumps(payload)


def _fast_json(payload: Any) -> str:
    # pydantic-core's serializer: the same JSON text as `jsonb_text` for payloads without
    # bytes, in much less time per event (sink.swarmlog); it would write bytes as URL-safe base64,
    # hence the check.
    return to_json(payload).decode()


def _payload_json_bytes(payload: Any) -> bytes:
    return _dumps(payload).encode()


def _payload_encoders(schema: Any) -> tuple[Callable[[Any], str], Callable[[Any], bytes]]:
    """A payload schema's JSON encoders, as text (rows) and as UTF-8 bytes (binary COPY):
    pydantic-core's unless the payload can hold Avro bytes/fixed (see ``_fast_json``)."""
    if '"bytes"' in json.dumps(schema) or '"fixed"' in json.dumps(schema):
        return _dumps, _payload_json_bytes
    return _fast_json, to_json


# --- PostgreSQL's binary COPY format -----------------------------------------------------------
# https://www.postgresql.org/docs/current/sql-copy.html (Binary Format). Each row is an int16
# field count, then per field an int32 length (-1: NULL) and the type's binary send format:
# text is its UTF-8 bytes (so no escaping, unlike the text format); bigint and integer are
# big-endian; jsonb is a version byte (1) then the JSON text; timestamptz is int64 microseconds
# since 2000-01-01 UTC; bigint[] is ndim, has-null flag, element type oid, per dimension
# (size, lower bound 1), then per element (length 8, int64). Postgres still validates all of
# it (UTF-8, jsonb), so a row it refuses fails the COPY as with the text format.

COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
"""The binary COPY header: signature, flags (no OIDs), header-extension length (0)."""
COPY_TRAILER = struct.pack(">h", -1)
_NULL_FIELD = struct.pack(">i", -1)
_INT8_OID = 20
_EMPTY_INT8_ARRAY_FIELD = struct.pack(">iiiI", 12, 0, 0, _INT8_OID)
_PG_EPOCH_MS = 946_684_800_000
"""2000-01-01T00:00:00Z, Postgres' timestamp epoch, in Unix milliseconds."""
_pack_i32 = struct.Struct(">i").pack
_pack_timestamptz = struct.Struct(">iq").pack  # (8, microseconds since _PG_EPOCH_MS)
_pack_jsonb_head = struct.Struct(">iB").pack  # (1 + len(json), version 1)
_pack_seq_and_id_len = struct.Struct(">iqi").pack  # (8, seq, then the length of event_id's field)
_NAMES_MAX = 4096


def _text_field(value: str) -> bytes:
    b = value.encode()
    return _pack_i32(len(b)) + b


def _int8_array_field(values: list[int]) -> bytes:
    n = len(values)
    body = struct.pack(f">iiIii{'iq' * n}", 1, 0, _INT8_OID, n, 1, *[x for v in values for x in (8, v)])
    return _pack_i32(len(body)) + body


@dataclass(frozen=True, slots=True)
class CopyBatch:
    """A batch of messages as ``events`` rows in binary COPY format, and its dead letters."""

    data: bytes
    """The ``rows`` rows in binary COPY format. Between ``COPY_SIGNATURE`` and
    ``COPY_TRAILER``, the rows of one or more batches are what ``COPY events
    (EVENT_COLUMNS) FROM STDIN (FORMAT binary)`` reads."""
    rows: int
    dead: list[tuple[Any, ...]]
    next_offset: int
    """The offset after the batch's last message: the sink's position once the batch is in."""
    messages: list[Any]
    """The batch's messages, for the row-by-row slow path."""


class RowBuilder:
    """Decodes a batch into event rows and dead-letter rows."""

    __slots__ = ("topic", "decoder", "_encoders", "_row_prefix", "_names", "_writers")

    def __init__(self, *, topic: str, decoder: Decoder, like: RowBuilder | None = None) -> None:
        """``like``: another topic's builder whose caches (all but the topic) this one shares (the
        many-topic sink: a thousand topics, one set of schemas and names)."""
        self.topic = topic
        self.decoder = decoder
        # build_copy: every row starts with its field count and the topic field.
        self._row_prefix = struct.pack(">h", len(EVENT_COLUMNS)) + _text_field(topic)
        # event type -> its payload's JSON encoder
        self._encoders: dict[str, Any] = {} if like is None else like._encoders
        # run id / agent name (UTF-8) -> its COPY text field
        self._names: dict[bytes, bytes] = {} if like is None else like._names
        # writer fingerprint -> (its event_type and schema_version fields, payload -> JSON bytes)
        self._writers: dict[bytes, tuple[bytes, Callable[[Any], bytes]]] = {} if like is None else like._writers

    def _json_for(self, event_type: str) -> Any:
        enc = self._encoders.get(event_type)
        if enc is None:
            schema = self.decoder.registry.latest(event_type).payload_schema
            enc = self._encoders[event_type] = _payload_encoders(schema)[0]
        return enc

    def build(self, msgs: list[Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """(event rows as tuples in ``EVENT_COLUMNS`` order, dead-letter rows)."""
        topic = self.topic
        decode = self.decoder.decode_checked  # a routing header that lies is a dead letter too
        json_for = self._encoders
        rows: list[tuple[Any, ...]] = []
        dead: list[tuple[Any, ...]] = []
        # LogAppendTime: the broker stamps a whole batch with one timestamp, so one
        # datetime serves runs of consecutive rows.
        last_ts: int | None = None
        logged_at: datetime | None = None
        for m in msgs:
            off = m.offset()
            try:
                writer, rec = decode(m)
                dumps = json_for.get(writer.event_type) or self._json_for(writer.event_type)
                payload = dumps(rec["payload"])
            except (SwarmlogError, TypeError, ValueError) as exc:
                dead.append(dead_letter(topic, m, str(exc)))
                continue
            ts_type, ts = m.timestamp()
            if ts != last_ts:
                last_ts = ts
                logged_at = datetime.fromtimestamp(ts / 1000, UTC) if ts_type else None
            rows.append((
                topic, off, rec["event_id"], rec["run_id"], rec["agent_id"], writer.event_type,
                writer.version, rec["to"], array_literal(rec["causes"]), payload,
                logged_at if ts_type else None,
            ))
        return rows, dead

    def build_copy(self, msgs: list[Any]) -> CopyBatch:
        """The batch as one binary COPY stream (the rows :meth:`build` would give) and its dead letters.

        The sink's hot path. Speed: the stream is bytes put together in one join per batch
        (psycopg's ``write_row`` costs more per row than all the rest: ``sink.swarmlog``); the
        fields that repeat (topic, run id, agent names, type and version) are encoded once and
        reused; the payload's JSON is the serializer's bytes as they come; ``logged_at`` is integer
        arithmetic, not a datetime.
        """
        topic = self.topic
        # The envelope's strings as bytes, routing headers checked (a header that lies is a
        # dead letter too): nothing decoded to str only to be encoded again here.
        decode = self.decoder.decode_fields
        writers = self._writers
        names = self._names
        prefix = self._row_prefix
        parts: list[bytes] = []
        dead: list[tuple[Any, ...]] = []
        rows = 0
        last_ts: int | None = None
        logged_at = _NULL_FIELD
        for m in msgs:
            off = m.offset()
            try:
                writer, event_id, run_id, agent_id, to, causes, payload_rec = decode(m)
                w = writers.get(writer.fingerprint) or self._writer_fields(writer)
                payload = w[1](payload_rec)
                run = names.get(run_id) or self._name(run_id)
                agent = names.get(agent_id) or self._name(agent_id)
                recipient = _NULL_FIELD if to is None else names.get(to) or self._name(to)
                causes_f = _int8_array_field(causes) if causes else _EMPTY_INT8_ARRAY_FIELD
            # UnicodeEncodeError and pydantic-core's serialization error are ValueErrors; struct.error:
            # an integer out of its column's range.
            except (SwarmlogError, TypeError, ValueError, struct.error) as exc:
                dead.append(dead_letter(topic, m, str(exc)))
                continue
            ts_type, ts = m.timestamp()
            if ts != last_ts:  # LogAppendTime: runs of rows share one timestamp
                last_ts = ts
                logged_at = _pack_timestamptz(8, (ts - _PG_EPOCH_MS) * 1000) if ts_type else _NULL_FIELD
            parts += (prefix, _pack_seq_and_id_len(8, off, len(event_id)), event_id, run, agent, w[0], recipient,
                      causes_f, _pack_jsonb_head(len(payload) + 1, 1), payload, logged_at)
            rows += 1
        return CopyBatch(data=b"".join(parts), rows=rows, dead=dead,
                         next_offset=msgs[-1].offset() + 1, messages=msgs)

    def _writer_fields(self, writer: EventSchema) -> tuple[bytes, Callable[[Any], bytes]]:
        dumps = _payload_encoders(self.decoder.registry.latest(writer.event_type).payload_schema)[1]
        fields = (_text_field(writer.event_type) + struct.pack(">ii", 4, writer.version), dumps)
        self._writers[writer.fingerprint] = fields
        return fields

    def _name(self, name: bytes) -> bytes:
        if len(self._names) >= _NAMES_MAX:  # names repeat; anything else must not grow this forever
            self._names.clear()
        field = self._names[name] = _pack_i32(len(name)) + name
        return field


def array_literal(values: list[int]) -> str:
    """A bigint[] as Postgres array text (``{}``, ``{3,17}``), without psycopg's list dumper (slower, per row)."""
    return "{" + ",".join(map(str, values)) + "}" if values else "{}"


def dead_letter(topic: str, msg: Any, error: str) -> tuple[Any, ...]:
    """A ``dead_letters`` row that Postgres cannot refuse: the message kept whole, as bytes.

    The value, the key and every header (in order, duplicate keys and all, NUL and non-UTF-8
    bytes as they are, a value-less header as NULL) go into ``bytea`` columns, which take
    any bytes; only the error is text, and it is ours, made safe for a ``text`` column.
    """
    headers = msg.headers() or ()
    return (
        topic,
        msg.offset(),
        safe_text(error),
        msg.value(),
        msg.key(),
        # Header keys are strings to librdkafka; surrogateescape keeps whatever bytes they held.
        [k.encode("utf-8", "surrogateescape") for k, _ in headers],
        [v for _, v in headers],
    )


def safe_text(text: str) -> str:
    """``text`` as a Postgres ``text`` value accepts it: no NUL, no lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
