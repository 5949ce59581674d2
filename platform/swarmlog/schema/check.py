"""``swarmlog schema check`` and ``swarmlog schema list``: the schema directory's CI gate.

``check`` loads every ``schemas/<event_type>/v<N>.avsc`` (which already refuses a
broken envelope, a duplicate fingerprint or a version gap), loads the upcasters
beside them, and checks each event type's versions with
:func:`swarmlog.compat.check_versions` in the type's mode from
``schemas/compatibility.json``. Each violation is one line naming the event type,
the two versions, the field and the rule broken; exit status 1 if there are any.

Why BACKWARD_TRANSITIVE is always checked: replay reads the log from offset zero
with today's code, so the newest version must read data written by *every* older
one. A type's configured mode (FORWARD, FULL, ...) is checked on top of that, never
instead of it.

``--property`` adds a second line of defence that does not trust the checker: for
every consecutive version pair it says is compatible, ``fastavro.utils.generate_many``
writes random data with the older schema, which must read with the newer one (by Avro
resolution, or, for a pair with an upcaster, with its own schema and then the upcaster: as
the decoder reads it), and data of every version must decode through the real
:class:`~swarmlog.codec.Decoder` into a valid newest-version record.
The data comes from a fixed seed, so a failure reproduces.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import itertools
import json
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.utils import generate_many
from fastavro.validation import validate

from ..errors import SchemaError
from .codec import Decoder, Encoder
from .compat import DEFAULT_MODE, CompatibilityViolation, Mode, check_versions
from .registry import EventSchema, SchemaRegistry
from .upcasting import Upcaster, discover_upcasters

__all__ = [
    "COMPATIBILITY_FILE", "PropertyFailure", "PropertyReport", "check_schemas", "conforms", "load_modes",
    "property_check", "run",
]

COMPATIBILITY_FILE = "compatibility.json"
PROPERTY_COUNT = 200

# Modes a type may select: each is checked in addition to BACKWARD_TRANSITIVE. The two
# left out would only weaken it, which replay from offset zero cannot afford.
_SELECTABLE = (Mode.BACKWARD_TRANSITIVE, Mode.FORWARD, Mode.FORWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE)


# --- the checks (a library; run() below is the command line) ------------------------------


def load_modes(schema_dirs: Path | Sequence[Path], registry: SchemaRegistry) -> dict[str, Mode]:
    """Each event type's mode from the ``compatibility.json`` of its layer (default for the unlisted).

    ``schema_dirs`` are the layers ``registry`` was loaded from; each layer's file speaks
    for the event types of that layer only. Raises :class:`SchemaError` on an unknown mode,
    a mode weaker than BACKWARD_TRANSITIVE, or an event type that has no schemas in that
    layer (a typo would otherwise silently leave the real type on the default).
    """
    layers = [Path(schema_dirs)] if isinstance(schema_dirs, Path) else [Path(d) for d in schema_dirs]
    modes: dict[str, Mode] = {}
    for layer in layers:
        own = [t for t in registry.event_types() if registry.latest(t).path.parent.parent == layer]
        modes.update(_layer_modes(layer, own if len(layers) > 1 else registry.event_types()))
    for t in registry.event_types():
        modes.setdefault(t, DEFAULT_MODE)
    return modes


def _layer_modes(schema_dir: Path, event_types: list[str]) -> dict[str, Mode]:
    path = Path(schema_dir) / COMPATIBILITY_FILE
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("event_types", {}), dict):
            raise SchemaError(f'{path}: expected {{"default": MODE, "event_types": {{"<event_type>": MODE}}}}')
    default = _mode(doc.get("default", DEFAULT_MODE), where=f"{path}: default")
    listed = doc.get("event_types", {})
    unknown = sorted(set(listed) - set(event_types))
    if unknown:
        raise SchemaError(f"{path}: names {', '.join(unknown)}, which have no schemas "
                          f"(known here: {', '.join(event_types)})")
    return {t: _mode(listed[t], where=f"{path}: {t}") if t in listed else default for t in event_types}


def _mode(value: Any, *, where: str) -> Mode:
    try:
        mode = Mode(str(value).upper())
    except ValueError:
        mode = None
    if mode not in _SELECTABLE:
        raise SchemaError(
            f"{where}: mode {value!r} is not one of {', '.join(_SELECTABLE)} "
            f"(BACKWARD and NONE are refused: replay must read every old version with the newest)"
        )
    return mode


def check_schemas(registry: SchemaRegistry, modes: dict[str, Mode]) -> list[CompatibilityViolation]:
    """Every violation of BACKWARD_TRANSITIVE plus each type's own mode, per type in order."""
    violations: list[CompatibilityViolation] = []
    for event_type in registry.event_types():
        versions = {s.version: s.schema for s in registry.versions(event_type)}
        found = check_versions(event_type=event_type, versions=versions, mode=DEFAULT_MODE)
        mode = modes.get(event_type, DEFAULT_MODE)
        if mode != DEFAULT_MODE:
            seen = set(found)
            found += [v for v in check_versions(event_type=event_type, versions=versions, mode=mode)
                      if v not in seen]
        violations.extend(found)
    return violations


