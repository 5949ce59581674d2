"""What the compiled Avro writer's and reader's tests share: every schema in ``schemas/``, valid
datums of any parsed schema (hypothesis), fastavro's bytes, and comparisons of datums."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import fastavro
from hypothesis import strategies as st

from swarmlog.schema.registry import SchemaRegistry

REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
REGISTRY = SchemaRegistry.load(REPO_SCHEMAS)
EVERY_VERSION = [s for s in REGISTRY]
IDS = [f"{s.event_type}-v{s.version}" for s in EVERY_VERSION]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def fastavro_bytes(parsed: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, datum)
    return buf.getvalue()


def strategy(schema: Any, named: dict[str, Any], *, omit_defaults: bool = True) -> st.SearchStrategy[Any]:
    """Valid datums of a parsed Avro schema (what the strict pydantic validator accepts)."""
    if isinstance(schema, str):
        prim = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(*INT32),
            "long": st.integers(*INT64) | st.sampled_from(INT64),
            "float": st.floats(width=32) | st.floats(),
            "double": st.floats(allow_nan=True) | st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan]),
            "string": st.text(max_size=80) | st.sampled_from(["", "é" * 40, "😀" * 20, "x" * 64]),
            "bytes": st.binary(max_size=80),
        }
        if schema in prim:
            return prim[schema]
        return st.deferred(lambda: strategy(named[schema], named, omit_defaults=omit_defaults))
    if isinstance(schema, list):
        return st.one_of([strategy(b, named, omit_defaults=omit_defaults) for b in schema])
    kind = schema["type"]
    if kind in ("enum", "fixed", "record"):
        named[schema["name"]] = schema
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(strategy(schema["items"], named, omit_defaults=omit_defaults), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=10), strategy(schema["values"], named, omit_defaults=omit_defaults),
                               max_size=4)
    if kind == "record":
        required = {}
        optional = {}
        for f in schema["fields"]:
            s = strategy(f["type"], named, omit_defaults=omit_defaults)
            (optional if omit_defaults and "default" in f else required)[f["name"]] = s
        return st.fixed_dictionaries(required, optional=optional)
    return strategy(kind, named, omit_defaults=omit_defaults)


def same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN (and -0.0 told from 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def identical(a: Any, b: Any) -> bool:
    """:func:`same`, and every dict's keys in the same order (what a hash of the datum sees)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return same(a, b)
