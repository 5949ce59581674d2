"""Schema compatibility: the checker says "compatible" only when the reader can read
everything the writer can write, and names the rule, location and field when not.

The unit tests pin the Avro 1.11 resolution rules one by one; the property tests
at the end are a second line of defence that compares the checker's verdict with
what fastavro actually does on generated data.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import itertools
import threading
from typing import Any

import fastavro
import fastavro.utils
import pytest
from fastavro.validation import validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmlog.errors import SchemaError
from swarmlog.schema.compat import (
    DEFAULT_MODE,
    CompatibilityViolation,
    Incompatibility,
    Mode,
    Rule,
    check_versions,
    reader_incompatibilities,
)

from ..conftest import examples


def record(*fields: dict[str, Any], name: str = "Payload", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "test", "fields": list(fields), **extra}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def status_enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Status", "symbols": list(symbols), **extra}


def rules(writer: Any, reader: Any) -> list[str]:
    return [inc.rule for inc in reader_incompatibilities(writer=writer, reader=reader)]


def only(writer: Any, reader: Any) -> Incompatibility:
    found = reader_incompatibilities(writer=writer, reader=reader)
    assert len(found) == 1, found
    return found[0]


# --- records ---------------------------------------------------------------------------


def test_field_added_without_default_cannot_read_old_data():
    v1 = record(field("text", "string"))
    v2 = record(field("text", "string"), field("priority", "int"))

    inc = only(v1, v2)

    assert inc.rule == Rule.READER_FIELD_MISSING_DEFAULT == "reader_field_missing_default"
    assert inc.field == "priority"
    assert inc.path == "/fields/priority"
    assert "priority" in inc.message


def test_field_added_with_default_reads_old_data():
    v1 = record(field("text", "string"))
    v2 = record(field("text", "string"), field("priority", "int", default=0),
                field("tag", ["null", "string"], default=None))

    assert reader_incompatibilities(writer=v1, reader=v2) == []


def test_field_removed_is_backward_compatible_but_not_forward_without_default():
    v1 = record(field("text", "string"), field("mood", "string"))
    v2 = record(field("text", "string"))

    assert reader_incompatibilities(writer=v1, reader=v2) == []  # v2 skips 'mood'
    assert rules(writer=v2, reader=v1) == ["reader_field_missing_default"]  # v1 needs it


def test_field_renamed_with_reader_alias_reads_old_name():
    v1 = record(field("txt", "string"))
    v2 = record(field("text", "string", aliases=["txt"]))

    assert reader_incompatibilities(writer=v1, reader=v2) == []
    assert rules(writer=v1, reader=record(field("text", "string"))) == [
        "reader_field_missing_default"]


def test_record_renamed_needs_reader_alias():
    v1 = record(field("a", "int"), name="Old")

    inc = only(v1, record(field("a", "int"), name="New"))
    assert (inc.rule, inc.path, inc.subject) == ("name_mismatch", "/name", "test.Old")
    assert reader_incompatibilities(writer=v1, reader=record(field("a", "int"), name="New",
                                                             aliases=["Old"])) == []


def test_record_names_compare_unqualified():
    v1 = {**record(field("a", "int")), "namespace": "old.ns"}
    assert reader_incompatibilities(writer=v1, reader=record(field("a", "int"))) == []


def test_nested_record_change_is_reported_with_dotted_field_name():
    def with_score(score_type: str) -> dict[str, Any]:
        result = record(field("score", score_type), field("note", "string"), name="Result")
        return record(field("id", "string"), field("result", result))

    inc = only(with_score("long"), with_score("int"))

    assert inc.rule == "type_narrowed"
    assert inc.field == "result.score"
    assert inc.path == "/fields/result/type/fields/score/type"
    assert (inc.writer_type, inc.reader_type) == ("long", "int")


def test_change_inside_optional_nested_record_is_reported_through_the_union():
    def with_score(score_type: str) -> dict[str, Any]:
        result = record(field("score", score_type), name="Result")
        return record(field("result", ["null", result], default=None))

    inc = only(with_score("double"), with_score("float"))

    assert (inc.rule, inc.field) == ("type_narrowed", "result.score")
    assert inc.path == "/fields/result/type/1/fields/score/type"


def test_every_use_of_a_changed_named_type_is_reported():
    money_v1 = {"type": "record", "name": "Money", "fields": [field("cents", "long")]}
    money_v2 = {"type": "record", "name": "Money", "fields": [field("cents", "int")]}
    v1 = record(field("price", money_v1), field("tax", "test.Money"))
    v2 = record(field("price", money_v2), field("tax", "Money"))  # referenced by name

    found = reader_incompatibilities(writer=v1, reader=v2)

    assert sorted(inc.field for inc in found) == ["price.cents", "tax.cents"]
    assert {inc.rule for inc in found} == {"type_narrowed"}


# --- primitives and logical types --------------------------------------------------------


@pytest.mark.parametrize("written, read", [
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
    ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string"),
])
def test_promotion_reads_old_data(written, read):
    assert reader_incompatibilities(writer=record(field("n", written)),
                                    reader=record(field("n", read))) == []


@pytest.mark.parametrize("written, read", [
    ("long", "int"), ("float", "int"), ("double", "float"), ("double", "long"), ("float", "long"),
])
def test_narrowing_cannot_read_old_data(written, read):
    inc = only(record(field("n", written)), record(field("n", read)))
    assert (inc.rule, inc.field, inc.path) == ("type_narrowed", "n", "/fields/n/type")


@pytest.mark.parametrize("written, read", [
    ("string", "int"), ("int", "string"), ("boolean", "int"), ("null", "string"),
    ("string", {"type": "array", "items": "string"}),
])
def test_unrelated_type_change_is_a_type_mismatch(written, read):
    assert rules(record(field("x", written)), record(field("x", read))) == ["type_mismatch"]


def test_logical_types_resolve_by_their_underlying_type():
    date = {"type": "int", "logicalType": "date"}
    millis = {"type": "long", "logicalType": "timestamp-millis"}

    assert reader_incompatibilities(writer=record(field("t", date)),
                                    reader=record(field("t", millis))) == []
    inc = only(record(field("t", millis)), record(field("t", date)))
    assert inc.rule == "type_narrowed"
    assert (inc.writer_type, inc.reader_type) == ("timestamp-millis (long)", "date (int)")


# --- enums, fixed, arrays, maps ------------------------------------------------------------


def test_enum_symbol_removed_cannot_read_old_data_that_used_it():
    v1 = record(field("status", status_enum("OPEN", "DONE", "ARCHIVED")))
    v2 = record(field("status", status_enum("OPEN", "DONE")))

    inc = only(v1, v2)

    assert inc.rule == "enum_symbol_removed"
    assert (inc.path, inc.field, inc.subject) == ("/fields/status/type/symbols", "status", "ARCHIVED")
    # Adding a symbol is fine for the newer reader.
    assert reader_incompatibilities(writer=v2, reader=v1) == []


def test_enum_with_reader_default_reads_removed_symbols():
    v1 = record(field("status", status_enum("OPEN", "DONE", "ARCHIVED")))
    v2 = record(field("status", status_enum("OPEN", "DONE", "UNKNOWN", default="UNKNOWN")))

    assert reader_incompatibilities(writer=v1, reader=v2) == []


def test_fixed_must_keep_name_and_size():
    def digest(size: int, name: str = "Digest") -> dict[str, Any]:
        return record(field("d", {"type": "fixed", "name": name, "size": size}))

    assert reader_incompatibilities(writer=digest(16), reader=digest(16)) == []
    inc = only(digest(16), digest(32))
    assert (inc.rule, inc.path) == ("fixed_size_mismatch", "/fields/d/type/size")
    assert rules(digest(16), digest(16, name="Hash")) == ["name_mismatch"]


def test_array_items_and_map_values_resolve_recursively():
    def shape(items: str, values: str) -> dict[str, Any]:
        return record(field("xs", {"type": "array", "items": items}),
                      field("m", {"type": "map", "values": values}))

    assert reader_incompatibilities(writer=shape("int", "float"), reader=shape("long", "double")) == []
    found = reader_incompatibilities(writer=shape("long", "string"), reader=shape("int", "int"))
    assert [(inc.rule, inc.path, inc.field) for inc in found] == [
        ("type_narrowed", "/fields/xs/type/items", "xs"),
        ("type_mismatch", "/fields/m/type/values", "m"),
    ]


# --- unions ----------------------------------------------------------------------------------


def test_union_branch_lost_cannot_read_old_data():
    v1 = record(field("to", ["null", "string"], default=None))

    inc = only(v1, record(field("to", "string")))
    assert (inc.rule, inc.field, inc.writer_type) == ("union_branch_missing", "to", "null")

    three = record(field("v", ["null", "string", "boolean"], default=None))
    inc = only(three, record(field("v", ["null", "string"], default=None)))
    assert (inc.rule, inc.path, inc.writer_type) == ("union_branch_missing", "/fields/v/type", "boolean")


def test_making_a_field_optional_is_backward_but_not_forward_compatible():
    required = record(field("to", "string"))
    optional = record(field("to", ["null", "string"], default=None))

    assert reader_incompatibilities(writer=required, reader=optional) == []
    assert rules(writer=optional, reader=required) == ["union_branch_missing"]


def test_non_union_reader_must_read_every_writer_branch():
    assert reader_incompatibilities(writer=record(field("n", ["int", "long"])),
                                    reader=record(field("n", "long"))) == []
    assert rules(record(field("n", ["int", "long"])), record(field("n", "int"))) == ["type_narrowed"]


def test_union_branch_matching_uses_promotions_and_names():
    a = {"type": "record", "name": "A", "fields": [field("x", "int")]}
    a_renamed = {"type": "record", "name": "B", "aliases": ["A"], "fields": [field("x", "long")]}

    assert reader_incompatibilities(writer=record(field("u", ["int", a])),
                                    reader=record(field("u", [a_renamed, "null", "double"]))) == []
    inc = only(record(field("u", ["null", a])),
               record(field("u", ["null", {**a_renamed, "aliases": []}])))
    assert (inc.rule, inc.writer_type) == ("union_branch_missing", "record test.A")


# --- recursion and named references -------------------------------------------------------------


def _linked_list(value_type: str) -> dict[str, Any]:
    return {"type": "record", "name": "Node", "namespace": "test", "fields": [
        field("value", value_type),
        field("next", ["null", "Node"], default=None),
    ]}


def _run_with_timeout(fn, seconds: float = 5.0):
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "compatibility check did not terminate"
    return outcome["value"]


def test_recursive_schema_does_not_hang():
    same = _run_with_timeout(lambda: reader_incompatibilities(writer=_linked_list("long"),
                                                              reader=_linked_list("long")))
    changed = _run_with_timeout(lambda: reader_incompatibilities(writer=_linked_list("long"),
                                                                 reader=_linked_list("int")))

    assert same == []
    assert [(inc.rule, inc.field) for inc in changed] == [("type_narrowed", "value")]


def test_mutually_recursive_schemas_do_not_hang():
    def tree(leaf: str) -> dict[str, Any]:
        return {"type": "record", "name": "Tree", "fields": [
            field("forest", {"type": "record", "name": "Forest", "fields": [
                field("trees", {"type": "array", "items": "Tree"}),
                field("leaf", leaf),
            ]}),
        ]}

    found = _run_with_timeout(lambda: reader_incompatibilities(writer=tree("string"),
                                                               reader=tree("int")))
    assert [(inc.rule, inc.field) for inc in found] == [("type_mismatch", "forest.leaf")]


def test_parsed_schemas_are_accepted_and_inputs_left_untouched():
    v1 = record(field("n", "int"), field("s", status_enum("A", "B")))
    v2 = record(field("n", "long"), field("s", status_enum("A")))
    before = copy.deepcopy((v1, v2))

    from_dicts = reader_incompatibilities(writer=v1, reader=v2)
    from_parsed = reader_incompatibilities(writer=fastavro.parse_schema(v1),
                                           reader=fastavro.parse_schema(v2))

    assert from_dicts == from_parsed
    assert [inc.rule for inc in from_dicts] == ["enum_symbol_removed"]
    assert (v1, v2) == before


def test_invalid_schema_raises_schema_error():
    with pytest.raises(SchemaError, match="reader schema"):
        reader_incompatibilities(writer=record(field("a", "int")),
                                 reader=record(field("a", "NoSuchType")))


# --- versions and modes ---------------------------------------------------------------------------


def test_transitive_and_non_transitive_differ_on_a_three_version_chain():
    v1 = record(field("text", "string"))
    v2 = record(field("text", "string"), field("priority", "int", default=0))
    v3 = record(field("text", "string"), field("priority", "int"))  # default dropped
    versions = {1: v1, 2: v2, 3: v3}

    assert check_versions(event_type="agent.message", versions=versions, mode=Mode.BACKWARD) == []
    [violation] = check_versions(event_type="agent.message", versions=versions,
                                 mode=Mode.BACKWARD_TRANSITIVE)
    assert (violation.writer_version, violation.reader_version) == (1, 3)
    assert violation.incompatibility.rule == "reader_field_missing_default"


def _mode_chain() -> dict[int, dict[str, Any]]:
    # v2 adds a required field (only backward-incompatible: v1 ignores it);
    # v3 removes it again (only forward-incompatible: v2 needs it, v1 never had it).
    return {
        1: record(field("a", "int")),
        2: record(field("a", "int"), field("b", "int")),
        3: record(field("a", "int")),
    }


@pytest.mark.parametrize("mode, expected_pairs", [
    (Mode.NONE, set()),
    (Mode.BACKWARD, {(1, 2)}),
    (Mode.BACKWARD_TRANSITIVE, {(1, 2)}),
    (Mode.FORWARD, {(3, 2)}),
    (Mode.FORWARD_TRANSITIVE, {(3, 2)}),
    (Mode.FULL, {(1, 2), (3, 2)}),
    (Mode.FULL_TRANSITIVE, {(1, 2), (3, 2)}),
])
def test_mode_decides_which_direction_is_checked(mode, expected_pairs):
    violations = check_versions(event_type="e", versions=_mode_chain(), mode=mode)
    assert {(v.writer_version, v.reader_version) for v in violations} == expected_pairs


def test_forward_transitive_checks_the_oldest_reader_too():
    versions = {
        1: record(field("s", status_enum("A", "B"))),
        2: record(field("s", status_enum("A", "B", "C", default="A"))),
        3: record(field("s", status_enum("A", "B", "C", "D", default="A"))),
    }
    forward = check_versions(event_type="e", versions=versions, mode=Mode.FORWARD)
    transitive = check_versions(event_type="e", versions=versions, mode=Mode.FORWARD_TRANSITIVE)

    assert {(v.writer_version, v.reader_version) for v in forward} == {(2, 1)}
    assert {(v.writer_version, v.reader_version, v.incompatibility.subject) for v in transitive} == {
        (2, 1, "C"), (3, 1, "C"), (3, 1, "D")}


def test_default_mode_is_backward_transitive():
    v1 = record(field("text", "string"))
    v2 = record(field("text", "string"), field("priority", "int", default=0))
    v3 = record(field("text", "string"), field("priority", "int"))

    assert DEFAULT_MODE is Mode.BACKWARD_TRANSITIVE
    assert len(check_versions(event_type="e", versions={1: v1, 2: v2, 3: v3})) == 1


def test_missing_versions_compare_with_the_previous_present_one():
    violations = check_versions(event_type="e", mode=Mode.BACKWARD, versions={
        1: record(field("a", "int")), 3: record(field("a", "int"), field("b", "int"))})
    assert [(v.writer_version, v.reader_version) for v in violations] == [(1, 3)]


def test_invalid_version_raises_schema_error_naming_it():
    with pytest.raises(SchemaError, match=r"agent\.message v2"):
        check_versions(event_type="agent.message", mode=Mode.BACKWARD,
                       versions={1: record(field("a", "int")), 2: {"type": "record"}})


def test_violation_reads_as_one_actionable_line():
    v1 = record(field("text", "string"))
    v2 = record(field("text", "string"), field("priority", "int"))

    [backward] = check_versions(event_type="agent.message", versions={1: v1, 2: v2}, mode=Mode.BACKWARD)
    [forward] = check_versions(event_type="agent.message", versions={1: v2, 2: v1}, mode=Mode.FORWARD)

    assert str(backward) == (
        "agent.message v2 cannot read v1: field 'priority' was added without a default "
        "(rule reader_field_missing_default) — give it a default")
    assert str(forward) == (
        "agent.message v1 cannot read v2: field 'priority' was removed, but v1 reads it and has "
        "no default for it (rule reader_field_missing_default) — keep the field in v2")
    assert "\n" not in str(backward)


@pytest.mark.parametrize("writer, reader, words", [
    (record(field("n", "long")), record(field("n", "int")), ["'n'", "long in v1", "int in v2"]),
    (record(field("s", status_enum("A", "B"))), record(field("s", status_enum("A"))),
     ["enum symbol 'B'", "removed", "default"]),
    (record(field("u", ["null", "int"])), record(field("u", "int")), ["no longer accepts null"]),
    (record(field("d", {"type": "fixed", "name": "D", "size": 4})),
     record(field("d", {"type": "fixed", "name": "D", "size": 8})), ["fixed test.D[4]", "size"]),
    (record(field("a", "int"), name="Old"), record(field("a", "int"), name="New"),
     ["the event", "alias 'test.Old'"]),
    (record(field("x", "string")), record(field("x", "int")), ["string in v1", "new field"]),
])
def test_every_rule_has_an_actionable_line(writer, reader, words):
    [violation] = check_versions(event_type="e", versions={1: writer, 2: reader}, mode=Mode.BACKWARD)
    line = str(violation)
    assert line.startswith("e v2 cannot read v1: ")
    assert f"(rule {violation.incompatibility.rule}) — " in line
    for word in words:
        assert word in line


def test_incompatibilities_and_violations_are_frozen():
    inc = only(record(field("n", "long")), record(field("n", "int")))
    violation = CompatibilityViolation(event_type="e", writer_version=1, reader_version=2, incompatibility=inc)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inc.rule = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        violation.reader_version = 3  # type: ignore[misc]


# --- second line of defence: what fastavro actually does -------------------------------------------


def _read_problems(writer: Any, reader: Any, *, count: int) -> list[str]:
    """Write `count` generated records with `writer`, read each with `reader`, and
    describe the ones that fail to read or read into something `reader` rejects
    (fastavro silently falls back to the writer's type on some mismatches)."""
    writer_parsed = fastavro.parse_schema(copy.deepcopy(writer))
    reader_parsed = fastavro.parse_schema(copy.deepcopy(reader))
    problems = []
    for datum in fastavro.utils.generate_many(writer_parsed, count):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer_parsed, datum)
        buf.seek(0)
        try:
            value = fastavro.schemaless_reader(buf, writer_parsed, reader_parsed)
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            problems.append(f"{datum!r}: {type(exc).__name__}: {exc}")
            continue
        if not validate(value, reader_parsed, raise_errors=False):
            problems.append(f"{datum!r} read as {value!r}, which the reader schema rejects")
    return problems


