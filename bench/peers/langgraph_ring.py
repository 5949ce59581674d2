"""LangGraph with its Postgres checkpointer on the shapes of bench/swarm.py and bench/hop.py.

The ring as a LangGraph graph: nodes ``s0..s4``; a chain is one thread (``thread_id``) whose
state is ``{"chain", "ttl"}``. ``start`` (``s0``'s start step) sends chain ``c`` to
``s{1 + c % 4}`` with ``ttl = hops``; every node is one hop: it passes the chain on to the
next node with ``ttl - 1`` until ``ttl`` is 0. Each node run is one LangGraph super-step,
and the checkpointer writes a checkpoint after each one: with ``durability="sync"`` the
next step waits for that write (the step is durable before the chain moves on, as a
swarmlog step is committed before its output is visible); with ``"async"`` the write
overlaps the next step (a crash can lose the last step).

Ring throughput (``1,000`` chains in flight, ``40`` hops): the chains are split over
``BENCH_PEERS_LANGGRAPH_PROCESSES`` processes (5, as swarmlog runs five agent processes),
each running its chains concurrently with ``ainvoke`` on an ``AsyncPostgresSaver`` over a
connection pool. Every node stamps ``time.time()``; steps/s is measured as for the swarm:
the hops after the chains' first burst over the span from that burst to the last hop.

Single chain (``hop``): one chain, one hop at a time, in one process with the synchronous
``PostgresSaver`` (``graph.invoke``); a hop's latency is the time from one node's start to
the next one's (``perf_counter``).

The checkpointer's tables go into a schema of their own (``bench_langgraph_<id>``), dropped
afterwards. Run one worker alone: ``python -m bench.peers.langgraph_ring --worker ...``
(what the ring starts; it prints ``ready``, waits for a line on stdin, runs, prints JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

import psycopg

from ..common import percentile

AGENTS = tuple(f"s{i}" for i in range(5))
REPO = Path(__file__).resolve().parents[2]
POOL_SIZE = 8
"""Connections per worker process (5 processes: 40 of the server's 100)."""


class ChainState(TypedDict):
    chain: int
    ttl: int


def build_graph(stamp: Callable[[int], None], hops: int) -> Any:
    """The ring as a StateGraph; ``stamp(chain)`` is called at the start of every node."""
    from langgraph.graph import END, START, StateGraph

    def start(state: ChainState) -> dict[str, Any]:
        stamp(state["chain"])
        return {"ttl": hops}

    def hop(state: ChainState) -> dict[str, Any]:
        stamp(state["chain"])
        return {"ttl": state["ttl"] - 1}

    g = StateGraph(ChainState)
    g.add_node("start", start)
    for a in AGENTS:
        g.add_node(a, hop)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", lambda st: AGENTS[1 + st["chain"] % 4], list(AGENTS[1:]))
    for i, a in enumerate(AGENTS):
        nxt = AGENTS[(i + 1) % len(AGENTS)]
        # A node whose input had ttl 0 makes no output: the chain ends there (ttl goes to -1).
        g.add_conditional_edges(a, lambda st, nxt=nxt: END if st["ttl"] < 0 else nxt, [nxt, END])
    return g


def versions() -> dict[str, str]:
    from importlib import metadata

    return {d: metadata.version(d) for d in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres",
                                             "psycopg", "psycopg-pool")}


@contextmanager
def scratch_schema(database_url: str):
    """A schema for the checkpointer's tables, dropped afterwards; yields a conninfo that uses it."""
    schema = f"bench_langgraph_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    conninfo = psycopg.conninfo.make_conninfo(database_url, options=f"-c search_path={schema}")
    try:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(conninfo) as saver:
            saver.setup()
        yield conninfo
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


# --- one chain, one hop at a time -------------------------------------------------------------


def hop_latency(conninfo: str, *, hops: int, durability: str) -> tuple[float, int, dict[str, float]]:
    """(seconds, hops, {p50_ms, p99_ms}) of one chain through the synchronous PostgresSaver."""
    from langgraph.checkpoint.postgres import PostgresSaver

    stamps: list[float] = []
    graph_builder = build_graph(lambda _c: stamps.append(time.perf_counter()), hops)
    with PostgresSaver.from_conn_string(conninfo) as saver:
        graph = graph_builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"hop-{uuid.uuid4().hex}"}, "recursion_limit": hops + 10}
        graph.invoke({"chain": 0, "ttl": 0}, config, durability=durability)
    # stamps: start, then hops + 1 hop nodes; a hop = one node start to the next.
    gaps = sorted(1000 * (b - a) for a, b in itertools.pairwise(stamps[1:]))
    seconds = stamps[-1] - stamps[1]
    return seconds, len(gaps), {"p50_ms": percentile(gaps, 50), "p99_ms": percentile(gaps, 99)}


# --- time travel: get_state at past checkpoints ----------------------------------------------


class RallyState(TypedDict):
    hits: int
    last: list[str]