@dataclass(frozen=True, kw_only=True)
class PropertyFailure:
    """Generated data of ``writer_version`` that failed to read as ``reader_version``."""

    event_type: str
    writer_version: int
    reader_version: int
    index: int
    stage: str
    error: str
    more: int = 0
    """How many more generated events failed the same way (only the first is reported)."""

    def __str__(self) -> str:
        more = f" (and {self.more} more like it)" if self.more else ""
        return (f"{self.event_type} v{self.reader_version} cannot read generated v{self.writer_version} "
                f"datum #{self.index} ({self.stage}): {self.error}{more}")


@dataclass(frozen=True, kw_only=True)
class PropertyReport:
    pairs: int
    """Consecutive version pairs exercised."""
    events: int
    """Generated events written and read."""
    failures: list[PropertyFailure]


def property_check(registry: SchemaRegistry, upcasters: dict[tuple[str, int], Upcaster], *,
                   violations: Sequence[CompatibilityViolation] = (), count: int = PROPERTY_COUNT,
                   seed: int = 0) -> PropertyReport:
    """Random data of each version must read as the next one, and as the newest through the decoder.

    Pairs that ``violations`` already reject are not exercised (their data cannot read).
    ``generate_many`` draws from the global ``random``: it is seeded here and restored after.
    """
    rejected = {(v.event_type, v.writer_version, v.reader_version) for v in violations}
    decoder = Decoder(registry, upcasters=upcasters)
    first: dict[tuple[str, int, int, str], PropertyFailure] = {}
    more: dict[tuple[str, int, int, str], int] = {}

    def fail(event_type: str, writer: int, reader: int, index: int, stage: str, error: str) -> None:
        key = (event_type, writer, reader, stage)
        if key in first:
            more[key] = more.get(key, 0) + 1
        else:
            first[key] = PropertyFailure(event_type=event_type, writer_version=writer, reader_version=reader,
                                         index=index, stage=stage, error=error)

    pairs = events = 0
    state = random.getstate()
    try:
        random.seed(seed)
        for event_type in registry.event_types():
            versions = registry.versions(event_type)
            newest = versions[-1]
            for writer, reader in itertools.pairwise(versions):
                if (event_type, writer.version, reader.version) in rejected:
                    continue
                pairs += 1
                for i, datum in enumerate(generate_many(writer.schema, count)):
                    events += 1
                    failure = _read_pair(writer, reader, upcasters.get((event_type, writer.version)), datum)
                    if failure:
                        fail(event_type, writer.version, reader.version, i, *failure)
            if any(t == event_type for t, _, _ in rejected):
                continue
            for writer in versions[:-1]:
                encoder = Encoder(writer)
                for i, datum in enumerate(generate_many(writer.schema, count)):
                    events += 1
                    try:
                        _, record = decoder.decode(encoder.encode(datum), i)
                        problem = conforms(record, newest)
                    except Exception as exc:  # noqa: BLE001 - a typed error or a crash: each is a finding
                        problem = repr(exc)
                    if problem:
                        fail(event_type, writer.version, newest.version, i, "decoder", problem)
    finally:
        random.setstate(state)
    failures = [dataclasses.replace(f, more=more.get(key, 0)) for key, f in first.items()]
    return PropertyReport(pairs=pairs, events=events, failures=failures)


