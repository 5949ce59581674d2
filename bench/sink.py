"""Mirroring into Postgres: the sink's throughput, and the latency from append to queryable.

Throughput. Subject ``sink.swarmlog``: ``PostgresSink(...).run(until_end=True)`` on a
fresh topic of ``BENCH_SINK_EVENTS`` (200k) events: consume and decode batches of
5,000 into binary COPY streams while, on a second thread, Postgres takes the previous
transaction (lock the position row, COPY, advance the position, COMMIT; batches
decoded meanwhile go into the next transaction together). Baselines, with the rows
already decoded and built before the clock starts, one transaction per batch of
5,000, into ``events`` itself under a topic value of their own: ``sink.raw_copy``,
psycopg's ``write_row`` (what a psycopg user writes); ``sink.raw_copy_binary``, the
prebuilt binary COPY streams the sink would send — Postgres' own ingest, the
ceiling.

Latency. Subject ``sink.latency``: a producer thread appends at a steady
``BENCH_LATENCY_RATE`` (5,000 ev/s) for ``BENCH_LATENCY_SECONDS``, remembering
each event's send time (``perf_counter``); the sink runs in its own process (as
``swarmlog sink`` would); a poller thread queries ``max(seq)`` every 2 ms. An
offset's latency is the start of the first poll that saw it minus its send
time, both from this process's monotonic clock (so at most one poll interval
late). Baseline ``sink.latency_kafka``: the same producer at the same rate and a
plain ``read_committed`` consumer in this process, stamping each offset as it
arrives: the floor Kafka itself sets. The first second (warm-up) is left out of
both.

Run the sink alone: ``python -m bench.sink --serve TOPIC`` (what the latency
benchmark starts; SIGTERM stops it after its current batch).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg
from confluent_kafka import TopicPartition
from psycopg import sql

import swarmlog
import swarmlog_connectors
from swarmlog.kafka.config import consumer as make_consumer
from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_migrations import migrate
from swarmlog_connectors.postgres_rows import COPY_SIGNATURE, COPY_TRAILER, EVENT_COLUMNS, RowBuilder
from swarmlog_connectors.postgres_sink import PostgresSink, connect

from .common import (
    EVENT_TYPE,
    RUN_ID,
    Run,
    Stream,
    chunks,
    env_int,
    fresh_topic,
    log,
    make_stream,
    percentile,
    populate,
    quick,
    reps,
    row,
)

REPO = Path(__file__).resolve().parents[1]
SINK_BATCH = 5000
"""PostgresSink's default batch size; the raw COPY baseline uses the same."""
WARMUP_S = 1.0
POLL_INTERVAL_S = 0.002


# --- throughput -------------------------------------------------------------------------------


def swarmlog_sink(s: Settings, registry: SchemaRegistry, topic: str, n: int) -> float:
    t0 = perf_counter()
    stats = PostgresSink(settings=s, topic=topic, registry=registry).run(until_end=True)
    seconds = perf_counter() - t0
    if stats.rows != n or stats.dead_letters:
        raise RuntimeError(f"sink mirrored {stats.rows} rows ({stats.dead_letters} dead letters), expected {n}")
    return seconds


def built_rows(s: Settings, registry: SchemaRegistry, topic: str, label: str) -> list[tuple[Any, ...]]:
    """The rows the sink writes for ``topic`` (under the topic value ``label``), built ahead of time."""
    builder = RowBuilder(topic=label, decoder=Decoder(registry))
    rows: list[tuple[Any, ...]] = []
    for batch in _batches(s, topic):
        built, dead = builder.build(batch)
        if dead:
            raise RuntimeError(f"{len(dead)} messages of {topic} do not decode")
        rows.extend(built)
    return rows


def built_copy(s: Settings, registry: SchemaRegistry, topic: str, label: str) -> list[bytes]:
    """Per batch of SINK_BATCH, the binary COPY stream the sink sends for ``topic`` (as ``label``)."""
    builder = RowBuilder(topic=label, decoder=Decoder(registry))
    streams = []
    for batch in _batches(s, topic):
        b = builder.build_copy(batch)
        if b.dead:
            raise RuntimeError(f"{len(b.dead)} messages of {topic} do not decode")
        streams.append(b"".join((COPY_SIGNATURE, b.data, COPY_TRAILER)))
    return streams


