"""The fault suite: `make faults` runs it whole (SWARMLOG_FAULTS=full), `make test` a slice of it.

The suite starts a dev cluster of its own (its own home under /var/tmp and free ports: it kills its
broker and Postgres, so never the one you work with) and purges it at the end. Every case starts
from a clean topic and a clean database (a new one, migrated as `swarmlog mirror migrate` does),
injects its faults with real signals against real processes, and reads the whole topic and mirror
back afterwards. Each case adds a row to
the table printed at the end (and, in full runs, written to tests/faults/results.md).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from swarmlog.settings import Settings
from swarmlog_connectors.postgres_migrations import migrate

from ..integration.conftest import db, settings, topic  # noqa: F401 - fixtures (over this base_settings)
from . import harness

RESULTS = Path(__file__).with_name("results.md")


@pytest.fixture(scope="session")
def fault_cluster() -> Iterator[harness.DevCluster]:
    home = Path(tempfile.mkdtemp(prefix="swarmlog-faults-", dir="/var/tmp"))
    home.chmod(0o755)  # the unprivileged Postgres user must reach its data directory
    kafka, controller, postgres = harness.free_ports(3)
    c = harness.DevCluster(home=home, kafka_port=kafka, controller_port=controller, postgres_port=postgres)
    try:
        c.ensure_up()
        yield c
    finally:
        c.down()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def base_settings(fault_cluster: harness.DevCluster) -> Settings:
    info = fault_cluster.ensure_up()
    with psycopg.connect(info.database_url, autocommit=True) as conn:
        migrate(conn)
    return Settings(bootstrap_servers=info.bootstrap_servers, database_url=info.database_url)


@pytest.fixture
def dev_cluster(fault_cluster: harness.DevCluster) -> Iterator[harness.DevCluster]:
    """The suite's cluster, up before the case and again after it (a failed case may leave it killed)."""
    fault_cluster.ensure_up()
    yield fault_cluster
    fault_cluster.ensure_up()


@pytest.fixture
def mirror_db(base_settings: Settings, dev_cluster: harness.DevCluster) -> Iterator[str]:
    """A clean, migrated database for one case: its URL (dropped afterwards)."""
    name = f"swarmlog_fault_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_settings.database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(base_settings.database_url)
    info["dbname"] = name
    url = psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
    yield url
    dev_cluster.ensure_up()
    with psycopg.connect(base_settings.database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not harness.ROWS:
        return
    text = harness.table(harness.ROWS)
    terminalreporter.write_sep("=", f"fault table ({harness.SCALE})")
    terminalreporter.write_line(text)
    if harness.FULL:
        RESULTS.write_text(f"<!-- written by `make faults` -->\n{text}\n")
        terminalreporter.write_line(f"(written to {RESULTS})")
