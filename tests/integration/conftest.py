"""Session fixtures: real Kafka and real Postgres, started once per test session.

Where the services come from, in order (``swarmlog.dev.containers.service_source``):

1. ``SWARMLOG_BOOTSTRAP_SERVERS`` and ``SWARMLOG_DATABASE_URL`` set: use that
   cluster (a real one, or one started by ``swarmlog dev up``).
2. No ``SWARMLOG_*`` service variable set and a Docker engine reachable: a Kafka 4.x
   broker and a Postgres in containers (testcontainers), removed when the session ends.
3. Otherwise the project's own local cluster (``swarmlog dev up``: Kafka from
   Maven Central's jars, Postgres from the machine's binaries), reused if it
   already runs.

A service that cannot be reached fails the session; nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

import psycopg
import pytest

from swarmlog.kafka import KafkaBackend
from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_migrations import migrate

from ..conftest import REPO, new_topic_name, subprocess_env

__all__ = ["REPO", "LogRecord", "create_topics", "new_topic_name", "read_log", "read_topics", "spawn_agent_process",
           "subprocess_env"]

_SPAWNED: list[subprocess.Popen[str]] = []


def spawn_agent_process(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """An agent process (``swarmlog run ... --agent A``) that does not outlive the test that spawned it."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _SPAWNED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_agent_outlives_its_test() -> Iterator[None]:
    """Kill what :func:`spawn_agent_process` started and is still running when the test ends. A test stops its
    agents itself, but a failed assertion skips that: its agents would run on for the rest of the session,
    against a topic nobody reads, taking the CPU the next tests time their waits by."""
    yield
    while _SPAWNED:
        proc = _SPAWNED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="session")
def base_settings() -> Iterator[Settings]:
    from swarmlog.dev import containers

    source = containers.service_source(os.environ, docker_reachable=containers.docker_reachable)
    if source is containers.ServiceSource.ENVIRONMENT:
        yield _migrated(Settings.from_env())
        return
    with ExitStack() as stack:
        if source is containers.ServiceSource.CONTAINERS:
            found = stack.enter_context(containers.containers())
            bootstrap, database = found.bootstrap_servers, found.database_url
        else:
            from swarmlog.dev import cluster

            info = cluster.up()
            bootstrap, database = info.bootstrap_servers, info.database_url
        # Subprocesses the tests start (the sink under SIGKILL, the CLI) find the same cluster.
        os.environ["SWARMLOG_BOOTSTRAP_SERVERS"] = bootstrap
        os.environ["SWARMLOG_DATABASE_URL"] = database
        yield _migrated(Settings.from_env())


def _migrated(settings: Settings) -> Settings:
    # The mirror's tables, made as `swarmlog mirror migrate` makes them: the sink creates nothing.
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        migrate(conn)
    return settings


@pytest.fixture(scope="session")
def three_brokers() -> Iterator[Any]:
    """A dev cluster of its own with three brokers and a SASL listener (`dev up --brokers 3 --sasl`),
    for the tests that kill brokers or log in; started on first use, stopped and deleted at the end."""
    from .dev_clusters import spare_cluster

    with spare_cluster(brokers=3, sasl=True) as spare:
        yield spare


@pytest.fixture
def topic(base_settings: Settings) -> str:
    """A fresh single-partition topic for one test."""
    name = new_topic_name()
    create_topic(base_settings, name)
    return name


@pytest.fixture
def settings(base_settings: Settings, topic: str) -> Settings:
    return base_settings.model_copy(update={"topic": topic})


@pytest.fixture
def backend(base_settings: Settings) -> KafkaBackend:
    return KafkaBackend(base_settings)


@pytest.fixture
def db(base_settings: Settings) -> Iterator[psycopg.Connection]:
    with psycopg.connect(base_settings.database_conninfo(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def fresh_database(base_settings: Settings) -> Iterator[str]:
    """The URL of a new, empty database on the same server (dropped afterwards)."""
    name = f"swarmlog_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_settings.database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(base_settings.database_url)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    with psycopg.connect(base_settings.database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class LogRecord(NamedTuple):
    offset: int
    event_type: str
    record: dict[str, Any]
    headers: list[tuple[str, bytes]]


def read_log(settings: Settings, registry: SchemaRegistry) -> list[LogRecord]:
    """Every event of the settings' topic, decoded, in offset order (read_committed)."""
    decoder = Decoder(registry)
    out = []
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                writer, rec = decoder.decode(m.value(), m.offset())
                out.append(LogRecord(m.offset(), writer.event_type, rec, m.headers() or []))
    return out


def create_topics(settings: Settings, names: list[str], *, partitions: int = 1) -> None:
    """Many topics in one CreateTopics request, then wait until the metadata shows them all."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from swarmlog.kafka.topic import TOPIC_CONFIG

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1, config=TOPIC_CONFIG)
                                   for n in names], operation_timeout=120, request_timeout=120)
    for f in futures.values():
        f.result()
    deadline = time.monotonic() + 120
    while not set(names) <= set(admin.list_topics(timeout=30).topics):
        assert time.monotonic() < deadline, "created topics never showed in the metadata"
        time.sleep(0.1)


def read_topics(settings: Settings, registry: SchemaRegistry, topics: list[str]) -> dict[str, list[tuple[int, str]]]:
    """(offset, event id) of every event of each topic, in offset order (read_committed), through one
    consumer: hundreds of topics without a consumer each."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from swarmlog.kafka.config import consumer

    decoder = Decoder(registry)
    out: dict[str, list[tuple[int, str]]] = {t: [] for t in topics}
    c = consumer(settings)
    try:
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        left = set(topics)
        while left:
            for m in c.consume(10_000, 1.0):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    left.discard(m.topic())
                    continue
                out[m.topic()].append((m.offset(), decoder.decode(m.value(), m.offset())[1]["event_id"]))
    finally:
        c.close()
    return out


# --- helm (`make tools` builds it into .tools/bin) -----------------------------------------


def _find_helm() -> str:
    local = REPO / ".tools" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("helm")
    if found:
        return found
    pytest.fail(
        f"helm is not installed (looked for {local} and on PATH): run `make tools`, "
        f"which builds it with helm/install-helm.sh",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def helm() -> list[str]:
    return [_find_helm()]


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's config, cache and data kept out of the user's home."""
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    for var in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
        env[var] = str(home / var.lower())
    return env


def sigkill_in_a_step_then_run_again(*, settings: Settings, swarm: Any, target: str, env: dict[str, str],
                                     reached: Callable[[], bool], between: Callable[[], None]) -> None:
    """The framework swarms' crash test: start a run of ``target`` (``module:swarm``) as a ``swarmlog run``
    process, SIGKILL it once ``reached()`` says its step is inside its tool (its first model call
    answered), call ``between()`` (let the tool go, check what the first life did), and run it again to
    its end, which must succeed."""
    cmd = [sys.executable, "-m", "swarmlog.cli", "run", target, "--until-quiet", "2"]
    from swarmlog.runtime import start_run
    start_run(settings=settings, swarm=swarm, run_id="killed", seed=1)
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not reached():
        assert first.poll() is None and time.monotonic() < deadline, "the first life never reached its tool"
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)  # after the step's first model call, before its second
    first.wait(10)
    between()
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-3000:]
