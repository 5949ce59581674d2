"""The Postgres mirror: equal to the topic, exactly once, through SIGKILLs and garbage."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog
from swarmlog.schema.codec import Decoder
from swarmlog_connectors.postgres_rows import RowBuilder
from swarmlog_connectors.postgres_sink import PostgresSink

from ..conftest import unchecked_event
from .conftest import read_log, subprocess_env


def _topic_contents(settings, registry) -> list[tuple]:
    return [(r.offset, r.record["event_id"], r.record["agent_id"], r.event_type, r.record["to"], r.record["causes"],
             r.record["payload"]) for r in read_log(settings, registry)]


def _mirror_contents(db, topic) -> list[tuple]:
    return [tuple(r) for r in db.execute(
        "SELECT seq, event_id, agent_id, event_type, recipient, causes, payload FROM events "
        "WHERE topic = %s ORDER BY seq", (topic,)).fetchall()]


def test_mirror_equals_topic_after_the_sink_catches_up(settings, registry, db):
    with EventLog(settings=settings, run_id="r1") as log:
        for i in range(500):  # each naming the one before as its cause, produced before it is written
            value, key, headers = unchecked_event(registry, "agent.message", {"kind": "k", "body": f"ü-{i}\t\\n"},
                                                  agent=f"a{i % 3}", to=None if i % 7 == 0 else f"a{(i + 1) % 3}",
                                                  causes=[i - 1] if i else [], run_id="r1")
            log.produce_raw(value, key=key, headers=headers)
        log.flush()
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert stats.rows == 500 and stats.dead_letters == 0
    assert _mirror_contents(db, settings.topic) == _topic_contents(settings, registry)
    run_ids = db.execute("SELECT DISTINCT run_id FROM events WHERE topic = %s", (settings.topic,)).fetchall()
    assert run_ids == [("r1",)]


def test_binary_copy_writes_every_column_as_the_row_tuples_have_it(settings, registry, db):
    # The hot path writes rows in Postgres' binary COPY format by hand; the slow path INSERTs
    # RowBuilder.build's tuples through psycopg. Both must store the same values, including
    # NULL recipients, multi-element causes, non-ASCII, tabs and backslashes, and logged_at.
    # Names outside the grammar swarmlog's writers check (a tab, a newline): what another producer may
    # write, and the sink must mirror as it is.
    with EventLog(settings=settings) as log:
        for i in range(2000):
            value, key, headers = unchecked_event(
                registry, "agent.message", {"kind": "k\n", "body": f"ü-{i}\t\\n\r\"'{'x' * (i % 300)}"},
                agent=f"ä{i % 3}\\", to=None if i % 7 == 0 else f"a{(i + 1) % 3}",
                causes=list(range(max(0, i - i % 4), i)), run_id="rün\t1\\x")
            log.produce_raw(value, key=key, headers=headers)
        log.flush()
    stats = PostgresSink(settings=settings, registry=registry, batch_size=300).run(until_end=True)
    assert stats.rows == 2000 and stats.dead_letters == 0
    builder = RowBuilder(topic=settings.topic, decoder=Decoder(registry))
    expected = []
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches():
            expected += builder.build(batch)[0]
    mirrored = db.execute(
        "SELECT topic, seq, event_id, run_id, agent_id, event_type, schema_version, read_version, recipient, "
        "causes::text, payload, logged_at FROM events WHERE topic = %s ORDER BY seq", (settings.topic,)).fetchall()
    assert len(mirrored) == len(expected) == 2000
    for got, want in zip(mirrored, expected, strict=True):
        assert got == (*want[:10], json.loads(want[10]), want[11])


def test_sink_resumes_without_gap_or_duplicate_after_sigkill(settings, registry, db):
    """100k events loaded while the sink is SIGKILLed at random points, then restarted."""
    total = 100_000
    rng = random.Random(20261130)
    loaded = threading.Event()
    killed = threading.Event()

    def load() -> None:
        with EventLog(settings=settings) as log:
            for i in range(total):
                log.produce("agent.message", {"kind": "load", "body": str(i)}, agent=f"a{i % 5}")
                if i % 5000 == 0:
                    log.flush()
                    # Spread the load over the kills: at first one burst per kill (a sink's start
                    # takes seconds on a busy machine), then a burst a second.
                    if i < 30_000:
                        killed.wait(60)
                        killed.clear()
                    else:
                        time.sleep(1.0)
            log.flush()
        loaded.set()

    loader = threading.Thread(target=load)
    loader.start()
    env = subprocess_env(settings)
    kills_during_load = 0
    positions = []
    def position() -> int:
        row = db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (settings.topic,)).fetchone()
        return -1 if row is None else int(row[0])

    while kills_during_load < 5 or len(positions) < 6:
        before = position()
        sink = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "sink"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Kill it mid-work: once it has committed something (its start-up time depends on the
        # machine's load, not on the sink), at a random moment shortly after.
        deadline = time.monotonic() + 20
        while position() == before and not loaded.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.05, 0.6))
        loading = not loaded.is_set()
        sink.send_signal(signal.SIGKILL)
        sink.wait()
        killed.set()
        kills_during_load += loading
        positions.append(db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s",
                                    (settings.topic,)).fetchone())
        assert len(positions) < 30, "the load finished before five kills could land in it"
    loader.join()
    assert loaded.is_set()
    # The killed sinks made progress between kills: they were killed mid-work, not idle.
    assert len({p for p in positions if p}) >= 3, positions
    final = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    count, distinct, lo, hi = db.execute(
        "SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events WHERE topic = %s",
        (settings.topic,)).fetchone()
    assert count == distinct == total
    assert (lo, hi) == (0, total - 1)  # no transactions on this topic: offsets are contiguous here
    bodies = [r[0] for r in db.execute(
        "SELECT payload->>'body' FROM events WHERE topic = %s ORDER BY seq", (settings.topic,)).fetchall()]
    assert sorted(map(int, bodies)) == list(range(total))


def test_garbage_lands_in_dead_letters_and_the_sink_keeps_going(settings, registry, db):
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "before"}, agent="a")
        log.produce_raw(b"\x00garbage that is not avro", key=b"k1", headers=[("x", b"y")])
        log.produce_raw(b"\xc3\x01" + b"\xee" * 8 + b"unknown schema")
        log.flush()
        log.append("agent.message", {"kind": "k", "body": "after"}, agent="a")
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert stats.rows == 2 and stats.dead_letters == 2
    dead = db.execute("SELECT seq, error, raw, key, header_keys, header_values FROM dead_letters WHERE topic = %s "
                      "ORDER BY seq", (settings.topic,)).fetchall()
    assert [d[0] for d in dead] == [1, 2]
    assert bytes(dead[0][2]) == b"\x00garbage that is not avro" and bytes(dead[0][3]) == b"k1"
    assert (dead[0][4], dead[0][5]) == ([b"x"], [b"y"])
    assert "eeeeeeeeeeeeeeee" in dead[1][1]  # the unknown fingerprint is named
    assert [r[0] for r in db.execute("SELECT payload->>'body' FROM events WHERE topic = %s ORDER BY seq",
                                     (settings.topic,))] == ["before", "after"]


def test_a_row_postgres_refuses_is_dead_lettered_not_a_stuck_sink(settings, registry, db):
    # Avro strings may hold NUL; Postgres jsonb cannot. The batch is redone row by row.
    with EventLog(settings=settings) as log:
        for i in range(10):
            log.produce("agent.message", {"kind": "k", "body": "nul\x00" if i == 4 else str(i)}, agent="a")
        log.flush()
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert stats.rows == 9 and stats.dead_letters == 1
    assert db.execute("SELECT seq FROM dead_letters WHERE topic = %s", (settings.topic,)).fetchall() == [(4,)]
    assert db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s",
                      (settings.topic,)).fetchone() == (10,)


def test_a_refused_row_among_grouped_batches_costs_only_that_row(settings, registry, db):
    # Small batches: while one transaction commits, the next ones are decoded and grouped into
    # one transaction; the row-by-row redo must cover every batch of the group.
    with EventLog(settings=settings) as log:
        for i in range(3000):
            log.produce("agent.message", {"kind": "k", "body": "nul\x00" if i == 2222 else str(i)}, agent="a")
        log.flush()
    stats = PostgresSink(settings=settings, registry=registry, batch_size=50).run(until_end=True)
    assert stats.rows == 2999 and stats.dead_letters == 1
    assert db.execute("SELECT seq FROM dead_letters WHERE topic = %s", (settings.topic,)).fetchall() == [(2222,)]
    count, distinct = db.execute("SELECT count(*), count(DISTINCT seq) FROM events WHERE topic = %s",
                                 (settings.topic,)).fetchone()
    assert count == distinct == 2999
    assert db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s",
                      (settings.topic,)).fetchone() == (3000,)


def test_two_sinks_on_one_topic_still_mirror_exactly_once(settings, registry, db):
    with EventLog(settings=settings) as log:
        for i in range(20_000):
            log.produce("agent.message", {"kind": "k", "body": str(i)}, agent="a")
        log.flush()
    sinks = [PostgresSink(settings=settings, registry=registry, batch_size=500) for _ in range(2)]
    errors: list[BaseException] = []

    def run(s):
        try:
            s.run(until_end=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    count, distinct = db.execute("SELECT count(*), count(DISTINCT seq) FROM events WHERE topic = %s",
                                 (settings.topic,)).fetchone()
    assert count == distinct == 20_000
    assert sum(s.stats.rows for s in sinks) == 20_000  # each batch committed by exactly one of them


def test_sink_exits_cleanly_on_sigterm_after_its_batch(settings, registry, db):
    with EventLog(settings=settings) as log:
        for i in range(1000):
            log.produce("agent.message", {"kind": "k", "body": str(i)}, agent="a")
        log.flush()
    proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "sink"], env=subprocess_env(settings),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s", (settings.topic,)).fetchone()
        if row and row[0] == 1000:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["position"] == 1000


# --- poison messages, whole dead letters ------------------------------------------------------

POISON_HEADERS = [("sl.type", b"agent.message"), ("nul", b"a\x00b"), ("bytes", b"\xff\xfe\x00\x80"), ("none", None),
                  *[("dup", str(i).encode()) for i in range(200)], ("nul", b"\x00")]


def test_a_poison_message_with_a_nul_header_is_dead_lettered_whole_and_everything_after_it_is_mirrored(
        settings, registry, db):
    """The sink as users run it (`swarmlog sink`), twice: the poison message never stops it."""
    with EventLog(settings=settings) as log:
        for i in range(10):
            log.produce("agent.message", {"kind": "k", "body": f"before {i}"}, agent="a")
        log.produce_raw(b"not avro \x00 \xff at all", key=b"k\x00ey", headers=POISON_HEADERS)
        for i in range(1000):
            log.produce("agent.message", {"kind": "k", "body": f"after {i}"}, agent="a")
        offsets = log.flush()
    poison = offsets[10]
    for _ in range(2):  # a restart finds nothing left to choke on
        done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"],
                              env=subprocess_env(settings), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    (seq, error, raw, key, keys, values), = db.execute(
        "SELECT seq, error, raw, key, header_keys, header_values FROM dead_letters WHERE topic = %s",
        (settings.topic,)).fetchall()
    assert seq == poison and "Avro" in error
    assert bytes(raw) == b"not avro \x00 \xff at all" and bytes(key) == b"k\x00ey"
    assert [(k.decode(), v) for k, v in zip(keys, values, strict=True)] == POISON_HEADERS
    mirrored = [r[0] for r in db.execute("SELECT payload->>'body' FROM events WHERE topic = %s ORDER BY seq",
                                         (settings.topic,))]
    assert mirrored == [f"before {i}" for i in range(10)] + [f"after {i}" for i in range(1000)]
    assert db.execute("SELECT next_offset FROM sink_positions WHERE topic = %s",
                      (settings.topic,)).fetchone() == (offsets[-1] + 1,)


def test_a_refused_row_and_a_poison_message_in_one_batch_both_land_in_dead_letters(settings, registry, db):
    # The row-by-row redo (a jsonb NUL in an event) also writes the poison message's letter,
    # each in a savepoint.
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "nul\x00"}, agent="a")
        log.produce_raw(b"\x01garbage", headers=[("h", b"\x00")])
        log.append("agent.message", {"kind": "k", "body": "fine"}, agent="a")
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert (stats.rows, stats.dead_letters) == (1, 2)
    assert db.execute("SELECT seq, header_values FROM dead_letters WHERE topic = %s ORDER BY seq",
                      (settings.topic,)).fetchall() == [(0, [b"agent.message", b"3", b"a"]), (1, [b"\x00"])]


# --- migrations and least privilege -------------------------------------------------------------


def _url_as(url: str, user: str) -> str:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(url)
    info["user"] = user
    return psycopg.conninfo.make_conninfo(**info)


def test_the_sink_refuses_an_unmigrated_database_and_names_the_command(settings, fresh_database):
    env = {**subprocess_env(settings), "SWARMLOG_DATABASE_URL": fresh_database}
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "x"}, agent="a")
    refused = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 70 and "swarmlog mirror migrate" in refused.stderr, refused.stderr
    status = subprocess.run([sys.executable, "-m", "swarmlog.cli", "mirror", "status"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and json.loads(status.stdout)["schema_version"] == 0
    migrated = subprocess.run([sys.executable, "-m", "swarmlog.cli", "mirror", "migrate"], env=env,
                              capture_output=True, text=True, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    assert all(f"applied version {v}" in migrated.stdout for v in (1, 2, 3))
    again = subprocess.run([sys.executable, "-m", "swarmlog.cli", "mirror", "migrate"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "applied version" not in again.stdout
    done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["rows"] == 1, done.stderr


def test_version_1_dead_letters_keep_their_headers_through_the_migration(fresh_database):
    import psycopg

    from swarmlog_connectors.postgres_migrations import migrate, migrations

    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(migrations()[0].sql.encode())  # a database the old sink set up itself
        conn.execute("INSERT INTO dead_letters VALUES ('t', 7, 'bad', '\\x00', NULL, '{\"b\": \"2\", \"a\": null}')")
        assert [m.version for m in migrate(conn)] == [m.version for m in migrations()]  # unrecorded: all run
        assert conn.execute("SELECT header_keys, header_values, raw FROM dead_letters").fetchone() == (
            [b"a", b"b"], [None, b"2"], b"\x00")


def test_the_sink_runs_as_a_role_that_can_only_insert_and_cannot_create_tables(settings, registry, db):
    import psycopg

    user = f"sink_{settings.topic.rsplit('-', 1)[-1]}"
    db.execute(f'CREATE ROLE "{user}" LOGIN IN ROLE swarmlog_sink')
    try:
        url = _url_as(settings.database_url, user)
        with psycopg.connect(url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("CREATE TABLE sneaky (x int)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # it sees offsets and ids, not contents
                conn.execute("SELECT payload FROM events")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM sink_positions")
        with EventLog(settings=settings) as log:
            for i in range(100):
                log.produce("agent.message", {"kind": "k", "body": str(i)}, agent="a")
            log.produce_raw(b"garbage", headers=[("x", b"\x00")])
            log.flush()
        env = {**subprocess_env(settings), "SWARMLOG_DATABASE_URL": url}
        done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--until-end"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1]) == {"position": 101, "rows": 100, "dead_letters": 1}
    finally:
        db.execute(f'DROP OWNED BY "{user}"')
        db.execute(f'DROP ROLE "{user}"')


def test_a_message_whose_routing_header_lies_is_dead_lettered_by_name(settings, registry, db):
    from swarmlog.schema.codec import Encoder

    enc = Encoder(registry.latest("agent.message"))
    value = enc.encode_event("op-1", "", "alice", "bob", [], {"kind": "k", "body": "to bob"})
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "before"}, agent="a")
        log.produce_raw(value, key=b"alice", headers=enc.headers(b"alice", b"carol"))
        log.append("agent.message", {"kind": "k", "body": "after"}, agent="a")
    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert (stats.rows, stats.dead_letters) == (2, 1)
    (seq, error, raw), = db.execute("SELECT seq, error, raw FROM dead_letters WHERE topic = %s",
                                    (settings.topic,)).fetchall()
    assert seq == 1 and bytes(raw) == value
    assert "header sl.to says 'carol', but its envelope says 'bob'" in error
