"""The schema registry: every event type in every version, loaded once.

Layout: ``schemas/<event_type>/v<N>.avsc``. Each file is a complete Avro record
(the envelope plus the type's ``payload``). Loading parses every schema once,
computes its CRC-64-AVRO fingerprint over the Parsing Canonical Form, and builds
its payload validator, so nothing of that happens per event.

Old versions are never removed: a message's writer schema is found by the
fingerprint in its framing, and replay from offset zero reads events written by
every version there ever was.

**Layers.** The built-in event types (``run.started``, the timers, ``agent.message``,
...) are package data, ``swarmlog.schema.builtin`` (the repo's top-level
``schemas/``), found by the import system (its spec) wherever swarmlog is installed.
A user's own event types come from further directories (``SWARMLOG_SCHEMA_PATH``),
layered over the built-ins. An event type lives in exactly one layer, all its
versions and its upcasters together: the same type in two layers is a
:class:`~swarmlog.errors.SchemaClash` naming both files, never a silent override
(which version 2 is the real one would depend on the order of a path list).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import fastavro
from fastavro.schema import to_parsing_canonical_form

from ..errors import InvalidEvent, SchemaClash, SchemaError, UnknownEventType

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

__all__ = ["BUILTIN_PACKAGE", "ENVELOPE_FIELDS", "EventSchema", "SchemaRegistry", "builtin_schema_dir", "crc64_avro",
           "load_schema_file"]

_FILE_NAME = re.compile(r"^v(?P<version>[1-9][0-9]*)\.avsc$")
_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")

# The fields every event carries, in this order, with these types. Checked at load
# so that a schema file cannot silently drop `causes` or retype `agent_id`.
ENVELOPE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("event_id", "string"),
    ("run_id", "string"),
    ("agent_id", "string"),
    ("event_type", "string"),
    ("schema_version", "int"),
    ("to", ["null", "string"]),
    ("causes", {"type": "array", "items": "long"}),
)

@dataclass(frozen=True, slots=True)
class EventSchema:
    """One version of one event type, parsed and ready for the hot path."""

    event_type: str
    version: int
    path: Path
    schema: dict[str, Any] = field(repr=False)
    parsed: Any = field(repr=False)
    fingerprint: bytes  # 8 bytes, little-endian, as written after the C3 01 marker
    defaults: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    """Payload fields that have Avro defaults, with those defaults."""
    payload_fields: int = 0
    _validator: TypeAdapter[Any] | None = field(default=None, repr=False, compare=False)
    # Built on the first validation, not at load: a process that only reads the log (replay, the
    # sink) validates nothing, and building a validator for every schema of every layer cost a
    # short command's start a few tens of ms (bench/cli.py). fastavro has checked the schema at load.
    # pydantic itself is imported then too (.models): a replay never imports it (test_lazy_faces.py).

    @property
    def validator(self) -> TypeAdapter[Any]:
        """The strict pydantic validator of this version's payload."""
        v = self._validator
        if v is None:
            from .models import payload_validator

            v = payload_validator(self.payload_schema)
            object.__setattr__(self, "_validator", v)  # frozen: a cache, not a change of value
        return v

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()

    @property
    def payload_schema(self) -> dict[str, Any]:
        return next(f["type"] for f in self.schema["fields"] if f["name"] == "payload")

    def validate_payload(self, payload: Any) -> dict[str, Any]:
        """Strictly validate ``payload``; raises :class:`InvalidEvent` naming the field."""
        try:
            # The TypeAdapter's own SchemaValidator, called directly: the same validation without
            # the wrapper's Python frame (a handler's ctx.send runs this under the guard's hook).
            v = self._validator  # not the property: no call on the hot path once built
            valid: dict[str, Any] = (v if v is not None else self.validator).validator.validate_python(payload)
        except ValueError as exc:  # pydantic's ValidationError is one; pydantic is not imported at load
            if not isinstance(exc, _validation_error()):
                raise
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "payload"
            raise InvalidEvent(event_type=self.event_type, field=f"payload.{loc}", problem=err["msg"]) from None
        # Fill Avro defaults, so that what a handler wrote compares equal to what a
        # reader decodes (which always has them).
        if self.defaults and len(valid) < self.payload_fields:
            valid = {**self.defaults, **valid}
        return valid


    def payload_model(self) -> Any:
        """A frozen pydantic model class for this version's payload (generated, never hand-written)."""
        from .models import payload_model

        return payload_model(self.payload_schema)


@cache
def _validation_error() -> type[ValidationError]:
    """pydantic's ValidationError, imported on the first payload refused (the validator imported pydantic)."""
    from pydantic import ValidationError

    return ValidationError


