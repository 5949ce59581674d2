"""One chain, one hop at a time: the latency of a step on the critical path, and where it goes.

The shape of ``bench/swarm.py`` with one chain in flight: five agents ``s0..s4`` in a ring
pass a single chain on for ``BENCH_HOP_HOPS`` hops, so every hop waits for the one before
it. Every agent is its own process and every hop is one exactly-once step (outputs and
consumer position in one Kafka transaction). A hop's latency is its output's LogAppendTime
minus its input's, read from the log after the run; the p50/p99 of the hops are the
numbers (the rate, 1,000 / mean hop ms, is only what the harness needs for its rows).

Rows: ``hop.swarmlog`` (five ``swarmlog run --agent`` processes), ``hop.raw_txn_relay``
(the ring's raw transactional relay with its poll loop and settings), and
``hop.raw_txn_relay_tuned`` (the same relay with the poll loop and settings the breakdown
below arrived at), beside ``hop.kafka_floor``: the same relay without transactions
(idempotent ``acks=all`` produce -> fetch, at-least-once), what Kafka alone costs a hop.

``python -m bench.hop --breakdown`` runs the raw relay with per-batch wall-clock stamps
(``bench.swarm.relay(trace=...)``) under a series of settings, one change at a time, and
prints where a hop's time goes: consume returned -> output appended at the broker (the
step: Python, AddPartitionsToTxn, the produce request) -> acknowledged -> offsets sent
(AddOffsetsToTxn + TxnOffsetCommit) -> committed (EndTxn) -> the next agent's consume
returns with it (markers, the last stable offset, the fetch, the poll loop).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import common
from .common import Run, env_int, log, reps, row
from .swarm import AGENTS, RelayConfig, Shape, raw_relay, swarmlog_swarm

HOPS = env_int("BENCH_HOP_HOPS", 400)
CHAIN = Shape(chains=1, hops=HOPS)

RING_RELAY = RelayConfig()
"""The ring's baseline relay as bench/swarm.py runs it: ``consume(500, 0.1)``, linger.ms=1."""
TUNED_RELAY = RelayConfig(producer={"linger.ms": 0}, consumer={"fetch.wait.max.ms": 5}, poll="drain",
                          commit_idle=False)
"""What the breakdown arrived at: take the first message as soon as it is there, drain the
rest of the backlog without waiting, commit only batches that produced, send at once,
and fetch again soon after a fetch that the last stable offset held back."""
FLOOR_RELAY = RelayConfig(producer={"linger.ms": 0}, poll="drain", transactional=False)

# (label, what changed, config): one change at a time, from the ring's relay to the tuned one.
STEPS: tuple[tuple[str, str, RelayConfig], ...] = (
    ("ring relay", "consume(500, 0.1), linger.ms=1, fetch.wait.max.ms=500 (librdkafka's default), "
     "a transaction per consumed batch", RING_RELAY),
    ("+ drain", "poll(0.1) for the first message, then consume(499, 0) for the backlog", RelayConfig(poll="drain")),
    ("+ commit only what produced", "no offsets-only transaction for a batch with nothing for this agent",
     RelayConfig(poll="drain", commit_idle=False)),
    ("+ linger.ms=0", "", RelayConfig(producer={"linger.ms": 0}, poll="drain", commit_idle=False)),
    ("+ fetch.wait.max.ms=5", "", TUNED_RELAY),
    ("kafka floor", "no transactions: idempotent acks=all produce -> fetch, drain, linger.ms=0", FLOOR_RELAY),
)


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    extra = {"agents": len(AGENTS), "chains_in_flight": 1, "hops": HOPS, "processes": len(AGENTS)}
    sub = Run("hop.swarmlog", HOPS, extra=dict(extra))
    raw = Run("hop.raw_txn_relay", HOPS, extra=dict(extra))
    tuned = Run("hop.raw_txn_relay_tuned", HOPS, extra={**extra, "relay": json.loads(TUNED_RELAY.to_json())})
    floor = Run("hop.kafka_floor", HOPS, extra={**extra, "relay": json.loads(FLOOR_RELAY.to_json())})
    runs = ((sub, lambda: swarmlog_swarm(s, processes=True, shape=CHAIN)),
            (raw, lambda: raw_relay(s, shape=CHAIN, config=RING_RELAY)),
            (tuned, lambda: raw_relay(s, shape=CHAIN, config=TUNED_RELAY)),
            (floor, lambda: raw_relay(s, shape=CHAIN, config=FLOOR_RELAY)))
    for r in range(reps(3)):
        for run_, fn in runs:
            seconds, n, stats = fn()
            run_.events = n
            run_.add(seconds, **stats)
            log(f"{run_.name} rep {r}: hop p50 {stats['p50_ms']:.1f} ms, p99 {stats['p99_ms']:.1f} ms")
    return [
        row(sub, floor, target="p50 <= 10 ms, p99 <= 30 ms, within 3x of Kafka alone", unit="hops", headline=True),
        row(sub, raw, unit="hops"),
        row(tuned, floor, unit="hops"),
        row(raw, floor, unit="hops"),
    ]


