"""Avro binary written by hand: the primitives, and payload writers compiled from a schema.

The one home of Avro's binary encoding on the write side (:mod:`.codec` writes the envelope
with :func:`avro_long` and :func:`avro_string`; the payload with a writer from
:func:`payload_writer`).

Why compiled: ``fastavro.schemaless_writer`` walks the schema for every datum; for a payload
of two strings and an enum that walk is most of what an event's encoding takes (``append.*``;
the figures in bench/README.md, "The figures behind the code's comments").
:func:`compile_writer` walks the parsed schema once and builds (``exec``) one Python function
per record whose body writes each field directly: a string is ``str.encode``, its length's
bytes from a table (under 8 KiB), a join; an enum a dict lookup of its index's bytes.

**Same bytes, or an error.** For every payload the strict pydantic validator accepts
(``EventSchema.validate_payload``) the bytes are fastavro's; where fastavro raises, this
raises too (not necessarily the same exception type). Where fastavro writes something
for a datum no validator accepts (a bool or a float as an ``int``, a memoryview as
``bytes``, an ``int`` out of 32 bits, a tuple in a union), this may raise instead: it
never writes bytes fastavro would not. fastavro's own semantics are kept where they give
bytes: a missing field with a default writes the default as fastavro does (``datum.get``);
a ``float``/``double`` record field goes through ``float()`` first; a ``float`` beyond
float32 is written as an infinity (C's cast); a ``boolean`` is written by truthiness;
arrays and maps are one block. Held by ``tests/unit/test_avro_writer.py`` (hypothesis over
every schema in ``schemas/``).

**In C.** :func:`native_program` turns a payload schema into the program of
``_avro_native.EventEncoder``, which :class:`.codec.Encoder` uses for ``encode_event`` where
the C module is built: exact types in C, everything else handed to the writers here.

**Covered:** records (nested, named, recursive), ``null``, ``boolean``, ``int``, ``long``,
``float``, ``double``, ``bytes``, ``string``, ``enum``, ``fixed``, ``array``, ``map``, and
unions whose branches are among those but for ``array``, ``map`` and ``record`` (a branch is
chosen as fastavro does: the first whose validation passes, ``double`` preferred to
``float``). **Not covered, written by fastavro** (:func:`payload_writer` falls back, the
whole payload): any ``logicalType``, ``error`` types, and unions with an ``array``,
``map`` or ``record`` branch (fastavro picks a record branch by counting matching
fields, and an array or map branch by validating every item).
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable
from typing import Any

import fastavro

logger = logging.getLogger(__name__)

Writer = Callable[[Any], bytes]

SMALL = [bytes([i]) for i in range(0x80)]
"""The one-byte varints: ``SMALL[z]`` for a zigzagged value ``z < 0x80``."""

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_pack_double = struct.Struct("<d").pack
_pack_float32 = struct.Struct("<f").pack
_encode = str.encode  # TypeError for anything but a str, as fastavro's "must be string"


def avro_long(n: int) -> bytes:
    """Avro int/long: zigzag, then 7 bits a byte, low first. OverflowError outside 64 bits."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return SMALL[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x10000000:  # offsets and steps up to 2**27: three or four bytes, no loop
        if n < 0x200000:
            return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, ((n >> 14) & 0x7F) | 0x80, n >> 21))
    if n >> 64:  # zigzag of a value outside [-2**63, 2**63) (fastavro: "too large to convert to C long")
        raise OverflowError("Python int too large to convert to C long")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_LENGTHS_CACHED = 8192
_lengths: list[bytes] | None = None


def _length_table() -> list[bytes]:
    """``avro_long(n)`` for every ``n < 8192``, a list index away: a compiled writer's string lengths.

    A string of 64 to 8191 bytes (an LLM message's body) has a two-byte length; computing it
    cost more than the rest of a short payload's writing. Built on the first compile (about
    300 kB, a few ms), not at import: a process that only reads never pays for it.
    """
    global _lengths
    table = _lengths
    if table is None:  # built whole, then published: a thread never sees half a table
        table = [SMALL[z] for z in range(0, 0x80, 2)]
        table += [bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(0x80, _LENGTHS_CACHED << 1, 2)]
        _lengths = table
    return table


def avro_string(s: str) -> bytes:
    """Avro string: the UTF-8 length, then the bytes. UnicodeEncodeError on a lone surrogate."""
    b = _encode(s)
    n = len(b)
    return (SMALL[n << 1] if n < 0x40 else avro_long(n)) + b