def get_state_latency(conninfo: str, *, steps: int, queries: int, seed: int = 31) -> tuple[list[float], int]:
    """(seconds of each ``get_state`` at a random past checkpoint, checkpoints in the thread).

    One thread whose graph is bench/state_at.py's rally as LangGraph holds it: two nodes taking
    turns, each step counting the ball and keeping the last five it saw, ``steps`` super-steps, a
    checkpoint after each (the synchronous ``PostgresSaver``, ``durability="sync"``). Then
    ``graph.get_state`` of that thread at ``queries`` checkpoints drawn at random from its history
    (``get_state_history``): the state as of that checkpoint, read from Postgres."""
    import random

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    def hit(state: RallyState) -> dict[str, Any]:
        return {"hits": state["hits"] + 1, "last": [*state["last"][-4:], str(state["hits"] % 100)]}

    g = StateGraph(RallyState)
    g.add_node("a", hit)
    g.add_node("b", hit)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda st: END if st["hits"] >= steps else "b", ["b", END])
    g.add_conditional_edges("b", lambda st: END if st["hits"] >= steps else "a", ["a", END])
    with PostgresSaver.from_conn_string(conninfo) as saver:
        graph = g.compile(checkpointer=saver)
        thread = {"configurable": {"thread_id": f"state-at-{uuid.uuid4().hex}"}, "recursion_limit": steps + 10}
        graph.invoke({"hits": 0, "last": []}, thread, durability="sync")
        ids = [snap.config["configurable"]["checkpoint_id"] for snap in graph.get_state_history(thread)]
        chosen = random.Random(seed).choices(ids, k=queries)
        tid = thread["configurable"]["thread_id"]
        times: list[float] = []
        for cid in chosen:
            t = time.perf_counter()
            snap = graph.get_state({"configurable": {"thread_id": tid, "checkpoint_id": cid}})
            times.append(time.perf_counter() - t)
            if snap.config["configurable"]["checkpoint_id"] != cid:
                raise RuntimeError(f"LangGraph's get_state answered checkpoint {snap.config} for {cid}")
    return times, len(ids)


# --- the ring: many chains in flight ----------------------------------------------------------


async def _run_chains(conninfo: str, chains: range, hops: int, durability: str, ready: Callable[[], None],
                      ) -> dict[int, list[float]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    stamps: dict[int, list[float]] = {c: [] for c in chains}
    graph_builder = build_graph(lambda c: stamps[c].append(time.time()), hops)
    async with AsyncConnectionPool(conninfo, min_size=POOL_SIZE, max_size=POOL_SIZE, open=False,
                                   kwargs={"autocommit": True, "prepare_threshold": 0,
                                           "row_factory": dict_row}) as pool:
        await pool.wait()
        graph = graph_builder.compile(checkpointer=AsyncPostgresSaver(pool))
        ready()
        run_id = uuid.uuid4().hex[:8]
        await asyncio.gather(*(
            graph.ainvoke({"chain": c, "ttl": 0},
                          {"configurable": {"thread_id": f"ring-{run_id}-{c}"}, "recursion_limit": hops + 10},
                          durability=durability)
            for c in chains))
    return stamps


def worker(conninfo: str, first: int, last: int, hops: int, durability: str) -> None:
    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()  # the go signal: every worker starts at once

    stamps = asyncio.run(_run_chains(conninfo, range(first, last), hops, durability, ready))
    print(json.dumps({str(c): v for c, v in stamps.items()}), flush=True)


def ring(conninfo: str, *, chains: int, hops: int, durability: str, processes: int,
         ) -> tuple[float, int, dict[str, float]]:
    """(seconds, steps, {p50_ms, p99_ms}) of the ring, measured as bench/swarm.py measures swarmlog's."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    bounds = [round(i * chains / processes) for i in range(processes + 1)]
    procs = [subprocess.Popen([sys.executable, "-m", "bench.peers.langgraph_ring", "--worker", "--conninfo", conninfo,
                               "--first", str(a), "--last", str(b), "--hops", str(hops), "--durability", durability],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for a, b in itertools.pairwise(bounds)]
    try:
        for p in procs:
            line = p.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "ready":
                raise RuntimeError(f"a LangGraph worker did not start (rc {p.poll()}): {line!r}")
        for p in procs:
            p.stdin.write("go\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
        stamps: dict[int, list[float]] = {}
        for p in procs:
            out, _ = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise RuntimeError(f"a LangGraph worker failed (rc {p.returncode})")
            stamps.update({int(c): v for c, v in json.loads(out.strip().splitlines()[-1]).items()})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if len(stamps) != chains or any(len(v) != hops + 2 for v in stamps.values()):
        raise RuntimeError(f"LangGraph ran {len(stamps)} chains (expected {chains}) or some did not make {hops} hops")
    # As for swarmlog: the first burst is each chain's first hop (the start's output arriving);
    # steps are the hops after it, over the span from the end of that burst to the last hop.
    t0 = max(v[1] for v in stamps.values())
    t1 = max(v[-1] for v in stamps.values())
    rest = [t for v in stamps.values() for t in v[2:]]
    gaps = sorted(1000 * (b - a) for v in stamps.values() for a, b in itertools.pairwise(v[1:]))
    return max(0.001, t1 - t0), len(rest), {"p50_ms": percentile(gaps, 50), "p99_ms": percentile(gaps, 99)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--conninfo", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--last", type=int, required=True)
    parser.add_argument("--hops", type=int, required=True)
    parser.add_argument("--durability", choices=("sync", "async", "exit"), required=True)
    args = parser.parse_args()
    worker(args.conninfo, args.first, args.last, args.hops, args.durability)
