"""A single-node Kafka for development: KRaft combined mode, run from Maven jars, no Docker.

Lifecycle, each step cheap to repeat: resolve the jars (Maven, once, cached
as a classpath file), write ``server.properties``, format the storage (once:
formatting again would create a new cluster and lose the data), start the
JVM detached, wait until a metadata request succeeds, stop it with SIGTERM.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ..errors import MissingDependency, ServiceUnavailable
from . import process

KAFKA_VERSION = "4.1.1"
MIN_JAVA = 17  # Kafka 4.x brokers need Java 17+

_HERE = Path(__file__).resolve().parent
POM = _HERE / "pom.xml"
LOG4J2_CONFIG = _HERE / "log4j2.properties"

# Small heap: a dev broker holds little, and the machine also runs Postgres, the
# tests and the code under test on 2 cores. GC flags are Kafka's own defaults.
_JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx768m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
_BROKER_MAIN = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"

# The readiness probe's own client logs "connection refused" to stderr on every
# retry while the broker boots; those are expected, so they go nowhere.
_QUIET = logging.getLogger("swarmlog.dev.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class KafkaNode:
    """Where one dev broker keeps its files and which loopback ports it listens on."""

    dir: Path
    port: int
    controller_port: int

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def server_log(self) -> Path:
        """The broker's log (log4j2, see ``log4j2.properties``)."""
        return self.logs_dir / "server.log"

    @property
    def console_log(self) -> Path:
        """The JVM's stdout and stderr: crashes before logging starts land here."""
        return self.logs_dir / "kafka.out"

    @property
    def properties_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"


# --- prerequisites -------------------------------------------------------------------


def require_java() -> str:
    """Path of a ``java`` that can run Kafka; raise MissingDependency naming what to install."""
    java = shutil.which("java")
    hint = (
        f"Install a Java {MIN_JAVA}+ runtime, e.g. `apt-get install -y openjdk-17-jre-headless` "
        f"(Debian/Ubuntu), and make sure `java` is on PATH."
    )
    if java is None:
        raise MissingDependency(program=f"Java {MIN_JAVA}+ (`java`)", install_hint=hint)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    # `openjdk version "17.0.15" 2025-04-15` / `java version "1.8.0_402"`
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):
            major = int(match.group(2))
        if major < MIN_JAVA:
            raise MissingDependency(
                program=f"Java {MIN_JAVA}+ (found Java {major} at {java})", install_hint=hint
            )
    return java


