"""RetryPolicy.run: the one retry loop the LLM client and recorded HTTP share (swarmlog.llm.retry)."""

from __future__ import annotations

import logging
import random

import pytest

from swarmlog.llm.retry import Attempt, RetryPolicy

log = logging.getLogger("test_retry_run")


def _scripted(outcomes: list[Attempt[str]]):
    made: list[int] = []

    def attempt(n: int) -> Attempt[str]:
        made.append(n)
        return outcomes[n - 1]
    return attempt, made


def _no_jitter() -> random.Random:
    raise AssertionError("no retry, so no jitter is drawn")


def test_a_success_ends_the_loop_at_once_and_draws_no_jitter():
    attempt, made = _scripted([Attempt("ok")])
    last, n = RetryPolicy(retries=3).run(attempt, jitter=_no_jitter, log=log, what="GET x")
    assert (last.value, last.failure, n, made) == ("ok", None, 1, [1])


def test_a_failure_not_worth_retrying_is_the_outcome_after_one_attempt():
    attempt, made = _scripted([Attempt("400", failure="HTTP 400", retryable=False)])
    last, n = RetryPolicy(retries=3).run(attempt, jitter=_no_jitter, log=log, what="GET x")
    assert (last.failure, n, made) == ("HTTP 400", 1, [1])


def test_retryable_failures_are_tried_again_up_to_the_policys_retries_then_the_last_is_returned(caplog):
    fail = Attempt("503", failure="HTTP 503", retryable=True, wait=0.0)
    attempt, made = _scripted([fail, fail, fail, Attempt("never")])
    with caplog.at_level(logging.WARNING, logger=log.name):
        last, n = RetryPolicy(retries=2).run(attempt, jitter=random.Random, log=log, what="GET x")
    assert (last.failure, n, made) == ("HTTP 503", 3, [1, 2, 3])
    assert [r.getMessage() for r in caplog.records] == ["GET x: HTTP 503; retry 1/2 in 0.00s",
                                                         "GET x: HTTP 503; retry 2/2 in 0.00s"]


def test_a_retry_that_succeeds_returns_the_success_and_the_attempts_it_took():
    attempt, made = _scripted([Attempt("", failure="ConnectError: refused", retryable=True, wait=0.0), Attempt("ok")])
    last, n = RetryPolicy(retries=5).run(attempt, jitter=random.Random, log=log, what="POST y")
    assert (last.value, n, made) == ("ok", 2, [1, 2])


def test_an_attempt_that_raises_ends_the_loop_with_its_error():
    def attempt(n: int) -> Attempt[str]:
        raise ValueError(f"attempt {n}")

    with pytest.raises(ValueError, match="attempt 1"):
        RetryPolicy(retries=3).run(attempt, jitter=_no_jitter, log=log, what="GET x")