def _read_pair(writer: EventSchema, reader: EventSchema, upcaster: Upcaster | None,
               datum: Any) -> tuple[str, str] | None:
    """Why ``datum`` of ``writer`` does not read as ``reader``, the way swarmlog's decoder reads the
    pair: by Avro resolution, or — where the pair has an upcaster — with the writer's own schema,
    then the upcaster (the decoder never resolves across an upcaster; a pair may need one because
    fastavro's resolution cannot read it, as ``http.exchange`` v1's ``bytes`` bodies)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, writer.parsed, datum)
    raw = buf.getvalue()
    if upcaster is None:
        try:
            resolved = fastavro.schemaless_reader(io.BytesIO(raw), writer.parsed, reader.parsed)
            problem = conforms(resolved, reader)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types; each is a finding
            problem = repr(exc)
        return ("Avro resolution", problem) if problem else None
    try:
        before: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(raw), writer.parsed, None)  # type: ignore[assignment]
        after = upcaster(dict(before))
        problem = conforms(after, reader)
        if not problem:
            changed = [k for k in before if k != "payload" and after.get(k) != before[k]]
            if changed:
                problem = f"the upcaster changed envelope field(s) {changed}; it may only rewrite the payload"
    except Exception as exc:  # noqa: BLE001 - an upcaster that raises on valid data is a finding
        problem = repr(exc)
    return (f"upcaster v{writer.version}_to_v{reader.version}", problem) if problem else None


def conforms(record: Any, schema: EventSchema) -> str | None:
    """None if ``record`` is exactly a record of ``schema`` (no missing, no extra fields), else why not."""
    if not isinstance(record, dict) or not isinstance(record.get("payload"), dict):
        return f"not a record with a payload: {record!r:.200}"
    want = [f["name"] for f in schema.schema["fields"]]
    want_payload = [f["name"] for f in schema.payload_schema["fields"]]
    if sorted(record) != sorted(want) or sorted(record["payload"]) != sorted(want_payload):
        return (f"fields {sorted(record)} / payload {sorted(record['payload'])} are not "
                f"v{schema.version}'s {sorted(want)} / payload {sorted(want_payload)}")
    if not validate(record, schema.parsed, raise_errors=False):
        try:
            validate(record, schema.parsed, raise_errors=True)
        except Exception as exc:  # noqa: BLE001 - fastavro's ValidationError, reported as text
            errors = getattr(exc, "errors", None) or [exc]
            # fastavro prints the whole expected schema, docs and all: the start says what is wrong.
            return "; ".join(_shorten(str(e)) for e in errors)
    return None


def _shorten(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --- the command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swarmlog schema", description="Check and list the event schemas.")
    sub = p.add_subparsers(dest="action", required=True)
    c = sub.add_parser("check", help="check every event type's versions for compatibility (CI)")
    c.add_argument("--schema-dir", type=Path, action="append",
                   help="check these directories (repeatable); default: the built-in schemas and "
                        "$SWARMLOG_SCHEMA_PATH")
    c.add_argument("--mode", help=f"check every type in this mode instead of its {COMPATIBILITY_FILE} entry "
                                  f"(on top of BACKWARD_TRANSITIVE): {', '.join(_SELECTABLE)}")
    c.add_argument("--property", action="store_true",
                   help="also read generated data of each version with the next and through the decoder")
    c.add_argument("--count", type=int, default=PROPERTY_COUNT, help="generated data per version (--property)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated data (--property)")
    ls = sub.add_parser("list", help="every schema version: type, version, fingerprint, file")
    ls.add_argument("--schema-dir", type=Path, action="append",
                    help="list these directories (repeatable); default: the built-in schemas and "
                         "$SWARMLOG_SCHEMA_PATH")
    ls.add_argument("--json", action="store_true", help="the list as JSON")
    return p


def _schema_dirs(args: argparse.Namespace) -> list[Path]:
    if args.schema_dir:
        return [Path(d) for d in args.schema_dir]
    from ..settings import Settings

    return list(Settings.from_env().schema_dirs())


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """List ``swarmlog schema`` among ``swarmlog``'s subcommands; :func:`run` parses its own arguments."""
    sub.add_parser("schema", help="check | list the event schemas (compatibility across versions)", add_help=False)


