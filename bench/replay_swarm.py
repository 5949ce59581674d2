"""Replay of a swarm's code (``replay --swarm``, the debugger's engine) beside the plain replay of
the same log.

Subject ``replay_swarm.swarmlog``: :func:`swarmlog.replay_swarm` of ``bench.swarm:ring``
over the log of a real run of that ring (five agents, ``BENCH_SWARM_CHAINS`` chains of
``BENCH_SWARM_HOPS`` hops, run live as one ``swarmlog run`` process on a fresh topic, the
log checked exactly once afterwards): the index pass (headers; recorded effects), then every
message hashed, routed by headers, decoded once, every handler re-run on its inputs under the
determinism guard, and every output compared with the one the log recorded. The result must
show no divergence, one step per hop and the run's ``run.started``, or the benchmark fails.

``replay_swarm`` folds the agents in one process per CPU (at most one per agent, its default);
``replay_swarm.swarmlog_one_process`` is the same replay with ``workers=1``.

Baseline, same run, same log, repetitions interleaved: ``replay_swarm.plain_replay``,
:func:`swarmlog.replay` (consume, hash, decode, fold into the ``Ledger``): the same
log read once with no swarm code, the ceiling a swarm replay can approach.

A short replay's start-up (``swarmlog replay`` of a 3-event topic as a process) is measured
apart, by ``bench/cli.py`` (``--only cli``).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from swarmlog.replaying import replay, replay_swarm
from swarmlog.runtime import _replayer
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import swarm
from .common import Run, fresh_topic, interleave, log, reps, row


def swarm_replay(s: Settings, registry: SchemaRegistry, topic: str, n: int, workers: int | None = None) -> float:
    t0 = perf_counter()
    result = replay_swarm(settings=s, topic=topic, registry=registry, swarm=swarm.ring, workers=workers)
    seconds = perf_counter() - t0
    steps = sum(result.steps.values())
    expected = swarm.RING.outputs + len(swarm.AGENTS)  # every hop, and run.started in every agent
    if result.events != n or result.divergences or result.unverified_from or steps != expected:
        raise RuntimeError(f"replay --swarm of {topic}: {result.events} events (expected {n}), {steps} steps "
                           f"(expected {expected}), divergences {result.divergences[:3]}, "
                           f"unverified {result.unverified_from}")
    return seconds


def plain_replay(s: Settings, registry: SchemaRegistry, topic: str, n: int) -> float:
    t0 = perf_counter()
    result = replay(settings=s, topic=topic, registry=registry)
    seconds = perf_counter() - t0
    if result.events != n or result.undecodable:
        raise RuntimeError(f"replay of {topic}: {result.events} events, expected {n}")
    return seconds


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    topic = fresh_topic(s, "replay-swarm")
    log(f"replay_swarm: running the ring live on {topic} ({swarm.CHAINS} chains x {swarm.HOPS} hops)")
    swarm.swarmlog_swarm(s, processes=False, topic=topic)
    n = replay(settings=s, topic=topic, registry=registry).events
    log(f"replay_swarm: the ring's log holds {n:,} events")

    shape = {"agents": len(swarm.AGENTS), "chains_in_flight": swarm.CHAINS, "hops": swarm.HOPS}
    sub = Run("replay_swarm.swarmlog", n, extra={**shape, "processes": _replayer.processes_for(
        None, agents=len(swarm.AGENTS), events=n, alone=False)})
    one = Run("replay_swarm.swarmlog_one_process", n, extra={**shape, "processes": 1})
    base = Run("replay_swarm.plain_replay", n)

    def step(run_: Run, fn: Any) -> Any:
        def go(r: int) -> None:
            run_.add(fn())
            log(f"{run_.name} rep {r}: {n / run_.samples[-1]:,.0f} ev/s")
        return go

    interleave(reps(5), step(sub, lambda: swarm_replay(s, registry, topic, n)),
               step(one, lambda: swarm_replay(s, registry, topic, n, workers=1)),
               step(base, lambda: plain_replay(s, registry, topic, n)))
    rows = [row(sub, base, target=">= 50000 ev/s", headline=True), row(one, base), row(sub, one)]

    return rows