def resolve_classpath(*, cache_dir: Path, progress: Progress) -> str:
    """The broker's classpath: resolved by Maven the first time, then read from a cache file.

    The jars stay in Maven's local repository (~/.m2); the cache file lists
    them and is keyed by the pom's hash, so editing ``pom.xml`` re-resolves.
    """
    key = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    cache = cache_dir / f"kafka-{KAFKA_VERSION}-{key}.classpath"
    if cache.is_file():
        classpath = cache.read_text().strip()
        # ~/.m2 may have been cleaned since the cache was written: then resolve again.
        if classpath and all(Path(jar).is_file() for jar in classpath.split(os.pathsep)):
            return classpath
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MissingDependency(
            program="Maven (`mvn`)",
            install_hint=(
                "It downloads Kafka's jars once. Install it, e.g. `apt-get install -y maven` "
                "(Debian/Ubuntu), and make sure `mvn` is on PATH."
            ),
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    progress(f"resolving Kafka {KAFKA_VERSION} jars with Maven (first run only; cached in {cache})")
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    result = subprocess.run(
        [
            mvn, "-B", "-q", "-f", str(POM), "dependency:build-classpath",
            f"-Dmdep.outputFile={partial}", "-Dmdep.includeScope=runtime",
        ],
        capture_output=True, text=True, cwd=cache_dir, timeout=1800,
    )
    if result.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        output = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise MissingDependency(
            program=f"Kafka {KAFKA_VERSION} jars",
            install_hint=(
                f"`mvn -f {POM} dependency:build-classpath` failed (exit {result.returncode}). "
                f"Check that Maven Central (or the mirror in ~/.m2/settings.xml) is reachable, "
                f"then run `swarmlog dev up` again. Maven said:\n{output}"
            ),
        )
    os.replace(partial, cache)  # atomic: a concurrent reader never sees half a classpath
    return cache.read_text().strip()


# --- configuration and storage ---------------------------------------------------------


def server_properties(node: KafkaNode) -> str:
    """The broker's ``server.properties``: one node that is both broker and KRaft controller."""
    listeners = f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
    lines = [
        "# Written by `swarmlog dev up` (swarmlog/dev/kafka.py) on every start; edits are overwritten.",
        "process.roles=broker,controller",
        "node.id=1",
        # A dynamic quorum (KIP-853): pairs with `StorageTool format --standalone`.
        # Static `controller.quorum.voters` would not match how the storage was formatted.
        f"controller.quorum.bootstrap.servers=127.0.0.1:{node.controller_port}",
        f"listeners={listeners}",
        f"advertised.listeners={listeners}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={node.data_dir}",
        "num.partitions=1",
        "default.replication.factor=1",
        # Swarm topics are created explicitly (single-partition, by `swarmlog topic create`);
        # auto-creation would hide a typo behind a new, empty, multi-purpose topic.
        "auto.create.topics.enable=false",
        # Internal topics default to replication factor 3, which one broker cannot
        # satisfy: consumer groups and transactions would then never become available.
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        # The first group join would otherwise wait 3 s for more members that never come.
        "group.initial.rebalance.delay.ms=0",
    ]
    return "\n".join(lines) + "\n"


def write_config(node: KafkaNode) -> None:
    """(Re)write ``server.properties`` for the node's ports."""
    node.dir.mkdir(parents=True, exist_ok=True)
    node.logs_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(node.properties_file, server_properties(node))


def is_formatted(node: KafkaNode) -> bool:
    """True once the storage has been formatted (it then holds the cluster's identity)."""
    return (node.data_dir / "meta.properties").is_file()


def new_cluster_id() -> str:
    """A random cluster id in Kafka's format (``Uuid.randomUuid().toString()``), without a JVM."""
    while True:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka never hands out ids starting with '-': command lines would read them as flags.
        if not cluster_id.startswith("-"):
            return cluster_id


def ensure_formatted(node: KafkaNode, *, java: str, classpath: str, progress: Progress) -> None:
    """Format the storage unless it already is: formatting is done once in the node's life.

    Formatting again would give the broker a new cluster id and metadata log,
    i.e. throw away every topic; so an existing ``meta.properties`` is final.
    """
    if is_formatted(node):
        return
    # No meta.properties: nothing of value is in there (at most an interrupted format).
    shutil.rmtree(node.data_dir, ignore_errors=True)
    cluster_id = new_cluster_id()
    progress(f"formatting Kafka storage in {node.data_dir} (cluster id {cluster_id})")
    result = subprocess.run(
        [
            java, "-Xmx256m", *_log_options(node), _STORAGE_TOOL,
            "format", "--standalone", "-t", cluster_id, "-c", str(node.properties_file),
        ],
        env=_java_env(classpath), capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0 or not is_formatted(node):
        raise ServiceUnavailable(
            service="Kafka",
            address=node.bootstrap_servers,
            detail=(
                f"formatting its storage failed (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr).strip()}\n{process.tail(node.server_log, 15)}"
            ),
        )


# --- running ----------------------------------------------------------------------------


def start(node: KafkaNode, *, java: str, classpath: str, progress: Progress) -> int:
    """Start the broker detached (returns at once; see :func:`wait_ready`) and write its pid file."""
    argv = [java, *_JVM_OPTIONS, *_log_options(node), _BROKER_MAIN, str(node.properties_file)]
    progress(f"starting Kafka {KAFKA_VERSION} on {node.bootstrap_servers} (log: {node.server_log})")
    pid = process.spawn_detached(argv, env=_java_env(classpath), log=node.console_log)
    _write_atomically(node.pid_file, f"{pid}\n")
    return pid


def running_pid(node: KafkaNode) -> int | None:
    """Pid of this node's broker if it is running; a stale pid file is removed."""
    properties = str(node.properties_file)
    return process.live_pid(
        node.pid_file, is_ours=lambda argv: _BROKER_MAIN in argv and properties in argv
    )


def is_healthy(node: KafkaNode, *, timeout: float = 3.0) -> bool:
    """True if the broker answers a metadata request within ``timeout`` seconds."""
    # A plain connect first: it fails fast while the port is closed, without a client.
    try:
        socket.create_connection(("127.0.0.1", node.port), timeout=min(timeout, 1.0)).close()
    except OSError:
        return False
    config: dict[str, Any] = {"bootstrap.servers": node.bootstrap_servers, "logger": _QUIET}
    admin = AdminClient(config)
    try:
        return bool(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return False


def wait_ready(node: KafkaNode, *, pid: int, timeout: float = 120.0) -> None:
    """Block until the broker answers metadata requests; raise with its log if it dies or hangs."""
    deadline = time.monotonic() + timeout
    while True:
        if not process.is_alive(pid):
            node.pid_file.unlink(missing_ok=True)
            raise ServiceUnavailable(
                service="Kafka", address=node.bootstrap_servers,
                detail=f"the broker (pid {pid}) exited while starting.\n{_logs(node)}",
            )
        if is_healthy(node, timeout=2.0):
            return
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                service="Kafka", address=node.bootstrap_servers,
                detail=(
                    f"the broker (pid {pid}) did not answer within {timeout:.0f} s; it is still "
                    f"running (stop it with `swarmlog dev down`).\n{_logs(node)}"
                ),
            )
        time.sleep(0.25)


def stop(node: KafkaNode, *, progress: Progress, timeout: float = 60.0) -> bool:
    """Stop the broker (SIGTERM: a clean shutdown; SIGKILL after ``timeout``). False if not running."""
    pid = running_pid(node)
    if pid is None:
        return False
    progress(f"stopping Kafka (pid {pid})")
    if not process.terminate(pid, timeout=timeout):
        progress(f"Kafka did not stop within {timeout:.0f} s and was killed")
    node.pid_file.unlink(missing_ok=True)
    return True


# --- helpers ----------------------------------------------------------------------------


def _java_env(classpath: str) -> dict[str, str]:
    # The classpath goes in the environment, not on the command line: ~90 jars would
    # make `ps` unreadable, and the pid check looks for the main class in argv.
    return {**os.environ, "CLASSPATH": classpath}


def _log_options(node: KafkaNode) -> list[str]:
    return [
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        f"-Dkafka.logs.dir={node.logs_dir}",
        f"-XX:ErrorFile={node.logs_dir}/hs_err_pid%p.log",
    ]


def _logs(node: KafkaNode) -> str:
    shown = f"--- last lines of {node.server_log}:\n{process.tail(node.server_log)}"
    # The JVM's own output is empty unless it failed before log4j took over (bad flags,
    # missing class, no memory): then it is the only clue, so it comes first.
    console = process.tail(node.console_log, 15) if node.console_log.is_file() else ""
    if console.strip():
        shown = f"--- last lines of {node.console_log}:\n{console}\n{shown}"
    return shown


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, path)