def _batches(s: Settings, topic: str) -> Any:
    with LogReader(settings=s, topic=topic) as reader:
        reader.assign(0)
        yield from reader.batches(batch_size=SINK_BATCH)


# Both baselines COPY into ``events`` itself, as the sink does (same indexes, same table
# size), under a topic value of their own, so that only the work in Python differs.
_COPY_TEXT = sql.SQL("COPY events ({}) FROM STDIN").format(sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)))
_COPY_BINARY = sql.SQL("COPY events ({}) FROM STDIN (FORMAT binary)").format(
    sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS)))


def raw_copy(s: Settings, rows: list[tuple[Any, ...]]) -> float:
    """Seconds to COPY the built rows with psycopg's ``write_row``, one transaction per batch."""
    with connect(s) as conn:
        migrate(conn)
        conn.autocommit = False
        t0 = perf_counter()
        for batch in chunks(rows, SINK_BATCH):
            with conn.cursor() as cur, cur.copy(_COPY_TEXT) as copy:
                write_row = copy.write_row
                for r in batch:
                    write_row(r)
            conn.commit()
        return perf_counter() - t0


def raw_copy_binary(s: Settings, streams: list[bytes]) -> float:
    """Seconds to COPY the prebuilt binary streams, one transaction per batch: Postgres' own ingest."""
    with connect(s) as conn:
        migrate(conn)
        conn.autocommit = False
        t0 = perf_counter()
        for data in streams:
            with conn.cursor() as cur, cur.copy(_COPY_BINARY) as copy:
                copy.write(data)
            conn.commit()
        return perf_counter() - t0


def forget_topic_rows(s: Settings, topics: list[str]) -> None:
    """Remove what the benchmarks mirrored, so that ``events`` does not grow run after run."""
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        for t in topics:
            conn.execute("DELETE FROM events WHERE topic = %s", (t,))
            conn.execute("DELETE FROM dead_letters WHERE topic = %s", (t,))
            conn.execute("DELETE FROM sink_positions WHERE topic = %s", (t,))
        if topics:
            conn.execute("VACUUM events")  # the next repetition finds the table as this one did


# --- latency ----------------------------------------------------------------------------------


class SteadyProducer(threading.Thread):
    """Appends ``rate`` events/s for ``seconds`` with EventLog; ``send_times[i]`` is event i's."""

    def __init__(self, s: Settings, registry: SchemaRegistry, stream: Stream, topic: str, *,
                 rate: int, seconds: float) -> None:
        super().__init__(name="steady-producer", daemon=True)
        self.log = EventLog(settings=s, registry=registry, topic=topic, run_id=RUN_ID)
        self.stream, self.rate, self.total = stream, rate, int(rate * seconds)
        self.send_times: list[float] = []
        self.offsets: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            produce, event, now = self.log.produce, self.stream.event, perf_counter
            times = self.send_times
            t0 = now()
            sent = 0
            while sent < self.total:
                due = min(self.total, int((now() - t0) * self.rate) + 1)
                while sent < due:
                    payload, agent, to = event(sent)
                    times.append(now())
                    produce(EVENT_TYPE, payload, agent=agent, to=to)
                    sent += 1
                time.sleep(0.0005)
            self.offsets = self.log.flush()
        except BaseException as exc:
            self.error = exc
        finally:
            self.log.close()


def _sent_at(producer: SteadyProducer) -> dict[int, float]:
    if producer.error is not None:
        raise producer.error
    if len(producer.offsets) != len(producer.send_times):
        raise RuntimeError(f"{len(producer.offsets)} offsets for {len(producer.send_times)} sends")
    return dict(zip(producer.offsets, producer.send_times, strict=True))


def latency_stats(sent_at: dict[int, float], seen_at: dict[int, float]) -> dict[str, float]:
    """p50/p99/max latency in ms over the events sent after the warm-up."""
    t_start = min(sent_at.values()) + WARMUP_S
    lat = sorted((seen_at[o] - t) * 1000 for o, t in sent_at.items() if t >= t_start and o in seen_at)
    missing = sum(1 for o, t in sent_at.items() if t >= t_start and o not in seen_at)
    if missing:
        raise RuntimeError(f"{missing} events were never seen")
    return {"p50_ms": round(percentile(lat, 50), 2), "p99_ms": round(percentile(lat, 99), 2),
            "max_ms": round(lat[-1], 2), "measured_events": len(lat)}


