"""The local dev cluster as one unit: ``up``, ``down``, ``status`` and ``env`` over Kafka and Postgres.

``up`` is idempotent: a service that is running and healthy is reused, never
restarted, so every test session and every engineer can call it freely. All
state lives in one home directory::

    <home>/cluster.json         ports, broker count and SASL of the last `up` (so `status`/`env` need no flags)
    <home>/kafka/               server.properties, data/, logs/server.log, kafka.pid (the first node)
    <home>/kafka-2/, kafka-3/   the same for the other nodes of `up --brokers 3`
    <home>/kafka-quorum.json    `--brokers 3`: the cluster id and voters every node was formatted with
    <home>/kafka-sasl.json      `--sasl`: the SCRAM user and its password (mode 600)
    <home>/postgres/            data/, postgres.log (owned by the unprivileged server user)

Ports of ``--brokers N``: node n listens on the given ports + 10·(n−1), unless
each option lists one port per node (``--kafka-port 29092,29102,29112``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError, ServiceUnavailable
from . import kafka, postgres, process, sasl
from .kafka import KafkaNode
from .postgres import PostgresNode
from .sasl import Credentials

__all__ = ["ClusterInfo", "ClusterStatus", "DEFAULT_CONTROLLER_PORT", "DEFAULT_KAFKA_PORT", "DEFAULT_POSTGRES_PORT",
           "DEFAULT_SASL_PORT", "MAX_BROKERS", "NODE_PORT_STEP", "Ports", "Progress", "ROOT_HOME", "ServiceStatus",
           "down", "env_lines", "kafka_tool_argv", "print_progress", "status", "up"]

# Must agree with swarmlog.settings.DEFAULT_BOOTSTRAP_SERVERS / DEFAULT_DATABASE_URL
# (a test checks), so that a fresh shell needs no `eval "$(swarmlog dev env)"`.
DEFAULT_KAFKA_PORT = 19092
DEFAULT_CONTROLLER_PORT = 19093
DEFAULT_SASL_PORT = 19094
DEFAULT_POSTGRES_PORT = 15432
# Node n of a multi-broker cluster: the first node's ports + NODE_PORT_STEP·(n−1).
NODE_PORT_STEP = 10
MAX_BROKERS = 9
# As root the home must be traversable by the unprivileged Postgres user; /root is not.
ROOT_HOME = Path("/var/tmp/swarmlog-dev")

_RECORD = "cluster.json"
_QUORUM = "kafka-quorum.json"

Progress = Callable[[str], None]
Ports = int | Sequence[int] | str | None
"""A port option: one port (the first node's), one per node, or a comma-separated list of them."""


def print_progress(message: str) -> None:
    """The default progress reporter: one line on stderr (stdout stays clean for `env`)."""
    print(f"swarmlog dev: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True)
class ClusterInfo:
    """Where the dev cluster is and how to reach it."""

    home: Path
    bootstrap_servers: str
    """Every broker's PLAINTEXT listener, comma-separated."""
    database_url: str
    kafka_pid: int | None
    """The first broker's pid (see ``kafka_pids`` for all of them)."""
    postgres_pid: int | None
    kafka_log: Path
    postgres_log: Path
    kafka_pids: tuple[int | None, ...] = ()
    kafka_logs: tuple[Path, ...] = ()
    sasl_bootstrap_servers: str | None = None
    """Every broker's SASL_PLAINTEXT listener (``up --sasl``), else None."""
    sasl: Credentials | None = None
    """The SASL user (its password a ``SecretStr``), else None."""


@dataclass(frozen=True, kw_only=True)
class ServiceStatus:
    """One service of the dev cluster as found right now."""

    name: str
    address: str
    pid: int | None
    """Pid of our process, None if it is not running."""
    healthy: bool
    """It answered a request (Kafka: metadata; Postgres: ``SELECT 1``)."""
    log: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True, kw_only=True)
class ClusterStatus:
    """Every service, and the connection details (``info``) whether or not they run."""

    home: Path
    kafka: ServiceStatus
    """The first broker (all of them: ``brokers``)."""
    postgres: ServiceStatus
    info: ClusterInfo
    brokers: tuple[ServiceStatus, ...] = ()

    @property
    def running(self) -> bool:
        """True if every service runs and answers."""
        return all(b.healthy for b in (self.brokers or (self.kafka,))) and self.postgres.healthy


@dataclass(frozen=True, kw_only=True)
class _Layout:
    home: Path
    kafka: tuple[KafkaNode, ...]
    postgres: PostgresNode
    sasl: bool
    classpath_cache: Path
    port_sources: Mapping[str, str]
    """For each of kafka/controller/sasl/postgres/brokers: the flag and variable that set it (for errors)."""

    @property
    def quorum_file(self) -> Path:
        return self.home / _QUORUM

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap_servers for n in self.kafka)

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        return ",".join(n.sasl_bootstrap_servers or "" for n in self.kafka) if self.sasl else None


