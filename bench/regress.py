"""Regression replay (``swarmlog regress``): many recorded runs replayed against the swarm's code, beside
replaying them one after the other.

The runs: one real run of the ring of ``bench/swarm.py`` with a shape of its own (``bench.regress:ring``:
five agents, ``BENCH_REGRESS_CHAINS`` chains of ``BENCH_REGRESS_HOPS`` hops, run live as one ``swarmlog
run`` process; the workers read the same shape from the same environment), copied offset for offset
(:meth:`~swarmlog.log.base.LogBackend.create_copy`, what ``swarmlog fork`` does) into
``BENCH_REGRESS_RUNS`` topics: as many recorded runs, each a real log of the ring, byte for byte.

Subjects, each over all the runs and required to find every one clean:

* ``regress.swarmlog``: :func:`swarmlog.regression.regress` with its default pool (one worker process
  per CPU), whose start (the workers' interpreters, imports, Kafka connections) is inside the time;
* ``regress.one_job``: the same with ``jobs=1``.

Baseline, same run, same topics, repetitions interleaved: ``regress.replay_swarm_loop``, the runs
replayed one after the other by :func:`swarmlog.replay_swarm` in this process (one process per run,
``workers=1``): what a loop over ``replay --swarm`` costs without its process starts, the fairest
baseline a pool can be held to. And ``regress.cli_loop``: the first ``BENCH_REGRESS_CLI_RUNS`` runs
replayed by ``swarmlog replay --swarm --topic T`` as one process each (what a shell loop over the runs
does today), beside ``regress.swarmlog_same_runs``, the pool over the same runs. Rates: events/s over
all the runs' events, and runs per minute (``runs_per_min``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from time import perf_counter
from typing import Any

from swarmlog import Swarm, on
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
CLI_RUNS = env_int("BENCH_REGRESS_CLI_RUNS", 8, scale=False)
REPO = Path(__file__).resolve().parent.parent


class SmallHopper(swarm.Hopper):
    """The ring's agent, with a run's shape of its own (a regression replay's runs are many and short)."""

    @on("run.started")
    def start(self, ctx, event):
        if self.name == swarm.AGENTS[0]:
            for chain in range(CHAINS):
                ctx.send(swarm.AGENTS[1 + chain % 4], "hop", {"chain": chain, "ttl": HOPS})


ring = Swarm(name="bench-regress-ring", agents=lambda: [SmallHopper(n) for n in swarm.AGENTS],
             code_version="bench-regress-ring")


def _record(s: Settings, registry: SchemaRegistry) -> tuple[list[str], int]:
    """One live run of the ring, copied into RUNS topics: (the topics, events per run)."""
    source = fresh_topic(s, "regress-source")
    env = {**os.environ, "SWARMLOG_TOPIC": source,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"), str(REPO / "connectors"),
                                          os.environ.get("PYTHONPATH", "")])}
    live = subprocess.run([sys.executable, "-m", "swarmlog.cli", "run", "bench.regress:ring", "--run-id", "bench",
                           "--seed", "1", "--until-quiet", "2"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    if live.returncode != 0:
        raise RuntimeError(f"recording the ring failed: {live.stderr[-2000:]}")
    n = replay(settings=s, topic=source, registry=registry).events
    backend = KafkaBackend(s)
    end = backend.watermarks(source)[1]
    topics = []
    for _ in range(RUNS):
        topic = reserve_topic("regress-run")
        with backend.reader(source) as reader:
            reader.assign(0)
            backend.create_copy(topic, (m for batch in reader.batches(end=end) for m in batch), end=end)
        topics.append(topic)
    return topics, n


def _regress(s: Settings, topics: list[str], jobs: int | None) -> float:
    t0 = perf_counter()
    report = regress(settings=s, swarm="bench.regress:ring", topics=topics, jobs=jobs)
    seconds = perf_counter() - t0
    if report.counts()["clean"] != len(topics):
        raise RuntimeError(f"regress of the ring's copies: {report.summary()}")
    return seconds


def _loop(s: Settings, registry: SchemaRegistry, topics: list[str], n: int) -> float:
    t0 = perf_counter()
    for topic in topics:
        result = replay_swarm(settings=s, topic=topic, registry=registry, swarm=ring, workers=1)
        if result.divergences or result.events != n:
            raise RuntimeError(f"replay --swarm of {topic}: {result.events} events, {result.divergences[:2]}")
    return perf_counter() - t0


def _cli_loop(s: Settings, topics: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"), str(REPO / "connectors"),
                                                         os.environ.get("PYTHONPATH", "")])}
    t0 = perf_counter()
    for topic in topics:
        proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", "replay", "--swarm", "bench.regress:ring",
                               "--topic", topic, "--workers", "1", "--json"], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"swarmlog replay --swarm of {topic} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return perf_counter() - t0


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    log(f"regress: recording the ring ({CHAINS} chains x {HOPS} hops) and copying it into {RUNS} topics")
    topics, n = _record(s, registry)
    events = n * len(topics)
    log(f"regress: {len(topics)} runs of {n:,} events each")
    shape = {"runs": len(topics), "events_per_run": n}
    pool = Run("regress.swarmlog", events, extra={**shape, "processes": min(available_cpus(), len(topics))})
    one = Run("regress.one_job", events, extra={**shape, "processes": 1})
    loop = Run("regress.replay_swarm_loop", events, extra={**shape, "processes": 1})
    few = topics[:CLI_RUNS]
    cli = Run("regress.cli_loop", n * len(few), extra={"runs": len(few), "events_per_run": n, "processes": 1})
    pool_few = Run("regress.swarmlog_same_runs", n * len(few), extra={"runs": len(few), "events_per_run": n})

    def step(run_: Run, fn: Any, runs: int) -> Any:
        def go(r: int) -> None:
            seconds = fn()
            run_.add(seconds, runs_per_min=runs * 60 / seconds)
            log(f"{run_.name} rep {r}: {runs * 60 / seconds:,.0f} runs/min, {run_.events / seconds:,.0f} ev/s")
        return go

    interleave(reps(3), step(pool, lambda: _regress(s, topics, None), len(topics)),
               step(one, lambda: _regress(s, topics, 1), len(topics)),
               step(loop, lambda: _loop(s, registry, topics, n), len(topics)),
               step(pool_few, lambda: _regress(s, few, None), len(few)), step(cli, lambda: _cli_loop(s, few), len(few)))
    return [row(pool, loop, headline=True), row(one, loop), row(pool_few, cli)]
