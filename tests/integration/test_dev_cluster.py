"""`swarmlog dev`: the local Kafka + Postgres, tested against the real processes.

The default cluster (default home and ports) is shared with every other test
module and engineer, so it is only ever started here, never stopped. Stop and
restart are tested on a second cluster with its own home and ports.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from swarmlog.dev import ClusterInfo, cluster, command, postgres
from swarmlog.dev.postgres import PostgresNode
from swarmlog.errors import ConfigurationError, MissingDependency
from swarmlog.settings import DEFAULT_BOOTSTRAP_SERVERS, DEFAULT_DATABASE_URL, Settings


def _quiet(_: str) -> None:
    pass


def _free_port() -> int:
    # Not a fixed number: two engineers' test runs may both be starting a spare cluster.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def dev_cluster() -> ClusterInfo:
    return cluster.up()


@pytest.fixture
def spare_home() -> Iterator[Path]:
    # Under /var/tmp, not pytest's tmp_path: as root, Postgres runs as an unprivileged
    # user who cannot traverse /tmp/pytest-of-root (mode 700).
    home = Path(tempfile.mkdtemp(prefix="swarmlog-dev-test-", dir="/var/tmp"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        cluster.down(home=home, purge=True, progress=_quiet)
        shutil.rmtree(home, ignore_errors=True)


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)


# --- the shared default cluster ------------------------------------------------------------


def test_up_reuses_the_running_cluster_instead_of_restarting_it(dev_cluster: ClusterInfo) -> None:
    again = cluster.up(progress=_quiet)
    assert again.kafka_pid == dev_cluster.kafka_pid
    assert again.postgres_pid == dev_cluster.postgres_pid
    assert again == dev_cluster


def test_status_reports_both_services_running(dev_cluster: ClusterInfo) -> None:
    found = cluster.status()
    assert found.running
    assert found.kafka.pid == dev_cluster.kafka_pid and found.kafka.healthy
    assert found.postgres.pid == dev_cluster.postgres_pid and found.postgres.healthy
    assert found.info == dev_cluster


def test_default_cluster_is_where_settings_look_by_default(dev_cluster: ClusterInfo) -> None:
    overridden = [v for v in ("SWARMLOG_DEV_KAFKA_PORT", "SWARMLOG_DEV_POSTGRES_PORT") if os.environ.get(v)]
    if overridden:  # the ports were moved on purpose; then the variables must be what moved them
        assert dev_cluster.bootstrap_servers.endswith(os.environ.get("SWARMLOG_DEV_KAFKA_PORT", ":19092"))
        return
    assert dev_cluster.bootstrap_servers == DEFAULT_BOOTSTRAP_SERVERS
    assert dev_cluster.database_url == DEFAULT_DATABASE_URL


def test_env_lines_export_exactly_the_two_connection_variables(dev_cluster: ClusterInfo) -> None:
    lines = cluster.env_lines(dev_cluster)
    # The default ports, unless this session moved them on purpose (as CI and every engineer's
    # own cluster may): then they are the ports the variables name.
    kafka = os.environ.get("SWARMLOG_DEV_KAFKA_PORT") or "19092"
    pg = os.environ.get("SWARMLOG_DEV_POSTGRES_PORT") or "15432"
    assert lines == (
        f"export SWARMLOG_BOOTSTRAP_SERVERS=127.0.0.1:{kafka}\n"
        f"export SWARMLOG_DATABASE_URL=postgresql://swarmlog@127.0.0.1:{pg}/swarmlog"
    )
    environ = dict(line.removeprefix("export ").split("=", 1) for line in lines.splitlines())
    settings = Settings.from_env(environ)
    assert settings.bootstrap_servers == dev_cluster.bootstrap_servers
    assert settings.database_url == dev_cluster.database_url


def test_command_env_and_status(dev_cluster: ClusterInfo, capsys: pytest.CaptureFixture[str]) -> None:
    assert command.run(["env"]) == 0
    assert capsys.readouterr().out == cluster.env_lines(dev_cluster) + "\n"
    assert command.run(["status"]) == 0
    out = capsys.readouterr().out
    assert f"pid {dev_cluster.kafka_pid}" in out and f"pid {dev_cluster.postgres_pid}" in out
    assert command.run(["bogus"]) == 2


def test_transactional_writes_reach_a_read_committed_consumer_group(dev_cluster: ClusterInfo) -> None:
    bootstrap = dev_cluster.bootstrap_servers
    topic = f"swarmlog.test.dev.{uuid.uuid4().hex[:12]}"
    _create_topic(bootstrap, topic)
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dev-test-{topic}"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, b"committed-1")
        producer.produce(topic, b"committed-2")
        producer.commit_transaction(60)
        producer.begin_transaction()
        producer.produce(topic, b"aborted")
        producer.flush(30)
        producer.abort_transaction(60)
        producer.begin_transaction()
        producer.produce(topic, b"committed-3")
        producer.commit_transaction(60)

        consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"dev-test-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        })
        try:
            consumer.subscribe([topic])
            seen: list[Message] = []
            deadline = time.monotonic() + 60
            while len(seen) < 3 and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    continue
                seen.append(message)
            assert [m.value() for m in seen] == [b"committed-1", b"committed-2", b"committed-3"]
            # The group's offset commit goes through the group coordinator (__consumer_offsets).
            consumer.commit(asynchronous=False)
            [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
            last_offset = seen[-1].offset()
            assert last_offset is not None and committed.offset == last_offset + 1
        finally:
            consumer.close()
    finally:
        _delete_topic(bootstrap, topic)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_consumer_groups([f"dev-test-{topic}"])[f"dev-test-{topic}"].result(30)


def test_kafka_cli_tools_run_against_the_dev_broker(dev_cluster: ClusterInfo) -> None:
    argv = cluster.kafka_tool_argv(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server", dev_cluster.bootstrap_servers, "--list",
    )
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_postgres_accepts_a_connection_and_queries(dev_cluster: ClusterInfo) -> None:
    with psycopg.connect(dev_cluster.database_url, connect_timeout=10) as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (
            "swarmlog", "swarmlog")
        conn.execute("CREATE TEMPORARY TABLE probe (n int)")
        conn.execute("INSERT INTO probe VALUES (1), (2)")
        assert conn.execute("SELECT sum(n) FROM probe").fetchone() == (3,)


# --- a second cluster, to stop and restart ------------------------------------------------------


def test_down_then_up_restarts_with_the_same_data_and_cleans_stale_pid_files(
        spare_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("SWARMLOG_DEV_KAFKA_PORT", "SWARMLOG_DEV_CONTROLLER_PORT", "SWARMLOG_DEV_POSTGRES_PORT"):
        monkeypatch.delenv(variable, raising=False)  # they would win over the ports remembered
    kafka_port = _free_port()
    first = cluster.up(home=spare_home, kafka_port=kafka_port, controller_port=_free_port(),
                       postgres_port=_free_port(), progress=_quiet)
    assert first.bootstrap_servers == f"127.0.0.1:{kafka_port}"
    topic = "swarmlog.test.survives-restart"
    _create_topic(first.bootstrap_servers, topic)
    with psycopg.connect(first.database_url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")

    cluster.down(home=spare_home, progress=_quiet)
    stopped = cluster.status(home=spare_home)
    assert not stopped.running and stopped.kafka.pid is None and stopped.postgres.pid is None
    assert stopped.kafka.address == first.bootstrap_servers  # ports remembered from the last up

    # A pid file left behind by a crash, naming a process that no longer exists.
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file = spare_home / "kafka" / "kafka.pid"
    pid_file.write_text(f"{dead.pid}\n")
    assert cluster.status(home=spare_home).kafka.pid is None
    assert not pid_file.exists()

    second = cluster.up(home=spare_home, progress=_quiet)  # ports from the last up
    assert second.bootstrap_servers == first.bootstrap_servers
    assert second.database_url == first.database_url
    assert second.kafka_pid != first.kafka_pid
    # Formatted once: the restarted broker still has the topic, Postgres still has the row.
    topics = AdminClient({"bootstrap.servers": second.bootstrap_servers}).list_topics(timeout=30).topics
    assert topic in topics
    with psycopg.connect(second.database_url) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(42,)]


def test_a_port_held_by_another_program_is_named_in_the_error(spare_home: Path) -> None:
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        with pytest.raises(ConfigurationError) as caught:
            cluster.up(home=spare_home, kafka_port=port, controller_port=_free_port(),
                       postgres_port=_free_port(), progress=_quiet)
    message = str(caught.value)
    assert f"port {port}" in message
    assert f"pid {os.getpid()}" in message  # the holder, found through /proc
    assert "--kafka-port" in message and "SWARMLOG_DEV_KAFKA_PORT" in message
    assert not (spare_home / "kafka" / "kafka.pid").exists()


def test_changing_ports_of_a_running_cluster_is_refused(dev_cluster: ClusterInfo) -> None:
    with pytest.raises(ConfigurationError, match="swarmlog dev down"):
        cluster.up(kafka_port=_free_port(), progress=_quiet)
    assert cluster.status().kafka.pid == dev_cluster.kafka_pid


# --- prerequisites ------------------------------------------------------------------------------


def test_missing_postgres_without_root_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MissingDependency) as caught:
        postgres.ensure_bin_dir(progress=_quiet, lib_root=tmp_path, path=str(tmp_path), is_root=False)
    assert "apt-get install -y postgresql" in str(caught.value)


def test_a_home_the_postgres_user_cannot_reach_is_a_clear_error(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    node = PostgresNode(dir=private / "postgres", port=_free_port(), owner=postgres.service_user())
    if node.owner is None:
        # Not root: the server runs as us, and we can reach our own directories.
        postgres.prepare(node)
        assert node.dir.is_dir()
        return
    with pytest.raises(ConfigurationError, match="cannot reach"):
        postgres.prepare(node)