def run(argv: list[str]) -> int:
    """``swarmlog schema <argv>``: 0 all good, 1 the check found problems, 2 a usage error."""
    args = _parser().parse_args(argv)
    if args.action == "list":
        return _list(_schema_dirs(args), as_json=args.json)
    return _check(_schema_dirs(args), mode=args.mode, prop=args.property, count=args.count, seed=args.seed)


def _check(schema_dirs: list[Path], *, mode: str | None, prop: bool, count: int, seed: int) -> int:
    try:
        registry = SchemaRegistry.load(schema_dirs)
        upcasters = discover_upcasters(schema_dirs, registry=registry)
        if mode is None:
            modes = load_modes(schema_dirs, registry)
        else:
            forced = _mode(mode, where="--mode")
            modes = {t: forced for t in registry.event_types()}
    except SchemaError as exc:
        print(f"schema check failed: {exc}")
        return 1
    violations = check_schemas(registry, modes)
    for v in violations:
        print(v)
    report = None
    if prop:
        report = property_check(registry, upcasters, violations=violations, count=count, seed=seed)
        for f in report.failures:
            print(f)
    if violations or (report and report.failures):
        print(f"schema check failed: {len(violations)} compatibility violation(s)"
              + (f", {sum(1 + f.more for f in report.failures)} generated event(s) that did not read"
                 if report else "")
              + f" in {', '.join(map(str, schema_dirs))}")
        return 1
    by_mode: dict[str, int] = {}
    for m in modes.values():
        by_mode[m] = by_mode.get(m, 0) + 1
    summary = (f"schema check passed: {len(registry.event_types())} event types, {len(registry)} schema versions, "
               f"{len(upcasters)} upcaster(s); "
               + ", ".join(f"{n} type(s) {m}" for m, n in sorted(by_mode.items())))
    if report is not None:
        summary += f"; property: {report.events} generated events read across {report.pairs} version pairs"
    print(summary)
    return 0


def _list(schema_dirs: list[Path], *, as_json: bool) -> int:
    try:
        registry = SchemaRegistry.load(schema_dirs)
    except SchemaError as exc:
        print(f"swarmlog: error: {exc}", file=sys.stderr)
        return 2
    rows = [(s.event_type, s.version, s.fingerprint_hex, str(s.path)) for s in _ordered(registry)]
    if as_json:
        print(json.dumps([{"event_type": t, "version": v, "fingerprint": f, "file": p} for t, v, f, p in rows],
                         indent=2))
        return 0
    width = max(len("TYPE"), *(len(t) for t, *_ in rows))
    print(f"{'TYPE':<{width}}  {'VERSION':>7}  {'FINGERPRINT':<16}  FILE")
    for t, v, f, p in rows:
        print(f"{t:<{width}}  {v:>7}  {f:<16}  {p}")
    return 0


def _ordered(registry: SchemaRegistry) -> Iterator[EventSchema]:
    for event_type in registry.event_types():
        yield from registry.versions(event_type)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
