"""``make bench``: every benchmark beside its baseline; writes bench/results.json and bench/results.md.

Usage::

    PYTHONPATH=platform:connectors .venv/bin/python -m bench.run [--only append,replay,replay_swarm,...] [--out DIR]

Knobs (environment): ``BENCH_REPS`` (repetitions), ``BENCH_QUICK=1`` (a tenth of
the events, fewer repetitions: a smoke run), ``BENCH_BIG=1`` (also the 5M-event
replay memory probe), ``BENCH_*_EVENTS`` (sizes, see bench/README.md),
``BENCH_KEEP_TOPICS=1`` (do not delete the topics afterwards).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from swarmlog.runtime import interpreter
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from . import common
from .replay import start_probe_server

BENCH_DIR = Path(__file__).resolve().parent
BENCHMARKS = ("append", "replay", "replay_swarm", "regress", "cli", "sink", "sink_many", "swarm", "hop", "llm_clients",
              "aio", "frameworks", "snapshots", "timetravel", "restart", "state_at", "simulate", "guard", "route",
              "console")

# (column title, key, format)
COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("benchmark", "name", str),
    ("events", "events", lambda v: f"{v:,}"),
    ("median s", "seconds", lambda v: f"{v:.3f}"),
    ("events/s", "events_per_s", lambda v: f"{v:,.0f}"),
    ("baseline", "baseline", lambda v: v or "—"),
    ("baseline events/s", "baseline_events_per_s", lambda v: "—" if v is None else f"{v:,.0f}"),
    ("ratio", "ratio", lambda v: "—" if v is None else f"{v:.2f}×"),
)
EXTRA_KEYS = ("p50_ms", "p99_ms", "baseline_p50_ms", "baseline_p99_ms", "rss_mb", "baseline_rss_mb",
              "rss_growth_mb", "rss_growth_within_run_mb", "vm_hwm_mb", "processes", "chains_in_flight",
              "log_offsets", "every", "resumed_at", "mean_tail_offsets", "snapshot_records",
              "schedules_per_min", "cpu_s", "baseline_cpu_s", "postgres_cpu_s", "baseline_postgres_cpu_s",
              "kafka_cpu_s", "baseline_kafka_cpu_s", "baseline_seconds",
              "distinct", "failed", "python", "hook_ns_per_call", "unguarded_ns_per_call", "empty_hook_ns_per_call",
              "events_on_ns_per_call",
              "ms_per_query", "baseline_ms_per_query", "first_query_ms",
              "cpu_us_per_step", "baseline_cpu_us_per_step", "cpu_ratio", "us_per_step", "baseline_us_per_step",
              "effect_ms",
              "page_rows", "runs", "events_per_run", "runs_per_min", "baseline_runs_per_min")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=BENCH_DIR, help="where results.json and results.md go")
    args = parser.parse_args(argv)
    chosen = BENCHMARKS if not args.only else tuple(b.strip() for b in args.only.split(",") if b.strip())
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    # The runs the benchmarks replay are started by `swarmlog` processes, which pin the string-hash
    # seed (swarmlog.runtime.interpreter); replaying their handlers here needs the same seed.
    if interpreter.current().seed != interpreter.DEFAULT_HASH_SEED:
        interpreter.reexec_with(interpreter.DEFAULT_HASH_SEED, run_id="bench")
    s = common.settings()
    start_probe_server()  # while this process is small: see bench/replay.py
    registry = SchemaRegistry.load(s.schema_dirs())
    meta = environment(s)
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for name in chosen:
            module = __import__(f"bench.{name}", fromlist=["run"])
            t0 = time.monotonic()
            common.log(f"== {name} ==")
            for r in module.run(s, registry):
                r = {"benchmark": name, **r}
                results.append(r)
            common.log(f"== {name} done in {time.monotonic() - t0:.0f} s ==")
    finally:
        common.delete_topics(s)
    meta["wall_seconds"] = round(time.monotonic() - started, 1)
    meta["load_average_after"] = _loadavg()

    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "results": results}
    (args.out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    table = markdown(results)
    (args.out / "results.md").write_text(render_md(meta, table))
    print(table)
    print(f"\nwrote {args.out / 'results.json'} and {args.out / 'results.md'} ({meta['wall_seconds']:.0f} s)")
    return 0


def markdown(results: list[dict[str, Any]]) -> str:
    header = [c[0] for c in COLUMNS] + ["extra"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in results:
        cells = [fmt(r.get(key)) if key in r else "" for _, key, fmt in COLUMNS]
        extra = ", ".join(f"{k} {r[k]}" for k in EXTRA_KEYS if r.get(k) is not None)
        if r.get("headline"):
            cells[0] = f"**{cells[0]}**"
            cells[-1] = f"**{cells[-1]}**"
        if r.get("target"):
            extra = (extra + "; " if extra else "") + f"target: {r['target']}"
        lines.append("| " + " | ".join(cells + [extra]) + " |")
    return "\n".join(lines)


def render_md(meta: dict[str, Any], table: str) -> str:
    env = ", ".join(f"{k} {meta[k]}" for k in ("python", "confluent_kafka", "librdkafka", "fastavro", "psycopg",
                                               "pydantic", "kafka", "postgres") if meta.get(k))
    return (
        "# swarmlog benchmarks\n\n"
        f"Run {meta['date']} on {meta['cpus']} CPUs ({meta['machine']}), commit {meta['git_commit']}"
        f"{' (dirty tree)' if meta.get('git_dirty') else ''}, {meta['wall_seconds']:.0f} s wall.\n"
        f"Load average before {meta['load_average_before']}, after {meta['load_average_after']} "
        "(the machine is shared: compare ratios within this run, not absolute numbers across runs).\n\n"
        f"{env}.\n\n"
        "Seconds are medians of the repetitions; ratio = events/s ÷ baseline events/s "
        "(latency rows: see p50/p99; swarm rows count steps, and p50/p99 are per hop). "
        "**Bold**: the headline of each benchmark. "
        "How each number is measured: bench/README.md. Raw samples: bench/results.json.\n\n"
        f"{table}\n"
    )


def environment(s: Settings) -> dict[str, Any]:
    import confluent_kafka
    import psycopg

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "machine": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "confluent_kafka": version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "fastavro": version("fastavro"),
        "psycopg": version("psycopg"),
        "pydantic": version("pydantic"),
        "bootstrap_servers": s.bootstrap_servers,
        "quick": common.quick(),
        "big": os.environ.get("BENCH_BIG", "") not in ("", "0"),
        "load_average_before": _loadavg(),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
    }
    try:
        with psycopg.connect(s.database_url, autocommit=True) as conn:
            meta["postgres"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    except psycopg.Error:
        meta["postgres"] = None
    meta["kafka"] = _kafka_version()
    return meta


def _kafka_version() -> str | None:
    try:
        from swarmlog.dev import kafka_tool_argv

        cp = kafka_tool_argv("org.apache.kafka.tools.ProducerPerformance", progress=lambda _m: None)[3]
    except Exception:
        return None
    for jar in cp.split(os.pathsep):
        name = Path(jar).name
        if name.startswith("kafka-clients-") and name.endswith(".jar"):
            return name[len("kafka-clients-"):-len(".jar")]
    return None


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=BENCH_DIR.parent, capture_output=True, text=True, timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


if __name__ == "__main__":
    sys.exit(main())
