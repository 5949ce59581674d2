"""The local dev cluster as one unit: ``up``, ``down``, ``status`` and ``env`` over Kafka and Postgres.

``up`` is idempotent: a service that is running and healthy is reused, never
restarted, so every test session and every engineer can call it freely. All
state lives in one home directory::

    <home>/cluster.json         ports of the last `up` (so `status`/`env` need no flags)
    <home>/kafka/               server.properties, data/, logs/server.log, kafka.pid
    <home>/postgres/            data/, postgres.log (owned by the unprivileged server user)
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError, ServiceUnavailable
from . import kafka, postgres, process
from .kafka import KafkaNode
from .postgres import PostgresNode

# Must agree with swarmlog.settings.DEFAULT_BOOTSTRAP_SERVERS / DEFAULT_DATABASE_URL
# (a test checks), so that a fresh shell needs no `eval "$(swarmlog dev env)"`.
DEFAULT_KAFKA_PORT = 19092
DEFAULT_CONTROLLER_PORT = 19093
DEFAULT_POSTGRES_PORT = 15432
# As root the home must be traversable by the unprivileged Postgres user; /root is not.
ROOT_HOME = Path("/var/tmp/swarmlog-dev")

_RECORD = "cluster.json"

Progress = Callable[[str], None]


def print_progress(message: str) -> None:
    """The default progress reporter: one line on stderr (stdout stays clean for `env`)."""
    print(f"swarmlog dev: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True)
class ClusterInfo:
    """Where the dev cluster is and how to reach it."""

    home: Path
    bootstrap_servers: str
    database_url: str
    kafka_pid: int | None
    postgres_pid: int | None
    kafka_log: Path
    postgres_log: Path


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
    """Both services, and the connection details (``info``) whether or not they run."""

    home: Path
    kafka: ServiceStatus
    postgres: ServiceStatus
    info: ClusterInfo

    @property
    def running(self) -> bool:
        """True if both services run and answer."""
        return self.kafka.healthy and self.postgres.healthy


@dataclass(frozen=True, kw_only=True)
class _Layout:
    home: Path
    kafka: KafkaNode
    postgres: PostgresNode
    classpath_cache: Path
    port_sources: Mapping[str, str]
    """For each of kafka/controller/postgres: the flag and variable that set it (for error messages)."""


# --- the public commands -------------------------------------------------------------------


def up(
    *,
    home: Path | str | None = None,
    kafka_port: int | None = None,
    controller_port: int | None = None,
    postgres_port: int | None = None,
    progress: Progress = print_progress,
) -> ClusterInfo:
    """Start the dev cluster, or reuse it if it already runs; return how to reach it.

    Each argument left None comes from ``SWARMLOG_DEV_HOME`` /
    ``SWARMLOG_DEV_KAFKA_PORT`` / ``SWARMLOG_DEV_CONTROLLER_PORT`` /
    ``SWARMLOG_DEV_POSTGRES_PORT``, else from the home's last ``up``, else the
    defaults (``/var/tmp/swarmlog-dev`` as root, ``~/.cache/swarmlog/dev``
    otherwise; ports 19092, 19093, 15432).

    Raises MissingDependency (Java, Maven or PostgreSQL missing),
    ConfigurationError (a port taken by another program, ports changed under a
    running cluster) or ServiceUnavailable (a service failed to start; the
    message carries its log).
    """
    started = time.monotonic()
    layout = _layout(home=home, kafka_port=kafka_port, controller_port=controller_port,
                     postgres_port=postgres_port)
    _make_home(layout.home)
    with _locked(layout.home, progress):
        kafka_pid = kafka.running_pid(layout.kafka)
        postgres_pid = postgres.running_pid(layout.postgres)
        _refuse_port_changes(layout, kafka_running=kafka_pid is not None,
                             postgres_running=postgres_pid is not None)
        _write_record(layout)

        # Kafka is only spawned here and waited for last: its JVM boots while Postgres starts.
        kafka_started = kafka_pid is None
        if kafka_pid is None:
            _require_free(layout, "kafka")
            _require_free(layout, "controller")
            java = kafka.require_java()
            classpath = kafka.resolve_classpath(cache_dir=layout.classpath_cache, progress=progress)
            kafka.write_config(layout.kafka)
            kafka.ensure_formatted(layout.kafka, java=java, classpath=classpath, progress=progress)
            kafka_pid = kafka.start(layout.kafka, java=java, classpath=classpath, progress=progress)

        if postgres_pid is None:
            _require_free(layout, "postgres")
            bin_dir = postgres.ensure_bin_dir(progress=progress)
            postgres.prepare(layout.postgres)
            postgres.initialize(layout.postgres, bin_dir=bin_dir, progress=progress)
            postgres.write_config(layout.postgres)
            postgres_pid = postgres.start(layout.postgres, bin_dir=bin_dir, progress=progress)
        else:
            _wait_postgres(layout.postgres, pid=postgres_pid)
            progress(f"PostgreSQL already running (pid {postgres_pid}) on {layout.postgres.address}")
        postgres.ensure_database(layout.postgres)

        if kafka_started:
            progress("waiting for Kafka to answer")
        kafka.wait_ready(layout.kafka, pid=kafka_pid)
        if not kafka_started:
            progress(f"Kafka already running (pid {kafka_pid}) on {layout.kafka.bootstrap_servers}")

    progress(f"ready in {time.monotonic() - started:.1f} s; "
             f'point clients at it with: eval "$(swarmlog dev env)"')
    return _info(layout, kafka_pid=kafka_pid, postgres_pid=postgres_pid)


def down(*, home: Path | str | None = None, purge: bool = False, progress: Progress = print_progress) -> None:
    """Stop the dev cluster in ``home`` (default as for :func:`up`); ``purge`` also deletes its data.

    Without ``purge`` the next ``up`` finds the same topics, offsets and tables.
    """
    layout = _layout(home=home, kafka_port=None, controller_port=None, postgres_port=None)
    if not layout.home.is_dir():
        progress(f"no dev cluster in {layout.home}")
        return
    with _locked(layout.home, progress):
        stopped_kafka = kafka.stop(layout.kafka, progress=progress)
        stopped_postgres = postgres.stop(layout.postgres, progress=progress)
        if not (stopped_kafka or stopped_postgres):
            progress(f"the dev cluster in {layout.home} was not running")
        if purge:
            # Only what `up` created: `home` may be a directory the user also uses for other things.
            for path in (layout.kafka.dir, layout.postgres.dir):
                shutil.rmtree(path, ignore_errors=True)
            (layout.home / _RECORD).unlink(missing_ok=True)
            progress(f"deleted the dev cluster's data in {layout.home}")


def status(
    *,
    home: Path | str | None = None,
    kafka_port: int | None = None,
    controller_port: int | None = None,
    postgres_port: int | None = None,
) -> ClusterStatus:
    """Report whether the dev cluster's services run and answer; starts and stops nothing."""
    layout = _layout(home=home, kafka_port=kafka_port, controller_port=controller_port,
                     postgres_port=postgres_port)
    kafka_pid = kafka.running_pid(layout.kafka)
    postgres_pid = postgres.running_pid(layout.postgres)
    return ClusterStatus(
        home=layout.home,
        kafka=ServiceStatus(
            name="kafka", address=layout.kafka.bootstrap_servers, pid=kafka_pid,
            healthy=kafka_pid is not None and kafka.is_healthy(layout.kafka),
            log=layout.kafka.server_log,
        ),
        postgres=ServiceStatus(
            name="postgres", address=layout.postgres.address, pid=postgres_pid,
            healthy=postgres_pid is not None and postgres.is_healthy(layout.postgres),
            log=layout.postgres.log_file,
        ),
        info=_info(layout, kafka_pid=kafka_pid, postgres_pid=postgres_pid),
    )


