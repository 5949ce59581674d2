"""Replay throughput and memory: rebuilding agent state from offset zero.

Subject ``replay.swarmlog``: ``swarmlog.replay()`` over a fresh topic of
``BENCH_REPLAY_EVENTS`` (1M) ``agent.message`` events from ten agents, each with
``to`` set: consume in batches (``read_committed``), hash the stream, decode,
fold into the ``Ledger`` and hash every agent's state.

Baselines, in the same run, on the same topic:

* ``replay.ceiling_consume_decode``: the same consumer configuration
  (``swarmlog.reader.make_consumer``) consuming 5,000-message batches and decoding
  every value with the ``Decoder``; no hashing, no fold. The target is >= 70% of it.
* ``replay.ceiling_consume_only``: the same without decoding: what librdkafka and
  the Python client cost on their own.

Memory: ``replay.peak_rss`` runs one replay in a fresh process (forked from a
small fork server, see ``start_probe_server``) and reports its peak RSS
(``getrusage(RUSAGE_SELF).ru_maxrss``; ``vm_hwm_mb`` is /proc's VmHWM, a
cross-check), beside the ceiling's in another fresh process. With ``BENCH_BIG=1``
the topic is then grown to ``BENCH_REPLAY_BIG_EVENTS`` (5M) and replayed again in a
fresh process:
``rss_growth_mb`` is the peak RSS at 5M minus the peak RSS at 1M, and
``rss_growth_within_run_mb`` the growth inside the 5M replay after its first 1M
events (from ``rss_timeline_mb``, the RSS sampled every 5% of the log): memory kept
per event shows in both, a one-off plateau (allocator arenas, prefetch) only in the
first.

Run a probe by hand: ``python -m bench.replay --rss TOPIC --mode replay|ceiling --events N``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.forkserver
import os
import resource
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from swarmlog.kafka.config import consumer as make_consumer
from swarmlog.log.base import BATCH
from swarmlog.replaying import replay
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, fresh_topic, interleave, log, make_stream, populate, reps, row


def swarmlog_replay(s: Settings, registry: SchemaRegistry, topic: str, n: int,
                    progress: Callable[[int, int], None] | None = None) -> float:
    t0 = perf_counter()
    result = replay(settings=s, topic=topic, registry=registry, progress=progress)
    seconds = perf_counter() - t0
    if result.events != n or result.undecodable:
        raise RuntimeError(f"replay saw {result.events} events ({len(result.undecodable)} undecodable), expected {n}")
    return seconds


def ceiling(s: Settings, registry: SchemaRegistry, topic: str, n: int, *, decode: bool = True) -> float:
    """Seconds to consume (and decode) n messages in batches with replay's consumer configuration."""
    t0 = perf_counter()
    consumer = make_consumer(s)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        dec = Decoder(registry).decode
        seen = 0
        consume = consumer.consume
        while seen < n:
            for m in consume(BATCH, 1.0):
                if m.error() is not None:
                    continue
                if decode:
                    dec(m.value(), m.offset())
                seen += 1
    finally:
        consumer.close()
    return perf_counter() - t0


# RSS probes are forked from a small server process. A child started with
# fork/exec from *this* process would inherit this process's peak RSS (Linux keeps
# ru_maxrss across execve, and a fork copies the resident pages first), and this
# process is large by the time the probes run: every consumer it ran left its
# buffers in the allocator. The fork server is started early (``start_probe_server``)
# while this process is still small, so a probe's ru_maxrss is its own replay's.
_MP = multiprocessing.get_context("forkserver")


def start_probe_server() -> None:
    """Start the process RSS probes are forked from; call it before anything large is allocated."""
    _MP.set_forkserver_preload(["bench.replay"])
    multiprocessing.forkserver.ensure_running()


def rss_probe(s: Settings, topic: str, mode: str, n: int) -> dict[str, Any]:
    """Run one replay (or the ceiling) in a fresh process; its peak RSS and seconds."""
    start_probe_server()
    parent, child = _MP.Pipe(duplex=False)
    proc = _MP.Process(target=_probe_child, args=(child, s, topic, mode, n), name=f"rss-probe-{mode}")
    proc.start()
    child.close()
    try:
        result = parent.recv()
    except EOFError:
        result = {"error": "the probe died without a result"}
    proc.join()
    if "error" in result or proc.exitcode != 0:
        raise RuntimeError(f"RSS probe ({mode}, {n} events) failed (exit {proc.exitcode}): {result.get('error')}")
    return result  # type: ignore[no-any-return]


def _probe_child(conn: Any, s: Settings, topic: str, mode: str, n: int) -> None:
    try:
        conn.send(probe(s, topic, mode, n))
    except BaseException as exc:
        conn.send({"error": repr(exc)})
        raise


