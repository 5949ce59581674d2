"""The LLM clients: OpenAIChat against a loopback stub server, and the deterministic ScriptedLLM.

No real model is ever called: every HTTP request goes to ``swarmlog.testing.StubServer`` on
127.0.0.1. Timeouts and backoffs are kept short so the whole file runs in a few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from swarmlog.guard import ForbiddenCall, allowed, guarded
from swarmlog.llm import (
    LLMClient,
    LLMRequestFailed,
    LLMResponseInvalid,
    LLMUnavailable,
    OpenAIChat,
    ScriptedLLM,
    ScriptExhausted,
    content,
)
from swarmlog.testing import StubServer

KEY = "sk-test-0123456789abcdef"
REQUEST: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of France?"}],
    "temperature": 0.2,
}


def answer(request: dict[str, Any]) -> str:
    return f"answer to {request['messages'][-1]['content']}"


@pytest.fixture
def server() -> Iterator[StubServer]:
    with StubServer(answer, api_key=KEY) as s:
        yield s


def chat(server: StubServer, **overrides: Any) -> OpenAIChat:
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": KEY, "timeout": 2.0,
                               "max_retries": 3, "backoff": 0.01, "max_backoff": 0.05}
    options.update(overrides)
    return OpenAIChat(**options)


# --- OpenAIChat ----------------------------------------------------------------------------


def test_request_arrives_as_sent_with_bearer_auth_and_response_is_parsed(server: StubServer) -> None:
    with chat(server) as client:
        response = client.complete(REQUEST)

    assert server.request_count == 1
    received = server.requests[0]
    assert received.method == "POST"
    assert received.path == "/v1/chat/completions"
    assert received.body == REQUEST
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["content-type"] == "application/json"
    assert response == ScriptedLLM(answer, model="stub").complete(REQUEST)
    assert content(response) == "answer to capital of France?"


def test_client_is_created_once_and_reused(server: StubServer) -> None:
    client = chat(server)
    assert client._client is None  # lazily: constructing a swarm opens nothing
    client.complete(REQUEST)
    first = client._client
    client.complete(REQUEST)
    assert client._client is first is not None
    client.close()


def test_does_not_mutate_request_and_fills_in_default_model(server: StubServer) -> None:
    request = {"messages": [{"role": "user", "content": "hi"}]}
    chat(server, default_model="fallback-model").complete(request)
    assert request == {"messages": [{"role": "user", "content": "hi"}]}
    assert server.requests[0].body == {**request, "model": "fallback-model"}


def test_extra_headers_are_sent(server: StubServer) -> None:
    chat(server, extra_headers={"OpenAI-Organization": "org-1"}).complete(REQUEST)
    assert server.requests[0].headers["openai-organization"] == "org-1"


def test_api_key_is_read_once_from_the_named_environment_variable(
        server: StubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMLOG_TEST_LLM_KEY", KEY)
    client = chat(server, api_key=None, api_key_env="SWARMLOG_TEST_LLM_KEY")
    monkeypatch.setenv("SWARMLOG_TEST_LLM_KEY", "sk-changed-later")
    client.complete(REQUEST)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(client)


def test_no_api_key_means_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with StubServer(answer) as open_server:
        chat(open_server, api_key=None).complete(REQUEST)
        assert "authorization" not in open_server.requests[0].headers


def test_retries_503_then_succeeds(server: StubServer) -> None:
    server.fail_next(2, status=503)
    response = chat(server, max_retries=3).complete(REQUEST)
    assert content(response) == "answer to capital of France?"
    assert server.request_count == 3
    assert server.llm.calls == 1  # the model answered once; the 503s never reached it


def test_honours_retry_after_on_429(server: StubServer) -> None:
    server.fail_next(1, status=429, retry_after=0)
    chat(server, backoff=5.0, max_backoff=5.0).complete(REQUEST)  # backoff could take up to 5 s
    assert server.request_count == 2


def test_gives_up_after_max_retries_with_llm_unavailable(server: StubServer) -> None:
    server.fail_next(10, status=503, message="overloaded")
    with pytest.raises(LLMUnavailable) as caught:
        chat(server, max_retries=2).complete(REQUEST)
    assert caught.value.status == 503
    assert caught.value.attempts == 3
    assert "overloaded" in caught.value.detail
    assert server.request_count == 3


def test_connection_refused_after_server_stopped_is_llm_unavailable_quickly() -> None:
    with StubServer(answer) as stopped:
        client = chat(stopped, max_retries=2, timeout=0.5)
    started = time.perf_counter()
    with pytest.raises(LLMUnavailable) as caught:
        client.complete(REQUEST)
    assert time.perf_counter() - started < 2.0
    assert caught.value.url == f"{stopped.base_url}/chat/completions"
    assert caught.value.status is None
    assert caught.value.attempts == 3
    assert "ConnectError" in caught.value.detail
    assert "base_url" in str(caught.value)  # says what to check


def test_read_timeout_is_llm_unavailable(server: StubServer) -> None:
    server.stall_next(1, seconds=0.6)
    with pytest.raises(LLMUnavailable) as caught:
        chat(server, timeout=0.2, max_retries=0).complete(REQUEST)
    assert "timed out after 0.2s" in caught.value.detail
    assert "timeout=" in str(caught.value)


def test_400_is_llm_request_failed_with_status_and_is_not_retried(server: StubServer) -> None:
    with pytest.raises(LLMRequestFailed) as caught:
        chat(server).complete({"model": "gpt-test", "prompt": "no messages"})
    assert caught.value.status == 400
    assert "'messages' is a required property" in caught.value.body
    assert "fix the request" in str(caught.value)
    assert server.request_count == 1


def test_401_names_the_key_variable_and_never_repeats_the_key(server: StubServer) -> None:
    wrong = "sk-wrong-key-9876543210"
    with pytest.raises(LLMRequestFailed) as caught:
        chat(server, api_key=wrong).complete(REQUEST)
    assert caught.value.status == 401
    assert wrong not in str(caught.value) and wrong not in caught.value.body
    assert "OPENAI_API_KEY" in str(caught.value)


def test_a_success_that_is_not_a_completion_fails_in_content() -> None:
    with StubServer(lambda request: {"not": "a completion"}) as s:
        response = chat(s).complete(REQUEST)
    assert response == {"not": "a completion"}
    with pytest.raises(LLMResponseInvalid, match="no choices"):
        content(response)


def test_calling_the_client_in_a_handler_is_forbidden_unless_allowed(server: StubServer) -> None:
    # ctx.llm wraps the live call in allowed(); a handler calling the client itself is caught.
    client = chat(server)
    with guarded(agent="a", offset=0):
        with allowed():
            client.complete(REQUEST)
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            client.complete(REQUEST)


def test_configuration_errors_are_raised_at_construction() -> None:
    from swarmlog.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="http"):
        OpenAIChat(base_url="127.0.0.1:8000/v1")
    with pytest.raises(ConfigurationError, match="max_retries"):
        OpenAIChat(base_url="http://127.0.0.1:1/v1", max_retries=-1)


# --- ScriptedLLM and content() ---------------------------------------------------------------


def test_scripted_llm_is_deterministic() -> None:
    first, second = ScriptedLLM(answer), ScriptedLLM(answer)
    a, b = first.complete(REQUEST), second.complete(dict(REQUEST))
    assert a == b
    assert a == first.complete(REQUEST)  # same request, same id and content, every time
    other = first.complete({**REQUEST, "messages": [{"role": "user", "content": "capital of Peru?"}]})
    assert other["id"] != a["id"]
    assert a["object"] == "chat.completion"
    assert a["model"] == "gpt-test"
    assert a["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "answer to capital of France?"},
                             "finish_reason": "stop"}]
    assert a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"]


def test_scripted_llm_counts_calls_and_keeps_requests() -> None:
    llm = ScriptedLLM(["one", "two"])
    assert isinstance(llm, LLMClient)
    assert llm.calls == 0
    request = {"messages": [{"role": "user", "content": "x"}]}
    assert content(llm.complete(request)) == "one"
    request["messages"].append({"role": "user", "content": "mutated afterwards"})
    assert content(llm.complete(request)) == "two"
    assert llm.calls == 2
    assert llm.requests[0] == {"messages": [{"role": "user", "content": "x"}]}  # a copy, as it was
    with pytest.raises(ScriptExhausted, match="ran out of replies"):
        llm.complete(request)


def test_scripted_llm_returns_dict_replies_as_they_are() -> None:
    tool_call = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                       "tool_calls": [{"id": "t1"}]},
                              "finish_reason": "tool_calls"}]}
    response = ScriptedLLM([tool_call]).complete(REQUEST)
    assert response == tool_call
    with pytest.raises(LLMResponseInvalid, match="finish_reason='tool_calls'"):
        content(response)


@pytest.mark.parametrize("response, problem", [
    ({}, "no choices"),
    ({"choices": []}, "no choices"),
    ({"choices": [{"index": 0}]}, "no message"),
    ({"choices": [{"message": {"role": "assistant"}}]}, "no text content"),
])
def test_content_says_what_is_missing(response: dict[str, Any], problem: str) -> None:
    with pytest.raises(LLMResponseInvalid, match=problem):
        content(response)
