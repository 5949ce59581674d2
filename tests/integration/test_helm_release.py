"""The Helm release, run without a Kubernetes cluster: every workload's rendered command, args
and environment as a local process, with swarmlog installed from the built wheel into a fresh
virtual environment outside the repository, against the real dev Kafka and Postgres.

The order is the one Helm and Kubernetes give: the pre-install hooks by weight (the topic
Job, the mirror's migration, then the run-start Job), then one process per agent and the sink; later an upgrade with
``replay.enabled=true`` renders the replay Job, which runs while the agents keep running.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from swarmlog.kafka.config import admin_client
from swarmlog.kafka.groups import committed_offset
from swarmlog.kafka.reader import high_watermark
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import agent_group
from swarmlog.settings import Settings

from .. import swarms
from .conftest import REPO, new_topic_name, read_log
from .release import Pod, Workload, install_release, replica, workloads
from .test_helm_chart import CHART, DOCKERFILE, RELEASE, render

AGENTS = [f"r{i}" for i in range(swarms.N_AGENTS)]
APP = "research_swarm:relay_long"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel in a fresh venv, the swarm's code in an 'image' directory, a cwd outside the repo."""
    return install_release(repo=REPO, root=tmp_path_factory.mktemp("release"))


def _values(base: Settings, topic: str, app: Path, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "image": {"repository": "registry.example.com/research-swarm", "tag": "test"},
        "swarm": {"app": APP, "runId": "release-test", "seed": 20240611, "agents": AGENTS},
        "kafka": {"bootstrapServers": base.bootstrap_servers, "topic": topic, "replicationFactor": 1},
        "database": {"url": base.database_url},
        # What the user's image sets (ENV PYTHONPATH=/app): every container, hooks included.
        "extraEnv": [{"name": "PYTHONPATH", "value": str(app)}],
    }
    for key, value in extra.items():
        values[key] = {**values.get(key, {}), **value}
    return values


def _render(helm: list[str], helm_env: dict[str, str], tmp: Path, values: dict[str, Any],
            installed: dict[str, Path], *extra: str) -> list[Workload]:
    path = tmp / f"values-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(values))
    manifests = render(helm, helm_env, "template", RELEASE, str(CHART), "--namespace", "swarms", "-f", str(path),
                       *extra)
    return workloads(manifests, dockerfile=DOCKERFILE, venv=installed["venv"], home=installed["home"])


def _pod(w: Workload, installed: dict[str, Path]) -> Pod:
    return Pod(w, cwd=installed["home"], logs=installed["logs"])


