"""The guards around librdkafka's transactional calls (swarmlog.kafka.channel), with no broker."""

from __future__ import annotations

import threading
import time

import pytest

from swarmlog.errors import TransactionAborted
from swarmlog.kafka import channel


def test_a_librdkafka_call_that_never_returns_is_given_up_after_its_time() -> None:
    never = threading.Event()
    began = time.monotonic()
    with pytest.raises(TransactionAborted) as caught:
        channel._within(never.wait, seconds=0.5, agent="a1", what="adding the consumer position")
    assert 0.5 <= time.monotonic() - began < 5
    assert caught.value.agent == "a1" and "did not return within" in caught.value.detail
    never.set()  # let the abandoned thread go
    # A call that returns, or raises, is passed through as it is.
    channel._within(lambda: None, seconds=5, agent="a1", what="x")
    with pytest.raises(ZeroDivisionError):
        channel._within(lambda: 1 / 0, seconds=5, agent="a1", what="x")


def test_a_retriable_kafka_error_is_retried_and_any_other_is_not() -> None:
    from confluent_kafka import KafkaError, KafkaException

    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "moving", retriable=True))

    channel._retrying(flaky, agent="a1", what="committing")
    assert len(calls) == 3

    def broken() -> None:
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError.INVALID_CONFIG, "no", retriable=False))

    calls.clear()
    with pytest.raises(KafkaException):
        channel._retrying(broken, agent="a1", what="committing")
    assert len(calls) == 1