_INTEGRAL_PROMOTIONS = [("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                        ("long", "double"), ("float", "double"), ("string", "bytes")]
# bytes→string is a legal promotion, but fastavro's generator writes random bytes that
# are not UTF-8, so it stays out of the generated pairs (its own unit test covers it).
_OTHER_CHANGES = [("long", "int"), ("double", "float"), ("string", "int"), ("int", "string"),
                  ("boolean", "int"), ("float", "long")]
_PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]


@st.composite
def _type_pair(draw, names: itertools.count, depth: int) -> tuple[Any, Any]:
    """A (writer type, reader type) pair: often equal, often a legal evolution,
    sometimes an illegal one, nested up to `depth`."""
    leaf_choices = ["same", "promote", "change", "enum", "fixed", "logical"]
    choices = leaf_choices + (["array", "map", "union", "record"] if depth > 0 else [])
    kind = draw(st.sampled_from(choices))
    if kind == "same":
        t = draw(st.sampled_from(_PRIMITIVES))
        return t, t
    if kind == "promote":
        return draw(st.sampled_from(_INTEGRAL_PROMOTIONS))
    if kind == "change":
        return draw(st.sampled_from(_OTHER_CHANGES))
    if kind == "logical":
        date = {"type": "int", "logicalType": "date"}
        millis = {"type": "long", "logicalType": "timestamp-millis"}
        # Only unchanged logical types: a changed one (date -> timestamp-millis) resolves
        # by its underlying type, as the spec says, but fastavro then decodes with the
        # writer's logical type, so the value would not validate against the reader.
        return draw(st.sampled_from([(date, date), (millis, millis)]))
    if kind == "enum":
        name = f"E{next(names)}"
        pool = ["A", "B", "C", "D", "E"]
        w_symbols = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        r_symbols = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        reader = {"type": "enum", "name": name, "symbols": r_symbols}
        if draw(st.booleans()):
            reader["default"] = r_symbols[0]
        return {"type": "enum", "name": name, "symbols": w_symbols}, reader
    if kind == "fixed":
        name = f"F{next(names)}"
        w_size = draw(st.integers(1, 4))
        r_size = w_size if draw(st.booleans()) else draw(st.integers(1, 4))
        r_name = name if draw(st.integers(0, 4)) else f"Other{name}"
        return ({"type": "fixed", "name": name, "size": w_size},
                {"type": "fixed", "name": r_name, "size": r_size})
    if kind in ("array", "map"):
        inner = "items" if kind == "array" else "values"
        w, r = draw(_type_pair(names, depth - 1))
        return {"type": kind, inner: w}, {"type": kind, inner: r}
    if kind == "union":
        w, r = draw(_type_pair(names, depth - 1))
        if isinstance(w, list) or isinstance(r, list) or w == "null" or r == "null":
            return w, r  # unions cannot nest, nor hold two nulls
        shape = draw(st.sampled_from(["both", "null_first_both", "reader_only", "writer_only",
                                      "reader_reordered"]))
        if shape == "both":
            return ["null", w], ["null", r]
        if shape == "null_first_both":
            return [w, "null"], [r, "null"]
        if shape == "reader_only":
            return w, ["null", r]
        if shape == "writer_only":
            return ["null", w], r
        return ["null", w], [r, "null"]
    return draw(_record_pair(names, depth - 1))


@st.composite
def _record_pair(draw, names: itertools.count, depth: int) -> tuple[dict, dict]:
    name = f"R{next(names)}"
    w_fields: list[dict] = []
    r_fields: list[dict] = []
    for index in range(draw(st.integers(0, 4))):
        fname = f"f{index}"
        shape = draw(st.sampled_from(["both", "both", "both", "writer_only", "reader_only",
                                      "reader_only_default", "renamed_with_alias"]))
        if shape == "writer_only":
            w_fields.append(field(fname, draw(_type_pair(names, depth))[0]))
        elif shape == "reader_only":
            r_fields.append(field(fname, "int"))
        elif shape == "reader_only_default":
            r_fields.append(draw(st.sampled_from([
                field(fname, "int", default=7),
                field(fname, ["null", "string"], default=None),
                field(fname, {"type": "array", "items": "long"}, default=[]),
            ])))
        else:
            w, r = draw(_type_pair(names, depth))
            w_fields.append(field(fname, w))
            if shape == "renamed_with_alias":
                r_fields.append(field(f"{fname}_new", r, aliases=[fname]))
            else:
                r_fields.append(field(fname, r))
    if draw(st.booleans()):
        r_fields.reverse()  # field order does not matter to resolution
    reader = {"type": "record", "name": name, "fields": r_fields}
    rename = draw(st.sampled_from(["keep"] * 6 + ["alias", "no_alias"]))
    if rename != "keep":
        reader["name"] = f"{name}New"
        if rename == "alias":
            reader["aliases"] = [name]
    return {"type": "record", "name": name, "fields": w_fields}, reader


@st.composite
def _schema_pairs(draw) -> tuple[dict, dict]:
    writer, reader = draw(_record_pair(itertools.count(), depth=2))
    namespace = {"namespace": "prop"}
    return {**writer, **namespace}, {**reader, **namespace}


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schema_pairs())
def test_data_written_by_a_compatible_writer_is_readable(pair):
    writer, reader = pair
    if reader_incompatibilities(writer=writer, reader=reader):
        return  # the converse is checked, on pairs where it must hold, below
    assert _read_problems(writer, reader, count=15) == []


