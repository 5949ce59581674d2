"""Async steps beside sync ones: what an ``async def`` handler and a recorded async call cost, live and replayed.

All in one process, no service (what is compared is swarmlog's own work; appending to Kafka is the
same ``_output`` for either). Each pair runs interleaved, medians of the repetitions:

* ``aio.step.async`` beside ``aio.step.sync``: ``STEPS`` live steps of a handler that sends one
  message, ``async def`` or not — the same ``ctx``, under the determinism guard, into a sink that
  keeps the outputs. The async one pays for the step's loop: a task, its turns, the checks at its end.
* ``aio.call.async_effect`` beside ``aio.call.sync_effect``: a step that makes one recorded effect
  (a function returning at once): ``await ctx.async_effect(...)`` or ``ctx.effect(...)``. The async
  one's effect runs on a worker thread and comes back through the loop's wait: a thread hand-off
  each way.
* ``aio.call.gather_pair`` beside ``aio.call.sequential_pair``: a step making two effects that
  each take ``EFFECT_MS`` (a sleep: the network's time), under ``asyncio.gather`` or one after the
  other in a sync handler. The concurrency, in wall time.
* ``aio.replay.async`` beside ``aio.replay.sync``: the fold of a recorded log of such one-effect
  steps by the replayer's own :class:`~swarmlog.runtime.engine.AgentCore` (effects served from the
  log, outputs and state checked), CPU per step.

Live rows report wall time (``us_per_step``, the seconds column) and the process's CPU time
(``cpu_us_per_step``, every thread: a live async call's worker included); on a loaded machine the
CPU time is the steadier of the two. Replay rows are CPU time only.
"""

from __future__ import annotations

import asyncio
import time
from inspect import isawaitable
from typing import Any

from swarmlog import Agent, InMemoryLog, Swarm, on_message
from swarmlog.context import Context, Output
from swarmlog.guard import guarded
from swarmlog.log.protocol import route
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import LogHistory
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, interleave, log, reps, row, timed

STEPS = env_int("BENCH_AIO_STEPS", 2000)
PAIRS = env_int("BENCH_AIO_PAIRS", 100)
EFFECT_MS = 5.0
REPLAY_STEPS = env_int("BENCH_AIO_REPLAY_STEPS", 600)


