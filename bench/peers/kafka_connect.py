"""Kafka Connect with Debezium's JDBC sink connector, mirroring the sink benchmark's events into Postgres.

What a user would run instead of ``swarmlog sink``: a Kafka Connect worker (standalone,
``org.apache.kafka.connect.cli.ConnectStandalone``, the dev broker's Kafka version) with
``io.debezium.connector.jdbc.JdbcSinkConnector`` (Confluent's JDBC sink is not on Maven
Central). Both come from Maven (``connect-runtime.pom.xml``, ``jdbc-sink.pom.xml`` beside
this file), cached under ``~/.cache/swarmlog/bench-peers``.

The same events: the sink benchmark's 200k ``agent.message`` events are appended to a
swarmlog topic with ``EventLog``, then each is turned into the row ``swarmlog sink``
writes for it (``RowBuilder.build``: topic, seq, event_id, run_id, agent_id, event_type,
schema_version, recipient, causes, payload, logged_at) and produced, before the clock
starts, to a topic of Connect records: JSON with the schema inline (``JsonConverter``,
``schemas.enable=true``) — a JDBC sink needs typed records, and without a schema registry
(Confluent's Avro converter is not on Maven Central either) this is how Connect gets them.
The payload is a string field named ``io.debezium.data.Json`` (written as JSON),
``logged_at`` a Connect ``Timestamp``, ``causes`` an array of int64.

The same table: a table of the ``events`` table's shape (same columns, types, primary key
and indexes), fresh for every repetition. ``insert`` mode writes plain ``INSERT``s; ``upsert``
mode ``INSERT ... ON CONFLICT (topic, seq) DO UPDATE`` (a redelivered record overwrites
its row: Connect's sink tasks are at-least-once, so upsert is how a user gets an exact
mirror). Batches: ``batch.size`` and ``consumer.max.poll.records`` 5,000, as swarmlog's sink.

Measured from Postgres, the same way for both: a poller counts the rows every 50 ms;
rows/s = (rows at the end - rows at the first poll that saw any) / the time between
those polls. The worker's start-up (JVM, plugin scanning, the group join) is outside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer

from swarmlog.kafka.reader import LogReader
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_migrations import migrate
from swarmlog_connectors.postgres_rows import EVENT_COLUMNS, RowBuilder

from ..common import log

HERE = Path(__file__).resolve().parent
RUNTIME_POM = HERE / "connect-runtime.pom.xml"
PLUGIN_POM = HERE / "jdbc-sink.pom.xml"
CACHE = Path.home() / ".cache" / "swarmlog" / "bench-peers"
CONNECTOR_CLASS = "io.debezium.connector.jdbc.JdbcSinkConnector"
BATCH = 5000
POLL_S = 0.05

Progress = Callable[[str], None]


# --- jars -------------------------------------------------------------------------------------


def _key(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:12]


def _mvn(*args: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (`mvn`) is needed for the Kafka Connect peer: install it (apt-get install maven)")
    out = subprocess.run([mvn, "-B", "-q", *args], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"`mvn {' '.join(args)}` failed (exit {out.returncode}):\n"
                           f"{out.stdout[-3000:]}{out.stderr[-2000:]}")


def worker_classpath(progress: Progress = log) -> str:
    """The Connect worker's classpath, resolved by Maven once, then read from a cache file."""
    cache = CACHE / f"connect-runtime-{_key(RUNTIME_POM)}.classpath"
    if cache.is_file():
        cp = cache.read_text().strip()
        if cp and all(Path(j).is_file() for j in cp.split(os.pathsep)):
            return cp
    CACHE.mkdir(parents=True, exist_ok=True)
    progress(f"resolving Kafka Connect's jars with Maven (first run only; cached in {cache})")
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    _mvn("-f", str(RUNTIME_POM), "dependency:build-classpath", f"-Dmdep.outputFile={partial}")
    os.replace(partial, cache)
    return cache.read_text().strip()


def plugin_path(progress: Progress = log) -> Path:
    """A plugin.path holding one plugin folder: the JDBC sink connector and its runtime dependencies."""
    root = CACHE / f"plugins-{_key(PLUGIN_POM)}"
    done = root / ".complete"
    if done.is_file():
        return root
    progress(f"fetching the JDBC sink connector's jars with Maven (first run only; into {root})")
    shutil.rmtree(root, ignore_errors=True)
    target = root / "debezium-connector-jdbc"
    # runtime scope leaves out what the connector declares `provided`: Connect's own API,
    # which the worker supplies (a second copy in the plugin's loader would not link).
    _mvn("-f", str(PLUGIN_POM), "dependency:copy-dependencies", f"-DoutputDirectory={target}",
         "-DincludeScope=runtime")
    done.write_text("")
    return root


