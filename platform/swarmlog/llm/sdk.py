"""The official LLM SDKs as the swarm's ``ctx.llm`` client.

``Swarm(llm=openai.OpenAI(...))`` (or ``anthropic.Anthropic(...)``) is accepted as it
is: :func:`llm_client` wraps the SDK client in :class:`SDKChat`, whose
``complete(request)`` calls ``client.chat.completions.create(**request)`` (or
``client.messages.create(**request)``) and returns the response as the JSON the
server sent. ``ctx.llm`` runs it live once, inside :func:`swarmlog.guard.allowed`
(so the SDK's own retries, timers and connection pool work as usual), and records
request and response as one ``llm.call``; replay serves the record and never calls
the SDK.

``Swarm(llm=openai.OpenAI)`` — the class, or any function of no arguments that makes a
client — builds the client at the first live call instead. Why: an SDK client built
where the swarm is defined reads its key then (``openai.OpenAI()`` refuses to be built
without one), so a replay, which imports the same module and calls nothing, would need
the live key; built at the first live call, it never is on replay.

For streaming, or for anything else the SDK offers, hand the SDK a recorded client
inside the handler instead: ``openai.OpenAI(api_key=ctx.credential("OPENAI_API_KEY"),
http_client=ctx.http())``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["SDKChat", "llm_client"]

logger = logging.getLogger(__name__)


class SDKChat:
    """An ``openai.OpenAI`` or ``anthropic.Anthropic`` client speaking swarmlog's ``LLMClient``.

    ``SDKChat(client)``, or ``SDKChat(factory=openai.OpenAI)``: the client made by ``factory()`` at the
    first live call (once, shared by the swarm's agents, which are threads).
    """

    __slots__ = ("_client", "_create", "api", "_factory", "_lock")

    def __init__(self, client: Any = None, *, factory: Callable[[], Any] | None = None) -> None:
        if (client is None) == (factory is None):
            raise ConfigurationError("SDKChat takes an SDK client or a factory of one, not both")
        self._client: Any = None
        self._create: Callable[..., Any] | None = None
        self.api = ""
        self._factory = factory
        self._lock = threading.Lock()
        if client is not None:
            self._bind(client)

    def _bind(self, client: Any) -> None:
        chat = getattr(getattr(client, "chat", None), "completions", None)
        messages = getattr(client, "messages", None)
        create: Callable[..., Any] | None = getattr(chat, "create", None)
        api = "chat.completions"
        if create is None:
            create, api = getattr(messages, "create", None), "messages"
        if create is None:
            raise ConfigurationError(
                f"Swarm(llm={type(client).__name__}(...)): an LLM client needs complete(request) -> dict, or "
                f"to be an openai.OpenAI / anthropic.Anthropic client (or the class, or a function making one)")
        self._client, self._create, self.api = client, create, api

    @property
    def client(self) -> Any:
        """The SDK client (made now, if it was given as a factory and not made yet)."""
        if self._client is None:
            self._made()
        return self._client

    def _made(self) -> Callable[..., Any]:
        with self._lock:  # one client for the swarm, however many agents' first calls race here
            if self._create is None:
                assert self._factory is not None
                self._bind(self._factory())
        assert self._create is not None
        return self._create

    def __repr__(self) -> str:
        if self._client is None:
            return f"SDKChat(factory={getattr(self._factory, '__qualname__', self._factory)!r}, not built yet)"
        return f"SDKChat({type(self._client).__module__}.{type(self._client).__name__}, {self.api})"

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """``create(**request)``; the response as the JSON the server sent (unset fields left out)."""
        if request.get("stream"):
            raise ConfigurationError(
                "ctx.llm records one JSON response, so it does not stream; to stream, build the SDK in the "
                "handler on a recorded client: openai.OpenAI(http_client=ctx.http()) (the stream is recorded "
                "whole and replayed as the same stream)")
        create = self._create if self._create is not None else self._made()
        response = create(**request)
        return response.to_dict(mode="json")


def llm_client(llm: Any) -> Any:
    """What ``Swarm(llm=...)`` keeps: ``llm`` itself if it has ``complete``, else :class:`SDKChat` — of the SDK
    client, or of the factory (a class, or a function of no arguments) that makes one at the first live call."""
    if llm is None or callable(getattr(llm, "complete", None)):
        return llm
    if isinstance(llm, type) or (callable(llm) and getattr(llm, "chat", None) is None
                                 and getattr(llm, "messages", None) is None):
        return SDKChat(factory=llm)
    return SDKChat(llm)
