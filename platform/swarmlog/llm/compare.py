"""How a replayed request is compared with the recorded one: the one comparison of model requests.

A replayed step's HTTP request (``ctx.http()``, :mod:`swarmlog.llm.http`) or a framework's model call
(:mod:`swarmlog.integrations`) is served the recorded response only if it asks the same: the same
method, the same endpoint, the same body (JSON compared as JSON). What differs first is named as a
path into the request (``body.messages[0].content``), and, when that part is a tool's result, by the
tool.

What is *not* compared, and why:

* **Headers** (recorded, never compared): SDKs put per-attempt values in them (retry counts, read
  timeouts, idempotency keys drawn from OS entropy) and the deployment's credentials, none of which
  changes what is asked.
* **A multipart body's boundary**: random per request (OS entropy).
* **Where an official LLM SDK's request goes** (its scheme, host and port): the openai and anthropic
  SDKs take their endpoint from the deployment (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, a local
  model server, a gateway), as they take the key: it says where the model runs, not what the program
  asks it, and a replay — which sends nothing — must not need the live run's network to agree. The
  path (which API: ``/v1/chat/completions`` or ``/v1/responses``), the query and the body are the
  program's and stay compared. The SDK is known by the ``User-Agent`` it sends with every request
  (``OpenAI/Python 3.63.0``, ``AsyncAnthropic/Python 2.17.0``), on both sides: any other request — a
  tool's own HTTP, a raw ``httpx`` call, another SDK — is compared whole, host included, because
  which server a tool asks is the program's choice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MAX_SHOWN", "comparable_body", "field_bytes", "first_difference", "llm_sdk", "request_difference", "show",
           "tool_result_named"]

MAX_SHOWN = 200  # characters of a differing value quoted in a divergence


def field_bytes(value: str | bytes | None) -> bytes:
    """A recorded body field (text, bytes or nothing) as bytes."""
    if value is None:
        return b""
    return value.encode("utf-8") if isinstance(value, str) else value


_BOUNDARY = re.compile(r"boundary=\"?([^\";,]+)")


def comparable_body(body: str | bytes | None, headers: list[dict[str, str]]) -> Any:
    """The body as compared: parsed JSON if it is JSON, the multipart boundary masked."""
    data = field_bytes(body)
    for h in headers:
        if h["name"] == "content-type":
            m = _BOUNDARY.search(h["value"])
            if m is not None:  # random per request (OS entropy): not part of what was asked
                data = data.replace(m.group(1).encode(), b"<boundary>")
    if data[:1] in (b"{", b"["):
        try:
            return json.loads(data)
        except ValueError:
            pass
    return data.decode("utf-8", "replace")


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys(), key=str):
            if k not in b:
                return f"{path}.{k}", a[k], "<absent>"
            if k not in a:
                return f"{path}.{k}", "<absent>", b[k]
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        if len(a) != len(b):
            return f"{path}.length", len(a), len(b)
        return None
    if isinstance(a, str) and isinstance(b, str) and a != b and (len(a) > MAX_SHOWN or len(b) > MAX_SHOWN):
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        start = max(0, i - 40)
        return f"{path}[{i}:]", a[start:start + MAX_SHOWN], b[start:start + MAX_SHOWN]
    if a != b or type(a) is not type(b):
        return path, a, b
    return None


_ITEM = re.compile(r"^(?:body|request)\.(messages|input)\[(\d+)\](?:\.(?:content|parts)\[(\d+)\])?")


def first_difference(recorded: Any, replayed: Any, *, root: str) -> tuple[str, Any, Any, str | None] | None:
    """Where two JSON requests first differ: ``(path, recorded value, replayed value, what it is)``, the path
    from ``root`` (``body.messages[0].content``), what it is when the request says (the result of a tool), or
    None when they are equal. The one comparison of model requests: recorded HTTP bodies here, and the
    framework integrations' model calls (:mod:`swarmlog.integrations`)."""
    d = _first_difference(recorded, replayed, root)
    if d is None:
        return None
    return d[0], d[1], d[2], tool_result_named(replayed, d[0])


