"""How `swarmlog dev` lays out one or three brokers and a SASL listener (pure: starts nothing).

`status` and `env` only read files and pid files, so a home in a temporary directory shows the
layout `up` would use, without a JVM or Postgres (the clusters themselves are tested in
test_dev_cluster.py, test_leader_failover.py and test_sasl_passthrough.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmlog.dev import cluster, command, kafka, sasl
from swarmlog.dev.kafka import KafkaNode
from swarmlog.errors import ConfigurationError
from swarmlog.settings import Settings


def test_one_broker_by_default_with_the_settings_it_always_had(tmp_path: Path) -> None:
    found = cluster.status(home=tmp_path, kafka_port=29100, controller_port=29101, postgres_port=29102)
    assert [b.address for b in found.brokers] == ["127.0.0.1:29100"] and found.kafka.name == "kafka"
    assert found.info.bootstrap_servers == "127.0.0.1:29100" and found.info.sasl is None
    props = kafka.server_properties(KafkaNode(dir=tmp_path / "kafka", port=29100, controller_port=29101))
    for line in ("node.id=1", "default.replication.factor=1", "offsets.topic.replication.factor=1",
                 "transaction.state.log.min.isr=1", "controller.quorum.bootstrap.servers=127.0.0.1:29101"):
        assert line in props.splitlines()
    assert "SASL" not in props and "num.partitions=10" not in props  # Kafka's 50, as before


def test_three_brokers_take_the_ports_plus_ten_each_and_replicate_everything_three_times(tmp_path: Path) -> None:
    found = cluster.status(home=tmp_path, brokers=3, kafka_port=29100, controller_port=29101, postgres_port=29105)
    assert [(b.name, b.address) for b in found.brokers] == [
        ("kafka-1", "127.0.0.1:29100"), ("kafka-2", "127.0.0.1:29110"), ("kafka-3", "127.0.0.1:29120")]
    assert [log.parent.parent.name for log in found.info.kafka_logs] == ["kafka", "kafka-2", "kafka-3"]
    assert "export SWARMLOG_BOOTSTRAP_SERVERS=127.0.0.1:29100,127.0.0.1:29110,127.0.0.1:29120" in \
        cluster.env_lines(found.info)
    nodes = [KafkaNode(dir=tmp_path / f"k{i}", node_id=i, port=29090 + 10 * i, controller_port=29091 + 10 * i)
             for i in (1, 2, 3)]
    props = kafka.server_properties(nodes[1], quorum=nodes).splitlines()
    for line in ("node.id=2", "default.replication.factor=3", "min.insync.replicas=2",
                 "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
                 "transaction.state.log.min.isr=2", "offsets.topic.num.partitions=10",
                 "controller.quorum.bootstrap.servers=127.0.0.1:29101,127.0.0.1:29111,127.0.0.1:29121"):
        assert line in props
    assert "listeners=PLAINTEXT://127.0.0.1:29110,CONTROLLER://127.0.0.1:29111" in props


def test_ports_can_be_listed_per_broker_and_must_all_differ(tmp_path: Path) -> None:
    found = cluster.status(home=tmp_path, brokers=3, kafka_port="29100,29130,29160",
                           controller_port=[29101, 29131, 29161], postgres_port=29190)
    assert [b.address for b in found.brokers] == ["127.0.0.1:29100", "127.0.0.1:29130", "127.0.0.1:29160"]
    with pytest.raises(ConfigurationError, match="2 ports for 3 brokers"):
        cluster.status(home=tmp_path, brokers=3, kafka_port="29100,29130", controller_port=29101, postgres_port=29190)
    with pytest.raises(ConfigurationError, match="must differ"):
        cluster.status(home=tmp_path, brokers=3, kafka_port=29100, controller_port=29110, postgres_port=29190)
    with pytest.raises(ConfigurationError, match="1-9"):
        cluster.status(home=tmp_path, brokers=0)


def test_sasl_env_hands_out_the_credentials_and_nothing_else_shows_the_password(tmp_path: Path) -> None:
    creds, created = sasl.load_or_create(tmp_path)
    assert created and sasl.load_or_create(tmp_path) == (creds, False)  # generated once, then kept
    assert oct(sasl.credentials_file(tmp_path).stat().st_mode & 0o777) == "0o600"
    password = creds.password.get_secret_value()
    found = cluster.status(home=tmp_path, kafka_port=29100, controller_port=29101, postgres_port=29102,
                           sasl_listener=True, sasl_port=29103)
    assert found.info.sasl_bootstrap_servers == "127.0.0.1:29103"
    assert password not in repr(found) and password not in repr(found.info)
    lines = cluster.env_lines(found.info)
    environ = dict(line.removeprefix("export ").split("=", 1) for line in lines.splitlines())
    settings = Settings.from_env(environ)
    assert settings.bootstrap_servers == "127.0.0.1:29103"  # the SASL listener, not PLAINTEXT
    assert settings.kafka_config()["sasl.password"] == password
    assert {k: v for k, v in settings.kafka_config().items() if k != "sasl.password"} == {
        "bootstrap.servers": "127.0.0.1:29103", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "swarmlog"}
    props = kafka.server_properties(KafkaNode(dir=tmp_path / "kafka", port=29100, controller_port=29101,
                                              sasl_port=29103)).splitlines()
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT" \
        in props
    assert "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512" in props
    assert "inter.broker.listener.name=PLAINTEXT" in props


def test_storage_formatted_for_three_brokers_refuses_one_instead_of_starting_a_second_cluster(tmp_path: Path) -> None:
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    (tmp_path / "kafka" / "data" / "meta.properties").write_text("formatted\n")
    (tmp_path / "cluster.json").write_text(json.dumps({"brokers": 3, "kafka_ports": [29100, 29110, 29120],
                                                       "controller_ports": [29101, 29111, 29121],
                                                       "postgres_port": 29105}))
    with pytest.raises(ConfigurationError, match="formatted for 3 broker"):
        cluster.up(home=tmp_path, brokers=1, progress=lambda _: None)
    assert cluster.status(home=tmp_path).kafka.pid is None  # nothing was started
    assert len(cluster.status(home=tmp_path).brokers) == 3  # and the record still says three


def test_the_command_line_takes_brokers_sasl_and_port_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command.run(["status", "--home", str(tmp_path), "--brokers", "3", "--kafka-port", "29100",
                        "--controller-port", "29101", "--postgres-port", "29105"]) == command.EXIT_NOT_RUNNING
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["kafka-1", "kafka-2", "kafka-3", "postgres"]
    assert command.run(["env", "--home", str(tmp_path), "--sasl", "--sasl-port", "29104,29114,29124",
                        "--brokers", "3", "--kafka-port", "29100", "--controller-port", "29101",
                        "--postgres-port", "29105"]) == 0
    # No credentials created yet (no `up --sasl`): the plain listeners, nothing made up.
    assert "SWARMLOG_KAFKA_" not in capsys.readouterr().out
