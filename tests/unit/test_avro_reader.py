"""The compiled Avro reader (schema/_avro_reader.py) reads fastavro's datum from every valid
encoding of every schema -- the same types, values and dict key order -- and never accepts bytes
fastavro refuses: every truncation and every single-byte change of encoded events is compared."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmlog.errors import TrailingBytesInValue, UndecodableMessage
from swarmlog.log.memory import MemoryMessage
from swarmlog.schema import _avro_reader, codec
from swarmlog.schema._avro_reader import (
    TrailingBytes,
    Unsupported,
    compile_reader,
    fastavro_reader,
    payload_reader,
    read_length,
    read_long,
)
from swarmlog.schema._avro_writer import avro_long
from swarmlog.schema.codec import HEADER_LEN, MAGIC, Decoder, Encoder, _envelope_fields, _payload_parsed
from swarmlog.schema.registry import EventSchema

from ..conftest import cannot_run_here, examples, exhaustive
from .avro_cases import EVERY_VERSION, IDS, INT64, REGISTRY, fastavro_bytes, identical, strategy

NAMES = st.text(max_size=90) | st.sampled_from(["", "😀" * 20, "x" * 64, "é"])  # 64+ bytes: a two-byte length


@pytest.fixture(scope="module", autouse=True, params=["c", "python"])
def reader_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs twice: with the readers in C (swarmlog.schema._avro_native, the
    generated Python reader behind each as its fallback) and with the generated Python readers
    alone (where the C module is not built). Both must read fastavro's datum, or refuse."""
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "c":
            if _avro_reader._avro_native is None:
                cannot_run_here("swarmlog.schema._avro_native is not built here")
        else:
            mp.setattr(_avro_reader, "_avro_native", None)
        mp.setattr(codec, "_READERS", {})  # readers compiled under the other kind are not reused
        yield request.param


def _ours(read: Any) -> bool:
    """A reader compiled here (C or generated Python), not fastavro's."""
    native = _avro_reader._avro_native
    if native is not None and isinstance(read, native.Program):
        return True
    return bool(read.__code__.co_filename.startswith("<avro reader"))


def test_the_readers_are_of_the_kind_asked_for(reader_kind: str) -> None:
    read = compile_reader(REGISTRY.latest("agent.message").parsed)
    assert _ours(read)
    assert (_avro_reader._avro_native is not None and isinstance(read, _avro_reader._avro_native.Program)) \
        == (reader_kind == "c")


def _fastavro_read(parsed: Any, b: bytes, pos: int = 0) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(b[pos:]), parsed, None)


def _outcome(read: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "datum", read(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome is the point
        return "error", exc


def test_every_schema_in_schemas_is_compiled_not_left_to_fastavro():
    for s in EVERY_VERSION:
        compile_reader(s.parsed)  # raises Unsupported otherwise
        compile_reader(_payload_parsed(s))


_COMPILED: dict[tuple[bool, str, int], tuple[Any, Any, Any]] = {}


def _compiled(schema: EventSchema) -> tuple[Any, Any, Any]:
    """``schema``'s payload parsed alone, and the readers compiled of the whole event and of the payload:
    once per reader kind (C or Python) for all the examples of a property — a reader is made of its
    schema alone, so compiling it again for every datum would test nothing more."""
    key = (_avro_reader._avro_native is None, schema.event_type, schema.version)
    made = _COMPILED.get(key)
    if made is None:
        parsed = _payload_parsed(schema)
        made = _COMPILED[key] = (parsed, compile_reader(schema.parsed), compile_reader(parsed))
    return made


@pytest.mark.parametrize("schema", EVERY_VERSION, ids=IDS)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), event_id=NAMES, run=NAMES, agent=NAMES, to=st.none() | NAMES,
       causes=st.lists(st.integers(*INT64), max_size=4))
