"""An event's bytes in C (swarmlog.schema._avro_native.EventEncoder, Encoder.encode_event where it
is built): the same bytes as the Python path (``Encoder._encode_event``, the generated payload
writers, fastavro) for every valid payload of every schema, and for anything else the Python
path's outcome exactly -- its bytes or its error -- since C hands over what it does not accept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmlog.schema import _avro_writer, codec
from swarmlog.schema._avro_writer import Unsupported, avro_long, avro_string, compile_writer, native_program
from swarmlog.schema.codec import Encoder, _payload_parsed

from ..conftest import cannot_run_here, examples
from .avro_cases import EVERY_VERSION, IDS, REGISTRY, fastavro_bytes
from .avro_cases import strategy as _strategy

_native = codec._avro_native


@pytest.fixture(autouse=True)
def _built() -> None:
    if _native is None:
        cannot_run_here("swarmlog.schema._avro_native is not built here")


def _outcome(fn: Callable[..., bytes], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared
        return type(exc)


def test_every_schema_in_schemas_is_written_in_c() -> None:
    covered = set()
    for s in EVERY_VERSION:
        assert type(Encoder(s).encode_event).__qualname__ == "builtin_function_or_method"  # the envelope in C
        try:
            native_program(_payload_parsed(s))
            covered.add(s.event_type)
        except Unsupported:  # a union of three: the payload by the Python writer
            pass
    assert {"agent.message", "run.started", "state.digest", "effect.recorded", "llm.call", "timer.set"} <= covered


@pytest.mark.parametrize("schema", EVERY_VERSION, ids=IDS)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), causes=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
       names=st.tuples(st.text(max_size=70), st.text(max_size=3), st.text(max_size=3), st.none() | st.text(max_size=3)))
def test_c_writes_the_python_paths_bytes_for_every_valid_payload(schema, data, causes, names) -> None:
    valid = schema.validate_payload(data.draw(_strategy(_payload_parsed(schema), {})))
    enc = Encoder(schema)
    event_id, run_id, agent, to = names
    ours = enc.encode_event(event_id, run_id, agent, to, causes, valid)
    assert ours == enc._encode_event(event_id, run_id, agent, to, causes, valid)
    record = {"event_id": event_id, "run_id": run_id, "agent_id": agent, "event_type": schema.event_type,
              "schema_version": schema.version, "to": to, "causes": causes, "payload": valid}
    assert ours == enc.encode(record)  # fastavro's


ODD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64])
    | st.floats() | st.sampled_from([1e39, -1e39]) | st.text(max_size=4)
    | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2) | st.binary(max_size=5)
    | st.builds(bytearray, st.binary(max_size=4)) | st.sampled_from(["A", "B", "C", "D"]),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=2) | st.integers(0, 3), inner, max_size=3),
    max_leaves=6,
)

# Every form the C writer covers: primitives, enum, fixed, arrays, maps, nested records, and each
# ["null", T] it writes; defaults (a missing field is the Python writer's to fill).
ALL = fastavro.parse_schema({
    "type": "record", "name": "All", "namespace": "t",
    "fields": [
        {"name": "s", "type": "string"}, {"name": "b", "type": "bytes"}, {"name": "i", "type": "int"},
        {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
        {"name": "t", "type": "boolean"}, {"name": "n", "type": "null"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "x", "type": {"type": "fixed", "name": "X", "size": 4}},
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "an", "type": {"type": "array", "items": "null"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "os", "type": ["null", "string"], "default": None}, {"name": "ol", "type": ["null", "long"]},
        {"name": "oi", "type": ["null", "int"]}, {"name": "od", "type": ["null", "double"]},
        {"name": "of", "type": ["null", "float"]}, {"name": "ob", "type": ["null", "boolean"]},
        {"name": "oy", "type": ["null", "bytes"]}, {"name": "oe", "type": ["null", "E"]},
        {"name": "ox", "type": ["null", "X"]},
        {"name": "dl", "type": "long", "default": 7}, {"name": "dd", "type": "double", "default": 1.5},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "k", "type": "string"}, {"name": "v", "type": "int", "default": 1}]}},
        {"name": "inners", "type": {"type": "array", "items": "Inner"}},
        {"name": "im", "type": {"type": "map", "values": "Inner"}},
    ],
}, named_schemas={})

DATUM = {"s": "s", "b": b"b", "i": 1, "l": -1, "f": 0.5, "d": -0.0, "t": True, "n": None, "e": "C", "x": b"xxxx",
         "a": [1, 2**40], "an": [None], "m": {"k": "v"}, "os": "é", "ol": None, "oi": 3, "od": math.nan,
         "of": None, "ob": False, "oy": b"", "oe": "A", "ox": b"yyyy", "dl": 2**40, "dd": math.inf,
         "inner": {"k": "k", "v": 1}, "inners": [{"k": "", "v": -5}], "im": {"": {"k": "z", "v": 2}}}


_HANDED: list[Any] = []  # payloads the C encoder handed to the Python writer


def _encoders(parsed: Any) -> tuple[Callable[..., bytes], Callable[..., bytes]]:
    """The C encoder of an event with ``parsed`` as its payload, and the Python path's equivalent."""
    prefix, type_version = b"\xc3\x01" + bytes(8), avro_string("t.All") + avro_long(1)
    python_writer = compile_writer(parsed)

    def write(payload: Any) -> bytes:
        _HANDED.append(payload)
        return python_writer(payload)

    def python(event_id: str, run_id: str, agent: str, to: str | None, causes: Any, payload: Any) -> bytes:
        to_b = b"\x00" if to is None else b"\x02" + avro_string(to)
        causes_b = avro_long(len(causes)) + b"".join(map(avro_long, causes)) + b"\x00" if causes else b"\x00"
        return b"".join((prefix, avro_string(event_id), avro_string(run_id), avro_string(agent), type_version, to_b,
                         causes_b, python_writer(payload)))

    c = _native.EventEncoder(prefix, type_version, native_program(parsed), write, python)
    return c.encode_event, python