# --- the public commands -------------------------------------------------------------------


def up(
    *,
    home: Path | str | None = None,
    kafka_port: Ports = None,
    controller_port: Ports = None,
    postgres_port: int | None = None,
    brokers: int | None = None,
    sasl_listener: bool | None = None,
    sasl_port: Ports = None,
    progress: Progress = print_progress,
) -> ClusterInfo:
    """Start the dev cluster, or reuse it if it already runs; return how to reach it.

    Each argument left None comes from ``SWARMLOG_DEV_HOME`` /
    ``SWARMLOG_DEV_KAFKA_PORT`` / ``SWARMLOG_DEV_CONTROLLER_PORT`` /
    ``SWARMLOG_DEV_POSTGRES_PORT`` / ``SWARMLOG_DEV_BROKERS`` /
    ``SWARMLOG_DEV_SASL`` / ``SWARMLOG_DEV_SASL_PORT``, else from the home's last
    ``up``, else the defaults (``/var/tmp/swarmlog-dev`` as root,
    ``~/.cache/swarmlog/dev`` otherwise; ports 19092, 19093, 15432; one broker;
    no SASL listener, 19094 when there is one).

    ``brokers=3``: three KRaft nodes, each broker and controller, every topic
    replicated three times with ``min.insync.replicas=2``. ``sasl_listener``:
    each broker also listens for SASL_PLAINTEXT (SCRAM-SHA-512) clients, as a
    user ``up`` creates; ``env`` then points clients there, with the credentials.

    Raises MissingDependency (Java, Maven or PostgreSQL missing),
    ConfigurationError (a port taken by another program, ports, broker count or
    SASL changed under a running cluster) or ServiceUnavailable (a service
    failed to start; the message carries its log).
    """
    started = time.monotonic()
    layout = _layout(home=home, kafka_port=kafka_port, controller_port=controller_port,
                     postgres_port=postgres_port, brokers=brokers, sasl_listener=sasl_listener, sasl_port=sasl_port)
    _make_home(layout.home)
    with _locked(layout.home, progress):
        kafka_pids = {node.node_id: kafka.running_pid(node) for node in layout.kafka}
        postgres_pid = postgres.running_pid(layout.postgres)
        _refuse_changes(layout, kafka_running={i for i, pid in kafka_pids.items() if pid is not None},
                        postgres_running=postgres_pid is not None)
        _write_record(layout)

        # Kafka is only spawned here and waited for last: its JVMs boot while Postgres starts.
        to_start = [node for node in layout.kafka if kafka_pids[node.node_id] is None]
        if to_start:
            for node in to_start:
                _require_free(layout, node)
            java = kafka.require_java()
            classpath = kafka.resolve_classpath(cache_dir=layout.classpath_cache, progress=progress)
            for node in to_start:
                kafka.write_config(node, quorum=layout.kafka)
            kafka.ensure_formatted(layout.kafka, identity_file=layout.quorum_file, java=java, classpath=classpath,
                                   progress=progress)
            for node in to_start:
                kafka_pids[node.node_id] = kafka.start(node, java=java, classpath=classpath, progress=progress)

        if postgres_pid is None:
            _require_free(layout, layout.postgres)
            bin_dir = postgres.ensure_bin_dir(progress=progress)
            postgres.prepare(layout.postgres)
            postgres.initialize(layout.postgres, bin_dir=bin_dir, progress=progress)
            postgres.write_config(layout.postgres)
            postgres.clear_stale_locks(layout.postgres, progress=progress)
            postgres_pid = postgres.start(layout.postgres, bin_dir=bin_dir, progress=progress)
        else:
            _wait_postgres(layout.postgres, pid=postgres_pid)
            progress(f"PostgreSQL already running (pid {postgres_pid}) on {layout.postgres.address}")
        postgres.ensure_database(layout.postgres)

        if to_start:
            progress("waiting for Kafka to answer")
        for node in layout.kafka:
            kafka.wait_ready(node, pid=kafka_pids[node.node_id])  # type: ignore[arg-type]
        if len(layout.kafka) > 1:
            kafka.wait_quorum(layout.kafka)
        running = [node for node in layout.kafka if node not in to_start]
        if running:
            shown = ", ".join(f"pid {kafka_pids[n.node_id]} on {n.bootstrap_servers}" for n in running)
            progress(f"Kafka already running ({shown})")
        credentials = None
        if layout.sasl:
            credentials, created = sasl.load_or_create(layout.home)
            sasl.ensure_user(bootstrap_servers=layout.bootstrap_servers, credentials=credentials, replace=created)
            sasl.wait_authenticated(bootstrap_servers=layout.sasl_bootstrap_servers or "", credentials=credentials)
            progress(f"SASL_PLAINTEXT ({sasl.MECHANISM}) on {layout.sasl_bootstrap_servers} as user "
                     f"{credentials.username!r} (its password: `swarmlog dev env`)")

    progress(f"ready in {time.monotonic() - started:.1f} s; "
             f'point clients at it with: eval "$(swarmlog dev env)"')
    return _info(layout, kafka_pids=kafka_pids, postgres_pid=postgres_pid, credentials=credentials)