# --- the breakdown ----------------------------------------------------------------------------


def breakdown(trace_dir: Path) -> dict[str, float]:
    """Median ms of each part of a hop, from the relays' traces and the log (see the module doc)."""
    collected = json.loads((trace_dir / "log.json").read_text())
    out_of: dict[int, int] = {cause: ts for _, (ts, _, cause) in collected}  # input offset -> output append ms
    batches: list[tuple[str, list[Any]]] = []
    for a in AGENTS:
        for line in (trace_dir / f"{a}.jsonl").read_text().splitlines():
            batches.append((a, json.loads(line)))
    got: dict[int, float] = {}  # offset -> when the consume that returned it returned
    for _, (t_recv, *_rest, inputs) in batches:
        for off in inputs:
            got[off] = t_recv
    by_input = {off: b for _, b in batches for off in b[-1]}
    parts: dict[str, list[float]] = {k: [] for k in ("step", "acked", "offsets", "commit", "deliver", "hop")}
    for off, (_ts, _cts, cause) in collected[1:]:
        b = by_input.get(cause)
        if b is None or off not in got:
            continue
        t_recv, t_prod, t_acked, t_offs, t_commit, _inputs = b
        appended = out_of[cause] / 1000
        parts["step"].append(max(0.0, appended - t_recv))
        parts["acked"].append(t_acked - max(t_recv, appended) if t_acked > t_prod else 0.0)
        parts["offsets"].append(t_offs - t_acked if t_acked > t_prod else t_offs - t_prod)
        parts["commit"].append(t_commit - t_offs)
        parts["deliver"].append(got[off] - t_commit)
        parts["hop"].append(got[off] - t_recv)
    return {k: round(1000 * statistics.median(v), 2) for k, v in parts.items() if v}


def run_breakdown(s: Settings, reps_: int) -> list[dict[str, Any]]:
    rows = []
    for label, change, config in STEPS:
        for flush_first in (False, True):
            cfg = RelayConfig(**{**json.loads(config.to_json()), "flush_first": flush_first}) \
                if config.transactional else config
            if flush_first and not config.transactional:
                continue
            p50s, p99s, parts = [], [], []
            for _ in range(reps_):
                with tempfile.TemporaryDirectory(prefix="bench-hop-") as d:
                    _, _, stats = raw_relay(s, shape=CHAIN, config=cfg, trace_dir=Path(d))
                    p50s.append(stats["p50_ms"])
                    p99s.append(stats["p99_ms"])
                    parts.append(breakdown(Path(d)))
            merged = {k: round(statistics.median(p[k] for p in parts), 2) for k in parts[0]}
            r = {"label": label + (" (flush first)" if flush_first else ""), "change": change,
                 "p50_ms": statistics.median(p50s), "p99_ms": statistics.median(p99s),
                 "p50_samples": p50s, "p99_samples": p99s, **merged}
            log(json.dumps(r))
            rows.append(r)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--breakdown", action="store_true", help="time the parts of a hop of the raw relay")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the breakdown rows as JSON here")
    args = parser.parse_args()
    s = common.settings()
    try:
        if args.breakdown:
            rows = run_breakdown(s, args.reps)
            if args.out:
                args.out.write_text(json.dumps(rows, indent=2) + "\n")
            keys = ("step", "acked", "offsets", "commit", "deliver", "hop")
            print("| relay | p50 ms | p99 ms | " + " | ".join(keys) + " |")
            print("|---|---|---|" + "---|" * len(keys))
            for r in rows:
                print(f"| {r['label']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                      + " | ".join(f"{r.get(k, float('nan')):.1f}" for k in keys) + " |")
        else:
            for r in run(s, SchemaRegistry.load(s.schema_dirs())):
                print(json.dumps(r))
    finally:
        common.delete_topics(s)


if __name__ == "__main__":
    main()
