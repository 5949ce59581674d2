"""Append throughput: swarmlog's producer path beside raw Kafka and the seed design's Postgres table.

Subject ``append.swarmlog``: ``EventLog.produce`` x N then ``flush`` (validate with
pydantic, encode with fastavro, headers, idempotent ``acks=all`` producer; every
event acknowledged and its offset returned), one process, ~200-byte
``agent.message`` values.

Baselines, measured in the same run:

* ``append.raw_confluent_kafka``: confluent-kafka producing the *same pre-encoded*
  values, keys and headers with swarmlog's producer configuration (idempotent,
  ``acks=all``, same linger/batch/compression), without a per-message delivery
  callback. The ceiling of the Python client: what validation, encoding and offset
  bookkeeping cost is the gap to it.
* ``append.kafka_producer_perf``: Kafka's own Java ``ProducerPerformance``
  (``--record-size 200 --throughput -1 --producer-props acks=all``, Java defaults
  otherwise), and ``append.kafka_producer_perf_tuned``, the same with swarmlog's
  batching and compression: the broker's ceiling on this machine.
* ``append.seed_postgres``: the seed document's design, one autocommitted
  ``INSERT ... nextval('event_seq') RETURNING seq`` per event into ``seed_events``.
  The headline ratio is swarmlog over this.
* ``append.seed_postgres_async_commit``: the same with ``synchronous_commit=off``,
  to show how much of the seed design's cost is the per-event WAL flush (Kafka on a
  single node does not fsync per message either).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from time import perf_counter
from typing import Any

import psycopg
from confluent_kafka import Producer, TopicPartition
from psycopg.types.json import Jsonb

from swarmlog.dev import kafka_tool_argv
from swarmlog.kafka.config import PRODUCER_REQUIRED, PRODUCER_TUNING
from swarmlog.log.append import EventLog
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import (
    EVENT_TYPE,
    RUN_ID,
    VALUE_SIZE,
    Run,
    Stream,
    encode_stream,
    env_int,
    fresh_topic,
    interleave,
    log,
    make_stream,
    reps,
    row,
)

SEED_DDL = """
CREATE TABLE seed_events (
    id         BIGSERIAL PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload    JSONB NOT NULL,
    seq        BIGINT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE SEQUENCE event_seq;
"""
SEED_INSERT = ("INSERT INTO seed_events (agent_id, event_type, payload, seq) "
               "VALUES (%s, %s, %s, nextval('event_seq')) RETURNING seq")

# swarmlog's producer tuning (swarmlog.log.PRODUCER_TUNING) in the Java client's terms.
PERF_TUNED = ("linger.ms=5", "batch.size=1000000", "compression.type=lz4", "enable.idempotence=true")

# ProducerPerformance's final line, e.g. "1000000 records sent, 312012.5 records/sec (59.51 MB/sec),
# 95.31 ms avg latency, 301.00 ms max latency, 91 ms 50th, 160 ms 95th, 190 ms 99th, 290 ms 99.9th."
_PERF_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


def swarmlog_append(s: Settings, registry: SchemaRegistry, stream: Stream, n: int) -> float:
    """Seconds for ``EventLog.produce`` x n + ``flush`` on a fresh topic (all acknowledged)."""
    topic = fresh_topic(s, "append")
    with EventLog(settings=s, registry=registry, topic=topic, run_id=RUN_ID) as el:
        produce = el.produce
        event = stream.event
        el.append(EVENT_TYPE, stream.payloads[0], agent="warmup", to="warmup")  # connect, encoder built
        t0 = perf_counter()
        for i in range(n):
            payload, agent, to = event(i)
            produce(EVENT_TYPE, payload, agent=agent, to=to)
        offsets = el.flush()
        seconds = perf_counter() - t0
    if len(offsets) != n:
        raise RuntimeError(f"swarmlog append: {len(offsets)} offsets for {n} events")
    return seconds


def raw_append(s: Settings, encoded: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]) -> float:
    """Seconds for confluent-kafka to produce the pre-encoded events, same config, all acknowledged."""
    topic = fresh_topic(s, "append-raw")
    p = Producer(s.kafka_config(dict(PRODUCER_REQUIRED), tuning=PRODUCER_TUNING))
    produce, poll = p.produce, p.poll
    p.produce(topic, b"warmup", partition=0)
    p.flush(30)
    t0 = perf_counter()
    pending = 0
    for value, key, headers in encoded:
        while True:
            try:
                produce(topic, value, key, partition=0, headers=headers)
                break
            except BufferError:
                poll(0.05)
        pending += 1
        if pending >= 1000:
            pending = 0
            poll(0)
    remaining = p.flush(60)
    seconds = perf_counter() - t0
    high = _high_watermark(s, topic)
    if remaining or high != len(encoded) + 1:
        raise RuntimeError(f"raw append: {remaining} unacknowledged, log end {high} for {len(encoded) + 1} events")
    return seconds


def producer_perf(s: Settings, n: int, *props: str) -> dict[str, float]:
    """Kafka's ProducerPerformance: its own rate and latency percentiles (``props``: extra producer props)."""
    topic = fresh_topic(s, "append-perf")
    argv = kafka_tool_argv(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(n), "--record-size", str(VALUE_SIZE), "--throughput", "-1",
        "--producer-props", "acks=all", f"bootstrap.servers={s.bootstrap_servers}", *props,
        progress=log,
    )
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    matches = list(_PERF_SUMMARY.finditer(out.stdout))
    if out.returncode != 0 or not matches:
        raise RuntimeError(f"ProducerPerformance failed (exit {out.returncode}):\n{out.stdout[-2000:]}\n"
                           f"{out.stderr[-2000:]}")
    m = matches[-1]
    return {"records": int(m["records"]), "rate": float(m["rate"]), "avg_ms": float(m["avg"]),
            "p50_ms": float(m["p50"]), "p99_ms": float(m["p99"])}


def seed_postgres(s: Settings, stream: Stream, n: int, *, synchronous_commit: bool = True) -> float:
    """Seconds for the seed design: n autocommitted INSERT ... RETURNING seq, one per event."""
    schema = f"bench_seed_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # isolates the table and its sequence
        try:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute(SEED_DDL)
            if not synchronous_commit:
                conn.execute("SET synchronous_commit TO off")
            cur = conn.cursor()
            execute, fetchone = cur.execute, cur.fetchone
            event = stream.event
            t0 = perf_counter()
            for i in range(n):
                payload, agent, to = event(i)
                execute(SEED_INSERT, (agent, EVENT_TYPE, Jsonb({**payload, "to": to})))
                fetchone()
            seconds = perf_counter() - t0
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return seconds


def postgres_durability(s: Settings) -> dict[str, str]:
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        return {k: str(conn.execute(f"SHOW {k}").fetchone()[0])  # type: ignore[index]
                for k in ("fsync", "synchronous_commit", "wal_sync_method", "server_version")}


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    n = env_int("BENCH_APPEND_EVENTS", 200_000)
    n_seed = env_int("BENCH_SEED_EVENTS", 20_000)
    n_perf = env_int("BENCH_PERF_EVENTS", 1_000_000)
    stream = make_stream(registry)
    encoded = encode_stream(registry, stream, n)
    value_bytes = sum(len(v) for v, _, _ in encoded) / n

    sub = Run("append.swarmlog", n, extra={"value_bytes": round(value_bytes, 1)})
    raw = Run("append.raw_confluent_kafka", n, extra={"value_bytes": round(value_bytes, 1)})
    perf = Run("append.kafka_producer_perf", n_perf, extra={"value_bytes": VALUE_SIZE})
    perf_tuned = Run("append.kafka_producer_perf_tuned", n_perf,
                     extra={"value_bytes": VALUE_SIZE, "producer_props": " ".join(PERF_TUNED)})
    seed = Run("append.seed_postgres", n_seed, extra=postgres_durability(s))
    seed_async = Run("append.seed_postgres_async_commit", n_seed, extra={"synchronous_commit": "off"})

    def step_sub(r: int) -> None:
        sub.add(swarmlog_append(s, registry, stream, n))
        log(f"append.swarmlog rep {r}: {n / sub.samples[-1]:,.0f} ev/s")

    def step_raw(r: int) -> None:
        raw.add(raw_append(s, encoded))
        log(f"append.raw rep {r}: {n / raw.samples[-1]:,.0f} ev/s")

    def step_perf(r: int) -> None:
        res = producer_perf(s, n_perf)
        perf.add(res["records"] / res["rate"], p50_ms=res["p50_ms"], p99_ms=res["p99_ms"], avg_ms=res["avg_ms"])
        log(f"append.kafka_producer_perf rep {r}: {res['rate']:,.0f} ev/s")
        res = producer_perf(s, n_perf, *PERF_TUNED)
        perf_tuned.add(res["records"] / res["rate"], p50_ms=res["p50_ms"], p99_ms=res["p99_ms"],
                       avg_ms=res["avg_ms"])
        log(f"append.kafka_producer_perf_tuned rep {r}: {res['rate']:,.0f} ev/s")

    def step_seed(r: int) -> None:
        seed.add(seed_postgres(s, stream, n_seed))
        seed_async.add(seed_postgres(s, stream, n_seed, synchronous_commit=False))
        log(f"append.seed rep {r}: {n_seed / seed.samples[-1]:,.0f} ev/s "
            f"(async commit {n_seed / seed_async.samples[-1]:,.0f} ev/s)")

    slow_reps = reps(3)

    def step_slow(r: int) -> None:
        if r < slow_reps:
            step_seed(r)
            step_perf(r)

    interleave(reps(5), step_sub, step_raw, step_slow)

    target = "ratio >= 15 and >= 100000 ev/s"
    return [
        row(sub, seed, target=target, headline=True),
        row(sub, seed_async),
        row(sub, raw),
        row(sub, perf),
        row(sub, perf_tuned),
        row(raw, perf_tuned),
        row(seed),
        row(seed_async),
        row(perf),
        row(perf_tuned),
    ]


def _high_watermark(s: Settings, topic: str) -> int:
    from swarmlog.kafka.config import consumer as make_consumer

    c = make_consumer(s)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1]
    finally:
        c.close()