def down(*, home: Path | str | None = None, purge: bool = False, progress: Progress = print_progress) -> None:
    """Stop the dev cluster in ``home`` (default as for :func:`up`); ``purge`` also deletes its data.

    Without ``purge`` the next ``up`` finds the same topics, offsets and tables.
    """
    layout = _layout(home=home, kafka_port=None, controller_port=None, postgres_port=None)
    if not layout.home.is_dir():
        progress(f"no dev cluster in {layout.home}")
        return
    with _locked(layout.home, progress):
        stopped_kafka = kafka.stop_all(layout.kafka, progress=progress)
        stopped_postgres = postgres.stop(layout.postgres, progress=progress)
        if not (stopped_kafka or stopped_postgres):
            progress(f"the dev cluster in {layout.home} was not running")
        if purge:
            # Only what `up` created: `home` may be a directory the user also uses for other things.
            nodes = {node.dir for node in layout.kafka} | {
                layout.home / f"kafka-{n}" for n in range(2, MAX_BROKERS + 1)}
            for path in (*sorted(nodes), layout.postgres.dir):
                shutil.rmtree(path, ignore_errors=True)
            for name in (_RECORD, _QUORUM, sasl.credentials_file(layout.home).name):
                (layout.home / name).unlink(missing_ok=True)
            progress(f"deleted the dev cluster's data in {layout.home}")


