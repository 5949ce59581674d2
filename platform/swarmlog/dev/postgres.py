"""A throwaway PostgreSQL cluster for development: loopback only, trust auth, a ``swarmlog`` database.

PostgreSQL refuses to run as root (initdb and postgres both check), and dev
machines and CI here run as root. So when root, every server command runs as
an unprivileged user (``postgres`` if it exists, else ``nobody``) through
``runuser``, in a directory that user owns; the dev home must therefore be
traversable by that user (``/var/tmp/...`` is, ``/root/...`` is not).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ..errors import ConfigurationError, MissingDependency, ServiceUnavailable
from . import process

__all__ = ["DATABASE", "DEBIAN_LIB_ROOT", "PostgresNode", "Progress", "ROLE", "clear_stale_locks", "ensure_bin_dir",
           "ensure_database", "find_bin_dir", "initialize", "is_healthy", "is_initialized", "prepare", "running_pid",
           "service_user", "start", "stop", "write_config"]

ROLE = "swarmlog"
DATABASE = "swarmlog"
DEBIAN_LIB_ROOT = Path("/usr/lib/postgresql")
_CONF_NAME = "swarmlog-dev.conf"
# A unix socket path is limited to 107 bytes (sun_path); the socket file name adds ~17.
_MAX_SOCKET_DIR = 85

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class PostgresNode:
    """Where one dev Postgres keeps its files, its port, and the user it runs as."""

    dir: Path
    port: int
    owner: str | None
    """Unprivileged user the server runs as when we are root; None: run as ourselves."""

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        return self.dir / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        # Inside the node's own directory: no clash with a system Postgres in /var/run/postgresql.
        return self.dir if len(str(self.dir)) <= _MAX_SOCKET_DIR else Path("/tmp")

    @property
    def database_url(self) -> str:
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def service_user() -> str | None:
    """The user to run the server as: None unless we are root (then ``postgres``, else ``nobody``)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise ConfigurationError(
        "running as root, but neither a `postgres` nor a `nobody` user exists to run PostgreSQL "
        "as (it refuses to run as root); create one with `useradd --system postgres`"
    )


# --- binaries ---------------------------------------------------------------------------


def find_bin_dir(*, lib_root: Path = DEBIAN_LIB_ROOT, path: str | None = None) -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: Debian's newest version, else ``pg_ctl`` on PATH."""
    versions = []
    if lib_root.is_dir():
        for child in lib_root.iterdir():
            if child.name.isdigit() and _has_server(child / "bin"):
                versions.append((int(child.name), child / "bin"))
    if versions:
        return max(versions)[1]
    pg_ctl = shutil.which("pg_ctl", path=path)
    if pg_ctl is not None:
        # Follow symlinks (/usr/local/bin/pg_ctl -> .../15/bin/pg_ctl) to find initdb beside it.
        bin_dir = Path(pg_ctl).resolve().parent
        if _has_server(bin_dir):
            return bin_dir
    return None


def ensure_bin_dir(
    *,
    progress: Progress,
    lib_root: Path = DEBIAN_LIB_ROOT,
    path: str | None = None,
    is_root: bool | None = None,
) -> Path:
    """Find the PostgreSQL server binaries; as root, install Debian's package if there are none."""
    found = find_bin_dir(lib_root=lib_root, path=path)
    if found is not None:
        return found
    root = os.geteuid() == 0 if is_root is None else is_root
    hint = (
        "Install the PostgreSQL server, e.g. `sudo apt-get install -y postgresql` (Debian/Ubuntu), "
        "`sudo dnf install -y postgresql-server` (Fedora) or `brew install postgresql` (macOS), "
        "so that `initdb` and `pg_ctl` are in /usr/lib/postgresql/<version>/bin or on PATH."
    )
    if not root or shutil.which("apt-get") is None:
        raise MissingDependency(program="PostgreSQL server (`initdb`, `pg_ctl`)", install_hint=hint)
    progress("PostgreSQL is not installed: installing Debian's `postgresql` package "
             "(apt-get update && apt-get install -y postgresql); this takes a minute, once")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise MissingDependency(
                program="PostgreSQL server (`initdb`, `pg_ctl`)",
                install_hint=f"`{' '.join(argv)}` failed (exit {result.returncode}):\n{output}\n{hint}",
            )
    found = find_bin_dir(lib_root=lib_root, path=path)
    if found is None:
        raise MissingDependency(program="PostgreSQL server (`initdb`, `pg_ctl`)", install_hint=hint)
    return found


# --- data directory ---------------------------------------------------------------------


