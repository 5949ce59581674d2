"""What the log names is checked where it is written, on the real broker and through the CLI as a
process (issue 28, items 1, 4 and 7): a cause that names no earlier event, an event id already in
the log, a name outside the grammar (docs/edges.md) — each refused with an error that says which and
why, before anything is written."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from swarmlog.errors import DuplicateEventId, InvalidCause
from swarmlog.kafka.reader import watermarks
from swarmlog.log.append import EventLog
from swarmlog.schema.registry import SchemaRegistry

from ..conftest import newer_schemas
from .conftest import subprocess_env


def _cli(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=180)


def _append(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli(settings, "append", "--no-run", "agent.message", '{"kind": "k", "body": "x"}', "--agent", "alice",
                *args)


def _marker_after_a_transaction(settings) -> int:
    """Write one event in a Kafka transaction: its commit marker takes the next offset. That offset."""
    p = Producer({"bootstrap.servers": settings.bootstrap_servers, "transactional.id": f"edges-{settings.topic}"})
    p.init_transactions(30)
    before = watermarks(settings, settings.topic)[1]
    p.begin_transaction()
    p.produce(settings.topic, b"\xc3\x01 not an event either")
    p.commit_transaction(30)
    # The coordinator writes the commit marker after commit_transaction returns: wait until it is in the log.
    deadline = time.monotonic() + 30
    while watermarks(settings, settings.topic)[1] < before + 2:
        assert time.monotonic() < deadline, "the transaction's commit marker never reached the log"
        time.sleep(0.05)
    return before + 1


def test_a_cause_that_names_no_earlier_event_is_refused_by_the_cli_and_the_api(settings):
    with EventLog(settings=settings) as log:
        first = log.append("agent.message", {"kind": "k", "body": "1"}, agent="alice")
    marker = _marker_after_a_transaction(settings)
    end = watermarks(settings, settings.topic)[1]
    for cause, why in (("999999999", "is at or past the end of the log"), ("-5", "is negative"),
                       (str(marker), "holds no event"),
                       (str(marker - 1), "holds a message that is not a readable event"),
                       (str(end), "is at or past the end of the log")):
        refused = _append(settings, "--cause", str(first), "--cause", cause)
        assert refused.returncode == 70, refused.stderr
        assert f"field 'causes': cause {cause} {why}" in refused.stderr, refused.stderr
    assert watermarks(settings, settings.topic)[1] == end  # nothing was written
    with EventLog(settings=settings) as log:
        own = log.append("agent.message", {"kind": "k", "body": "2"}, agent="alice", causes=[first])
        with pytest.raises(InvalidCause) as info:  # a later event than its own: its own offset + 10
            log.append("agent.message", {"kind": "k", "body": "3"}, agent="alice", causes=[own + 10])
        assert info.value.cause == own + 10
    ok = _append(settings, "--cause", str(first), "--cause", str(own))
    assert ok.returncode == 0, ok.stderr
    shown = _cli(settings, "show", ok.stdout.strip(), "--json")
    assert '"offset": ' + str(own) in shown.stdout


def test_an_event_a_newer_writer_wrote_is_a_valid_cause_for_an_older_one(settings, tmp_path):
    """Writers first, in a rolling upgrade (docs/schemas.md): the upgraded writer's agent.message v4 is
    named as a cause by a process that knows v3 at most. The check at write reads the cause's envelope,
    not its payload, so the cause is accepted, by the API and by the CLI as a process; an offset that
    holds no event (a transaction marker) is still refused."""
    newer = SchemaRegistry.load([newer_schemas(tmp_path)])
    assert newer.latest("agent.message").version > SchemaRegistry.load(settings.schema_dirs()).latest(
        "agent.message").version
    with EventLog(settings=settings, registry=newer) as upgraded:
        v4 = upgraded.append("agent.message", {"kind": "k", "body": "new", "trace": "t"}, agent="alice")
    marker = _marker_after_a_transaction(settings)
    with EventLog(settings=settings) as older:
        assert older.registry.latest("agent.message").version < newer.latest("agent.message").version
        named = older.append("agent.message", {"kind": "k", "body": "old"}, agent="bob", causes=[v4])
        with pytest.raises(InvalidCause) as info:
            older.append("agent.message", {"kind": "k", "body": "x"}, agent="bob", causes=[marker])
        assert info.value.cause == marker and "holds no event" in str(info.value)
    assert named > v4
    by_cli = _append(settings, "--cause", str(v4))
    assert by_cli.returncode == 0, by_cli.stderr
    refused = _append(settings, "--cause", str(marker))
    assert refused.returncode == 70 and f"cause {marker} holds no event" in refused.stderr, refused.stderr


def test_an_event_id_already_in_the_log_is_refused_by_the_api_and_the_cli(settings):
    with EventLog(settings=settings) as log:
        at = log.append("agent.message", {"kind": "k", "body": "1"}, agent="alice", event_id="dup-1")
        with pytest.raises(DuplicateEventId) as info:
            log.append("agent.message", {"kind": "k", "body": "1"}, agent="alice", event_id="dup-1")
        assert info.value.offset == at
    refused = _append(settings, "--event-id", "dup-1")
    assert refused.returncode == 70 and f"'dup-1' was already appended by this log at offset {at}" in refused.stderr
    first = _append(settings, "--event-id", "new-1")
    assert first.returncode == 0, first.stderr
    again = _append(settings, "--event-id", "new-1")  # another process: it reads the log to know
    assert again.returncode == 70 and f"at offset {first.stdout.strip()}" in again.stderr
    log_lines = _cli(settings, "log").stdout.splitlines()
    assert len(log_lines) == 2


@pytest.mark.parametrize(("args", "field"), [
    (("--agent", "a b"), "sender"),
    (("--agent", "alice", "--to", "bob\n   9  mallory"), "to"),
    (("--agent", "alice", "--to", "\x1b]0;owned\x07"), "to"),
    (("--agent", "alice", "--event-id", "id\twith tab"), "event_id"),
    (("--agent", "alice", "--run-id", "run\x1b[2J"), "run_id"),
])
def test_a_name_outside_the_grammar_is_refused_by_the_cli_before_anything_is_written(settings, args, field):
    refused = _cli(settings, "append", "--no-run", "agent.message", '{"kind": "k", "body": "x"}', *args)
    assert refused.returncode != 0 and "docs/edges.md" in refused.stderr, refused.stderr
    assert field in refused.stderr
    assert "\x1b" not in refused.stderr and "\x07" not in refused.stderr  # the error escapes it, too
    assert watermarks(settings, settings.topic)[1] == 0
    kind = _cli(settings, "append", "--no-run", "agent.message", '{"kind": "k\\u001b[31m", "body": "x"}', "--agent",
                "a")
    assert kind.returncode == 70 and "payload.kind" in kind.stderr
