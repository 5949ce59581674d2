"""A compacted topic on the real broker (issue 28, item 3): every command warns before compaction,
naming ``cleanup.policy=delete`` and unlimited retention; after a real compaction (Kafka's log cleaner
keeps only the newest message per key), replay and ``check`` name the offsets the log lost instead of
going on. (The agents' side: tests/integration/test_compaction_agents.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog

from .conftest import new_topic_name, subprocess_env

FAST_COMPACTION = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                   "min.compaction.lag.ms": "0", "delete.retention.ms": "100",
                   "message.timestamp.type": "LogAppendTime"}
"""A topic the broker compacts within seconds: segments roll every 100 ms, any dirt is worth cleaning."""
REMEDY = "set cleanup.policy=delete, retention.ms=-1 and retention.bytes=-1"


def _cli(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=300)


def compacted_topic(base_settings) -> object:
    topic = new_topic_name("compact")
    admin = AdminClient({"bootstrap.servers": base_settings.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config=FAST_COMPACTION)])[topic].result(30)
    return base_settings.model_copy(update={"topic": topic})


def offsets(settings) -> list[int]:
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        return [m.offset() for batch in reader.batches() for m in batch]


def wait_for_compaction(settings, gone: set[int], timeout: float = 180) -> list[int]:
    """Roll segments (an append each time) until the log cleaner has removed every offset in ``gone``."""
    deadline = time.monotonic() + timeout
    with EventLog(settings=settings) as log:
        while True:
            time.sleep(1.0)
            log.append("agent.message", {"kind": "roll", "body": ""}, agent="roller")
            held = offsets(settings)
            if not gone & set(held):
                return held
            assert time.monotonic() < deadline, f"the broker did not compact {sorted(gone)} in {timeout} s: {held}"


def test_every_command_warns_before_compaction_and_replay_and_check_name_the_lost_offsets_after(base_settings,
                                                                                                tmp_path):
    settings = compacted_topic(base_settings)
    appended = _cli(settings, "append", "--no-run", "agent.message", '{"kind": "k", "body": "0"}', "--agent", "a0")
    assert appended.returncode == 0 and "cleanup.policy=compact" in appended.stderr and REMEDY in appended.stderr
    chain = [int(appended.stdout)]
    with EventLog(settings=settings) as log:  # each event names the one before as its cause
        for i in range(1, 14):
            chain.append(log.append("agent.message", {"kind": "k", "body": str(i)}, agent=f"a{i % 3}",
                                    causes=[chain[-1]]))
    before = {args: _cli(settings, *args) for args in
              [("replay",), ("log",), ("token", "create", "--out", str(tmp_path / "t.json")), ("timeline",),
               ("sink", "--until-end"), ("check", "causality")]}
    for args, done in before.items():
        assert "cleanup.policy=compact" in done.stderr + done.stdout and REMEDY in done.stderr + done.stdout, \
            (args, done.stdout, done.stderr)
        assert done.returncode == (1 if args[0] == "check" else 0), (args, done.stderr)
    assert "history_deletes" in before[("check", "causality")].stdout

    held = wait_for_compaction(settings, gone=set(chain[:11]))
    assert chain[11:] == [o for o in held if o in chain]  # the newest message of each key is left
    refused = _cli(settings, "replay")
    assert refused.returncode == 70, refused.stderr
    assert f"has lost events: offset(s) {chain[10]} (named by {chain[11]}) hold nothing" in refused.stderr
    assert REMEDY in refused.stderr
    what_is_left = _cli(settings, "replay", "--from-log-start", "--json")
    assert what_is_left.returncode == 0, what_is_left.stderr
    assert json.loads(what_is_left.stdout)["holes"] == [{"offset": chain[10], "named_by": chain[11]}]
    assert f"offset {chain[10]} holds no event, though the event at {chain[11]} names it" in what_is_left.stderr
    checked = _cli(settings, "check", "causality")
    assert checked.returncode == 1
    assert f"offset {chain[10]}: hole: offset {chain[10]} holds no event, but the event at {chain[11]}" \
        in checked.stdout
    assert checked.stdout.startswith("history problems (2):"), checked.stdout
