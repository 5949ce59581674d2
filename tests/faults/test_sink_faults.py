"""The sink killed with SIGKILL mid-work, and Postgres killed and restarted under a running sink.

Must show (issue 11): the sink mirrors through a Postgres restart without being restarted itself,
running as a role that cannot create tables.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import uuid

import psycopg
import pytest

from swarmlog.kafka.reader import high_watermark
from swarmlog.log.append import EventLog

from . import harness


def _loader(settings, total: int, spread_s: float, done: threading.Event, produced: list[str]) -> None:
    """``total`` events in 20 bursts spread over ``spread_s`` seconds."""
    burst = max(1, total // 20)
    with EventLog(settings=settings) as log:
        for i in range(total):
            eid = f"e{i:07d}"
            log.produce("agent.message", {"kind": "load", "body": str(i)}, agent=f"a{i % 5}", event_id=eid)
            produced.append(eid)
            if (i + 1) % burst == 0:
                log.flush()
                time.sleep(spread_s / 20)
        log.flush()
    done.set()


def _position(database_url: str, topic: str) -> int:
    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (topic,)).fetchone()
    except psycopg.OperationalError:
        return -2  # Postgres is away
    return -1 if row is None else int(row[0])


def test_the_sink_killed_mid_work_resumes_without_gap_or_duplicate(settings, registry, mirror_db, dev_cluster):
    total, kills = harness.scaled((200_000, 20), (20_000, 3))
    rng = random.Random(20261201)
    loaded = threading.Event()
    produced: list[str] = []
    loader = threading.Thread(target=_loader, args=(settings, total, harness.scaled(60.0, 10.0), loaded, produced))
    loader.start()
    killed = 0
    progress = []
    while killed < kills:
        before = _position(mirror_db, settings.topic)
        sink = harness.spawn(settings, "sink", database_url=mirror_db)
        # Kill it mid-work: once it has committed something, at a random moment shortly after.
        deadline = time.monotonic() + 60
        while _position(mirror_db, settings.topic) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.05, 0.5))
        sink.send_signal(signal.SIGKILL)
        sink.wait()
        killed += 1
        progress.append(_position(mirror_db, settings.topic))
    loader.join()
    during_load = sum(1 for p in progress if p < total)
    final = harness.run_cli(settings, "sink", "--until-end", database_url=mirror_db)
    assert final.returncode == 0, final.stderr
    topic_rows = harness.read_topic(settings, registry)
    audit = harness.audit_order(produced, topic_rows)
    audit += harness.audit_mirror(topic_rows, harness.read_mirror(mirror_db, settings.topic))
    harness.record(harness.Row(f"sink SIGKILL ×{kills} during {total:,} events", kills, audit,
                               f"{during_load} kills while loading, each after a commit; positions at the kills "
                               f"{progress[:3]}...{progress[-1]}"))
    assert audit.clean, audit
    assert len(set(progress)) >= min(3, kills), "the sink was killed idle, not mid-work"


@pytest.fixture
def sink_role(mirror_db: str, base_settings):
    """A login role with only the sink's group role: may insert into the mirror, nothing else."""
    name = f"sink_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE swarmlog_sink')
    info = psycopg.conninfo.conninfo_to_dict(mirror_db)
    info["user"] = name
    yield psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def test_the_sink_mirrors_through_postgres_restarts_without_being_restarted(settings, registry, mirror_db,
                                                                            sink_role, dev_cluster):
    restarts, total = harness.scaled((3, 60_000), (1, 10_000))
    with psycopg.connect(sink_role, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE sneaky (x int)")  # the role the sink runs as cannot create tables
    loaded = threading.Event()
    produced: list[str] = []
    loader = threading.Thread(target=_loader, args=(settings, total, harness.scaled(40.0, 15.0), loaded, produced))
    sink = harness.spawn(settings, "sink", database_url=sink_role)
    loader.start()
    outages = []
    for _ in range(restarts):
        deadline = time.monotonic() + 60
        start = _position(mirror_db, settings.topic)
        while _position(mirror_db, settings.topic) in (start, -1, -2) and time.monotonic() < deadline:
            time.sleep(0.1)
        dev_cluster.kill_postgres()
        time.sleep(3.0)
        outages.append(3.0 + dev_cluster.restart())
        assert sink.poll() is None, f"the sink exited when Postgres went away: {sink.communicate()[1][-3000:]}"
    loader.join()
    end = high_watermark(settings, settings.topic)
    deadline = time.monotonic() + 300
    while _position(mirror_db, settings.topic) < end:
        assert sink.poll() is None, f"the sink exited: {sink.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "the sink never caught up after Postgres came back"
        time.sleep(0.2)
    sink.send_signal(signal.SIGTERM)
    out, err = sink.communicate(timeout=60)
    assert sink.returncode == 0, err[-3000:]
    assert json.loads(out.splitlines()[-1])["position"] == end
    retried = err.count("connecting again in")
    assert err.count("is back: resuming at offset") >= restarts and retried >= restarts, err[-3000:]
    topic_rows = harness.read_topic(settings, registry)
    audit = harness.audit_order(produced, topic_rows)
    audit += harness.audit_mirror(topic_rows, harness.read_mirror(mirror_db, settings.topic))
    harness.record(harness.Row(
        f"Postgres SIGKILL (postmaster and backends) and restart under a running sink ×{restarts}, "
        f"{total:,} events", restarts, audit,
        f"one sink process throughout, as a role that cannot create tables; {retried} reconnect attempts logged; "
        f"Postgres away {', '.join(f'{o:.0f} s' for o in outages)}"))
    assert audit.clean, audit