def test_the_all_datum_is_written_as_the_python_path_and_fastavro_write_it() -> None:
    c, python = _encoders(ALL)
    _HANDED.clear()
    ours = c("e", "r", "a", None, [], DATUM)
    assert _HANDED == []  # written in C, not handed over
    assert ours == python("e", "r", "a", None, [], DATUM)
    assert ours.endswith(fastavro_bytes(ALL, DATUM))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_c_writes_fastavros_bytes_for_every_valid_datum_of_every_form(data) -> None:
    datum = data.draw(_strategy(ALL, {}))
    c, python = _encoders(ALL)
    ours = c("e", "r", "a", "b", [1], datum)
    assert ours == python("e", "r", "a", "b", [1], datum)
    assert ours.endswith(fastavro_bytes(ALL, datum))


@pytest.mark.parametrize("field", [f["name"] for f in ALL["fields"]])
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ODD)
def test_anything_in_any_field_has_the_python_paths_outcome(field, value) -> None:
    c, python = _encoders(ALL)
    datum = {**DATUM, field: value}
    assert _outcome(c, "e", "r", "a", None, (), datum) == _outcome(python, "e", "r", "a", None, (), datum)
    missing = {k: v for k, v in DATUM.items() if k != field}  # its default, or the Python writer's KeyError
    assert _outcome(c, "e", "r", "a", None, (), missing) == _outcome(python, "e", "r", "a", None, (), missing)


class _Str(str):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


EDGES = [  # (field, value): bounds, near-misses of a type, subclasses; C writes it or hands it over
    ("i", 2**31 - 1), ("i", 2**31), ("i", -(2**31)), ("i", -(2**31) - 1), ("i", True), ("i", 1.0),
    ("oi", 2**31), ("oi", -(2**31) - 1), ("oi", False),
    ("l", 2**63 - 1), ("l", 2**63), ("l", -(2**63)), ("l", -(2**63) - 1), ("l", True), ("ol", 2**63), ("ol", True),
    ("f", 1e39), ("f", -1e39), ("f", 3.4e38), ("f", 1), ("f", math.nan), ("of", 1e39), ("of", 2),
    ("d", 1), ("d", True), ("od", 1), ("od", -0.0), ("dd", 2**70),
    ("t", 1), ("t", 0), ("t", None), ("ob", 1),
    ("s", _Str("sub")), ("s", "\ud800"), ("s", b"bytes"), ("os", _Str("x")), ("os", "\udfff"), ("os", 1),
    ("b", bytearray(b"ab")), ("b", "str"), ("oy", bytearray(b"")), ("b", memoryview(b"m")),
    ("e", "D"), ("e", _Str("A")), ("e", 0), ("oe", "D"), ("oe", _Str("B")),
    ("x", b"abc"), ("x", b"abcde"), ("x", bytearray(b"abcd")), ("ox", b"abc"),
    ("a", (1, 2)), ("a", [1, True]), ("a", [1, 2**64]), ("a", []), ("a", ()), ("a", {1: 2}), ("a", "str"),
    ("an", [1, "x", None]), ("an", []),
    ("m", {}), ("m", _Dict(k="v")), ("m", {1: "v"}), ("m", {"k": 1}), ("m", {_Str("k"): "v"}), ("m", [("k", "v")]),
    ("inner", _Dict(k="k", v=1)), ("inner", {"k": "k"}), ("inner", {"k": "k", "v": 2**40}), ("inner", None),
    ("inners", [{"k": "a", "v": 1}, {"k": "b"}]), ("im", {"x": {"k": "k", "v": 1}}),
]


