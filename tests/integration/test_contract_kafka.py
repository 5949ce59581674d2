"""The log and runtime contract suites on the real broker: the same behaviour as in memory."""

from __future__ import annotations

import pytest

from swarmlog.kafka import KafkaBackend
from swarmlog.kafka.topic import create_topic
from swarmlog.settings import Settings

from ..contract.log import LogContract
from ..contract.runtime import RuntimeContract
from ..contract.state import StateDigestContract
from .conftest import new_topic_name


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


class TestRuntimeContractOnKafka(RuntimeContract):
    quiet = 1.0
    cut_stride = 9


class TestStateDigestContractOnKafka(StateDigestContract):
    quiet = 1.0
