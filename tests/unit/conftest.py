"""Unit tests need nothing but the package: no Kafka, no Postgres, no external process.

To keep that true, every way swarmlog reaches a service fails here at once, naming
the test's mistake, rather than hanging on a connection or passing because a dev
cluster happens to run on this machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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


# --- which worker imports the agent frameworks ---------------------------------------------------------
#
# `make unit` runs on xdist workers with `--dist worksteal`: each worker is handed a contiguous half of the
# collection, and an idle one steals from the tail of the other's queue. These modules import the agent
# frameworks and the LLM SDKs (openai-agents, pydantic-ai, LangGraph, anthropic, openai: together seconds of
# CPU to import), or textual, in their tests. Collected first, they run on one worker, from the head of its
# queue that is never stolen, instead of making every worker import the frameworks. Only the order changes:
# every test still runs, and the order inside each module is kept.
FRAMEWORK_MODULES = frozenset({
    "test_async_steps.py", "test_conversation.py", "test_credentials.py", "test_docs_code.py",
    "test_guard_frameworks.py", "test_http.py", "test_langgraph_fold.py", "test_layout.py", "test_llm.py",
    "test_retry_policy.py", "test_errors.py", "test_docs_changed_lines.py", "test_stepview.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent  # a run of more than tests/unit calls this hook for all of its items
    items.sort(key=lambda item: not (item.path.parent == here and item.path.name in FRAMEWORK_MODULES))  # stable
