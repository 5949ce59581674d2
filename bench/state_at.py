"""Time travel on a 1M-event log: one agent's state at random offsets, in a kept session.

Subject ``state_at.swarmlog``: :meth:`swarmlog.debug.Session.state` of agent ``a`` at
``BENCH_STATE_AT_QUERIES`` random offsets of a log of ``BENCH_STATE_AT_OFFSETS`` (1M) offsets,
in one session kept open (as the console, ``swarmlog debug`` and the Python API keep it), over
the checkpoints the live agents wrote every ``BENCH_STATE_AT_EVERY`` of their steps: choose the
latest usable checkpoint at or before N, restore it, fold the tail with the swarm's code, every
recorded output checked. ``p50_ms``/``p99_ms`` are per query.

Baseline ``state_at.from_zero``: the same session code with ``snapshots=False`` (every query
folds the agent from offset zero), on a sample of the queries (a fold of up to 1M offsets each).
Every answer of the sample is compared with its from-zero answer, or the benchmark fails.

Second baseline ``state_at.from_snapshots``: the path without an index, a session over stored
snapshots every ``BENCH_STATE_AT_SNAPSHOT_EVERY`` (10,000) offsets (``Session.snapshot``, taken
once and kept with the log), on the first ``BENCH_STATE_AT_SNAPSHOT_QUERIES`` (30) queries; their
answers are compared with the index's.

The log: two agents rallying ``CHAINS`` balls; each step counts the ball and keeps the last few
it saw (a small state, as an agent's bookkeeping is), one message a step, about one step an
offset. Written as bench/restart.py writes its log (the runtime over an in-memory log, the
checkpoints in the transactions that hold them, copied offset-exact into a fresh topic and its
snapshot topic); read through Kafka. ``BENCH_STATE_AT_TOPIC`` reuses a log a previous run kept
(``BENCH_KEEP_TOPICS=1``): writing it takes a few minutes.
"""

from __future__ import annotations

import ctypes
import gc
import os
import random
from time import perf_counter
from typing import Any

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.debug import Session
from swarmlog.errors import SwarmlogError
from swarmlog.kafka.reader import watermarks
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, copied_run, env_int, log, percentile, reserve_topic, row

OFFSETS = env_int("BENCH_STATE_AT_OFFSETS", 1_000_000)
INDEX_EVERY = env_int("BENCH_STATE_AT_INDEX_EVERY", 32, scale=False)
QUERIES = env_int("BENCH_STATE_AT_QUERIES", 1_000)
CHECKED = env_int("BENCH_STATE_AT_CHECKED", 8, scale=False)
SNAPSHOT_EVERY = env_int("BENCH_STATE_AT_SNAPSHOT_EVERY", 10_000, scale=False)
SNAPSHOT_QUERIES = env_int("BENCH_STATE_AT_SNAPSHOT_QUERIES", 30, scale=False)
CHAINS = 100
AGENT = "a"


class Rally(Agent):
    steps = OFFSETS // 2

    def initial_state(self) -> dict[str, Any]:
        return {"hits": 0, "last": []}

    @on("run.started")
    def serve(self, ctx, event):
        if self.name == "a":
            for i in range(CHAINS):
                ctx.send("b", "ball", str(i))

    @on_message("ball")
    def hit(self, ctx, event):
        self.state["hits"] += 1
        self.state["last"] = [*self.state["last"][-4:], event.body]
        if self.state["hits"] <= self.steps:
            ctx.send("b" if self.name == "a" else "a", "ball", event.body)


swarm = Swarm(name="bench-state-at", agents=lambda: [Rally("a"), Rally("b")], code_version="bench-state-at-1")


def make_log(s: Settings, registry: SchemaRegistry) -> tuple[Settings, int]:
    """The rally's log and its checkpoints, in a fresh topic (or the kept one ``BENCH_STATE_AT_TOPIC`` names)."""
    kept = os.environ.get("BENCH_STATE_AT_TOPIC")
    if kept:
        ts = s.model_copy(update={"topic": kept, "checkpoint_every": 0})
        end = watermarks(ts, kept)[1]
        log(f"state_at: reusing {kept} ({end:,} offsets)")
        return ts, end
    ts = s.model_copy(update={"topic": reserve_topic("state-at"), "checkpoint_every": 0})
    end = copied_run(s, ts, registry, swarm, run_id="bench-state-at", label="state_at")
    log(f"state_at: the log is {ts.topic}")
    return ts, end


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def indexed_session(ts: Settings, registry: SchemaRegistry) -> tuple[Session, dict[str, Any]]:
    """A session with its index of ``AGENT`` built, and what building it took (seconds, memory)."""
    session = Session(settings=ts, swarm=swarm, registry=registry)
    rss0 = rss_bytes()
    t0 = perf_counter()
    index = session.index(AGENT, every=INDEX_EVERY)
    peak = rss_bytes()
    mem = index.memory
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the fold freed, given back: the RSS the index keeps
    built = {"index_seconds": round(perf_counter() - t0, 2), "index_rss_mb": round((rss_bytes() - rss0) / 2**20, 1),
             "index_build_rss_mb": round((peak - rss0) / 2**20, 1),
             "index_holds_mb": round((mem.capture_bytes + mem.ids_bytes + mem.offsets) / 2**20, 1),
             "index_every": index.every, **{f"index_{k}": v for k, v in index.memory.to_json().items()}}
    log(f"state_at: index of {AGENT} built in {built['index_seconds']} s: {built}")
    return session, built