def status(
    *,
    home: Path | str | None = None,
    kafka_port: Ports = None,
    controller_port: Ports = None,
    postgres_port: int | None = None,
    brokers: int | None = None,
    sasl_listener: bool | None = None,
    sasl_port: Ports = None,
) -> ClusterStatus:
    """Report whether the dev cluster's services run and answer; starts and stops nothing."""
    layout = _layout(home=home, kafka_port=kafka_port, controller_port=controller_port,
                     postgres_port=postgres_port, brokers=brokers, sasl_listener=sasl_listener, sasl_port=sasl_port)
    kafka_pids = {node.node_id: kafka.running_pid(node) for node in layout.kafka}
    postgres_pid = postgres.running_pid(layout.postgres)
    several = len(layout.kafka) > 1
    found = tuple(
        ServiceStatus(
            name=node.name if several else "kafka", address=node.bootstrap_servers, pid=kafka_pids[node.node_id],
            healthy=kafka_pids[node.node_id] is not None and kafka.is_healthy(node), log=node.server_log,
        )
        for node in layout.kafka
    )
    return ClusterStatus(
        home=layout.home,
        kafka=found[0],
        brokers=found,
        postgres=ServiceStatus(
            name="postgres", address=layout.postgres.address, pid=postgres_pid,
            healthy=postgres_pid is not None and postgres.is_healthy(layout.postgres),
            log=layout.postgres.log_file,
        ),
        info=_info(layout, kafka_pids=kafka_pids, postgres_pid=postgres_pid,
                   credentials=sasl.load(layout.home) if layout.sasl else None),
    )


def env_lines(info: ClusterInfo) -> str:
    """Shell lines that point swarmlog at the cluster: ``eval "$(swarmlog dev env)"``.

    With a SASL listener they point at it and carry the credentials as
    ``SWARMLOG_KAFKA_*`` (librdkafka's properties); this is the one place the
    dev cluster writes its password out.
    """
    if info.sasl is None or not info.sasl_bootstrap_servers:
        return (
            f"export SWARMLOG_BOOTSTRAP_SERVERS={shlex.quote(info.bootstrap_servers)}\n"
            f"export SWARMLOG_DATABASE_URL={shlex.quote(info.database_url)}"
        )
    values = {
        "SWARMLOG_BOOTSTRAP_SERVERS": info.sasl_bootstrap_servers,
        "SWARMLOG_DATABASE_URL": info.database_url,
        "SWARMLOG_KAFKA_SECURITY_PROTOCOL": sasl.SECURITY_PROTOCOL,
        "SWARMLOG_KAFKA_SASL_MECHANISM": sasl.MECHANISM,
        "SWARMLOG_KAFKA_SASL_USERNAME": info.sasl.username,
        "SWARMLOG_KAFKA_SASL_PASSWORD": info.sasl.password.get_secret_value(),
    }
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in values.items())


def kafka_tool_argv(main_class: str, *args: str, progress: Progress = print_progress) -> list[str]:
    """The command line that runs one of Kafka's Java tools with ``args``.

    ``main_class`` is e.g. ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``
    or ``org.apache.kafka.tools.ProducerPerformance``; pass ``--bootstrap-server``
    in ``args``. The tools run from the dev broker's jars (resolved by Maven on
    first use), so they work against any cluster, not only the dev one.
    """
    java = kafka.require_java()
    classpath = kafka.resolve_classpath(cache_dir=_classpath_cache(), progress=progress)
    return [java, "-Xmx512m", "-cp", classpath, main_class, *args]


# --- configuration ---------------------------------------------------------------------------


