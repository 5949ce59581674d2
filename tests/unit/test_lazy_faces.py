"""The package faces import their heavy machinery when first used (swarmlog._lazy), and still give
every public name as itself: a command that reads the log starts without the guard or the runtime."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from ..conftest import REPO

HEAVY = ("swarmlog.guard", "swarmlog.runtime", "swarmlog.context", "swarmlog.http", "swarmlog.debug.session",
         "swarmlog.token._create", "psycopg", "textual", "opentelemetry", "swarmlog.observe._server", "http.server")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_starting_the_cli_and_building_its_parser_imports_no_agent_machinery():
    # What main() does before the command's own code: the parser, then tracing (off: no OTEL_* set).
    loaded = _modules_after("import swarmlog.cli\nswarmlog.cli.build_parser()\n"
                            "from swarmlog.observe import tracing\ntracing.configure_from_env()")
    assert {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")} == set()
    assert "swarmlog.replay" in loaded and "confluent_kafka" in loaded  # what a plain replay does need


@pytest.mark.parametrize("module", ["swarmlog", "swarmlog.replay", "swarmlog.log", "swarmlog.token", "swarmlog.debug",
                                    "swarmlog.observe"])
def test_a_lazy_face_gives_each_public_name_as_the_object_itself_even_after_its_submodules_load(module):
    face = importlib.import_module(module)
    for name in face.__all__:
        value = getattr(face, name)
        assert not isinstance(value, type(sys)), f"{module}.{name} is a module"
        assert name in dir(face)
    # ``replay`` and ``fork`` are also submodules: importing those must not rebind the face's name.
    importlib.import_module("swarmlog.replay")
    importlib.import_module("swarmlog.debug.fork")
    import swarmlog
    import swarmlog.debug

    assert callable(swarmlog.replay) and not isinstance(swarmlog.replay, type(sys))
    assert callable(swarmlog.debug.fork) and not isinstance(swarmlog.debug.fork, type(sys))
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018
