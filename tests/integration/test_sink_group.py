"""Sinks of one pattern as a group: they split its topics, hand them over in rebalances, and every
topic is mirrored exactly once whichever sink wrote which part of it (issue 28, item 9).

The sinks here are threads of the test (each its own consumer, group member and Postgres
connection, as separate processes would have); the fault suite runs them as processes under
SIGKILL (tests/faults/test_sink_faults.py).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from confluent_kafka import Producer

from swarmlog.kafka.discovery import TopicPattern
from swarmlog.schema.codec import Encoder
from swarmlog_connectors import sink_owners
from swarmlog_connectors.pattern_sink import PatternSink

from .conftest import create_topics, new_topic_name, read_topics


class Load:
    """Events into every topic from one producer, in rounds, on a thread of its own (or at once)."""

    def __init__(self, settings, registry, topics: list[str], *, per_round: int, rounds: int, pause_s: float = 0.0,
                 transactional: bool = False) -> None:
        self.settings, self.topics = settings, topics
        self.per_round, self.rounds, self.pause_s = per_round, rounds, pause_s
        self.enc = Encoder(registry.latest("agent.message"))
        self.transactional = transactional
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        config = {"bootstrap.servers": self.settings.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}
        if self.transactional:
            config["transactional.id"] = f"load-{self.topics[0]}"
        producer = Producer(config)
        try:
            if self.transactional:
                producer.init_transactions(30)
            for r in range(self.rounds):
                if self.transactional:
                    producer.begin_transaction()
                for t in self.topics:
                    for i in range(self.per_round):
                        n = r * self.per_round + i
                        payload = self.enc.schema.validate_payload({"kind": "load", "body": str(n)})
                        producer.produce(t, self.enc.encode_event(f"{t}-{n}", "", f"a{i % 5}", None, [], payload),
                                         headers=self.enc.headers(f"a{i % 5}".encode(), None))
                if self.transactional:
                    producer.commit_transaction(60)  # every topic now ends with a marker
                else:
                    assert producer.flush(60) == 0
                time.sleep(self.pause_s)
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.errors.append(exc)
        finally:
            self.done.set()

    def start(self) -> Load:
        self.thread.start()
        return self

    def run(self) -> Load:
        self._run()
        assert not self.errors, self.errors
        return self

    def join(self) -> None:
        self.thread.join(300)
        assert not self.errors, self.errors

    @property
    def per_topic(self) -> int:
        return self.per_round * self.rounds


class Sinks:
    """PatternSinks of one group running on threads; ``stop`` one or all."""

    def __init__(self, settings, registry, prefix: str, **kwargs) -> None:
        self.settings, self.registry, self.prefix, self.kwargs = settings, registry, prefix, kwargs
        self.sinks: list[PatternSink] = []
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, *, until_end: bool = False) -> PatternSink:
        sink = PatternSink(settings=self.settings, registry=self.registry, group=f"{self.prefix}-sinks",
                           pattern=TopicPattern(pattern=re.escape(self.prefix) + r"\..*"), **self.kwargs)

        def run() -> None:
            try:
                sink.run(until_end=until_end)
            except BaseException as exc:  # pragma: no cover - reported by the test
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=f"sink-{len(self.sinks)}")
        self.sinks.append(sink)
        self.threads.append(thread)
        thread.start()
        return sink

    def stop(self, sink: PatternSink) -> None:
        sink.stop()
        self.threads[self.sinks.index(sink)].join(60)
        assert not self.threads[self.sinks.index(sink)].is_alive()

    def join(self, timeout: float = 120) -> None:
        for t in self.threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self.threads), "a sink did not stop"
        assert not self.errors, self.errors

    def stop_all(self) -> None:
        for s in self.sinks:
            s.stop()
        self.join()


@pytest.fixture
def group(base_settings, registry) -> Iterator[Callable[..., Sinks]]:
    made: list[Sinks] = []

    def make(prefix: str, **kwargs) -> Sinks:
        made.append(Sinks(base_settings, registry, prefix, **kwargs))
        return made[-1]

    yield make
    for sinks in made:
        for s in sinks.sinks:
            s.stop()
        for t in sinks.threads:
            t.join(60)


def _positions(db, prefix: str) -> dict[str, tuple[int, str | None]]:
    return {t: (int(p), o) for t, p, o in db.execute(
        "SELECT topic, next_offset, owner FROM sink_positions WHERE topic LIKE %s", (prefix + ".%",)).fetchall()}


def _wait_mirrored(db, prefix: str, ends: dict[str, int], sinks: Sinks, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while True:
        at = _positions(db, prefix)
        if all(at.get(t, (0, None))[0] >= end for t, end in ends.items()):
            return
        assert not sinks.errors, sinks.errors
        assert time.monotonic() < deadline, f"not mirrored in {limit} s: " + str(
            {t: (at.get(t), end) for t, end in ends.items() if at.get(t, (0, None))[0] < end})
        time.sleep(0.1)


def _mirror(db, prefix: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for t, seq, eid in db.execute("SELECT topic, seq, event_id FROM events WHERE topic LIKE %s ORDER BY topic, seq",
                                  (prefix + ".%",)):
        out.setdefault(t, []).append((int(seq), eid))
    return out


def _assert_mirror_equals_topics(settings, registry, db, topics: list[str], per_topic: int) -> None:
    logs = read_topics(settings, registry, topics)
    mirror = _mirror(db, topics[0].rsplit(".", 1)[0])
    for t in topics:
        assert len(logs[t]) == per_topic, t
        assert mirror.get(t) == logs[t], t  # every event once, at its offset: no gap, no duplicate


def _ends(settings, topics) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient as _Admin

    from swarmlog.kafka.multi_reader import stable_ends

    return stable_ends(_Admin({"bootstrap.servers": settings.bootstrap_servers}), topics,
                       bootstrap=settings.bootstrap_servers)


def test_sinks_of_one_group_split_the_topics_and_each_topic_is_mirrored_exactly_once(
        base_settings, registry, db, group):
    prefix = new_topic_name("group-split")
    topics = [f"{prefix}.s{i:02d}" for i in range(30)]
    create_topics(base_settings, topics)
    load = Load(base_settings, registry, topics, per_round=40, rounds=3).run()
    sinks = group(prefix, refresh_interval_ms=500)
    three = [sinks.start() for _ in range(3)]
    _wait_mirrored(db, prefix, _ends(base_settings, topics), sinks)
    # Each sink holds a share, the shares are disjoint and cover the pattern, and Postgres names
    # the holder of every topic.
    deadline = time.monotonic() + 30
    while sorted(len(s.stats.positions) for s in three) != [10, 10, 10]:
        assert time.monotonic() < deadline, [len(s.stats.positions) for s in three]
        time.sleep(0.1)
    held = {t: s.owner for s in three for t in s.stats.positions}
    assert sorted(held) == topics
    assert {t: o for t, (_, o) in _positions(db, prefix).items()} == held
    sinks.stop_all()
    assert sum(s.stats.rows for s in three) == len(topics) * load.per_topic
    assert all(s.stats.fenced == 0 for s in three)
    _assert_mirror_equals_topics(base_settings, registry, db, topics, load.per_topic)
    # Stopped, each released what it held.
    assert {o for _, o in _positions(db, prefix).values()} == {None}


def test_topics_handed_over_in_rebalances_under_load_resume_at_their_positions_without_gap_or_duplicate(
        base_settings, registry, db, group):
    prefix = new_topic_name("group-handover")
    topics = [f"{prefix}.s{i:02d}" for i in range(24)]
    create_topics(base_settings, topics)
    load = Load(base_settings, registry, topics, per_round=25, rounds=40, pause_s=0.4).start()
    sinks = group(prefix, refresh_interval_ms=500, batch_size=200)
    first = sinks.start()
    while not first.stats.rows:
        assert not sinks.errors and not load.done.is_set(), sinks.errors
        time.sleep(0.05)
    second = sinks.start()  # the group rebalances: some of the first sink's topics move, mid-load
    deadline = time.monotonic() + 60
    while not (second.stats.rows and first.stats.handovers["revoked"]):
        assert time.monotonic() < deadline and not sinks.errors, sinks.errors
        time.sleep(0.05)
    third = sinks.start()
    while not third.stats.rows:
        assert time.monotonic() < deadline and not sinks.errors, sinks.errors
        time.sleep(0.05)
    assert not load.done.is_set(), "the load ended before the handovers: make it longer"
    sinks.stop(second)  # a clean leave: its topics go back to the others, still under load
    load.join()
    _wait_mirrored(db, prefix, _ends(base_settings, topics), sinks)
    sinks.stop_all()
    _assert_mirror_equals_topics(base_settings, registry, db, topics, load.per_topic)
    # Every handover was clean: the revoked sink committed its transaction in flight before the
    # topic moved, so no sink ever found a row moved under it.
    assert [s.stats.fenced for s in (first, second, third)] == [0, 0, 0]
    assert first.stats.handovers["revoked"] > 0 and second.stats.handovers["revoked"] > 0
    assert first.stats.handovers["assigned"] + third.stats.handovers["assigned"] > len(topics)  # second's came back
    assert sum(s.stats.rows for s in (first, second, third)) == len(topics) * load.per_topic


def test_sinks_with_until_end_stop_once_every_topic_is_mirrored_to_its_end_whichever_sink_mirrored_it(
        base_settings, registry, db, group):
    prefix = new_topic_name("group-until-end")
    topics = [f"{prefix}.s{i:02d}" for i in range(12)]
    create_topics(base_settings, topics)
    # Transactional: every topic ends with a commit marker, an offset no row has.
    load = Load(base_settings, registry, topics, per_round=50, rounds=2, transactional=True).run()
    ends = _ends(base_settings, topics)
    assert all(end == load.per_topic + 2 for end in ends.values())  # two markers each
    sinks = group(prefix)
    two = [sinks.start(until_end=True) for _ in range(2)]
    sinks.join()
    assert sum(s.stats.rows for s in two) == len(topics) * load.per_topic
    # Mirrored to the end: the positions stand past the final marker, where the log ends.
    assert {t: p for t, (p, _) in _positions(db, prefix).items()} == ends
    _assert_mirror_equals_topics(base_settings, registry, db, topics, load.per_topic)


# --- the claims and the fence, in Postgres ---------------------------------------------------


@pytest.fixture
def conn(base_settings) -> Iterator[psycopg.Connection]:
    with psycopg.connect(base_settings.database_conninfo()) as c:
        yield c


def _committed(db, topic) -> tuple[int, str | None]:
    row = db.execute("SELECT next_offset, owner FROM sink_positions WHERE topic = %s", (topic,)).fetchone()
    return int(row[0]), row[1]


def test_a_sink_whose_topic_another_sink_claimed_commits_nothing_of_it(base_settings, conn, db):
    a, b = new_topic_name("fence-a"), new_topic_name("fence-b")
    sink_owners.claim(conn, owner="sink-1", topics=[a, b])
    with conn.cursor() as cur:  # sink-1's transaction: both topics at 0, both held
        assert sink_owners.fenced(cur, owner="sink-1", expected={a: 0, b: 0}) == []
        cur.execute("UPDATE sink_positions SET next_offset = 7 WHERE topic = ANY(%s)", ([a, b],))
    conn.commit()
    # The group gives b to sink-2, which claims it at the position sink-1 left.
    with psycopg.connect(base_settings.database_conninfo()) as other:
        assert sink_owners.claim(other, owner="sink-2", topics=[b]) == {b: sink_owners.Row(position=7, owner="sink-1")}
    # sink-1, not yet told, tries its next transaction: fenced for b, and so for a too (one transaction).
    with conn.cursor() as cur:
        fences = sink_owners.fenced(cur, owner="sink-1", expected={a: 7, b: 7})
    conn.rollback()
    assert fences == [sink_owners.Fence(topic=b, expected=7, found=sink_owners.Row(position=7, owner="sink-2"))]
    assert _committed(db, a) == (7, "sink-1") and _committed(db, b) == (7, "sink-2")
    # A position moved under the same owner is a fence too (another writer of the topic).
    db.execute("UPDATE sink_positions SET next_offset = 9 WHERE topic = %s", (a,))
    with conn.cursor() as cur:
        assert [f.found for f in sink_owners.fenced(cur, owner="sink-1", expected={a: 7})] == [
            sink_owners.Row(position=9, owner="sink-1")]
    conn.rollback()


def test_a_claim_waits_for_the_transaction_the_previous_owner_has_in_flight(base_settings, conn, db):
    t = new_topic_name("claim-waits")
    sink_owners.claim(conn, owner="old", topics=[t])
    with conn.cursor() as cur:  # the old owner's transaction, in flight: rows locked, not yet committed
        assert sink_owners.fenced(cur, owner="old", expected={t: 0}) == []
        cur.execute("UPDATE sink_positions SET next_offset = 500 WHERE topic = %s", (t,))
        claimed: list[dict[str, sink_owners.Row]] = []

        def claim() -> None:
            with psycopg.connect(base_settings.database_conninfo()) as new:
                claimed.append(sink_owners.claim(new, owner="new", topics=[t]))

        thread = threading.Thread(target=claim)
        thread.start()
        time.sleep(1.0)
        assert thread.is_alive() and not claimed, "the claim did not wait for the old owner's transaction"
    conn.commit()
    thread.join(30)
    # The new owner resumes where the old owner's last transaction ended, not where it began.
    assert claimed == [{t: sink_owners.Row(position=500, owner="old")}]
    assert _committed(db, t) == (500, "new")
    with conn.cursor() as cur:  # and the old owner can write no more of it
        assert sink_owners.fenced(cur, owner="old", expected={t: 500}) != []
    conn.rollback()


def test_a_released_topic_is_released_only_by_its_owner(conn, db):
    t = new_topic_name("release")
    sink_owners.claim(conn, owner="first", topics=[t])
    sink_owners.claim(conn, owner="second", topics=[t])
    sink_owners.release(conn, owner="first", topics=[t])  # late: "second" holds it now
    assert _committed(db, t) == (0, "second")
    sink_owners.release(conn, owner="second", topics=[t])
    assert _committed(db, t) == (0, None)