def test_compiled_reader_reads_fastavros_datum_from_every_event_of_every_schema(schema, data, event_id, run, agent,
                                                                                 to, causes):
    parsed, read_whole, read_payload = _compiled(schema)
    payload = schema.validate_payload(data.draw(strategy(parsed, {})))
    record = {"event_id": event_id, "run_id": run, "agent_id": agent, "event_type": schema.event_type,
              "schema_version": schema.version, "to": to, "causes": causes, "payload": payload}
    value = MAGIC + schema.fingerprint + fastavro_bytes(schema.parsed, record)  # fastavro's own bytes
    ours = read_whole(value, HEADER_LEN)
    theirs = _fastavro_read(schema.parsed, value, HEADER_LEN)
    assert identical(ours, theirs), (ours, theirs)  # types, values, NaN/-0.0 and key order
    # ... and the payload alone, where decode_fields reads it (after the hand-read envelope)
    end = _envelope_fields(value)[-1]
    assert identical(read_payload(value, end), _fastavro_read(parsed, value, end))
    assert identical(read_payload(value, end), theirs["payload"])


# Every construct the reader covers, beyond what schemas/ uses today: a recursive record,
# unions with record, array, map, enum and fixed branches, nested maps and arrays.
KITCHEN = fastavro.parse_schema({
    "type": "record", "name": "Kitchen", "namespace": "t",
    "fields": [
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "t", "type": "boolean"},
        {"name": "n", "type": "null"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "x", "type": {"type": "fixed", "name": "X", "size": 4}},
        {"name": "x0", "type": {"type": "fixed", "name": "X0", "size": 0}},
        {"name": "a", "type": {"type": "array", "items": ["null", "long", "string"]}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "double"}}},
        {"name": "u", "type": ["null", "int", "long", "double", "string", "bytes", "E", "X", "boolean"]},
        {"name": "fd", "type": ["float", "double"]},
        {"name": "ns", "type": ["null", "string"]},
        {"name": "sn", "type": ["string", "null"]},
        {"name": "ne", "type": ["E", "null"]},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "k", "type": "string"}, {"name": "v", "type": "int"}]}},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}},
        {"name": "im", "type": {"type": "map", "values": "Inner"}},
        {"name": "ui", "type": ["null", "Inner", {"type": "array", "items": "X"}, {"type": "map", "values": "E"}]},
        {"name": "nulls", "type": {"type": "array", "items": "null"}},
        {"name": "tree", "type": {"type": "record", "name": "Node", "fields": [
            {"name": "v", "type": "long"},
            {"name": "kids", "type": {"type": "array", "items": "Node"}},
            {"name": "next", "type": ["null", "Node"]}]}},
        {"name": "again", "type": "Node"},
    ],
}, named_schemas={})


