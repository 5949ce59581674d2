"""The package faces import their heavy machinery when first used (swarmlog._lazy), and still give
every public name as itself: a command that reads the log starts without the guard or the runtime."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from ..conftest import REPO

HEAVY = ("swarmlog.guard", "swarmlog.runtime.runner", "swarmlog.context", "swarmlog.llm.http", "swarmlog.debug.session",
         "swarmlog.token._create", "psycopg", "textual", "opentelemetry", "swarmlog.observe._server", "http.server")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.splitlines()[-1]))


OFF_A_PLAIN_REPLAYS_PATH = ("pydantic", "importlib.resources", "swarmlog.debug",
                            "swarmlog.token.command", *HEAVY)
"""What a plain replay's start does not import (bench/README.md "Start-up"; the same of a real
``swarmlog replay`` process, read from ``-X importtime``: tests/integration/test_cli_errors.py)."""


def test_a_plain_replays_own_work_imports_no_pydantic_nor_other_commands_modules():
    # What `swarmlog replay` does in its process, Kafka aside: its parser, the settings (with a
    # secret), the schemas, the fold of a short log (its first marks) and the JSON it prints.
    loaded = _modules_after(
        "import json\nimport swarmlog.cli\n"
        "args = swarmlog.cli.build_parser('replay').parse_args(['replay', '--json'])\n"
        "from swarmlog.observe import tracing\ntracing.configure_from_env()\n"
        "from swarmlog.settings import Settings\n"
        "settings = Settings.from_env({'SWARMLOG_TOKEN_KEY': 'k', 'SWARMLOG_KAFKA_SASL_PASSWORD': 'p',\n"
        "                              'SWARMLOG_DATABASE_URL': 'postgresql://u:pw@db/x'})\n"
        "from swarmlog.schema.codec import Encoder\nfrom swarmlog.schema.registry import SchemaRegistry\n"
        "from swarmlog.replaying.fold import Fold\n"
        "registry = SchemaRegistry.load(settings.schema_dirs())\n"
        "enc = Encoder(registry.latest('agent.message'))\n"
        "class Message:\n"
        "    def __init__(self, offset, value): self._o, self._v = offset, value\n"
        "    def offset(self): return self._o\n"
        "    def value(self): return self._v\n"
        "fold = Fold(registry=registry)\n"
        "fold.apply_batch([Message(i, enc.encode_event(f'e-{i}', 'r', a, None, [], {'kind': 'k', 'body': a,\n"
        "                                                                           'urgency': 'low'}))\n"
        "                  for i, a in enumerate('abc')])\n"
        "assert fold.result(3).events == 3\n"
        "json.dumps(fold.result(3).to_json())")
    assert sorted(m for m in loaded for off in OFF_A_PLAIN_REPLAYS_PATH if m == off or m.startswith(off + ".")) == []


def test_starting_the_cli_and_building_its_parser_imports_no_agent_machinery():
    # What main() does before the command's own code: the parser, then tracing (off: no OTEL_* set).
    loaded = _modules_after("import swarmlog.cli\nswarmlog.cli.build_parser()\n"
                            "from swarmlog.observe import tracing\ntracing.configure_from_env()")
    assert {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")} == set()
    # The runtime's face, `swarmlog run`'s parser and the interpreter's pin may load; its engine may not.
    assert {m for m in loaded if m.startswith("swarmlog.runtime.")} <= {"swarmlog.runtime.command",
                                                                       "swarmlog.runtime.interpreter"}
    assert "swarmlog.cli" in loaded  # the code above ran


@pytest.mark.parametrize("module", ["swarmlog", "swarmlog.replaying", "swarmlog.llm", "swarmlog.log",
                                    "swarmlog.token", "swarmlog.debug", "swarmlog.observe"])
def test_a_lazy_face_gives_each_public_name_as_the_object_itself_even_after_its_submodules_load(module):
    face = importlib.import_module(module)
    for name in face.__all__:
        value = getattr(face, name)
        assert not isinstance(value, type(sys)), f"{module}.{name} is a module"
        assert name in dir(face)
    # ``fork`` is also a submodule: importing it must not rebind the face's name. (``swarmlog.replay`` is
    # the function alone: the replay wing is ``swarmlog.replaying``.)
    importlib.import_module("swarmlog.replaying._replay")
    importlib.import_module("swarmlog.debug.fork")
    import swarmlog
    import swarmlog.debug

    assert callable(swarmlog.replay) and not isinstance(swarmlog.replay, type(sys))
    assert callable(swarmlog.debug.fork) and not isinstance(swarmlog.debug.fork, type(sys))
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018
