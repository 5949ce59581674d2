"""Avro schema compatibility: can data written with one schema be read with another?

fastavro resolves a writer schema against a reader schema while it decodes, but it
has no checker that says *before* deploying whether every datum the writer can
produce will resolve. This module is that checker. It follows the "Schema
Resolution" section of the Avro 1.11 specification, and reports problems the way
Apache Avro's Java ``SchemaCompatibility`` does (one entry per problem, with a
location in the reader schema), so a developer can fix all of them in one pass.

Two entry points:

* :func:`reader_incompatibilities` compares one writer schema with one reader schema.
* :func:`check_versions` checks an event type's ``v1 … vN`` schemas against each other
  in a compatibility :class:`Mode` and returns :class:`CompatibilityViolation` s whose ``str`` is a
  one-line, actionable message.

Resolution rules, as implemented (``w`` = writer, ``r`` = reader):

* primitives: equal, or a promotion ``int→long|float|double``, ``long→float|double``,
  ``float→double``, ``string↔bytes``. Logical types are compared by their underlying
  type (``{"type": "int", "logicalType": "date"}`` is an ``int``).
* records: names must match (the unqualified names are equal, or a reader alias
  names the writer's full name). Each reader field takes the writer field of the same
  name, else the first writer field named by one of the reader field's aliases; a
  reader field with neither needs a ``default``. Writer fields the reader lacks are
  skipped.
* enums: names must match; every writer symbol must be a reader symbol, unless the
  reader enum declares a ``default``.
* fixed: names and sizes must match.
* arrays / maps: items / values resolve recursively.
* unions: each writer branch resolves to the *first* reader branch that matches it
  at the top level (same primitive or a promotion, both arrays, both maps, or the
  same kind of named type with matching names), and must then resolve recursively.
  A non-union writer is treated like a one-branch union; a non-union reader like
  a one-branch union too.

Named types are resolved by full name, so schemas that refer to a type by name
(including recursive ones, such as a linked list) are checked; a reader/writer pair
of named types that is already being compared is assumed compatible on the way down
(anything wrong with it is reported where the comparison started), which is what
stops recursion.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro

from ..errors import SchemaError

__all__ = [
    "DEFAULT_MODE",
    "AvroSchema",
    "Incompatibility",
    "Mode",
    "Rule",
    "CompatibilityViolation",
    "check_versions",
    "reader_incompatibilities",
]


# An Avro schema as parsed JSON: normally a record's dict, but any schema works.
AvroSchema = dict[str, Any] | list[Any] | str


class Mode(enum.StrEnum):
    """Which versions each new version must be compatible with (Confluent's names).

    ``BACKWARD``: vN can read data written by vN-1. ``FORWARD``: vN-1 can read data
    written by vN. ``FULL``: both. The ``_TRANSITIVE`` variants check against every
    earlier version, not just the previous one. ``NONE`` checks nothing.
    """

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"


# Replay reads the log from offset zero with today's code, and old versions stay in
# the log forever, so the newest reader must read data written by *every* earlier
# version, not only the previous one: backward, transitively.
DEFAULT_MODE = Mode.BACKWARD_TRANSITIVE


class Rule(enum.StrEnum):
    """Stable identifiers of the ways a reader can fail to read a writer's data.

    A ``StrEnum``, so ``incompatibility.rule == "type_narrowed"`` holds.
    """

    READER_FIELD_MISSING_DEFAULT = "reader_field_missing_default"
    TYPE_MISMATCH = "type_mismatch"
    TYPE_NARROWED = "type_narrowed"
    ENUM_SYMBOL_REMOVED = "enum_symbol_removed"
    UNION_BRANCH_MISSING = "union_branch_missing"
    FIXED_SIZE_MISMATCH = "fixed_size_mismatch"
    NAME_MISMATCH = "name_mismatch"


@dataclass(frozen=True, kw_only=True)
class Incompatibility:
    """One reason data written with the writer schema cannot be read with the reader.

    ``path`` is a location in the *reader* schema, JSON-pointer style but naming
    fields by name: ``/fields/status/type/symbols``; a number after a union is the
    index of the reader branch the writer's data resolves to; ``/`` is the root.
    ``field`` is the dotted chain of record field names leading there
    (``result.score``), ``""`` at the root. ``rule`` is a stable :class:`Rule`;
    ``message`` a sentence in terms of "the writer" and "the reader".
    ``writer_type`` / ``reader_type`` describe the two types at that location, and
    ``subject`` names the enum symbol (``enum_symbol_removed``) or the writer's type
    name (``name_mismatch``) the problem is about.
    """

    path: str
    field: str
    rule: Rule
    message: str
    writer_type: str = ""
    reader_type: str = ""
    subject: str | None = None


@dataclass(frozen=True, kw_only=True)
class CompatibilityViolation:
    """An incompatibility between two versions of one event type.

    ``reader_version`` cannot read data written by ``writer_version``; ``str()`` says
    so in one line, in terms of the versions, with what to do about it.
    """

    event_type: str
    writer_version: int
    reader_version: int
    incompatibility: Incompatibility

    def __str__(self) -> str:
        what, fix = _explain(self)
        return (
            f"{self.event_type} v{self.reader_version} cannot read v{self.writer_version}: "
            f"{what} (rule {self.incompatibility.rule}) — {fix}"
        )


def reader_incompatibilities(*, writer: AvroSchema, reader: AvroSchema) -> list[Incompatibility]:
    """Every reason data written with ``writer`` cannot be read with ``reader``.

    Both are Avro schemas as JSON-like values (normally the dict of a ``.avsc``
    record), or schemas already returned by ``fastavro.parse_schema``. An empty list
    means every datum the writer can produce resolves against the reader.

    Raises :class:`~swarmlog.errors.SchemaError` if either is not valid Avro.
    """
    return _Comparison(writer=_parse(writer, what="writer schema"),
                       reader=_parse(reader, what="reader schema")).run()


def check_versions(*, event_type: str, versions: Mapping[int, AvroSchema],
                   mode: Mode = DEFAULT_MODE) -> list[CompatibilityViolation]:
    """Check each version of ``event_type`` against the earlier ones ``mode`` requires.

    ``versions`` maps version numbers to schemas. "The previous version" of vN is the
    highest version below N that is present. Violations come ordered by the newer
    version, then the older one (nearest first; backward before forward), then their
    place in the reader schema.

    Raises :class:`~swarmlog.errors.SchemaError` if a version is not valid Avro.
    """
    mode = Mode(mode)
    numbers = sorted(versions)
    # Parse each version once, not once per pair: the transitive modes compare O(n²) pairs.
    parsed = {n: _parse(versions[n], what=f"{event_type} v{n}") for n in numbers}
    violations: list[CompatibilityViolation] = []
    for writer_version, reader_version in _pairs(numbers, mode):
        comparison = _Comparison(writer=parsed[writer_version], reader=parsed[reader_version])
        violations.extend(
            CompatibilityViolation(event_type=event_type, writer_version=writer_version,
                      reader_version=reader_version, incompatibility=incompatibility)
            for incompatibility in comparison.run()
        )
    return violations


def _pairs(numbers: list[int], mode: Mode) -> Iterator[tuple[int, int]]:
    """The (writer version, reader version) pairs ``mode`` requires, by newer version."""
    backward = mode in (Mode.BACKWARD, Mode.BACKWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE)
    forward = mode in (Mode.FORWARD, Mode.FORWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE)
    transitive = mode in (Mode.BACKWARD_TRANSITIVE, Mode.FORWARD_TRANSITIVE, Mode.FULL_TRANSITIVE)
    for index, newer in enumerate(numbers):
        older_ones = numbers[:index] if transitive else numbers[max(index - 1, 0):index]
        for older in reversed(older_ones):
            if backward:
                yield older, newer
            if forward:
                yield newer, older


# --- parsing and naming ------------------------------------------------------------------

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed"})
_PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
# Numeric width, to tell a narrowing (long written, int read) from an unrelated change.
_NUMERIC_WIDTH = {"int": 0, "long": 1, "float": 2, "double": 3}


@dataclass(frozen=True)
class _Parsed:
    root: Any
    names: dict[str, Any]  # full name -> named schema, for resolving references


def _parse(schema: Any, *, what: str) -> _Parsed:
    names: dict[str, Any] = {}
    try:
        # parse_schema qualifies every name and reference with its namespace and fills
        # `names`, so references can be resolved by full name below.
        root = fastavro.parse_schema(schema, named_schemas=names)
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise SchemaError(f"{what} is not valid Avro: {exc}") from exc
    return _Parsed(root=root, names=names)


def _resolve(node: Any, names: Mapping[str, Any]) -> tuple[str, Any]:
    """(kind, schema) of a schema node with references followed; kind is a primitive
    name or one of "union", "record", "enum", "fixed", "array", "map"."""
    while True:
        if isinstance(node, list):
            return "union", node
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return node, node
            node = names[node]
            continue
        kind = node["type"]
        if isinstance(kind, (dict, list)):
            node = kind
        elif kind in _PRIMITIVES:
            return kind, node  # possibly with a logicalType, which resolution ignores
        elif kind == "error":
            return "record", node
        elif kind in _NAMED or kind in ("array", "map"):
            return kind, node
        else:
            node = names[kind]


def _unqualified(full_name: str) -> str:
    return full_name.rpartition(".")[2]


def _names_match(writer: Mapping[str, Any], reader: Mapping[str, Any]) -> bool:
    """Spec: same unqualified name, or the reader's aliases name the writer's full name.
    Aliases without a dot are relative to the reader type's namespace."""
    if _unqualified(writer["name"]) == _unqualified(reader["name"]):
        return True
    namespace = reader["name"].rpartition(".")[0]
    for alias in reader.get("aliases", ()):
        if "." not in alias and namespace:
            alias = f"{namespace}.{alias}"
        if alias == writer["name"]:
            return True
    return False


def _describe(node: Any, names: Mapping[str, Any]) -> str:
    """A short human description of a schema node: ``long``, ``enum ns.Status``,
    ``array<string>``, ``union [null, string]``, ``date (int)``."""
    kind, schema = _resolve(node, names)
    if kind in _PRIMITIVES:
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        return f"{logical} ({kind})" if logical else kind
    if kind == "union":
        return "union [" + ", ".join(_describe(branch, names) for branch in schema) + "]"
    if kind == "array":
        return f"array<{_describe(schema['items'], names)}>"
    if kind == "map":
        return f"map<{_describe(schema['values'], names)}>"
    if kind == "fixed":
        return f"fixed {schema['name']}[{schema['size']}]"
    return f"{kind} {schema['name']}"


# --- the comparison --------------------------------------------------------------------


@dataclass(frozen=True)
class _Issue:
    """An Incompatibility under construction: path and field relative to the node
    being compared, so a memoised named-type result can be re-used at any location."""

    path: tuple[str, ...]
    field: tuple[str, ...]
    rule: Rule
    message: str
    writer_type: str
    reader_type: str
    subject: str | None = None

    def under(self, path: tuple[str, ...], field: tuple[str, ...] = ()) -> _Issue:
        return dataclasses.replace(self, path=path + self.path, field=field + self.field)

    def public(self) -> Incompatibility:
        field = ".".join(self.field)
        return Incompatibility(
            path="/" + "/".join(self.path),
            field=field,
            rule=self.rule,
            message=f"field '{field}': {self.message}" if field else self.message,
            writer_type=self.writer_type,
            reader_type=self.reader_type,
            subject=self.subject,
        )


def _under(issues: list[_Issue], path: tuple[str, ...], field: tuple[str, ...] = ()) -> list[_Issue]:
    return [issue.under(path, field) for issue in issues]


class _Comparison:
    """One writer schema against one reader schema."""

    def __init__(self, *, writer: _Parsed, reader: _Parsed) -> None:
        self._writer = writer
        self._reader = reader
        # (writer full name, reader full name) -> issues, or None while being compared.
        # The None entry is what makes recursive types terminate: meeting a pair again
        # on the way down assumes it compatible, and whatever is wrong with it is found
        # by the comparison already in progress further up.
        self._named: dict[tuple[str, str], list[_Issue] | None] = {}

    def run(self) -> list[Incompatibility]:
        return [issue.public() for issue in self._compare(self._writer.root, self._reader.root)]

    # -- dispatch

    def _compare(self, w_node: Any, r_node: Any) -> list[_Issue]:
        w_kind, writer = _resolve(w_node, self._writer.names)
        r_kind, reader = _resolve(r_node, self._reader.names)
        if w_kind == "union":
            return self._writer_union(writer, r_kind, reader)
        if r_kind == "union":
            return self._branch_into(w_node, reader)
        if w_kind in _PRIMITIVES and r_kind in _PRIMITIVES:
            return self._primitive(w_node, r_node, w_kind, r_kind)
        if w_kind != r_kind:
            return [self._issue(Rule.TYPE_MISMATCH, w_node, r_node,
                                "the writer's {w} cannot be read as {r}")]
        if w_kind == "array":
            return _under(self._compare(writer["items"], reader["items"]), ("items",))
        if w_kind == "map":
            return _under(self._compare(writer["values"], reader["values"]), ("values",))
        return self._named_pair(w_kind, writer, reader)

    def _named_pair(self, kind: str, writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[_Issue]:
        key = (writer["name"], reader["name"])
        if key in self._named:
            return list(self._named[key] or ())  # a copy: callers extend what they get
        self._named[key] = None
        issues = self._name(writer, reader)
        if kind == "record":
            issues += self._record(writer, reader)
        elif kind == "enum":
            issues += self._enum(writer, reader)
        else:
            issues += self._fixed(writer, reader)
        self._named[key] = issues
        return list(issues)

    # -- the rules

    def _primitive(self, w_node: Any, r_node: Any, w_kind: str, r_kind: str) -> list[_Issue]:
        if w_kind == r_kind or r_kind in _PROMOTIONS.get(w_kind, ()):
            return []
        if self._narrows(w_kind, r_kind):
            return [self._issue(Rule.TYPE_NARROWED, w_node, r_node,
                                "the writer's {w} is wider than the reader's {r}; "
                                "written values may not fit")]
        return [self._issue(Rule.TYPE_MISMATCH, w_node, r_node,
                            "the writer's {w} cannot be read as {r}")]

    def _name(self, writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[_Issue]:
        if _names_match(writer, reader):
            return []
        return [self._issue(Rule.NAME_MISMATCH, writer, reader,
                            "the writer's {w} cannot be read as {r}: the names differ and the "
                            f"reader has no alias {writer['name']!r}",
                            path=("name",), subject=writer["name"])]

    def _record(self, writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[_Issue]:
        writer_fields = {field["name"]: field for field in writer["fields"]}
        issues: list[_Issue] = []
        for r_field in reader["fields"]:
            name = r_field["name"]
            w_field = writer_fields.get(name)
            if w_field is None:  # fall back to the first alias the writer has a field for
                w_field = next((writer_fields[alias] for alias in r_field.get("aliases", ())
                                if alias in writer_fields), None)
            if w_field is not None:
                issues += _under(self._compare(w_field["type"], r_field["type"]),
                                 ("fields", name, "type"), (name,))
            elif "default" not in r_field:
                issues.append(_Issue(
                    path=("fields", name), field=(name,), rule=Rule.READER_FIELD_MISSING_DEFAULT,
                    message=("the reader has this field without a default, and the writer "
                             "has no field of that name" + (" or its aliases" if r_field.get("aliases") else "")),
                    writer_type="",
                    reader_type=_describe(r_field["type"], self._reader.names),
                ))
        return issues

    def _enum(self, writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[_Issue]:
        if "default" in reader:
            return []  # unknown symbols read as the reader's default
        known = set(reader["symbols"])
        return [self._issue(Rule.ENUM_SYMBOL_REMOVED, writer, reader,
                            f"the writer's symbol {symbol!r} is not in the reader's {{r}}, "
                            "which has no default",
                            path=("symbols",), subject=symbol)
                for symbol in writer["symbols"] if symbol not in known]

    def _fixed(self, writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[_Issue]:
        if writer["size"] == reader["size"]:
            return []
        return [self._issue(Rule.FIXED_SIZE_MISMATCH, writer, reader,
                            f"the writer's {{w}} holds {writer['size']} bytes, "
                            f"the reader's {{r}} {reader['size']}",
                            path=("size",))]

    # -- unions

    def _writer_union(self, branches: list[Any], r_kind: str, reader: Any) -> list[_Issue]:
        """Every branch the writer may have written must resolve."""
        if r_kind == "union":
            issues: list[_Issue] = []
            for branch in branches:
                issues += self._branch_into(branch, reader)
            return issues
        # A non-union reader is a one-branch union: each writer branch must match it.
        issues = []
        for branch in branches:
            if self._matches(branch, reader):
                issues += self._compare(branch, reader)
            else:
                issues.append(self._no_branch(branch, reader, [reader]))
        return issues

    def _branch_into(self, w_node: Any, r_branches: list[Any]) -> list[_Issue]:
        """Resolve one (non-union) writer type against a reader union: the spec picks
        the first reader branch that matches, and resolution must succeed there."""
        for index, r_branch in enumerate(r_branches):
            if self._matches(w_node, r_branch):
                return _under(self._compare(w_node, r_branch), (str(index),))
        return [self._no_branch(w_node, r_branches, r_branches)]

    def _matches(self, w_node: Any, r_node: Any) -> bool:
        """The spec's top-level "matches" used to pick a union branch; deeper
        problems (fields, symbols, sizes) are left for the recursive comparison."""
        w_kind, writer = _resolve(w_node, self._writer.names)
        r_kind, reader = _resolve(r_node, self._reader.names)
        if w_kind in _PRIMITIVES and r_kind in _PRIMITIVES:
            return w_kind == r_kind or r_kind in _PROMOTIONS.get(w_kind, ())
        if w_kind != r_kind or w_kind == "union":
            return False
        if w_kind in _NAMED:
            return _names_match(writer, reader)
        return True  # both arrays, or both maps

    def _no_branch(self, w_node: Any, r_node: Any, r_branches: list[Any]) -> _Issue:
        w_kind, _ = _resolve(w_node, self._writer.names)
        r_kinds = [_resolve(branch, self._reader.names)[0] for branch in r_branches]
        if any(self._narrows(w_kind, r_kind) for r_kind in r_kinds):
            return self._issue(Rule.TYPE_NARROWED, w_node, r_node,
                               "the writer's {w} is wider than the reader's {r}; "
                               "written values may not fit")
        return self._issue(Rule.UNION_BRANCH_MISSING, w_node, r_node,
                           "the writer may write {w}, and the reader's {r} has no branch for it")

    # -- helpers

    @staticmethod
    def _narrows(w_kind: str, r_kind: str) -> bool:
        return (w_kind in _NUMERIC_WIDTH and r_kind in _NUMERIC_WIDTH
                and _NUMERIC_WIDTH[w_kind] > _NUMERIC_WIDTH[r_kind])

    def _issue(self, rule: Rule, w_node: Any, r_node: Any, template: str, *,
               path: tuple[str, ...] = (), subject: str | None = None) -> _Issue:
        w = _describe(w_node, self._writer.names)
        r = _describe(r_node, self._reader.names)
        return _Issue(path=path, field=(), rule=rule, message=template.format(w=w, r=r),
                      writer_type=w, reader_type=r, subject=subject)


# --- one-line explanations ----------------------------------------------------------------


def _explain(violation: CompatibilityViolation) -> tuple[str, str]:
    """(what changed, what to do) for a violation, phrased for its direction: a newer
    reader of older data (backward) or an older reader of newer data (forward)."""
    inc = violation.incompatibility
    w, r = f"v{violation.writer_version}", f"v{violation.reader_version}"
    newer_reads_older = violation.reader_version > violation.writer_version
    the_field = f"field '{inc.field}'" if inc.field else "the event"
    rule = inc.rule
    if rule == Rule.READER_FIELD_MISSING_DEFAULT:
        if newer_reads_older:
            return f"{the_field} was added without a default", "give it a default"
        return (f"{the_field} was removed, but {r} reads it and has no default for it",
                f"keep the field in {w}")
    if rule == Rule.TYPE_NARROWED:
        return (f"{the_field} is {inc.writer_type} in {w} but {inc.reader_type} in {r}, which "
                f"cannot hold every {inc.writer_type}",
                "keep the wider type (int→long→float→double is the safe direction), "
                "or add a new field")
    if rule == Rule.TYPE_MISMATCH:
        return (f"{the_field} is {inc.writer_type} in {w} but {inc.reader_type} in {r}",
                "add a new field instead of changing the type of an existing one")
    if rule == Rule.ENUM_SYMBOL_REMOVED:
        if newer_reads_older:
            return (f"enum symbol '{inc.subject}' of {the_field} was removed",
                    "keep the symbol, or give the enum a default")
        return (f"enum symbol '{inc.subject}' was added to {the_field}, but {r}'s enum has "
                f"no default", "only add symbols to enums whose earlier versions have a default")
    if rule == Rule.UNION_BRANCH_MISSING:
        if newer_reads_older:
            return (f"{the_field} no longer accepts {inc.writer_type}, which {w} can write",
                    f"keep {inc.writer_type} in its type")
        return (f"{the_field} now accepts {inc.writer_type}, which {r} cannot read",
                f"don't widen it while {r} data must stay readable; add a new field instead")
    if rule == Rule.FIXED_SIZE_MISMATCH:
        return (f"{the_field} is {inc.writer_type} in {w} but {inc.reader_type} in {r}",
                "a fixed type's size cannot change; add a new field with a new fixed type")
    if rule == Rule.NAME_MISMATCH:
        fix = (f"keep the name, or add the alias '{inc.subject}' to it in {r}" if newer_reads_older
               else "keep the name")
        return (f"{the_field} is {inc.writer_type} in {w} but {inc.reader_type} in {r}, "
                f"and named types are matched by name", fix)
    return inc.message, "see the Avro specification's schema resolution rules"
