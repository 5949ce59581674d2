"""``make bench-peers``: swarmlog beside LangGraph and Kafka Connect; writes bench/results-peers.{json,md}.

Usage::

    PYTHONPATH=platform:connectors .venv/bin/python -m bench.peers [--only ring,hop,sink,state_at] [--out DIR]

Needs the ``peers`` extra (``pip install -e '.[peers]'``, what ``make bench-peers`` does)
and Maven (Kafka Connect and the JDBC sink connector are fetched on the first run).
Knobs: ``BENCH_REPS``, ``BENCH_QUICK=1``, ``BENCH_SWARM_CHAINS`` / ``BENCH_SWARM_HOPS``
(the ring), ``BENCH_HOP_HOPS`` (the single chain), ``BENCH_SINK_EVENTS``,
``BENCH_PEERS_LANGGRAPH_PROCESSES`` (5), ``BENCH_PEERS_STATE_AT_STEPS`` (20,000: LangGraph's
thread for ``state_at``; swarmlog's side takes bench/state_at.py's ``BENCH_STATE_AT_*``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from swarmlog.debug import Session
from swarmlog.runtime import interpreter
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_migrations import migrate

from .. import common
from ..common import Run, env_int, fresh_topic, log, make_stream, percentile, populate, reps, row
from ..hop import CHAIN
from ..run import environment, markdown
from ..sink import _start_sink_process, _stop_sink_process, forget_topic_rows
from ..swarm import AGENTS, RING, swarmlog_swarm
from . import kafka_connect, langgraph_ring

BENCH_DIR = Path(__file__).resolve().parents[1]
PARTS = ("ring", "hop", "sink", "state_at")
DURABILITIES = ("sync", "async")
LANGGRAPH_PROCESSES = env_int("BENCH_PEERS_LANGGRAPH_PROCESSES", 5, scale=False)
SINK_EVENTS = env_int("BENCH_SINK_EVENTS", 200_000)
SINK_MODES = ("upsert", "insert")
STATE_AT_STEPS = env_int("BENCH_PEERS_STATE_AT_STEPS", 20_000)


def ring(s: Settings, conninfo: str) -> list[dict[str, Any]]:
    shape = {"agents": len(AGENTS), "chains_in_flight": RING.chains, "hops": RING.hops}
    sub = Run("peers.ring.swarmlog", RING.chains * RING.hops, extra={**shape, "processes": len(AGENTS)})
    lg = {d: Run(f"peers.ring.langgraph_{d}", RING.chains * RING.hops,
                 extra={**shape, "processes": LANGGRAPH_PROCESSES, "durability": d,
                        "pool_connections_per_process": langgraph_ring.POOL_SIZE}) for d in DURABILITIES}
    for r in range(reps(3)):
        seconds, n, stats = swarmlog_swarm(s, processes=True)
        sub.add(seconds, **stats)
        log(f"{sub.name} rep {r}: {n / seconds:,.0f} steps/s, hop p50 {stats['p50_ms']:.1f} ms")
        for d, run_ in lg.items():
            seconds, n, stats = langgraph_ring.ring(conninfo, chains=RING.chains, hops=RING.hops, durability=d,
                                                    processes=LANGGRAPH_PROCESSES)
            run_.add(seconds, **stats)
            log(f"{run_.name} rep {r}: {n / seconds:,.0f} steps/s, hop p50 {stats['p50_ms']:.1f} ms")
    return [row(sub, lg["sync"], unit="steps", headline=True, target=">= 10x LangGraph's synchronous checkpointer"),
            row(sub, lg["async"], unit="steps")]


def hop(s: Settings, conninfo: str) -> list[dict[str, Any]]:
    shape = {"agents": len(AGENTS), "chains_in_flight": 1, "hops": CHAIN.hops}
    sub = Run("peers.hop.swarmlog", CHAIN.hops, extra={**shape, "processes": len(AGENTS)})
    lg = {d: Run(f"peers.hop.langgraph_{d}", CHAIN.hops,
                 extra={**shape, "processes": 1, "durability": d, "checkpointer": "PostgresSaver (sync)"})
          for d in DURABILITIES}
    for r in range(reps(3)):
        seconds, n, stats = swarmlog_swarm(s, processes=True, shape=CHAIN)
        sub.add(seconds, **stats)
        log(f"{sub.name} rep {r}: hop p50 {stats['p50_ms']:.1f} ms, p99 {stats['p99_ms']:.1f} ms")
        for d, run_ in lg.items():
            seconds, n, stats = langgraph_ring.hop_latency(conninfo, hops=CHAIN.hops, durability=d)
            run_.add(seconds, **stats)
            log(f"{run_.name} rep {r}: hop p50 {stats['p50_ms']:.2f} ms, p99 {stats['p99_ms']:.2f} ms")
    return [row(sub, lg["sync"], unit="hops", headline=True), row(sub, lg["async"], unit="hops")]


def state_at(s: Settings, registry: SchemaRegistry, conninfo: str) -> list[dict[str, Any]]:
    """One agent's state at random past offsets (bench/state_at.py's log and kept session) beside
    LangGraph's ``get_state`` at random past checkpoints of one thread (PostgresSaver)."""
    from .. import state_at as sa

    ts, end = sa.make_log(s, registry)
    session, built = sa.indexed_session(ts, registry)
    queries = sa.queries_of(end, sa.QUERIES)
    session.state(sa.AGENT, at=queries[0])  # the readers' connections, as LangGraph's saver has its connection
    times, answers = sa.timed_queries(session, queries)
    from_zero = Session(settings=ts, swarm=sa.swarm, registry=registry, snapshots=False)
    for i in (0, len(queries) // 2):  # the full check is bench/state_at.py's; two here keep the answers honest
        z = from_zero.state(sa.AGENT, at=queries[i])
        if (z.state, z.steps) != (answers[i].state, answers[i].steps):
            raise RuntimeError(f"state at {queries[i]}: from the index != from zero")
    lg_times, checkpoints = langgraph_ring.get_state_latency(conninfo, steps=STATE_AT_STEPS, queries=len(queries))
    sub = Run("peers.state_at.swarmlog", len(queries), extra={"log_offsets": end, **built})
    sub.add(sum(times))
    base = Run("peers.state_at.langgraph_get_state", len(lg_times),
               extra={"thread_checkpoints": checkpoints, "checkpointer": "PostgresSaver (sync)"})
    base.add(sum(lg_times))
    times.sort()
    lg_times.sort()
    ms = {"p50_ms": percentile(times, 50) * 1000, "p99_ms": percentile(times, 99) * 1000,
          "baseline_p50_ms": percentile(lg_times, 50) * 1000, "baseline_p99_ms": percentile(lg_times, 99) * 1000}
    log(f"{sub.name}: p50 {ms['p50_ms']:.2f} ms, p99 {ms['p99_ms']:.2f} ms; {base.name}: p50 "
        f"{ms['baseline_p50_ms']:.2f} ms, p99 {ms['baseline_p99_ms']:.2f} ms ({checkpoints:,} checkpoints)")
    return [row(sub, base, unit="queries", headline=True, target="p50 <= 5 ms a query on >= 1M offsets",
                thread_checkpoints=checkpoints, **{k: round(v, 2) for k, v in ms.items()})]


def swarmlog_mirror(s: Settings, topic: str, n: int) -> float:
    """swarmlog's sink as a process (as ``swarmlog sink`` runs), timed by the same poller as Connect."""
    sink = _start_sink_process(s, topic)
    try:
        with psycopg.connect(s.database_url, autocommit=True) as conn:
            migrate(conn)

            def alive() -> None:
                if sink.poll() is not None:
                    raise RuntimeError(f"the swarmlog sink exited (rc {sink.returncode})")

            return kafka_connect.poll_until(
                conn, lambda: kafka_connect.count_rows(conn, "events", "WHERE topic = %s", (topic,)), n, alive=alive)
    finally:
        _stop_sink_process(sink)


def sink(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    n = SINK_EVENTS
    stream = make_stream(registry)
    src = fresh_topic(s, "peers-sink")
    populate(s, registry, stream, src, n)
    records = fresh_topic(s, "peers-connect-records")
    if kafka_connect.connect_records(s, registry, src, records, label=src) != n:
        raise RuntimeError("the Connect records do not match the events")
    sub = Run("peers.sink.swarmlog", n, extra={"timed": "first row visible -> last row visible",
                                                 "delivery": "exactly once"})
    peers = {m: Run(f"peers.sink.kafka_connect_jdbc_{m}", n,
                    extra={"insert_mode": m, "delivery": "at least once", "batch_size": kafka_connect.BATCH,
                           "record_format": "JSON with inline schema (JsonConverter)"}) for m in SINK_MODES}
    try:
        for r in range(reps(3)):
            sub.add(swarmlog_mirror(s, src, n))
            with psycopg.connect(s.database_url, autocommit=True) as conn:
                digest = kafka_connect.table_digest(conn, "events", src)
            forget_topic_rows(s, [src])
            log(f"{sub.name} rep {r}: {n / sub.samples[-1]:,.0f} rows/s")
            for m, run_ in peers.items():
                run_.add(kafka_connect.mirror(s, topic=records, n=n, mode=m, label=src, expect=digest))
                log(f"{run_.name} rep {r}: {n / run_.samples[-1]:,.0f} rows/s")
    finally:
        forget_topic_rows(s, [src])
    return [row(sub, peers["upsert"], unit="rows", headline=True, target=">= 3x the JDBC sink connector"),
            row(sub, peers["insert"], unit="rows")]


def settings_doc() -> dict[str, Any]:
    """The peers' versions and settings, printed with the results."""
    return {
        "langgraph": {**langgraph_ring.versions(), "processes": LANGGRAPH_PROCESSES,
                      "ring": "AsyncPostgresSaver over an AsyncConnectionPool "
                              f"({langgraph_ring.POOL_SIZE} connections per process), ainvoke per chain",
                      "hop": "PostgresSaver on one connection, invoke", "durability": list(DURABILITIES)},
        "kafka_connect": {**kafka_connect.versions(), "connector": kafka_connect.CONNECTOR_CLASS,
                          "worker": "ConnectStandalone, -Xmx1g",
                          "connector_settings": {k: v for k, v in kafka_connect.connector_properties(
                              name="bench", topic="<records>", table="<table>", mode="<mode>",
                              database_url="postgresql://<db>").items()
                              if not k.startswith("connection.")},
                          "worker_settings": {k: v for k, v in kafka_connect.worker_properties(
                              bootstrap="<kafka>", plugins=Path("<plugins>"), offsets=Path("<file>")).items()
                              if k not in ("bootstrap.servers", "plugin.path", "offset.storage.file.filename")}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    args = parser.parse_args(argv)
    chosen = PARTS if not args.only else tuple(p.strip() for p in args.only.split(",") if p.strip())
    if set(chosen) - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(set(chosen) - set(PARTS)))}")
    # state_at replays a run a swarmlog process started, pinned to swarmlog's string-hash seed: the same here.
    if "state_at" in chosen and interpreter.current().seed != interpreter.DEFAULT_HASH_SEED:
        interpreter.reexec_with(interpreter.DEFAULT_HASH_SEED, run_id="bench-peers")
    s = common.settings()
    registry = SchemaRegistry.load(s.schema_dirs())
    if "sink" in chosen:  # fetch the jars before any clock runs
        kafka_connect.worker_classpath()
        kafka_connect.plugin_path()
    meta = environment(s)
    meta["peers"] = settings_doc()
    log("peers: " + json.dumps(meta["peers"]))
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        with langgraph_ring.scratch_schema(s.database_url) as conninfo:
            for part in chosen:
                log(f"== {part} ==")
                rows = ring(s, conninfo) if part == "ring" else hop(s, conninfo) if part == "hop" \
                    else state_at(s, registry, conninfo) if part == "state_at" else sink(s, registry)
                results.extend({"benchmark": part, **r} for r in rows)
    finally:
        common.delete_topics(s)
    meta["wall_seconds"] = round(time.monotonic() - started, 1)
    meta["load_average_after"] = common_loadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results-peers.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    table = markdown(results)
    (args.out / "results-peers.md").write_text(render_md(meta, table))
    print(table)
    print(f"\nwrote {args.out / 'results-peers.json'} and {args.out / 'results-peers.md'}")
    return 0


def common_loadavg() -> str:
    from ..run import _loadavg

    return _loadavg()


def render_md(meta: dict[str, Any], table: str) -> str:
    env = ", ".join(f"{k} {meta[k]}" for k in ("python", "confluent_kafka", "librdkafka", "psycopg", "kafka",
                                               "postgres") if meta.get(k))
    peers = meta["peers"]
    lg, kc = peers["langgraph"], peers["kafka_connect"]
    return (
        "# swarmlog beside its peers\n\n"
        f"Run {meta['date']} on {meta['cpus']} CPUs ({meta['machine']}), commit {meta['git_commit']}"
        f"{' (dirty tree)' if meta.get('git_dirty') else ''}, {meta['wall_seconds']:.0f} s wall. "
        f"Load average before {meta['load_average_before']}, after {meta['load_average_after']} "
        "(a shared machine: compare within this run).\n\n"
        f"{env}.\n\n"
        f"**LangGraph** {lg['langgraph']} (langgraph-checkpoint {lg['langgraph-checkpoint']}, "
        f"langgraph-checkpoint-postgres {lg['langgraph-checkpoint-postgres']}, psycopg-pool {lg['psycopg-pool']}); "
        f"ring: {lg['ring']}, {lg['processes']} processes; single chain: {lg['hop']}; durability "
        f"{' and '.join(repr(d) for d in lg['durability'])}.\n\n"
        f"**Kafka Connect** {kc['kafka_connect']} standalone with Debezium's JDBC sink "
        f"{kc['debezium_connector_jdbc']} (PostgreSQL JDBC {kc['postgresql_jdbc']}); connector "
        + ", ".join(f"`{k}={v}`" for k, v in kc["connector_settings"].items() if k not in ("name", "topics"))
        + "; worker " + ", ".join(f"`{k}={v}`" for k, v in kc["worker_settings"].items()) + ".\n\n"
        "Every row: swarmlog (subject) over the peer (baseline) in the same run, medians of interleaved "
        "repetitions; ratio = subject rate ÷ baseline rate (steps/s, hops/s, rows/s). Hop rows: p50/p99 per "
        "hop, the peer's as baseline_p50_ms/baseline_p99_ms. How each is measured: bench/README.md.\n\n"
        f"{table}\n"
    )


if __name__ == "__main__":
    sys.exit(main())
