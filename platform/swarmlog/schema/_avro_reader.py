"""Avro binary read by hand: the varint primitive, and readers compiled from a schema.

The one home of Avro's binary decoding on the read side (:mod:`.codec` reads the envelope's
varints with :func:`read_long` and :func:`read_length`; whole records and payloads with a
reader from :func:`compile_reader`).

Why compiled: ``fastavro.schemaless_reader`` parses the schema argument and walks it for
every datum, most of what reading the bench's ``agent.message`` event took. :func:`compile_reader`
walks the parsed schema once and builds
(``exec``) one Python function whose body reads each field in place from the message's
bytes, nested records inline (a recursive one gets a function of its own): a string under
8 KiB is a byte or two read, a slice and a ``decode``; a long under 64 in magnitude a byte
read and a table index; an enum a byte read and a tuple index. No ``BytesIO``, no call per
field. Measured over the bench's events (``replay.swarmlog``, ``sink.swarmlog``; the figures in
bench/README.md, "The figures behind the code's comments").

**The same datum, or an error.** For bytes fastavro reads, the datum is fastavro's: the same
types (``str`` for a string, ``bytes`` for bytes and fixed, ``int``, ``float`` with -0.0 and
NaN kept, an enum as its symbol, ``None``, lists, dicts), the same values, and every record
a dict whose keys are in the schema's field order (what a state hash over the dict sees).
Where fastavro raises, this raises too (not necessarily the same exception type): bytes
that end before the datum, a string that is not UTF-8 (Python's strict decoder, as
fastavro's), a union branch or enum index past the end, a length past the end. It is
**stricter** than fastavro where fastavro reads corrupt bytes as something: a negative
union branch or enum index (fastavro indexes from the end), a varint of more than 10
bytes or of a value beyond 64 bits (fastavro wraps it). An array or map block promising
more items of at least one byte each than there are bytes left is refused before its
first item is read (fastavro refuses it at the end of the bytes). As fastavro: bytes after the
datum are ignored; an ``int`` is not range-checked (a 5-byte varint beyond 32 bits reads
as the ``int`` it encodes); a ``boolean`` is ``byte != 0``; a block's byte size is read and
not checked. Held by ``tests/unit/test_avro_reader.py`` (hypothesis over every schema in
``schemas/``, every truncation and every single-byte change of encoded events).

**Covered** (the writer schema is the reader schema: no resolution): records (nested,
named, recursive), ``null``, ``boolean``, ``int``, ``long``, ``float``, ``double``,
``bytes``, ``string``, ``enum``, ``fixed``, ``array``, ``map``, unions of any of those.
**Not covered, read by fastavro** (:func:`payload_reader` falls back, the whole datum):
any ``logicalType`` (fastavro converts the value), ``error`` types, and every read that
resolves one schema into another (a reader schema other than the writer's: defaults,
promotions, enum defaults) — :class:`.codec.Decoder` reads those with fastavro.
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable
from typing import Any

import fastavro

from ._avro_writer import Unsupported

try:  # the compiled readers' common path in C; optional (no compiler: the generated Python readers)
    from . import _avro_native
except ImportError:  # pragma: no cover - where it could not be built
    _avro_native = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

Reader = Callable[[bytes, int], Any]
"""``read(buf, pos)``: the datum whose encoding starts at ``buf[pos]``; raises if ``buf``
ends before it; what follows it is ignored."""

__all__ = ["Reader", "Unsupported", "compile_reader", "fastavro_reader", "payload_reader", "read_length",
           "read_long"]


def read_long(b: bytes, i: int) -> tuple[int, int]:
    """An Avro int/long at ``b[i]`` (zigzag varint, 7 bits a byte, low first): (value, index
    after it). IndexError if ``b`` ends inside it; ValueError for more than 10 bytes or a value
    beyond 64 bits (fastavro wraps those; no Avro writer writes them)."""
    x = b[i]
    if x < 0x80:
        return (x >> 1) ^ -(x & 1), i + 1
    n = x & 0x7F
    shift = 7
    while True:
        i += 1
        x = b[i]
        n |= (x & 0x7F) << shift
        if x < 0x80:
            if n >> 64 or shift > 63:
                raise ValueError(f"varint at {i - shift // 7} is longer than 10 bytes or beyond 64 bits")
            return (n >> 1) ^ -(n & 1), i + 1
        shift += 7


def read_length(b: bytes, i: int) -> tuple[int, int]:
    """A string's or bytes' length at ``b[i]``: (length, index of the first byte). ValueError
    if it is negative or runs past the end of ``b``."""
    n, i = read_long(b, i)
    if n < 0 or i + n > len(b):
        raise ValueError(f"length {n} at {i} does not fit the {len(b)} bytes")
    return n, i


def _read_string(b: bytes, i: int) -> tuple[str, int]:
    n, i = read_length(b, i)
    j = i + n
    return b[i:j].decode(), j


def _read_bytes(b: bytes, i: int) -> tuple[bytes, int]:
    n, i = read_length(b, i)
    j = i + n
    return b[i:j], j


def _read_index(b: bytes, i: int, size: int) -> tuple[int, int]:
    """A union branch or enum index: in ``[0, size)``, or ValueError/IndexError."""
    k, i = read_long(b, i)
    if not 0 <= k < size:
        raise IndexError(f"index {k} out of [0, {size})")
    return k, i


def _truncated(b: bytes, i: int) -> EOFError:
    return EOFError(f"the datum needs {i} bytes, the buffer holds {len(b)}")


# Why the end is checked once, after the datum: a slice past the end of ``bytes`` is short,
# not an error, and positions only grow; so a datum that ran past the end leaves the final
# position past it, and every read of a byte (b[i]) past it raises at once. Only fixed reads
# no byte of its own (checked where it is read), and a loop over a block's items is bounded
# first (an item of at least one byte each cannot outnumber the bytes left).
_ZIGZAG = tuple((x >> 1) ^ -(x & 1) for x in range(0x80))
"""``_ZIGZAG[x]``: the value of the one-byte varint ``x``."""
_unpack_float = struct.Struct("<f").unpack_from
_unpack_double = struct.Struct("<d").unpack_from


class _Compiler:
    """Walks one parsed schema into one generated function in ``self.ns`` (nested records
    inline; each recursive record a function of its own, which its references call)."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_long": read_long, "_str": _read_string, "_bytes": _read_bytes,
                                   "_index": _read_index, "_f": _unpack_float, "_d": _unpack_double,
                                   "_trunc": _truncated, "_Z": _ZIGZAG}
        self.named: dict[str, Any] = {}  # full name -> its schema (parse_schema names a type once)
        self.records: dict[str, str] = {}  # full name -> its function's name in ns
        self.stack: list[str] = []  # the records being read, outermost first
        self.temps = 0

    def const(self, value: Any) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = value
        return name

    def temp(self, prefix: str) -> str:
        self.temps += 1
        return f"{prefix}{self.temps}"

    def resolve(self, schema: Any) -> Any:
        """A named reference's schema (parse_schema leaves later uses of a name as the name)."""
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        return schema

    def kind(self, schema: Any) -> str:
        if isinstance(schema, str):
            if schema in self.named:
                return str(self.named[schema]["type"])
            return schema
        if isinstance(schema, list):
            return "union"
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        return str(schema["type"])

    def min_size(self, schema: Any, seen: frozenset[str] = frozenset()) -> int:
        """The fewest bytes a datum of ``schema`` takes (0: it may take none)."""
        kind = self.kind(schema)
        schema = self.resolve(schema)
        if kind == "null":
            return 0
        if kind == "float":
            return 4
        if kind == "double":
            return 8
        if kind == "fixed":
            return int(schema["size"])
        if kind == "record":
            if schema["name"] in seen:
                return 0
            inner = seen | {schema["name"]}
            return sum(self.min_size(f["type"], inner) for f in schema["fields"])
        return 1  # a varint (boolean: a byte) of its own: long, string, bytes, enum, union, array, map

    def emit(self, schema: Any, target: str, ind: str) -> list[str]:
        """Lines that read a datum of ``schema`` at ``b[i]`` into ``target``, ``i`` after it."""
        kind = self.kind(schema)
        schema = self.resolve(schema)
        if kind in ("enum", "fixed", "record"):
            self.named.setdefault(schema["name"], schema)  # defined here; a later use names it only
        if kind == "null":
            return [f"{ind}{target} = None"]
        if kind == "boolean":
            return [f"{ind}{target} = b[i] != 0; i += 1"]  # as fastavro: any byte but 0 is true
        if kind in ("int", "long"):
            x = self.temp("x")
            return [f"{ind}{x} = b[i]",
                    f"{ind}if {x} < 0x80: {target} = _Z[{x}]; i += 1",
                    f"{ind}else: {target}, i = _long(b, i)"]
        if kind == "float":
            return [f"{ind}{target} = _f(b, i)[0]; i += 4"]  # struct.error if short
        if kind == "double":
            return [f"{ind}{target} = _d(b, i)[0]; i += 8"]
        if kind in ("string", "bytes"):
            x = self.temp("x")
            decode = ".decode()" if kind == "string" else ""
            slow = "_str" if kind == "string" else "_bytes"
            y = self.temp("y")
            return [f"{ind}{x} = b[i]",
                    f"{ind}if not {x} & 0x81:  # a one-byte length (under 64), not negative",
                    f"{ind}    {target} = b[i + 1:(i := i + 1 + ({x} >> 1))]{decode}",  # start: the old i
                    f"{ind}elif not {x} & 1 and ({y} := b[i + 1]) < 0x80:  # two bytes (under 8192)",
                    f"{ind}    {target} = b[i + 2:(i := i + 2 + ((({x} & 0x7F) | ({y} << 7)) >> 1))]{decode}",
                    f"{ind}else: {target}, i = {slow}(b, i)"]
        if kind == "fixed":
            j = self.temp("j")
            return [f"{ind}{j} = i + {int(schema['size'])}",
                    f"{ind}if {j} > len(b): raise _trunc(b, {j})",
                    f"{ind}{target} = b[i:{j}]; i = {j}"]
        if kind == "enum":
            symbols = self.const(tuple(schema["symbols"]))
            x, k = self.temp("x"), self.temp("k")
            return [f"{ind}{x} = b[i]",
                    f"{ind}if not {x} & 0x81: {target} = {symbols}[{x} >> 1]; i += 1",  # IndexError past the end
                    f"{ind}else: {k}, i = _index(b, i, {len(schema['symbols'])}); {target} = {symbols}[{k}]"]
        if kind == "union":
            return self.union(schema, target, ind)
        if kind == "array":
            return self.block(schema["items"], None, target, ind)
        if kind == "map":
            return self.block(schema["values"], "string", target, ind)
        if kind == "record":
            name = schema["name"]
            if name in self.records:  # a recursive record: its own function
                return [f"{ind}{target}, i = {self.records[name]}(b, i)"]
            if name in self.stack:  # a reference to a record being inlined: recursive
                return [f"{ind}{target}, i = {self.record(schema)}(b, i)"]
            lines, built = self.fields(schema, ind)  # inline: no call per nested record
            return lines + [f"{ind}{target} = {built}"]
        raise Unsupported(f"type {kind!r}")

    def union(self, branches: list[Any], target: str, ind: str) -> list[str]:
        x, k = self.temp("x"), self.temp("k")
        if len(branches) == 2 and self.kind(branches[0]) == "null":  # ["null", T]: an optional T
            return ([f"{ind}{x} = b[i]",
                     f"{ind}if {x} == 2: i += 1; {k} = 1",
                     f"{ind}elif {x} == 0: i += 1; {k} = 0",
                     f"{ind}else: {k}, i = _index(b, i, 2)",
                     f"{ind}if {k}:"]
                    + self.emit(branches[1], target, ind + "    ")
                    + [f"{ind}else: {target} = None"])
        lines = [f"{ind}{x} = b[i]",
                 f"{ind}if not {x} & 0x81: {k} = {x} >> 1; i += 1",
                 f"{ind}else: {k}, i = _index(b, i, {len(branches)})"]
        for n, branch in enumerate(branches):
            lines.append(f"{ind}{'if' if n == 0 else 'elif'} {k} == {n}:")
            lines += self.emit(branch, target, ind + "    ")
        lines.append(f"{ind}else: raise IndexError(f'union branch {{{k}}} out of [0, {len(branches)})')")
        return lines

    def block(self, item: Any, key: str | None, target: str, ind: str) -> list[str]:
        """An array (``key`` None) or a map: blocks of (count, items), the last of count 0; a
        negative count is followed by the block's size in bytes (read, not used: as fastavro)."""
        c, v, kk = self.temp("c"), self.temp("v"), self.temp("kk")
        inner = ind + "        "
        lines = [f"{ind}{target} = {{}}" if key else f"{ind}{target} = []"]
        lines += self.emit("long", c, ind)
        lines.append(f"{ind}while {c}:")
        lines.append(f"{ind}    if {c} < 0: {c} = -{c}; _, i = _long(b, i)")
        if self.min_size(item) + (1 if key else 0) > 0:
            lines.append(f"{ind}    if {c} > len(b) - i: raise _trunc(b, i + {c})")
        lines.append(f"{ind}    for _ in range({c}):")
        if key:
            lines += self.emit(key, kk, inner)
        lines += self.emit(item, v, inner)
        lines.append(f"{inner}{target}[{kk}] = {v}" if key else f"{inner}{target}.append({v})")
        lines += self.emit("long", c, ind + "    ")
        return lines

    def fields(self, schema: dict[str, Any], ind: str) -> tuple[list[str], str]:
        """Lines reading a record's fields into temporaries; the dict expression built of them."""
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        self.stack.append(schema["name"])
        lines: list[str] = []
        built: list[str] = []
        for field in schema["fields"]:
            f = self.temp("f")
            lines += self.emit(field["type"], f, ind)
            built.append(f"{field['name']!r}: {f}")
        self.stack.pop()
        # fastavro's record dict: the fields in the schema's order (a state hash sees the order)
        return lines, "{" + ", ".join(built) + "}"

    def record(self, schema: dict[str, Any]) -> str:
        """Generate a function ``(b, i) -> (dict, i)`` for a recursive record; its name in ``self.ns``."""
        fname = f"_rec{len(self.records)}"
        self.records[schema["name"]] = fname  # before the body: its own references call it by this name
        lines, built = self.fields(schema, "    ")
        self.exec(schema["name"], f"def {fname}(b, i):\n" + "".join(line + "\n" for line in lines)
                  + f"    return {built}, i\n")
        return fname

    def top(self, schema: dict[str, Any]) -> Reader:
        """The reader of a whole record: its fields inline, the end checked once."""
        if schema["type"] != "record":
            raise Unsupported(f"type {schema['type']!r}")
        self.named[schema["name"]] = schema
        lines, built = self.fields(schema, "    ")
        self.exec(schema["name"], "def _read(b, i):\n" + "".join(line + "\n" for line in lines)
                  + f"    if i > len(b): raise _trunc(b, i)\n    return {built}\n")
        return self.ns["_read"]

    def exec(self, name: str, src: str) -> None:
        exec(compile(src, f"<avro reader {name}>", "exec"), self.ns)  # noqa: S102 - our own generated source


