"""`swarmlog dev up` right after the dev Postgres crashed: it starts again at once, not on the retry."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psycopg
import pytest

from swarmlog.dev import process

from .dev_clusters import SpareCluster


@pytest.fixture(scope="module")
def spare(three_brokers: SpareCluster) -> SpareCluster:
    # conftest's cluster of its own (never the session's): one cluster start for every test
    # that needs one; its Postgres is like the single-broker layout's.
    return three_brokers


def _postgres_pid(spare: SpareCluster) -> int:
    pid = spare.status().postgres.pid
    assert pid is not None, "the spare Postgres is not running"
    return pid


def test_up_at_once_after_postgres_is_sigkilled_restarts_it_with_its_data(spare: SpareCluster) -> None:
    spare.up()
    assert spare.info is not None
    with psycopg.connect(spare.info.database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    for _ in range(3):
        pid = _postgres_pid(spare)
        os.kill(pid, signal.SIGKILL)
        # At once: the killed postmaster may still be a zombie, its lock files name it.
        result = spare.cli("up", timeout=180)
        assert result.returncode == 0, result.stderr
        found = spare.status().postgres
        assert found.healthy and found.pid not in (None, pid)
    with psycopg.connect(spare.info.database_url) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(42,)]


def test_up_clears_lock_files_that_name_a_live_process_of_someone_else(spare: SpareCluster) -> None:
    """The crashed postmaster's pid now belongs to another program: `kill(pid, 0)` says alive
    (as root, EPERM from the unprivileged server counts as alive too) and Postgres alone
    would refuse to start until someone deleted the files by hand."""
    spare.up()
    node_dir = spare.home / "postgres"
    pid = _postgres_pid(spare)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while process.is_alive(pid) or process.pids_in(node_dir / "data"):
        assert time.monotonic() < deadline, "the killed Postgres did not go away"
        time.sleep(0.1)
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        port = spare.options["postgres_port"]
        for lock in (node_dir / "data" / "postmaster.pid", node_dir / f".s.PGSQL.{port}.lock"):
            assert lock.exists(), f"{lock} is not where a crash leaves it"
            first, _, rest = lock.read_text().partition("\n")
            lock.write_text(f"{stranger.pid}\n{rest}")
        result = spare.cli("up", timeout=180)
        assert result.returncode == 0, result.stderr
        assert "stale lock file" in result.stderr
        assert spare.status().postgres.healthy
        assert stranger.poll() is None, "the stranger was harmed"
    finally:
        stranger.kill()
        stranger.wait()
