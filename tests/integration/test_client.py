"""Work in and out of a running swarm on the real broker: a service starts the run and asks, the swarm's
agents run as `swarmlog run` processes (one per agent, as the chart's Deployments), the replies come back
by the log's causes; `swarmlog append` writes through the same path, into the same run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import psycopg
import pytest

from swarmlog import AsyncClient, Client, InputBeforeRun, ReplyTimeout
from swarmlog.settings import Settings

from ..swarms import DESK
from .conftest import REPO, subprocess_env

CLI = [sys.executable, "-m", "swarmlog.cli"]


def _cli(settings: Settings, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], env=subprocess_env(settings), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def agents(settings: Settings) -> Iterator[list[subprocess.Popen[str]]]:
    """The desk's two agents as processes, started before their run exists: each waits for run.started."""
    procs = [subprocess.Popen([*CLI, "run", "tests.swarms:DESK", "--agent", name, "--wait-for-run", "120"],
                              env=subprocess_env(settings), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for name in ("front", "back")]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-3000:]


def test_a_service_starts_the_run_and_gets_each_reply_from_agents_running_as_processes(settings, agents):
    with Client(settings=settings) as client:
        run = client.start(DESK, run_id="desk-live", seed=5)
        assert run.created
        replies: dict[str, str] = {}

        def ask(q: str) -> None:  # threads of a web service sharing one client
            replies[q] = client.ask("front", "question", q, timeout=90, reply_kind="answer").body

        questions = ["is the log the clock", "what is replayed", "who answers"]
        threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert replies == {q: f"{q}: {len(q)}" for q in questions}

    async def serve() -> list[str]:
        async with AsyncClient(settings=settings) as aclient:
            asks = [aclient.ask("front", "question", "y" * n, timeout=90, reply_kind="answer") for n in (3, 5, 8)]
            return [r.body for r in await asyncio.gather(*asks)]

    assert asyncio.run(serve()) == ["yyy: 3", "yyyyy: 5", "yyyyyyyy: 8"]


def test_input_is_held_until_its_run_starts_and_belongs_to_it_in_the_log_and_the_mirror(settings, agents,
                                                                                       base_settings):
    # `swarmlog append` before anything started the run: held by the client, never written ahead of the run.
    early = subprocess.Popen([*CLI, "append", "agent.message", json.dumps({"kind": "question", "body": "early"}),
                              "--agent", "operator", "--to", "front", "--timeout", "120"],
                             env=subprocess_env(settings), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    with Client(settings=settings, sender="operator") as client:
        with pytest.raises(InputBeforeRun):
            client.send("front", "question", "too early", timeout=1)
        said = early.stderr.readline() if early.stderr else ""  # the command says it holds the input
        assert "holds no run yet: holding the agent.message" in said and early.poll() is None
        run = client.start(DESK, run_id="desk-held", seed=2)
        out, err = early.communicate(timeout=120)
        assert early.returncode == 0, err
        assert int(out) > run.offset
        reply = client.ask("front", "question", "late", timeout=90, reply_kind="answer")
        assert reply.body == "late: 4"
    # Outside the run's agents, and as one of them: refused (exit 2) with the run's agents named.
    typo = _cli(settings, "append", "agent.message", json.dumps({"kind": "question", "body": "x"}), "--agent", "op",
                "--to", "frnot")
    assert typo.returncode == 2 and "has no agent 'frnot'" in typo.stderr and "front, back" in typo.stderr
    other = _cli(settings, "append", "agent.message", "{}", "--agent", "op", "--run-id", "another-run")
    assert other.returncode == 2 and "holds run 'desk-held', not 'another-run'" in other.stderr
    # The mirror files every event of the topic under the one run: input included.
    assert _cli(settings, "sink", "--until-end").returncode == 0
    with psycopg.connect(base_settings.database_conninfo()) as conn:
        rows = conn.execute("SELECT run_id, agent_id, payload->>'body' FROM events WHERE topic = %s AND "
                            "agent_id = 'operator' ORDER BY seq", (settings.topic,)).fetchall()
        runs = conn.execute("SELECT DISTINCT run_id FROM events WHERE topic = %s", (settings.topic,)).fetchall()
    assert rows == [("desk-held", "operator", "early"), ("desk-held", "operator", "late")]
    assert runs == [("desk-held",)]


def test_a_reply_that_does_not_come_is_a_timeout_naming_the_input_and_its_offset(settings, agents):
    with Client(settings=settings) as client:
        client.start(DESK, run_id="desk-quiet", seed=1)
        with pytest.raises(ReplyTimeout) as late:
            client.ask("front", "ignore", "nobody answers this", timeout=15)
    err = late.value
    assert err.run_id == "desk-quiet" and err.offset > 0 and f"offset {err.offset}" in str(err)
    shown = _cli(settings, "show", str(err.offset), "--json")
    assert shown.returncode == 0 and err.event_id in shown.stdout