def versions() -> dict[str, str]:
    def prop(pom: Path, name: str) -> str:
        text = pom.read_text()
        return text.split(f"<{name}>", 1)[1].split("<", 1)[0]

    return {"kafka_connect": prop(RUNTIME_POM, "kafka.version"),
            "debezium_connector_jdbc": prop(PLUGIN_POM, "debezium.version"),
            "postgresql_jdbc": prop(PLUGIN_POM, "postgresql.version")}


# --- the records ------------------------------------------------------------------------------

_FIELDS: list[dict[str, Any]] = [
    {"field": "topic", "type": "string", "optional": False},
    {"field": "seq", "type": "int64", "optional": False},
    {"field": "event_id", "type": "string", "optional": False},
    {"field": "run_id", "type": "string", "optional": False},
    {"field": "agent_id", "type": "string", "optional": False},
    {"field": "event_type", "type": "string", "optional": False},
    {"field": "schema_version", "type": "int32", "optional": False},
    {"field": "read_version", "type": "int32", "optional": True},
    {"field": "recipient", "type": "string", "optional": True},
    {"field": "causes", "type": "array", "items": {"type": "int64", "optional": False}, "optional": False},
    {"field": "payload", "type": "string", "optional": False, "name": "io.debezium.data.Json"},
    {"field": "logged_at", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp",
     "version": 1},
]
_SCHEMA = {"type": "struct", "name": "swarmlog.event", "optional": False, "fields": _FIELDS}
assert tuple(f["field"] for f in _FIELDS) == EVENT_COLUMNS


def connect_records(s: Settings, registry: SchemaRegistry, src: str, dst: str, *, label: str) -> int:
    """Produce to ``dst`` one Connect JSON record per event of ``src``: the row swarmlog's sink
    writes for it (with ``label`` as its topic column). Returns the number of records."""
    builder = RowBuilder(topic=label, decoder=Decoder(registry))
    producer = Producer(s.kafka_config({"enable.idempotence": True, "acks": "all", "linger.ms": 20,
                                        "compression.type": "lz4", "batch.size": 1_000_000,
                                        "queue.buffering.max.messages": 1_000_000}))
    n = 0
    with LogReader(settings=s, topic=src) as reader:
        reader.assign(0)
        for batch in reader.batches(batch_size=BATCH):
            rows, dead = builder.build(batch)
            if dead:
                raise RuntimeError(f"{len(dead)} messages of {src} do not decode")
            for r in rows:
                value = dict(zip(EVENT_COLUMNS, r, strict=True))
                value["causes"] = [int(x) for x in value["causes"].strip("{}").split(",") if x]
                ts: datetime | None = value["logged_at"]
                value["logged_at"] = None if ts is None else int(ts.timestamp() * 1000)
                producer.produce(dst, json.dumps({"schema": _SCHEMA, "payload": value}).encode(),
                                 f"{value['topic']}:{value['seq']}".encode(), partition=0)
                n += 1
                if n % 50_000 == 0:
                    producer.flush(60)
    if producer.flush(60):
        raise RuntimeError(f"records for {dst} still queued after 60 s")
    return n


# --- the table --------------------------------------------------------------------------------


def create_table(conn: psycopg.Connection[Any], table: str) -> None:
    """A table of the ``events`` table's shape: the same columns, key and indexes."""
    migrate(conn)
    conn.execute(f"CREATE TABLE {table} (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                 "INCLUDING INDEXES)")


def count_rows(conn: psycopg.Connection[Any], table: str, where: str = "", params: tuple[Any, ...] = ()) -> int:
    return conn.execute(f"SELECT count(*) FROM {table} {where}", params).fetchone()[0]  # type: ignore[index]


def table_digest(conn: psycopg.Connection[Any], table: str, topic: str) -> str:
    """One md5 over every mirrored value of ``topic``'s rows in offset order: equal tables, equal digests."""
    return conn.execute(
        f"SELECT md5(string_agg(concat_ws('|', seq, event_id, run_id, agent_id, event_type, schema_version, "
        f"recipient, causes::text, payload::text, extract(epoch FROM logged_at)), E'\\n' ORDER BY seq)) "
        f"FROM {table} WHERE topic = %s", (topic,)).fetchone()[0]  # type: ignore[index]