def probe(s: Settings, topic: str, mode: str, n: int) -> dict[str, Any]:
    registry = SchemaRegistry.load(s.schema_dirs())
    rss_before = _maxrss_mb()
    timeline: list[tuple[int, float]] = []  # (events replayed, current RSS) every 5% of the log
    step = max(1, n // 20)
    next_mark = [step]

    def sample(done: int, _total: int) -> None:
        if done >= next_mark[0]:
            timeline.append((done, _current_rss_mb()))
            next_mark[0] += step

    if mode == "replay":
        seconds = swarmlog_replay(s, registry, topic, n, progress=sample)
    else:
        seconds = ceiling(s, registry, topic, n)
    return {"mode": mode, "events": n, "seconds": seconds, "rss_mb": _maxrss_mb(), "rss_before_mb": rss_before,
            "vm_hwm_mb": _vm_hwm_mb(), "rss_timeline_mb": timeline}


def _current_rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _maxrss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def _vm_hwm_mb() -> float | None:
    """The same peak from /proc (this address space only): a cross-check of ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    start_probe_server()
    n = env_int("BENCH_REPLAY_EVENTS", 1_000_000)
    stream = make_stream(registry)
    topic = fresh_topic(s, "replay")
    log(f"replay: appending {n:,} events to {topic}")
    fill_s = populate(s, registry, stream, topic, n)
    log(f"replay: appended in {fill_s:.1f} s ({n / fill_s:,.0f} ev/s)")

    sub = Run("replay.swarmlog", n)
    ceil = Run("replay.ceiling_consume_decode", n)
    bare = Run("replay.ceiling_consume_only", n)

    def step(run_: Run, fn: Any) -> Any:
        def go(r: int) -> None:
            run_.add(fn())
            log(f"{run_.name} rep {r}: {n / run_.samples[-1]:,.0f} ev/s")
        return go

    interleave(reps(5),
               step(sub, lambda: swarmlog_replay(s, registry, topic, n)),
               step(ceil, lambda: ceiling(s, registry, topic, n)),
               step(bare, lambda: ceiling(s, registry, topic, n, decode=False)))

    rows = [
        row(sub, ceil, target=">= 100000 ev/s and ratio >= 0.70", headline=True),
        row(sub, bare),
        row(ceil, bare),
    ]

    # Memory: each probe is a fresh process, so ru_maxrss is that replay's own peak.
    rss_sub = Run("replay.peak_rss", n)
    rss_ceil = Run("replay.ceiling_peak_rss", n)
    timelines = {}
    for mode, run_ in (("replay", rss_sub), ("ceiling", rss_ceil)):
        res = rss_probe(s, topic, mode, n)
        run_.add(res["seconds"], rss_mb=res["rss_mb"], rss_before_mb=res["rss_before_mb"],
                 vm_hwm_mb=res["vm_hwm_mb"])
        timelines[mode] = res["rss_timeline_mb"]
        log(f"{run_.name} at {n:,}: {res['rss_mb']} MB")
    rows.append(row(rss_sub, rss_ceil, rss_timeline_mb=timelines["replay"]))

    if os.environ.get("BENCH_BIG", "") not in ("", "0"):
        big = env_int("BENCH_REPLAY_BIG_EVENTS", 5_000_000)
        log(f"replay: growing {topic} to {big:,} events (BENCH_BIG=1)")
        grow_s = populate(s, registry, stream, topic, big - n, start=n)
        log(f"replay: appended {big - n:,} more in {grow_s:.1f} s")
        rss_big = Run("replay.peak_rss_big", big)
        res = rss_probe(s, topic, "replay", big)
        rss_big.add(res["seconds"], rss_mb=res["rss_mb"], rss_before_mb=res["rss_before_mb"],
                    vm_hwm_mb=res["vm_hwm_mb"])
        log(f"replay.peak_rss at {big:,}: {res['rss_mb']} MB")
        growth = res["rss_mb"] - rss_sub.medians()["rss_mb"]
        # The same growth inside the one 5M replay: RSS once the first n events are folded
        # versus the most it reaches afterwards. Growth per event shows here; a one-off
        # plateau (allocator, prefetch) does not.
        timeline = res["rss_timeline_mb"]
        at_n = next((rss for done, rss in timeline if done >= n), None)
        after = [rss for done, rss in timeline if done > n]
        within = round(max(after) - at_n, 1) if at_n is not None and after else None
        rows.append(row(rss_big, rss_sub, rss_growth_mb=round(growth, 1), rss_growth_within_run_mb=within,
                        rss_timeline_mb=timeline, target="rss_growth_mb < 50"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rss", metavar="TOPIC", required=True, help="replay TOPIC and print peak RSS as JSON")
    parser.add_argument("--mode", choices=["replay", "ceiling"], default="replay")
    parser.add_argument("--events", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(probe(Settings.from_env(), args.rss, args.mode, args.events)))
