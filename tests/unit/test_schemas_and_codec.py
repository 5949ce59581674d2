"""Schemas load once and strictly; the wire framing is Avro single-object encoding."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import fastavro
import pytest

from swarmlog.errors import InvalidEvent, SchemaError, SchemaNotFound, UndecodableMessage, UnknownEventType
from swarmlog.schema.codec import HEADER_LEN, MAGIC, Decoder, Encoder
from swarmlog.schema.registry import SchemaRegistry

REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _record(**payload):
    return {"event_id": "e1", "run_id": "r1", "agent_id": "alice", "event_type": "agent.message",
            "schema_version": 1, "to": "bob", "causes": [3, 7], "payload": payload}


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry.load(REPO_SCHEMAS)


def test_every_message_starts_with_single_object_marker_and_fingerprint(registry):
    schema = registry.get("agent.message", 1)
    value = Encoder(schema).encode(_record(kind="k", body="b"))
    assert value[:2] == MAGIC == b"\xc3\x01"
    assert value[2:HEADER_LEN] == schema.fingerprint
    # Any Avro reader with the schema file reads the body: no swarmlog code needed.
    plain = fastavro.schemaless_reader(io.BytesIO(value[HEADER_LEN:]), fastavro.parse_schema(
        json.loads(schema.path.read_text())), None)
    assert plain["payload"] == {"kind": "k", "body": "b"}


def test_fingerprint_is_the_avro_spec_crc64_of_the_canonical_form(registry):
    # Avro's test vectors (share/test/data/schema-tests.txt): "int" -> 8247732601305521295,
    # written little-endian after C3 01 by single-object encoding.
    from fastavro.schema import fingerprint

    assert fingerprint('"int"', "CRC-64-AVRO") == (8247732601305521295).to_bytes(8, "little").hex()
    assert fingerprint('"null"', "CRC-64-AVRO") == (7195948357588979594).to_bytes(8, "little").hex()
    for s in registry:
        assert len(s.fingerprint) == 8


def test_the_registrys_own_crc64_gives_fastavros_fingerprint_of_every_schema(registry):
    # swarmlog computes the fingerprint itself (fastavro rebuilds its table on every call): the
    # same bytes as fastavro's, on Avro's test vectors, on every built-in schema, on non-ASCII text.
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    from swarmlog.schema.registry import crc64_avro

    assert crc64_avro('"int"') == (8247732601305521295).to_bytes(8, "little")
    assert crc64_avro('"null"') == (7195948357588979594).to_bytes(8, "little")
    canonicals = [to_parsing_canonical_form(s.parsed) for s in registry]
    canonicals += ['{"type":"enum","name":"é","symbols":["ü"]}', ""]
    for canonical in canonicals:
        assert crc64_avro(canonical).hex() == fingerprint(canonical, "CRC-64-AVRO"), canonical
    assert {s.fingerprint for s in registry} == {crc64_avro(c) for c in canonicals[:len(registry)]}


def test_decode_round_trip_resolves_writer_by_fingerprint(registry):
    schema = registry.get("agent.message", 1)
    value = Encoder(schema).encode(_record(kind="k", body="b"))
    writer, rec = Decoder(registry).decode(value, 42)
    assert writer is registry.latest("agent.message") or writer.version == 1
    assert rec["to"] == "bob" and rec["causes"] == [3, 7] and rec["payload"]["body"] == "b"


def test_garbage_is_a_typed_error_naming_the_offset(registry):
    with pytest.raises(UndecodableMessage) as err:
        Decoder(registry).decode(b"not avro at all", 17)
    assert err.value.offset == 17 and "17" in str(err.value)


def test_unknown_fingerprint_names_offset_and_fingerprint(registry):
    value = MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08" + b"\x00"
    with pytest.raises(SchemaNotFound) as err:
        Decoder(registry).decode(value, 99)
    assert err.value.offset == 99 and err.value.fingerprint == "0102030405060708"


def test_truncated_body_is_undecodable_not_a_crash(registry):
    schema = registry.get("agent.message", 1)
    value = Encoder(schema).encode(_record(kind="k", body="b" * 50))
    with pytest.raises(UndecodableMessage):
        Decoder(registry).decode(value[:-20], 5)


def test_invalid_payload_names_the_field(registry):
    schema = registry.get("agent.message")
    with pytest.raises(InvalidEvent) as err:
        schema.validate_payload({"kind": "k", "body": 5})
    assert err.value.field == "payload.body"
    with pytest.raises(InvalidEvent) as err:
        schema.validate_payload({"kind": "k"})
    assert err.value.field == "payload.body" and "required" in err.value.problem.lower()
    with pytest.raises(InvalidEvent) as err:
        schema.validate_payload({"kind": "k", "body": "b", "extra": 1})
    assert err.value.field == "payload.extra"


def test_validation_is_strict_no_silent_coercion(registry):
    schema = registry.get("run.started")
    with pytest.raises(InvalidEvent) as err:
        schema.validate_payload({"swarm": "s", "seed": "5", "code_version": "x", "agents": []})
    assert err.value.field == "payload.seed"


def test_unknown_event_type_lists_known_types(registry):
    with pytest.raises(UnknownEventType) as err:
        registry.get("agent.mesage")
    assert "agent.message" in str(err.value)


def test_generated_model_matches_schema_fields(registry):
    for s in registry:
        model = s.payload_model()
        assert list(model.model_fields) == [f["name"] for f in s.payload_schema["fields"]]


def _copy_schemas(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, target)
    return target


def test_two_versions_with_the_same_fingerprint_are_refused(tmp_path):
    d = _copy_schemas(tmp_path)
    shutil.copy(d / "agent.message" / "v1.avsc", d / "agent.message" / "v2.avsc")
    with pytest.raises(SchemaError, match="same fingerprint"):
        SchemaRegistry.load(d)


def test_a_version_gap_is_refused(tmp_path):
    d = _copy_schemas(tmp_path)
    src = json.loads((d / "agent.message" / "v1.avsc").read_text())
    src["fields"][-1]["type"]["fields"].append({"name": "x", "type": "int", "default": 0})
    gap = len(list((d / "agent.message").glob("v*.avsc"))) + 2  # one past the next version
    (d / "agent.message" / f"v{gap}.avsc").write_text(json.dumps(src))
    with pytest.raises(SchemaError, match="no gaps"):
        SchemaRegistry.load(d)


def test_a_schema_without_the_envelope_is_refused(tmp_path):
    d = _copy_schemas(tmp_path)
    src = json.loads((d / "agent.message" / "v1.avsc").read_text())
    del src["fields"][6]  # causes
    (d / "agent.message" / "v1.avsc").write_text(json.dumps(src))
    with pytest.raises(SchemaError, match="envelope"):
        SchemaRegistry.load(d)


def test_the_fast_envelope_encoder_writes_exactly_what_fastavro_writes(registry):
    """Encoder.encode_event writes the envelope by hand (the hot path of append); every byte
    must equal fastavro's encoding of the same record, for every schema and odd values."""
    import random

    from fastavro.utils import generate_many

    rng = random.Random(7)
    names = ["", "a", "ü-agent", "x" * 70, "agent-" + "é" * 40]
    for schema in registry:
        enc = Encoder(schema)
        payloads = list(generate_many(schema.payload_schema, 300))
        for payload in payloads:
            to = rng.choice([None, *names])
            causes = rng.choice([[], [0], [63, 64, 8191, 8192], [2**40, 2**62], list(range(rng.randint(0, 200)))])
            record = {"event_id": rng.choice(names) + str(rng.random()), "run_id": rng.choice(names),
                      "agent_id": rng.choice(names), "event_type": schema.event_type,
                      "schema_version": schema.version, "to": to, "causes": causes, "payload": payload}
            fast = enc.encode_event(record["event_id"], record["run_id"], record["agent_id"], to, causes, payload)
            assert fast == enc.encode(record), (schema.event_type, schema.version, record)


def test_a_schema_file_is_parsed_once_per_text_and_again_once_edited(tmp_path):
    d = _copy_schemas(tmp_path)
    first, again = SchemaRegistry.load(d), SchemaRegistry.load(d)
    assert again.get("agent.message") is first.get("agent.message")  # the same parse, shared
    latest = first.get("agent.message")
    src = json.loads(latest.path.read_text())
    src["fields"][-1]["type"]["fields"].append({"name": "edited", "type": "int", "default": 0})
    latest.path.write_text(json.dumps(src))
    edited = SchemaRegistry.load(d).get("agent.message")
    assert edited.version == latest.version and edited.fingerprint != latest.fingerprint
    assert edited.defaults["edited"] == 0 and "edited" not in latest.defaults
