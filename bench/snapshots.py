"""What snapshots save: ``state AGENT --at N`` on a long log, from a snapshot versus from offset zero.

Subject ``snapshots.state_at``: :meth:`swarmlog.debug.Session.state` of one agent at
offsets spread over a log of ``BENCH_SNAPSHOT_EVENTS`` (1M) offsets, with the snapshots
``Session.snapshot(every=BENCH_SNAPSHOT_EVERY)`` (10k) wrote: read the snapshot topic's
headers, restore the latest usable snapshot at or before N, fold the tail.

Baseline, same run, same log, same queries: ``snapshots.state_at_from_zero``, the same
call with ``snapshots=False`` (the agent folded from offset zero). Repetitions interleaved;
``ratio`` is how many times faster the subject is (target >= 10x).

Also measured: ``snapshots.take`` (writing the snapshots: one fold of every agent over the
whole log), and ``snapshots.cli_state_at`` against ``snapshots.cli_state_at_from_zero``:
``swarmlog state`` as a process (Python start-up and imports included) at the last query.

The log is a run of the swarm below (five agents relaying hops among themselves, with
random draws, a recorded effect every tenth hop and logical timers) by swarmlog's own
runtime (``run_agents``: a worker per agent, a transaction per batch), until it has
``BENCH_SNAPSHOT_EVENTS`` offsets — so replaying it checks every recorded output, exactly
as ``state --at`` does on a production log. To write a million offsets in minutes, the
run goes over an in-memory log (:class:`~swarmlog.log.memory.InMemoryLog`, the backend the
simulator uses: same transactions, markers and gaps) and is then copied into a fresh topic
with the offset-exact copy ``swarmlog fork`` and ``Simulator.export`` write with
(:func:`swarmlog.kafka.copy.create_copy`): every event at its offset with its bytes,
headers and timestamp, every marker's offset a record no ``read_committed`` reader sees.
On the broker the topic reads as what a live run interleaved that way would have written;
the queries below read it through Kafka like any other. A live run on the broker
(``BENCH_SNAPSHOT_LOG=live``, the previous way) writes about 2k offsets/s on the 2-core
machine, half the in-memory run's pace plus the copy's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from time import perf_counter
from typing import Any

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.debug import Session
from swarmlog.kafka.reader import watermarks
from swarmlog.log.protocol import snapshot_topic
from swarmlog.runtime import run_agents, start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, copied_run, env_int, fresh_topic, interleave, log, reps, reserve_topic, row, track_topic

AGENTS = [f"s{i}" for i in range(5)]
CHAINS = env_int("BENCH_SNAPSHOT_CHAINS", 1000, scale=False)
"""Chains in flight: a chain is sequential (one hop at a time), so the run's pace is the chains in flight."""
EVENTS = env_int("BENCH_SNAPSHOT_EVENTS", 1_000_000)
TTL = max(1, EVENTS // CHAINS)
"""Hops per chain: each hop is one step and one message, a transaction marker or so beside it."""
SWARM = "bench.snapshots:swarm"
RUN_ID = "bench-snapshots"


def _lookup(chain: int, ttl: int) -> dict[str, int]:
    return {"chain": chain, "ttl": ttl}


class Hopper(Agent):
    ttl = TTL
    """Hops per chain."""

    def initial_state(self) -> dict[str, Any]:
        return {"hops": 0, "total": 0, "last": [], "ticks": 0, "lookups": 0}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timer("tick", after_events=5000)
        if self.name == AGENTS[0]:
            for chain in range(CHAINS):
                ctx.send(ctx.choice(AGENTS[1:]), "hop", {"c": chain, "ttl": self.ttl})

    @on_message("hop")
    def hop(self, ctx, event):
        msg = event.json()
        draw = ctx.randint(0, 1000)
        self.state["hops"] += 1
        self.state["total"] += draw
        self.state["last"] = (self.state["last"] + [draw])[-4:]
        if msg["ttl"] % 10 == 0:
            ctx.effect("lookup", _lookup, msg["c"], msg["ttl"])
            self.state["lookups"] += 1
        if msg["ttl"] > 0:
            ctx.send(ctx.choice([a for a in AGENTS if a != self.name]), "hop", {"c": msg["c"], "ttl": msg["ttl"] - 1})

    @on_timer("tick")
    def tick(self, ctx, event):
        self.state["ticks"] += 1
        ctx.timer("tick", after_events=5000)


swarm = Swarm(name="bench-snapshots", agents=lambda: [Hopper(a) for a in AGENTS], code_version="bench-snapshots-1")

RING_TTL = 40
"""The ring's hops per chain (bench/swarm.py: 1,000 chains of 40 hops)."""


class RingHopper(Hopper):
    """The same agent on the ring's scale: its log is the size of the swarm benchmark's (bench/timetravel.py)."""

    ttl = RING_TTL


ring_swarm = Swarm(name="bench-snapshots-ring", agents=lambda: [RingHopper(a) for a in AGENTS],
                   code_version="bench-snapshots-ring-1")


def _make_log(s: Settings, registry: SchemaRegistry, *, of: Swarm = swarm) -> tuple[Settings, int, float]:
    """The run of ``of`` in a fresh topic: ``BENCH_SNAPSHOT_LOG=memory`` (default) or ``live``; see the module."""
    swarm = of
    hops = CHAINS * of.agents()[0].ttl  # type: ignore[attr-defined]
    how = os.environ.get("BENCH_SNAPSHOT_LOG", "memory")
    t0 = perf_counter()
    if how == "live":
        ts = s.model_copy(update={"topic": fresh_topic(s, "snapshots")})
        start_run(settings=ts, swarm=swarm, run_id=RUN_ID, seed=1, registry=registry)
        run_agents(settings=ts, swarm=swarm, registry=registry, until_quiet=5.0)
        end = watermarks(ts, ts.topic)[1]
    elif how == "memory":
        ts = s.model_copy(update={"topic": reserve_topic("snapshots")})
        end = copied_run(s, ts, registry, swarm, run_id=RUN_ID, label="snapshots")
    else:
        raise RuntimeError(f"BENCH_SNAPSHOT_LOG={how!r}: 'memory' or 'live'")
    seconds = perf_counter() - t0
    if end < hops:
        raise RuntimeError(f"the run stopped at {end:,} offsets, short of its {hops:,} hops")
    track_topic(snapshot_topic(ts.topic))
    return ts, end, seconds


def take_snapshots(session: Session, every: int, *, label: str) -> tuple[Any, float]:
    """``session.snapshot(every=...)``, timed; every agent's snapshots written, or the benchmark fails."""
    t0 = perf_counter()
    taken = session.snapshot(every=every)
    take_s = perf_counter() - t0
    if taken.skipped:
        raise RuntimeError(f"snapshots not written: {taken.skipped}")
    log(f"{label}: {taken.records} snapshot records at {len(taken.offsets)} offsets in {take_s:.1f} s")
    return taken, take_s


def _cli(ts: Settings, at: int, *extra: str) -> float:
    env = dict(os.environ, SWARMLOG_TOPIC=ts.topic,
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    t0 = perf_counter()
    cp = subprocess.run([sys.executable, "-m", "swarmlog.cli", "state", AGENTS[2], "--swarm", SWARM, "--at", str(at),
                         "--json", *extra], env=env, capture_output=True, text=True, timeout=600)
    seconds = perf_counter() - t0
    if cp.returncode != 0:
        raise RuntimeError(f"swarmlog state failed: {cp.stderr}")
    json.loads(cp.stdout)
    return seconds


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    log(f"snapshots: running a {len(AGENTS)}-agent swarm until it has ~{EVENTS:,} offsets")
    ts, end, gen_s = _make_log(s, registry)
    log(f"snapshots: the run's log of {end:,} offsets is in {ts.topic} after {gen_s:.0f} s")
    every = env_int("BENCH_SNAPSHOT_EVERY", 10_000, scale=False)
    with_snap = Session(settings=ts, swarm=swarm, registry=registry)
    taken, take_s = take_snapshots(with_snap, every, label="snapshots")
    take = Run("snapshots.take", end)
    take.add(take_s)

    from_zero = Session(settings=ts, swarm=swarm, registry=registry, snapshots=False)
    queries = [int(end * f) + 7 for f in (0.25, 0.5, 0.75, 0.95)]
    agent = AGENTS[2]
    sub = Run("snapshots.state_at", len(queries))
    base = Run("snapshots.state_at_from_zero", len(queries))
    answers: dict[str, list[Any]] = {sub.name: [], base.name: []}

    def timed(session: Session, run_: Run) -> Any:
        def go(r: int) -> None:
            t = perf_counter()
            got = [session.state(agent, at=q) for q in queries]
            run_.add(perf_counter() - t)
            answers[run_.name].append(got)
            log(f"{run_.name} rep {r}: {run_.samples[-1] / len(queries) * 1000:,.0f} ms a query")
        return go

    interleave(reps(3), timed(with_snap, sub), timed(from_zero, base))
    # Every repetition's answers must agree, from a snapshot and from zero (checked on the timed
    # answers themselves: a pass of its own would fold the whole log once more for each query).
    for a_rep, b_rep in zip(answers[sub.name], answers[base.name], strict=True):
        for q, a, b in zip(queries, a_rep, b_rep, strict=True):
            if a.state != b.state or a.from_snapshot is None:
                raise RuntimeError(f"state at {q}: from the snapshot {a.from_snapshot} != from zero")
    cli = Run("snapshots.cli_state_at", 1)
    cli_base = Run("snapshots.cli_state_at_from_zero", 1)
    interleave(reps(2) - 1 or 1, lambda r: cli.add(_cli(ts, queries[-1])),
               lambda r: cli_base.add(_cli(ts, queries[-1], "--no-snapshots")))
    mean_tail = sum(q - (q // every) * every for q in queries) / len(queries)
    return [
        row(sub, base, headline=True, target=">= 10x (ratio); <= 50 ms a query (ms_per_query)", log_offsets=end,
            every=every, ms_per_query=round(sub.seconds / len(queries) * 1000, 1),
            baseline_ms_per_query=round(base.seconds / len(queries) * 1000, 1),
            queries=queries, mean_tail_offsets=round(mean_tail)),
        row(take, None, snapshot_records=taken.records, snapshot_offsets=len(taken.offsets),
            log_written_s=round(gen_s, 1), log_written_by=os.environ.get("BENCH_SNAPSHOT_LOG", "memory")),
        row(cli, cli_base, note="one `swarmlog state` process each, Python start-up included"),
    ]
