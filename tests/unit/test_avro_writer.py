"""The compiled payload writer (schema/_avro_writer.py) writes fastavro's bytes for every valid
payload of every schema, and raises wherever fastavro raises: never other bytes."""

from __future__ import annotations

import io
import math
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmlog.schema._avro_writer import (
    Unsupported,
    avro_long,
    avro_string,
    compile_writer,
    fastavro_writer,
    payload_writer,
)
from swarmlog.schema.codec import Decoder, Encoder, _payload_parsed

from ..conftest import examples
from .avro_cases import EVERY_VERSION, IDS, INT32, INT64, REGISTRY
from .avro_cases import fastavro_bytes as _fastavro
from .avro_cases import same as _same
from .avro_cases import strategy as _strategy


def _outcome(write: Any, datum: Any) -> bytes | type:
    try:
        return write(datum)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - the outcome is the point
        return type(exc)


def test_every_schema_in_schemas_is_compiled_not_left_to_fastavro():
    for s in EVERY_VERSION:
        compile_writer(_payload_parsed(s))  # raises Unsupported otherwise


@pytest.mark.parametrize("schema", EVERY_VERSION, ids=IDS)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_writer_writes_fastavros_bytes_for_every_valid_payload(schema, data):
    parsed = _payload_parsed(schema)
    payload = data.draw(_strategy(parsed, {}))
    valid = schema.validate_payload(payload)  # what Encoder.encode_event gets
    fast = compile_writer(parsed)(valid)
    assert fast == _fastavro(parsed, valid)
    # ... and it reads back as the payload (defaults filled in, as every reader sees them)
    decoded = fastavro.schemaless_reader(io.BytesIO(fast), parsed, None)
    expected = fastavro.schemaless_reader(io.BytesIO(_fastavro(parsed, valid)), parsed, None)
    assert _same(decoded, expected)
    assert _same({k: decoded[k] for k in valid}, valid)


@pytest.mark.parametrize("schema", EVERY_VERSION, ids=IDS)
@settings(max_examples=examples(20), deadline=None)
@given(data=st.data())
def test_encoder_writes_the_whole_records_bytes_and_decodes_to_the_payload(schema, data):
    parsed = _payload_parsed(schema)
    valid = schema.validate_payload(data.draw(_strategy(parsed, {})))
    enc = Encoder(schema)
    value = enc.encode_event("e-1", "run", "alice", "bob", [3, 2**40], valid)
    record = {"event_id": "e-1", "run_id": "run", "agent_id": "alice", "event_type": schema.event_type,
              "schema_version": schema.version, "to": "bob", "causes": [3, 2**40], "payload": valid}
    assert value == enc.encode(record)
    decoder = Decoder(REGISTRY)  # as swarmlog decodes: across an upcaster (http.exchange v1), never resolved
    writer, rec = decoder.decode(value)
    if writer is REGISTRY.latest(schema.event_type):
        assert _same(rec["payload"], {**schema.defaults, **valid})


# A schema with every covered construct, beyond what schemas/ uses today.
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
        {"name": "a", "type": {"type": "array", "items": ["null", "long", "string"]}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "double"}}},
        {"name": "u", "type": ["null", "int", "long", "double", "string", "bytes", "E", "X", "boolean"]},
        {"name": "fd", "type": ["float", "double"]},
        {"name": "ns", "type": ["null", "string"], "default": None},
        {"name": "ne", "type": ["E", "null"], "default": "B"},
        {"name": "dl", "type": "long", "default": 7},
        {"name": "dd", "type": "double", "default": 1},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "k", "type": "string"}, {"name": "v", "type": "int", "default": 1}]}},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}, "default": []},
        {"name": "im", "type": {"type": "map", "values": "Inner"}, "default": {}},
    ],
}, named_schemas={})


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_writer_writes_fastavros_bytes_for_every_covered_construct(data):
    datum = data.draw(_strategy(KITCHEN, {}))
    fast = compile_writer(KITCHEN)(datum)
    assert fast == _fastavro(KITCHEN, datum)
    back = fastavro.schemaless_reader(io.BytesIO(fast), KITCHEN, None)
    assert _same(back, fastavro.schemaless_reader(io.BytesIO(_fastavro(KITCHEN, datum)), KITCHEN, None))


ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64])
    | st.floats() | st.text() | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
    | st.binary() | st.builds(bytearray, st.binary()),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=3), inner,
                                                                                           max_size=3),
    max_leaves=6,
)