def tool_result_named(body: Any, part: str) -> str | None:
    """Which tool's result a differing part of a model request is, when it is one: the tool's name is
    in the call the model made earlier in the same conversation. OpenAI's chat completions (a ``tool``
    message), its Responses API (a ``function_call_output`` item), Anthropic's messages (a
    ``tool_result`` block) and pydantic-ai's messages (a ``tool-return`` part): a changed tool is then
    named, not only a path."""
    m = _ITEM.match(part)
    if m is None or not isinstance(body, dict) or not isinstance(body.get(m.group(1)), list):
        return None
    items, i = body[m.group(1)], int(m.group(2))
    item = items[i] if i < len(items) else None
    if not isinstance(item, dict):
        return None
    call_id = None
    parts = item.get("parts")
    if m.group(3) is not None and isinstance(parts, list) and int(m.group(3)) < len(parts):
        part_of = parts[int(m.group(3))]  # pydantic-ai's messages: a tool's return carries its tool's name
        if isinstance(part_of, dict) and part_of.get("part_kind") in ("tool-return", "retry-prompt") \
                and part_of.get("tool_name"):
            return f"the result of tool {part_of['tool_name']!r} (call {part_of.get('tool_call_id')})"
    if item.get("role") == "tool":
        call_id = item.get("tool_call_id")
    elif item.get("type") == "function_call_output":
        call_id = item.get("call_id")
    elif m.group(3) is not None and isinstance(item.get("content"), list):
        blocks = item["content"]
        j = int(m.group(3))
        if j < len(blocks) and isinstance(blocks[j], dict) and blocks[j].get("type") == "tool_result":
            call_id = blocks[j].get("tool_use_id")
    if call_id is None:
        return None
    for earlier in reversed(items[:i]):
        if not isinstance(earlier, dict):
            continue
        content = earlier.get("content")
        calls = [*(earlier.get("tool_calls") or ()), earlier, *(content if isinstance(content, list) else ())]
        for call in calls:
            if not isinstance(call, dict):
                continue
            if call.get("id") == call_id and isinstance(call.get("function"), dict):
                return f"the result of tool {call['function'].get('name')!r} (call {call_id})"
            if call.get("type") in ("function_call", "tool_use") and call_id in (call.get("call_id"), call.get("id")):
                return f"the result of tool {call.get('name')!r} (call {call_id})"
    return f"the result of tool call {call_id}"


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


# --- the whole request ------------------------------------------------------------------------

# The official SDKs name themselves first in every request's User-Agent ("OpenAI/Python 3.63.0",
# "AsyncOpenAI/Python ...", "Anthropic/Python 2.17.0", "AsyncAnthropic/Python ..."); langchain-openai's
# ChatOpenAI is the openai SDK and sends the same.
_LLM_SDK = re.compile(r"^(?:Async)?(OpenAI|Anthropic)/Python[ /]")


def llm_sdk(headers: Iterable[dict[str, str]]) -> str | None:
    """``"openai"`` or ``"anthropic"`` when the request was made by that official SDK (its User-Agent
    says so), else None. ``headers`` as recorded: ``{"name": lower-cased, "value": ...}``."""
    for h in headers:
        if h["name"] == "user-agent":
            m = _LLM_SDK.match(h["value"])
            return m.group(1).lower() if m is not None else None
    return None


def _url_difference(recorded: dict[str, Any], url: str,
                    headers: list[dict[str, str]]) -> tuple[Any, Any, str | None] | None:
    """Whether the URL differs as compared (see the module: an LLM SDK's origin is not), as
    ``(recorded, now, what it is)``; None when it asks the same endpoint."""
    was = recorded["url"]
    if was == url:
        return None
    sdk = llm_sdk(recorded["request_headers"])
    if sdk is None or sdk != llm_sdk(headers):
        return was, url, None
    a, b = urlsplit(was), urlsplit(url)
    if (a.path, a.query, a.fragment) == (b.path, b.query, b.fragment):
        return None  # the same API of the same SDK, at another host: the deployment's, not the program's
    variable = "OPENAI_BASE_URL" if sdk == "openai" else "ANTHROPIC_BASE_URL"
    return was, url, (f"the {sdk} SDK's endpoint: its host may differ on replay, not its path; a base URL "
                      f"with a path of its own (a gateway's) needs the live run's {variable} on replay")


def request_difference(recorded: dict[str, Any], *, method: str, url: str, headers: list[dict[str, str]],
                       body: str | bytes | None) -> tuple[str, Any, Any, str | None] | None:
    """Where a replayed request first differs from the recorded ``http.exchange`` payload, as ``(part,
    recorded value, replayed value, what it is)``: ``"method"``, ``"url"``, ``"body"`` or a JSON path into
    the body; None when it asks the same. The request as recorded: redacted and scrubbed."""
    if recorded["method"] != method:
        return "method", recorded["method"], method, None
    found = _url_difference(recorded, url, headers)
    if found is not None:
        return "url", *found
    now = comparable_body(body, headers)
    d = _first_difference(comparable_body(recorded["request_body"], recorded["request_headers"]), now, "body")
    if d is None:
        return None
    return d[0], d[1], d[2], tool_result_named(now, d[0])