def _avro_int(n: int) -> bytes:
    if not _INT_MIN <= n <= _INT_MAX:
        raise OverflowError(f"{n} does not fit an Avro int (32 bits)")
    return avro_long(n)


def _avro_bytes(b: bytes) -> bytes:
    if not isinstance(b, (bytes, bytearray)):
        raise TypeError(f"a bytes-like object is required, not {type(b).__name__!r}")
    n = len(b)
    return (SMALL[n << 1] if n < 0x40 else avro_long(n)) + b


def _avro_float(x: float) -> bytes:
    try:
        return _pack_float32(x)
    except OverflowError:  # fastavro casts to a C float: beyond float32 is an infinity
        return _pack_float32(float("inf") if x > 0 else float("-inf"))


def _avro_boolean(v: Any) -> bytes:
    return b"\x01" if v else b"\x00"


def _avro_null(v: Any) -> bytes:
    return b""


class Unsupported(Exception):
    """The schema uses something :func:`compile_writer` (or ``_avro_reader.compile_reader``)
    does not cover (see the module docs)."""


# fastavro's union-branch validation (fastavro._validation), for the branches compiled here.
def _is_null(v: Any) -> bool:
    return v is None


def _is_boolean(v: Any) -> bool:
    return isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _INT_MIN <= v <= _INT_MAX


