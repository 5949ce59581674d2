"""Three sinks of one pattern as a group, under load: one SIGKILLed and restarted, or SIGSTOPped past its session.

Must show (issue 28, item 9): three sink processes on one pattern of 300 topics, one SIGKILLed
and restarted twice while a load runs: the mirror equals the topics, 0 lost, 0 duplicated.

Beside the audit of every topic against the mirror, a trigger on ``sink_positions`` records
each position advance with the sink that made it (its connection's ``application_name``) and
the owner the row named at that moment: a sink that lost a topic must never advance it after
another sink claimed it.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from swarmlog.kafka.multi_reader import stable_ends
from swarmlog.schema.codec import Encoder

from ..integration.conftest import create_topics, read_topics
from . import harness

_WRITES = """
CREATE TABLE position_writes (topic text, writer text, owner text, next_offset bigint);
CREATE FUNCTION record_position_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.next_offset <> OLD.next_offset THEN
        INSERT INTO position_writes VALUES (NEW.topic, current_setting('application_name'), NEW.owner,
                                            NEW.next_offset);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER record_position_write BEFORE UPDATE ON sink_positions
    FOR EACH ROW EXECUTE FUNCTION record_position_write();
"""


class Group:
    """Sink processes of one consumer group on one pattern, each connecting as ``sink-<slot>``."""

    def __init__(self, settings, mirror_db: str, prefix: str, logs: Path) -> None:
        self.settings, self.mirror_db, self.prefix, self.logs = settings, mirror_db, prefix, logs
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.lives: dict[int, int] = {}  # pid -> slot
        self.finished: list[dict] = []  # the JSON each sink printed when it stopped

    def start(self, slot: int) -> subprocess.Popen[bytes]:
        info = psycopg.conninfo.conninfo_to_dict(self.mirror_db)
        info["application_name"] = f"sink-{slot}"
        env = harness.cli_env(self.settings, psycopg.conninfo.make_conninfo(**info))  # type: ignore[arg-type]
        life = len(self.lives)
        # Output to files: a pipe nobody reads while the sink runs for a minute could fill and block it.
        with open(self.logs / f"sink-{life}.out", "wb") as out, open(self.logs / f"sink-{life}.err", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "sink", "--topics-pattern",
                                     re.escape(self.prefix) + r"\..*", "--group", f"{self.prefix}-sinks",
                                     "--metadata-refresh-ms", "2000"], env=env, stdout=out, stderr=err)
        self.procs[slot] = proc
        self.lives[proc.pid] = slot
        return proc

    def _output(self, proc: subprocess.Popen[bytes]) -> tuple[str, str]:
        life = list(self.lives).index(proc.pid)
        return ((self.logs / f"sink-{life}.out").read_text(), (self.logs / f"sink-{life}.err").read_text())

    def check_running(self) -> None:
        for s, p in self.procs.items():
            assert p.poll() is None, f"sink {s} exited: {self._output(p)[1][-3000:]}"

    def holders(self) -> dict[int, int]:
        """slot -> topics whose row names a life of that slot now."""
        out: dict[int, int] = {}
        with psycopg.connect(self.mirror_db, autocommit=True) as conn:
            for (owner,) in conn.execute("SELECT owner FROM sink_positions WHERE owner IS NOT NULL"):
                slot = self.lives.get(int(owner.split("/")[1]))
                if slot is not None:
                    out[slot] = out.get(slot, 0) + 1
        return out

    def wait_holding(self, slot: int, limit: float = 60) -> None:
        deadline = time.monotonic() + limit
        while not self.holders().get(slot):
            self.check_running()
            assert time.monotonic() < deadline, f"sink {slot} never held a topic: {self.holders()}"
            time.sleep(0.1)

    def start_three(self) -> None:
        """Sinks 0, 1 and 2, each holding its share of the topics before this returns."""
        for slot in range(3):
            self.start(slot)
        for slot in range(3):
            self.wait_holding(slot)

    def kill_all(self) -> None:
        """Whatever still runs after a failed case: SIGKILL (and SIGCONT a stopped one, so that it dies)."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(timeout=30)

    def stop_all(self) -> str:
        """SIGTERM every sink; their stderr, in slot order (their final JSON in :attr:`finished`)."""
        err_all = ""
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for slot, p in sorted(self.procs.items()):
            p.wait(timeout=120)
            out, err = self._output(p)
            assert p.returncode == 0, f"sink {slot}: {err[-3000:]}"
            self.finished.append(json.loads(out.splitlines()[-1]))
            err_all += err
        return err_all