def _always_reached(inc: Incompatibility) -> bool:
    """Whether every written record exercises the location: it is reached through record
    fields only, not through an array or map (which may be empty) or a union branch."""
    segments = inc.path.strip("/").split("/")
    return not any(s in ("items", "values") or s.isdigit() for s in segments)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schema_pairs())
def test_a_single_reported_incompatibility_is_a_real_read_failure(pair):
    # No false alarms: when the checker reports exactly one problem, at a place every
    # record passes through, some of the generated records really do fail to read
    # (a symbol or union branch is picked at random per record, so 60 records make
    # missing it vanishingly unlikely).
    writer, reader = pair
    found = reader_incompatibilities(writer=writer, reader=reader)
    if len(found) != 1 or not _always_reached(found[0]):
        return
    assert _read_problems(writer, reader, count=60) != [], found


@pytest.mark.parametrize("writer, reader", [
    pytest.param(record(field("a", "int")), record(field("a", "int"), field("b", "int")),
                 id="field_added_without_default"),
    pytest.param(record(field("n", "long")), record(field("n", "int")), id="long_narrowed_to_int"),
    pytest.param(record(field("s", status_enum("A", "B", "C"))), record(field("s", status_enum("A"))),
                 id="enum_symbols_removed"),
    pytest.param(record(field("u", ["null", "string"])), record(field("u", "string")),
                 id="union_branch_lost"),
    pytest.param(record(field("u", ["null", "string", "int"])), record(field("u", ["null", "string"])),
                 id="union_branch_lost_in_union"),
    pytest.param(record(field("d", {"type": "fixed", "name": "D", "size": 4})),
                 record(field("d", {"type": "fixed", "name": "D", "size": 8})), id="fixed_resized"),
    pytest.param(record(field("x", "string")), record(field("x", "int")), id="string_to_int"),
    pytest.param(record(field("r", ["null", record(field("a", "int"), name="A")])),
                 record(field("r", ["null", record(field("a", "int"), name="B")])),
                 id="optional_record_renamed"),
    pytest.param(record(field("xs", {"type": "array", "items": "double"})),
                 record(field("xs", {"type": "array", "items": "float"})), id="array_items_narrowed"),
])
def test_data_written_by_an_incompatible_writer_fails_to_read(writer, reader):
    assert reader_incompatibilities(writer=writer, reader=reader) != []
    assert _read_problems(writer, reader, count=60) != []


def test_bytes_read_as_string_when_they_are_utf8():
    writer, reader = record(field("b", "bytes")), record(field("b", "string"))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), {"b": "héllo".encode()})
    buf.seek(0)

    assert reader_incompatibilities(writer=writer, reader=reader) == []
    assert fastavro.schemaless_reader(buf, fastavro.parse_schema(writer),
                                      fastavro.parse_schema(reader)) == {"b": "héllo"}