def sink_latency(s: Settings, registry: SchemaRegistry, stream: Stream, *, rate: int,
                 seconds: float, poll_timeout: float | None = None) -> tuple[float, int, dict[str, float]]:
    """(seconds, events, latency stats) for append -> queryable in Postgres through a sink process."""
    topic = fresh_topic(s, "sink-latency")
    sink = _start_sink_process(s, topic, poll_timeout=poll_timeout)
    stop = threading.Event()
    transitions: list[tuple[float, int]] = []  # (poll start, max(seq) seen)
    try:
        with psycopg.connect(s.database_url, autocommit=True) as conn:
            _wait_for_sink(conn, topic, sink)
            producer = SteadyProducer(s, registry, stream, topic, rate=rate, seconds=seconds)

            def poll() -> None:
                q = "SELECT max(seq) FROM events WHERE topic = %s"
                cur = conn.cursor()
                last = -1
                while not stop.is_set():
                    t = perf_counter()
                    cur.execute(q, (topic,))
                    m = cur.fetchone()[0]  # type: ignore[index]
                    if m is not None and m > last:
                        transitions.append((t, m))
                        last = m
                    time.sleep(POLL_INTERVAL_S)

            poller = threading.Thread(target=poll, name="max-seq-poller", daemon=True)
            poller.start()
            t0 = perf_counter()
            producer.start()
            producer.join()
            elapsed = perf_counter() - t0
            sent_at = _sent_at(producer)
            last_offset = max(sent_at)
            deadline = time.monotonic() + 60
            while (not transitions or transitions[-1][1] < last_offset) and time.monotonic() < deadline:
                time.sleep(0.01)
            stop.set()
            poller.join()
    finally:
        stop.set()
        _stop_sink_process(sink)
        forget_topic_rows(s, [topic])
    seen_at: dict[int, float] = {}
    prev = -1
    for t, m in transitions:
        for o in range(prev + 1, m + 1):
            seen_at[o] = t
        prev = m
    return elapsed, len(sent_at), latency_stats(sent_at, seen_at)


def kafka_latency(s: Settings, registry: SchemaRegistry, stream: Stream, *, rate: int,
                  seconds: float) -> tuple[float, int, dict[str, float]]:
    """The floor: append -> delivered to a read_committed consumer (swarmlog's reader config)."""
    topic = fresh_topic(s, "sink-latency-kafka")
    consumer = make_consumer(s)
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen_at: dict[int, float] = {}
    stop = threading.Event()

    def consume() -> None:
        poll, now = consumer.poll, perf_counter
        while not stop.is_set():
            m = poll(0.1)
            if m is not None and m.error() is None:
                seen_at[m.offset()] = now()

    reader = threading.Thread(target=consume, name="kafka-latency-consumer", daemon=True)
    try:
        reader.start()
        time.sleep(0.5)  # the consumer's first fetch is under way
        producer = SteadyProducer(s, registry, stream, topic, rate=rate, seconds=seconds)
        t0 = perf_counter()
        producer.start()
        producer.join()
        elapsed = perf_counter() - t0
        sent_at = _sent_at(producer)
        deadline = time.monotonic() + 60
        while len(seen_at) < len(sent_at) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        reader.join()
        consumer.close()
    return elapsed, len(sent_at), latency_stats(sent_at, seen_at)


