"""One sink, many swarms: mirroring 1,000 topics by one process, beside the one-topic sink as its ceiling.

Subject ``sink_many.swarmlog``: ``PatternSink(pattern=...).run(until_end=True)`` (what
``swarmlog sink --topics-pattern`` runs) over ``BENCH_SINK_MANY_TOPICS`` (1,000) fresh
single-partition topics holding ``BENCH_SINK_MANY_EVENTS`` (200k) events in total, spread
evenly (200 per topic), timed from the call to its return: finding the topics, reading
their 1,000 positions, assigning them, consuming, decoding, COPYing, committing every
topic's position in the same transactions. Baseline ``sink_many.one_topic``: the one-topic
sink (``PostgresSink``, the ``sink.swarmlog`` subject) on one topic of the same number of
the same events, in the same run: the ceiling a many-topic sink can approach.

A group of sinks (issue 28): ``sink_many.processes_2`` and ``sink_many.processes_3`` are
2 and 3 ``swarmlog sink --topics-pattern ... --until-end`` processes of one consumer group
started together over the same topics, from their start to the last one's exit (each exits
once the whole pattern is mirrored, whichever sink mirrored it); baseline
``sink_many.processes_1``, the same command as one process. ``cpu_s`` is the sink processes'
CPU (user + system) in all. ``sink_many.running_2`` and ``_3`` (baseline ``running_1``): the
steady state. The sinks run, following, and have settled (every topic claimed, each sink holding
a share); then the same number of events appears in the topics (the same stream),
made visible at once (one Kafka transaction of a producer commits them), timed from the commit to
the last event mirrored: how fast a running group catches up with a burst, without a rebalance in
the measurement (it fails if one happens) and without the producer's own work in it.
On the local dev cluster, ``postgres_cpu_s`` and ``kafka_cpu_s`` are
what Postgres (the postmaster and every backend) and the broker spent meanwhile: together they
say what the machine's cores were busy with, and so how far more sinks can go on it.

The topics are made once (one CreateTopics request) and filled once with the sink
benchmark's stream (one producer, the same bytes EventLog writes); between repetitions
the mirrored rows and positions are deleted (and ``events`` vacuumed), so every repetition
mirrors everything from offset 0 into a table in the same state.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
import time
import uuid
from time import perf_counter
from typing import Any

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from swarmlog.kafka.config import PRODUCER_REQUIRED, PRODUCER_TUNING, admin_client
from swarmlog.kafka.discovery import TopicPattern
from swarmlog.kafka.multi_reader import stable_ends
from swarmlog.kafka.topic import TOPIC_CONFIG
from swarmlog.schema.codec import Encoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.pattern_sink import PatternSink

from . import common
from .common import EVENT_TYPE, RUN_ID, TOPIC_PREFIX, Run, Stream, env_int, log, make_stream, populate, reps, row
from .sink import swarmlog_sink


def create_topics(s: Settings, names: list[str]) -> None:
    """``names`` in one CreateTopics request (registered for deletion at the end of the run)."""
    admin = admin_client(s)
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=s.replication_factor,
                                            config=TOPIC_CONFIG) for n in names],
                                  operation_timeout=120, request_timeout=120)
    common._created.extend(names)
    for f in futures.values():
        f.result()
    deadline = time.monotonic() + 120
    while not set(names) <= set(admin.list_topics(timeout=30).topics):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(names)} created topics did not all show in the metadata within 120 s")
        time.sleep(0.2)


def fill(s: Settings, registry: SchemaRegistry, stream: Stream, topics: list[str], per_topic: int, *,
         first_id: int = 0, transactional_id: str | None = None) -> Producer | None:
    """``per_topic`` events of the stream into each topic, with swarmlog's producer settings (event
    ids from ``bench-<first_id>`` on). With ``transactional_id``: all of them in one Kafka
    transaction, left open: the producer is returned, and read_committed readers see every event
    at once when it commits the transaction."""
    enc = Encoder(registry.latest(EVENT_TYPE))
    config = s.kafka_config(PRODUCER_REQUIRED, tuning=PRODUCER_TUNING)
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)  # type: ignore[arg-type]
    if transactional_id is not None:
        producer.init_transactions(60)
        producer.begin_transaction()
    n = 0
    for t in topics:
        for _ in range(per_topic):
            payload, agent, to = stream.event(n)
            value = enc.encode_event(f"bench-{first_id + n}", RUN_ID, agent, to, [],
                                     enc.schema.validate_payload(payload))
            producer.produce(t, value, key=agent.encode(), headers=enc.headers(agent.encode(), to.encode()))
            n += 1
            if n % 100_000 == 0:
                producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("events not acknowledged within 120 s")
    return producer if transactional_id is not None else None


def forget_topic_rows(s: Settings, topics: list[str]) -> None:
    """Remove what was mirrored of ``topics``, so that the next repetition starts from offset 0."""
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        for table in ("events", "dead_letters", "sink_positions"):
            conn.execute(f"DELETE FROM {table} WHERE topic = ANY(%s)", (topics,))
        conn.execute("VACUUM events")


def many_sink(s: Settings, registry: SchemaRegistry, prefix: str, n: int, topics: int) -> float:
    t0 = perf_counter()
    stats = PatternSink(settings=s, registry=registry, pattern=TopicPattern(pattern=re.escape(prefix) + r"\..*"),
                        group=f"{prefix}-sink").run(until_end=True)
    seconds = perf_counter() - t0
    if stats.rows != n or stats.dead_letters or len(stats.positions) != topics:
        raise RuntimeError(f"sink mirrored {stats.rows} rows of {len(stats.positions)} topics "
                           f"({stats.dead_letters} dead letters), expected {n} of {topics}")
    return seconds


def group_sinks(s: Settings, prefix: str, n: int, topics: int, processes: int) -> tuple[float, dict[str, float]]:
    """``processes`` sinks of one new consumer group over the pattern, started together, until
    the last one exits: (seconds, CPU seconds of the sink processes and of the servers)."""
    argv = [sys.executable, "-m", "swarmlog.cli", "sink", "--topics-pattern", re.escape(prefix) + r"\..*",
            "--group", f"{prefix}-group-{uuid.uuid4().hex[:8]}", "--until-end"]
    cpu0, servers0 = _children_cpu(), _servers_cpu()
    t0 = perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    outs = [p.communicate(timeout=1800) for p in procs]
    seconds = perf_counter() - t0
    servers = {k: v - servers0[k] for k, v in _servers_cpu().items() if k in servers0}
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"a sink of the group exited {p.returncode}: {err[-2000:]}")
    rows = sum(json.loads(out.splitlines()[-1])["rows"] for out, _ in outs)
    if rows != n:
        raise RuntimeError(f"{processes} sinks mirrored {rows} rows of {topics} topics, expected {n}")
    return seconds, {"cpu_s": _children_cpu() - cpu0, **servers}


def running_group(s: Settings, registry: SchemaRegistry, stream: Stream, prefix: str, topics: list[str],
                  per_topic: int, processes: int, first_id: int) -> tuple[float, dict[str, float]]:
    """``processes`` following sinks of one new group, settled at the topics' ends (every topic
    claimed, each sink holding a share); then ``per_topic`` more events in every topic appear at
    once (one Kafka transaction commits), timed from the commit to the last one mirrored:
    (seconds, CPU seconds)."""
    from swarmlog.dev import process

    ends = stable_ends(admin_client(s), topics, bootstrap=s.bootstrap_servers)
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        for table in ("events", "dead_letters", "sink_positions"):
            conn.execute(f"DELETE FROM {table} WHERE topic = ANY(%s)", (topics,))
        conn.execute("INSERT INTO sink_positions (topic, next_offset) SELECT * FROM unnest(%s::text[], %s::bigint[])",
                     (topics, [ends[t] for t in topics]))
        conn.execute("VACUUM events")
    argv = [sys.executable, "-m", "swarmlog.cli", "sink", "--topics-pattern", re.escape(prefix) + r"\..*",
            "--group", f"{prefix}-group-{uuid.uuid4().hex[:8]}"]
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    try:
        with psycopg.connect(s.database_url, autocommit=True) as conn:
            def settled() -> bool:
                held = conn.execute("SELECT count(owner), count(DISTINCT owner) FROM sink_positions "
                                    "WHERE topic = ANY(%s)", (topics,)).fetchone()
                return held == (len(topics), processes)

            deadline = time.monotonic() + 300
            while not settled():
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"{processes} sinks did not settle on {len(topics)} topics")
                time.sleep(0.1)
            producer = fill(s, registry, stream, topics, per_topic, first_id=first_id,
                            transactional_id=f"{prefix}-fill-{first_id}")
            assert producer is not None
            cpu0, servers0 = sum(process.cpu_seconds(p.pid) for p in procs), _servers_cpu()
            t0 = perf_counter()
            producer.commit_transaction(120)
            # The markers reach the partitions after the commit returns, so the ends are counted,
            # not asked: each topic's events, then its commit marker.
            target = sum(ends.values()) + (per_topic + 1) * len(topics)
            while conn.execute("SELECT sum(next_offset) FROM sink_positions WHERE topic = ANY(%s)",
                               (topics,)).fetchone()[0] < target:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a sink of the group exited while mirroring")
                time.sleep(0.02)
            seconds = perf_counter() - t0
            cpu = sum(process.cpu_seconds(p.pid) for p in procs) - cpu0
            servers = {k: v - servers0[k] for k, v in _servers_cpu().items() if k in servers0}
            if not settled():
                raise RuntimeError("the group rebalanced while mirroring: not the steady state measured")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errs = [p.communicate(timeout=120)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a sink of the group exited badly: {[e[-1000:] for e in errs]}")
    return seconds, {"cpu_s": cpu, **servers}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _servers_cpu() -> dict[str, float]:
    """CPU seconds so far of the local dev cluster's Postgres (the postmaster, its exited children,
    its live backends) and Kafka broker; {} when the benchmark runs against another cluster."""
    from swarmlog.dev import cluster, process

    try:
        status = cluster.status()
    except Exception:  # noqa: BLE001 - no dev cluster here: nothing to measure
        return {}
    out = {}
    if status.postgres.pid is not None:
        pg = status.postgres.pid
        out["postgres_cpu_s"] = (process.cpu_seconds(pg, waited_children=True)
                                 + sum(map(process.cpu_seconds, process.children(pg))))
    if status.kafka.pid is not None:
        out["kafka_cpu_s"] = process.cpu_seconds(status.kafka.pid)
    return out


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    topics_n = env_int("BENCH_SINK_MANY_TOPICS", 1000)
    per_topic = max(1, env_int("BENCH_SINK_MANY_EVENTS", 200_000) // topics_n)
    n = per_topic * topics_n
    stream = make_stream(registry)
    prefix = f"{TOPIC_PREFIX}many-{uuid.uuid4().hex[:12]}"
    topics = [f"{prefix}.s{i:04d}" for i in range(topics_n)]
    t0 = perf_counter()
    # The steady-state rows fill topics of their own, 200 more events each per measurement.
    live_prefix = f"{TOPIC_PREFIX}many-live-{uuid.uuid4().hex[:12]}"
    live_topics = [f"{live_prefix}.s{i:04d}" for i in range(topics_n)]
    create_topics(s, topics)
    create_topics(s, live_topics)  # apart: the controller refuses a CreateTopics of too many records
    log(f"sink_many: {2 * topics_n} topics created in {perf_counter() - t0:.1f} s")
    fill(s, registry, stream, topics, per_topic)
    one = common.fresh_topic(s, "sink-many-one")
    populate(s, registry, stream, one, n)

    sub = Run("sink_many.swarmlog", n, extra={"topics": topics_n, "events_per_topic": per_topic})
    base = Run("sink_many.one_topic", n)
    groups = {k: Run(f"sink_many.processes_{k}", n, extra={"topics": topics_n, "processes": k}) for k in (1, 2, 3)}
    running = {k: Run(f"sink_many.running_{k}", n, extra={"topics": topics_n, "processes": k}) for k in (1, 2, 3)}
    first_id = n
    try:
        # Not timed: the first burst into the steady-state topics cost the broker seconds of CPU
        # more than any later one (measured: 9-12 s against 0.5), on whichever row came first.
        running_group(s, registry, stream, live_prefix, live_topics, per_topic, 1, first_id)
        first_id += n
        for r in range(reps(3)):
            sub.add(many_sink(s, registry, prefix, n, topics_n))
            log(f"sink_many.swarmlog rep {r}: {n / sub.samples[-1]:,.0f} ev/s over {topics_n} topics")
            forget_topic_rows(s, topics)
            base.add(swarmlog_sink(s, registry, one, n))
            log(f"sink_many.one_topic rep {r}: {n / base.samples[-1]:,.0f} ev/s")
            forget_topic_rows(s, [one])
            # Alternating orders, so that what comes first in a repetition is not always one sink count.
            order = (1, 2, 3) if r % 2 == 0 else (3, 2, 1)
            for k in order:
                g = groups[k]
                seconds, cpu = group_sinks(s, prefix, n, topics_n, k)
                g.add(seconds, **cpu)
                log(f"sink_many.processes_{k} rep {r}: {n / seconds:,.0f} ev/s over {topics_n} topics (CPU s: "
                    + ", ".join(f"{name[:-2]} {v:.1f}" for name, v in cpu.items()) + ")")
                forget_topic_rows(s, topics)
            for k in order:
                g = running[k]
                seconds, cpu = running_group(s, registry, stream, live_prefix, live_topics, per_topic, k, first_id)
                first_id += n
                g.add(seconds, **cpu)
                log(f"sink_many.running_{k} rep {r}: {n / seconds:,.0f} ev/s over {topics_n} topics (CPU s: "
                    + ", ".join(f"{name[:-2]} {v:.1f}" for name, v in cpu.items()) + ")")
    finally:
        forget_topic_rows(s, [*topics, *live_topics, one])
    return [row(sub, base, target=">= 50000 ev/s over 1000 topics", headline=True),
            row(groups[1]), row(groups[2], groups[1]), row(groups[3], groups[1]),
            row(running[1]), row(running[2], running[1]), row(running[3], running[1])]
