"""One sink, many swarms: mirroring 1,000 topics by one process, beside the one-topic sink as its ceiling.

Subject ``sink_many.swarmlog``: ``PatternSink(pattern=...).run(until_end=True)`` (what
``swarmlog sink --topics-pattern`` runs) over ``BENCH_SINK_MANY_TOPICS`` (1,000) fresh
single-partition topics holding ``BENCH_SINK_MANY_EVENTS`` (200k) events in total, spread
evenly (200 per topic), timed from the call to its return: finding the topics, reading
their 1,000 positions, assigning them, consuming, decoding, COPYing, committing every
topic's position in the same transactions. Baseline ``sink_many.one_topic``: the one-topic
sink (``PostgresSink``, the ``sink.swarmlog`` subject) on one topic of the same number of
the same events, in the same run: the ceiling a many-topic sink can approach.

The topics are made once (one CreateTopics request) and filled once with the sink
benchmark's stream (one producer, the same bytes EventLog writes); between repetitions
the mirrored rows and positions are deleted (and ``events`` vacuumed), so every repetition
mirrors everything from offset 0 into a table in the same state.
"""

from __future__ import annotations

import re
import time
import uuid
from time import perf_counter
from typing import Any

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from swarmlog.kafka.config import PRODUCER_REQUIRED, PRODUCER_TUNING, admin_client
from swarmlog.kafka.discovery import TopicPattern
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


def fill(s: Settings, registry: SchemaRegistry, stream: Stream, topics: list[str], per_topic: int) -> None:
    """``per_topic`` events of the stream into each topic, with swarmlog's producer settings."""
    enc = Encoder(registry.latest(EVENT_TYPE))
    producer = Producer(s.kafka_config(PRODUCER_REQUIRED, tuning=PRODUCER_TUNING))  # type: ignore[arg-type]
    n = 0
    for t in topics:
        for _ in range(per_topic):
            payload, agent, to = stream.event(n)
            value = enc.encode_event(f"bench-{n}", RUN_ID, agent, to, [], enc.schema.validate_payload(payload))
            producer.produce(t, value, key=agent.encode(), headers=enc.headers(agent.encode(), to.encode()))
            n += 1
            if n % 100_000 == 0:
                producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("events not acknowledged within 120 s")


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


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    topics_n = env_int("BENCH_SINK_MANY_TOPICS", 1000)
    per_topic = max(1, env_int("BENCH_SINK_MANY_EVENTS", 200_000) // topics_n)
    n = per_topic * topics_n
    stream = make_stream(registry)
    prefix = f"{TOPIC_PREFIX}many-{uuid.uuid4().hex[:12]}"
    topics = [f"{prefix}.s{i:04d}" for i in range(topics_n)]
    t0 = perf_counter()
    create_topics(s, topics)
    log(f"sink_many: {topics_n} topics created in {perf_counter() - t0:.1f} s")
    fill(s, registry, stream, topics, per_topic)
    one = common.fresh_topic(s, "sink-many-one")
    populate(s, registry, stream, one, n)

    sub = Run("sink_many.swarmlog", n, extra={"topics": topics_n, "events_per_topic": per_topic})
    base = Run("sink_many.one_topic", n)
    try:
        for r in range(reps(3)):
            sub.add(many_sink(s, registry, prefix, n, topics_n))
            log(f"sink_many.swarmlog rep {r}: {n / sub.samples[-1]:,.0f} ev/s over {topics_n} topics")
            forget_topic_rows(s, topics)
            base.add(swarmlog_sink(s, registry, one, n))
            log(f"sink_many.one_topic rep {r}: {n / base.samples[-1]:,.0f} ev/s")
            forget_topic_rows(s, [one])
    finally:
        forget_topic_rows(s, [*topics, one])
    return [row(sub, base, target=">= 50000 ev/s over 1000 topics", headline=True)]