def _wheel_ships_schemas(installed: dict[str, Path], env: dict[str, str]) -> None:
    listed = subprocess.run([str(installed["venv"] / "bin" / "swarmlog"), "schema", "list"], env=env,
                            cwd=installed["home"], capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.fail("the installed wheel cannot read its schemas (issue 9 part A: the built-in schemas as "
                    f"package data, not yet on this branch): {listed.stderr.strip()[-500:]}", pytrace=False)


def _run_hooks(pods: list[Pod]) -> dict[str, Pod]:
    """The pre-install hook Jobs in weight order, each to completion, as Helm runs them."""
    done = {}
    for pod in sorted(pods, key=lambda p: p.workload.hook_weight or 0):
        code = pod.run_to_completion(timeout=180)
        assert code == 0, f"hook {pod.workload.name} exited {code}: {pod.stderr()[-3000:]}"
        done[pod.workload.component] = pod
    return done


def _committed(settings: Settings, agent: str) -> int:
    got = committed_offset(admin_client(settings), group=agent_group(settings.topic, agent), topic=settings.topic)
    return -1 if got is None else got


def _finished_chains(settings: Settings, registry) -> set[int]:
    return {json.loads(r.record["payload"]["body"])["chain"] for r in read_log(settings, registry)
            if r.event_type == "agent.message" and r.record["payload"]["kind"] == "finished"}


def _wait_until_the_swarm_ends(settings: Settings, registry, agents: dict[str, Pod], limit: float = 300) -> None:
    """Every chain finished (the swarm's own end), then quiet: the log end stands still and every
    agent has committed its position at it."""
    deadline = time.monotonic() + limit
    while len(_finished_chains(settings, registry)) < swarms.CHAINS:
        for name, pod in agents.items():
            assert pod.alive(), f"agent {name} exited: {pod.stderr()[-3000:]}"
        assert time.monotonic() < deadline, f"the swarm did not end within {limit} s"
        time.sleep(0.5)
    last, since = -1, time.monotonic()
    while True:
        end = high_watermark(settings, settings.topic)
        if end != last:
            last, since = end, time.monotonic()
        elif time.monotonic() - since > 3 and all(_committed(settings, a) >= end for a in agents):
            return
        assert time.monotonic() < deadline, "the swarm never went quiet"
        time.sleep(0.3)


def _mirror(settings: Settings) -> list[tuple[int, str]]:
    with psycopg.connect(settings.database_url) as conn:
        return [(int(seq), eid) for seq, eid in conn.execute(
            "SELECT seq, event_id FROM events WHERE topic = %s ORDER BY seq", (settings.topic,))]


def _wait_for_mirror(settings: Settings, expected: list[tuple[int, str]], limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while _mirror(settings) != expected:
        assert time.monotonic() < deadline, f"the mirror has {len(_mirror(settings))} of {len(expected)} events"
        time.sleep(0.5)


def test_the_rendered_release_runs_the_swarm_to_its_end_exactly_and_its_replay_job_checks_the_code(
    helm, helm_env, base_settings, registry, installed, tmp_path,
):
    topic = new_topic_name("release")
    settings = base_settings.model_copy(update={"topic": topic})
    everything = _render(helm, helm_env, tmp_path, _values(base_settings, topic, installed["app"]), installed)
    hooks = [_pod(w, installed) for w in everything if w.hook_weight is not None]
    assert sorted(p.workload.component for p in hooks) == ["mirror-migrate", "run-start", "topic"]
    _wheel_ships_schemas(installed, hooks[0].workload.env)

    # helm install: the hooks, in weight order. The mirror's schema is migrated (the sink runs no
    # DDL); the run starts exactly once, with the values' run id and seed; a retried or upgraded
    # hook finds it and writes nothing.
    done = _run_hooks(hooks)
    assert "the mirror's schema is at version" in done["mirror-migrate"].stdout()
    assert "started" in done["run-start"].stderr()
    again = _run_hooks([_pod(w, installed) for w in everything if w.component == "run-start"])
    assert "already started" in again["run-start"].stderr()
    (first, *rest) = read_log(settings, registry)
    assert first.event_type == "run.started" and rest == []
    assert (first.record["run_id"], first.record["payload"]["seed"]) == ("release-test", 20240611)

    # ...then the Deployments: one process per agent, and the sink. No manual step.
    agents = {w.agent: _pod(w, installed).start() for w in everything if w.component == "agent"}
    (sink,) = [_pod(w, installed).start() for w in everything if w.component == "sink"]
    assert sorted(agents) == AGENTS
    try:
        for pod in agents.values():
            pod.wait_ready(timeout=120)  # caught up with the log: live
        sink.wait_ready(timeout=60)
        for pod in [*agents.values(), sink]:
            assert pod.probe(pod.workload.liveness_path)[0] == 200

        # A pod restart mid-run: SIGKILL one agent's process and start the same command again.
        deadline = time.monotonic() + 120
        while high_watermark(settings, topic) < 300:
            assert time.monotonic() < deadline, "the swarm did not get going"
            time.sleep(0.2)
        agents["r2"].kill()
        agents["r2"].start().wait_ready(timeout=120)
        _wait_until_the_swarm_ends(settings, registry, agents)

        log = read_log(settings, registry)
        ids = Counter(r.record["event_id"] for r in log)
        assert [i for i, n in ids.items() if n > 1] == [], "an event was written twice"
        status, metrics = agents["r1"].probe("/metrics")
        assert status == 200
        steps = [line for line in metrics.splitlines() if line.startswith('swarmlog_agent_steps_total{agent="r1"}')]
        assert steps and float(steps[0].split()[-1]) > 0
        assert "swarmlog_agent_commit_seconds_bucket" in metrics

        # And after the end: kill and restart another agent. It rebuilds from offset zero,
        # re-verifying every step, and writes nothing.
        agents["r3"].kill()
        agents["r3"].start().wait_ready(timeout=120)
        assert "caught up at offset" in agents["r3"].stderr()
        assert [r.record["event_id"] for r in read_log(settings, registry)] == [r.record["event_id"] for r in log]

        # The mirror equals the topic.
        _wait_for_mirror(settings, [(r.offset, r.record["event_id"]) for r in log])
        status, sink_metrics = sink.probe("/metrics")
        assert status == 200 and f'swarmlog_sink_position{{topic="{topic}"}}' in sink_metrics

        # helm upgrade --set replay.enabled=true: the replay Job runs while the agents run.
        upgraded = _render(helm, helm_env, tmp_path, _values(base_settings, topic, installed["app"],
                                                             replay={"enabled": True}), installed)
        (replay_job,) = [_pod(w, installed) for w in upgraded if w.component == "replay"]
        assert replay_job.run_to_completion(timeout=300) == 0, replay_job.stderr()[-3000:]
        report = json.loads(replay_job.stdout().strip().splitlines()[-1])
        assert report["diverged"] is False and report["divergences"] == 0, report["first_divergence"]
        assert report["end_offset"] >= log[-1].offset + 1
        assert report["token"]["stream_hash"] == report["stream_hash"]
        with psycopg.connect(settings.database_url) as conn:
            (row,) = conn.execute("SELECT agents, diverged, report->>'group' FROM replay_reports WHERE id = %s",
                                  (report["report_id"],)).fetchall()
        assert row == (report["agents"], False, f"swarmlog-replay.{topic}")
        for pod in agents.values():
            assert pod.alive(), "the replay must not need the agents stopped"
    finally:
        live: dict[str, str] = {}
        codes = {}
        for name, pod in agents.items():
            codes[name] = pod.terminate()
            if codes[name] == 0:
                live.update(json.loads(pod.stdout().strip().splitlines()[-1])["agents"])
        sink.terminate()
    assert codes == {a: 0 for a in AGENTS}, {a: agents[a].stderr()[-2000:] for a, c in codes.items() if c}
    # The replay Job's report equals the live agents' states.
    assert report["agents"] == live
    for name, pod in agents.items():
        err = pod.stderr()
        assert "rebuild started" in err and "caught up at offset" in err, (name, err[-2000:])


def test_an_agent_that_finds_no_run_started_says_so_and_fails_after_its_bounded_wait(
    helm, helm_env, base_settings, registry, installed, tmp_path,
):
    topic = new_topic_name("norun")
    values = _values(base_settings, topic, installed["app"], runStart={"enabled": False},
                     agents={"waitForRunSeconds": 8})
    everything = _render(helm, helm_env, tmp_path, values, installed)
    assert sorted(w.component for w in everything if w.hook_weight is not None) == ["mirror-migrate", "topic"]
    _wheel_ships_schemas(installed, everything[0].env)
    _run_hooks([_pod(w, installed) for w in everything if w.component == "topic"])
    (worker,) = [_pod(w, installed) for w in everything if w.agent == "r0"]
    worker.start()
    deadline = time.monotonic() + 8
    status, body = worker.probe(worker.workload.readiness_path)
    while status == -1 and time.monotonic() < deadline:  # still starting: not listening yet
        time.sleep(0.2)
        status, body = worker.probe(worker.workload.readiness_path)
    assert status == 503 and "waiting for the run" in body, (status, body)
    assert worker.probe(worker.workload.liveness_path)[0] == 200
    assert worker.proc is not None
    code = worker.proc.wait(timeout=60)
    err = worker.stderr()
    assert code == 70, err  # a run-time error (RunNotStarted), not a usage error
    assert "no run.started in topic" in err and "waiting" in err
    assert "--start --run-id" in err and "Traceback" not in err


def test_the_rendered_sink_replicas_share_a_pattern_and_mirror_every_topic_exactly_once(
    helm, helm_env, base_settings, registry, installed, tmp_path,
):
    prefix = new_topic_name("release-sinks")
    topics = [f"{prefix}.s{i}" for i in range(8)]
    for t in topics:
        create_topic(base_settings, t)
        with EventLog(settings=base_settings, topic=t) as log:
            for i in range(50):
                log.produce("agent.message", {"kind": "k", "body": f"{t}:{i}"}, agent=f"a{i % 3}")
    values = _values(base_settings, topics[0], installed["app"],
                     sink={"topicsPattern": re.escape(prefix) + r"\..*", "replicas": 2,
                           "consumerGroup": f"{prefix}-sinks"})
    everything = _render(helm, helm_env, tmp_path, values, installed)
    (workload,) = [w for w in everything if w.component == "sink"]
    pods = [_pod(replica(workload), installed).start() for _ in range(2)]  # the Deployment's two pods
    try:
        for pod in pods:
            pod.wait_ready(timeout=60)
        deadline = time.monotonic() + 120
        while True:
            with psycopg.connect(base_settings.database_url) as conn:
                rows = conn.execute("SELECT topic, next_offset, owner FROM sink_positions WHERE topic LIKE %s",
                                    (prefix + ".%",)).fetchall()
            owners = {o for *_, o in rows}
            if len(rows) == len(topics) and all(p == 50 for _, p, _ in rows) and len(owners) == 2 \
                    and None not in owners:
                break
            assert time.monotonic() < deadline, f"the two sinks did not mirror the pattern between them: {rows}"
            time.sleep(0.3)
        held = []
        for pod in pods:
            status, metrics = pod.probe("/metrics")
            assert status == 200
            (line,) = [m for m in metrics.splitlines() if m.startswith("swarmlog_sink_topics ")]
            held.append(float(line.split()[-1]))
        assert sorted(held) == [4.0, 4.0], held  # each pod holds its share
    finally:
        codes = [pod.terminate() for pod in pods]
    assert codes == [0, 0], [pod.stderr()[-2000:] for pod in pods]
    with psycopg.connect(base_settings.database_url) as conn:
        mirrored = conn.execute("SELECT topic, count(*), count(DISTINCT seq) FROM events WHERE topic LIKE %s "
                                "GROUP BY topic ORDER BY topic", (prefix + ".%",)).fetchall()
    assert mirrored == [(t, 50, 50) for t in topics]
