"""The mirror through a rolling upgrade and repeated event ids, on the real broker and Postgres, the
sink and the mirror commands as processes (issue 28, items 1 and 2).

Writers first: an ``agent.message`` v4 writer (one field with a default) among v3 events. The sink
still on v3 dead-letters it, saying "a newer agent.message (v4) than this reader knows". Readers
next: the v4 ``mirror verify`` finds the older rows matching the shape they were written in, and the
letter missing as a row; ``mirror redrive`` moves it; ``mirror verify`` is clean. A second message
with an id already in the log is a dead letter naming the first, never a second row."""

from __future__ import annotations

import json
import subprocess
import sys

from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog
from swarmlog.schema.registry import SchemaRegistry

from ..conftest import newer_schemas
from .conftest import subprocess_env


def _cli(settings, *args: str, schemas=None) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(settings)
    if schemas is not None:
        env["SWARMLOG_SCHEMA_DIR"] = str(schemas)
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def _message_at(settings, offset: int):
    with LogReader(settings=settings) as reader:
        reader.assign(offset)
        return next(m for batch in reader.batches(end=offset + 1) for m in batch)


def test_a_writer_upgraded_first_is_dead_lettered_by_name_then_redriven_and_the_mirror_verifies(settings, db,
                                                                                                tmp_path):
    v4 = newer_schemas(tmp_path)
    assert _cli(settings, "schema", "check", schemas=v4).returncode == 0  # a compatible change
    with EventLog(settings=settings) as old, \
            EventLog(settings=settings, registry=SchemaRegistry.load([v4])) as new:
        before = [old.append("agent.message", {"kind": "k", "body": f"v3 {i}"}, agent="a", to="b") for i in range(5)]
        upgraded = new.append("agent.message", {"kind": "k", "body": "from v4", "trace": "t-1"}, agent="a", to="b")
        after = [old.append("agent.message", {"kind": "k", "body": f"v3 {i}"}, agent="a", to="b") for i in range(5)]
    sink = _cli(settings, "sink", "--until-end")
    assert sink.returncode == 0 and json.loads(sink.stdout.splitlines()[-1])["dead_letters"] == 1, sink.stderr
    (error,) = db.execute("SELECT error FROM dead_letters WHERE topic = %s AND seq = %s",
                          (settings.topic, upgraded)).fetchone()
    assert "a newer agent.message (v4) than this reader knows (up to v3)" in error
    replayed = _cli(settings, "replay")
    assert "a newer agent.message (v4)" in replayed.stderr and f"offset {upgraded}" in replayed.stderr
    assert _cli(settings, "mirror", "verify").returncode == 0  # the v3 verifier: the letter is what it expects

    # Readers upgraded: the older rows match the shape they were written in; the letter reads now.
    rows = db.execute("SELECT seq, read_version FROM events WHERE topic = %s ORDER BY seq", (settings.topic,))
    assert [tuple(r) for r in rows.fetchall()] == [(o, 3) for o in before + after]
    verified = json.loads(_cli(settings, "mirror", "verify", "--json", schemas=v4).stdout)
    assert verified["problems"] == [{"offset": upgraded, "problem": "missing", "columns": []},
                                    {"offset": upgraded, "problem": "extra dead letter", "columns": []}]
    redriven = _cli(settings, "mirror", "redrive", schemas=v4)
    assert redriven.returncode == 0, redriven.stderr
    assert f"1 dead letter(s) read now and moved into events (offsets {upgraded})" in redriven.stdout
    clean = _cli(settings, "mirror", "verify", schemas=v4)
    assert clean.returncode == 0 and "the mirror matches the log" in clean.stdout, clean.stdout
    payload, read_version = db.execute("SELECT payload, read_version FROM events WHERE topic = %s AND seq = %s",
                                       (settings.topic, upgraded)).fetchone()
    assert payload["trace"] == "t-1" and read_version == 4
    assert db.execute("SELECT count(*) FROM dead_letters WHERE topic = %s", (settings.topic,)).fetchone()[0] == 0
    again = _cli(settings, "mirror", "redrive", schemas=v4)
    assert "0 dead letter(s) read now" in again.stdout


def test_a_second_message_with_an_event_id_in_the_log_is_a_dead_letter_naming_the_first(settings, db):
    with EventLog(settings=settings) as log:
        first = log.append("agent.message", {"kind": "k", "body": "one"}, agent="a", to="b", event_id="dup-1")
        log.append("agent.message", {"kind": "k", "body": "two"}, agent="a", to="b")
    copy = _message_at(settings, first)
    with EventLog(settings=settings) as log:  # a copy tool re-sends it, byte for byte
        log.produce_raw(copy.value(), key=copy.key(), headers=copy.headers())
        again = log.flush()[0]
        log.append("agent.message", {"kind": "k", "body": "three"}, agent="a", to="b")
    sink = _cli(settings, "sink", "--until-end")
    assert sink.returncode == 0 and json.loads(sink.stdout.splitlines()[-1]) == {
        "position": again + 2, "rows": 3, "dead_letters": 1}, sink.stdout + sink.stderr
    (error,) = db.execute("SELECT error FROM dead_letters WHERE topic = %s AND seq = %s",
                          (settings.topic, again)).fetchone()
    assert f"duplicate event id 'dup-1': a second copy of the event at offset {first}" in error
    assert _cli(settings, "mirror", "verify").returncode == 0
    checked = _cli(settings, "check", "causality")
    assert f"offset {again}: duplicate_event_id: event id 'dup-1' is already the event at offset {first}" \
        in checked.stdout and checked.returncode == 1
