"""Where a test session's Kafka and Postgres come from, and Kafka and Postgres from Docker.

The choice (:func:`service_source`), in order:

1. ``SWARMLOG_BOOTSTRAP_SERVERS`` and ``SWARMLOG_DATABASE_URL`` both set: that cluster
   (a real one, or one ``swarmlog dev up`` started and ``swarmlog dev env`` pointed at).
2. No ``SWARMLOG_*`` service variable set at all (neither of those, nor a
   ``SWARMLOG_DEV_*`` choosing a dev cluster) and a Docker engine answers: a real
   Apache Kafka 4.x broker (KRaft) and a real PostgreSQL, each in a container made with
   testcontainers (the ``containers`` extra) and removed when the session ends.
3. Otherwise the project's own dev cluster (``swarmlog dev up``: Kafka from Maven jars,
   Postgres from the machine's binaries; no Docker needed).

Why ``swarmlog dev up`` does not use Docker: the dev cluster outlives the command that
starts it (``dev env``, ``dev down``, other shells and test sessions share it), while
testcontainers ties a container's life to the process that made it (its reaper removes
the container when that process exits). Containers fit a test session, not a dev cluster.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import MissingDependency, ServiceUnavailable

__all__ = ["ContainerServices", "DEV_CLUSTER_PREFIX", "KAFKA_IMAGE", "POSTGRES_IMAGE", "SERVICE_VARIABLES",
           "ServiceSource", "containers", "docker_reachable", "kafka_environment", "service_source"]

SERVICE_VARIABLES = ("SWARMLOG_BOOTSTRAP_SERVERS", "SWARMLOG_DATABASE_URL")
DEV_CLUSTER_PREFIX = "SWARMLOG_DEV_"

KAFKA_IMAGE = "apache/kafka:4.1.1"  # the version `swarmlog dev up` runs
POSTGRES_IMAGE = "postgres:15-alpine"
_READY_TIMEOUT_S = 120.0
# The readiness probe's client logs "connection refused" on every retry while the broker boots.
_PROBE_LOG = logging.getLogger("swarmlog.dev.containers.probe")
_PROBE_LOG.addHandler(logging.NullHandler())
_PROBE_LOG.propagate = False


class ServiceSource(enum.Enum):
    ENVIRONMENT = "environment"
    CONTAINERS = "containers"
    DEV_CLUSTER = "dev-cluster"


def service_source(environ: Mapping[str, str], *, docker_reachable: Callable[[], bool]) -> ServiceSource:
    """Where Kafka and Postgres come from for a test session (see the module's docstring)."""
    if all(environ.get(v) for v in SERVICE_VARIABLES):
        return ServiceSource.ENVIRONMENT
    chosen = any(environ.get(v) for v in SERVICE_VARIABLES) or any(
        k.startswith(DEV_CLUSTER_PREFIX) and v for k, v in environ.items())
    if not chosen and docker_reachable():
        return ServiceSource.CONTAINERS
    return ServiceSource.DEV_CLUSTER


def docker_reachable(environ: Mapping[str, str] | None = None, *, timeout: float = 1.0) -> bool:
    """True if a Docker engine answers ``GET /_ping`` (``DOCKER_HOST``, else the usual sockets)."""
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST", "")
    try:
        if host.startswith("tcp://"):
            url = urlparse(host)
            with socket.create_connection((url.hostname or "127.0.0.1", url.port or 2375), timeout=timeout) as sock:
                if env.get("DOCKER_TLS_VERIFY"):
                    return True  # a TLS endpoint that accepts connections: the ping needs its certificates
                return _ping(sock)
        paths = [host.removeprefix("unix://")] if host.startswith("unix://") else [
            "/var/run/docker.sock", f"{env.get('XDG_RUNTIME_DIR', '/nonexistent')}/docker.sock",
            str(Path.home() / ".docker" / "run" / "docker.sock")]
        for path in paths:
            if not Path(path).exists():
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(path)
                if _ping(sock):
                    return True
    except OSError:
        return False
    return False


def _ping(sock: socket.socket) -> bool:
    sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    reply = b""
    while len(reply) < 4096:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    status, _, _ = reply.partition(b"\r\n")
    return status.split(b" ")[1:2] == [b"200"]


@dataclass(frozen=True, kw_only=True)
class ContainerServices:
    bootstrap_servers: str
    database_url: str


def kafka_environment(advertised: str) -> dict[str, str]:
    """The apache/kafka image's configuration: one KRaft node, what a single broker needs."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{advertised}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        # One broker cannot hold the default three replicas of the internal topics: without
        # these, consumer groups and transactions never become available.
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }


@contextmanager
def containers() -> Iterator[ContainerServices]:
    """Kafka and Postgres in containers for as long as the ``with`` block runs."""
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError:
        raise MissingDependency(program="testcontainers",
                                install_hint="Install swarmlog's `containers` (or `test`) extra.") from None
    with ExitStack() as stack:
        kafka = DockerContainer(KAFKA_IMAGE)
        host = kafka.get_container_host_ip()
        # The broker must advertise the address clients reach it at, known before it starts:
        # a host port chosen here and bound to the container's 9092.
        port = _free_port()
        kafka.with_bind_ports(9092, port)
        for key, value in kafka_environment(f"{host}:{port}").items():
            kafka.with_env(key, value)
        stack.enter_context(kafka)
        postgres = (DockerContainer(POSTGRES_IMAGE).with_exposed_ports(5432)
                    .with_env("POSTGRES_USER", "swarmlog").with_env("POSTGRES_PASSWORD", "swarmlog")
                    .with_env("POSTGRES_DB", "swarmlog"))
        stack.enter_context(postgres)
        services = ContainerServices(
            bootstrap_servers=f"{host}:{port}",
            database_url=f"postgresql://swarmlog:swarmlog@{postgres.get_container_host_ip()}:"
                         f"{postgres.get_exposed_port(5432)}/swarmlog")
        _wait_ready(services)
        yield services


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _wait_ready(services: ContainerServices) -> None:
    import psycopg
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + _READY_TIMEOUT_S
    config: dict[str, Any] = {"bootstrap.servers": services.bootstrap_servers, "logger": _PROBE_LOG}
    admin = AdminClient(config)
    while True:
        try:
            if admin.list_topics(timeout=2).brokers:
                break
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise ServiceUnavailable(service="Kafka (container)", address=services.bootstrap_servers,
                                     detail=f"no answer within {_READY_TIMEOUT_S:g} s of starting {KAFKA_IMAGE}")
        time.sleep(0.5)
    while True:
        try:
            with psycopg.connect(services.database_url, connect_timeout=2):
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(service="Postgres (container)", address=services.database_url,
                                         detail=str(exc).strip()) from None
            time.sleep(0.5)
