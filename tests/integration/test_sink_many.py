"""One sink, many swarms: every matching topic mirrored exactly once, and the sink's lag in Kafka's own tools."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Producer

from swarmlog.kafka.discovery import TopicPattern
from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import sink_group, snapshot_topic
from swarmlog.schema.codec import Encoder
from swarmlog_connectors.pattern_sink import PatternSink
from swarmlog_connectors.postgres_sink import PostgresSink

from .conftest import create_topics, new_topic_name, read_log, subprocess_env

_GROUP_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _append(settings, topic, n, *, start=0) -> None:
    with EventLog(settings=settings, topic=topic) as log:
        for i in range(start, start + n):
            log.produce("agent.message", {"kind": "k", "body": f"{topic}:{i}"}, agent=f"a{i % 3}")
        log.flush()


def _append_in_transaction(settings, registry, topic, n) -> None:
    """``n`` events in one Kafka transaction: its commit marker takes an offset no event has."""
    enc = Encoder(registry.latest("agent.message"))
    p = Producer({"bootstrap.servers": settings.bootstrap_servers, "transactional.id": f"test-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        payload = enc.schema.validate_payload({"kind": "txn", "body": str(i)})
        p.produce(topic, enc.encode_event(f"txn-{i}", "", "t", None, [], payload), key=b"t",
                  headers=enc.headers(b"t", None))
    p.commit_transaction(30)


def _mirror(db, topic) -> list[tuple]:
    return [tuple(r) for r in db.execute("SELECT seq, event_id, payload FROM events WHERE topic = %s ORDER BY seq",
                                         (topic,)).fetchall()]


def _log(settings, registry, topic) -> list[tuple]:
    s = settings.model_copy(update={"topic": topic})
    return [(r.offset, r.record["event_id"], r.record["payload"]) for r in read_log(s, registry)]


def _describe_group(settings, group) -> dict[str, tuple[int, int, int]]:
    """``kafka-consumer-groups.sh --describe --group``, Kafka's own tool run as a process:
    topic -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG)."""
    from swarmlog.dev import kafka_tool_argv

    argv = kafka_tool_argv(_GROUP_TOOL, "--bootstrap-server", settings.bootstrap_servers, "--describe",
                           "--group", group)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0] == group and parts[2] == "0":
            rows[parts[1]] = (int(parts[3]), int(parts[4]), int(parts[5]))
    return rows


def test_one_sink_mirrors_every_matching_topic_exactly_once_and_nothing_else(base_settings, registry, db):
    prefix = new_topic_name("many")
    swarms = [f"{prefix}.s{i}" for i in range(4)]
    side = snapshot_topic(swarms[0])
    wide = f"{prefix}.wide"  # matches, but two partitions are no swarm's log
    other = f"{prefix}-other.s0"  # does not match
    create_topics(base_settings, [*swarms, side, other])
    create_topics(base_settings, [wide], partitions=2)
    for i, t in enumerate([*swarms, side, other]):
        _append(base_settings, t, 100 + 50 * i)
    _append_in_transaction(base_settings, registry, swarms[1], 30)  # ends with a transaction marker
    raw = Producer({"bootstrap.servers": base_settings.bootstrap_servers})
    raw.produce(wide, b"x")
    raw.flush(30)

    group = f"{prefix}-sink"
    sink = PatternSink(settings=base_settings, pattern=TopicPattern(pattern=re.escape(prefix) + r"\..*"),
                       group=group, registry=registry, batch_size=64)
    stats = sink.run(until_end=True)

    assert sorted(stats.positions) == swarms
    for t in swarms:
        assert _mirror(db, t) == _log(base_settings, registry, t), t
    for t in (side, other, wide):
        assert db.execute("SELECT count(*) FROM events WHERE topic = %s", (t,)).fetchone() == (0,)
        assert db.execute("SELECT 1 FROM sink_positions WHERE topic = %s", (t,)).fetchone() is None
    assert stats.rows == sum(100 + 50 * i for i in range(4)) + 30 and stats.dead_letters == 0
    # Kafka's tool sees every mirrored topic caught up: lag 0 even past the final transaction marker.
    described = _describe_group(base_settings, group)
    assert sorted(described) == swarms
    for t, (current, end, lag) in described.items():
        assert (current, lag) == (end, 0), (t, described[t])
    assert described[swarms[1]][1] == 100 + 50 + 30 + 1  # the marker's offset is counted


def test_a_new_swarms_topic_is_mirrored_once_it_appears(base_settings, registry, db):
    prefix = new_topic_name("many-new")
    first, later = f"{prefix}.first", f"{prefix}.later"
    create_topic(base_settings, first)
    _append(base_settings, first, 200)
    sink = PatternSink(settings=base_settings, pattern=TopicPattern(pattern=re.escape(prefix) + r"\..*"),
                       group=f"{prefix}-sink", registry=registry, refresh_interval_ms=300)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sink.run()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        def position(t):
            row = db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (t,)).fetchone()
            return None if row is None else row[0]

        deadline = time.monotonic() + 60
        while position(first) != 200 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        assert position(first) == 200 and position(later) is None
        create_topic(base_settings, later)
        _append(base_settings, later, 300)
        _append(base_settings, first, 50, start=200)
        while (position(later), position(first)) != (300, 250) and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        assert (position(later), position(first)) == (300, 250)
    finally:
        sink.stop()
        thread.join(60)
    assert not errors and not thread.is_alive()
    assert _mirror(db, later) == _log(base_settings, registry, later)
    assert _mirror(db, first) == _log(base_settings, registry, first)


def test_many_topics_sink_resumes_without_gap_or_duplicate_after_sigkill(base_settings, registry, db):
    """60k events over 100 topics loaded while `swarmlog sink --topics-pattern` is SIGKILLed, then restarted."""
    prefix = new_topic_name("many-kill")
    topics = [f"{prefix}.s{i:03d}" for i in range(100)]
    create_topics(base_settings, topics)
    per_round, rounds = 30, 20  # per topic per round
    rng = random.Random(20261201)
    loaded = threading.Event()
    load_errors: list[BaseException] = []
    def load_all() -> None:
        # One producer for every topic (as a deployment's many swarms would not, but it is
        # the same bytes as EventLog's, and a hundred producers would only load the machine).
        enc = Encoder(registry.latest("agent.message"))
        producer = Producer({"bootstrap.servers": base_settings.bootstrap_servers, "enable.idempotence": True,
                             "linger.ms": 5})
        try:
            for r in range(rounds):
                for t in topics:
                    for i in range(per_round):
                        n = r * per_round + i
                        payload = enc.schema.validate_payload({"kind": "load", "body": str(n)})
                        producer.produce(t, enc.encode_event(f"{t}-{n}", "", f"a{i % 5}", None, [], payload),
                                         headers=enc.headers(f"a{i % 5}".encode(), None))
                assert producer.flush(60) == 0
                time.sleep(0.7)  # spread the load (~15 s) over the kills
        except BaseException as exc:  # pragma: no cover
            load_errors.append(exc)
        finally:
            loaded.set()

    loader = threading.Thread(target=load_all)
    loader.start()
    # The sink restarted in its pod, as Kubernetes restarts a killed container: a static member of
    # its group (group.instance.id, the pod's name), so that each life takes over the killed one's
    # topics at once instead of after its session times out (test_sink_group.py has the dynamic
    # members, and their session timeouts).
    env = {**subprocess_env(base_settings), "SWARMLOG_KAFKA_GROUP_INSTANCE_ID": f"{prefix}-sink-0"}
    argv = [sys.executable, "-m", "swarmlog.cli", "sink", "--topics-pattern", re.escape(prefix) + r"\..*",
            "--group", f"{prefix}-sink"]

    def committed() -> int:
        row = db.execute("SELECT coalesce(sum(next_offset), 0) FROM sink_positions WHERE topic LIKE %s",
                         (prefix + ".%",)).fetchone()
        return int(row[0])

    kills_during_load = 0
    progress = []
    while kills_during_load < 4 or len(progress) < 5:
        before = committed()
        sink = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while committed() == before and not loaded.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.05, 0.6))
        loading = not loaded.is_set()
        sink.send_signal(signal.SIGKILL)
        sink.wait()
        kills_during_load += loading
        progress.append(committed())
        assert len(progress) < 30, "the load finished before four kills could land in it"
    loader.join()
    assert not load_errors
    assert len(set(progress)) >= 3, progress  # killed mid-work, not idle
    final = subprocess.run([*argv, "--until-end"], env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    per_topic = per_round * rounds
    rows = db.execute("SELECT topic, count(*), count(DISTINCT seq), min(seq), max(seq) FROM events "
                      "WHERE topic LIKE %s GROUP BY topic ORDER BY topic", (prefix + ".%",)).fetchall()
    assert [r[0] for r in rows] == topics
    for t, count, distinct, lo, hi in rows:
        assert (count, distinct, lo, hi) == (per_topic, per_topic, 0, per_topic - 1), t  # no transactions here
    bodies = db.execute("SELECT topic, array_agg((payload->>'body')::int ORDER BY seq) FROM events "
                        "WHERE topic LIKE %s GROUP BY topic", (prefix + ".%",)).fetchall()
    for t, b in bodies:
        assert b == list(range(per_topic)), t


def test_kafka_consumer_groups_shows_the_sinks_lag_falling_to_zero(settings, registry, db):
    _append(settings, settings.topic, 300)
    _append_in_transaction(settings, registry, settings.topic, 20)  # the log ends with a marker: offset 320
    env = subprocess_env(settings)
    sink = [sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"]
    first = subprocess.run(sink, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    group = sink_group(settings.topic)
    assert _describe_group(settings, group) == {settings.topic: (321, 321, 0)}
    # More events while the sink is away: the tool shows the mirror behind by exactly them.
    _append(settings, settings.topic, 200)
    assert _describe_group(settings, group) == {settings.topic: (321, 521, 200)}
    # A following sink catches up (it commits after each Postgres transaction) and the lag is 0.
    follow = subprocess.Popen(sink[:-1], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s",
                         (settings.topic,)).fetchone() != (521,):
            assert time.monotonic() < deadline and follow.poll() is None, "the sink did not catch up"
            time.sleep(0.05)
        assert _describe_group(settings, group) == {settings.topic: (521, 521, 0)}
    finally:
        follow.send_signal(signal.SIGTERM)
        follow.communicate(timeout=60)
    assert follow.returncode == 0
    assert db.execute("SELECT count(*) FROM events WHERE topic = %s", (settings.topic,)).fetchone() == (520,)


def test_the_one_topic_sink_names_its_group_after_the_topic(settings, registry):
    assert PostgresSink(settings=settings, registry=registry).group == f"swarmlog-sink.{settings.topic}"
    assert PostgresSink(settings=settings, registry=registry, group="mine").group == "mine"


def test_a_repeated_event_id_is_dead_lettered_by_the_many_topics_sink_as_by_the_one_topic_sink(
        base_settings, registry, db):
    # A copy of an event (re-sent byte for byte by a copy tool) in one topic of many: the mirror holds the id
    # once (its unique index), the copy is a dead letter naming the first, and the sink goes on.
    prefix = new_topic_name("many-dup")
    topics = [f"{prefix}.a", f"{prefix}.b"]
    create_topics(base_settings, topics)
    for t in topics:
        _append(base_settings, t, 50)
    s = base_settings.model_copy(update={"topic": topics[0]})
    copied = read_log(s, registry)[7]
    with LogReader(settings=s) as reader:
        reader.assign(copied.offset)
        raw = next(m for batch in reader.batches(end=copied.offset + 1) for m in batch)
    p = Producer({"bootstrap.servers": base_settings.bootstrap_servers})
    p.produce(topics[0], raw.value(), key=raw.key(), headers=raw.headers())
    assert p.flush(30) == 0
    _append(base_settings, topics[0], 10, start=50)
    sink = PatternSink(settings=base_settings, pattern=TopicPattern(pattern=re.escape(prefix) + r"\..*"),
                       group=f"{prefix}-sink", registry=registry)
    sink.run(until_end=True)
    mirrored = _mirror(db, topics[0])
    assert len(mirrored) == 60 and len({r[1] for r in mirrored}) == 60
    assert _mirror(db, topics[1]) == _log(base_settings, registry, topics[1])
    dead = db.execute("SELECT seq, error FROM dead_letters WHERE topic = %s", (topics[0],)).fetchall()
    assert [(seq, f"offset {copied.offset}" in error) for seq, error in dead] == [(50, True)], dead
