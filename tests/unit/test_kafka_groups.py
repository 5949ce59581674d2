"""Admin reads of a consumer group (swarmlog.kafka.groups) while its coordinator moves, with no broker.

Right after a broker starts (or a coordinator fails over) the group's coordinator answers
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a while: a read is asked again, and only an
error that is not about the coordinator, or one that outlasts the timeout, reaches the caller.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from swarmlog.errors import KafkaOperationFailed
from swarmlog.kafka import groups


class _Future:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def result(self, timeout: float | None = None) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class _Admin:
    """Answers each describe / list-offsets call with the next of ``outcomes``."""

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        self.calls = 0

    def _next(self, group: str) -> dict[str, _Future]:
        self.calls += 1
        return {group: _Future(self.outcomes.pop(0))}

    def describe_consumer_groups(self, groups_: list[str], request_timeout: float) -> dict[str, _Future]:
        return self._next(groups_[0])

    def list_consumer_group_offsets(self, reqs: list[Any], request_timeout: float,
                                    require_stable: bool = False) -> dict[str, _Future]:
        self.stable = require_stable
        return self._next(reqs[0].group_id)


def _moving(code: int = KafkaError.NOT_COORDINATOR) -> KafkaException:
    return KafkaException(KafkaError(code, "coordinator moving", retriable=True))


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "_COORDINATOR_RETRY_S", 0.0)


def test_describing_a_group_is_asked_again_while_its_coordinator_moves() -> None:
    member = SimpleNamespace(client_id="swarmlog-a1", host="/10.0.0.7")
    admin = _Admin([_moving(), _moving(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), SimpleNamespace(members=[member])])
    assert groups.group_members(admin, "g") == ["swarmlog-a1@/10.0.0.7"]  # type: ignore[arg-type]
    assert admin.calls == 3


def test_reading_offsets_is_asked_again_while_its_coordinator_moves() -> None:
    from confluent_kafka import TopicPartition

    tp = TopicPartition("t", 0, 42)
    admin = _Admin([_moving(KafkaError.COORDINATOR_NOT_AVAILABLE), SimpleNamespace(topic_partitions=[tp])])
    assert groups.committed_offset(admin, group="g", topic="t") == 42  # type: ignore[arg-type]
    assert admin.calls == 2


def test_a_committed_offset_is_read_stable_and_asked_again_while_a_transactions_commit_of_it_is_pending() -> None:
    # An agent commits its position in its transaction: read right after, a plain fetch may give the one before.
    from confluent_kafka import TopicPartition

    pending = SimpleNamespace(topic="t", partition=0, offset=-1,
                              error=KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT, "pending", retriable=True))
    admin = _Admin([_moving(KafkaError.UNSTABLE_OFFSET_COMMIT), SimpleNamespace(topic_partitions=[pending]),
                    SimpleNamespace(topic_partitions=[TopicPartition("t", 0, 7)])])
    assert groups.committed_offset(admin, group="g", topic="t") == 7  # type: ignore[arg-type]
    assert admin.calls == 3 and admin.stable


def test_any_other_error_is_typed_at_once() -> None:
    admin = _Admin([KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"))])
    with pytest.raises(KafkaOperationFailed) as caught:
        groups.group_members(admin, "g")  # type: ignore[arg-type]
    assert admin.calls == 1
    assert caught.value.name == "GROUP_AUTHORIZATION_FAILED" and "describing consumer group 'g'" in str(caught.value)


def test_a_coordinator_that_never_settles_is_given_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "_TIMEOUT_S", 0.05)
    admin = _Admin([_moving()] * 10_000)
    with pytest.raises(KafkaOperationFailed) as caught:
        groups.group_members(admin, "g")  # type: ignore[arg-type]
    assert caught.value.name == "NOT_COORDINATOR" and caught.value.retriable
    assert admin.calls >= 2


def test_an_advisory_commit_refused_while_the_group_rebalances_is_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    commits = groups.AdvisoryCommits(group="swarmlog-sink")
    with caplog.at_level("DEBUG", logger=groups.__name__):
        for code in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID):
            commits._committed(KafkaError(code, "rebalancing"), [])
        assert [r.levelname for r in caplog.records] == ["DEBUG"] * 3
        caplog.clear()
        # Anything else is a stale lag in Kafka's tools: said once, and once when it works again.
        commits._committed(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"), [])
        commits._committed(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "denied"), [])
        commits._committed(None, [])
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_a_commit_pending_past_the_wait_is_a_dead_lifes_and_the_last_committed_offset_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A life killed between sending its position and committing leaves its transaction open until its next
    # life fences it: a stable read says UNSTABLE_OFFSET_COMMIT all that time, the group stands where it was.
    from confluent_kafka import TopicPartition

    monkeypatch.setattr(groups, "_PENDING_WAIT_S", 0.05)
    pending = SimpleNamespace(topic="t", partition=0, offset=-1001,
                              error=KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT, "pending", retriable=True))

    class _DeadLifes(_Admin):
        def list_consumer_group_offsets(self, reqs: list[Any], request_timeout: float,
                                        require_stable: bool = False) -> dict[str, _Future]:
            self.calls += 1
            self.asked = [*getattr(self, "asked", []), require_stable]
            got = SimpleNamespace(topic_partitions=[pending if require_stable else TopicPartition("t", 0, 30)])
            return {reqs[0].group_id: _Future(got)}

    admin = _DeadLifes([])
    assert groups.committed_offset(admin, group="g", topic="t") == 30  # type: ignore[arg-type]
    assert admin.asked[0] is True and admin.asked[-1] is False and admin.asked.count(False) == 1