def queries_of(end: int, n: int) -> list[int]:
    return random.Random(31).sample(range(end), n)


def timed_queries(session: Session, queries: list[int]) -> tuple[list[float], list[Any]]:
    """Each query's seconds, and its answer."""
    times, answers = [], []
    for q in queries:
        t = perf_counter()
        answers.append(session.state(AGENT, at=q))
        times.append(perf_counter() - t)
    return times, answers


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    ts, end = make_log(s, registry)
    session, built = indexed_session(ts, registry)
    queries = queries_of(end, QUERIES)
    t0 = perf_counter()
    session.state(AGENT, at=queries[0])  # the readers' connections
    first_ms = (perf_counter() - t0) * 1000
    times, answers = timed_queries(session, queries)
    sub = Run("state_at.swarmlog", len(queries))
    sub.add(sum(times))
    ordered = sorted(times)
    log(f"{sub.name}: p50 {percentile(ordered, 50) * 1000:.2f} ms, p99 {percentile(ordered, 99) * 1000:.2f} ms")
    # The baseline, and the check: a sample of the same queries folded from offset zero.
    sample = random.Random(5).sample(range(len(queries)), min(CHECKED, len(queries)))
    from_zero = Session(settings=ts, swarm=swarm, registry=registry, snapshots=False)
    base = Run("state_at.from_zero", len(sample))
    zero_times, zero_answers = timed_queries(from_zero, [queries[i] for i in sample])
    base.add(sum(zero_times))
    for i, z in zip(sample, zero_answers, strict=True):
        a = answers[i]
        if (a.state, a.steps) != (z.state, z.steps) or a.from_snapshot is None:
            raise RuntimeError(f"state at {queries[i]}: from the index (capture {a.from_snapshot}) != from zero")
    log(f"{base.name}: {sum(zero_times) / len(sample):.2f} s a query ({len(sample)} checked equal)")
    # The path without an index: the latest stored snapshot at or before N, then its tail.
    times.sort()
    zero_times.sort()
    head = {"log_offsets": end, "unit": "queries", "p50_ms": round(percentile(times, 50) * 1000, 2),
            "p99_ms": round(percentile(times, 99) * 1000, 2)}
    rows = [row(sub, base, headline=True, target="p50 <= 5 ms a query on >= 1M offsets", **head,
                first_query_ms=round(first_ms, 1), baseline_p50_ms=round(percentile(zero_times, 50) * 1000, 1),
                checked_equal=len(sample), **built)]
    stored = Session(settings=ts, swarm=swarm, registry=registry)
    if not stored.store.kept():
        t0 = perf_counter()
        try:
            taken = stored.snapshot(every=SNAPSHOT_EVERY)
        except SwarmlogError as exc:
            # A snapshot holds every event id its agent took: on a long log it outgrows what Kafka takes in one
            # record (message.max.bytes, 1 MB by default). Said, and the baseline left out.
            log(f"state_at: the stored snapshots could not be written: {exc}")
            rows[0]["stored_snapshots"] = f"not written: {type(exc).__name__}: {str(exc)[:200]}"
            return rows
        log(f"state_at: {taken.records} snapshot records taken in {perf_counter() - t0:.0f} s")
    picked = queries[:SNAPSHOT_QUERIES]
    stored.state(AGENT, at=picked[0])  # its first look reads the snapshot topic's headers
    snap_times, snap_answers = timed_queries(stored, picked)
    for q, a, b in zip(picked, answers, snap_answers, strict=False):
        if (a.state, a.steps) != (b.state, b.steps):
            raise RuntimeError(f"state at {q}: from the index != from the stored snapshot {b.from_snapshot}")
    old = Run("state_at.from_snapshots", len(picked))
    old.add(sum(snap_times))
    snap_mean_tail = sum(q - (b.from_snapshot or 0) for q, b in zip(picked, snap_answers, strict=True)) / len(picked)
    log(f"{old.name}: {sum(snap_times) / len(picked) * 1000:.0f} ms a query (mean tail {snap_mean_tail:,.0f})")
    snap_times.sort()
    rows.append(row(sub, old, **head, baseline_p50_ms=round(percentile(snap_times, 50) * 1000, 1),
                    baseline_p99_ms=round(percentile(snap_times, 99) * 1000, 1), every=SNAPSHOT_EVERY,
                    mean_tail_offsets=round(snap_mean_tail), snapshot_records=len(stored.store.kept()),
                    last_snapshot_at=max((i.at for i in stored.store.kept()), default=None)))
    return rows
