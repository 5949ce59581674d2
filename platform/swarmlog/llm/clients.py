"""LLM clients for ``ctx.llm``: a real one and a deterministic one.

A swarm's LLM client is any object with ``complete(request: dict) -> dict``
(:class:`LLMClient`). ``ctx.llm(request)`` calls it live exactly once, inside
:func:`swarmlog.guard.allowed` so it may use the network, and records request
and response as an ``llm.call`` event; on replay the response is served from the
log and the client is never called::

    from swarmlog.llm import OpenAIChat, content

    swarm = Swarm(name="demo", agents=..., llm=OpenAIChat(base_url="https://api.openai.com/v1"))

    # in a handler
    answer = content(ctx.llm({"model": "gpt-4o-mini", "messages": [...]}))

* :class:`OpenAIChat` talks to any OpenAI-compatible ``/chat/completions``
  endpoint (OpenAI, vLLM, Ollama, LiteLLM, llama.cpp's server) over httpx.
* :class:`ScriptedLLM` answers from a list or a function, offline and
  deterministically, and counts its calls: for examples, and for tests that
  check replay never calls the model.
* :func:`content` extracts the reply text from an OpenAI-shaped response.

Every failure is one of the typed errors of :mod:`swarmlog.llm.errors` and says what to do. Because a
failing ``complete`` raises before ``ctx.llm`` records anything, a failed call
leaves no ``llm.call`` event behind.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from ..errors import ConfigurationError
from ..log.hashing import canonical
from ..redaction import Scrubber
from .errors import LLMRequestFailed, LLMResponseInvalid, LLMUnavailable, ScriptExhausted
from .retry import Attempt, RetryPolicy, retry_after

__all__ = ["LLMClient", "OpenAIChat", "ScriptedLLM", "completion", "content"]

_log = logging.getLogger("swarmlog.llm")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"

_MAX_BODY_IN_MESSAGE = 2000


# --- the client protocol -------------------------------------------------------------------


@runtime_checkable
class LLMClient(Protocol):
    """What ``Swarm(llm=...)`` takes: one JSON-shaped request in, one JSON-shaped response out.

    The response must be JSON-serialisable: ``ctx.llm`` records it as canonical JSON.
    """

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        ...


def content(response: Mapping[str, Any]) -> str:
    """The reply text of an OpenAI-shaped response: ``choices[0].message.content``.

    Raises :class:`LLMResponseInvalid` naming what is missing (no choices, no message, or a
    message without text content, as when the model answered with tool calls only).
    """
    choices = response.get("choices") if isinstance(response, Mapping) else None
    if not isinstance(choices, Sequence) or isinstance(choices, str) or not choices:
        raise LLMResponseInvalid(problem="it has no choices", response=response)
    first = choices[0]
    message = first.get("message") if isinstance(first, Mapping) else None
    if not isinstance(message, Mapping):
        raise LLMResponseInvalid(problem="choices[0] has no message", response=response)
    text = message.get("content")
    if not isinstance(text, str):
        finish = first.get("finish_reason")
        raise LLMResponseInvalid(
            problem=f"choices[0].message has no text content (finish_reason={finish!r}); "
                    f"read the message itself for tool calls", response=response)
    return text


# --- OpenAI-compatible HTTP ------------------------------------------------------------------


class OpenAIChat:
    """A client for OpenAI-compatible ``POST {base_url}/chat/completions`` endpoints.

    The request dict is sent as the JSON body unchanged (except that ``default_model`` fills in
    a missing ``"model"``); :meth:`complete` returns the parsed JSON response.

    Keyword-only arguments:

    ``base_url``      the API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
    ``api_key``       the bearer token. When None, it is read from the environment variable
                      ``api_key_env`` (default ``OPENAI_API_KEY``), once, here in the constructor:
                      the one environment read swarmlog does outside :mod:`swarmlog.settings`, so
                      that the key never has to pass through code or settings objects. Neither
                      set: no ``Authorization`` header (local servers rarely want one). Pass
                      ``api_key_env=None`` to never read the environment.
    ``timeout``       seconds for each of connect, read, write and pool acquisition.
    ``max_retries``   extra attempts after a connection error, a timeout, or HTTP 408/409/429/5xx,
                      with exponential backoff (``backoff`` seconds doubling up to ``max_backoff``,
                      with full jitter; a server's ``Retry-After`` is honoured up to 60 s): the one
                      retry policy of recorded calls, :class:`~swarmlog.llm.retry.RetryPolicy`.
    ``default_model`` used when a request has no ``"model"``. Prefer putting the model in the
                      request: only the request is recorded in the log.
    ``extra_headers`` sent with every request (e.g. ``{"OpenAI-Organization": ...}``).

    The key is never logged and never appears in ``repr()`` or in error messages. The
    ``httpx.Client`` is created on first use and reused (connection pooling); it is thread-safe,
    so one ``OpenAIChat`` can serve every agent. Sleeping between retries is fine: ``ctx.llm``
    runs the client live inside :func:`swarmlog.guard.allowed`, never on replay.
    """

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str | None = DEFAULT_API_KEY_ENV,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        default_model: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"OpenAIChat(base_url={base_url!r}) must be an http:// or https:// URL")
        if timeout <= 0:
            raise ConfigurationError(f"OpenAIChat(timeout={timeout!r}) must be positive (seconds)")
        if max_retries < 0:
            raise ConfigurationError(f"OpenAIChat(max_retries={max_retries!r}) must be >= 0")
        if backoff < 0 or max_backoff < 0:
            raise ConfigurationError("OpenAIChat(backoff=..., max_backoff=...) must be >= 0 (seconds)")
        if api_key is None and api_key_env is not None:
            api_key = os.environ.get(api_key_env)  # the documented one env read
        api_key = api_key or None  # an empty key is no key: send no Authorization header
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.default_model = default_model
        self._api_key = api_key
        # Some servers echo the credentials they rejected: the key never reaches a message.
        self._scrub = Scrubber()
        if api_key is not None:
            self._scrub.keep(api_key, min_length=1)
        self.retry = RetryPolicy(retries=max_retries, backoff=backoff, max_backoff=max_backoff)
        headers = {"Accept": "application/json", "User-Agent": "swarmlog"}
        headers.update(extra_headers or {})
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self._client: httpx.Client | None = None
        self._rng: random.Random | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        key = "set" if self._api_key is not None else "none"
        return f"OpenAIChat(base_url={self.base_url!r}, api_key=<{key}>, timeout={self.timeout}, " \
               f"max_retries={self.max_retries}, default_model={self.default_model!r})"

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pooled connections (a later :meth:`complete` opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _http(self) -> httpx.Client:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = httpx.Client(headers=self._headers, timeout=self.timeout,
                                                follow_redirects=False)
                client = self._client
        return client

    # -- the call -------------------------------------------------------------------------

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request`` to ``/chat/completions``; return the parsed JSON response.

        Raises :class:`LLMUnavailable` (unreachable, timed out, or 429/5xx after retries),
        :class:`LLMRequestFailed` (any other non-2xx) or :class:`LLMResponseInvalid` (not JSON).
        """
        if self.default_model is not None and "model" not in request:
            request = {**request, "model": self.default_model}  # never mutate the caller's dict
        client = self._http()
        retry = self.retry

        def attempt(_: int) -> Attempt[httpx.Response | None]:
            try:
                response = client.post(self.url, json=request)
            except httpx.TransportError as exc:  # some not worth retrying (e.g. a malformed header value)
                return Attempt(None, failure=self._describe_transport(exc), retryable=retry.retryable_error(exc, httpx))
            status = response.status_code
            if 200 <= status < 300:
                return Attempt(response)
            body = self._scrub.text(response.text)
            if not retry.retryable_status(status):
                raise LLMRequestFailed(status=status, body=body, url=self.url, api_key_env=self.api_key_env)
            return Attempt(response, failure=f"HTTP {status}: {body[:_MAX_BODY_IN_MESSAGE]}", retryable=True,
                           wait=retry_after(response.headers))

        last, attempts = retry.run(attempt, jitter=self._jitter, log=_log, what=f"LLM endpoint {self.url}")
        if last.failure is not None:
            raise LLMUnavailable(url=self.url, detail=last.failure, attempts=attempts,
                                 status=None if last.value is None else last.value.status_code)
        assert last.value is not None
        return self._parse(last.value)

    def _jitter(self) -> random.Random:
        if self._rng is None:  # jitter of this client's own, live only
            self._rng = random.Random()
        return self._rng

    # -- internals ------------------------------------------------------------------------

    def _parse(self, response: httpx.Response) -> dict[str, Any]:
        try:
            parsed = response.json()
        except ValueError:
            raise LLMResponseInvalid(problem=f"HTTP {response.status_code} body is not JSON",
                                     response=self._scrub.text(response.text)) from None
        if not isinstance(parsed, dict):
            raise LLMResponseInvalid(problem="the JSON body is not an object", response=parsed)
        return parsed

    def _describe_transport(self, exc: httpx.TransportError) -> str:
        name = type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            return f"timed out after {self.timeout}s ({name})"
        text = self._scrub.text(str(exc)) or "no detail"
        return f"{name}: {text}"


# --- the deterministic model -----------------------------------------------------------------

Reply = str | dict[str, Any]


class ScriptedLLM:
    """A deterministic, offline LLM that answers in the OpenAI chat-completion shape.

    ``ScriptedLLM(["first", "second"])`` answers the n-th call with the n-th item, and raises
    :class:`ScriptExhausted` after the last; ``ScriptedLLM(lambda request: "...")`` answers every
    request with the function's result, so the same request always gets the same answer. An item
    or result that is a str becomes ``choices[0].message.content``; a dict is returned as is (to
    script tool calls or odd shapes).

    The response ``id`` is a hash of the request and the reply, so equal requests answered alike
    get equal ids, live and across processes. ``calls`` counts calls and ``requests`` keeps a copy
    of each request, so a test can assert that a replay never called the model.
    """

    def __init__(self, script: Sequence[Reply] | Callable[[dict[str, Any]], Reply], *,
                 model: str = "scripted") -> None:
        if callable(script):
            self._fn: Callable[[dict[str, Any]], Reply] | None = script
            self._script: list[Reply] = []
        elif isinstance(script, (str, bytes, Mapping)):
            raise TypeError("ScriptedLLM takes a list of replies or a function request -> reply, "
                            "not a single reply; wrap it in a list")
        else:
            self._fn = None
            self._script = list(script)
        self.model = model
        self.calls = 0
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer ``request`` (see the class docstring)."""
        request = copy.deepcopy(request)  # the script sees, and keeps, the request as it was
        with self._lock:
            index = self.calls
            self.calls += 1
            self.requests.append(request)
        if self._fn is not None:
            reply = self._fn(copy.deepcopy(request))
        elif index < len(self._script):
            reply = copy.deepcopy(self._script[index])
        else:
            raise ScriptExhausted(replies=len(self._script), request=request)
        if isinstance(reply, dict):
            return reply
        if not isinstance(reply, str):
            raise TypeError(f"ScriptedLLM replies must be str or dict, got {type(reply).__name__}")
        return completion(request, reply, model=str(request.get("model") or self.model))


def completion(request: Mapping[str, Any], text: str, *, model: str) -> dict[str, Any]:
    """An OpenAI-shaped chat completion answering ``request`` with ``text``, with a deterministic
    id (a hash of request and text) and whitespace-token usage counts."""
    digest = hashlib.sha256(f"{canonical(request)}\x1f{text}".encode()).hexdigest()
    prompt_tokens = sum(len(str(m.get("content") or "").split())
                        for m in request.get("messages") or () if isinstance(m, Mapping))
    completion_tokens = len(text.split())
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