KITCHEN_DATUM = {"s": "s", "b": b"b", "i": 1, "l": -1, "f": 0.5, "d": -0.0, "t": True, "n": None, "e": "C",
                 "x": b"xxxx", "a": [None, 1, "a"], "m": {"k": [1.5]}, "u": b"XXXX", "fd": 2.5, "ns": "n", "ne": None,
                 "dl": 2**40, "dd": math.nan, "inner": {"k": "k"}, "inners": [{"k": "", "v": -5}],
                 "im": {"": {"k": "z"}}}


@pytest.mark.parametrize("field", [f["name"] for f in KITCHEN["fields"]])
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ANYTHING)
def test_never_bytes_fastavro_would_not_write_and_an_error_where_it_raises(field, value):
    """Any value in any field, valid or not: our bytes are fastavro's, or we raise; where
    fastavro raises we raise too."""
    datum = {**KITCHEN_DATUM, field: value}
    ours = _outcome(compile_writer(KITCHEN), datum)
    theirs = _outcome(lambda d: _fastavro(KITCHEN, d), datum)
    if isinstance(ours, bytes):
        assert ours == theirs
    if not isinstance(theirs, bytes):
        assert not isinstance(ours, bytes)


def _one(field_type: Any) -> Any:
    return fastavro.parse_schema({"type": "record", "name": "One", "fields": [{"name": "f", "type": field_type}]},
                                 named_schemas={})


@pytest.mark.parametrize(("field_type", "value"), [
    ("string", ""),
    ("string", "ascii"),
    ("string", "naïve — ü"),
    ("string", "😀𝄞"),  # 4-byte UTF-8
    ("string", "x" * 63),  # the last one-byte length
    ("string", "x" * 64),
    ("string", "é" * 32),  # 64 bytes from 32 characters
    ("string", "x" * 8191),  # the last length from the writer's table
    ("string", "x" * 8192),
    ("string", "😀" * 2048),  # 8192 bytes from 2048 characters
    ("bytes", b""),
    ("bytes", b"\x00" * 200),
    ("long", INT64[0]),
    ("long", INT64[1]),
    ("long", -1),
    ("long", 63),
    ("long", -64),
    ("long", 64),
    ("long", 8191),  # the last two-byte varint
    ("long", 8192),
    ("long", -8192),
    ("long", -8193),
    ("int", INT32[0]),
    ("int", INT32[1]),
    ("double", -0.0),
    ("double", math.nan),
    ("double", -math.nan),
    ("double", math.inf),
    ("double", 5),  # an int in a double field: float() first, as fastavro
    ("float", 1e300),  # beyond float32: an infinity, as fastavro's C cast
    ("float", -1e300),
    ("float", 3.4028235e38),
    ("float", math.nan),
    ({"type": "array", "items": "long"}, []),
    ({"type": "map", "values": "string"}, {}),
    ({"type": "map", "values": "string"}, {"": "", "ü": "😀"}),
    (["null", "string"], None),
    (["null", "long"], None),
    (["null", "string", "bytes"], None),
    (["null", "string", "bytes"], b""),
    (["null", "string", "bytes"], ""),
    (["string", "null"], None),
    (["null", "int", "long"], 2**40),  # not an int: the long branch
    (["float", "double"], 0.1),  # the double, though float comes first
    ({"type": "array", "items": ["null", "string"]}, [None, "a", None]),
    ({"type": "array", "items": {"type": "fixed", "name": "F", "size": 2}}, [b"ab", bytearray(b"cd")]),
    ({"type": "array", "items": {"type": "fixed", "name": "F", "size": 2}}, []),
    ({"type": "array", "items": "long"}, [2**20, -(2**20) - 1, 2**27, -(2**27) - 1, 2**62]),
])
def test_edge_cases_write_fastavros_bytes(field_type, value):
    schema = _one(field_type)
    datum = {"f": value}
    assert compile_writer(schema)(datum) == _fastavro(schema, datum)


