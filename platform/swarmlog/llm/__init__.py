"""Recorded LLM calls and HTTP: the one home of what a handler asks of a model or a server.

The wing. Its face (every name imported when first used: an agent's import of a swarm need not
import httpx):

* the clients of ``ctx.llm`` (``clients``): :class:`LLMClient`, the protocol ``Swarm(llm=...)``
  takes; :class:`OpenAIChat`, any OpenAI-compatible endpoint; :class:`ScriptedLLM`, a deterministic
  offline model; :func:`content` and :func:`completion`, reading and writing OpenAI-shaped replies;
  their errors :class:`LLMUnavailable`, :class:`LLMRequestFailed`, :class:`LLMResponseInvalid`,
  :class:`ScriptExhausted`;
* the official SDKs as that client (``sdk``): :class:`SDKChat`, :func:`llm_client`;
* recorded HTTP, ``ctx.http()`` (``http``): :class:`RecordedHTTP`, :class:`Redaction` (which header
  and query-parameter names carry credentials), :class:`HTTPRequestDiverged`; how a replayed request
  is compared with the record (``compare``);
* an SDK's key, ``ctx.credential()`` (``credentials``): the environment's live, a placeholder on
  replay; :class:`CredentialMissing`.

``from swarmlog.llm import OpenAIChat, content`` is the usual import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from .clients import (
        LLMClient,
        LLMRequestFailed,
        LLMResponseInvalid,
        LLMUnavailable,
        OpenAIChat,
        ScriptedLLM,
        ScriptExhausted,
        completion,
        content,
    )
    from .credentials import CredentialMissing
    from .http import HTTPRequestDiverged, RecordedHTTP, Redaction
    from .sdk import SDKChat, llm_client

__getattr__ = exports(globals(), {
    **dict.fromkeys(["LLMClient", "LLMRequestFailed", "LLMResponseInvalid", "LLMUnavailable", "OpenAIChat",
                     "ScriptedLLM", "ScriptExhausted", "completion", "content"], ".clients"),
    "CredentialMissing": ".credentials",
    **dict.fromkeys(["HTTPRequestDiverged", "RecordedHTTP", "Redaction"], ".http"),
    **dict.fromkeys(["SDKChat", "llm_client"], ".sdk"),
})

__all__ = ["CredentialMissing", "HTTPRequestDiverged", "LLMClient", "LLMRequestFailed", "LLMResponseInvalid",
           "LLMUnavailable", "OpenAIChat", "RecordedHTTP", "Redaction", "SDKChat", "ScriptExhausted", "ScriptedLLM",
           "completion", "content", "llm_client"]
