"""Finite retention on the real broker: replay refuses a log that lost its beginning, tokens record the
real start, and append and the sink warn about a topic that deletes history."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from swarmlog.kafka.reader import watermarks
from swarmlog.log.append import EventLog

from .conftest import new_topic_name, subprocess_env


def _cli(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=180)


def test_replay_refuses_a_log_whose_beginning_was_deleted_and_a_replay_from_its_start_records_it(settings,
                                                                                                  tmp_path):
    with EventLog(settings=settings) as log:
        log.append_many([("agent.message", {"kind": "k", "body": str(i)}, {"agent": "a"}) for i in range(100)])
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    admin.delete_records([TopicPartition(settings.topic, 0, 50)])[TopicPartition(settings.topic, 0, 50)].result(30)
    assert watermarks(settings, settings.topic)[0] == 50

    refused = _cli(settings, "replay")
    assert refused.returncode == 70 and "starts at offset 50, not 0" in refused.stderr, refused.stderr
    token = tmp_path / "t.json"
    partial = _cli(settings, "replay", "--from-log-start", "--json", "--token-out", str(token))
    assert partial.returncode == 0, partial.stderr
    doc = json.loads(partial.stdout[partial.stdout.index("{"):])
    assert (doc["start_offset"], doc["events"]) == (50, 50)
    assert "not the whole run" in partial.stderr
    assert json.loads(token.read_text())["start_offset"] == 50
    check = _cli(settings, "check", "causality")
    assert check.returncode == 1 and "offset 50: history_incomplete" in check.stdout


def test_append_and_the_sink_warn_about_a_topic_that_deletes_history(base_settings):
    topic = new_topic_name("retention")
    admin = AdminClient({"bootstrap.servers": base_settings.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000"})])[topic].result(30)
    settings = base_settings.model_copy(update={"topic": topic})
    appended = _cli(settings, "append", "agent.message", '{"kind": "k", "body": "x"}', "--agent", "a", "--no-run")
    assert appended.returncode == 0 and "retention.ms=60000" in appended.stderr, appended.stderr
    sink = _cli(settings, "sink", "--until-end")
    assert sink.returncode == 0 and "retention.ms=60000" in sink.stderr, sink.stderr
    # Nothing is deleted yet: replay works, and says nothing is missing.
    replayed = _cli(settings, "replay", "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["start_offset"] == 0
