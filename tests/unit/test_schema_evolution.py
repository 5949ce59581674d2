"""Schema evolution: every event is versioned, compatibility is checked in CI, old logs stay readable.

Replay from offset zero reads events written by last year's code with this year's. The
guarantees, each with its tests below:

* ``swarmlog schema check`` passes on the repo's schemas and fails, naming the rule,
  on each kind of breaking change (and on a misnamed upcaster).
* Events of every version decode into the newest one: Avro defaults, then upcasters.
* A v1 log kept in the repo since v1 (``fixtures/v1-log.bin``) replays with today's
  code to the hashes recorded when it was made, byte for byte on the real Kafka, and
  v1, v2 and v3 events side by side in one log are mirrored and replayed
  (``tests/integration/test_schema_evolution.py``).
* Random data of every version reads as the next version (``generate_many``).

An unknown fingerprint is a typed error naming offset and fingerprint
(``test_schemas_and_codec.py::test_unknown_fingerprint_names_offset_and_fingerprint``),
and the sink dead-letters such a message
(``test_sink.py::test_garbage_lands_in_dead_letters_and_the_sink_keeps_going``); the
evolution-specific case, an event from a *newer* schema than the reader knows, is here.
"""

from __future__ import annotations

import io
import itertools
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.utils import generate_many

from swarmlog.errors import SchemaError, SchemaNotFound
from swarmlog.schema.check import conforms, property_check, run
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.compat import Rule
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.schema.upcasting import discover_upcasters, upcasters_for
from swarmlog.settings import Settings

from ..conftest import REPO, subprocess_env
from ..fixtures.make_v1_log import BIN, SIDECAR, unframe
from ..fixtures.make_v1_log import main as make_v1_log

REPO_SCHEMAS = REPO / "schemas"


def _repo_registry() -> SchemaRegistry:
    return SchemaRegistry.load(REPO_SCHEMAS)