def _tree(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return st.fixed_dictionaries({"v": st.integers(*INT64), "kids": st.just([]), "next": st.none()})
    return st.fixed_dictionaries({"v": st.integers(*INT64), "kids": st.lists(_tree(depth - 1), max_size=2),
                                  "next": st.none() | _tree(depth - 1)})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_reader_reads_fastavros_datum_for_every_covered_construct(data):
    named: dict[str, Any] = {}
    fields = {f["name"]: f["type"] for f in KITCHEN["fields"] if f["name"] not in ("tree", "again")}
    datum = {name: data.draw(strategy(t, named, omit_defaults=False), label=name) for name, t in fields.items()}
    datum["tree"] = data.draw(_tree(3))
    datum["again"] = data.draw(_tree(1))
    value = fastavro_bytes(KITCHEN, datum)
    assert identical(compile_reader(KITCHEN)(value, 0), _fastavro_read(KITCHEN, value))


def _events() -> list[tuple[Any, bytes]]:
    """A few encoded events touching every construct the schemas use: (schema, value)."""
    def event(event_type: str, version: int, payload: dict[str, Any], to: str | None = "bob") -> tuple[Any, bytes]:
        s = REGISTRY.get(event_type, version)
        return s, Encoder(s).encode_event("e-1", "run", "alice", to, [3, 300], s.validate_payload(payload))
    return [
        event("agent.message", 3, {"kind": "k", "body": "é" * 40, "urgency": "high"}),
        event("agent.message", 3, {"kind": "", "body": "b", "urgency": "low"}, to=None),
        event("run.started", 2, {"swarm": "s", "seed": -2**63, "code_version": "c", "agents": ["a", "bc"],
                                 "hash_seed": 7}),
        event("timer.fired", 1, {"name": "t", "set_offset": 2**40, "clock": "wallclock"}),
        event("state.digest", 1, _simplest(_payload_parsed(REGISTRY.latest("state.digest")), {})),
        event("http.exchange", REGISTRY.latest("http.exchange").version,
              _simplest(_payload_parsed(REGISTRY.latest("http.exchange")), {})),
    ]


def _simplest(t: Any, named: dict[str, Any]) -> Any:
    """A datum of ``t`` with one of everything: arrays and maps of one item, a union's last branch."""
    if isinstance(t, list):
        return _simplest(t[-1], named)
    if isinstance(t, str):
        return named[t] if t in named else {"null": None, "boolean": True, "int": 200, "long": 12345,
                                            "float": 0.5, "double": -0.0, "string": "s", "bytes": b"by"}[t]
    kind = t["type"]
    if kind == "record":
        named[t["name"]] = datum = {f["name"]: _simplest(f["type"], named) for f in t["fields"]}
        return datum
    if kind == "array":
        return [_simplest(t["items"], named)]
    if kind == "map":
        return {"k": _simplest(t["values"], named)}
    if kind == "enum":
        named[t["name"]] = t["symbols"][-1]
        return t["symbols"][-1]
    if kind == "fixed":
        named[t["name"]] = b"f" * t["size"]
        return b"f" * t["size"]
    return _simplest(kind, named)


EVENTS = _events()


# Outside CI, the byte values a varint, a length, an index or a boolean turns on (sign, continuation,
# zero, the extremes) rather than all 256.
_SAMPLED_BYTES = (0x00, 0x01, 0x02, 0x03, 0x3F, 0x40, 0x7E, 0x7F, 0x80, 0x81, 0xC0, 0xFE, 0xFF)


def _damaged(value: bytes) -> list[bytes]:
    """Every truncation, and every value (in CI; else a sample) of every byte after the single-object header."""
    values = range(256) if exhaustive() else _SAMPLED_BYTES
    out = [value[:n] for n in range(HEADER_LEN, len(value))]
    out += [value[:i] + bytes([x]) + value[i + 1:] for i in range(HEADER_LEN, len(value)) for x in values
            if x != value[i]]
    return out


@pytest.mark.parametrize(("schema", "value"), EVENTS, ids=[f"{s.event_type}-v{s.version}-{i}"
                                                          for i, (s, _) in enumerate(EVENTS)])
def test_no_truncation_or_single_byte_change_is_accepted_where_fastavro_refuses(schema, value):
    whole = compile_reader(schema.parsed)
    parsed = _payload_parsed(schema)
    payload = compile_reader(parsed)
    end = _envelope_fields(value)[-1]
    for v in _damaged(value):
        for read, schema_parsed, pos in ((whole, schema.parsed, HEADER_LEN), (payload, parsed, end)):
            ours = _outcome(read, v, pos)
            theirs = _outcome(_fastavro_read, schema_parsed, v, pos)
            if theirs[0] == "error":
                assert ours[0] == "error", (v, ours)
            elif ours[0] == "datum":
                assert identical(ours[1], theirs[1]), (v, ours, theirs)
            else:
                # Refused where fastavro reads something: only bytes no writer writes (a negative
                # index, an over-long varint), or a datum that ends before the value does (fastavro
                # ignores the bytes after it): fastavro's datum is not what the whole value encodes.
                written = fastavro_bytes(schema_parsed, theirs[1])
                assert written != v[pos:], (v, ours)


def test_decoder_refuses_every_damaged_event_that_fastavro_refuses(registry):
    """Through the Decoder (the compiled reader behind decode and decode_fields): an
    UndecodableMessage wherever fastavro cannot read the body."""
    schema, value = EVENTS[0]
    decoder = Decoder(registry)
    for v in _damaged(value)[::7]:
        if _outcome(_fastavro_read, schema.parsed, v, HEADER_LEN)[0] == "error":
            with pytest.raises(UndecodableMessage):
                decoder.decode(v, 5)
            with pytest.raises(UndecodableMessage):
                decoder.decode_fields(MemoryMessage(5, v, None, [], 0))


def _one(field_type: Any) -> Any:
    return fastavro.parse_schema({"type": "record", "name": "One", "fields": [{"name": "f", "type": field_type}]},
                                 named_schemas={})


def _read_both(field_type: Any, body: bytes) -> tuple[tuple[str, Any], tuple[str, Any]]:
    schema = _one(field_type)
    return _outcome(compile_reader(schema), body, 0), _outcome(_fastavro_read, schema, body)


@pytest.mark.parametrize(("field_type", "value"), [
    ("string", ""),
    ("string", "naïve — ü"),
    ("string", "😀𝄞"),  # 4-byte UTF-8
    ("string", "x" * 63),  # the last one-byte length
    ("string", "x" * 64),
    ("string", "x" * 8191),  # the last two-byte length
    ("string", "x" * 8192),
    ("bytes", b""),
    ("bytes", b"\x00" * 200),
    ("long", INT64[0]),  # 10-byte varints
    ("long", INT64[1]),
    ("long", -1),
    ("long", 63),
    ("long", -64),
    ("long", 64),
    ("long", 8191),
    ("long", 8192),
    ("int", -(2**31)),
    ("int", 2**31 - 1),
    ("double", -0.0),
    ("double", math.nan),
    ("double", math.inf),
    ("float", -0.0),
    ("float", math.nan),
    ("float", 0.1),  # a float32, read back as the double nearest it
    ("boolean", True),
    ("boolean", False),
    ({"type": "array", "items": "long"}, []),
    ({"type": "array", "items": "string"}, ["", "a"]),
    ({"type": "map", "values": "string"}, {}),
    ({"type": "map", "values": "long"}, {"b": 1, "a": 2, "": 3}),  # the written order
    (["null", "string"], None),
    (["null", "string"], ""),
    (["string", "null"], None),
    (["null", "long"], INT64[0]),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B"),
    ({"type": "fixed", "name": "F", "size": 3}, b"\x00\xff\x80"),
])
def test_edge_cases_read_fastavros_datum(field_type, value):
    body = fastavro_bytes(_one(field_type), {"f": value})
    ours, theirs = _read_both(field_type, body)
    assert ours[0] == theirs[0] == "datum"
    assert identical(ours[1], theirs[1])


ENUM = {"type": "enum", "name": "E", "symbols": ["A", "B"]}


@pytest.mark.parametrize(("field_type", "body"), [
    ("string", b""),  # nothing at all
    ("string", b"\x06ab"),  # truncated
    ("string", b"\x03abc"),  # a negative length
    ("string", b"\x06\xed\xa0\x80"),  # a lone surrogate's bytes: not UTF-8
    ("string", b"\x04\xc3("),  # a broken two-byte sequence
    ("string", b"\x02\xff"),
    ("string", b"\x08\xf0\x9f\x98"),  # a truncated 4-byte sequence
    ("bytes", b"\x80"),  # a varint cut short
    ("long", b"\xff\xff"),
    ("double", b"\x00" * 7),
    ("float", b"\x00" * 3),
    ("boolean", b""),
    ({"type": "fixed", "name": "F", "size": 4}, b"abc"),
    (["null", "string"], b"\x04"),  # a union branch past the end
    (["null", "string"], b"\x02"),  # the string branch, no string
    (ENUM, b"\x04"),  # an enum index past the end
    (ENUM, b"\x80\x01"),  # ... written in two bytes
    ({"type": "array", "items": "long"}, b"\x02"),  # one item promised, none there
    ({"type": "array", "items": "long"}, b"\x7e\x00"),  # 63 items promised, one byte left
    ({"type": "map", "values": "long"}, b"\x02\x02a"),
])
def test_where_fastavro_refuses_the_compiled_reader_refuses(field_type, body):
    ours, theirs = _read_both(field_type, body)
    assert theirs[0] == "error"
    assert ours[0] == "error"


@pytest.mark.parametrize(("field_type", "body"), [
    ("long", b"\xff" * 9 + b"\x7f"),  # a 10-byte varint beyond 64 bits: fastavro wraps it
    ("long", b"\x82" + b"\x80" * 9 + b"\x00"),  # 11 bytes: fastavro reads 1
    ("long", b"\x80" * 10 + b"\x01"),
    (ENUM, b"\x01"),  # index -1: fastavro gives the last symbol
    (["null", "string"], b"\x01\x02a"),  # branch -1: fastavro reads the last branch
    ("string", b"\x04ab" + b"trailing"),  # bytes after the datum: fastavro ignores them
    ("long", b"\x02\x00"),
    ({"type": "array", "items": "long"}, b"\x00\x00"),
])
def test_the_compiled_reader_refuses_what_no_writer_writes_where_fastavro_reads_something(field_type, body):
    ours, theirs = _read_both(field_type, body)
    assert theirs[0] == "datum"
    assert ours[0] == "error"
    if fastavro_bytes(_one(field_type), theirs[1]) == body[:len(fastavro_bytes(_one(field_type), theirs[1]))]:
        assert isinstance(ours[1], TrailingBytes)  # a whole datum, then more


@pytest.mark.parametrize(("field_type", "body"), [
    ("long", b"\x80\x00"),  # a varint with a needless continuation: 0
    ("long", b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x00"),  # 10 bytes, -1
    ("int", b"\xff\xff\xff\xff\x7f"),  # beyond 32 bits: fastavro does not check an int's range
    ("boolean", b"\x05"),  # any byte but 0 is true
    ({"type": "array", "items": "long"}, b"\x03\x04\x02\x04\x00"),  # a block of -2 items, its byte size 2
    ({"type": "array", "items": "long"}, b"\x02\x02\x02\x04\x00"),  # two blocks of one
    ({"type": "map", "values": "long"}, b"\x04\x02a\x02\x02a\x04\x00"),  # a key twice: the last value
    ({"type": "array", "items": "null"}, b"\x14\x00"),  # ten nulls in no bytes
    (ENUM, b"\x82\x00"),
    (["null", "string"], b"\x82\x00\x02a"),
    (["null", "string"], b"\x80\x00"),
])
def test_odd_but_readable_encodings_read_as_fastavro_reads_them(field_type, body):
    ours, theirs = _read_both(field_type, body)
    assert theirs[0] == "datum"
    assert ours[0] == "datum"
    assert identical(ours[1], theirs[1])


@given(st.integers(*INT64))
def test_read_long_reads_every_long_fastavro_writes(n):
    b = b"\x00" + avro_long(n) + b"\x00"
    assert read_long(b, 1) == (n, len(b) - 1)
    assert _fastavro_read(_one("long"), b, 1)["f"] == n


def test_read_length_refuses_a_negative_length_or_one_past_the_end():
    assert read_length(b"\x06abc", 0) == (3, 1)
    for bad in (b"\x01", b"\x06ab"):
        with pytest.raises(ValueError):
            read_length(bad, 0)


def test_a_datum_may_start_anywhere_in_the_buffer():
    schema = _one("string")
    assert compile_reader(schema)(b"junk\x04ab", 4) == {"f": "ab"}


@pytest.mark.parametrize("field_type", [
    {"type": "long", "logicalType": "timestamp-millis"},
    ["null", {"type": "string", "logicalType": "uuid"}],
])
def test_what_is_not_covered_is_read_by_fastavro(field_type):
    schema = _one(field_type)
    with pytest.raises(Unsupported):
        compile_reader(schema)
    body = fastavro_bytes(schema, {"f": None if isinstance(field_type, list) else 5})
    read = payload_reader(schema)
    assert read(body, 0) == _fastavro_read(schema, body) == fastavro_reader(schema)(body, 0)


def test_a_resolving_read_is_left_to_fastavro_and_a_plain_one_compiled(registry):
    """The Decoder's plans: the newest writer (nothing to resolve) is read by the compiled
    reader, an older one that Avro resolves into the newest by fastavro -- the same datum."""
    decoder = Decoder(registry, upcasters={})
    newest = registry.latest("run.started")
    old = registry.get("run.started", 1)
    assert _ours(decoder._plan(newest.fingerprint, None).read)
    assert not _ours(decoder._plan(old.fingerprint, None).read)
    payload = {"swarm": "s", "seed": 1, "code_version": "c", "agents": ["a"]}
    value = Encoder(old).encode_event("e", "r", "a", None, [], old.validate_payload(payload))
    resolved = fastavro.schemaless_reader(io.BytesIO(value[HEADER_LEN:]), old.parsed, newest.parsed)
    assert identical(decoder.decode(value)[1], resolved)
    assert resolved["payload"]["hash_seed"] is None  # a default filled in: resolution did happen


def test_a_truncated_or_bad_body_is_undecodable_at_its_offset(registry):
    schema = registry.latest("agent.message")
    value = Encoder(schema).encode_event("e", "r", "a", None, [], {"kind": "k", "body": "b", "urgency": "low"})
    for cut in (value[:-1], value[:HEADER_LEN + 3], value[:-1] + b"\x09"):
        with pytest.raises(UndecodableMessage) as info:
            Decoder(registry).decode(cut, 11)
        assert info.value.offset == 11


TAILS = st.binary(min_size=1, max_size=40) | st.sampled_from([b"\x00", b"\x02"])


@pytest.mark.parametrize(("schema", "value"), EVENTS, ids=[f"{s.event_type}-v{s.version}-{i}"
                                                          for i, (s, _) in enumerate(EVENTS)])
@settings(max_examples=examples(40), deadline=None)
@given(tail=TAILS)
def test_a_value_with_bytes_after_its_event_is_refused_by_every_reader(schema, value, tail):
    """A value is the whole value: a valid event followed by anything is not an event. The C and
    Python readers (whole record and payload alone) raise TrailingBytes where fastavro would read
    the event and ignore the rest; the Decoder names it (TrailingBytesInValue, where it ends)."""
    extended = value + tail
    end = _envelope_fields(extended)[-1]
    for read, pos in ((compile_reader(schema.parsed), HEADER_LEN), (compile_reader(_payload_parsed(schema)), end)):
        assert identical(_fastavro_read(schema.parsed if pos == HEADER_LEN else _payload_parsed(schema),
                                        extended, pos),
                         read(value, pos))  # fastavro reads the event and ignores the tail
        with pytest.raises(TrailingBytes) as info:
            read(extended, pos)
        assert (info.value.end, info.value.size) == (len(value), len(extended))
    decoder = Decoder(REGISTRY)
    for decode in (lambda: decoder.decode(extended, 9),
                   lambda: decoder.decode_fields(MemoryMessage(9, extended, None, [], 0))):
        with pytest.raises(TrailingBytesInValue) as named:
            decode()
        assert (named.value.offset, named.value.end, named.value.size) == (9, len(value), len(extended))


def test_a_second_whole_event_appended_to_a_value_makes_it_undecodable(registry):
    schema, value = EVENTS[0]
    twice = value + value
    with pytest.raises(TrailingBytesInValue) as info:
        Decoder(registry).decode(twice, 4)
    assert info.value.end == len(value) and "a second event" in str(info.value)
    resolving = fastavro_reader(schema.parsed, registry.latest(schema.event_type).parsed)  # fastavro's path too
    with pytest.raises(TrailingBytes):
        resolving(twice, HEADER_LEN)
