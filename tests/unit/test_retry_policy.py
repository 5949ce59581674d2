"""One retry policy for live calls (swarmlog.llm.retry): the LLM client and recorded HTTP retry the same
failures the same way, and wait as the server asks or with full jitter."""

from __future__ import annotations

import random

import httpx
import httpx2
import pytest

from swarmlog.llm import OpenAIChat
from swarmlog.llm.http import RecordedHTTP
from swarmlog.llm.retry import MAX_RETRY_AFTER, RETRY_STATUSES, RetryPolicy, retry_after


def test_the_llm_client_and_recorded_http_hold_the_same_policy_for_the_same_options():
    chat = OpenAIChat(base_url="http://127.0.0.1:1/v1", api_key_env=None, max_retries=3, backoff=0.2, max_backoff=1.0)
    http = RecordedHTTP(ctx=None, library=httpx2, retries=3, backoff=0.2, max_backoff=1.0)  # type: ignore[arg-type]
    assert chat.retry == http.retry == RetryPolicy(retries=3, backoff=0.2, max_backoff=1.0)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, 599])
def test_rate_limits_and_server_trouble_are_retried(status):
    assert RetryPolicy().retryable_status(status) and status in RETRY_STATUSES


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_the_requests_own_faults_are_not(status):
    assert not RetryPolicy().retryable_status(status)


@pytest.mark.parametrize("lib", [httpx, httpx2])
def test_transient_transport_failures_are_retried_in_either_httpx(lib):
    policy = RetryPolicy()
    request = lib.Request("GET", "http://x")
    for exc in (lib.ConnectTimeout("t", request=request), lib.ConnectError("c", request=request),
                lib.RemoteProtocolError("r", request=request), lib.ProxyError("p", request=request)):
        assert policy.retryable_error(exc, lib), type(exc).__name__
    assert not policy.retryable_error(lib.UnsupportedProtocol("u", request=request), lib)


def test_a_servers_retry_after_is_honoured_up_to_its_cap_else_backoff_with_full_jitter():
    policy, rng = RetryPolicy(backoff=0.5, max_backoff=2.0), random.Random(1)
    assert policy.delay(1, 3.0, rng) == 3.0
    caps = {1: 0.5, 2: 1.0, 3: 2.0, 4: 2.0}  # doubling, up to max_backoff
    for attempt, cap in caps.items():
        waits = [policy.delay(attempt, MAX_RETRY_AFTER + 1, rng) for _ in range(200)]
        assert 0 <= min(waits) < cap / 4 and cap * 3 / 4 < max(waits) <= cap  # full jitter: all of [0, cap]


def test_retry_after_reads_openais_milliseconds_first_and_ignores_dates():
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after(httpx.Headers({"retry-after": "2"})) == 2.0
    assert retry_after(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None