def env_lines(info: ClusterInfo) -> str:
    """Shell lines that point swarmlog at the cluster: ``eval "$(swarmlog dev env)"``."""
    return (
        f"export SWARMLOG_BOOTSTRAP_SERVERS={shlex.quote(info.bootstrap_servers)}\n"
        f"export SWARMLOG_DATABASE_URL={shlex.quote(info.database_url)}"
    )


def kafka_tool_argv(main_class: str, *args: str, progress: Progress = print_progress) -> list[str]:
    """The command line that runs one of Kafka's Java tools with ``args``.

    ``main_class`` is e.g. ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``
    or ``org.apache.kafka.tools.ProducerPerformance``; pass ``--bootstrap-server``
    in ``args``. The tools run from the dev broker's jars (resolved by Maven on
    first use), so they work against any cluster, not only the dev one.
    """
    java = kafka.require_java()
    layout = _layout(home=None, kafka_port=None, controller_port=None, postgres_port=None)
    classpath = kafka.resolve_classpath(cache_dir=layout.classpath_cache, progress=progress)
    return [java, "-Xmx512m", "-cp", classpath, main_class, *args]


# --- configuration ---------------------------------------------------------------------------


def _layout(
    *,
    home: Path | str | None,
    kafka_port: int | None,
    controller_port: int | None,
    postgres_port: int | None,
    environ: Mapping[str, str] | None = None,
) -> _Layout:
    """The one place the dev cluster reads its environment (``SWARMLOG_DEV_*``).

    Precedence, per value: argument > environment variable > the home's last
    ``up`` (``cluster.json``) > default.
    """
    env = os.environ if environ is None else environ
    root = os.geteuid() == 0
    home_path = Path(
        home or env.get("SWARMLOG_DEV_HOME")
        or (ROOT_HOME if root else Path.home() / ".cache" / "swarmlog" / "dev")
    ).expanduser().absolute()
    recorded = _read_record(home_path)
    sources: dict[str, str] = {}

    def port(key: str, explicit: int | None, flag: str, var: str, default: int) -> int:
        sources[key] = f"{flag} N or {var}=N"
        if explicit is not None:
            value: object = explicit
        elif env.get(var):
            value = env[var]
        else:
            value = recorded.get(f"{key}_port", default)
        try:
            number = int(str(value))
        except ValueError:
            number = 0
        if not 0 < number < 65536:
            raise ConfigurationError(f"{var} / {flag} must be a TCP port (1-65535), not {value!r}")
        return number

    ports = {
        "kafka": port("kafka", kafka_port, "--kafka-port", "SWARMLOG_DEV_KAFKA_PORT", DEFAULT_KAFKA_PORT),
        "controller": port("controller", controller_port, "--controller-port",
                           "SWARMLOG_DEV_CONTROLLER_PORT", DEFAULT_CONTROLLER_PORT),
        "postgres": port("postgres", postgres_port, "--postgres-port", "SWARMLOG_DEV_POSTGRES_PORT",
                         DEFAULT_POSTGRES_PORT),
    }
    if len(set(ports.values())) != len(ports):
        raise ConfigurationError(f"the dev cluster's ports must differ, got {ports}")
    return _Layout(
        home=home_path,
        kafka=KafkaNode(dir=home_path / "kafka", port=ports["kafka"], controller_port=ports["controller"]),
        postgres=PostgresNode(dir=home_path / "postgres", port=ports["postgres"],
                              owner=postgres.service_user()),
        # Per user, not per home: a second home (tests) reuses the resolved jars.
        classpath_cache=Path.home() / ".cache" / "swarmlog",
        port_sources=sources,
    )


