"""Replay tokens from `swarmlog replay`: `--token-out` writes a version 2 token, `--verify` checks one of
either version against the topic named; version 1 tokens made before version 2 still verify."""

from __future__ import annotations

import json
import subprocess
import sys

from swarmlog.log.append import EventLog
from swarmlog.replaying import replay
from swarmlog.runtime import find_run, run_agents, start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.token import token_from

from .. import swarms
from .conftest import subprocess_env
from .test_runtime import _env
from .test_token import _copy


def _cli(settings, *argv, env=None):
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=env or subprocess_env(settings),
                          capture_output=True, text=True, timeout=180)


def _events(settings, n: int = 20) -> None:
    with EventLog(settings=settings, run_id="tok") as log:
        for i in range(n):
            log.produce("agent.message", {"kind": "k", "body": str(i)}, agent=f"a{i % 3}", to=f"a{(i + 1) % 3}")
        log.flush()


def test_a_token_verifies_the_same_range_and_names_what_changed(settings, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="tok", seed=21)
    _events(settings)
    token = tmp_path / "token.json"
    made = _cli(settings, "replay", "--token-out", str(token), "--checkpoint-every", "5")
    assert made.returncode == 0, made.stderr
    doc = json.loads(token.read_text())
    assert doc["version"] == 2 and doc["run_id"] == "tok" and doc["seed"] == 21 and doc["code_version"] == "relay-1"
    assert doc["start_offset"] == 0 and doc["events"] == 21 and len(doc["checkpoints"]) == 5

    # More events after the token: verification checks only the token's range, and agrees.
    with EventLog(settings=settings, run_id="tok") as log:
        log.append("agent.message", {"kind": "k", "body": "later"}, agent="a0", to="a1")
    ok = _cli(settings, "replay", "--verify", str(token))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "the topic matches the token" in ok.stdout

    # A token whose history differs is refused, naming where.
    forged = dict(doc, checkpoints=[*doc["checkpoints"][:2], [doc["checkpoints"][2][0], doc["checkpoints"][2][1],
                                                              "0" * 64], *doc["checkpoints"][3:]])
    token.write_text(json.dumps(forged))
    bad = _cli(settings, "replay", "--verify", str(token))
    assert bad.returncode == 5
    assert f"the first holds offsets [{doc['checkpoints'][1][1]}, {doc['checkpoints'][2][1]})" in bad.stdout


def test_signed_tokens_refuse_tampering(settings, tmp_path):
    _events(settings, n=1)
    env = dict(subprocess_env(settings), SWARMLOG_TOKEN_KEY="s3cret")
    token = tmp_path / "t.json"
    assert _cli(settings, "replay", "--token-out", str(token), env=env).returncode == 0
    assert json.loads(token.read_text())["signature"]
    assert _cli(settings, "replay", "--verify", str(token), env=env).returncode == 0
    doc = json.loads(token.read_text())
    doc["end_offset"] = 0
    token.write_text(json.dumps(doc))
    refused = _cli(settings, "replay", "--verify", str(token), env=env)
    assert refused.returncode == 2 and "signature does not match" in refused.stderr  # refused: docs/exit-codes.md


def test_a_swarm_token_holds_the_replayed_agent_states(settings, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="swt", seed=4)
    live = run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    token = tmp_path / "swarm.json"
    made = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--token-out", str(token), env=_env(settings))
    assert made.returncode == 0, made.stderr
    doc = json.loads(token.read_text())
    assert doc["agents_from"] == "replay:relay" and doc["agents"] == {r.agent: r.state_hash for r in live}
    ok = _cli(settings, "replay", "--verify", str(token), "--swarm", "tests.swarms:relay", env=_env(settings))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_version_1_token_still_verifies_against_the_topic_named(settings, registry, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="tok", seed=21)
    _events(settings)
    # A version 1 token exactly as `replay --token-out` made them before version 2.
    run = find_run(settings, settings.topic, SchemaRegistry.load(settings.schema_dir))
    v1 = token_from(replay(settings=settings), topic=settings.topic, run=run, code_version=run.code_version,
                    reducer="ledger")
    token = tmp_path / "v1.json"
    v1.save(token)
    assert json.loads(token.read_text())["version"] == 1
    for command in (("replay", "--verify"), ("token", "verify")):
        ok = _cli(settings, *command, str(token))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "matches the token" in ok.stdout
    copy = _copy(settings, settings.topic)
    other = _cli(settings, "token", "verify", str(token), "--topic", copy)
    assert other.returncode == 0, other.stdout + other.stderr
    assert f"checking topic {copy} against a token of topic {settings.topic}" in other.stderr
    assert f"the replay of {copy} matches" in other.stdout
    token.write_text(json.dumps(dict(json.loads(token.read_text()), stream_hash="0" * 64)))
    bad = _cli(settings, "replay", "--verify", str(token), "--topic", copy)
    assert bad.returncode == 5 and "stream_hash" in bad.stdout and "version 1" in bad.stdout