def compile_reader(parsed: Any) -> Reader:
    """A function reading a record of ``parsed`` (a ``fastavro.parse_schema`` result) as
    fastavro reads it with no reader schema; raises :class:`Unsupported` for what is not
    covered (the module doc lists it).

    Where :mod:`swarmlog.schema._avro_native` is built, the function is its ``Program`` of the
    same schema, the generated Python reader its fallback for anything the C walk does not
    accept (a recursive record is read by the Python reader alone)."""
    if not (isinstance(parsed, dict) and parsed.get("type") == "record"):
        raise Unsupported("not a record schema")
    read = _Compiler().top(parsed)
    if _avro_native is None:
        return read
    try:
        program = _program(_Compiler(), parsed, [])
    except Unsupported:
        return read
    native: Reader = _avro_native.Program(program, read)
    return native


def _program(c: _Compiler, schema: Any, stack: list[str]) -> tuple[Any, ...]:
    """The C reader's program of ``schema`` (the forms are listed in ``_avro_native.c``), walked
    as :meth:`_Compiler.emit` walks it; :class:`Unsupported` for a recursive record."""
    n = _avro_native
    kind = c.kind(schema)
    schema = c.resolve(schema)
    if kind in ("enum", "fixed", "record"):
        c.named.setdefault(schema["name"], schema)
    simple = {"null": n.NULL, "boolean": n.BOOLEAN, "int": n.LONG, "long": n.LONG, "float": n.FLOAT,
              "double": n.DOUBLE, "string": n.STRING, "bytes": n.BYTES}
    if kind in simple:
        return (simple[kind],)
    if kind == "fixed":
        return (n.FIXED, int(schema["size"]))
    if kind == "enum":
        return (n.ENUM, tuple(schema["symbols"]))
    if kind == "union":
        return (n.UNION, tuple(_program(c, branch, stack) for branch in schema))
    if kind == "array":
        return (n.ARRAY, _program(c, schema["items"], stack))
    if kind == "map":
        return (n.MAP, _program(c, schema["values"], stack))
    if kind == "record":
        if "logicalType" in schema:
            raise Unsupported(f"logical type {schema['logicalType']!r}")
        if schema["name"] in stack:
            raise Unsupported(f"recursive record {schema['name']!r}: the Python reader reads it")
        stack.append(schema["name"])
        fields = tuple(_program(c, f["type"], stack) for f in schema["fields"])
        stack.pop()
        return (n.RECORD, tuple(f["name"] for f in schema["fields"]), fields)
    raise Unsupported(f"type {kind!r}")


def fastavro_reader(parsed: Any, reader_parsed: Any = None) -> Reader:
    """The same contract by fastavro itself (the fallback), resolving into ``reader_parsed``
    if given."""
    schemaless_reader = fastavro.schemaless_reader
    bytes_io = io.BytesIO

    def read(b: bytes, i: int) -> Any:
        return schemaless_reader(bytes_io(b[i:] if i else b), parsed, reader_parsed)

    return read


def payload_reader(parsed: Any) -> Reader:
    """:func:`compile_reader`, or fastavro for a schema it does not cover."""
    try:
        return compile_reader(parsed)
    except Unsupported as exc:
        logger.debug("%s read by fastavro: %s", parsed.get("name") if isinstance(parsed, dict) else parsed, exc)
        return fastavro_reader(parsed)