@pytest.fixture
def groups(base_settings, mirror_db: str, tmp_path: Path) -> Iterator[Callable[[str], Group]]:
    """Groups of sink processes for one case; whatever of them still runs afterwards is killed."""
    made: list[Group] = []

    def make(prefix: str) -> Group:
        made.append(Group(base_settings, mirror_db, prefix, tmp_path))
        return made[-1]

    yield make
    for g in made:
        g.kill_all()


class Loader:
    """The load on a thread: joined when the case ends, whether it passed or not."""

    def __init__(self, settings, registry, topics: list[str], per_topic: int, spread_s: float,
                 produced: dict[str, list[str]]) -> None:
        self.loaded = threading.Event()
        self.thread = threading.Thread(target=_load, args=(settings, registry, topics, per_topic, spread_s,
                                                           self.loaded, produced))

    def __enter__(self) -> Loader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join()


def _load(settings, registry, topics: list[str], per_topic: int, spread_s: float, done: threading.Event,
          produced: dict[str, list[str]]) -> None:
    """``per_topic`` events into every topic, in 20 rounds over ``spread_s`` seconds, from one producer."""
    enc = Encoder(registry.latest("agent.message"))
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 5})
    per_round = max(1, per_topic // 20)
    try:
        for r in range(20):
            for t in topics:
                for i in range(per_round):
                    n = r * per_round + i
                    eid = f"{t}-{n}"
                    payload = enc.schema.validate_payload({"kind": "load", "body": str(n)})
                    producer.produce(t, enc.encode_event(eid, "", f"a{i % 5}", None, [], payload),
                                     headers=enc.headers(f"a{i % 5}".encode(), None))
                    produced[t].append(eid)
            assert producer.flush(60) == 0
            time.sleep(spread_s / 20)
    finally:
        done.set()


def _wait_mirrored(settings, mirror_db: str, topics: list[str], group: Group, limit: float = 300) -> None:
    ends = stable_ends(AdminClient({"bootstrap.servers": settings.bootstrap_servers}), topics,
                       bootstrap=settings.bootstrap_servers)
    deadline = time.monotonic() + limit
    while True:
        with psycopg.connect(mirror_db, autocommit=True) as conn:
            at = dict(conn.execute("SELECT topic, next_offset FROM sink_positions WHERE topic = ANY(%s)",
                                   (topics,)).fetchall())
        behind = [t for t in topics if at.get(t, 0) < ends[t]]
        if not behind:
            return
        group.check_running()
        assert time.monotonic() < deadline, f"{len(behind)} topics not mirrored after {limit} s: {behind[:5]}"
        time.sleep(0.3)


def _audit(settings, registry, mirror_db: str, topics: list[str], produced: dict[str, list[str]]) -> harness.Audit:
    logs = read_topics(settings, registry, topics)
    mirror: dict[str, list[tuple[int, str]]] = {t: [] for t in topics}
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        for t, seq, eid in conn.execute("SELECT topic, seq, event_id FROM events ORDER BY topic, seq"):
            mirror.setdefault(t, []).append((int(seq), eid))
    audit = harness.Audit()
    for t in topics:
        audit += harness.audit_order(produced[t], logs[t])
        audit += harness.audit_mirror(logs[t], mirror[t])
    return audit


def _writes_by_others(mirror_db: str, group: Group) -> tuple[int, int]:
    """(position advances, those made by a sink other than the row's owner at that moment)."""
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        writes = conn.execute("SELECT writer, owner FROM position_writes").fetchall()
    foreign = sum(1 for writer, owner in writes
                  if owner is None or f"sink-{group.lives.get(int(owner.split('/')[1]))}" != writer)
    return len(writes), foreign


def _setup(settings, mirror_db: str, n_topics: int) -> tuple[str, list[str], dict[str, list[str]]]:
    prefix = f"swarmlog.group-fault-{uuid.uuid4().hex[:10]}"
    topics = [f"{prefix}.s{i:03d}" for i in range(n_topics)]
    create_topics(settings, topics)
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        conn.execute(_WRITES.encode())
    return prefix, topics, {t: [] for t in topics}


def test_three_sinks_of_one_group_mirror_300_topics_exactly_once_through_sigkills_and_restarts(
        base_settings, registry, mirror_db, dev_cluster, groups):
    n_topics, per_topic, spread_s = harness.scaled((300, 300, 60.0), (60, 100, 30.0))
    kills = 2
    rng = random.Random(20261228)
    prefix, topics, produced = _setup(base_settings, mirror_db, n_topics)
    group = groups(prefix)
    group.start_three()
    held_at_kills = []
    with Loader(base_settings, registry, topics, per_topic, spread_s, produced) as load:
        for _ in range(kills):
            # Kill sink 0 mid-work: holding topics, at a random moment of the load.
            group.wait_holding(0)
            time.sleep(rng.uniform(2.0, spread_s / (kills + 1)))
            held_at_kills.append(group.holders().get(0, 0))
            group.procs[0].send_signal(signal.SIGKILL)
            group.procs[0].wait()
            assert not load.loaded.is_set(), "the load ended before the kills: make it longer"
            group.start(0)  # restarted at once, as Kubernetes restarts a killed container
        group.wait_holding(0)
    _wait_mirrored(base_settings, mirror_db, topics, group)
    err = group.stop_all()
    audit = _audit(base_settings, registry, mirror_db, topics, produced)
    writes, foreign = _writes_by_others(mirror_db, group)
    assigned = sum(f["handovers"]["assigned"] for f in group.finished)
    fenced = sum(f["fenced"] for f in group.finished)
    harness.record(harness.Row(
        f"3 sinks of one group on {n_topics} topics, one SIGKILLed and restarted ×{kills}, "
        f"{n_topics * per_topic:,} events", kills, audit,
        f"the killed sink held {', '.join(map(str, held_at_kills))} topics at its kills; the three sinks alive "
        f"at the end were assigned {assigned} topics in their lives; {writes:,} position advances, {foreign} by "
        f"a sink the row did not name; {fenced} transactions fenced"))
    assert audit.clean, audit
    assert foreign == 0, "a sink advanced a topic it did not hold"
    assert len(topics) * per_topic == sum(len(v) for v in produced.values())
    assert "Traceback" not in err, err[-3000:]


def test_a_sink_stopped_past_its_session_commits_nothing_of_the_topics_another_sink_claimed(
        base_settings, registry, mirror_db, dev_cluster, groups):
    n_topics, per_topic, spread_s = harness.scaled((120, 300, 45.0), (30, 100, 30.0))
    prefix, topics, produced = _setup(base_settings, mirror_db, n_topics)
    group = groups(prefix)
    group.start_three()
    with Loader(base_settings, registry, topics, per_topic, spread_s, produced) as load:
        time.sleep(spread_s / 5)
        held = group.holders().get(0, 0)
        # Frozen with whatever it had decoded or in flight, past its session timeout (10 s): the group
        # gives its topics to the other two, which claim them; then it goes on from where it stopped.
        group.procs[0].send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 60
            while group.holders().get(0):
                assert time.monotonic() < deadline, f"the frozen sink's topics were never claimed: {group.holders()}"
                time.sleep(0.2)
            time.sleep(2.0)
        finally:
            group.procs[0].send_signal(signal.SIGCONT)
        assert not load.loaded.is_set(), "the load ended before the frozen sink resumed: make it longer"
        group.wait_holding(0)  # back in the group, with a share again
    _wait_mirrored(base_settings, mirror_db, topics, group)
    err = group.stop_all()
    audit = _audit(base_settings, registry, mirror_db, topics, produced)
    writes, foreign = _writes_by_others(mirror_db, group)
    frozen = group.finished[0]
    harness.record(harness.Row(
        f"3 sinks of one group on {n_topics} topics, one SIGSTOPped past its session timeout under load, then "
        f"resumed; {n_topics * per_topic:,} events", 1, audit,
        f"the frozen sink held {held} topics; on resuming it lost {frozen['handovers']['lost']} and had "
        f"{frozen['fenced']} transaction(s) fenced; {writes:,} position advances, {foreign} by a sink the row "
        f"did not name"))
    assert audit.clean, audit
    assert foreign == 0, "a sink advanced a topic another sink had claimed"
    assert frozen["handovers"]["lost"] + frozen["fenced"] > 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
