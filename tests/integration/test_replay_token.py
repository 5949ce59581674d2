"""Replay tokens: a replay verifies itself against the token of an earlier one."""

from __future__ import annotations

import json
import subprocess
import sys

from swarmlog.log.append import EventLog
from swarmlog.runtime import run_agents, start_run

from .. import swarms
from .conftest import subprocess_env
from .test_runtime import _env


def _cli(settings, *argv, env=None):
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=env or subprocess_env(settings),
                          capture_output=True, text=True, timeout=180)


def test_a_token_verifies_the_same_range_and_names_what_changed(settings, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="tok", seed=21)
    with EventLog(settings=settings, run_id="tok") as log:
        for i in range(20):
            log.produce("agent.message", {"kind": "k", "body": str(i)}, agent=f"a{i % 3}", to=f"a{(i + 1) % 3}")
        log.flush()
    token = tmp_path / "token.json"
    made = _cli(settings, "replay", "--token-out", str(token))
    assert made.returncode == 0, made.stderr
    doc = json.loads(token.read_text())
    assert doc["run_id"] == "tok" and doc["seed"] == 21 and doc["code_version"] == "relay-1"
    assert doc["start_offset"] == 0 and doc["events"] == 21 and len(doc["stream_hash"]) == 64

    # More events after the token: verification replays only the token's range, and agrees.
    with EventLog(settings=settings, run_id="tok") as log:
        log.append("agent.message", {"kind": "k", "body": "later"}, agent="a0", to="a1")
    ok = _cli(settings, "replay", "--verify", str(token))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "matches" in ok.stdout

    # A token whose history differs is refused, naming what differs.
    forged = dict(doc, stream_hash="0" * 64, agents={**doc["agents"], "a1": "f" * 64})
    token.write_text(json.dumps(forged))
    bad = _cli(settings, "replay", "--verify", str(token))
    assert bad.returncode == 5
    assert "stream_hash" in bad.stdout and "agent a1" in bad.stdout


def test_signed_tokens_refuse_tampering(settings, tmp_path):
    with EventLog(settings=settings, run_id="sig") as log:
        log.append("agent.message", {"kind": "k", "body": "x"}, agent="a", to="b")
    env = dict(subprocess_env(settings), SWARMLOG_TOKEN_KEY="s3cret")
    token = tmp_path / "t.json"
    assert _cli(settings, "replay", "--token-out", str(token), env=env).returncode == 0
    assert json.loads(token.read_text())["signature"]
    assert _cli(settings, "replay", "--verify", str(token), env=env).returncode == 0
    doc = json.loads(token.read_text())
    doc["end_offset"] = 0
    token.write_text(json.dumps(doc))
    refused = _cli(settings, "replay", "--verify", str(token), env=env)
    assert refused.returncode == 70 and "signature does not match" in refused.stderr


def test_a_swarm_token_holds_agent_states_and_needs_the_swarm_to_verify(settings, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="swt", seed=4)
    live = run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    token = tmp_path / "swarm.json"
    made = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--token-out", str(token), env=_env(settings))
    assert made.returncode == 0, made.stderr
    doc = json.loads(token.read_text())
    assert doc["reducer"] == "swarm:relay" and doc["agents"] == {r.agent: r.state_hash for r in live}
    assert _cli(settings, "replay", "--verify", str(token), env=_env(settings)).returncode == 2
    ok = _cli(settings, "replay", "--verify", str(token), "--swarm", "tests.swarms:relay", env=_env(settings))
    assert ok.returncode == 0, ok.stdout + ok.stderr