def _is_long(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _LONG_MIN <= v <= _LONG_MAX


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_string(v: Any) -> bool:
    return isinstance(v, str)


def _is_bytes(v: Any) -> bool:
    return isinstance(v, (bytes, bytearray))


_PRIMITIVE_WRITERS: dict[str, tuple[Writer, Callable[[Any], bool]]] = {
    "null": (_avro_null, _is_null),
    "boolean": (_avro_boolean, _is_boolean),
    "int": (_avro_int, _is_int),
    "long": (avro_long, _is_long),
    "float": (_avro_float, _is_real),
    "double": (_pack_double, _is_real),
    "string": (avro_string, _is_string),
    "bytes": (_avro_bytes, _is_bytes),
}


class _Compiler:
    """Walks one parsed schema; every record becomes a generated function in ``self.ns``."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_N": _length_table(), "_L": avro_long, "_enc": _encode}
        self.named: dict[str, Any] = {}  # full name -> its schema (parsed schemas name a type once)
        self.records: dict[str, str] = {}  # full name -> its function's name in ns
        self.writers: dict[str, Writer] = {}  # full name -> writer (enum, fixed)

    def const(self, value: Any) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = value
        return name

    def writer(self, schema: Any) -> Writer:
        """A callable writing ``schema``'s datum (no ``float()`` first: items, values, branches)."""
        if isinstance(schema, str):
            if schema in _PRIMITIVE_WRITERS:
                return _PRIMITIVE_WRITERS[schema][0]
            if schema in self.records:
                fname = self.records[schema]
                ns = self.ns
                return lambda v: ns[fname](v)  # bound late: the record may be in the making (recursive)
            if schema in self.writers:
                return self.writers[schema]
            raise Unsupported(f"unknown type name {schema!r}")
        if isinstance(schema, list):
            return self.union(schema)
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        kind = schema["type"]
        if kind in _PRIMITIVE_WRITERS:
            return _PRIMITIVE_WRITERS[kind][0]
        if kind == "record":
            fname = self.record(schema)
            return self.ns[fname]
        if kind == "enum":
            w = self.enum(schema)
        elif kind == "fixed":
            w = self.fixed(schema)
        elif kind == "array":
            w = self.array(schema)
        elif kind == "map":
            w = self.map(schema)
        else:
            raise Unsupported(f"type {kind!r}")
        if kind in ("enum", "fixed"):
            self.named[schema["name"]] = schema
            self.writers[schema["name"]] = w
        return w

    def resolve(self, schema: Any) -> Any:
        """A named reference's schema (parse_schema leaves later uses of a name as the name)."""
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        return schema

    @staticmethod
    def enum(schema: dict[str, Any]) -> Writer:
        indexes = {symbol: avro_long(i) for i, symbol in enumerate(schema["symbols"])}

        def write_enum(v: Any) -> bytes:
            try:
                return indexes[v]
            except (KeyError, TypeError):
                raise ValueError(f"{v!r} is not a symbol of enum {schema['name']}") from None

        return write_enum

    @staticmethod
    def fixed(schema: dict[str, Any]) -> Writer:
        size = schema["size"]

        def write_fixed(v: Any) -> bytes:
            if not isinstance(v, (bytes, bytearray)) or len(v) != size:
                raise ValueError(f"{v!r} is not {size} bytes (fixed {schema['name']})")
            return bytes(v)

        return write_fixed

    def array(self, schema: dict[str, Any]) -> Writer:
        item = self.writer(schema["items"])
        items = self.resolve(schema["items"])
        if isinstance(items, dict) and items.get("type") == "fixed" and "logicalType" not in items:
            return self._fixed_array(items)

        def write_array(v: Any) -> bytes:
            n = len(v)
            if not n:
                return b"\x00"
            return avro_long(n) + b"".join(map(item, v)) + b"\x00"  # one block, then 0

        return write_array

    @staticmethod
    def _fixed_array(items: dict[str, Any]) -> Writer:
        """An array of ``fixed`` (a ``state.digest`` record's 32-byte digests, one a step of its
        transaction): every item checked as :meth:`fixed` does, then the items' bytes joined
        as they are (a fixed is its bytes, no length), no call per item."""
        size = items["size"]

        def write_fixed_array(v: Any) -> bytes:
            n = len(v)
            if not n:
                return b"\x00"
            for x in v:
                if not isinstance(x, (bytes, bytearray)) or len(x) != size:
                    raise ValueError(f"{x!r} is not {size} bytes (fixed {items['name']})")
            return avro_long(n) + b"".join(v) + b"\x00"

        return write_fixed_array

    def map(self, schema: dict[str, Any]) -> Writer:
        value = self.writer(schema["values"])

        def write_map(v: Any) -> bytes:
            n = len(v)
            if not n:
                return b"\x00"
            return avro_long(n) + b"".join([avro_string(k) + value(x) for k, x in v.items()]) + b"\x00"

        return write_map

    def union(self, schema: list[Any]) -> Writer:
        branches: list[tuple[Callable[[Any], bool], bytes, Writer]] = []
        kinds = [self._kind(b) for b in schema]
        for i, branch in enumerate(schema):
            kind = kinds[i]
            if kind == "float" and "double" in kinds[i + 1:]:
                continue  # fastavro prefers a later double to a float (a Python float is a double)
            resolved = self.resolve(branch)
            if kind in _PRIMITIVE_WRITERS:
                test = _PRIMITIVE_WRITERS[kind][1]
            elif kind == "enum":
                symbols = list(resolved["symbols"])
                test = symbols.__contains__
            elif kind == "fixed":
                size = resolved["size"]

                def test(v: Any, size: int = size) -> bool:
                    return isinstance(v, bytes) and len(v) == size
            else:
                raise Unsupported(f"a union with a {kind!r} branch")
            branches.append((test, avro_long(i), self.writer(branch)))

        def write_union(v: Any) -> bytes:
            for test, index, write in branches:
                if test(v):
                    return index + write(v)
            raise ValueError(f"{v!r} (type {type(v)}) do not match {schema}")

        return write_union

    def _kind(self, schema: Any) -> str:
        schema = self.resolve(schema)
        if isinstance(schema, str):
            return "record" if schema in self.records else schema
        if isinstance(schema, list):
            return "union"
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        return str(schema["type"])

    def record(self, schema: dict[str, Any]) -> str:
        """Generate the record's function; its name in ``self.ns``."""
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        full = schema["name"]
        fname = f"_rec{len(self.records)}"
        self.records[full] = fname
        body: list[str] = []
        parts: list[str] = []
        for i, field in enumerate(schema["fields"]):
            name, ftype = field["name"], field["type"]
            # As fastavro: a missing field is written as its default (what datum.get gives).
            get = f"d[{name!r}]" if "default" not in field else f"d.get({name!r}, {self.const(field['default'])})"
            kind = self._kind(ftype)
            if kind == "null":
                continue  # zero bytes, whatever the datum (fastavro reads nothing either)
            if kind == "string":
                body.append(f"    v{i} = _enc({get}); n = len(v{i})")
                body.append(f"    h{i} = _N[n] if n < {_LENGTHS_CACHED} else _L(n)")
                parts += [f"h{i}", f"v{i}"]
            elif kind == "union" and [self._kind(b) for b in ftype] == ["null", "string"]:
                body.append(f"    x = {get}")
                body.append(f"    if x is None: h{i} = b'\\x00'")
                body.append(f"    else: v = _enc(x); n = len(v); "
                            f"h{i} = b'\\x02' + (_N[n] if n < {_LENGTHS_CACHED} else _L(n)) + v")
                parts.append(f"h{i}")
            elif ftype in ("float", "double"):  # fastavro: float() of such a record field's datum first
                w = self.const(self.writer(ftype))
                body.append(f"    h{i} = {w}(float({get}))")
                parts.append(f"h{i}")
            else:
                w = self.const(self.writer(ftype))
                body.append(f"    h{i} = {w}({get})")
                parts.append(f"h{i}")
        if not parts:
            src = f"def {fname}(d):\n    return b''\n"
        else:
            src = f"def {fname}(d):\n" + "\n".join(body) + f"\n    return b''.join(({', '.join(parts)},))\n"
        exec(compile(src, f"<avro writer {full}>", "exec"), self.ns)  # noqa: S102 - our own generated source
        return fname


def compile_writer(parsed: Any) -> Writer:
    """A function writing the Avro binary of a record of ``parsed`` (a ``fastavro.parse_schema``
    result); raises :class:`Unsupported` for what is not covered (the module doc lists it)."""
    if isinstance(parsed, dict) and parsed.get("type") == "record":
        compiler = _Compiler()
        return compiler.ns[compiler.record(parsed)]
    raise Unsupported("not a record schema")


def fastavro_writer(parsed: Any) -> Writer:
    """The same contract by fastavro itself (the fallback)."""

    def write(datum: Any) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, datum)
        return buf.getvalue()

    return write


