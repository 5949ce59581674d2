"""swarmlog as users install it: the built wheel in a fresh virtual environment, run outside the repo.

The wheel is built from this working tree (a copy of it, so the build leaves nothing behind)
with `pip wheel`, installed with its dependencies into a new venv, and every command runs as
a process from a directory with no repo in sight: no PYTHONPATH, no SWARMLOG_SCHEMA_DIR. The
schemas, the upcasters and the case study must all come from the installed package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest

from swarmlog.kafka.topic import create_topic
from swarmlog.settings import Settings

from ..conftest import REPO

LIBRDKAFKA_MARKS = ("|FAIL|", "|GETPID|", "%3|", "%4|", "%7|")
# Built files (*.so: the C modules, built in place by the editable install) stay behind: the
# wheel must carry what its own build made.
_NOT_SOURCES = shutil.ignore_patterns(".venv", ".venv-*", ".git", ".tools", "build", "dist", "*.egg-info",
                                      "__pycache__", ".pytest_cache", ".hypothesis", "bench", "tests", "*.so")
_NATIVE_HOOK = f"swarmlog/guard/_native{sysconfig.get_config_var('EXT_SUFFIX')}"
_NATIVE_ROUTE = f"swarmlog/schema/_route{sysconfig.get_config_var('EXT_SUFFIX')}"
_NATIVE_AVRO = f"swarmlog/schema/_avro_native{sysconfig.get_config_var('EXT_SUFFIX')}"
# Prints whether the decoder routes and reads in C, the route of one message it encoded, and the
# body it reads back.
_ROUTES = ("from swarmlog.schema._avro_reader import _avro_native\n"
           "from swarmlog.schema.codec import Decoder, Encoder, _native_route\n"
           "from swarmlog.schema.registry import SchemaRegistry\n"
           "from swarmlog.settings import Settings\n"
           "reg = SchemaRegistry.load(Settings().schema_dirs())\n"
           "enc, dec = Encoder(reg.latest('agent.message')), Decoder(reg)\n"
           "class M:\n"
           "    value = lambda self: enc.encode_event('a@1#0', 'r', 'a', 'b', [], "
           "{'kind': 'k', 'body': '', 'urgency': 'normal'})\n"
           "    headers = lambda self: [*enc.headers(b'a', b'b'), ('sl.step', b'1')]\n"
           "    offset = lambda self: 0\n"
           "print(_native_route is not None, _avro_native is not None, *[tuple(dec.route(M())) for _ in range(2)][1],\n"
           "      dec.decode(M().value())[1]['payload']['kind'])\n")


class Installed:
    def __init__(self, root: Path, wheel: Path, venv: Path, base_env: dict[str, str]) -> None:
        self.root = root
        self.wheel = wheel
        self.venv = venv
        self.base_env = base_env
        self.cwd = root / "elsewhere"
        self.cwd.mkdir()

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 300,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.venv / "bin" / "swarmlog"), *argv], cwd=self.cwd, capture_output=True,
                              text=True, timeout=timeout, env={**self.base_env, **(env or {})})
        if check:
            assert proc.returncode == 0, f"swarmlog {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        assert not any(mark in proc.stderr for mark in LIBRDKAFKA_MARKS), proc.stderr
        return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, base_settings: Settings) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
                    str(source)], check=True, timeout=600)
    (wheel,) = dist.glob("swarmlog-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=900)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SWARMLOG_", "PYTHON", "VIRTUAL_ENV")) and k != "PATH"}
    env.update({"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "SWARMLOG_BOOTSTRAP_SERVERS": base_settings.bootstrap_servers,
                "SWARMLOG_DATABASE_URL": base_settings.database_url})
    return Installed(root, wheel, venv, env)


def _fresh_topic(base_settings: Settings, prefix: str) -> str:
    name = f"swarmlog.{prefix}-{uuid.uuid4().hex[:10]}"
    create_topic(base_settings, name)
    return name


def test_the_wheel_carries_schemas_upcasters_the_case_study_and_py_typed(installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    for path in ("swarmlog/py.typed", "swarmlog_connectors/py.typed", "swarmlog/schema/builtin/run.started/v2.avsc",
                 "swarmlog/schema/builtin/agent.message/upcasters.py", "swarmlog/schema/builtin/compatibility.json",
                 "swarmlog/schema/builtin/http.exchange/upcasters.py", "swarmlog/aio/_loop.py",
                 "swarmlog/examples/case_study.py", "swarmlog_connectors/migrations/0001_mirror.sql",
                 "swarmlog_connectors/migrations/0002_lossless_dead_letters.sql",
                 "swarmlog_connectors/migrations/0003_replay_reports.sql",
                 _NATIVE_HOOK, _NATIVE_ROUTE, _NATIVE_AVRO):  # built here (a compiler is): the C paths
        assert path in names, path
    where = subprocess.run([str(installed.venv / "bin" / "python"), "-c",
                            "import swarmlog, swarmlog.settings as s, swarmlog.guard as g; print(swarmlog.__file__); "
                            "print(s.Settings().schema_dir); print(g.hook_in_use().native)"],
                           cwd=installed.cwd, env=installed.base_env, capture_output=True, text=True, check=True)
    module, schema_dir, native = where.stdout.split()
    assert module.startswith(str(installed.venv)) and schema_dir.startswith(str(installed.venv))
    assert native == "True"
    assert str(REPO) not in where.stdout
    routed = subprocess.run([str(installed.venv / "bin" / "python"), "-c", _ROUTES], cwd=installed.cwd,
                            env=installed.base_env, capture_output=True, text=True, check=True)
    assert routed.stdout.split() == ["True", "True", "agent.message", "a", "b", "1", "k"]


def test_without_a_compiler_the_wheel_is_pure_python_and_its_guard_refuses_as_ever(installed):
    # The C modules are optional: where they cannot be compiled, swarmlog installs, guards with the
    # Python hook, routes with the Python path and reads with the generated Python readers.
    source = installed.root / "source-no-compiler"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    dist = installed.root / "dist-no-compiler"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
                    str(source)], check=True, timeout=600, env={**os.environ, "CC": "false"})
    (wheel,) = dist.glob("swarmlog-*.whl")
    assert not {_NATIVE_HOOK, _NATIVE_ROUTE, _NATIVE_AVRO} & set(zipfile.ZipFile(wheel).namelist())
    target = installed.root / "no-compiler"  # swarmlog alone, over the installed venv's dependencies
    subprocess.run([str(installed.venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    check = ("import time, swarmlog\n"
             "from swarmlog.guard import ForbiddenCall, guarded, hook_in_use\n"
             "print(swarmlog.__file__, hook_in_use().native)\n"
             "try:\n"
             "    with guarded(agent='a', offset=1):\n"
             "        time.time()\n"
             "except ForbiddenCall as exc:\n"
             "    print(exc.call)\n")
    ran = subprocess.run([str(installed.venv / "bin" / "python"), "-c", check], cwd=installed.cwd,
                         env={**installed.base_env, "PYTHONPATH": str(target)}, capture_output=True, text=True,
                         check=True)
    module, native, refused = ran.stdout.split()
    assert module.startswith(str(target)) and native == "False" and refused == "time.time"
    routed = subprocess.run([str(installed.venv / "bin" / "python"), "-c", _ROUTES], cwd=installed.cwd,
                            env={**installed.base_env, "PYTHONPATH": str(target)}, capture_output=True, text=True,
                            check=True)
    assert routed.stdout.split() == ["False", "False", "agent.message", "a", "b", "1", "k"]  # Python, the same


def test_schema_list_and_check_work_from_the_wheel_with_a_users_own_types(installed):
    listed = json.loads(installed.run("schema", "list", "--json").stdout)
    files = {(row["event_type"], row["version"]): row["file"] for row in listed}
    assert ("run.started", 2) in files and ("agent.message", 3) in files
    assert all(f.startswith(str(installed.venv)) for f in files.values())
    check = installed.run("schema", "check", "--property").stdout
    assert "schema check passed" in check and "2 upcaster(s)" in check  # agent.message's and http.exchange's

    mine = _users_schemas(installed.root)
    env = {"SWARMLOG_SCHEMA_PATH": str(mine)}
    listed = json.loads(installed.run("schema", "list", "--json", env=env).stdout)
    assert {"billing.invoice", "run.started"} <= {row["event_type"] for row in listed}
    assert "schema check passed" in installed.run("schema", "check", env=env).stdout


def _users_schemas(root: Path) -> Path:
    mine = root / "my-schemas"
    if not mine.exists():
        envelope = json.loads((REPO / "schemas" / "agent.message" / "v1.avsc").read_text())["fields"][:7]
        schema = {"type": "record", "name": "Invoice", "namespace": "billing", "fields": [
            *envelope, {"name": "payload", "type": {"type": "record", "name": "InvoicePayload",
                                                     "fields": [{"name": "amount", "type": "long"}]}}]}
        (mine / "billing.invoice").mkdir(parents=True)
        (mine / "billing.invoice" / "v1.avsc").write_text(json.dumps(schema))
    return mine


def test_append_and_sink_work_from_the_wheel(installed, base_settings):
    topic = _fresh_topic(base_settings, "wheel-sink")
    env = {"SWARMLOG_TOPIC": topic, "SWARMLOG_SCHEMA_PATH": str(_users_schemas(installed.root))}
    offsets = [int(installed.run("append", "agent.message", json.dumps({"kind": "hi", "body": "hello"}),
                                 "--agent", "alice", "--to", "bob", "--no-run", env=env).stdout),
               int(installed.run("append", "billing.invoice", json.dumps({"amount": 42}), "--agent", "alice",
                                 "--no-run", env=env).stdout)]
    assert offsets == [0, 1]
    # The mirror's schema from the wheel's own migrations (the sink runs no DDL).
    migrated = installed.run("mirror", "migrate", env=env).stdout
    shipped = (REPO / "connectors" / "swarmlog_connectors" / "migrations").glob("*.sql")
    latest = max(int(p.name.split("_", 1)[0]) for p in shipped)
    assert f"the mirror's schema is at version {latest}" in migrated  # every migration the source has, shipped
    stats = json.loads(installed.run("sink", "--until-end", env=env).stdout)
    assert stats == {"position": 2, "rows": 2, "dead_letters": 0}
    with psycopg.connect(base_settings.database_url) as conn:
        rows = conn.execute("SELECT seq, event_type, payload FROM events WHERE topic = %s ORDER BY seq",
                            (topic,)).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(0, "agent.message"), (1, "billing.invoice")]
    assert rows[1][2] == {"amount": 42}


def test_run_and_replay_swarm_work_from_the_wheel_with_the_installed_case_study(installed, base_settings):
    topic = _fresh_topic(base_settings, "wheel-run")
    env = {"SWARMLOG_TOPIC": topic}
    live = json.loads(installed.run("run", "swarmlog.examples.case_study:buggy", "--run-id", "wheel", "--seed", "1",
                                    "--until-quiet", "1", env=env).stdout)
    assert set(live["agents"]) == {"coordinator", "worker", "reviewer", "supervisor", "auditor"}
    replayed = json.loads(installed.run("replay", "--swarm", "swarmlog.examples.case_study:buggy", "--json",
                                        env=env).stdout)
    assert replayed["diverged"] is False and replayed["agents"] == live["agents"]
    ledger = json.loads(installed.run("replay", "--json", env=env).stdout)
    assert ledger["events"] == replayed["events"] > 5


def test_the_demo_works_from_the_wheel(installed):
    proc = installed.run("demo", "--rounds", "60", timeout=900)
    out = proc.stdout
    assert "DIFFERENT" not in out
    assert "rows in Postgres mirror" in out and "the case study" in out
    assert "found a deadlock" in out and "first diverges at offset" in out
    assert "try it: swarmlog replay" in out and "--swarm swarmlog.examples.case_study:fixed" in out


def test_the_readmes_first_swarm_pasted_as_printed_runs_from_the_wheel_and_prints_the_answer(installed,
                                                                                           base_settings):
    # The README's blocks as a reader pastes them, in an empty directory, with only the wheel installed:
    # hello.py, the shell block (the swarm in the background), ask.py, then the replay and `kill %1`.
    from ..docs_code import parse

    readme = parse(REPO / "README.md")
    first = readme.blocks[[b.mark("file") for b in readme.blocks].index("hello.py"):]
    hello, start, ask, after, wrong = first[0], first[1], first[2], first[3], first[4]
    assert (hello.lang, start.lang, ask.lang, after.lang, wrong.lang) == ("python", "bash", "python", "bash", "bash")
    assert "swarmlog debug" in wrong.code  # "When a run goes wrong": its commands on the run just made
    here = installed.root / f"first-swarm-{uuid.uuid4().hex[:6]}"
    here.mkdir()
    (here / "hello.py").write_text(hello.code)
    (here / "ask.py").write_text(ask.code)
    topic = f"hello-{uuid.uuid4().hex[:8]}"  # the README's `export SWARMLOG_TOPIC=hello`, on a fresh topic
    shell = start.code.replace("SWARMLOG_TOPIC=hello\n", f"SWARMLOG_TOPIC={topic}\n") + after.code + wrong.code
    assert shell.count(topic) == 1 and "python ask.py" in shell
    # `swarmlog debug` stops at no prompt here (PYTHONBREAKPOINT=0): the handler runs undebugged, and says so.
    proc = subprocess.run(["bash", "-e", "-c", shell], cwd=here, env={**installed.base_env, "PYTHONBREAKPOINT": "0"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr + (here / "swarm.log").read_text()
    printed = re.search(r"print\(reply\.body\)\s+# (.+)", ask.code)
    assert printed is not None
    # `topic create` says what it made, then ask.py prints the answer as the README says it prints.
    assert proc.stdout.splitlines()[1] == printed.group(1), proc.stdout
    assert proc.stdout.count("no divergence: the code does exactly what the log recorded") >= 2
    answer = printed.group(1)
    assert f'answer "{answer}"' in proc.stdout  # swarmlog log, show and timeline name the reply
    assert '"answered": 1' in proc.stdout  # swarmlog state oracle --at 3: after its one step
    assert "Traceback" not in proc.stderr + (here / "swarm.log").read_text()
