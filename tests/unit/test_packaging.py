"""What the wheel carries, and where schemas come from once swarmlog is installed.

The built-in schemas are package data (``swarmlog.schema.builtin``, mapped from the repo's
``schemas/``), found with ``importlib.resources``; a user's own event types come from the
directories of ``SWARMLOG_SCHEMA_PATH``, layered over them. That the built wheel really
works outside the repo is ``tests/integration/test_wheel.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from swarmlog.cli import main
from swarmlog.errors import SchemaClash, SchemaError
from swarmlog.schema.check import load_modes
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.registry import BUILTIN_PACKAGE, SchemaRegistry, builtin_schema_dir
from swarmlog.schema.upcasting import discover_upcasters, upcasters_for
from swarmlog.settings import Settings

from ..conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _user_type(root: Path, event_type: str = "billing.invoice", *, fields: list[dict] | None = None,
               version: int = 1) -> Path:
    """A schema file of the user's own, in the envelope every event carries."""
    envelope = json.loads((REPO / "schemas" / "agent.message" / "v1.avsc").read_text())["fields"][:7]
    schema = {"type": "record", "name": "Invoice" + str(version), "namespace": "billing", "fields": [
        *envelope,
        {"name": "payload", "type": {"type": "record", "name": f"InvoicePayload{version}",
                                     "fields": fields or [{"name": "amount", "type": "long"}]}}]}
    path = root / event_type / f"v{version}.avsc"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))
    return path


# --- the wheel's contents ---------------------------------------------------------------------


def test_every_subpackage_is_listed_for_the_wheel():
    # `packages` is an explicit list (two packages are mapped from outside platform/): a new
    # subpackage missing from it would be left out of the wheel and break only when installed.
    listed = set(SETUPTOOLS["packages"])
    found = {".".join(p.parent.relative_to(REPO / "platform").parts)
             for p in (REPO / "platform" / "swarmlog").rglob("__init__.py")}
    found |= {".".join(p.parent.relative_to(REPO / "connectors").parts)
              for p in (REPO / "connectors").rglob("__init__.py")}
    found |= set(SETUPTOOLS["package-dir"]) - {"swarmlog", "swarmlog_connectors"}
    assert listed == found


def test_the_wheel_maps_the_repos_schemas_and_examples_folders_and_ships_py_typed():
    assert SETUPTOOLS["package-dir"][BUILTIN_PACKAGE] == "schemas"
    assert SETUPTOOLS["package-dir"]["swarmlog.examples"] == "examples"
    data = SETUPTOOLS["package-data"]
    assert "py.typed" in data["swarmlog"] and "py.typed" in data["swarmlog_connectors"]
    assert (REPO / "platform" / "swarmlog" / "py.typed").is_file()
    assert (REPO / "connectors" / "swarmlog_connectors" / "py.typed").is_file()
    # Every file of schemas/ matches a package-data pattern, so none is left out of the wheel.
    patterns = data[BUILTIN_PACKAGE]
    for path in (REPO / "schemas").rglob("*"):
        rel = path.relative_to(REPO / "schemas")
        if path.is_file() and "__pycache__" not in rel.parts and rel.name != "__init__.py":
            assert any(rel.match(p) for p in patterns), f"schemas/{rel} is not shipped"


def test_the_c_modules_are_optional_extensions_built_from_their_sources():
    # Optional: where they cannot be compiled, swarmlog installs with their Python paths (the
    # guard's Python hook, the decoder's Python routing, the generated Python Avro readers;
    # tests/integration/test_wheel.py builds
    # both ways); make rebuilds them when their source changes.
    exts = SETUPTOOLS["ext-modules"]
    assert exts == [
        {"name": "swarmlog.guard._native", "sources": ["platform/swarmlog/guard/_native.c"], "optional": True},
        {"name": "swarmlog.schema._route", "sources": ["platform/swarmlog/schema/_route.c"],
         "depends": ["platform/swarmlog/schema/_avro_binary.h"], "optional": True},
        {"name": "swarmlog.schema._avro_native", "sources": ["platform/swarmlog/schema/_avro_native.c"],
         "depends": ["platform/swarmlog/schema/_avro_binary.h"], "optional": True},
    ]
    makefile = re.sub(r"\\\n\s*", " ", (REPO / "Makefile").read_text())  # continued lines joined
    listed = re.search(r"^C_SOURCES := (.*)$", makefile, re.MULTILINE)
    assert listed is not None
    for venv in (r"\$\(STAMP\)", r"\.venv-%/\.installed"):  # 3.11's venv, and each other CPython's
        assert re.search(rf"^{venv}: pyproject\.toml \$\(C_SOURCES\)$", makefile, re.MULTILINE), venv
    for ext in exts:
        source = REPO / ext["sources"][0]
        assert source.is_file() and source.with_suffix(".pyi").is_file()
        for needed in ext["sources"] + ext.get("depends", []):
            assert needed in listed.group(1).split()  # an edit rebuilds it in every venv


