"""The log, runtime, state and fold contract suites on the real broker: the same behaviour as in memory."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swarmlog.kafka import KafkaBackend
from swarmlog.kafka.topic import create_topic
from swarmlog.settings import Settings

from ..contract.checkpoints import CheckpointContract
from ..contract.folds import FoldContract
from ..contract.log import LogContract
from ..contract.runtime import RuntimeContract
from ..contract.state import StateDigestContract
from .conftest import new_topic_name
from .test_runtime import _env


@pytest.fixture
def log_topic(base_settings: Settings) -> str:
    name = new_topic_name("contract")
    create_topic(base_settings, name)
    return name


@pytest.fixture
def run_settings(base_settings: Settings, log_topic: str) -> Settings:
    return base_settings.model_copy(update={"topic": log_topic})


@pytest.fixture
def backend(base_settings: Settings) -> KafkaBackend:
    return KafkaBackend(base_settings)


class TestLogContractOnKafka(LogContract):
    wait = 10.0

    def delete_before(self, backend, topic, before):
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": backend.settings.bootstrap_servers})
        admin.delete_records([TopicPartition(topic, 0, before)])[TopicPartition(topic, 0, before)].result(30)


class TestRuntimeContractOnKafka(RuntimeContract):
    quiet = 1.0
    cut_stride = 9


class TestStateDigestContractOnKafka(StateDigestContract):
    quiet = 1.0


class TestCheckpointContractOnKafka(CheckpointContract):
    quiet = 1.0


class TestFoldContractOnKafka(FoldContract):
    quiet = 1.0

    def debug_divergence(self, backend, settings, swarm):
        # The command as a user runs it: a process of its own, which imports the probe afresh.
        done = subprocess.run([sys.executable, "-m", "swarmlog.cli", "debug", "--divergence", "--swarm", swarm,
                               "--topic", settings.topic], env={**_env(settings), "PYTHONBREAKPOINT": "0"},
                              capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout, done.stderr
