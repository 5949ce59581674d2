"""The errors of recorded LLM calls and HTTP (the tree of every swarmlog error: :mod:`swarmlog.errors`).

* :class:`LLMError` — an LLM client of ``ctx.llm`` failed; nothing was recorded for the call:
  :class:`LLMUnavailable` (also :class:`~swarmlog.errors.Retriable`), :class:`LLMRequestFailed`,
  :class:`LLMResponseInvalid`, :class:`ScriptExhausted`;
* :class:`RequestDiverged` — an :class:`~swarmlog.errors.EffectDiverged`: a replayed call asks something
  else than the one recorded at its place: :class:`HTTPRequestDiverged` (an HTTP request) and the
  frameworks' :class:`~swarmlog.integrations.errors.ModelRequestDiverged` (a model call).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, EffectDiverged, Retriable, SwarmlogError
from ..log.hashing import canonical
from .compare import show

__all__ = ["CredentialMissing", "HTTPRequestDiverged", "LLMError", "LLMRequestFailed", "LLMResponseInvalid",
           "LLMUnavailable", "RequestDiverged", "ScriptExhausted"]

_MAX_BODY_IN_MESSAGE = 2000


class LLMError(SwarmlogError):
    """An LLM client of ``ctx.llm`` failed. It raised before ``ctx.llm`` recorded anything, so a
    failed call leaves no ``llm.call`` event behind."""


class LLMUnavailable(LLMError, Retriable):
    """The endpoint could not be reached, timed out, or kept answering 429/5xx, after retries."""

    def __init__(self, *, url: str, detail: str, status: int | None = None, attempts: int = 1) -> None:
        self.url = url
        self.detail = detail
        self.status = status
        self.attempts = attempts
        if status is None:
            hint = ("check that the server is up and that base_url is right; for a slow model "
                    "raise OpenAIChat(timeout=...)")
        elif status == 429:
            hint = "the endpoint is rate limiting: lower the swarm's concurrency or raise OpenAIChat(max_retries=...)"
        else:
            hint = "the server is failing; try again later or raise OpenAIChat(max_retries=...)"
        super().__init__(f"LLM endpoint {url} unavailable after {attempts} attempt(s): {detail}. {hint}. "
                         f"Nothing was recorded for this call.")


class LLMRequestFailed(LLMError):
    """The endpoint rejected the request (a 4xx other than 408/409/429); retrying cannot help."""

    def __init__(self, *, status: int, body: str, url: str | None = None, api_key_env: str | None = None) -> None:
        self.status = status
        self.body = body
        self.url = url
        if status in (401, 403):
            where = f"set {api_key_env} or pass " if api_key_env else "pass "
            hint = f"check the API key ({where}OpenAIChat(api_key=...))"
        elif 300 <= status < 400:
            hint = "the endpoint redirects; set base_url to where it redirects to"
        elif status == 404:
            hint = ("check base_url (OpenAI-compatible servers usually serve under /v1) "
                    "and the request's model name")
        else:
            hint = "fix the request passed to ctx.llm (model name, messages, parameters)"
        shown = body if len(body) <= _MAX_BODY_IN_MESSAGE else body[:_MAX_BODY_IN_MESSAGE] + "..."
        at = f" at {url}" if url else ""
        super().__init__(f"LLM endpoint{at} rejected the request with HTTP {status}: {shown}. {hint}.")


class LLMResponseInvalid(LLMError):
    """A response is not what an OpenAI-compatible chat completion looks like."""

    def __init__(self, *, problem: str, response: object = None) -> None:
        self.problem = problem
        self.response = response
        shown = repr(response)
        if len(shown) > _MAX_BODY_IN_MESSAGE:
            shown = shown[:_MAX_BODY_IN_MESSAGE] + "..."
        super().__init__(f"invalid LLM response: {problem}. Check that the endpoint speaks the OpenAI "
                         f"chat-completions API (response: {shown})")


class ScriptExhausted(LLMError):
    """A :class:`ScriptedLLM` built from a list was called more times than the list is long."""

    def __init__(self, *, replies: int, request: dict[str, Any]) -> None:
        self.replies = replies
        self.request = request
        super().__init__(f"ScriptedLLM ran out of replies: its script has {replies}, and call "
                         f"{replies + 1} asked {canonical(request)[:500]}. Add replies to the list, or "
                         f"build it from a function request -> reply")


class RequestDiverged(EffectDiverged):
    """A replayed call asks something else than the call the log recorded at its place: an HTTP request
    (:class:`HTTPRequestDiverged`) or a framework's model call
    (:class:`~swarmlog.integrations.errors.ModelRequestDiverged`).

    An :class:`~swarmlog.errors.EffectDiverged`: the handler cannot be served the response, so the
    agent's replay stops there. ``part`` is what differs first, a path into the request
    (:func:`~swarmlog.llm.compare.first_difference`); ``recorded_value`` / ``replayed_value`` are that
    part on each side (credentials redacted, long values cut in the message); ``about`` what the part is,
    when the request says (``the result of tool 'word_count' (call ...)``).
    """

    def __init__(self, *, offset: int | None, agent: str | None, call: str, part: str, recorded_value: Any,
                 replayed_value: Any, about: str | None, remedy: str, recorded: dict[str, Any]) -> None:
        self.part = part
        self.recorded_value = recorded_value
        self.replayed_value = replayed_value
        self.about = about
        where = f"{part} ({about})" if about else part
        super().__init__(
            offset=offset, agent=agent,
            detail=(f"{call} differs from the recorded one at {where}: recorded {show(recorded_value)}, now "
                    f"{show(replayed_value)}. {remedy}, or replay with the code that made the log"),
            recorded={**recorded, "part": part, "value": recorded_value},
            replayed={"part": part, "value": replayed_value})


class HTTPRequestDiverged(RequestDiverged):
    """A replayed step sent a different HTTP request than the one the log recorded at its place.

    ``part`` is ``"method"``, ``"url"``, ``"body"``, or a JSON path into the body such as
    ``"body.messages[0].content"``.
    """

    def __init__(self, *, offset: int | None, agent: str | None, method: str, url: str, part: str,
                 recorded_value: Any, replayed_value: Any, about: str | None = None) -> None:
        self.method = method
        self.url = url
        super().__init__(offset=offset, agent=agent, call=f"the HTTP request {method} {url}", part=part,
                         recorded_value=recorded_value, replayed_value=replayed_value, about=about,
                         remedy="Fix the handler", recorded={"method": method, "url": url})


class CredentialMissing(ConfigurationError):
    """``ctx.credential(variable)`` found the variable unset (or empty) in a live step's environment."""

    def __init__(self, *, variable: str, agent: str) -> None:
        self.variable = variable
        self.agent = agent
        super().__init__(
            f"agent {agent!r}: {variable} is not set in this process's environment, so ctx.credential("
            f"{variable!r}) has no key to give the SDK. Set it where the agent runs (`swarmlog run`'s "
            f"environment; in the chart, the agents' extraEnv from a Secret). A replay does not need it")