def _layout(
    *,
    home: Path | str | None,
    kafka_port: Ports,
    controller_port: Ports,
    postgres_port: int | None,
    brokers: int | None = None,
    sasl_listener: bool | None = None,
    sasl_port: Ports = None,
    environ: Mapping[str, str] | None = None,
) -> _Layout:
    """The one place the dev cluster reads its environment (``SWARMLOG_DEV_*``).

    Precedence, per value: argument > environment variable > the home's last
    ``up`` (``cluster.json``) > default. The variables other than
    ``SWARMLOG_DEV_HOME`` only apply to that home.
    """
    env = os.environ if environ is None else environ
    root = os.geteuid() == 0
    env_home = Path(
        env.get("SWARMLOG_DEV_HOME") or (ROOT_HOME if root else Path.home() / ".cache" / "swarmlog" / "dev")
    ).expanduser().absolute()
    home_path = Path(home).expanduser().absolute() if home else env_home
    if home_path != env_home:
        # The other SWARMLOG_DEV_* variables describe the cluster in SWARMLOG_DEV_HOME; another
        # home (a test's spare cluster) has its own ports, in its own cluster.json.
        env = {k: v for k, v in env.items() if not k.startswith("SWARMLOG_DEV_")}
    recorded = _read_record(home_path)
    sources: dict[str, str] = {
        "brokers": "--brokers N or SWARMLOG_DEV_BROKERS=N",
        "sasl": "--sasl / --no-sasl or SWARMLOG_DEV_SASL=1/0",
    }

    def pick(explicit: object, var: str, key: str, default: object) -> object:
        if explicit is not None:
            return explicit
        if env.get(var):
            return env[var]
        return recorded.get(key, default)

    count_value = pick(brokers, "SWARMLOG_DEV_BROKERS", "brokers", 1)
    try:
        count = int(str(count_value))
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_BROKERS:
        raise ConfigurationError(f"SWARMLOG_DEV_BROKERS / --brokers must be 1-{MAX_BROKERS}, not {count_value!r}")
    sasl_value = pick(sasl_listener, "SWARMLOG_DEV_SASL", "sasl", False)
    with_sasl = sasl_value if isinstance(sasl_value, bool) else str(sasl_value).lower() in ("1", "true", "yes", "on")

    def ports(key: str, explicit: Ports, flag: str, var: str, default: int, n: int = count) -> list[int]:
        sources[key] = f"{flag} N or {var}=N"
        # The recorded list wins over the recorded first port (older records only have that).
        value = pick(explicit, var, f"{key}_ports", None)
        if value is None:
            value = recorded.get(f"{key}_port", default)
        numbers = _parse_ports(value, var=var, flag=flag)
        if len(numbers) == 1:
            numbers = [numbers[0] + NODE_PORT_STEP * i for i in range(n)]
        if len(numbers) < n:
            raise ConfigurationError(f"{var} / {flag} lists {len(numbers)} ports for {n} brokers: give one "
                                     f"(node n then listens on it + {NODE_PORT_STEP}·(n−1)) or one per broker")
        return numbers[:n]

    kafka_ports = ports("kafka", kafka_port, "--kafka-port", "SWARMLOG_DEV_KAFKA_PORT", DEFAULT_KAFKA_PORT)
    controller_ports = ports("controller", controller_port, "--controller-port", "SWARMLOG_DEV_CONTROLLER_PORT",
                             DEFAULT_CONTROLLER_PORT)
    sasl_ports: list[int | None] = [None] * count
    if with_sasl:
        sasl_ports = list(ports("sasl", sasl_port, "--sasl-port", "SWARMLOG_DEV_SASL_PORT", DEFAULT_SASL_PORT))
    [pg_port] = ports("postgres", postgres_port, "--postgres-port", "SWARMLOG_DEV_POSTGRES_PORT",
                      DEFAULT_POSTGRES_PORT, n=1)
    every = [*kafka_ports, *controller_ports, *(p for p in sasl_ports if p is not None), pg_port]
    if len(set(every)) != len(every):
        raise ConfigurationError(
            f"the dev cluster's ports must differ, got kafka {kafka_ports}, controller {controller_ports}, "
            f"sasl {[p for p in sasl_ports if p is not None]}, postgres {pg_port}")
    nodes = tuple(
        KafkaNode(dir=home_path / ("kafka" if i == 0 else f"kafka-{i + 1}"), node_id=i + 1, port=kafka_ports[i],
                  controller_port=controller_ports[i], sasl_port=sasl_ports[i])
        for i in range(count)
    )
    return _Layout(
        home=home_path,
        kafka=nodes,
        postgres=PostgresNode(dir=home_path / "postgres", port=pg_port, owner=postgres.service_user()),
        sasl=with_sasl,
        classpath_cache=_classpath_cache(),
        port_sources=sources,
    )


def _classpath_cache() -> Path:
    # Per user, not per home: a second home (tests) reuses the resolved jars.
    return Path.home() / ".cache" / "swarmlog"