class SchemaRegistry:
    """All known event schemas, by (type, version) and by fingerprint."""

    def __init__(self, schemas: list[EventSchema]) -> None:
        self._by_key: dict[tuple[str, int], EventSchema] = {}
        self._by_fingerprint: dict[bytes, EventSchema] = {}
        self._latest: dict[str, EventSchema] = {}
        for s in sorted(schemas, key=lambda s: (s.event_type, s.version)):
            if (s.event_type, s.version) in self._by_key:
                raise SchemaError(f"{s.event_type} v{s.version} is defined twice ({s.path})")
            other = self._by_fingerprint.get(s.fingerprint)
            if other is not None:
                raise SchemaError(
                    f"{s.path} and {other.path} have the same fingerprint {s.fingerprint_hex}: "
                    f"a new version must change the schema (identical versions are ambiguous on read)"
                )
            self._by_key[(s.event_type, s.version)] = s
            self._by_fingerprint[s.fingerprint] = s
            self._latest[s.event_type] = s
        for event_type in self._latest:
            versions = self.versions(event_type)
            expected = list(range(1, len(versions) + 1))
            if [v.version for v in versions] != expected:
                raise SchemaError(
                    f"{event_type} has versions {[v.version for v in versions]}; versions must be 1..N with no gaps"
                )
        self.newest: Mapping[str, EventSchema] = MappingProxyType(self._latest)
        """Event type -> its latest schema, read-only: :meth:`latest` as a subscript (``ctx.send``
        looks its schema up under the guard's profile hook, where a subscript is not a call)."""

    @classmethod
    def load(cls, directories: Path | str | Sequence[Path | str]) -> SchemaRegistry:
        """Load and check every ``<type>/v<N>.avsc`` under ``directories`` (one, or layers).

        Layers are usually :meth:`swarmlog.settings.Settings.schema_dirs`: the built-ins
        first, then ``SWARMLOG_SCHEMA_PATH``. An event type found in two layers is a
        :class:`~swarmlog.errors.SchemaClash`.
        """
        layers = [Path(directories)] if isinstance(directories, (str, Path)) else [Path(d) for d in directories]
        owner: dict[str, Path] = {}  # event type -> its first schema file (in the layer that owns it)
        schemas: list[EventSchema] = []
        for directory in layers:
            if not directory.is_dir():
                raise SchemaError(f"schema directory {directory} does not exist; fix SWARMLOG_SCHEMA_PATH "
                                  f"(or SWARMLOG_SCHEMA_DIR, which replaces the built-in schemas)")
            files = sorted(directory.glob("*/v*.avsc"))
            for event_type in sorted({p.parent.name for p in files}):
                first = next(p for p in files if p.parent.name == event_type)
                if event_type in owner:
                    raise SchemaClash(event_type=event_type, first=str(owner[event_type]), second=str(first))
                owner[event_type] = first
            schemas.extend(load_schema_file(p) for p in files)
        if not schemas:
            raise SchemaError(f"no schemas found under {', '.join(map(str, layers))} "
                              f"(expected <event_type>/v<N>.avsc)")
        return cls(schemas)

    def get(self, event_type: str, version: int | None = None) -> EventSchema:
        """The schema of ``event_type`` at ``version`` (default: the latest)."""
        try:
            if version is None:
                return self._latest[event_type]
            return self._by_key[(event_type, version)]
        except KeyError:
            if event_type in self._latest:
                raise UnknownEventType(
                    event_type=f"{event_type} v{version}", known=[f"v{s.version}" for s in self.versions(event_type)]
                ) from None
            raise UnknownEventType(event_type=event_type, known=sorted(self._latest)) from None

    def by_fingerprint(self, fingerprint: bytes) -> EventSchema | None:
        return self._by_fingerprint.get(fingerprint)

    def latest(self, event_type: str) -> EventSchema:
        schema = self._latest.get(event_type)
        return schema if schema is not None else self.get(event_type)

    def versions(self, event_type: str) -> list[EventSchema]:
        return [s for (t, _), s in self._by_key.items() if t == event_type]

    def event_types(self) -> list[str]:
        return sorted(self._latest)

    def __iter__(self) -> Iterator[EventSchema]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)


BUILTIN_PACKAGE = "swarmlog.schema.builtin"
"""The package that holds the built-in schemas (the repo's ``schemas/``, mapped in pyproject.toml)."""


