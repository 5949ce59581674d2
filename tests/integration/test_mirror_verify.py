"""``swarmlog mirror verify``: the Postgres mirror against the log, every row named by its offset."""

from __future__ import annotations

import json
import subprocess
import sys

from swarmlog.log.append import EventLog
from swarmlog.runtime import run_agents, start_run
from swarmlog_connectors.postgres_sink import PostgresSink

from .. import swarms
from ..conftest import unchecked_event
from .test_runtime import _env


def _verify(settings, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", "mirror", "verify", *argv], env=_env(settings),
                          capture_output=True, text=True, timeout=300)


def _mirrored(settings, registry, n: int = 30) -> list[int]:
    with EventLog(settings=settings, run_id="m") as log:
        for i in range(n):  # causes as another producer may write them: not checked, not events
            value, key, headers = unchecked_event(registry, "agent.message", {"kind": "k", "body": f"m{i}"},
                                                  agent="a", to="b", causes=[i] if i else [], run_id="m")
            log.produce_raw(value, key=key, headers=headers)
        offsets = log.flush()
    PostgresSink(settings=settings, registry=registry).run(until_end=True)
    return offsets


def test_one_edited_row_in_the_mirror_is_named_by_its_offset(settings, registry, db):
    offsets = _mirrored(settings, registry)
    ok = _verify(settings)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "30 row(s) checked" in ok.stdout and "the mirror matches the log" in ok.stdout
    k = offsets[17]
    db.execute("UPDATE events SET payload = jsonb_set(payload, '{body}', '\"edited\"') WHERE topic = %s AND seq = %s",
               (settings.topic, k))
    bad = _verify(settings)
    assert bad.returncode == 5
    assert f"offset {k}: differs (payload)" in bad.stdout
    assert "the mirror does NOT match the log: 1 row(s)" in bad.stdout


def test_missing_extra_and_altered_rows_are_each_named(settings, registry, db):
    offsets = _mirrored(settings, registry)
    topic = settings.topic
    db.execute("DELETE FROM events WHERE topic = %s AND seq = %s", (topic, offsets[3]))
    db.execute("UPDATE events SET agent_id = 'mallory', causes = '{}' WHERE topic = %s AND seq = %s",
               (topic, offsets[9]))
    db.execute("INSERT INTO events SELECT topic, 100000, 'by-hand', run_id, agent_id, event_type, schema_version, "
               "recipient, causes, payload, logged_at FROM events WHERE topic = %s AND seq = %s", (topic, offsets[0]))
    report = json.loads(_verify(settings, "--json").stdout)
    assert report["ok"] is False and report["rows_checked"] == 30
    assert report["problems"] == [
        {"offset": offsets[3], "problem": "missing", "columns": []},
        {"offset": offsets[9], "problem": "differs", "columns": ["agent_id", "causes"]},
        {"offset": 100000, "problem": "extra", "columns": []},
    ]


def test_a_swarms_mirror_checks_clean_and_against_its_token(settings, registry, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="ms", seed=3)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    PostgresSink(settings=settings, registry=registry).run(until_end=True)
    token = tmp_path / "t.json"
    made = subprocess.run([sys.executable, "-m", "swarmlog.cli", "token", "create", "--out", str(token)],
                          env=_env(settings), capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    ok = _verify(settings, "--token", str(token))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "the topic matches the token" in ok.stdout and "the mirror matches the log" in ok.stdout
