"""Where a test session's Kafka and Postgres come from: the environment, Docker (testcontainers) or the
dev cluster. There is no Docker engine here, so the choice and the engine probe are tested on their own,
the probe against a stand-in engine on a unix socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarmlog.dev.containers import ServiceSource, docker_reachable, kafka_environment, service_source

BOTH = {"SWARMLOG_BOOTSTRAP_SERVERS": "k:9092", "SWARMLOG_DATABASE_URL": "postgresql://u@db/x"}


def _never() -> bool:
    raise AssertionError("the Docker engine was probed although the environment already chose")


@pytest.mark.parametrize(("environ", "docker", "expected"), [
    (BOTH, _never, ServiceSource.ENVIRONMENT),
    ({**BOTH, "DOCKER_HOST": "unix:///var/run/docker.sock"}, _never, ServiceSource.ENVIRONMENT),
    ({}, lambda: True, ServiceSource.CONTAINERS),
    ({"HOME": "/root", "SWARMLOG_TOPIC": "t"}, lambda: True, ServiceSource.CONTAINERS),  # not a service variable
    ({}, lambda: False, ServiceSource.DEV_CLUSTER),
    ({"SWARMLOG_BOOTSTRAP_SERVERS": "k:9092"}, _never, ServiceSource.DEV_CLUSTER),  # half a choice: not Docker
    ({"SWARMLOG_DEV_HOME": "/var/tmp/dev-D"}, _never, ServiceSource.DEV_CLUSTER),  # a dev cluster was chosen
    ({"SWARMLOG_DEV_KAFKA_PORT": "51092"}, _never, ServiceSource.DEV_CLUSTER),
    ({"SWARMLOG_BOOTSTRAP_SERVERS": ""}, lambda: True, ServiceSource.CONTAINERS),  # empty is unset
])
def test_the_services_come_from_the_environment_then_docker_then_the_dev_cluster(environ, docker, expected):
    assert service_source(environ, docker_reachable=docker) is expected


class _Engine:
    """A stand-in Docker engine on a unix socket: answers /_ping with ``status``."""

    def __init__(self, path: Path, status: bytes) -> None:
        self.path = path
        self.status = status
        self.pings = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                request = conn.recv(4096)
                if request.startswith(b"GET /_ping "):
                    self.pings += 1
                conn.sendall(b"HTTP/1.1 " + self.status + b"\r\nContent-Length: 2\r\n\r\nOK")

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[_Engine]:
    e = _Engine(tmp_path / "docker.sock", b"200 OK")
    yield e
    e.close()


def test_a_docker_engine_that_answers_its_ping_is_reachable(engine):
    assert docker_reachable({"DOCKER_HOST": f"unix://{engine.path}"}) is True
    assert engine.pings == 1


def test_no_engine_or_a_failing_one_is_not_reachable(tmp_path):
    assert docker_reachable({"DOCKER_HOST": f"unix://{tmp_path / 'none.sock'}"}) is False
    broken = _Engine(tmp_path / "broken.sock", b"500 Internal Server Error")
    try:
        assert docker_reachable({"DOCKER_HOST": f"unix://{broken.path}"}) is False
    finally:
        broken.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert docker_reachable({"DOCKER_HOST": f"tcp://127.0.0.1:{port}"}, timeout=0.5) is False


def test_the_kafka_container_is_one_kraft_node_that_can_run_transactions():
    env = kafka_environment("10.1.2.3:32771")
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://10.1.2.3:32771"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # Transactions and groups need their internal topics, which default to 3 replicas.
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