class _Keep:
    """A live step's sink: keeps the outputs (what a transaction would be handed)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def write(self, out: Output, *, locate: bool) -> int | None:
        self.n += 1
        return self.n

    def recorded(self, event_id: str) -> Any:
        return None


def _now() -> int:
    return 1


def _wait() -> int:
    time.sleep(EFFECT_MS / 1000)
    return 1


def _sync_send(ctx: Context) -> None:
    ctx.send("peer", "hop", "x")


async def _async_send(ctx: Context) -> None:
    ctx.send("peer", "hop", "x")


def _sync_effect(ctx: Context) -> None:
    ctx.effect("now", _now)


async def _async_effect(ctx: Context) -> None:
    await ctx.async_effect("now", _now)


def _sequential_pair(ctx: Context) -> None:
    ctx.effect("wait", _wait)
    ctx.effect("wait", _wait)


async def _gather_pair(ctx: Context) -> None:
    await asyncio.gather(ctx.async_effect("wait", _wait), ctx.async_effect("wait", _wait))


def _steps(ctx: Context, handler: Any, n: int) -> None:
    sink = _Keep()
    for i in range(n):
        ctx.begin(step=i, event=None, sink=sink, live=True)
        with guarded(agent=ctx.agent, offset=i):
            result = handler(ctx)
            if result is not None and isawaitable(result):
                ctx.run(result)
        ctx.end()


class _SyncWorker(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"n": 0}

    @on_message("job")
    def job(self, ctx, event):
        self.state["n"] += ctx.effect("now", _now)


class _AsyncWorker(_SyncWorker):
    @on_message("job")
    async def job(self, ctx, event):
        self.state["n"] += await ctx.async_effect("now", _now)


class _Boss(Agent):
    @on_message("go")
    def go(self, ctx, event):
        pass


def _recorded_log(worker: type[Agent], registry: SchemaRegistry) -> tuple[Swarm, InMemoryLog, Settings]:
    from swarmlog import EventLog

    topic = f"aio-{worker.__name__}"
    backend = InMemoryLog()
    backend.create_topic(topic)
    settings = Settings(topic=topic, bootstrap_servers="127.0.0.1:1")
    swarm = Swarm(name=topic, agents=lambda: [worker("w")], code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="aio", seed=1, backend=backend, registry=registry)
    with EventLog(settings=settings, registry=registry, run_id="aio", backend=backend) as events:
        for i in range(REPLAY_STEPS):
            events.append("agent.message", {"kind": "job", "body": str(i)}, agent="boss", to="w")
    run_agents(settings=settings, swarm=swarm, until_quiet=0.5, backend=backend, registry=registry)
    return swarm, backend, settings


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    ctx = Context(agent="bench", registry=registry)
    ctx.set_run(run_id="bench", seed=1)
    for handler in (_sync_send, _async_send, _sync_effect, _async_effect):  # warm up: the loop, the workers
        _steps(ctx, handler, 50)

    runs = {name: Run(f"aio.{name}", n) for name, n in (
        ("step.sync", STEPS), ("step.async", STEPS), ("call.sync_effect", STEPS), ("call.async_effect", STEPS),
        ("call.sequential_pair", PAIRS), ("call.gather_pair", PAIRS), ("replay.sync", REPLAY_STEPS),
        ("replay.async", REPLAY_STEPS))}

    def measure(name: str, handler: Any) -> Any:
        def step(r: int) -> None:
            which = runs[name]
            cpu = time.process_time()  # every thread of the process: the workers' share of a live call too
            seconds, _ = timed(lambda: _steps(ctx, handler, which.events))
            cpu = time.process_time() - cpu
            which.add(seconds, us_per_step=seconds / which.events * 1e6, cpu_us_per_step=cpu / which.events * 1e6)
            log(f"{which.name} rep {r}: {seconds / which.events * 1e6:.1f} us a step, "
                f"{cpu / which.events * 1e6:.1f} us of CPU")
        return step

    interleave(reps(7), measure("step.sync", _sync_send), measure("step.async", _async_send))
    interleave(reps(7), measure("call.sync_effect", _sync_effect), measure("call.async_effect", _async_effect))
    interleave(reps(5), measure("call.sequential_pair", _sequential_pair), measure("call.gather_pair", _gather_pair))

    decoder = Decoder(registry)
    logs = {kind: _recorded_log(worker, registry) for kind, worker in (("sync", _SyncWorker), ("async", _AsyncWorker))}

    def fold(kind: str) -> Any:
        swarm, backend, settings = logs[kind]
        msgs = backend.messages(settings.topic)
        routes = [route(m.headers()) for m in msgs]
        history = LogHistory(backend=backend, topic=settings.topic, decoder=decoder, agents=swarm.agent_names)
        history.read_to_end()  # what a replay reads of the agents' records, read before the timed folds

        def step(r: int) -> None:
            cores = [AgentCore(agent=a, decoder=decoder, history=history.agent(a.name), live_sink=None,
                               strict=True) for a in swarm.agents()]
            started = time.process_time()
            for m, rt in zip(msgs, routes, strict=True):
                for core in cores:
                    core.process(m, rt)
            cpu = time.process_time() - started
            steps = sum(c.steps for c in cores)
            assert steps == REPLAY_STEPS and all(c.divergences == [] for c in cores)
            which = runs[f"replay.{kind}"]
            which.add(cpu, cpu_us_per_step=cpu / steps * 1e6)
            log(f"{which.name} rep {r}: {cpu / steps * 1e6:.1f} us of CPU a step")
        return step

    interleave(reps(7), fold("sync"), fold("async"))
    return [row(runs["step.async"], runs["step.sync"], headline=True),
            row(runs["call.async_effect"], runs["call.sync_effect"]),
            row(runs["call.gather_pair"], runs["call.sequential_pair"], effect_ms=EFFECT_MS),
            row(runs["replay.async"], runs["replay.sync"])]


if __name__ == "__main__":
    import json

    from .common import settings

    s = settings()
    print(json.dumps(run(s, SchemaRegistry.load(s.schema_dirs())), indent=2))