def poll_until(conn: psycopg.Connection[Any], count: Callable[[], int], n: int, *,
               alive: Callable[[], None], timeout_s: float = 900) -> float:
    """Seconds from the first poll that saw a row to the first that saw ``n``; rows/s = seen rows / that."""
    deadline = time.monotonic() + timeout_s
    first: tuple[float, int] | None = None
    while True:
        t = time.perf_counter()
        got = count()
        if got and first is None:
            first = (t, got)
        if got >= n:
            assert first is not None
            if got != n:
                raise RuntimeError(f"{got} rows for {n} events")
            seconds = t - first[0]
            # Rows already there at the first sighting are not counted: scale the span to all n.
            return seconds * n / max(1, n - first[1]) if first[1] < n else POLL_S
        alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{got} of {n} rows after {timeout_s:.0f} s")
        time.sleep(POLL_S)


# --- the worker -------------------------------------------------------------------------------


def connector_properties(*, name: str, topic: str, table: str, mode: str, database_url: str) -> dict[str, str]:
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    url = f"jdbc:postgresql://{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
    props = {
        "name": name,
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "topics": topic,
        "connection.url": url,
        "connection.username": str(info.get("user", "")),
        "connection.password": str(info.get("password", "")),
        "insert.mode": mode,
        "primary.key.mode": "record_value",
        "primary.key.fields": "topic,seq",
        "schema.evolution": "none",
        "collection.name.format": table,
        "batch.size": str(BATCH),
        "consumer.override.max.poll.records": str(BATCH),
    }
    return props


def worker_properties(*, bootstrap: str, plugins: Path, offsets: Path) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "offset.storage.file.filename": str(offsets),
        "plugin.path": str(plugins),
        "connector.client.config.override.policy": "All",
        "consumer.max.poll.records": str(BATCH),
        "consumer.auto.offset.reset": "earliest",
    }


def _write_props(path: Path, props: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def start_worker(s: Settings, *, topic: str, table: str, mode: str, workdir: Path) -> subprocess.Popen[bytes]:
    from swarmlog.dev.kafka import LOG4J2_CONFIG, require_java

    java = require_java()
    classpath = worker_classpath()
    plugins = plugin_path()
    worker = workdir / "worker.properties"
    connector = workdir / "connector.properties"
    _write_props(worker, worker_properties(bootstrap=s.bootstrap_servers, plugins=plugins,
                                           offsets=workdir / "connect.offsets"))
    _write_props(connector, connector_properties(name=f"bench-jdbc-{uuid.uuid4().hex[:8]}", topic=topic,
                                                 table=table, mode=mode, database_url=s.database_url))
    logs = workdir / "logs"
    logs.mkdir()
    argv = [java, "-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-Dkafka.logs.dir={logs}", "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(connector)]
    return subprocess.Popen(argv, env={**os.environ, "CLASSPATH": classpath},
                            stdout=(workdir / "console.log").open("wb"), stderr=subprocess.STDOUT)


def stop_worker(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_log_tail(workdir: Path) -> str:
    parts = []
    for f in (workdir / "console.log", workdir / "logs" / "server.log"):
        if f.is_file():
            parts.append(f.read_text(errors="replace")[-4000:])
    return "\n".join(parts)


def mirror(s: Settings, *, topic: str, n: int, mode: str, label: str, expect: str) -> float:
    """Seconds for Kafka Connect to mirror the ``n`` records of ``topic`` into a fresh table (see the
    module doc); the table must then hold what swarmlog's sink wrote for ``label`` (digest ``expect``)."""
    table = f"bench_connect_{mode}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        create_table(conn, table)
        workdir = Path(tempfile.mkdtemp(prefix="bench-connect-"))
        worker = start_worker(s, topic=topic, table=table, mode=mode, workdir=workdir)

        def alive() -> None:
            if worker.poll() is not None:
                raise RuntimeError(f"the Connect worker exited (rc {worker.returncode}):\n{worker_log_tail(workdir)}")
            errors = [line for line in _server_log(workdir) if "ERROR" in line and "WorkerSinkTask" in line]
            if errors:
                raise RuntimeError("the JDBC sink task failed:\n" + "\n".join(errors[-5:]))

        ok = False
        try:
            seconds = poll_until(conn, lambda: count_rows(conn, table), n, alive=alive)
            got = table_digest(conn, table, label)
            if got != expect:
                raise RuntimeError(f"Kafka Connect's table {table} differs from swarmlog's mirror of {label}")
            ok = True
            return seconds
        finally:
            stop_worker(worker)
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            if ok:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                log(f"Kafka Connect's logs are kept in {workdir}")


def _server_log(workdir: Path) -> list[str]:
    f = workdir / "logs" / "server.log"
    return f.read_text(errors="replace").splitlines() if f.is_file() else []