def _start_sink_process(s: Settings, topic: str, *, poll_timeout: float | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update({"SWARMLOG_BOOTSTRAP_SERVERS": s.bootstrap_servers, "SWARMLOG_DATABASE_URL": s.database_url,
                "SWARMLOG_SCHEMA_DIR": str(s.schema_dir)})
    # The same swarmlog this process runs (which need not be the checkout's: see bench/README.md).
    env["PYTHONPATH"] = os.pathsep.join([str(Path(swarmlog.__file__).parents[1]),
                                         str(Path(swarmlog_connectors.__file__).parents[1]), str(REPO),
                                         env.get("PYTHONPATH", "")])
    extra = [] if poll_timeout is None else ["--poll-timeout", str(poll_timeout)]
    return subprocess.Popen([sys.executable, "-m", "bench.sink", "--serve", topic, *extra], env=env, cwd=REPO)


def _wait_for_sink(conn: psycopg.Connection[Any], topic: str, sink: subprocess.Popen[bytes]) -> None:
    """Wait until the sink has read its position (it then assigns the partition and polls)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sink.poll() is not None:
            raise RuntimeError(f"the sink exited with {sink.returncode} before it started")
        try:
            found = conn.execute("SELECT 1 FROM sink_positions WHERE topic = %s", (topic,)).fetchone()
        except psycopg.errors.UndefinedTable:
            found = None
        if found:
            time.sleep(0.5)  # consumer assignment and first fetch
            return
        time.sleep(0.05)
    raise RuntimeError("the sink did not start within 60 s")


def _stop_sink_process(sink: subprocess.Popen[bytes]) -> None:
    if sink.poll() is None:
        sink.send_signal(signal.SIGTERM)
        try:
            sink.wait(30)
        except subprocess.TimeoutExpired:
            sink.kill()
            sink.wait()


def serve(topic: str, *, poll_timeout: float | None = None) -> None:
    kwargs = {} if poll_timeout is None else {"poll_timeout": poll_timeout}
    sink = PostgresSink(settings=Settings.from_env(), topic=topic, **kwargs)
    sink.install_signal_handlers()
    sink.run(until_end=False)


# --- the benchmark ----------------------------------------------------------------------------


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    n = env_int("BENCH_SINK_EVENTS", 200_000)
    rate = env_int("BENCH_LATENCY_RATE", 5000, scale=False)
    seconds = float(os.environ.get("BENCH_LATENCY_SECONDS", "3" if quick() else "15"))
    stream = make_stream(registry)
    with connect(s) as conn:  # the mirror's tables: a separate step, as in production
        migrate(conn)

    sub = Run("sink.swarmlog", n)
    raw = Run("sink.raw_copy", n)
    raw_bin = Run("sink.raw_copy_binary", n)
    topics: list[str] = []
    try:
        for r in range(reps(5)):
            topic = fresh_topic(s, "sink")
            topics += [topic, f"{topic}#raw", f"{topic}#raw-binary"]
            populate(s, registry, stream, topic, n)
            sub.add(swarmlog_sink(s, registry, topic, n))
            log(f"sink.swarmlog rep {r}: {n / sub.samples[-1]:,.0f} ev/s")
            rows = built_rows(s, registry, topic, f"{topic}#raw")
            raw.add(raw_copy(s, rows))
            del rows
            log(f"sink.raw_copy rep {r}: {n / raw.samples[-1]:,.0f} ev/s")
            streams = built_copy(s, registry, topic, f"{topic}#raw-binary")
            raw_bin.add(raw_copy_binary(s, streams))
            del streams
            log(f"sink.raw_copy_binary rep {r}: {n / raw_bin.samples[-1]:,.0f} ev/s")
            forget_topic_rows(s, topics[-3:])
    finally:
        forget_topic_rows(s, topics)

    lat = Run("sink.latency", 0, extra={"target_rate": rate, "poll_interval_ms": POLL_INTERVAL_S * 1000,
                                        "warmup_s": WARMUP_S})
    floor = Run("sink.latency_kafka", 0, extra={"target_rate": rate})
    for r in range(reps(2)):
        for run_, fn in ((floor, kafka_latency), (lat, sink_latency)):
            elapsed, events, stats = fn(s, registry, stream, rate=rate, seconds=seconds)
            run_.events = events
            run_.add(elapsed, **stats)
            log(f"{run_.name} rep {r}: {events / elapsed:,.0f} ev/s, p50 {stats['p50_ms']} ms, "
                f"p99 {stats['p99_ms']} ms")

    return [
        row(sub, raw, target=">= 60000 ev/s", headline=True),
        row(sub, raw_bin),
        row(lat, floor, target="p99_ms < 500"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", metavar="TOPIC", required=True, help="run a PostgresSink on TOPIC until SIGTERM")
    parser.add_argument("--poll-timeout", type=float, help="PostgresSink(poll_timeout=...) (default: the sink's)")
    args = parser.parse_args()
    serve(args.serve, poll_timeout=args.poll_timeout)