def _read_record(home: Path) -> dict[str, int]:
    try:
        data = json.loads((home / _RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def _write_record(layout: _Layout) -> None:
    record = {
        "kafka_port": layout.kafka.port,
        "controller_port": layout.kafka.controller_port,
        "postgres_port": layout.postgres.port,
    }
    path = layout.home / _RECORD
    partial = path.with_name(f".{_RECORD}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, path)


def _refuse_port_changes(layout: _Layout, *, kafka_running: bool, postgres_running: bool) -> None:
    recorded = _read_record(layout.home)
    if not recorded:
        return
    where = f"the dev cluster in {layout.home}"
    wanted = {"kafka": layout.kafka.port, "controller": layout.kafka.controller_port,
              "postgres": layout.postgres.port}
    for key, running in (("kafka", kafka_running), ("controller", kafka_running),
                         ("postgres", postgres_running)):
        had = recorded.get(f"{key}_port")
        if running and had is not None and had != wanted[key]:
            raise ConfigurationError(
                f"{where} is running with {key} port {had}, not {wanted[key]}; run "
                f"`swarmlog dev down` first to change ports (the data is kept)"
            )
    # The controller's address is written into the KRaft metadata log when the storage is
    # formatted; the broker would look for its quorum at the old port forever.
    had = recorded.get("controller_port")
    if kafka.is_formatted(layout.kafka) and had is not None and had != layout.kafka.controller_port:
        raise ConfigurationError(
            f"Kafka's storage in {layout.home} was formatted with controller port {had}; use "
            f"--controller-port {had}, or delete the data with `swarmlog dev down --purge`"
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


def _require_free(layout: _Layout, key: str) -> None:
    port = {"kafka": layout.kafka.port, "controller": layout.kafka.controller_port,
            "postgres": layout.postgres.port}[key]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return  # nobody listening: free
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


def _info(layout: _Layout, *, kafka_pid: int | None, postgres_pid: int | None) -> ClusterInfo:
    return ClusterInfo(
        home=layout.home,
        bootstrap_servers=layout.kafka.bootstrap_servers,
        database_url=layout.postgres.database_url,
        kafka_pid=kafka_pid,
        postgres_pid=postgres_pid,
        kafka_log=layout.kafka.server_log,
        postgres_log=layout.postgres.log_file,
    )
