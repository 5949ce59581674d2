"""Kafka for development: KRaft combined mode, run from Maven jars, no Docker.

One node by default; ``--brokers 3`` runs three on this machine, each its own
JVM with its own directory and ports, every one of them both broker and voter
of the KRaft quorum.

Lifecycle, each step cheap to repeat: resolve the jars (Maven, once, cached
as a classpath file), write ``server.properties``, format the storage (once:
formatting again would create a new cluster and lose the data), start the
JVM detached, wait until a metadata request succeeds, stop it with SIGTERM.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ..errors import ConfigurationError, MissingDependency, ServiceUnavailable
from . import process

__all__ = ["KAFKA_VERSION", "KafkaNode", "LOG4J2_CONFIG", "MIN_JAVA", "POM", "Progress", "ensure_formatted",
           "is_formatted", "is_healthy", "new_cluster_id", "registered_brokers", "replication", "require_java",
           "resolve_classpath", "running_pid", "server_properties", "start", "stop", "stop_all", "wait_quorum",
           "wait_ready", "write_config"]

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
    node_id: int = 1
    sasl_port: int | None = None
    """Port of the SASL_PLAINTEXT (SCRAM-SHA-512) listener, None: no such listener."""

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        return None if self.sasl_port is None else f"127.0.0.1:{self.sasl_port}"

    @property
    def controller_address(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

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


def replication(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for every topic of a cluster of ``brokers`` nodes.

    Three copies when there are three brokers, and two of them must have an event
    before it is acknowledged (``acks=all``): a broker may die, even the leader, and
    every acknowledged event is still on another. One broker: one copy, naturally.
    """
    factor = min(3, brokers)
    return factor, max(1, factor - 1)


