"""A three-broker dev cluster (``swarmlog dev up --brokers 3``: replication 3, ``min.insync.replicas`` 2):
what ``status`` and ``env`` say of it, and the replication swarm topics get on it.

The cluster losing its partition leader (SIGKILL under five producers, and under a swarm of
transactional agents) is a case of the fault suite: tests/faults/test_leader_faults.py, a row of
``make faults``' table.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import REPO, new_topic_name
from .dev_clusters import SpareCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def three(three_brokers: SpareCluster) -> SpareCluster:
    return three_brokers  # conftest's: shared with the SASL tests, one cluster start for both


def test_status_and_env_know_every_broker(three: SpareCluster) -> None:
    assert three.cli("up", timeout=180).returncode == 0  # whatever an earlier test left down
    status = three.cli("status", timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    ports = three.options["kafka_port"]
    assert [line.split()[0] for line in status.stdout.splitlines()[1:]] == ["kafka-1", "kafka-2", "kafka-3",
                                                                             "postgres"]
    for port in ports:
        assert f"127.0.0.1:{port}" in status.stdout
    env = three.client_env()
    assert env["SWARMLOG_BOOTSTRAP_SERVERS"] == ",".join(f"127.0.0.1:{p}" for p in three.options["sasl_port"])
    assert three.plaintext_env()["SWARMLOG_BOOTSTRAP_SERVERS"] == ",".join(f"127.0.0.1:{p}" for p in ports)


def test_swarm_topics_get_three_replicas_and_a_topic_with_one_says_what_it_risks(three: SpareCluster) -> None:
    env = {**three.plaintext_env(), "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO / "connectors")])}
    default = subprocess.run([sys.executable, "-m", "swarmlog.cli", "topic", "create", new_topic_name("rf")],
                             env=env, capture_output=True, text=True, timeout=120)
    assert default.returncode == 0, default.stderr
    assert "replication=3" in default.stdout and "WARNING" not in default.stderr.upper()
    assert "min.insync" not in default.stderr
    single = subprocess.run([sys.executable, "-m", "swarmlog.cli", "topic", "create", new_topic_name("rf1")],
                            env={**env, "SWARMLOG_REPLICATION_FACTOR": "1"}, capture_output=True, text=True,
                            timeout=120)
    assert single.returncode == 0, single.stderr
    assert "replication=1" in single.stdout
    assert "1 replica on a cluster of 3 brokers" in single.stderr and "SWARMLOG_REPLICATION_FACTOR=3" in single.stderr
    weak = subprocess.run([sys.executable, "-m", "swarmlog.cli", "topic", "create", new_topic_name("isr1")],
                          env={**env, "SWARMLOG_MIN_INSYNC_REPLICAS": "1"}, capture_output=True, text=True,
                          timeout=120)
    assert weak.returncode == 0, weak.stderr
    assert "min.insync.replicas is 1" in weak.stderr
