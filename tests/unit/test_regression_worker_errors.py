"""What a regression worker reports of an error that stops the whole replay reaches the pool's caller as
its type (swarmlog.regression._worker.CARRIED): decided by type, never by the text, with the fields and the
retriable axis intact; anything else as a typed RegressionWorkerFailed."""

from __future__ import annotations

import json

import pytest

from swarmlog import cli
from swarmlog.errors import (
    KafkaHandshakeFailed,
    KafkaUnavailable,
    PostgresUnavailable,
    RegressionWorkerFailed,
    Retriable,
    ServiceUnavailable,
    SwarmImportFailed,
)
from swarmlog.regression._worker import error_of, fatal_answer


def _through_the_pipe(exc: Exception, topic: str | None = "t.run1") -> Exception:
    answer = json.loads(json.dumps(fatal_answer(exc)))  # a JSON line on the worker's stdout
    return error_of(answer, topic=topic, worker="pid 1, PYTHONHASHSEED=0")


@pytest.mark.parametrize("error", [
    KafkaUnavailable(address="k:9092", detail="connection refused"),
    PostgresUnavailable(address="db:5432/x", detail="timeout", hint="start it"),
])
def test_a_service_a_worker_cannot_reach_reaches_the_caller_as_its_own_retriable_class(error):
    carried = _through_the_pipe(error)
    assert type(carried) is type(error) and isinstance(carried, Retriable)
    assert (carried.service, carried.address, carried.detail, carried.hint) == (
        error.service, error.address, error.detail, error.hint)
    assert str(carried) == str(error) and cli.exit_code(carried) == cli.EXIT_UNAVAILABLE


def test_a_service_error_without_a_class_in_the_table_travels_as_its_nearest_and_still_exits_69():
    error = KafkaHandshakeFailed(address="k:9093", stage="TLS", detail="certificate verify failed")
    carried = _through_the_pipe(error)
    assert type(carried) is ServiceUnavailable and str(carried) == str(error)
    assert cli.exit_code(carried) == cli.EXIT_UNAVAILABLE


def test_any_other_error_is_a_typed_worker_failure_naming_the_run_the_worker_and_the_error_type():
    error = SwarmImportFailed(spec="nowhere:swarm", module="nowhere", error="ModuleNotFoundError: nowhere", where="")
    carried = _through_the_pipe(error, topic=None)
    assert isinstance(carried, RegressionWorkerFailed)
    assert (carried.topic, carried.worker, carried.error_type) == (None, "pid 1, PYTHONHASHSEED=0",
                                                                   "SwarmImportFailed")
    assert carried.detail == str(error) and "as it started" in str(carried)
    assert cli.exit_code(carried) == cli.EXIT_FAILED
