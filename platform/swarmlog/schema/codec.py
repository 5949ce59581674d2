"""Wire framing: Avro single-object encoding, and the routing headers.

Every message value is::

    C3 01 | 8-byte CRC-64-AVRO fingerprint (little-endian) | Avro binary body

exactly as the Avro specification's *single-object encoding* defines it, so any
Avro library can read swarmlog's events given the schema files. The reader finds
the writer schema by the fingerprint and resolves it into the newest version the
process knows (defaults, promotions, then upcasters).

Routing fields also travel as Kafka headers (:mod:`swarmlog.log.protocol`: ``sl.type``,
``sl.v``, ``sl.agent``, ``sl.to``, and ``sl.step`` on the agent runtime's outputs) so that
a consumer can skip an event it does not care about without decoding it. swarmlog's own
readers never take them on trust: :attr:`Decoder.route` reads the route from the
envelope itself — its first fields, by hand, without decoding the payload — and checks
the headers against it; :meth:`Decoder.decode_checked` does the same for a decoded event,
and :meth:`Decoder.decode_fields` (the Postgres sink's) for an envelope read by hand, its
strings kept as bytes, and the payload read on its own.

Hot path: an :class:`Encoder` (with its payload writer compiled from the schema,
:mod:`._avro_writer`) and the decoder's plan per fingerprint are built once; per event
the encoder makes one join of the envelope's bytes and the payload's, no fastavro call,
and the decoder one call of a reader compiled from the writer schema (:mod:`._avro_reader`;
fastavro only where one version is resolved into another). Where swarmlog's C modules are
built, the common paths of routing (:mod:`._route`), reading and encoding (:mod:`._avro_native`)
run in C, each handing what it does not accept to the Python path, which stays the definition.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import fastavro

from ..errors import SchemaNotFound, SwarmlogError, TrailingBytesInValue, UndecodableMessage
from ..log.protocol import (
    H_AGENT,
    H_STEP,
    H_TO,
    H_TYPE,
    H_VERSION,
    Headers,
    Route,
    checked_route,
    id_problem,
    new_route,
    route,
    step_of,
)
from ._avro_reader import Reader, TrailingBytes, fastavro_reader, payload_reader, read_length, read_long
from ._avro_writer import Unsupported, Writer, avro_long, avro_string, native_program, payload_writer
from .registry import EventSchema, SchemaRegistry
from .upcasting import upcasters_for

__all__ = ["Decoder", "Encoder", "FINGERPRINT_LEN", "HEADER_LEN", "MAGIC", "Upcaster"]

try:  # the common path of route() and envelope_route() in C; optional (no compiler: the Python path)
    from . import _route as _native_route
except ImportError:  # pragma: no cover - where it could not be built
    _native_route = None  # type: ignore[assignment]
try:  # an event's bytes in C; optional (no compiler: the Python path)
    from . import _avro_native
except ImportError:  # pragma: no cover - where it could not be built
    _avro_native = None  # type: ignore[assignment]

MAGIC = b"\xc3\x01"
"""Avro single-object encoding marker, version 1."""
FINGERPRINT_LEN = 8
HEADER_LEN = len(MAGIC) + FINGERPRINT_LEN



class Encoder:
    """Encodes records of one schema version; reuse one per (type, version)."""

    __slots__ = ("schema", "_prefix", "_parsed", "_buf", "_type_headers", "_type_version", "_write_payload",
                 "_strings", "_headers", "encode_event")

    def __init__(self, schema: EventSchema) -> None:
        self.schema = schema
        self._prefix = MAGIC + schema.fingerprint
        self._parsed = schema.parsed
        self._buf = io.BytesIO()
        self._type_headers: Headers = [
            (H_TYPE, schema.event_type.encode()),
            (H_VERSION, str(schema.version).encode()),
        ]
        # encode_event: the envelope's fields are fixed (schemas._check_envelope), so they are
        # written here; the payload record by a writer compiled from its schema (_avro_writer:
        # fastavro's bytes in much less time: append.*), or fastavro for a schema it does not cover.
        self._type_version = avro_string(schema.event_type) + avro_long(schema.version)
        self._write_payload: Writer = payload_writer(_payload_parsed(schema))
        self._strings: dict[str, bytes] = {}
        self._headers: dict[tuple[bytes, bytes | None], Headers] = {}
        self.encode_event: Callable[[str, str, str, str | None, Sequence[int], dict[str, Any]], bytes] = \
            self._encode_event
        """``encode_event(event_id, run_id, agent, to, causes, payload)``: the event's bytes, the same
        bytes as :meth:`encode` of the envelope record, in much less time (``append.*``). In C where it is built
        (:mod:`swarmlog.schema._avro_native`: the envelope and a payload of the common shapes); the
        Python path, :meth:`_encode_event`, writes whatever the C walk does not accept."""
        if _avro_native is not None:
            try:
                program: tuple[Any, ...] | None = native_program(_payload_parsed(schema))
            except Unsupported:
                program = None  # the envelope in C, the payload by the Python writer
            self.encode_event = _avro_native.EventEncoder(self._prefix, self._type_version, program,
                                                          self._write_payload, self._encode_event).encode_event

    def encode(self, record: dict[str, Any]) -> bytes:
        buf = self._buf
        buf.seek(0)
        buf.truncate()
        buf.write(self._prefix)
        fastavro.schemaless_writer(buf, self._parsed, record)
        return buf.getvalue()

    def _encode_event(self, event_id: str, run_id: str, agent: str, to: str | None, causes: Sequence[int],
                      payload: dict[str, Any]) -> bytes:
        """:attr:`encode_event` in Python: the same bytes as :meth:`encode` of the envelope record,
        in less time.

        Avro binary: a string is its UTF-8 length (zigzag varint) then the bytes; the
        union ``to`` is the branch index (0 null, 1 string) then the value; the array
        ``causes`` is one block (count, items) then 0. Run ids and agent names repeat,
        so their encodings are kept.
        """
        strings = self._strings
        run_b = strings.get(run_id)
        if run_b is None:
            run_b = self._remember(run_id)
        agent_b = strings.get(agent)
        if agent_b is None:
            agent_b = self._remember(agent)
        if to is None:
            to_b = b"\x00"
        else:
            known = strings.get(to)
            to_b = b"\x02" + (known if known is not None else self._remember(to))
        causes_b = avro_long(len(causes)) + b"".join(map(avro_long, causes)) + b"\x00" if causes else b"\x00"
        return b"".join((self._prefix, avro_string(event_id), run_b, agent_b, self._type_version, to_b, causes_b,
                         self._write_payload(payload)))

    def headers(self, agent: bytes, to: bytes | None) -> Headers:
        """The routing headers of this type's event from ``agent`` to ``to`` (None: a broadcast).

        One list per (agent, to) pair, built once and **shared**: the same pairs repeat on
        every event, and building the list cost more than finding it. Never mutate it (a
        caller that adds a header, the runtime's ``sl.step``, makes a new list); the producer
        only reads it.
        """
        h = self._headers.get((agent, to))
        if h is None:
            h = self._new_headers(agent, to)
        return h

    def _new_headers(self, agent: bytes, to: bytes | None) -> Headers:
        if len(self._headers) >= 4096:  # pairs repeat; anything else must not grow this forever
            self._headers.clear()
        h = self._type_headers + [(H_AGENT, agent)]
        if to is not None:
            h.append((H_TO, to))
        self._headers[(agent, to)] = h
        return h

    def _remember(self, s: str) -> bytes:
        if len(self._strings) >= 4096:  # names repeat; anything else must not grow this forever
            self._strings.clear()
        b = self._strings[s] = avro_string(s)
        return b


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


_READERS: dict[tuple[bytes, bool], Reader] = {}
"""(fingerprint, payload only) -> the reader compiled for it, shared by every Decoder of the
process (compiling one costs a few ms; one Parsing Canonical Form reads one way)."""


def _compiled(schema: EventSchema, *, payload: bool) -> Reader:
    key = (schema.fingerprint, payload)
    read = _READERS.get(key)
    if read is None:  # two threads may both compile it: the same reader, the last one kept
        read = _READERS[key] = payload_reader(_payload_parsed(schema) if payload else schema.parsed)
    return read


class _Plan:
    """How to turn bytes written with one schema into the newest version's dict.

    ``read(value, HEADER_LEN)`` reads the body: a reader compiled from the writer schema
    (:mod:`._avro_reader`, fastavro's datum in much less time) when the read resolves
    nothing (the writer is the version read into, or the first upcaster's), fastavro where
    Avro resolution is needed; the upcaster ``steps`` follow.
    """

    __slots__ = ("writer", "reader", "steps", "read")

    def __init__(self, writer: EventSchema, reader: EventSchema, steps: list[Upcaster], reader_parsed: Any) -> None:
        self.writer = writer
        self.reader = reader
        self.steps = steps
        self.read: Reader = (_compiled(writer, payload=False) if reader_parsed is None
                             else fastavro_reader(writer.parsed, reader_parsed))


class _PayloadPlan:
    """How :meth:`Decoder.decode_fields` reads one writer's payload record on its own."""

    __slots__ = ("writer", "kind", "read")

    def __init__(self, writer: EventSchema, writer_parsed: Any, reader_parsed: Any,
                 kind: tuple[str, bytes, bytes]) -> None:
        self.writer = writer
        self.kind = kind
        # read(value, index of the payload): compiled when nothing is resolved, as _Plan.read
        self.read: Reader = (_compiled(writer, payload=True) if reader_parsed is None
                             else fastavro_reader(writer_parsed, reader_parsed))


_UNPLANNED: Any = object()
_UTF8_MAX = 4096


def _check_utf8(known: set[bytes], *strings: bytes | None) -> None:
    """Raises UnicodeDecodeError unless every string is UTF-8; remembers those that are."""
    for s in strings:
        if s is not None and s not in known:
            s.decode()
            if len(known) >= _UTF8_MAX:  # names repeat; anything else must not grow this forever
                known.clear()
            known.add(s)


def _payload_parsed(schema: EventSchema) -> Any:
    """The payload record's schema parsed on its own, named as nested in the envelope."""
    payload = schema.payload_schema
    namespace = schema.schema.get("namespace")
    if namespace and "namespace" not in payload and "." not in payload["name"]:
        payload = {**payload, "namespace": namespace}
    return fastavro.parse_schema(payload, named_schemas={})


class Decoder:
    """Decodes any message written with any known schema into its type's newest version.

    Resolution (``vN`` → newest) is planned once per writer fingerprint: plain
    Avro schema resolution (new fields' defaults, type promotions) across the
    versions that need no help, and the registered upcasters ``vN_to_vN1`` where
    a version changed meaning. A message from the newest writer is read with no
    resolution at all.
    """

    def __init__(self, registry: SchemaRegistry, *, upcasters: dict[tuple[str, int], Upcaster] | None = None,
                 read_into: dict[str, int] | None = None) -> None:
        self.registry = registry
        self.read_into = dict(read_into or {})
        """Event type -> the version its events are read into, where not the newest this registry has
        (``mirror verify`` rebuilds a row in the shape an older sink wrote it). A writer newer than that
        version is read into its own."""
        # By default the upcasters beside the schemas (schemas/<type>/upcasters.py) apply;
        # an explicit {} means none.
        self.upcasters = dict(upcasters if upcasters is not None else upcasters_for(registry))
        self._plans: dict[bytes, _Plan] = {}
        # fingerprint -> (event type, its bytes, version as an sl.v header spells it)
        self._kinds: dict[bytes, tuple[str, bytes, bytes]] = {}
        self._expected: dict[Any, Headers] = {}  # the routing headers an envelope should have (protocol)
        # decode_fields: fingerprint -> how to read the payload alone (None: the whole record, upcast)
        self._payload_plans: dict[bytes, _PayloadPlan | None] = {}
        # decode_fields: envelope strings already found to be UTF-8 (names repeat; event ids do not)
        self._utf8: set[bytes] = set()
        self.route: Callable[[Any], Route] = self._route
        """Where a message goes, as its envelope says: type (the writer schema's), agent, recipient,
        step; its routing headers checked against that (:func:`swarmlog.log.protocol.checked_route`).

        The hot path of the first pass over a log (an agent's start) and of a swarm replay's read:
        only the envelope's first fields are read (no payload decoding). A message that is not
        an event of a known schema gets the route its headers give; decoding it fails wherever
        it is decoded, and is reported there. Its common path runs in C where it is built
        (:mod:`swarmlog.schema._route`); the Python path (:meth:`_route`) is its definition."""
        self.envelope_route: Callable[[Any], Route] = self._route_by_envelope
        """Where a message goes as its envelope says (type, agent, recipient), its headers not
        read: for a reader that routes by the envelope alone, whom a header cannot steer.

        The live agent's path: every agent reads every message of its swarm and acts on few, so
        what it pays for the rest is this and no more (``step`` is None: :meth:`step` reads it
        for the messages that need it). Checking the headers is the business of the readers that
        route by them (:attr:`route`). A message that is not an event of a known schema gets the
        route its headers give, as in :attr:`route`: there is no envelope to go by. In C where
        built, as :attr:`route` is; the Python path is :meth:`_route_by_envelope`."""
        if _native_route is not None:
            router = _native_route.Router(self._kinds, self._route, self._route_by_envelope, Route,
                                          (H_TYPE, H_VERSION, H_AGENT, H_TO, H_STEP))
            self.route, self.envelope_route = router.route, router.envelope_route

    def decode(self, value: bytes | None, offset: int | None = None) -> tuple[EventSchema, dict[str, Any]]:
        """Return (writer schema, record in the newest version); raises a typed error on garbage."""
        if value is None or len(value) < HEADER_LEN or value[:2] != MAGIC:
            raise UndecodableMessage(
                offset=offset,
                reason="no Avro single-object header (C3 01 + fingerprint); not written by swarmlog",
            )
        fp = value[2:HEADER_LEN]
        plan = self._plans.get(fp)
        if plan is None:
            plan = self._plan(fp, offset)
        try:
            record = plan.read(value, HEADER_LEN)
        except TrailingBytes as exc:  # a whole event, and more: a value is exactly one event
            raise TrailingBytesInValue(offset=offset, end=exc.end, size=exc.size) from None
        except Exception as exc:  # EOFError, IndexError, ValueError, UnicodeDecodeError, struct.error...
            raise UndecodableMessage(offset=offset, reason=f"Avro body does not match its schema: {exc!r}") from None
        for step in plan.steps:
            record = step(record)
        return plan.writer, record

    def _route(self, msg: Any) -> Route:
        """:attr:`route` in Python: all of it, for the messages the C path hands over and where it is not built."""
        value = msg.value()
        headers = msg.headers()
        if value is None or value[:2] != MAGIC:
            return route(headers)
        fp = value[2:HEADER_LEN]
        kind = self._kinds.get(fp) or self._kind(fp)
        if kind is None:
            return route(headers)
        try:
            event_id, agent, to = _envelope_route(value)
        except (IndexError, ValueError):
            return route(headers)
        return checked_route(headers, msg.offset(), kind[0], kind[1], kind[2], event_id, agent, to, self._expected)

    def _route_by_envelope(self, msg: Any) -> Route:
        """:attr:`envelope_route` in Python (see :meth:`_route`)."""
        value = msg.value()
        if value is None or value[:2] != MAGIC:
            return route(msg.headers())
        fp = value[2:HEADER_LEN]
        kind = self._kinds.get(fp) or self._kind(fp)
        if kind is None:
            return route(msg.headers())
        try:
            _, agent, to = _envelope_route(value)
        except (IndexError, ValueError):
            return route(msg.headers())
        return new_route(Route, (kind[0], agent.decode(), None if to is None else to.decode(), None))

    @staticmethod
    def step(msg: Any) -> int | None:
        """The step the envelope's event id names, as an ``sl.step`` header would (``agent@step#i``;
        a state digest's last step; None: it names none), read without decoding the payload; None
        too for a message that is not an event."""
        value = msg.value()
        if value is None or value[:2] != MAGIC:
            return None
        try:
            event_id, _, _ = _envelope_route(value)
        except (IndexError, ValueError):
            return None
        step = step_of(event_id)
        return None if step is None else int(step)

    @staticmethod
    def event_id(msg: Any) -> bytes | None:
        """The envelope's event id as its bytes, read without decoding the payload; None for a message
        that is not an event."""
        value = msg.value()
        if value is None or value[:2] != MAGIC:
            return None
        try:
            return _envelope_route(value)[0]
        except (IndexError, ValueError):
            return None

    @staticmethod
    def envelope_problem(value: bytes | None) -> str | None:
        """What keeps ``value`` from being an event's, judged by its framing and envelope alone; None if
        nothing does.

        Why not decode it: the envelope is the same in every schema (registry.ENVELOPE_FIELDS), so an
        event a newer writer wrote — a version this process does not know yet, as in a writers-first
        rolling upgrade (docs/schemas.md) — is an event all the same. Checked: the single-object
        framing, an envelope read whole by hand, strings that are UTF-8, and an event id and agent
        that are names (protocol.id_problem). The payload is not read.
        """
        if value is None:
            return "has no value (a tombstone)"
        if len(value) < HEADER_LEN or value[:2] != MAGIC:
            return "does not start with Avro single-object framing"
        try:
            event_id, run_id, agent, event_type, to, _, _ = _envelope_fields(value)
            names = {"event_id": event_id.decode(), "agent_id": agent.decode(), "event_type": event_type.decode()}
            run_id.decode()
            if to is not None:
                to.decode()
        except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            return f"has no readable envelope ({exc})"
        for field, name in names.items():
            problem = id_problem(name)
            if problem is not None:
                return f"has an envelope whose {field} {problem}"
        return None

    def unknown_writer(self, exc: SchemaNotFound, headers: Headers | None) -> SchemaNotFound:
        """``exc`` told with what the message's routing headers say it is: most often a newer version of
        a type this reader knows (``a newer agent.message (v4) than this reader knows``). The headers
        only explain; they decide nothing."""
        r = route(headers)
        if not r.event_type:
            return exc
        version = None
        for k, v in headers or ():
            if k == H_VERSION and v is not None and v.isdigit():
                version = int(v)
        try:
            known: int | None = self.registry.latest(r.event_type).version
        except SwarmlogError:
            known = None
        return SchemaNotFound(offset=exc.offset, fingerprint=exc.fingerprint, event_type=r.event_type,
                              version=version, known_version=known)

    def decode_checked(self, msg: Any) -> tuple[EventSchema, dict[str, Any]]:
        """:meth:`decode` a message and check its routing headers against the decoded envelope."""
        value = msg.value()
        offset = msg.offset()
        try:
            writer, rec = self.decode(value, offset)
        except SchemaNotFound as exc:
            raise self.unknown_writer(exc, msg.headers()) from None
        headers = msg.headers()
        if headers:
            kind = self._kinds.get(writer.fingerprint) or self._kind_of(writer)
            to = rec["to"]
            checked_route(headers, offset, writer.event_type, kind[1], kind[2], rec["event_id"].encode(),
                          rec["agent_id"].encode(), None if to is None else to.encode(), self._expected)
        return writer, rec

    def decode_fields(self, msg: Any) -> tuple[EventSchema, bytes, bytes, bytes, bytes | None, list[int], Any]:
        """What :meth:`decode_checked` gives, with the envelope's strings as their UTF-8 bytes:
        ``(writer, event_id, run_id, agent_id, to, causes, payload)``, payload in the newest version.

        For a consumer that writes the envelope out as bytes again (the Postgres sink's binary
        COPY). The same checks and errors as :meth:`decode_checked`: the routing headers against
        the envelope, every string of it valid UTF-8, the payload read (and resolved) as :meth:`decode` reads it.

        Speed: the envelope's layout is the same in every schema (registry.ENVELOPE_FIELDS), so
        it is read by hand, its strings kept as bytes, and the payload record alone by the
        reader compiled from its schema (fastavro where a version is resolved into another). A
        writer whose reading needs an upcaster is read whole (:meth:`decode_checked`).
        """
        value = msg.value()
        offset = msg.offset()
        if value is None or len(value) < HEADER_LEN or value[:2] != MAGIC:
            return self._fields_whole(msg)  # raises decode's UndecodableMessage
        fp = value[2:HEADER_LEN]
        plan = self._payload_plans.get(fp, _UNPLANNED)
        if plan is _UNPLANNED:
            try:
                plan = self._payload_plan(fp, offset)
            except SchemaNotFound as exc:
                raise self.unknown_writer(exc, msg.headers()) from None
        if plan is None:
            return self._fields_whole(msg)
        try:
            event_id, run_id, agent, event_type, to, causes, end = _envelope_fields(value)
            event_id.decode()  # UTF-8, as fastavro would check it
            utf8 = self._utf8
            if run_id not in utf8 or agent not in utf8 or event_type not in utf8 or (
                    to is not None and to not in utf8):
                _check_utf8(utf8, run_id, agent, event_type, to)
            payload = plan.read(value, end)
        except TrailingBytes as exc:
            raise TrailingBytesInValue(offset=offset, end=exc.end, size=exc.size) from None
        except Exception as exc:  # as decode: IndexError/ValueError (truncated), UnicodeDecodeError, EOFError...
            raise UndecodableMessage(offset=offset, reason=f"Avro body does not match its schema: {exc!r}") from None
        headers = msg.headers()
        writer = plan.writer
        if headers:
            kind = plan.kind
            checked_route(headers, offset, kind[0], kind[1], kind[2], event_id, agent, to, self._expected)
        return writer, event_id, run_id, agent, to, causes, payload

    def _fields_whole(self, msg: Any) -> tuple[EventSchema, bytes, bytes, bytes, bytes | None, list[int], Any]:
        writer, rec = self.decode_checked(msg)
        to = rec["to"]
        return (writer, rec["event_id"].encode(), rec["run_id"].encode(), rec["agent_id"].encode(),
                None if to is None else to.encode(), rec["causes"], rec["payload"])

    def _payload_plan(self, fp: bytes, offset: int | None) -> _PayloadPlan | None:
        plan = self._plans.get(fp) or self._plan(fp, offset)  # SchemaNotFound for an unknown writer
        payload_plan = None
        if not plan.steps:  # plain Avro resolution: of the payload only, the envelope being the same
            writer, reader = plan.writer, plan.reader
            w = _payload_parsed(writer)
            payload_plan = _PayloadPlan(writer, w, None if reader is writer else _payload_parsed(reader),
                                        self._kinds.get(fp) or self._kind_of(writer))
        self._payload_plans[fp] = payload_plan
        return payload_plan

    def _kind(self, fp: bytes) -> tuple[str, bytes, bytes] | None:
        writer = self.registry.by_fingerprint(fp)
        return None if writer is None else self._kind_of(writer)

    def _kind_of(self, writer: EventSchema) -> tuple[str, bytes, bytes]:
        kind = self._kinds[writer.fingerprint] = (writer.event_type, writer.event_type.encode(),
                                                  str(writer.version).encode())
        return kind

    def _plan(self, fp: bytes, offset: int | None) -> _Plan:
        writer = self.registry.by_fingerprint(fp)
        if writer is None:
            raise SchemaNotFound(offset=offset, fingerprint=fp.hex())
        target = self.registry.latest(writer.event_type)
        cap = self.read_into.get(writer.event_type)
        if cap is not None and writer.version <= cap < target.version:
            target = self.registry.get(writer.event_type, cap)
        plan = _chain_plan(self.registry, writer, target, self.upcasters)
        self._plans[fp] = plan
        return plan


def _envelope_route(value: bytes) -> tuple[bytes, bytes, bytes | None]:
    """The envelope's ``event_id``, ``agent_id`` and ``to`` as bytes, read by hand.

    Every schema starts with the same envelope (registry.ENVELOPE_FIELDS: event_id, run_id,
    agent_id, event_type strings, schema_version int, ``to`` a null|string union), so its first
    fields are found without the writer schema. Raises IndexError or ValueError if truncated.

    Speed (every agent routes every message): one byte is the length of a string under 64
    bytes, so the common case is a byte read and a slice per field, no call.
    """
    n = value[HEADER_LEN]
    i = HEADER_LEN + 1
    if n >= 0x80 or n & 1:
        n, i = read_length(value, HEADER_LEN)
    else:
        n >>= 1
    event_id = value[i:i + n]
    i += n
    n = value[i]  # run_id: skipped
    i += (n >> 1) + 1 if n < 0x80 and not n & 1 else _skip_string(value, i)
    n = value[i]
    if n >= 0x80 or n & 1:
        n, i = read_length(value, i)
    else:
        n >>= 1
        i += 1
    agent = value[i:i + n]
    i += n
    n = value[i]  # event_type: skipped
    i += (n >> 1) + 1 if n < 0x80 and not n & 1 else _skip_string(value, i)
    _, i = read_long(value, i)  # schema_version
    branch = value[i]
    if branch == 0:
        if i >= len(value):
            raise ValueError("truncated envelope")
        return event_id, agent, None
    if branch != 2:  # zigzag 1: the string branch
        raise ValueError("bad union branch for `to`")
    n = value[i + 1]
    if n >= 0x80 or n & 1:
        n, i = read_length(value, i + 1)
    else:
        n >>= 1
        i += 2
    if i + n > len(value):
        raise ValueError("truncated envelope")
    return event_id, agent, value[i:i + n]


def _envelope_fields(value: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes | None, list[int], int]:
    """The whole envelope read by hand: (event_id, run_id, agent_id, event_type, to, causes,
    index of the payload). Strings as their bytes, not checked as UTF-8 here. Raises
    IndexError or ValueError if truncated or malformed (as :func:`_envelope_route`).

    Speed: as in :func:`_envelope_route`, a string under 64 bytes is a one-byte length and a
    slice, no call; only longer ones (and the rare causes) go through ``_read_bytes``.
    """
    i = HEADER_LEN
    n = value[i]
    if n < 0x80 and not n & 1:
        j = i + 1 + (n >> 1)
        event_id = value[i + 1:j]
        i = j
    else:
        event_id, i = _read_bytes(value, i)
    n = value[i]
    if n < 0x80 and not n & 1:
        j = i + 1 + (n >> 1)
        run_id = value[i + 1:j]
        i = j
    else:
        run_id, i = _read_bytes(value, i)
    n = value[i]
    if n < 0x80 and not n & 1:
        j = i + 1 + (n >> 1)
        agent = value[i + 1:j]
        i = j
    else:
        agent, i = _read_bytes(value, i)
    n = value[i]
    if n < 0x80 and not n & 1:
        j = i + 1 + (n >> 1)
        event_type = value[i + 1:j]
        i = j
    else:
        event_type, i = _read_bytes(value, i)
    n = value[i]  # schema_version
    i = i + 1 if n < 0x80 else read_long(value, i)[1]
    branch = value[i]
    if branch == 0:
        to = None
        i += 1
    elif branch == 2:  # zigzag 1: the string branch
        to, i = _read_bytes(value, i + 1)
    else:
        raise ValueError("bad union branch for `to`")
    causes: list[int] = []
    if value[i]:
        while True:  # an Avro array: blocks of (count, items), the last of count 0
            count, i = read_long(value, i)
            if count == 0:
                break
            if count < 0:  # a block that also gives its size in bytes
                count = -count
                _, i = read_long(value, i)
            for _ in range(count):
                item, i = read_long(value, i)
                causes.append(item)
    else:
        i += 1
    if i > len(value):  # a slice past the end is short, not an error: check once, here
        raise ValueError("truncated envelope")
    return event_id, run_id, agent, event_type, to, causes, i


def _read_bytes(b: bytes, i: int) -> tuple[bytes, int]:
    """An Avro string's bytes at ``b[i]``: (bytes, index after them)."""
    n, i = read_length(b, i)
    return b[i:i + n], i + n


def _skip_string(b: bytes, i: int) -> int:
    """How far past ``b[i]`` a string ends (its length and bytes)."""
    n, j = read_length(b, i)
    return j - i + n


def _chain_plan(registry: SchemaRegistry, writer: EventSchema, newest: EventSchema,
                upcasters: dict[tuple[str, int], Upcaster]) -> _Plan:
    """Plan for a type with upcasters: resolve by Avro between them, upcast across them."""
    event_type = writer.event_type
    # Versions at which an upcaster must run: vK -> vK+1 for registered K >= writer.version.
    stops = sorted(k for (t, k) in upcasters if t == event_type and k >= writer.version and k < newest.version)
    if not stops:
        return _Plan(writer, newest, [], None if newest is writer else newest.parsed)
    first = registry.get(event_type, stops[0])
    steps: list[Callable[[dict[str, Any]], dict[str, Any]]] = []
    for i, k in enumerate(stops):
        steps.append(upcasters[(event_type, k)])  # vK dict -> vK+1 dict
        after = registry.get(event_type, k + 1)
        until = registry.get(event_type, stops[i + 1]) if i + 1 < len(stops) else newest
        if until is not after:
            steps.append(_reencode(after, until))
    return _Plan(writer, newest, steps, None if first is writer else first.parsed)


def _reencode(writer: EventSchema, reader: EventSchema) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Avro-resolve a dict of ``writer``'s version into ``reader``'s (rare: old events only)."""
    w, r = writer.parsed, reader.parsed

    def step(record: dict[str, Any]) -> dict[str, Any]:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w, record)
        buf.seek(0)
        return fastavro.schemaless_reader(buf, w, r)  # type: ignore[return-value]

    return step