def test_the_pythons_pyproject_claims_are_the_ones_make_test_runs_on():
    # requires-python and the classifiers name exactly the CPythons `make test` runs the unit suite on
    # (.venv's, the oldest, and a venv per other one), with no gap and nothing newer claimed.
    makefile = (REPO / "Makefile").read_text()
    oldest = re.search(r"^OLDEST_PYTHON := (\S+)$", makefile, re.MULTILINE)
    others = re.search(r"^OTHER_PYTHONS := (.+)$", makefile, re.MULTILINE)
    assert oldest is not None and others is not None
    tested = [oldest.group(1), *others.group(1).split()]
    minors = [int(v.split(".")[1]) for v in tested]
    assert all(v.startswith("3.") for v in tested) and minors == list(range(minors[0], minors[-1] + 1))
    assert re.search(r"^test: .*\bunit unit-pythons\b.*\bintegration-\$\(NEWEST_PYTHON\)", makefile, re.MULTILINE)
    project = PYPROJECT["project"]
    assert project["requires-python"] == f">={tested[0]},<3.{minors[-1] + 1}"
    claimed = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert claimed == tested
    assert "Programming Language :: Python :: Implementation :: CPython" in project["classifiers"]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{tested[0].replace('.', '')}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == tested[0]


def test_make_finds_each_cpython_it_tests_on_or_says_how_to_install_one():
    import subprocess
    import sys

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = subprocess.run(["bash", str(REPO / "tests" / "find-python.sh"), here], capture_output=True, text=True,
                           timeout=60)
    assert found.returncode == 0, found.stderr
    version = subprocess.run([found.stdout.strip(), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == str(sys.version_info[:2])
    missing = subprocess.run(["bash", str(REPO / "tests" / "find-python.sh"), "3.1"], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no CPython 3.1 on this machine" in missing.stderr and "pyenv install 3.1" in missing.stderr


def test_the_builtin_schemas_are_found_through_importlib_resources_not_the_repo_layout():
    where = builtin_schema_dir()
    assert where == Path(str(resources.files(BUILTIN_PACKAGE)))
    assert Settings().schema_dir == where
    registry = SchemaRegistry.load(where)
    assert {"run.started", "agent.message", "timer.fired", "effect.recorded", "llm.call",
            "handler.failed"} <= set(registry.event_types())
    assert upcasters_for(registry)  # agent.message's v2_to_v3 beside its schemas


def test_the_case_study_ships_inside_the_package():
    from swarmlog.examples import case_study

    assert case_study.buggy.name == "case-study" and case_study.fixed.name == "case-study"


# --- SWARMLOG_SCHEMA_PATH: the user's event types over the built-ins ---------------------------


def test_schema_path_is_a_list_layered_over_the_builtins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _user_type(a, "billing.invoice")
    _user_type(b, "shipping.label", fields=[{"name": "carrier", "type": "string"}])
    settings = Settings.from_env({"SWARMLOG_SCHEMA_PATH": f"{a}:{b}:"})
    assert settings.schema_dirs() == (builtin_schema_dir(), a, b)
    registry = SchemaRegistry.load(settings.schema_dirs())
    assert {"billing.invoice", "shipping.label", "run.started", "agent.message"} <= set(registry.event_types())
    record = {"event_id": "e", "run_id": "r", "agent_id": "x", "event_type": "billing.invoice",
              "schema_version": 1, "to": None, "causes": [], "payload": {"amount": 12}}
    value = Encoder(registry.latest("billing.invoice")).encode(record)
    assert Decoder(registry).decode(value)[1]["payload"] == {"amount": 12}


def test_a_type_defined_in_two_layers_is_an_error_naming_both_files(tmp_path):
    mine = _user_type(tmp_path / "mine", "agent.message")  # clashes with the built-in type
    with pytest.raises(SchemaClash) as caught:
        SchemaRegistry.load([builtin_schema_dir(), tmp_path / "mine"])
    err = caught.value
    assert err.event_type == "agent.message"
    assert err.first == str(builtin_schema_dir() / "agent.message" / "v1.avsc")
    assert err.second == str(mine)
    assert err.first in str(err) and err.second in str(err)

    _user_type(tmp_path / "x", "billing.invoice")
    _user_type(tmp_path / "y", "billing.invoice", version=1)
    with pytest.raises(SchemaClash, match="billing.invoice"):
        SchemaRegistry.load([tmp_path / "x", tmp_path / "y"])


def test_a_missing_schema_path_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(SchemaError, match=f"{tmp_path / 'nope'} does not exist.*SWARMLOG_SCHEMA_PATH"):
        SchemaRegistry.load(Settings(schema_path=(tmp_path / "nope",)).schema_dirs())


def test_a_users_upcasters_and_compatibility_file_speak_for_their_own_layer(tmp_path):
    mine = tmp_path / "mine"
    _user_type(mine, "billing.invoice")
    _user_type(mine, "billing.invoice", version=2,
               fields=[{"name": "amount", "type": "long"}, {"name": "cents", "type": "boolean", "default": False}])
    (mine / "billing.invoice" / "upcasters.py").write_text(
        "def v1_to_v2(record):\n    return {**record, 'payload': {**record['payload'], 'cents': True}}\n")
    (mine / "compatibility.json").write_text(json.dumps({"event_types": {"billing.invoice": "FULL_TRANSITIVE"}}))
    layers = [builtin_schema_dir(), mine]
    registry = SchemaRegistry.load(layers)
    assert ("billing.invoice", 1) in discover_upcasters(layers, registry=registry)
    assert ("agent.message", 2) in discover_upcasters(layers, registry=registry)
    modes = load_modes(layers, registry)
    assert modes["billing.invoice"] == "FULL_TRANSITIVE" and modes["agent.message"] == "BACKWARD_TRANSITIVE"

    # A user's compatibility.json may not set modes for the built-in types.
    (mine / "compatibility.json").write_text(json.dumps({"event_types": {"agent.message": "FULL"}}))
    with pytest.raises(SchemaError, match="agent.message, which have no schemas"):
        load_modes(layers, registry)


def test_an_upcasters_file_beside_another_layers_type_is_refused(tmp_path):
    mine = tmp_path / "mine"
    (mine / "agent.message").mkdir(parents=True)
    _user_type(mine, "billing.invoice")
    (mine / "agent.message" / "upcasters.py").write_text("def v1_to_v2(record):\n    return record\n")
    layers = [builtin_schema_dir(), mine]
    with pytest.raises(SchemaError, match="no schemas for 'agent.message' beside it"):
        discover_upcasters(layers, registry=SchemaRegistry.load(layers))


def test_schema_list_and_check_read_the_builtins_and_the_schema_path(tmp_path, capsys, monkeypatch):
    mine = tmp_path / "mine"
    path = _user_type(mine, "billing.invoice")
    monkeypatch.setenv("SWARMLOG_SCHEMA_PATH", str(mine))
    monkeypatch.delenv("SWARMLOG_SCHEMA_DIR", raising=False)
    assert main(["schema", "list", "--json"]) == 0
    listed = {row["event_type"]: row["file"] for row in json.loads(capsys.readouterr().out)}
    assert listed["billing.invoice"] == str(path)
    assert listed["run.started"].startswith(str(builtin_schema_dir()))
    assert main(["schema", "check"]) == 0
    assert "schema check passed" in capsys.readouterr().out

    shutil.copytree(builtin_schema_dir() / "timer.set", mine / "timer.set")
    assert main(["schema", "check"]) == 1
    assert "'timer.set' is defined twice" in capsys.readouterr().out