def builtin_schema_dir() -> Path:
    """The directory of swarmlog's built-in schemas, wherever swarmlog is installed.

    The import system finds the package (its spec, without importing it) in a wheel's
    site-packages, in an editable install (which maps the package to the repo's ``schemas/``)
    and in an image alike; nothing derives it from the repository's layout. For a package on
    the file system that is the directory ``importlib.resources.files`` gives, without importing
    ``importlib.resources`` and the archive modules behind it (zipfile, tempfile, lzma, bz2), which
    every command's start would pay (it reads the settings and so asks for this directory: ``cli.*``).
    """
    try:
        spec = importlib.util.find_spec(BUILTIN_PACKAGE)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError(f"swarmlog's built-in schemas ({BUILTIN_PACKAGE}) are not installed; reinstall "
                          f"swarmlog from its wheel, or point SWARMLOG_SCHEMA_DIR at a copy of them")
    # Schemas are read, and upcasters imported, from files: an install that is not on the
    # file system (a zipped one) has no directory to give.
    locations = list(spec.submodule_search_locations)
    root = Path(locations[0])
    if len(locations) != 1 or not root.is_dir():
        raise SchemaError(f"swarmlog's built-in schemas are not on the file system ({', '.join(locations)}); "
                          f"install swarmlog unzipped (as pip does) or set SWARMLOG_SCHEMA_DIR")
    return root


def load_schema_file(path: Path) -> EventSchema:
    """Parse one schema file and check it against the layout's conventions."""
    path = Path(path)
    # Every registry a process loads (a Client, a Session, an EventLog each load one) shares the parse of a
    # file whose text it has parsed before: an EventSchema is a value (frozen; its validator a cache of it),
    # and the parse — fastavro's, the canonical form's fingerprint — is most of a load. Keyed by the text,
    # so an edited file is parsed again.
    return _parsed_schema_file(path, path.read_bytes())


@lru_cache(maxsize=1024)
def _parsed_schema_file(path: Path, text: bytes) -> EventSchema:
    match = _FILE_NAME.match(path.name)
    event_type = path.parent.name
    if match is None:
        raise SchemaError(f"{path}: schema files are named v<N>.avsc (N = 1, 2, ...)")
    if not _EVENT_TYPE.match(event_type):
        raise SchemaError(f"{path}: event type {event_type!r} must be dotted lower-case words, e.g. agent.message")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON: {exc}") from None
    _check_envelope(path, schema)
    try:
        parsed = fastavro.parse_schema(schema, named_schemas={})
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise SchemaError(f"{path}: not a valid Avro schema: {exc}") from None
    fingerprint = crc64_avro(to_parsing_canonical_form(parsed))
    payload = next(f["type"] for f in schema["fields"] if f["name"] == "payload")
    return EventSchema(
        event_type=event_type,
        version=int(match["version"]),
        path=path,
        schema=schema,
        parsed=parsed,
        fingerprint=fingerprint,
        defaults={f["name"]: f["default"] for f in payload["fields"] if "default" in f},
        payload_fields=len(payload["fields"]),
    )


def _crc64_avro_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_CRC64_AVRO_EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_CRC64_AVRO_EMPTY = 0xC15D213AA4D7A795
"""The Avro specification's CRC-64-AVRO (Rabin) fingerprint of the empty string, and its polynomial."""
_CRC64_AVRO_TABLE = _crc64_avro_table()


def crc64_avro(canonical: str) -> bytes:
    """The CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form, little-endian: the 8 bytes
    single-object encoding puts after ``C3 01``.

    fastavro's ``fingerprint(canonical, "CRC-64-AVRO")`` gives the same bytes (in hex), but builds
    its 256-entry table again on every call: once per schema file, the larger part of loading the
    registry, which every command that reads the log does at start (``cli_replay_3`` in
    bench/cli.py). Here the table is built once, at import.
    """
    result = _CRC64_AVRO_EMPTY
    table = _CRC64_AVRO_TABLE
    for byte in canonical.encode():
        result = (result >> 8) ^ table[(result ^ byte) & 0xFF]
    return result.to_bytes(8, "little")


def _check_envelope(path: Path, schema: Any) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError(f"{path}: an event schema is an Avro record")
    fields = schema.get("fields", [])
    got = [(f.get("name"), f.get("type")) for f in fields[: len(ENVELOPE_FIELDS)]]
    if got != list(ENVELOPE_FIELDS):
        raise SchemaError(
            f"{path}: the first fields must be the envelope {[name for name, _ in ENVELOPE_FIELDS]} "
            f"with their standard types (see schemas/README.md); found {[name for name, _ in got]}"
        )
    rest = fields[len(ENVELOPE_FIELDS):]
    if len(rest) != 1 or rest[0].get("name") != "payload" or not isinstance(rest[0].get("type"), dict) \
            or rest[0]["type"].get("type") != "record":
        raise SchemaError(f"{path}: after the envelope comes exactly one field, `payload`, an Avro record")
