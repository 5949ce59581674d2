"""Unit tests need nothing but the package: no Kafka, no Postgres, no external process.

To keep that true, every way swarmlog reaches a service fails here at once, naming
the test's mistake, rather than hanging on a connection or passing because a dev
cluster happens to run on this machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import psycopg
import pytest

from swarmlog.log.memory import InMemoryLog
from swarmlog.settings import Settings

from ..conftest import new_topic_name


class ServiceUsedInUnitTest(AssertionError):
    pass


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ServiceUsedInUnitTest(f"a unit test tried to use {what}; it belongs in tests/integration")

    return refuse


@pytest.fixture(autouse=True)
def _no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("Producer", "Consumer"):
        monkeypatch.setattr(confluent_kafka, name, _refuse(f"Kafka (confluent_kafka.{name})"))
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", _refuse("Kafka (AdminClient)"))
    import swarmlog.kafka.channel
    import swarmlog.kafka.config
    import swarmlog.kafka.producer

    for module in (swarmlog.kafka.config, swarmlog.kafka.producer, swarmlog.kafka.channel):
        for name in ("Producer", "Consumer", "AdminClient"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, _refuse(f"Kafka ({module.__name__}.{name})"))
    monkeypatch.setattr(psycopg, "connect", _refuse("Postgres (psycopg.connect)"))


@pytest.fixture
def backend() -> Iterator[InMemoryLog]:
    yield InMemoryLog()


@pytest.fixture
def log_topic(backend: InMemoryLog) -> str:
    name = new_topic_name("mem")
    backend.create_topic(name)
    return name


@pytest.fixture
def run_settings(log_topic: str) -> Settings:
    # Addresses nobody listens on: a unit test that reached for Kafka would fail, not find a cluster.
    return Settings(topic=log_topic, bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
