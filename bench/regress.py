"""Regression replay (``swarmlog regress``): many recorded runs replayed against the swarm's code, beside
replaying them one after the other.

The runs: one real run of ``bench.swarm:ring`` (five agents, ``BENCH_REGRESS_CHAINS`` chains of
``BENCH_REGRESS_HOPS`` hops, run live as one ``swarmlog run`` process), copied offset for offset
(:meth:`~swarmlog.log.base.LogBackend.create_copy`, what ``swarmlog fork`` does) into
``BENCH_REGRESS_RUNS`` topics: as many recorded runs, each a real log of the ring, byte for byte.

Subjects, each over all the runs and required to find every one clean:

* ``regress.swarmlog``: :func:`swarmlog.regression.regress` with its default pool (one worker process
  per CPU), whose start (the workers' interpreters, imports, Kafka connections) is inside the time;
* ``regress.one_job``: the same with ``jobs=1``.

Baseline, same run, same topics, repetitions interleaved: ``regress.replay_swarm_loop``, the runs
replayed one after the other by :func:`swarmlog.replay_swarm` in this process (one process per run,
``workers=1``): what a loop over ``replay --swarm`` costs without its process starts, the fairest
baseline a pool can be held to. Rates: events/s over all the runs' events, and runs per minute
(``runs_per_min``).
"""

from __future__ import annotations

import os
from time import perf_counter
from typing import Any

from swarmlog.kafka.backend import KafkaBackend
from swarmlog.regression import regress
from swarmlog.replaying import replay, replay_swarm
from swarmlog.runtime import available_cpus
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import swarm
from .common import Run, env_int, fresh_topic, interleave, log, reps, reserve_topic, row

RUNS = env_int("BENCH_REGRESS_RUNS", 40)
CHAINS = env_int("BENCH_REGRESS_CHAINS", 10, scale=False)
HOPS = env_int("BENCH_REGRESS_HOPS", 60)


def _record(s: Settings, registry: SchemaRegistry) -> tuple[list[str], int]:
    """One live run of the ring, copied into RUNS topics: (the topics, events per run)."""
    shape = swarm.Shape(chains=CHAINS, hops=HOPS)
    source = fresh_topic(s, "regress-source")
    swarm.swarmlog_swarm(s, processes=False, shape=shape, topic=source)
    n = replay(settings=s, topic=source, registry=registry).events
    backend = KafkaBackend(s)
    topics = []
    for _ in range(RUNS):
        topic = reserve_topic("regress-run")
        with backend.reader(source) as reader:
            reader.assign(0)
            backend.create_copy(topic, (m for batch in reader.batches() for m in batch))
        topics.append(topic)
    return topics, n


def _regress(s: Settings, topics: list[str], jobs: int | None) -> float:
    t0 = perf_counter()
    report = regress(settings=s, swarm="bench.swarm:ring", topics=topics, jobs=jobs)
    seconds = perf_counter() - t0
    if report.counts()["clean"] != len(topics):
        raise RuntimeError(f"regress of the ring's copies: {report.summary()}")
    return seconds


def _loop(s: Settings, registry: SchemaRegistry, topics: list[str], n: int) -> float:
    t0 = perf_counter()
    for topic in topics:
        result = replay_swarm(settings=s, topic=topic, registry=registry, swarm=swarm.ring, workers=1)
        if result.divergences or result.events != n:
            raise RuntimeError(f"replay --swarm of {topic}: {result.events} events, {result.divergences[:2]}")
    return perf_counter() - t0


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    # The workers import bench.swarm:ring, whose shape comes from the environment: the recorded one.
    os.environ["BENCH_SWARM_CHAINS"], os.environ["BENCH_SWARM_HOPS"] = str(CHAINS), str(HOPS)
    log(f"regress: recording the ring ({CHAINS} chains x {HOPS} hops) and copying it into {RUNS} topics")
    topics, n = _record(s, registry)
    events = n * len(topics)
    log(f"regress: {len(topics)} runs of {n:,} events each")
    shape = {"runs": len(topics), "events_per_run": n}
    pool = Run("regress.swarmlog", events, extra={**shape, "processes": min(available_cpus(), len(topics))})
    one = Run("regress.one_job", events, extra={**shape, "processes": 1})
    loop = Run("regress.replay_swarm_loop", events, extra={**shape, "processes": 1})

    def step(run_: Run, fn: Any) -> Any:
        def go(r: int) -> None:
            seconds = fn()
            run_.add(seconds, runs_per_min=len(topics) * 60 / seconds)
            log(f"{run_.name} rep {r}: {len(topics) * 60 / seconds:,.0f} runs/min, {events / seconds:,.0f} ev/s")
        return go

    interleave(reps(3), step(pool, lambda: _regress(s, topics, None)), step(one, lambda: _regress(s, topics, 1)),
               step(loop, lambda: _loop(s, registry, topics, n)))
    return [row(pool, loop, headline=True), row(one, loop)]