def server_properties(node: KafkaNode, *, quorum: Sequence[KafkaNode] = ()) -> str:
    """The broker's ``server.properties``: a node that is both broker and KRaft controller.

    ``quorum`` is every node of the cluster (this one included); empty means this one alone.
    """
    voters = tuple(quorum) or (node,)
    factor, min_isr = replication(len(voters))
    protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}  # listener name -> security protocol
    listeners = [f"PLAINTEXT://127.0.0.1:{node.port}", f"CONTROLLER://127.0.0.1:{node.controller_port}"]
    if node.sasl_port is not None:
        protocols["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
    lines = [
        "# Written by `swarmlog dev up` (swarmlog/dev/kafka.py) on every start; edits are overwritten.",
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        # A dynamic quorum (KIP-853): pairs with `StorageTool format --standalone` (one node)
        # or `--initial-controllers` (several). Static `controller.quorum.voters` would not
        # match how the storage was formatted.
        f"controller.quorum.bootstrap.servers={','.join(v.controller_address for v in voters)}",
        f"listeners={','.join(listeners)}",
        f"advertised.listeners={','.join(listeners)}",
        "controller.listener.names=CONTROLLER",
        # Brokers replicate to each other over PLAINTEXT; SASL is for clients only.
        "inter.broker.listener.name=PLAINTEXT",
        f"listener.security.protocol.map={','.join(f'{n}:{p}' for n, p in protocols.items())}",
        f"log.dirs={node.data_dir}",
        "num.partitions=1",
        f"default.replication.factor={factor}",
        f"min.insync.replicas={min_isr}",
        # Swarm topics are created explicitly (single-partition, by `swarmlog topic create`);
        # auto-creation would hide a typo behind a new, empty, multi-purpose topic.
        "auto.create.topics.enable=false",
        # Internal topics default to replication factor 3, which one broker cannot satisfy
        # (consumer groups and transactions would then never become available); with
        # three, they are replicated like the swarm's topic, so losing a broker loses no
        # group offset and no transaction state.
        f"offsets.topic.replication.factor={factor}",
        f"transaction.state.log.replication.factor={factor}",
        f"transaction.state.log.min.isr={min_isr}",
        f"share.coordinator.state.topic.replication.factor={factor}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
        # The first group join would otherwise wait 3 s for more members that never come.
        "group.initial.rebalance.delay.ms=0",
    ]
    if len(voters) > 1:
        lines += [
            # 50 partitions each (Kafka's default) x 3 replicas, on one machine, is what every start
            # and restart of a node spends its time loading and catching up on; a dev cluster's
            # handful of groups and transactional ids is served as well by 10.
            "offsets.topic.num.partitions=10",
            "transaction.state.log.num.partitions=10",
        ]
    if node.sasl_port is not None:
        lines += [
            # SCRAM credentials live in the cluster metadata (`swarmlog dev up --sasl` creates
            # the user through the admin API); the broker's own JAAS entry names no user.
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
    return "\n".join(lines) + "\n"


def write_config(node: KafkaNode, *, quorum: Sequence[KafkaNode] = ()) -> None:
    """(Re)write ``server.properties`` for the node's ports (and its quorum's)."""
    node.dir.mkdir(parents=True, exist_ok=True)
    node.logs_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(node.properties_file, server_properties(node, quorum=quorum))


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


def ensure_formatted(nodes: Sequence[KafkaNode], *, identity_file: Path, java: str, classpath: str,
                     progress: Progress) -> None:
    """Format every node's storage that is not formatted yet: done once in a node's life.

    Formatting again would give a broker a new cluster id and metadata log, i.e.
    throw away every topic; so an existing ``meta.properties`` is final.

    One node forms its quorum alone (``--standalone``). Several form one quorum of
    them all (``--initial-controllers``, KIP-853): every node must be formatted with
    the same cluster id and the same list of voters, each voter named by node id,
    controller address and the directory id its storage will carry. That identity
    is written to ``identity_file`` before the first node is formatted, so that a
    format interrupted half-way finishes the same cluster instead of starting a
    second one.
    """
    todo = [node for node in nodes if not is_formatted(node)]
    if not todo:
        return
    if len(nodes) == 1:
        cluster_id, quorum_args = new_cluster_id(), ["--standalone"]
    else:
        identity = _quorum_identity(nodes, identity_file=identity_file, fresh=len(todo) == len(nodes))
        cluster_id = identity["cluster_id"]
        quorum_args = ["--initial-controllers", identity["initial_controllers"]]
    running = []
    for node in todo:
        # No meta.properties: nothing of value is in there (at most an interrupted format).
        shutil.rmtree(node.data_dir, ignore_errors=True)
        progress(f"formatting Kafka storage in {node.data_dir} (cluster id {cluster_id})")
        argv = [java, "-Xmx256m", *_log_options(node), _STORAGE_TOOL,
                "format", *quorum_args, "-t", cluster_id, "-c", str(node.properties_file)]
        # In parallel: each is a JVM start of a few seconds.
        running.append((node, subprocess.Popen(argv, env=_java_env(classpath), stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    failures = []
    for node, proc in running:
        try:
            output, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        if proc.returncode != 0 or not is_formatted(node):
            # The exception comes first; the tool then dumps every config value, which says nothing.
            shown = "\n".join(output.strip().splitlines()[:12])
            failures.append(f"{node.data_dir} (exit {proc.returncode}):\n{shown}")
    if failures:
        raise ServiceUnavailable(
            service="Kafka", address=",".join(n.bootstrap_servers for n in nodes),
            detail="formatting its storage failed: " + "\n".join(failures),
        )


def _quorum_identity(nodes: Sequence[KafkaNode], *, identity_file: Path, fresh: bool) -> dict[str, str]:
    voters = ",".join(f"{n.node_id}@{n.controller_address}" for n in nodes)
    try:
        identity = json.loads(identity_file.read_text())
    except (OSError, ValueError):
        identity = None
    if isinstance(identity, dict) and identity.get("voters") == voters:
        return identity
    if not fresh:
        raise ConfigurationError(
            f"some of the dev cluster's Kafka nodes are formatted and others are not, and "
            f"{identity_file} does not say which quorum they formed (voters {voters}); "
            f"delete the data with `swarmlog dev down --purge` and start again"
        )
    cluster_id = new_cluster_id()
    controllers = ",".join(f"{n.node_id}@{n.controller_address}:{new_cluster_id()}" for n in nodes)
    identity = {"cluster_id": cluster_id, "voters": voters, "initial_controllers": controllers}
    identity_file.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(identity_file, json.dumps(identity, indent=2) + "\n")
    return identity


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


def registered_brokers(node: KafkaNode, *, timeout: float = 3.0) -> set[int]:
    """Ids of the brokers ``node``'s metadata lists (registered and not fenced); empty if it does not answer."""
    config: dict[str, Any] = {"bootstrap.servers": node.bootstrap_servers, "logger": _QUIET}
    admin = AdminClient(config)
    try:
        return set(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return set()


def wait_quorum(nodes: Sequence[KafkaNode], *, timeout: float = 120.0) -> None:
    """Block until every node's metadata lists every node: the quorum has formed and all registered.

    A node answers metadata requests as soon as it runs, even before the others
    have joined; a topic created then with replication factor 3 would be refused.
    """
    want = {n.node_id for n in nodes}
    deadline = time.monotonic() + timeout
    while True:
        missing = {n.node_id: want - registered_brokers(n) for n in nodes}
        if not any(missing.values()):
            return
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                service="Kafka", address=",".join(n.bootstrap_servers for n in nodes),
                detail=(f"the brokers did not all register within {timeout:.0f} s (missing, as each node "
                        f"sees it: {missing}).\n" + "\n".join(_logs(n) for n in nodes)),
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


def stop_all(nodes: Sequence[KafkaNode], *, progress: Progress, timeout: float = 60.0) -> bool:
    """Stop every running node, all at once (SIGTERM; SIGKILL after ``timeout``). False if none ran.

    All at once, not one after another: a KRaft node's clean shutdown asks the
    quorum to move its partitions away first. Stopped one by one, the last node
    would wait for a quorum the earlier ones already took down with them.
    """
    found = [(node, pid) for node in nodes if (pid := running_pid(node)) is not None]
    for node, pid in found:
        progress(f"stopping Kafka {node.name} (pid {pid})" if len(nodes) > 1 else f"stopping Kafka (pid {pid})")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for node, pid in found:
        if not process.terminate(pid, timeout=max(0.1, deadline - time.monotonic())):
            progress(f"Kafka {node.name} did not stop within {timeout:.0f} s and was killed")
        node.pid_file.unlink(missing_ok=True)
    return bool(found)


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
