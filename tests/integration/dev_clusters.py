"""Spare dev clusters for the tests that must break, stop or reconfigure one.

The session's cluster is shared (by every test module, and by every engineer
using the default one), so a test that kills a broker, restarts Postgres or
needs three brokers or a SASL listener starts a cluster of its own: its own
home under /var/tmp (the unprivileged Postgres user must be able to reach it),
its own ports, stopped and deleted afterwards.

Ports: free ones picked by the kernel, or, with ``SWARMLOG_TEST_PORTS=LOW-HIGH``
set, free ones from that range (on a machine where each engineer has one).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmlog.dev import ClusterInfo, ClusterStatus, cluster

_TAKEN: set[int] = set()  # handed out in this session, even if not listening yet


def _quiet(_: str) -> None:
    pass


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports nobody listens on (see the module docstring for where from)."""
    wanted = os.environ.get("SWARMLOG_TEST_PORTS", "")
    found: list[int] = []
    if wanted:
        low, _, high = wanted.partition("-")
        candidates = iter(range(int(low), int(high or low) + 1))
    else:
        candidates = iter(lambda: 0, None)  # 0: ask the kernel
    for candidate in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            port = probe.getsockname()[1]
        if port in _TAKEN:
            continue
        _TAKEN.add(port)
        found.append(port)
        if len(found) == n:
            return found
    raise RuntimeError(f"fewer than {n} free ports in SWARMLOG_TEST_PORTS={wanted}")


@dataclass
class SpareCluster:
    home: Path
    options: dict[str, Any]
    """The arguments of ``cluster.up`` that describe it (ports, brokers, SASL)."""
    info: ClusterInfo | None = None
    started: list[str] = field(default_factory=list)

    def up(self) -> ClusterInfo:
        self.info = cluster.up(home=self.home, progress=_quiet, **self.options)
        return self.info

    def status(self) -> ClusterStatus:
        return cluster.status(home=self.home, **self.options)

    def dev_env(self) -> dict[str, str]:
        """The environment of a `swarmlog dev ...` process that means this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARMLOG_DEV_", "SWARMLOG_KAFKA_"))}
        env["SWARMLOG_DEV_HOME"] = str(self.home)
        names = {"kafka_port": "KAFKA_PORT", "controller_port": "CONTROLLER_PORT", "postgres_port": "POSTGRES_PORT",
                 "brokers": "BROKERS", "sasl_port": "SASL_PORT"}
        for key, value in self.options.items():
            if key == "sasl_listener":
                env["SWARMLOG_DEV_SASL"] = "1" if value else "0"
            elif key in names:
                env[f"SWARMLOG_DEV_{names[key]}"] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        return env

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``swarmlog dev <args>`` as a process against this cluster."""
        return subprocess.run([sys.executable, "-m", "swarmlog.cli", "dev", *args], env=self.dev_env(),
                              capture_output=True, text=True, timeout=timeout)

    def plaintext_env(self) -> dict[str, str]:
        """Environment of a swarmlog process reaching the brokers on their PLAINTEXT listeners."""
        assert self.info is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMLOG_KAFKA_")}
        env.update({"SWARMLOG_BOOTSTRAP_SERVERS": self.info.bootstrap_servers,
                    "SWARMLOG_DATABASE_URL": self.info.database_url})
        return env

    def client_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment of a swarmlog process pointed at this cluster, as `eval "$(swarmlog dev env)"` does."""
        result = self.cli("env", timeout=60)
        assert result.returncode == 0, result.stderr
        env = {k: v for k, v in (base or os.environ).items() if not k.startswith("SWARMLOG_KAFKA_")}
        for line in result.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
        return env


@contextmanager
def spare_cluster(*, brokers: int = 1, sasl: bool = False) -> Iterator[SpareCluster]:
    """A started dev cluster of its own; stopped and deleted on the way out."""
    home = Path(tempfile.mkdtemp(prefix="swarmlog-test-", dir="/var/tmp"))
    home.chmod(0o755)
    ports = free_ports(brokers * (3 if sasl else 2) + 1)
    options: dict[str, Any] = {
        "brokers": brokers,
        "kafka_port": ports[:brokers],
        "controller_port": ports[brokers:2 * brokers],
        "postgres_port": ports[-1],
        "sasl_listener": sasl,
    }
    if sasl:
        options["sasl_port"] = ports[2 * brokers:3 * brokers]
    spare = SpareCluster(home=home, options=options)
    try:
        spare.up()
        yield spare
    finally:
        cluster.down(home=home, purge=True, progress=_quiet)
        shutil.rmtree(home, ignore_errors=True)