def _parse_ports(value: object, *, var: str, flag: str) -> list[int]:
    if isinstance(value, int):
        items: list[object] = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        items = [value]
    numbers = []
    for item in items:
        try:
            number = int(str(item))
        except ValueError:
            number = 0
        if not 0 < number < 65536:
            raise ConfigurationError(f"{var} / {flag} must be a TCP port (1-65535) or a comma-separated list "
                                     f"of them, not {value!r}")
        numbers.append(number)
    if not numbers:
        raise ConfigurationError(f"{var} / {flag} is empty")
    return numbers


def _read_record(home: Path) -> dict[str, object]:
    try:
        data = json.loads((home / _RECORD).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}

    def usable(v: object) -> bool:
        return isinstance(v, (int, bool)) or (isinstance(v, list) and all(isinstance(x, int) for x in v))

    return {k: v for k, v in data.items() if usable(v)}


def _write_record(layout: _Layout) -> None:
    nodes = layout.kafka
    record: dict[str, object] = {
        # The first node's ports under the old names: a record stays readable by older versions.
        "kafka_port": nodes[0].port,
        "controller_port": nodes[0].controller_port,
        "postgres_port": layout.postgres.port,
        "brokers": len(nodes),
        "kafka_ports": [n.port for n in nodes],
        "controller_ports": [n.controller_port for n in nodes],
        "sasl": layout.sasl,
    }
    if layout.sasl:
        record["sasl_ports"] = [n.sasl_port for n in nodes]
    path = layout.home / _RECORD
    partial = path.with_name(f".{_RECORD}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, path)


def _recorded_ports(recorded: Mapping[str, object], key: str) -> list[int] | None:
    listed = recorded.get(f"{key}_ports")
    if isinstance(listed, list):
        return [int(p) for p in listed]
    single = recorded.get(f"{key}_port")
    return [single] if isinstance(single, int) and not isinstance(single, bool) else None


def _refuse_changes(layout: _Layout, *, kafka_running: set[int], postgres_running: bool) -> None:
    recorded = _read_record(layout.home)
    if not recorded:
        return
    where = f"the dev cluster in {layout.home}"
    had_brokers = recorded.get("brokers", 1)
    formatted = any(kafka.is_formatted(node) for node in layout.kafka)  # node 1 is <home>/kafka either way
    # The quorum's voters are written into the KRaft metadata log when the storage is formatted.
    if formatted and had_brokers != len(layout.kafka):
        raise ConfigurationError(
            f"Kafka's storage in {layout.home} was formatted for {had_brokers} broker(s), not "
            f"{len(layout.kafka)}; use --brokers {had_brokers}, or delete the data with "
            f"`swarmlog dev down --purge`"
        )
    if kafka_running and bool(recorded.get("sasl", False)) != layout.sasl:
        state = "with" if recorded.get("sasl") else "without"
        raise ConfigurationError(
            f"{where} is running {state} a SASL listener; run `swarmlog dev down` first to change "
            f"that (the data is kept), then `swarmlog dev up {'--no-sasl' if state == 'with' else '--sasl'}`"
        )
    wanted: dict[str, list[int | None]] = {
        "kafka": [n.port for n in layout.kafka],
        "controller": [n.controller_port for n in layout.kafka],
        "sasl": [n.sasl_port for n in layout.kafka],
        "postgres": [layout.postgres.port],
    }
    for key in ("kafka", "controller", "sasl", "postgres"):
        had = _recorded_ports(recorded, key)
        if had is None:
            continue
        for i, (before, now) in enumerate(zip(had, wanted[key], strict=False)):
            running = postgres_running if key == "postgres" else (i + 1) in kafka_running
            if running and now is not None and before != now:
                raise ConfigurationError(
                    f"{where} is running with {key} port {before}, not {now}; run "
                    f"`swarmlog dev down` first to change ports (the data is kept)"
                )
    # The controllers' addresses are written into the KRaft metadata log when the storage is
    # formatted; a broker would look for its quorum at the old ports forever.
    had = _recorded_ports(recorded, "controller")
    if formatted and had is not None and had[:len(layout.kafka)] != wanted["controller"]:
        shown = ",".join(map(str, had))
        raise ConfigurationError(
            f"Kafka's storage in {layout.home} was formatted with controller port(s) {shown}; use "
            f"--controller-port {shown}, or delete the data with `swarmlog dev down --purge`"
        )


# --- helpers ------------------------------------------------------------------------------------


def _make_home(home: Path) -> None:
    if home.is_dir():
        return
    home.mkdir(parents=True, exist_ok=True)
    # World-traversable (not listable-only-by-root) so the unprivileged Postgres user
    # can reach <home>/postgres when we run as root; umask would otherwise decide.
    home.chmod(0o755)


@contextmanager
def _locked(home: Path, progress: Progress) -> Iterator[None]:
    # Several pytest sessions (several engineers, CI) call `up` at the same moment on the
    # shared default cluster. Without this lock two of them would both see "not running"
    # and both format and start a broker on the same directory.
    with (home / ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            progress(f"waiting for another `swarmlog dev up/down` on {home} to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _require_free(layout: _Layout, node: KafkaNode | PostgresNode) -> None:
    """Every port ``node`` is about to listen on is free (else name who holds it)."""
    if isinstance(node, PostgresNode):
        wanted = [("postgres", node.port)]
    else:
        wanted = [("kafka", node.port), ("controller", node.controller_port)]
        if node.sasl_port is not None:
            wanted.append(("sasl", node.sasl_port))
    for key, port in wanted:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        except OSError:
            continue  # nobody listening: free
        holder = _who_listens(port) or "another program"
        raise ConfigurationError(
            f"port {port}, which the dev cluster in {layout.home} needs for its {key} listener, is "
            f"already in use by {holder}, which is not this dev cluster. Stop that program, or "
            f"choose another port: {layout.port_sources[key]}."
        )


def _who_listens(port: int) -> str | None:
    """Best effort: the pid and command line of the process listening on ``port``."""
    sockets: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 is the socket inode.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    if not sockets:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in sockets:
                    argv = process.cmdline(int(entry.name))
                    # The program and its last arguments say what it is (`java ... kafka.Kafka
                    # /path/server.properties`); the middle of a JVM command line is flags.
                    shown = " ".join(argv) if len(argv) <= 4 else " ".join([argv[0], "...", *argv[-2:]])
                    return f"pid {entry.name} ({shown})"
        except OSError:
            continue  # gone, or not ours to look at
    return None


def _wait_postgres(node: PostgresNode, *, pid: int, timeout: float = 60.0) -> None:
    # Running but not answering: it may be starting or recovering after a crash.
    deadline = time.monotonic() + timeout
    while not postgres.is_healthy(node):
        if not process.is_alive(pid) or time.monotonic() > deadline:
            raise ServiceUnavailable(
                service="PostgreSQL", address=node.address,
                detail=(f"the dev server (pid {pid}) does not accept connections; "
                        f"try `swarmlog dev down` and `swarmlog dev up`.\n"
                        f"--- last lines of {node.log_file}:\n{process.tail(node.log_file)}"),
            )
        time.sleep(0.25)


def _info(layout: _Layout, *, kafka_pids: Mapping[int, int | None], postgres_pid: int | None,
          credentials: Credentials | None) -> ClusterInfo:
    first = layout.kafka[0]
    return ClusterInfo(
        home=layout.home,
        bootstrap_servers=layout.bootstrap_servers,
        database_url=layout.postgres.database_url,
        kafka_pid=kafka_pids.get(first.node_id),
        postgres_pid=postgres_pid,
        kafka_log=first.server_log,
        postgres_log=layout.postgres.log_file,
        kafka_pids=tuple(kafka_pids.get(n.node_id) for n in layout.kafka),
        kafka_logs=tuple(n.server_log for n in layout.kafka),
        sasl_bootstrap_servers=layout.sasl_bootstrap_servers,
        sasl=credentials,
    )
