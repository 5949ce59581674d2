"""Recorded LLM calls and HTTP: the one home of what a handler asks of a model or a server.

The wing. Its face (every name imported when first used: an agent's import of a swarm need not
import httpx):

* the clients of ``ctx.llm`` (``clients``): :class:`LLMClient`, the protocol ``Swarm(llm=...)``
  takes; :class:`OpenAIChat`, any OpenAI-compatible endpoint; :class:`ScriptedLLM`, a deterministic
  offline model; :func:`content` and :func:`completion`, reading and writing OpenAI-shaped replies;
  their errors (``errors``), under :class:`LLMError`: :class:`LLMUnavailable`, :class:`LLMRequestFailed`,
  :class:`LLMResponseInvalid`, :class:`ScriptExhausted`;
* the official SDKs as that client (``sdk``): :class:`SDKChat`, :func:`llm_client`;
* recorded HTTP, ``ctx.http()`` (``http``): :class:`RecordedHTTP`, and its replay's :class:`HTTPRequestDiverged`;
* an SDK's key, ``ctx.credential()`` (``credentials``): the environment's live, a placeholder on
  replay; :class:`CredentialMissing`;
* what both do alike: :class:`RetryPolicy` (``retry``), the one retry policy of live calls, and
  :class:`Redaction`, which header and query-parameter names carry credentials (re-exported from
  :mod:`swarmlog.redaction`, swarmlog's one home of redaction).

``from swarmlog.llm import OpenAIChat, content`` is the usual import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ..redaction import Redaction
    from .clients import LLMClient, OpenAIChat, ScriptedLLM, completion, content
    from .errors import (
        CredentialMissing,
        HTTPRequestDiverged,
        LLMError,
        LLMRequestFailed,
        LLMResponseInvalid,
        LLMUnavailable,
        RequestDiverged,
        ScriptExhausted,
    )
    from .http import RecordedHTTP
    from .retry import RetryPolicy
    from .sdk import SDKChat, llm_client

__getattr__ = exports(globals(), {
    **dict.fromkeys(["LLMClient", "OpenAIChat", "ScriptedLLM", "completion", "content"], ".clients"),
    **dict.fromkeys(["CredentialMissing", "HTTPRequestDiverged", "LLMError", "LLMRequestFailed", "LLMResponseInvalid",
                     "LLMUnavailable", "RequestDiverged", "ScriptExhausted"], ".errors"),
    "RecordedHTTP": ".http",
    "Redaction": "..redaction",
    "RetryPolicy": ".retry",
    **dict.fromkeys(["SDKChat", "llm_client"], ".sdk"),
})

__all__ = ["CredentialMissing", "HTTPRequestDiverged", "LLMClient", "LLMError", "LLMRequestFailed",
           "LLMResponseInvalid", "LLMUnavailable", "OpenAIChat",
           "RecordedHTTP", "Redaction", "RequestDiverged", "RetryPolicy", "SDKChat", "ScriptExhausted", "ScriptedLLM",
           "completion", "content", "llm_client"]