_OPTIONAL_OF = ("boolean", "int", "long", "float", "double", "string", "bytes", "enum", "fixed")
"""The ``T`` of a ``["null", T]`` union the C encoder writes (every union else: the Python writer)."""


def native_program(parsed: Any) -> tuple[Any, ...]:
    """The write program of a record schema for :class:`swarmlog.schema._avro_native.EventEncoder`
    (its forms are listed in ``_avro_native.c``); :class:`Unsupported` for a schema it does not
    cover (a logical type, a recursive record, a union other than ``["null", T]`` of a
    primitive, enum or fixed ``T``), whose payloads the Python writer writes whole. Raises
    ImportError where the C module is not built."""
    from . import _avro_native as n

    named: dict[str, Any] = {}
    simple = {"null": n.NULL, "boolean": n.BOOLEAN, "int": n.INT, "long": n.LONG, "float": n.FLOAT,
              "double": n.DOUBLE, "string": n.STRING, "bytes": n.BYTES}

    def kind(schema: Any) -> str:
        if isinstance(schema, str):
            return str(named[schema]["type"]) if schema in named else schema
        if isinstance(schema, list):
            return "union"
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        return str(schema["type"])

    def walk(schema: Any, stack: list[str]) -> tuple[Any, ...]:
        k = kind(schema)
        if isinstance(schema, str) and schema in named:
            schema = named[schema]
        if k in ("enum", "fixed", "record"):
            named.setdefault(schema["name"], schema)
        if k in simple:
            return (simple[k],)
        if k == "fixed":
            return (n.FIXED, int(schema["size"]))
        if k == "enum":
            return (n.ENUM, {symbol: i for i, symbol in enumerate(schema["symbols"])})
        if k == "union":
            if len(schema) == 2 and kind(schema[0]) == "null" and kind(schema[1]) in _OPTIONAL_OF:
                return (n.OPTIONAL, walk(schema[1], stack))
            raise Unsupported("a union other than [null, T]")
        if k == "array":
            return (n.ARRAY, walk(schema["items"], stack))
        if k == "map":
            return (n.MAP, walk(schema["values"], stack))
        if k == "record":
            if schema["name"] in stack:
                raise Unsupported(f"recursive record {schema['name']!r}")
            stack.append(schema["name"])
            fields = tuple(walk(f["type"], stack) for f in schema["fields"])
            stack.pop()
            return (n.RECORD, tuple(f["name"] for f in schema["fields"]), fields)
        raise Unsupported(f"type {k!r}")

    if not (isinstance(parsed, dict) and parsed.get("type") == "record"):
        raise Unsupported("not a record schema")
    return walk(parsed, [])


def payload_writer(parsed: Any) -> Writer:
    """:func:`compile_writer`, or fastavro for a schema it does not cover."""
    try:
        return compile_writer(parsed)
    except Unsupported as exc:
        logger.debug("payload %s written by fastavro: %s", parsed.get("name"), exc)
        return fastavro_writer(parsed)
