"""What the replay Job runs, `swarmlog replay --swarm --group --json --publish`, on the real broker:
its own consumer group, reset by the admin API or by Kafka's own tool, and a report an operator
reads from the log line and from Postgres."""

from __future__ import annotations

import json
import subprocess

import psycopg

from swarmlog.kafka.config import admin_client
from swarmlog.kafka.groups import committed_offset
from swarmlog.log.protocol import replay_group
from swarmlog.runtime import run_agents, start_run

from .. import swarms
from .test_replay_token import _cli
from .test_runtime import _env


def _report(proc: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_divergent_replay_exits_4_and_publishes_where_the_code_first_departs(settings):
    start_run(settings=settings, swarm=swarms.relay, run_id="job", seed=17)
    live = {r.agent: r.state_hash for r in run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)}
    group = replay_group(settings.topic)

    same = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--group", group, "--json", "--publish",
                env=_env(settings))
    assert same.returncode == 0, same.stderr
    report = _report(same)
    assert report["agents"] == live and report["diverged"] is False and report["group"] == group
    assert report["token"]["agents"] == live and report["token"]["reducer"] == "swarm:relay"
    got = committed_offset(admin_client(settings), group=group, topic=settings.topic)
    assert got == report["end_offset"]  # Kafka's tools show how far the replay got

    changed = _cli(settings, "replay", "--swarm", "tests.swarms:relay_changed", "--group", group, "--json",
                   "--publish", env=_env(settings))
    assert changed.returncode == 4, changed.stderr
    diverged = _report(changed)
    first = diverged["first_divergence"]
    assert diverged["diverged"] is True and diverged["divergences"] == len(diverged["divergence_list"]) > 0
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute("SELECT id, diverged, first_divergence, agents FROM replay_reports WHERE topic = %s "
                            "ORDER BY id", (settings.topic,)).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(report["report_id"], False), (diverged["report_id"], True)]
    assert rows[1][2]["offset"] == first["offset"] and rows[1][2]["agent"] == first["agent"]
    assert rows[0][3] == live


def test_a_replay_group_reset_by_kafkas_own_tool_is_replayed_as_it_is(settings):
    from swarmlog.dev import kafka_tool_argv

    start_run(settings=settings, swarm=swarms.relay, run_id="tool", seed=19)
    live = {r.agent: r.state_hash for r in run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)}
    group = replay_group(settings.topic)
    first = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--group", group, "--json", env=_env(settings))
    assert first.returncode == 0, first.stderr
    # The group now sits at the end of the log: without a reset, --no-reset refuses it...
    refused = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--group", group, "--no-reset", "--json",
                   env=_env(settings))
    assert refused.returncode == 70 and "not at the log start" in refused.stderr, refused.stderr
    # ...and after kafka-consumer-groups --reset-offsets --to-earliest, it replays from there.
    argv = kafka_tool_argv("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", settings.bootstrap_servers, "--group", group,
                           "--topic", settings.topic, "--reset-offsets", "--to-earliest", "--execute")
    reset = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert reset.returncode == 0, reset.stderr
    again = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--group", group, "--no-reset", "--json",
                 env=_env(settings))
    assert again.returncode == 0, again.stderr
    assert _report(again)["agents"] == live and _report(again)["divergences"] == 0


def test_a_swarm_replay_refuses_an_agents_own_group_on_the_command_line(settings):
    proc = _cli(settings, "replay", "--swarm", "tests.swarms:relay", "--group", f"swarmlog.{settings.topic}.r1",
                env=_env(settings))
    assert proc.returncode == 2 and "agent 'r1'" in proc.stderr and "Traceback" not in proc.stderr