@pytest.mark.parametrize(("field_type", "value"), [
    ("string", "\ud800"),  # a lone surrogate has no UTF-8
    ("string", "ok\udfffok"),
    (["null", "string"], "\udc80"),
    ({"type": "map", "values": "long"}, {"\ud800": 1}),
    ({"type": "array", "items": "string"}, ["a", "\ud83d"]),
    ("long", INT64[1] + 1),
    ("long", INT64[0] - 1),
    ({"type": "array", "items": "long"}, [2**64]),
    (["null", "long"], 2**63),
    ("string", b"bytes"),
    ("string", None),
    ("bytes", "text"),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, "B"),
    ({"type": "fixed", "name": "F", "size": 2}, b"abc"),
    ({"type": "array", "items": {"type": "fixed", "name": "F", "size": 2}}, [b"ab", b"c"]),
    ({"type": "array", "items": {"type": "fixed", "name": "F", "size": 2}}, [b"ab", "cd"]),
    (["null", "string"], 5),
    ("double", 2**1100),
])
def test_where_fastavro_raises_the_compiled_writer_raises(field_type, value):
    schema = _one(field_type)
    with pytest.raises(Exception):  # noqa: B017 - fastavro's type, whichever
        _fastavro(schema, {"f": value})
    with pytest.raises((ValueError, TypeError, OverflowError, UnicodeEncodeError, KeyError, struct.error)):
        compile_writer(schema)({"f": value})


@pytest.mark.parametrize(("field_type", "value"), [
    ("int", 2**31),  # fastavro writes it as a long; no validator lets it through
    ("int", -(2**31) - 1),
    ("bytes", memoryview(b"ab")),
])
def test_where_fastavro_writes_what_no_validator_accepts_the_compiled_writer_raises(field_type, value):
    with pytest.raises((OverflowError, TypeError)):
        compile_writer(_one(field_type))({"f": value})


def test_the_kitchen_datum_is_written_as_fastavro_writes_it():
    assert compile_writer(KITCHEN)(KITCHEN_DATUM) == _fastavro(KITCHEN, KITCHEN_DATUM)


def test_a_missing_field_is_written_as_its_default_like_fastavro():
    schema = _one({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long", "default": 3}, {"name": "b", "type": ["null", "string"], "default": None},
        {"name": "c", "type": "string", "default": "ü"}]})
    for datum in ({"f": {}}, {"f": {"a": 1}}, {"f": {"c": ""}}):
        assert compile_writer(schema)(datum) == _fastavro(schema, datum)


def test_a_missing_field_without_default_raises():
    with pytest.raises(KeyError):
        compile_writer(_one("string"))({})


def test_a_recursive_record_is_compiled():
    schema = fastavro.parse_schema({"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "long"}, {"name": "kids", "type": {"type": "array", "items": "Node"}}]},
        named_schemas={})
    datum = {"v": 1, "kids": [{"v": 2, "kids": []}, {"v": -3, "kids": [{"v": 4, "kids": []}]}]}
    assert compile_writer(schema)(datum) == _fastavro(schema, datum)


@pytest.mark.parametrize("field_type", [
    {"type": "long", "logicalType": "timestamp-millis"},
    ["null", {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}],
    ["null", {"type": "array", "items": "long"}],
    ["null", {"type": "map", "values": "long"}],
])
def test_what_is_not_covered_is_written_by_fastavro(field_type):
    schema = _one(field_type)
    with pytest.raises(Unsupported):
        compile_writer(schema)
    write = payload_writer(schema)
    datum = {"f": None if isinstance(field_type, list) else 5}
    assert write(datum) == _fastavro(schema, datum) == fastavro_writer(schema)(datum)


@given(st.integers(*INT64) | st.integers(-(2**15), 2**15) | st.integers(-(2**28), 2**28))
def test_avro_long_is_fastavros_long(n):
    assert avro_long(n) == _fastavro(_one("long"), {"f": n})


@given(st.text())
def test_avro_string_is_fastavros_string(s):
    assert avro_string(s) == _fastavro(_one("string"), {"f": s})
