"""Time travel on the ring's log: one agent's state at mid-run, from a snapshot, in a debugging session.

Subject ``timetravel.state_at``: :meth:`swarmlog.debug.Session.state` of one agent at eleven
offsets across the middle of the log (40% to 60%), in one session kept open — as the debugger's
views and the Python API use it — with the snapshots ``Session.snapshot(every=...)`` wrote
(``BENCH_RING_SNAPSHOT_EVERY``, 1,000 offsets: five records of ~24 KB, one per agent): choose the
latest usable snapshot at or before N, restore it, fold the tail with the swarm's code, every
recorded output checked.

Baseline ``timetravel.state_at_from_zero``: the same calls with ``snapshots=False``, the agent
folded from offset zero. Repetitions interleaved; every answer from a snapshot is compared with
the answer from zero of the same repetition, or the benchmark fails.

The log is bench/snapshots.py's swarm at the ring's scale (bench/swarm.py: five agents, 1,000
chains of 40 hops): the same hops, plus what the ring has not — a random draw each hop, a
recorded effect every tenth and logical timers, all of which the fold serves from the log and
checks. It is written the way bench/snapshots.py writes its 1M-hop log (the runtime over an
in-memory log, copied offset-exact into a fresh topic) and read through Kafka.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from swarmlog.debug import Session
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import snapshots as sn
from .common import Run, env_int, interleave, log, reps, row

EVERY = env_int("BENCH_RING_SNAPSHOT_EVERY", 1_000, scale=False)
AGENT = sn.AGENTS[2]


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    ts, end, gen_s = sn._make_log(s, registry, of=sn.ring_swarm)
    log(f"timetravel: the ring-sized run's log of {end:,} offsets is in {ts.topic} after {gen_s:.0f} s")
    session = Session(settings=ts, swarm=sn.ring_swarm, registry=registry)
    taken, _ = sn.take_snapshots(session, EVERY, label="timetravel")
    from_zero = Session(settings=ts, swarm=sn.ring_swarm, registry=registry, snapshots=False)
    queries = [int(end * (0.40 + 0.02 * i)) for i in range(11)]
    t0 = perf_counter()
    session.state(AGENT, at=queries[0])  # the session's first query opens its readers
    first_s = perf_counter() - t0

    sub = Run("timetravel.state_at", len(queries))
    base = Run("timetravel.state_at_from_zero", len(queries))
    answers: dict[str, list[Any]] = {sub.name: [], base.name: []}
    per_query: list[float] = []

    def timed(session_: Session, run_: Run, keep: list[float] | None) -> Any:
        def go(r: int) -> None:
            got = []
            t = perf_counter()
            for q in queries:
                tq = perf_counter()
                got.append(session_.state(AGENT, at=q))
                if keep is not None:
                    keep.append(perf_counter() - tq)
            run_.add(perf_counter() - t)
            answers[run_.name].append(got)
            log(f"{run_.name} rep {r}: {run_.samples[-1] / len(queries) * 1000:,.1f} ms a query")
        return go

    interleave(reps(3), timed(session, sub, per_query), timed(from_zero, base, None))
    for a_rep, b_rep in zip(answers[sub.name], answers[base.name], strict=True):
        for q, a, b in zip(queries, a_rep, b_rep, strict=True):
            if a.state != b.state or a.from_snapshot is None:
                raise RuntimeError(f"state at {q}: from the snapshot {a.from_snapshot} != from zero")
    per_query.sort()
    mean_tail = sum(q - (q // EVERY) * EVERY for q in queries) / len(queries)
    return [row(sub, base, headline=True, target="<= 50 ms a query (ms_per_query)", log_offsets=end, every=EVERY,
                ms_per_query=round(sub.seconds / len(queries) * 1000, 1),
                p50_ms=round(per_query[len(per_query) // 2] * 1000, 1),
                p99_ms=round(per_query[min(len(per_query) - 1, int(len(per_query) * 0.99))] * 1000, 1),
                baseline_ms_per_query=round(base.seconds / len(queries) * 1000, 1),
                first_query_ms=round(first_s * 1000, 1), mean_tail_offsets=round(mean_tail),
                snapshot_records=taken.records, queries=queries)]