def _edge_id(field: str, value: object) -> str:
    shown = f"memoryview({bytes(value)!r})" if isinstance(value, memoryview) else repr(value)  # no address
    return f"{field}={shown}"[:40]


@pytest.mark.parametrize(("field", "value"), EDGES, ids=[_edge_id(f, v) for f, v in EDGES])
def test_each_edge_has_the_python_paths_outcome(field, value) -> None:
    c, python = _encoders(ALL)
    datum = {**DATUM, field: value}
    assert _outcome(c, "e", "r", "a", None, (), datum) == _outcome(python, "e", "r", "a", None, (), datum)


ENVELOPE_EDGES = [("id", _Str("e")), ("id", "\ud800"), ("agent", 1), ("to", _Str("b")), ("to", b"b"),
                  ("causes", [True]), ("causes", [2**63]), ("causes", [-(2**63)]), ("causes", (1, 2)),
                  ("causes", range(3)), ("causes", [1.0]), ("causes", [])]


@pytest.mark.parametrize(("part", "value"), ENVELOPE_EDGES, ids=[f"{p}={v!r}" for p, v in ENVELOPE_EDGES])
def test_each_envelope_edge_has_the_python_paths_outcome(part, value) -> None:
    enc = Encoder(REGISTRY.latest("agent.message"))
    args = {"id": "e", "agent": "a", "to": "b", "causes": [1]}
    args[part] = value
    call = (args["id"], "run", args["agent"], args["to"], args["causes"], {"kind": "k", "body": "b", "urgency": "low"})
    assert _outcome(enc.encode_event, *call) == _outcome(enc._encode_event, *call)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_id=ODD, agent=ODD, to=ODD, causes=ODD)
def test_anything_in_the_envelope_has_the_python_paths_outcome(event_id, agent, to, causes) -> None:
    enc = Encoder(REGISTRY.latest("agent.message"))
    payload = {"kind": "k", "body": "b", "urgency": "normal"}
    assert _outcome(enc.encode_event, event_id, "run", agent, to, causes, payload) \
        == _outcome(enc._encode_event, event_id, "run", agent, to, causes, payload)


def test_what_c_does_not_cover_is_left_to_the_python_writer() -> None:
    for field_type in (["null", "string", "long"], ["string", "null"], {"type": "long", "logicalType": "x"},
                       ["null", {"type": "array", "items": "long"}]):
        parsed = fastavro.parse_schema({"type": "record", "name": "R", "fields": [{"name": "f", "type": field_type}]},
                                       named_schemas={})
        with pytest.raises(Unsupported):
            native_program(parsed)
    recursive = fastavro.parse_schema({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}, named_schemas={})
    with pytest.raises(Unsupported):
        native_program(recursive)
    # Such a payload is written by the Python writer behind the C envelope: the same bytes.
    prefix, tv = b"\xc3\x01" + bytes(8), avro_string("t") + avro_long(1)
    parsed = fastavro.parse_schema({"type": "record", "name": "U", "fields": [
        {"name": "f", "type": ["null", "string", "long"]}]}, named_schemas={})
    write = _avro_writer.payload_writer(parsed)
    c = _native.EventEncoder(prefix, tv, None, write, lambda *a: b"")
    assert c.encode_event("e", "r", "a", None, [], {"f": 5}).endswith(fastavro_bytes(parsed, {"f": 5}))


def test_bad_programs_are_refused_at_construction() -> None:
    with pytest.raises(ValueError):
        _native.EventEncoder(b"", b"", (99,), print, print)
    with pytest.raises(ValueError):
        _native.EventEncoder(b"", b"", (_native.RECORD, ("a",), ()), print, print)
    with pytest.raises(TypeError):
        _native.EventEncoder(b"", b"", None, None, print)
