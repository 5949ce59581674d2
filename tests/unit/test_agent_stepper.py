"""The runtime's step-at-a-time driver (runtime/driven.py), on the in-memory log.

What the simulator rests on: a stepped agent is the live agent — same bytes, same
transactions, same rebuild after a death before commit — only *when* each step runs is
left to the caller.
"""

from __future__ import annotations

from typing import Any

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import TIMER_FIRED, agent_group
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.driven import DrivenAgent
from swarmlog.schema.codec import Decoder

ROUNDS = 4


def _double(n: int) -> int:
    return 2 * n


class _Ping(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    @on("run.started")
    def start(self, ctx, event):
        if self.name == "p":
            ctx.send("q", "ball", "0")

    @on_message("ball")
    def ball(self, ctx, event):
        n = int(event.body)
        self.state["seen"].append([n, ctx.effect("double", _double, n), ctx.randint(0, 9)])
        if n < ROUNDS:
            ctx.send("q" if self.name == "p" else "p", "ball", str(n + 1))


class _Waiter(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"fired": 0}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timeout("t", seconds=0.01)

    @on_timer("t")
    def fired(self, ctx, event):
        self.state["fired"] += 1


PING = Swarm(name="ping", agents=lambda: [_Ping("p"), _Ping("q")], code_version="1")


def _log(backend: InMemoryLog, topic: str) -> list[tuple[int, bytes | None, Any]]:
    return [(m.offset(), m.value(), m.headers()) for m in backend.messages(topic)]


def _steppers(backend, topic, swarm, registry) -> list[DrivenAgent]:
    decoder = Decoder(registry)
    return [DrivenAgent(backend=backend, topic=topic, agent=a, decoder=decoder) for a in swarm.agents()]


def _step_until_rest(steppers: list[DrivenAgent]) -> None:
    while True:
        for s in steppers:
            s.advance()
        due = [s for s in steppers if s.due is not None]
        if not due:
            return
        min(due, key=lambda s: s.due[0]).step()  # type: ignore[index]


def test_a_stepped_swarm_writes_the_same_bytes_headers_and_offsets_as_live_workers(run_settings, registry):
    # One ball in flight: a live run has one possible order, so the two logs must be equal.
    live, stepped = InMemoryLog(), InMemoryLog()
    for backend in (live, stepped):
        backend.create_topic(run_settings.topic)
        start_run(settings=run_settings, swarm=PING, run_id="r", seed=5, backend=backend)
    # The stepper records no state digests (a digest record's `position` is how far a live agent
    # happened to have read: timing, which a simulated run has none of); compared without them.
    undigested = run_settings.model_copy(update={"state_digest_every": 0})
    run_agents(settings=undigested, swarm=PING, until_quiet=0.3, backend=live)
    steppers = _steppers(stepped, run_settings.topic, PING, registry)
    _step_until_rest(steppers)
    assert _log(stepped, run_settings.topic) == _log(live, run_settings.topic)
    # run.started, p's first ball, then each ball's effect and the next ball, the last ball's effect
    assert len(_log(live, run_settings.topic)) == 3 + 2 * ROUNDS


def test_a_step_commits_its_outputs_with_the_agents_position(run_settings, registry):
    backend = InMemoryLog()
    backend.create_topic(run_settings.topic)
    start_run(settings=run_settings, swarm=PING, run_id="r", seed=5, backend=backend)
    p, q = _steppers(backend, run_settings.topic, PING, registry)
    p.advance()
    assert p.due is not None and p.due[0] == 0  # run.started, read but not handled yet
    assert backend.watermarks(run_settings.topic)[1] == 2  # run.started and its marker: nothing more yet
    p.step()
    assert backend.committed(agent_group(run_settings.topic, "p"), run_settings.topic) == 1
    q.advance()
    assert q.due is not None and q.due[0] == 0  # q handles run.started too (and writes nothing)
    q.step()
    assert backend.committed(agent_group(run_settings.topic, "q"), run_settings.topic) is None  # no transaction
    q.advance()
    assert q.due is not None and q.due[1] is not None and q.due[1].body == "0"
    p.advance()  # reads past q's ball and the transaction's marker, to the end of the log
    p.stop()  # a clean stop records how far it read (offsets only: no marker in the log)
    assert backend.committed(agent_group(run_settings.topic, "p"), run_settings.topic) == 4
    assert backend.watermarks(run_settings.topic)[1] == 4


def test_a_life_killed_before_its_commit_is_aborted_by_the_next_which_rebuilds_and_runs_the_step_again(
        run_settings, registry):
    backend = InMemoryLog()
    topic = run_settings.topic
    backend.create_topic(topic)
    start_run(settings=run_settings, swarm=PING, run_id="r", seed=5, backend=backend)
    steppers = _steppers(backend, topic, PING, registry)
    p, q = steppers
    for s in steppers:
        s.advance()
    p.step()  # ball 0 -> q, at offset 2 (run.started's marker is at 1)
    q.step()  # run.started: nothing to write
    q.advance()
    q.step_and_die()  # q handled ball 0 (effect, ball 1), and died before committing
    assert [m.offset() for m in backend.messages(topic)] == [0, 2]  # its outputs are not readable
    assert backend.watermarks(topic)[1] == 6  # ...but they hold offsets 4 and 5, in an open transaction
    q2 = DrivenAgent(backend=backend, topic=topic, agent=PING.agent("q"), decoder=Decoder(registry))
    assert backend.watermarks(topic)[1] == 7  # its fence aborted them: a marker at 6
    q2.advance()
    assert q2.due is not None and q2.due[0] == 0  # it wrote nothing for run.started: live again
    q2.step()
    q2.advance()
    assert q2.due is not None and q2.due[0] == 2  # ball 0, which it runs again, live
    steppers[1] = q2
    _step_until_rest(steppers)
    result = replay_swarm(settings=run_settings, swarm=PING, registry=registry, backend=backend)
    assert result.divergences == []
    assert result.states["q"]["seen"][0][:2] == [0, 0]
    assert [s[0] for s in result.states["q"]["seen"]] == [0, 2, 4]


def test_history_is_replayed_at_once_and_a_restarted_agent_writes_nothing_again(run_settings, registry):
    backend = InMemoryLog()
    topic = run_settings.topic
    backend.create_topic(topic)
    start_run(settings=run_settings, swarm=PING, run_id="r", seed=5, backend=backend)
    _step_until_rest(_steppers(backend, topic, PING, registry))
    before = _log(backend, topic)
    again = _steppers(backend, topic, PING, registry)
    for s in again:
        s.advance()
    assert all(s.due is None for s in again)  # every step was history
    replayed = replay_swarm(settings=run_settings, swarm=PING, registry=registry, backend=backend)
    assert {s.name: s.core.agent.state for s in again} == replayed.states
    assert sum(s.core.steps for s in again) == ROUNDS + 3  # every handler ran again, on the record
    assert _log(backend, topic) == before


def test_a_timeout_fires_only_when_asked_and_once_the_agent_has_caught_up(run_settings, registry):
    swarm = Swarm(name="wait", agents=lambda: [_Waiter("w")], code_version="1")
    backend = InMemoryLog(clock_ms=lambda: 1000)
    topic = run_settings.topic
    backend.create_topic(topic)
    start_run(settings=run_settings, swarm=swarm, run_id="r", seed=1, backend=backend)
    (w,) = _steppers(backend, topic, swarm, registry)
    w.advance()
    w.step()  # sets the timeout: due at 1000 + 10
    assert w.armed() == []  # not read back yet
    w.advance()
    (timer,) = w.armed()
    assert timer.due_wall_ms == 1010
    assert w.fire(1009) == []  # not due
    assert [t.name for t in w.fire(1010)] == ["t"]
    w.advance()
    assert w.due is not None and w.due[1] is not None and w.due[1].event_type == TIMER_FIRED
    # A new life that has not read to the end of the log it found fires nothing, as the worker.
    w2 = DrivenAgent(backend=backend, topic=topic, agent=swarm.agent("w"), decoder=Decoder(registry))
    assert not w2.caught_up and w2.armed() == [] and w2.fire(10**9) == []
