"""Pydantic validators generated from the Avro schemas.

The Avro schema is the single source of truth; the pydantic types here are
*generated* from it when the schemas load, so the two cannot drift apart.
Validation is strict (no ``"5"`` silently becoming ``5`` in an event log that
lives forever) and happens before anything is encoded or written.

Payloads are validated into plain ``dict``s (via ``TypedDict``) rather than model
instances: the encoder needs dicts, and skipping the model object keeps the
per-event path free of an allocation and a ``model_dump``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Optional

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

__all__ = ["payload_model", "payload_validator"]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

_PRIMITIVES: dict[str, Any] = {
    "null": None,
    "boolean": bool,
    "int": Annotated[int, Field(ge=_INT32[0], le=_INT32[1])],
    "long": Annotated[int, Field(ge=_INT64[0], le=_INT64[1])],
    "float": float,
    "double": float,
    "bytes": bytes,
    "string": str,
}


class _Builder:
    """Turns one Avro schema into Python types, resolving named-type references."""

    def __init__(self, *, as_typeddict: bool) -> None:
        self.as_typeddict = as_typeddict
        self.named: dict[str, Any] = {}

    def type_of(self, schema: Any, namespace: str = "") -> Any:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            full = schema if "." in schema else (f"{namespace}.{schema}" if namespace else schema)
            for key in (full, schema):
                if key in self.named:
                    return self.named[key]
            raise ValueError(f"unknown Avro type name {schema!r}")
        if isinstance(schema, list):
            branches = [self.type_of(branch, namespace) for branch in schema]
            non_null = [b for b in branches if b is not None]
            union: Any = non_null[0] if len(non_null) == 1 else _union(non_null)
            return Optional[union] if len(non_null) < len(branches) else union  # noqa: UP045 - built at run time
        kind = schema["type"]
        if not isinstance(kind, str):
            return self.type_of(kind, namespace)
        if kind in _PRIMITIVES:  # logical types validate as their underlying type
            return _PRIMITIVES[kind]
        if kind == "array":
            return list[self.type_of(schema["items"], namespace)]  # type: ignore[misc]
        if kind == "map":
            return dict[str, self.type_of(schema["values"], namespace)]  # type: ignore[misc]
        if kind == "enum":
            t = Literal[tuple(schema["symbols"])]  # type: ignore[valid-type]
            self._name(schema, namespace, t)
            return t
        if kind == "fixed":
            t = Annotated[bytes, Field(min_length=schema["size"], max_length=schema["size"])]
            self._name(schema, namespace, t)
            return t
        if kind == "record":
            return self.record(schema, namespace)
        return self.type_of(kind, namespace)

    def record(self, schema: dict[str, Any], namespace: str = "") -> Any:
        ns = schema.get("namespace", namespace)
        if "." in schema["name"]:
            ns = schema["name"].rsplit(".", 1)[0]
        name = schema["name"].rsplit(".", 1)[-1]
        fields: dict[str, Any] = {}
        for field in schema["fields"]:
            t = self.type_of(field["type"], ns)
            has_default = "default" in field
            if self.as_typeddict:
                fields[field["name"]] = NotRequired[t] if has_default else t
            else:
                fields[field["name"]] = (t, field["default"] if has_default else ...)
        if self.as_typeddict:
            td = TypedDict(name, fields)  # type: ignore[misc]
            td.__pydantic_config__ = ConfigDict(strict=True, extra="forbid")  # type: ignore[attr-defined]
            result: Any = td
        else:
            result = create_model(
                name,
                __config__=ConfigDict(strict=True, extra="forbid", frozen=True),
                __doc__=schema.get("doc"),
                **fields,
            )
        self._name(schema, namespace, result)
        return result

    def _name(self, schema: dict[str, Any], namespace: str, value: Any) -> None:
        name = schema["name"]
        ns = schema.get("namespace", namespace)
        full = name if "." in name else (f"{ns}.{name}" if ns else name)
        self.named[full] = value
        self.named[name.rsplit(".", 1)[-1]] = value


def _union(types: list[Any]) -> Any:
    from typing import Union

    return Union[tuple(types)]  # noqa: UP007 - built dynamically


def payload_validator(record_schema: dict[str, Any]) -> TypeAdapter[Any]:
    """A strict validator for payload dicts, generated from an Avro record schema."""
    return TypeAdapter(_Builder(as_typeddict=True).record(record_schema))


def payload_model(record_schema: dict[str, Any]) -> type[BaseModel]:
    """A frozen pydantic model class generated from an Avro record schema (for users' typing)."""
    return _Builder(as_typeddict=False).record(record_schema)
