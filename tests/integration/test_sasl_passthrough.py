"""swarmlog through a SASL_PLAINTEXT (SCRAM-SHA-512) listener, with credentials from SWARMLOG_KAFKA_*.

A dev cluster of its own (``swarmlog dev up --sasl``), reached only through its
SASL listener, the way ``eval "$(swarmlog dev env)"`` sets a shell up. Every
step is the CLI as a process: topic, append, sink, replay (with a token, then
verified), a swarm of agents, a replay of the swarm. Then no password appears
anywhere: not in any process's output (librdkafka's debug log included), nor the
token, nor the broker's or Postgres' logs; and a wrong password fails without
being shown either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from swarmlog.errors import ServiceUnavailable
from swarmlog.settings import Settings

from .conftest import REPO, new_topic_name
from .dev_clusters import SpareCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sasl_cluster(three_brokers: SpareCluster) -> SpareCluster:
    return three_brokers  # conftest's: three brokers, each with a SASL listener


class _Cli:
    """Runs `swarmlog ...` processes with one environment and keeps everything they printed."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.seen: list[str] = []
        self.took: list[tuple[str, float]] = []

    def __call__(self, *args: str, ok: bool = True, timeout: float = 180,
                 extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        began = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env={**self.env, **(extra or {})},
                                cwd=REPO, capture_output=True, text=True, timeout=timeout)
        self.seen += [result.stdout, result.stderr]
        self.took.append((args[0], round(time.monotonic() - began, 1)))
        if ok:
            assert result.returncode == 0, f"swarmlog {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return result


def test_append_sink_replay_and_agents_through_sasl_never_show_the_password(
        sasl_cluster: SpareCluster, tmp_path: Path) -> None:
    assert sasl_cluster.info is not None
    up = sasl_cluster.cli("up", timeout=180)  # what a user sees on `dev up --sasl`: no password
    assert up.returncode == 0, up.stderr
    env = sasl_cluster.client_env()
    password = env["SWARMLOG_KAFKA_SASL_PASSWORD"]
    assert len(password) >= 20
    assert env["SWARMLOG_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert env["SWARMLOG_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    # Only the SASL listener: nothing below can fall back to PLAINTEXT.
    assert env["SWARMLOG_BOOTSTRAP_SERVERS"] == ",".join(
        f"127.0.0.1:{p}" for p in sasl_cluster.options["sasl_port"])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "platform"), str(REPO / "connectors")])
    cli = _Cli(env)

    topic = new_topic_name("sasl")
    cli.env = {**env, "SWARMLOG_TOPIC": topic}
    cli("topic", "create")
    wrong = "not-the-password-Kq7"
    refused = subprocess.Popen(
        [sys.executable, "-m", "swarmlog.cli", "append", "agent.message", json.dumps({"kind": "k", "body": "never"}),
         "--agent", "a"], env={**cli.env, "SWARMLOG_KAFKA_SASL_PASSWORD": wrong}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    appended = [cli("append", *(["-vv"] if i == 0 else []), "agent.message",
                    json.dumps({"kind": "k", "body": f"via sasl {i}"}), "--agent", "a", "--to", "b", "--run-id", "sasl",
                    "--no-run",
                    # librdkafka's own log of its configuration and of the SASL handshake, too (shown with -vv)
                    extra={"SWARMLOG_KAFKA_DEBUG": "conf,security"} if i == 0 else None)
                for i in range(2)]
    assert int(appended[0].stdout) < int(appended[1].stdout)
    assert "sasl.password = [redacted]" in appended[0].stderr
    cli("mirror", "migrate")  # as the database owner, before the sink (which runs no DDL)
    sink = json.loads(cli("sink", "--until-end").stdout)
    assert sink["rows"] == 2 and sink["dead_letters"] == 0
    with psycopg.connect(sasl_cluster.info.database_url) as conn:
        bodies = [r[0] for r in conn.execute(
            "SELECT payload->>'body' FROM events WHERE topic = %s ORDER BY seq", (topic,)).fetchall()]
    assert bodies == [f"via sasl {i}" for i in range(2)]
    token = tmp_path / "token.json"
    replayed = cli("replay", "--json", "--token-out", str(token))
    assert json.loads(replayed.stdout)["events"] == 2
    assert "matches the token" in cli("replay", "--verify", str(token)).stdout

    swarm_topic = new_topic_name("sasl-swarm")
    cli.env = {**env, "SWARMLOG_TOPIC": swarm_topic}
    cli("topic", "create")
    ran = json.loads(cli("run", "tests.swarms:relay", "--run-id", "sasl", "--seed", "5",
                         "--until-quiet", "1").stdout.splitlines()[-1])
    assert sum(ran["steps"].values()) > 0
    swarm_token = tmp_path / "swarm-token.json"
    check = cli("replay", "--swarm", "tests.swarms:relay", "--json", "--token-out", str(swarm_token))
    doc = json.loads(check.stdout)
    assert doc["agents"] == ran["agents"] and doc["divergences"] == 0

    # A wrong password is refused, and not repeated back either (started at the top: it takes
    # the 30 s metadata timeout to give up).
    out, err = refused.communicate(timeout=180)
    cli.seen += [out, err]
    assert refused.returncode != 0
    assert "SASL authentication" in err or "Authentication failed" in err

    texts = {f"process output #{i}": text for i, text in enumerate(cli.seen)}
    texts["dev up"] = up.stdout + up.stderr
    texts["token"] = token.read_text()
    texts["swarm token"] = swarm_token.read_text()
    for node_log in sasl_cluster.info.kafka_logs:
        texts[str(node_log)] = node_log.read_text(errors="replace")
    texts["postgres log"] = sasl_cluster.info.postgres_log.read_text(errors="replace")
    print(f"\nseconds per command: {cli.took}")
    leaks = sorted(name for name, text in texts.items() if password in text or wrong in text)
    assert leaks == [], f"a password appears in: {leaks}"


def test_a_failed_database_connection_does_not_say_the_password() -> None:
    from swarmlog_connectors.postgres_sink import connect

    password = "db-s3cr@t-Zq81"
    settings = Settings.from_env({"SWARMLOG_DATABASE_URL": "postgresql://app:db-s3cr%40t-Zq81@127.0.0.1:1/swarm"})
    with pytest.raises(ServiceUnavailable) as caught:
        connect(settings)  # port 1: nothing listens
    for text in (str(caught.value), repr(caught.value)):
        assert password not in text and "db-s3cr%40t-Zq81" not in text, text