def prepare(node: PostgresNode) -> None:
    """Create the node's directory, owned by the server's user, and check that user can reach it."""
    node.dir.mkdir(parents=True, exist_ok=True)
    if node.owner is not None:
        entry = pwd.getpwnam(node.owner)
        os.chown(node.dir, entry.pw_uid, entry.pw_gid)
    # Private: it holds the unix socket, on which every local login is trusted.
    node.dir.chmod(0o700)
    if node.owner is None:
        return
    # Every ancestor must be traversable by the owner. Ask the kernel as that
    # user rather than reasoning about modes, ACLs and group memberships.
    if _run_as(node, ["test", "-w", str(node.dir), "-a", "-x", str(node.dir)]).returncode != 0:
        raise ConfigurationError(
            f"PostgreSQL runs as the unprivileged user {node.owner!r} (it refuses root), and that "
            f"user cannot reach {node.dir}: some parent directory is not traversable (e.g. /root "
            f"is mode 700). Use a dev home under /var/tmp: `swarmlog dev up --home "
            f"/var/tmp/swarmlog-dev` or SWARMLOG_DEV_HOME=/var/tmp/swarmlog-dev."
        )


def is_initialized(node: PostgresNode) -> bool:
    """True once ``initdb`` has completed for this node."""
    return (node.data_dir / "PG_VERSION").is_file()


def initialize(node: PostgresNode, *, bin_dir: Path, progress: Progress) -> None:
    """Run ``initdb`` once, with ``swarmlog`` as the superuser and trust auth on 127.0.0.1 only."""
    if is_initialized(node):
        return
    # No PG_VERSION: at most an interrupted initdb, which refuses a non-empty directory.
    shutil.rmtree(node.data_dir, ignore_errors=True)
    progress(f"initialising PostgreSQL in {node.data_dir}")
    result = _run_as(node, [
        str(bin_dir / "initdb"), "-D", str(node.data_dir), "-U", ROLE,
        "--auth=trust", "--encoding=UTF8", "--locale=C",
    ])
    if result.returncode != 0:
        raise ServiceUnavailable(
            service="PostgreSQL", address=node.address,
            detail=f"initdb failed (exit {result.returncode}):\n{(result.stdout + result.stderr).strip()}",
        )
    # Trust, but only over the private socket directory and 127.0.0.1: nothing else can log in.
    _write_owned(node, node.data_dir / "pg_hba.conf", (
        "# Written by `swarmlog dev up`: a throwaway dev cluster, reachable from this machine only.\n"
        "local all all trust\n"
        "host  all all 127.0.0.1/32 trust\n"
    ))
    with (node.data_dir / "postgresql.conf").open("a") as conf:
        conf.write(f"\n# swarmlog dev settings (port, addresses, logging), rewritten on every up:\n"
                   f"include_if_exists = '{_CONF_NAME}'\n")


def write_config(node: PostgresNode) -> None:
    """(Re)write the settings that depend on the node's port and paths."""
    _write_owned(node, node.data_dir / _CONF_NAME, (
        "# Written by `swarmlog dev up` (swarmlog/dev/postgres.py) on every start.\n"
        f"port = {node.port}\n"
        "listen_addresses = '127.0.0.1'\n"
        f"unix_socket_directories = '{node.socket_dir}'\n"
        "log_destination = 'stderr'\n"
        "logging_collector = off\n"
        "log_line_prefix = '%m [%p] %q%u@%d '\n"
    ))


# --- running ----------------------------------------------------------------------------


def start(node: PostgresNode, *, bin_dir: Path, progress: Progress) -> int:
    """Start the server (``pg_ctl start -w``: returns once it accepts connections); return its pid."""
    progress(f"starting PostgreSQL on {node.address} (log: {node.log_file})")
    result = _run_as(node, [
        str(bin_dir / "pg_ctl"), "-D", str(node.data_dir), "-l", str(node.log_file),
        "-w", "-t", "120", "start",
    ], timeout=180)
    pid = running_pid(node)
    if result.returncode != 0 or pid is None:
        raise ServiceUnavailable(
            service="PostgreSQL", address=node.address,
            detail=(
                f"pg_ctl start failed (exit {result.returncode}): {(result.stdout + result.stderr).strip()}\n"
                f"--- last lines of {node.log_file}:\n{process.tail(node.log_file)}"
            ),
        )
    return pid


def running_pid(node: PostgresNode) -> int | None:
    """Pid of this node's postmaster if it is running (a stale ``postmaster.pid`` is left alone:
    see :func:`clear_stale_locks`)."""
    pid = process.read_pid(node.data_dir / "postmaster.pid")
    return pid if pid is not None and _is_ours(node, pid) else None