def _copy_schemas(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _schema(d: Path, event_type: str, version: int) -> dict[str, Any]:
    return json.loads((d / event_type / f"v{version}.avsc").read_text())


def _payload_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return next(f["type"] for f in schema["fields"] if f["name"] == "payload")["fields"]


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = run(["check", *argv])
    return code, capsys.readouterr().out.strip().splitlines()


def _subprocess_env() -> dict[str, str]:
    """A `swarmlog` subprocess's environment; the schema check needs no cluster."""
    return subprocess_env(Settings(schema_dir=REPO_SCHEMAS))


def _record(version: int, payload: dict[str, Any], *, agent: str = "alice", to: str | None = "bob",
            event_id: str = "e1") -> dict[str, Any]:
    return {"event_id": event_id, "run_id": "r1", "agent_id": agent, "event_type": "agent.message",
            "schema_version": version, "to": to, "causes": [], "payload": payload}


# --- swarmlog schema check -------------------------------------------------------------------


def test_schema_check_passes_on_the_repo_schemas(capsys):
    code, out = _check(capsys, "--schema-dir", str(REPO_SCHEMAS), "--property")
    assert code == 0, out
    assert len(out) == 1 and out[0].startswith("schema check passed:")
    assert "upcaster" in out[0] and "property:" in out[0]


def test_schema_check_runs_as_a_command_and_fails_ci_with_exit_1(tmp_path):
    env = _subprocess_env()
    ok = subprocess.run([sys.executable, "-m", "swarmlog.schema.check", "check"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    d = _copy_schemas(tmp_path)
    _break_by_adding_a_field_without_default(d)
    bad = subprocess.run([sys.executable, "-m", "swarmlog.schema.check", "check", "--schema-dir", str(d)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "reader_field_missing_default" in bad.stdout


def _break_by_adding_a_field_without_default(d: Path) -> str:
    v3 = _schema(d, "agent.message", 3)
    _payload_fields(v3).append({"name": "reply_to", "type": "string"})
    (d / "agent.message" / "v4.avsc").write_text(json.dumps(v3))
    return "agent.message v4 cannot read v3: field 'payload.reply_to' was added without a default"


def _break_by_narrowing_a_type(d: Path) -> str:
    v1 = _schema(d, "run.started", 1)
    seed = next(f for f in _payload_fields(v1) if f["name"] == "seed")
    assert seed["type"] == "long"
    seed["type"] = "int"
    (d / "run.started" / "v2.avsc").write_text(json.dumps(v1))
    return "run.started v2 cannot read v1: field 'payload.seed' is long in v1 but int in v2"


def _break_by_removing_an_enum_symbol(d: Path) -> str:
    v3 = _schema(d, "agent.message", 3)
    urgency = next(f for f in _payload_fields(v3) if f["name"] == "urgency")
    urgency["type"]["symbols"].remove("critical")
    (d / "agent.message" / "v4.avsc").write_text(json.dumps(v3))
    return "agent.message v4 cannot read v3: enum symbol 'critical' of field 'payload.urgency' was removed"


@pytest.mark.parametrize(("breakage", "rule"), [
    (_break_by_adding_a_field_without_default, Rule.READER_FIELD_MISSING_DEFAULT),
    (_break_by_narrowing_a_type, Rule.TYPE_NARROWED),
    (_break_by_removing_an_enum_symbol, Rule.ENUM_SYMBOL_REMOVED),
], ids=["field-added-without-default", "long-narrowed-to-int", "enum-symbol-removed"])
def test_schema_check_fails_naming_event_versions_field_and_rule(tmp_path, capsys, breakage, rule):
    d = _copy_schemas(tmp_path)
    expected = breakage(d)
    code, out = _check(capsys, "--schema-dir", str(d), "--property")
    assert code == 1
    *violations, summary = out
    assert summary.startswith("schema check failed:")
    line = next((v for v in violations if v.startswith(expected)), None)
    assert line is not None, f"no line starting {expected!r} in {violations}"
    assert f"(rule {rule})" in line
    # Every problem is one line naming the type, the versions and the rule.
    assert all(" cannot read v" in v and "(rule " in v for v in violations), violations


def test_backward_transitive_catches_what_the_previous_version_alone_would_not(tmp_path, capsys):
    # v4 takes `priority` back, as a string: v3 has no priority, so v4 reads v3 fine,
    # but v2 wrote priority as an int. Only the transitive check reads v2 with v4.
    d = _copy_schemas(tmp_path)
    v3 = _schema(d, "agent.message", 3)
    _payload_fields(v3).append({"name": "priority", "type": "string", "default": ""})
    (d / "agent.message" / "v4.avsc").write_text(json.dumps(v3))
    code, out = _check(capsys, "--schema-dir", str(d))
    assert code == 1
    assert out[0].startswith("agent.message v4 cannot read v2: field 'payload.priority' is int in v2 but string")
    assert "(rule type_mismatch)" in out[0]
    assert not any("cannot read v3" in line for line in out)


def test_a_types_mode_in_compatibility_json_adds_forward_checks(tmp_path, capsys):
    # Dropping a field is backward compatible (the newer reader skips it) but not
    # forward: the older reader needs it and has no default.
    d = _copy_schemas(tmp_path)
    v1 = _schema(d, "run.started", 1)
    v1["fields"][-1]["type"]["fields"] = [f for f in _payload_fields(v1) if f["name"] != "code_version"]
    (d / "run.started" / "v2.avsc").write_text(json.dumps(v1))
    assert _check(capsys, "--schema-dir", str(d))[0] == 0
    modes = json.loads((d / "compatibility.json").read_text())
    modes["event_types"]["run.started"] = "FULL"
    (d / "compatibility.json").write_text(json.dumps(modes))
    code, out = _check(capsys, "--schema-dir", str(d))
    assert code == 1
    assert out[0].startswith("run.started v1 cannot read v2: field 'payload.code_version' was removed")
    assert "(rule reader_field_missing_default)" in out[0]
    # --mode overrides the file, for every type.
    assert _check(capsys, "--schema-dir", str(d), "--mode", "FORWARD")[0] == 1
    modes["event_types"]["run.started"] = "BACKWARD_TRANSITIVE"
    (d / "compatibility.json").write_text(json.dumps(modes))
    assert _check(capsys, "--schema-dir", str(d))[0] == 0


@pytest.mark.parametrize("entry, complaint", [
    ({"event_types": {"agent.message": "NONE"}}, "BACKWARD and NONE are refused"),
    ({"default": "BACKWARD"}, "BACKWARD and NONE are refused"),
    ({"event_types": {"agent.mesage": "FULL"}}, "agent.mesage, which have no schemas"),
    ({"event_types": {"agent.message": "SIDEWAYS"}}, "'SIDEWAYS' is not one of"),
])
def test_compatibility_json_refuses_weak_modes_and_unknown_types(tmp_path, capsys, entry, complaint):
    d = _copy_schemas(tmp_path)
    (d / "compatibility.json").write_text(json.dumps(entry))
    code, out = _check(capsys, "--schema-dir", str(d))
    assert code == 1 and complaint in out[0], out


def test_schema_list_shows_type_version_fingerprint_and_file(capsys):
    assert run(["list", "--schema-dir", str(REPO_SCHEMAS)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["TYPE", "VERSION", "FINGERPRINT", "FILE"]
    registry = _repo_registry()
    for version in (1, 2, 3):
        s = registry.get("agent.message", version)
        assert ["agent.message", str(version), s.fingerprint_hex, str(s.path)] in [line.split() for line in lines]
    assert run(["list", "--schema-dir", str(REPO_SCHEMAS), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(registry) and set(rows[0]) == {"event_type", "version", "fingerprint", "file"}


# --- upcasters: found beside the schemas, named after the versions they bridge ----------------


def test_upcasters_are_found_beside_the_schemas_they_bridge():
    registry = _repo_registry()
    found = discover_upcasters(REPO_SCHEMAS, registry=registry)
    assert ("agent.message", 2) in found and found[("agent.message", 2)].__name__ == "v2_to_v3"
    assert set(upcasters_for(registry)) == set(found)


@pytest.mark.parametrize("source, complaint", [
    ("def v2_to_v4(r):\n    return r\n", "must bridge one version (v2_to_v3)"),
    ("def v3_to_v4(r):\n    return r\n", "names v4, but agent.message has versions v1..v3"),
    ("def v0_to_v1(r):\n    return r\n", "names v0"),
    ("def upcast_v2_v3(r):\n    return r\n", "'upcast_v2_v3' is not named v<N>_to_v<N+1>"),
    ("def v1_to_v2(r, extra):\n    return r\n", "must take exactly one argument"),
    ("v1_to_v2 = 5\n", "must be a function"),
    ("raise RuntimeError('boom')\n", "importing it failed"),
], ids=["skips-a-version", "target-missing", "no-version-0", "misnamed", "two-args", "not-callable", "raises"])
def test_a_misnamed_or_broken_upcaster_is_a_schema_error_saying_what_is_wrong(tmp_path, capsys, source, complaint):
    d = _copy_schemas(tmp_path)
    (d / "agent.message" / "upcasters.py").write_text(source)
    with pytest.raises(SchemaError, match=r"upcasters\.py") as err:
        discover_upcasters(d)
    assert complaint in str(err.value)
    code, out = _check(capsys, "--schema-dir", str(d))
    assert code == 1 and complaint in out[0]


def test_an_upcasters_file_without_schemas_beside_it_is_refused(tmp_path):
    d = _copy_schemas(tmp_path)
    (d / "agent.mesage").mkdir()
    shutil.copy(d / "agent.message" / "upcasters.py", d / "agent.mesage" / "upcasters.py")
    with pytest.raises(SchemaError, match="no schemas for 'agent.mesage' beside it"):
        discover_upcasters(d)


# --- decoding every version into the newest ----------------------------------------------------


def _encode(registry: SchemaRegistry, version: int, payload: dict[str, Any], **kw: Any) -> bytes:
    return Encoder(registry.get("agent.message", version)).encode(_record(version, payload, **kw))


@pytest.mark.parametrize("version, payload, urgency", [
    (1, {"kind": "k", "body": "b"}, "normal"),               # v1 -> v2 default priority 0 -> normal
    (2, {"kind": "k", "body": "b", "priority": -3}, "low"),
    (2, {"kind": "k", "body": "b", "priority": 0}, "normal"),
    (2, {"kind": "k", "body": "b", "priority": 1}, "high"),
    (2, {"kind": "k", "body": "b", "priority": 9}, "high"),
    (2, {"kind": "k", "body": "b", "priority": 10}, "critical"),
    (3, {"kind": "k", "body": "b", "urgency": "critical"}, "critical"),
])
def test_decoder_reads_v1_v2_and_v3_into_v3_defaults_then_upcaster(version, payload, urgency):
    registry = _repo_registry()
    decoder = Decoder(registry, upcasters=discover_upcasters(REPO_SCHEMAS, registry=registry))
    writer, record = decoder.decode(_encode(registry, version, payload), 7)
    assert writer.version == version
    assert record["payload"] == {"kind": "k", "body": "b", "urgency": urgency}
    # The envelope is as written: schema_version is a fact about the bytes, not the reader.
    assert record["schema_version"] == version and record["to"] == "bob" and record["agent_id"] == "alice"
    assert conforms(record, registry.get("agent.message", 3)) is None


def test_decoder_applies_the_upcasters_beside_the_schemas_by_default():
    registry = _repo_registry()
    _, record = Decoder(registry).decode(_encode(registry, 2, {"kind": "k", "body": "b", "priority": 10}), 0)
    assert record["payload"]["urgency"] == "critical"


def test_without_its_upcaster_avro_resolution_alone_would_lose_the_meaning():
    # Why v2 -> v3 needs code: Avro drops v2's priority and fills v3's default.
    registry = _repo_registry()
    _, record = Decoder(registry, upcasters={}).decode(
        _encode(registry, 2, {"kind": "k", "body": "b", "priority": 10}), 0)
    assert record["payload"]["urgency"] == "normal"


def test_newest_writer_still_accepts_payloads_of_only_kind_and_body():
    # Producers all over the codebase write {"kind", "body"}: every field added since has a default.
    newest = _repo_registry().latest("agent.message")
    assert newest.validate_payload({"kind": "k", "body": "b"}) == {"kind": "k", "body": "b", "urgency": "normal"}


def test_an_event_from_a_newer_schema_than_the_reader_knows_names_offset_and_fingerprint(tmp_path):
    # Deploy order matters: readers must have a version's schema before any writer uses it.
    d = _copy_schemas(tmp_path)
    v3 = _schema(d, "agent.message", 3)
    _payload_fields(v3).append({"name": "thread", "type": ["null", "string"], "default": None})
    (d / "agent.message" / "v4.avsc").write_text(json.dumps(v3))
    newer = SchemaRegistry.load(d)
    value = Encoder(newer.get("agent.message", 4)).encode(
        _record(4, {"kind": "k", "body": "b", "urgency": "low", "thread": "t1"}))
    with pytest.raises(SchemaNotFound) as err:
        Decoder(_repo_registry()).decode(value, 1234)
    fp = newer.get("agent.message", 4).fingerprint_hex
    assert err.value.offset == 1234 and err.value.fingerprint == fp
    assert "offset 1234" in str(err.value) and fp in str(err.value)


# --- the v1 fixture log, kept in the repo for good -------------------------------------------


def test_the_v1_fixture_is_exactly_what_its_script_makes_from_the_v1_schemas(capsys):
    assert make_v1_log(["--check"]) == 0, capsys.readouterr().out
    sidecar = json.loads(SIDECAR.read_text())
    registry = _repo_registry()
    for event_type, writer in sidecar["writer_schemas"].items():
        # A v1 file edited after the fact would orphan every old event: its fingerprint is pinned here.
        assert registry.get(event_type, 1).fingerprint_hex == writer["fingerprint"]
    values = unframe(BIN.read_bytes())
    assert len(values) == sidecar["events"]
    assert {v[2:10].hex() for v in values} == {w["fingerprint"] for w in sidecar["writer_schemas"].values()}


# --- property tests: random data of every version reads as the next ------------------------------

_REGISTRY = _repo_registry()
_PAIRS = [(t, a.version, b.version) for t in _REGISTRY.event_types()
          for a, b in itertools.pairwise(_REGISTRY.versions(t))]


def test_the_repo_has_version_pairs_to_test():
    assert ("agent.message", 1, 2) in _PAIRS and ("agent.message", 2, 3) in _PAIRS


@pytest.mark.parametrize("event_type, older, newer", _PAIRS, ids=[f"{t}-v{a}-v{b}" for t, a, b in _PAIRS])
def test_generated_data_of_each_version_reads_as_the_next(event_type, older, newer):
    registry = _repo_registry()
    upcasters = discover_upcasters(REPO_SCHEMAS, registry=registry)
    writer, reader = registry.get(event_type, older), registry.get(event_type, newer)
    upcaster = upcasters.get((event_type, older))
    state = random.getstate()
    random.seed(f"{event_type} v{older}")
    try:
        data = list(generate_many(writer.schema, 200))
    finally:
        random.setstate(state)
    for datum in data:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer.parsed, datum)
        raw = buf.getvalue()
        # Avro resolution alone (what the checker vouches for), where the decoder resolves ...
        if upcaster is None:
            resolved = fastavro.schemaless_reader(io.BytesIO(raw), writer.parsed, reader.parsed)
            assert conforms(resolved, reader) is None
        # ... and the upcaster, where the version changed meaning (or resolution cannot read it):
        # a valid next-version record, with the envelope untouched and the fields both versions share kept.
        else:
            before = fastavro.schemaless_reader(io.BytesIO(raw), writer.parsed, None)
            after = upcaster(dict(before))
            assert conforms(after, reader) is None
            assert {k: v for k, v in after.items() if k != "payload"} == \
                   {k: v for k, v in before.items() if k != "payload"}
            shared = set(before["payload"]) & set(after["payload"])
            assert {k: after["payload"][k] for k in shared} == {k: before["payload"][k] for k in shared}


def test_generated_data_of_every_version_decodes_into_the_newest():
    report = property_check(_repo_registry(), discover_upcasters(REPO_SCHEMAS), count=200, seed=1)
    assert report.failures == [] and report.pairs == len(_PAIRS)


def test_the_property_check_catches_an_upcaster_the_static_check_cannot(tmp_path, capsys):
    # The schemas are compatible, so compat.check_versions is content; the upcaster
    # maps high priorities to a symbol v3 does not have.
    d = _copy_schemas(tmp_path)
    path = d / "agent.message" / "upcasters.py"
    path.write_text(path.read_text().replace('return "critical"', 'return "urgent"'))
    assert _check(capsys, "--schema-dir", str(d))[0] == 0
    code, out = _check(capsys, "--schema-dir", str(d), "--property")
    assert code == 1
    assert any(line.startswith("agent.message v3 cannot read generated v2 datum") and "upcaster v2_to_v3" in line
               for line in out), out
