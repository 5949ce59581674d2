"""The mirror from Python: a swarm's run, mirrored by the real sink into the real Postgres, read back
by run, agent, type and causal links, and equal to the log."""

from __future__ import annotations

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.runtime import run_agents, start_run
from swarmlog_connectors.mirror import Mirror
from swarmlog_connectors.postgres_sink import PostgresSink

from .conftest import read_log


class Ping(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("pong", "ping", "1")

    @on_message("pong")
    def pong(self, ctx, event):
        self.state["got"] = event.body


class Pong(Agent):
    @on_message("ping")
    def ping(self, ctx, event):
        looked = ctx.effect("lookup", str.upper, "a")
        ctx.send(event.agent_id, "pong", looked)


def test_the_mirror_api_reads_a_run_by_agent_type_and_causes(settings, registry):
    swarm = Swarm(name="pingpong", agents=lambda: [Ping("ping"), Pong("pong")])
    start_run(settings=settings, swarm=swarm, run_id="mirror-api", seed=1)
    run_agents(settings=settings, swarm=swarm, until_quiet=1.0)
    PostgresSink(settings=settings, registry=registry).run(until_end=True)
    log = read_log(settings, registry)

    with Mirror.from_env(settings) as m:
        everything = m.events()
        assert [(e.seq, e.event_id, e.event_type, e.causes) for e in everything] == \
            [(r.offset, r.record["event_id"], r.event_type, r.record["causes"]) for r in log]
        assert m.runs() == [("mirror-api", log[0].offset, log[-1].offset, len(log))]
        assert [e.seq for e in m.events(run_id="mirror-api")] == [r.offset for r in log]
        assert {e.agent_id for e in m.events(agent="pong")} == {"pong"}
        [effect] = m.events(event_type="effect.recorded")
        assert effect.payload["result_json"] == '"A"' and effect.agent_id == "pong"
        answer = next(e for e in m.events(agent="pong", event_type="agent.message"))
        assert (answer.payload["kind"], answer.payload["body"], answer.to) == ("pong", "A", "ping")
        # The answer depends on the ping it answers and the effect it used; the ping on run.started.
        chain = m.causes(answer.seq)
        assert {e.event_type for e in chain} == {"run.started", "agent.message", "effect.recorded"}
        assert [e.seq for e in m.causes(answer.seq, depth=1)] == sorted(answer.causes)
        assert answer.seq in [e.seq for e in m.effects(effect.seq)]
        assert m.event(answer.seq) == answer and m.event(-5) is None
        assert m.events(since=answer.seq, limit=1) == [answer]