def clear_stale_locks(node: PostgresNode, *, progress: Progress, timeout: float = 30.0) -> None:
    """Before a start: wait until a crashed server is entirely gone, then remove the lock files it left.

    A killed postmaster leaves ``postmaster.pid`` in the data directory and
    ``.s.PGSQL.<port>.lock`` beside its socket. A new postmaster removes such a
    file itself only if ``kill(pid, 0)`` says the pid in it does not exist, and
    right after a crash it still does: the killed postmaster stays a zombie until
    its parent (init; a container's PID 1 may reap late) collects it, and later
    the pid may belong to another process (as root, one the unprivileged server
    cannot signal, which also counts as alive). Either way ``pg_ctl start`` failed
    with "lock file ... already exists" until it was retried.

    The remains of the old server are the live processes whose working directory
    is the data directory (the postmaster moves there and every backend inherits
    it; a zombie has none). Only once none is left is a lock file naming a pid
    that is not one of them stale: while an old backend still runs, Postgres' own
    check of ``postmaster.pid`` is what keeps a second server off the data.
    """
    deadline = time.monotonic() + timeout
    announced = False
    while remains := process.pids_in(node.data_dir):
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                service="PostgreSQL", address=node.address,
                detail=(f"processes of a previous server on {node.data_dir} are still running "
                        f"(pids {', '.join(map(str, remains))}) {timeout:.0f} s after it stopped; stop them "
                        f"(`kill {' '.join(map(str, remains))}`) and run `swarmlog dev up` again"),
            )
        if not announced:
            progress(f"waiting for the processes of the previous PostgreSQL server to exit (pids "
                     f"{', '.join(map(str, remains))})")
            announced = True
        time.sleep(0.1)
    for lock in (node.data_dir / "postmaster.pid", node.socket_dir / f".s.PGSQL.{node.port}.lock"):
        pid = process.read_pid(lock)
        if pid is None and not lock.exists():
            continue
        # After the wait above no process of this server runs, so whatever the pid is now
        # (dead, a zombie, reused by another program) the file speaks for nobody.
        if pid is None or not _is_ours(node, pid):
            progress(f"removing the stale lock file {lock} (its server, pid {pid}, is gone)")
            lock.unlink(missing_ok=True)


def _is_ours(node: PostgresNode, pid: int) -> bool:
    """``pid`` is a live server process of this node (not a zombie, not a reused pid)."""
    argv = process.cmdline(pid)
    return (process.is_alive(pid) and bool(argv) and Path(argv[0]).name in ("postgres", "postmaster")
            and process.cwd(pid) == node.data_dir.resolve())


def is_healthy(node: PostgresNode, *, timeout: float = 3.0) -> bool:
    """True if the server accepts a connection and answers a query."""
    try:
        with psycopg.connect(_conninfo(node, "postgres"), connect_timeout=max(1, round(timeout))) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def ensure_database(node: PostgresNode) -> None:
    """Create the ``swarmlog`` database unless it exists."""
    with psycopg.connect(_conninfo(node, "postgres"), autocommit=True, connect_timeout=10) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def stop(node: PostgresNode, *, progress: Progress, timeout: float = 60.0) -> bool:
    """Stop the server (SIGINT: Postgres's "fast" shutdown). False if it was not running."""
    pid = running_pid(node)
    if pid is None:
        return False
    progress(f"stopping PostgreSQL (pid {pid})")
    if not process.terminate(pid, sig=signal.SIGINT, timeout=timeout):
        progress(f"PostgreSQL did not stop within {timeout:.0f} s and was killed")
    return True


# --- helpers ----------------------------------------------------------------------------


def _has_server(bin_dir: Path) -> bool:
    return all((bin_dir / name).is_file() for name in ("initdb", "pg_ctl", "postgres"))


def _conninfo(node: PostgresNode, dbname: str) -> str:
    return f"host=127.0.0.1 port={node.port} user={ROLE} dbname={dbname}"


def _run_as(
    node: PostgresNode, argv: Sequence[str], *, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    if node.owner is not None:
        argv = ["runuser", "-u", node.owner, "--", *argv]
    # cwd: the owner may not be allowed into the caller's directory (initdb complains).
    cwd = node.dir if node.dir.is_dir() else Path("/")
    return subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


def _write_owned(node: PostgresNode, path: Path, text: str) -> None:
    path.write_text(text)
    if node.owner is not None:
        entry = pwd.getpwnam(node.owner)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o600)
