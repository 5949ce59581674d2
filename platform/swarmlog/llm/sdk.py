"""The official LLM SDKs as the swarm's ``ctx.llm`` client.

``Swarm(llm=openai.OpenAI(...))`` (or ``anthropic.Anthropic(...)``) is accepted as it
is: :func:`llm_client` wraps the SDK client in :class:`SDKChat`, whose
``complete(request)`` calls ``client.chat.completions.create(**request)`` (or
``client.messages.create(**request)``) and returns the response as the JSON the
server sent. ``ctx.llm`` runs it live once, inside :func:`swarmlog.guard.allowed`
(so the SDK's own retries, timers and connection pool work as usual), and records
request and response as one ``llm.call``; replay serves the record and never calls
the SDK.

For streaming, or for anything else the SDK offers, hand the SDK a recorded client
inside the handler instead: ``openai.OpenAI(http_client=ctx.http())``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["SDKChat", "llm_client"]

logger = logging.getLogger(__name__)


class SDKChat:
    """An ``openai.OpenAI`` or ``anthropic.Anthropic`` client speaking swarmlog's ``LLMClient``."""

    __slots__ = ("client", "_create", "api")

    def __init__(self, client: Any) -> None:
        self.client = client
        chat = getattr(getattr(client, "chat", None), "completions", None)
        messages = getattr(client, "messages", None)
        create: Callable[..., Any] | None = getattr(chat, "create", None)
        self.api = "chat.completions"
        if create is None:
            create, self.api = getattr(messages, "create", None), "messages"
        if create is None:
            raise ConfigurationError(
                f"Swarm(llm={type(client).__name__}(...)): an LLM client needs complete(request) -> dict, or "
                f"to be an openai.OpenAI / anthropic.Anthropic client")
        self._create = create

    def __repr__(self) -> str:
        return f"SDKChat({type(self.client).__module__}.{type(self.client).__name__}, {self.api})"

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """``create(**request)``; the response as the JSON the server sent (unset fields left out)."""
        if request.get("stream"):
            raise ConfigurationError(
                "ctx.llm records one JSON response, so it does not stream; to stream, build the SDK in the "
                "handler on a recorded client: openai.OpenAI(http_client=ctx.http()) (the stream is recorded "
                "whole and replayed as the same stream)")
        response = self._create(**request)
        return response.to_dict(mode="json")


def llm_client(llm: Any) -> Any:
    """What ``Swarm(llm=...)`` keeps: ``llm`` itself if it has ``complete``, else :class:`SDKChat`."""
    if llm is None or callable(getattr(llm, "complete", None)):
        return llm
    return SDKChat(llm)
