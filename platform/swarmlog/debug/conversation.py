"""A recorded model call read as a conversation: model, messages, tool calls and results, the reply.

The log keeps a model call as the bytes that went over the wire: an ``llm.call`` holds its
request and response as canonical JSON strings, an ``http.exchange`` holds an HTTP request
and response whole (a streamed reply as its ``data:`` lines, headers and all). Printed as
they are, a person reads escaped JSON inside JSON. :func:`conversation` turns either event
into a :class:`Conversation` when it is a call to an API it knows:

* OpenAI chat completions (``POST …/chat/completions``; and every ``llm.call`` of
  :class:`swarmlog.llm.OpenAIChat` or :class:`~swarmlog.llm.ScriptedLLM`),
* OpenAI responses (``POST …/responses``),
* Anthropic messages (``POST …/messages``),

each streamed or not: a server-sent-event body is assembled into the reply it streamed
(text deltas joined, tool-call arguments joined, usage from the events that carry it).

What every reader of the log shows is decided here once: ``swarmlog show`` and ``swarmlog
log``, the timelines (text and HTML), and ``swarmlog ui``. Nothing is thrown away: the raw
request and response stay on the :class:`Conversation` (``raw_request``, ``raw_response``),
and a body this module does not understand gives ``None``, so the caller shows the event as
it was recorded. Request headers are not part of a conversation; a reader shows them folded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from ..log.protocol import HTTP_EXCHANGE, LLM_CALL

logger = logging.getLogger(__name__)

__all__ = ["Conversation", "Message", "ToolCall", "Usage", "conversation", "api_of"]

OPENAI_CHAT = "openai.chat"
OPENAI_RESPONSES = "openai.responses"
ANTHROPIC_MESSAGES = "anthropic.messages"

LATENCY_HEADERS = ("openai-processing-ms", "x-processing-ms")
"""Response headers in which a server says how long it took (milliseconds): the only latency a
recorded call carries (swarmlog records no clock)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked for: its name and arguments (parsed from JSON when they are JSON)."""

    name: str
    arguments: Any
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def text(self) -> str:
        args = self.arguments if isinstance(self.arguments, str) else _compact(self.arguments)
        return f"{self.name}({args})"


@dataclass(frozen=True, slots=True)
class Message:
    """One turn: who spoke (``system``, ``user``, ``assistant``, ``tool``), what they said, the tools the
    assistant called, and for a tool's result the call it answers (``tool_call_id``)."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.tool_calls:
            doc["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            doc["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            doc["name"] = self.name
        return doc


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def total(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def to_json(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "total_tokens": self.total}

    def text(self) -> str:
        return f"{_n(self.input_tokens)} in + {_n(self.output_tokens)} out tokens"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One model call, readable. ``messages`` is what was sent, ``reply`` what came back."""

    api: str
    """:data:`OPENAI_CHAT`, :data:`OPENAI_RESPONSES` or :data:`ANTHROPIC_MESSAGES`."""
    model: str | None
    messages: tuple[Message, ...]
    reply: tuple[Message, ...]
    tools: tuple[str, ...] = ()
    """The names of the tools the request offered."""
    usage: Usage | None = None
    latency_ms: float | None = None
    """How long the server said it took (a response header), when it said so."""
    streamed: bool = False
    stop_reason: str | None = None
    status: int | None = None
    """The HTTP status (an ``http.exchange``); None for an ``llm.call``."""
    error: str | None = None
    """Why no reply: the transport error, or an error body the API sent."""
    url: str | None = None
    raw_request: str = ""
    raw_response: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"api": self.api, "model": self.model, "messages": [m.to_json() for m in self.messages],
                "reply": [m.to_json() for m in self.reply], "tools": list(self.tools),
                "usage": self.usage.to_json() if self.usage is not None else None, "latency_ms": self.latency_ms,
                "streamed": self.streamed, "stop_reason": self.stop_reason, "status": self.status,
                "error": self.error, "url": self.url, **self.extra}

    @property
    def reply_text(self) -> str:
        parts = [m.text for m in self.reply if m.text]
        calls = [c.text() for m in self.reply for c in m.tool_calls]
        return " ".join(parts + [f"→ {c}" for c in calls])

    def summary(self) -> str:
        """One line: model, how many messages, the reply (or error), tokens."""
        facts = [f"{len(self.messages)} msg"]
        if self.streamed:
            facts.append("streamed")
        if self.usage is not None and self.usage.total is not None:
            facts.append(f"{_n(self.usage.input_tokens)}+{_n(self.usage.output_tokens)} tok")
        if self.latency_ms is not None:
            facts.append(f"{self.latency_ms:g} ms")
        said = f"ERROR {self.error}" if self.error else repr(self.reply_text) if self.reply_text else "(no reply)"
        return f"{self.model or '?'} [{', '.join(facts)}] → {said}"

    def lines(self, *, width: int = 100) -> list[str]:
        """The conversation as text, a turn a paragraph (``swarmlog show``)."""
        served = f", served by {self.extra['served_by']}" if self.extra.get("served_by") else ""
        head = [f"model {self.model or '?'} ({self.api}{', streamed' if self.streamed else ''}{served})"]
        facts = []
        if self.usage is not None:
            facts.append(self.usage.text())
        if self.latency_ms is not None:
            facts.append(f"server took {self.latency_ms:g} ms")
        if self.status is not None:
            facts.append(f"HTTP {self.status}")
        if self.stop_reason:
            facts.append(f"stop: {self.stop_reason}")
        if facts:
            head.append(", ".join(facts))
        if self.tools:
            head.append(f"tools offered: {', '.join(self.tools)}")
        out = head[:]
        for m in self.messages:
            out.extend(_turn(m, width))
        out.append("── reply ──")
        if self.error:
            out.append(f"  ERROR {self.error}")
        for m in self.reply:
            out.extend(_turn(m, width))
        return out


def _turn(m: Message, width: int) -> list[str]:
    who = m.role if m.tool_call_id is None else f"{m.role} (result of {m.tool_call_id})"
    if m.name:
        who += f" {m.name}"
    out = [f"[{who}]"]
    for para in (m.text or "").splitlines() or ([] if m.tool_calls else [""]):
        out.append("  " + para if len(para) < width * 4 else "  " + para[: width * 4] + "…")
    for c in m.tool_calls:
        out.append(f"  → calls {c.text()}" + (f"  (id {c.id})" if c.id else ""))
    return out


# --- reading an event -------------------------------------------------------------------------------


def conversation(event_type: str, payload: Mapping[str, Any]) -> Conversation | None:
    """The conversation an ``llm.call`` or ``http.exchange`` payload records; None for any other
    event, and for an exchange with an API not known here (or a body that is not its JSON)."""
    try:
        if event_type == LLM_CALL:
            return _from_llm_call(payload)
        if event_type == HTTP_EXCHANGE:
            return _from_exchange(payload)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # A body in a shape of the API this does not know yet: shown raw, never a crash of the reader.
        logger.debug("a %s not read as a conversation: %s", event_type, exc)
    return None


def api_of(method: str, url: str) -> str | None:
    """Which known LLM API ``METHOD url`` calls (by the path's end), or None."""
    if method.upper() != "POST":
        return None
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    if path.endswith("/messages"):
        return ANTHROPIC_MESSAGES
    return None


def _from_llm_call(p: Mapping[str, Any]) -> Conversation | None:
    raw_req, raw_resp = str(p.get("request_json") or ""), str(p.get("response_json") or "")
    request, response = _loads(raw_req), _loads(raw_resp)
    if not isinstance(request, Mapping):
        return None
    response = response if isinstance(response, Mapping) else {}
    if "input" in request and "messages" not in request or "output" in response:
        api = OPENAI_RESPONSES
    elif response.get("type") == "message" or "system" in request:
        api = ANTHROPIC_MESSAGES
    else:
        api = OPENAI_CHAT
    convo = _parse(api, request, response, streamed=False)
    model = str(p.get("model") or "") or convo.model
    return _replace(convo, model=model, raw_request=raw_req, raw_response=raw_resp)


def _from_exchange(p: Mapping[str, Any]) -> Conversation | None:
    api = api_of(str(p.get("method", "")), str(p.get("url", "")))
    if api is None:
        return None
    raw_req, raw_resp = _text(p.get("request_body")), _text(p.get("response_body"))
    request = _loads(raw_req)
    if not isinstance(request, Mapping) or not ("messages" in request or "input" in request):
        return None
    headers = {str(h.get("name", "")).lower(): str(h.get("value", "")) for h in p.get("response_headers") or ()}
    status = p.get("status")
    streamed = "text/event-stream" in headers.get("content-type", "") or raw_resp.lstrip().startswith(("data:",
                                                                                                       "event:"))
    response: Any
    if streamed:
        response = _assemble(api, _sse(raw_resp))
    else:
        response = _loads(raw_resp)
    error = p.get("error")
    if error is None and isinstance(status, int) and status >= 400:
        err = response.get("error") if isinstance(response, Mapping) else None
        error = f"HTTP {status}: " + (str(err.get("message", err)) if isinstance(err, Mapping)
                                      else str(err) if err else raw_resp[:300])
    convo = _parse(api, request, response if isinstance(response, Mapping) else {}, streamed=streamed)
    return _replace(convo, status=status if isinstance(status, int) else None, error=error, url=str(p.get("url")),
                    latency_ms=_latency(headers), raw_request=raw_req, raw_response=raw_resp)


def _parse(api: str, request: Mapping[str, Any], response: Mapping[str, Any], *, streamed: bool) -> Conversation:
    if api == OPENAI_RESPONSES:
        messages, reply, stop, usage = _responses(request, response)
    elif api == ANTHROPIC_MESSAGES:
        messages, reply, stop, usage = _anthropic(request, response)
    else:
        messages, reply, stop, usage = _chat(request, response)
    # The model asked for (what a reader searches by); the one the API says served it, when it differs
    # (a dated version of an alias), kept beside it.
    asked, served = request.get("model"), response.get("model")
    model = asked or served
    extra = {"served_by": str(served)} if served and asked and served != asked else {}
    return Conversation(api=api, model=str(model) if model else None, messages=tuple(messages), reply=tuple(reply),
                        tools=_tool_names(request.get("tools")), usage=usage, streamed=streamed, stop_reason=stop,
                        extra=extra)


# --- OpenAI chat completions -------------------------------------------------------------------------


def _chat(request: Mapping[str, Any], response: Mapping[str, Any]
          ) -> tuple[list[Message], list[Message], str | None, Usage | None]:
    messages = [_chat_message(m) for m in request.get("messages") or () if isinstance(m, Mapping)]
    reply, stop = [], None
    for choice in response.get("choices") or ():
        if isinstance(choice, Mapping) and isinstance(choice.get("message"), Mapping):
            reply.append(_chat_message(choice["message"]))
            stop = stop or choice.get("finish_reason")
    u = response.get("usage")
    usage = Usage(_int(u.get("prompt_tokens")), _int(u.get("completion_tokens"))) if isinstance(u, Mapping) else None
    return messages, reply, stop, usage


def _chat_message(m: Mapping[str, Any]) -> Message:
    calls = []
    for c in m.get("tool_calls") or ():
        fn = c.get("function") or {}
        calls.append(ToolCall(name=str(fn.get("name", "?")), arguments=_maybe_json(fn.get("arguments")),
                              id=c.get("id")))
    if isinstance(m.get("function_call"), Mapping):  # the API's older single-call form
        fn = m["function_call"]
        calls.append(ToolCall(name=str(fn.get("name", "?")), arguments=_maybe_json(fn.get("arguments"))))
    return Message(role=str(m.get("role", "?")), text=_content_text(m.get("content")), tool_calls=tuple(calls),
                   tool_call_id=m.get("tool_call_id"), name=m.get("name"))


# --- OpenAI responses ----------------------------------------------------------------------------------


def _responses(request: Mapping[str, Any], response: Mapping[str, Any]
               ) -> tuple[list[Message], list[Message], str | None, Usage | None]:
    messages = []
    if request.get("instructions"):
        messages.append(Message(role="system", text=str(request["instructions"])))
    items = request.get("input")
    if isinstance(items, str):
        messages.append(Message(role="user", text=items))
    else:
        messages.extend(_response_items(items or ()))
    reply = _response_items(response.get("output") or ())
    u = response.get("usage")
    usage = Usage(_int(u.get("input_tokens")), _int(u.get("output_tokens"))) if isinstance(u, Mapping) else None
    stop = response.get("status") if isinstance(response.get("status"), str) else None
    return messages, _merge_calls(reply), stop, usage


def _response_items(items: Sequence[Any]) -> list[Message]:
    out: list[Message] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind == "message" or ("role" in item and "type" not in item):
            out.append(Message(role=str(item.get("role", "?")), text=_content_text(item.get("content"))))
        elif kind == "function_call":
            out.append(Message(role="assistant", tool_calls=(ToolCall(
                name=str(item.get("name", "?")), arguments=_maybe_json(item.get("arguments")),
                id=item.get("call_id") or item.get("id")),)))
        elif kind == "function_call_output":
            out.append(Message(role="tool", text=_content_text(item.get("output")), tool_call_id=item.get("call_id")))
        elif kind == "reasoning":
            parts = [s for s in item.get("summary") or () if isinstance(s, Mapping)]
            summary = " ".join(_content_text(s.get("text")) for s in parts)
            if summary:
                out.append(Message(role="reasoning", text=summary))
        else:
            out.append(Message(role=str(kind), text=_compact(item)))
    return out


def _merge_calls(reply: list[Message]) -> list[Message]:
    """An assistant's text and the tool calls that follow it, as one turn (as chat completions has it)."""
    out: list[Message] = []
    for m in reply:
        prev = out[-1] if out else None
        if prev is not None and prev.role == m.role == "assistant" and m.tool_calls and not m.text:
            out[-1] = Message(role="assistant", text=prev.text, tool_calls=prev.tool_calls + m.tool_calls)
        else:
            out.append(m)
    return out


# --- Anthropic messages ---------------------------------------------------------------------------------


def _anthropic(request: Mapping[str, Any], response: Mapping[str, Any]
               ) -> tuple[list[Message], list[Message], str | None, Usage | None]:
    messages = []
    if request.get("system"):
        messages.append(Message(role="system", text=_content_text(request["system"])))
    for m in request.get("messages") or ():
        if isinstance(m, Mapping):
            messages.extend(_anthropic_turn(str(m.get("role", "?")), m.get("content")))
    reply = _anthropic_turn(str(response.get("role", "assistant")), response.get("content")) \
        if "content" in response else []
    u = response.get("usage")
    usage = Usage(_int(u.get("input_tokens")), _int(u.get("output_tokens"))) if isinstance(u, Mapping) else None
    return messages, reply, response.get("stop_reason"), usage


def _anthropic_turn(role: str, content: Any) -> list[Message]:
    if not isinstance(content, list):
        return [Message(role=role, text=_content_text(content))]
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            out.append(Message(role="tool", text=_content_text(block.get("content")),
                               tool_call_id=block.get("tool_use_id")))
        elif kind == "tool_use":
            calls.append(ToolCall(name=str(block.get("name", "?")), arguments=block.get("input"), id=block.get("id")))
        elif kind in ("text", None):
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            out.append(Message(role="thinking", text=str(block.get("thinking", ""))))
        else:
            texts.append(f"[{kind}]")
    if texts or calls:
        out.append(Message(role=role, text="\n".join(texts), tool_calls=tuple(calls)))
    return out


# --- streams --------------------------------------------------------------------------------------------


def _sse(body: str) -> list[tuple[str | None, Any]]:
    """A server-sent-event body as ``(event name, data)`` pairs, data parsed from JSON (``[DONE]`` dropped)."""
    out: list[tuple[str | None, Any]] = []
    name: str | None = None
    data: list[str] = []
    for line in [*body.splitlines(), ""]:
        if not line.strip():
            if data:
                joined = "\n".join(data)
                if joined.strip() != "[DONE]":
                    out.append((name, _loads(joined)))
            name, data = None, []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            name = line[6:].strip()
    return out


def _assemble(api: str, events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """The non-streamed response a stream adds up to."""
    chunks = [d for _, d in events if isinstance(d, Mapping)]
    if api == OPENAI_RESPONSES:
        return _assemble_responses(chunks)
    if api == ANTHROPIC_MESSAGES:
        return _assemble_anthropic(chunks)
    return _assemble_chat(chunks)


def _assemble_chat(chunks: list[Mapping[str, Any]]) -> dict[str, Any]:
    text: list[str] = []
    role = "assistant"
    calls: dict[int, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    finish = None
    for c in chunks:
        if c.get("model"):
            out["model"] = c["model"]
        if isinstance(c.get("usage"), Mapping):
            out["usage"] = c["usage"]
        for choice in c.get("choices") or ():
            delta = choice.get("delta") or {}
            role = delta.get("role") or role
            if delta.get("content"):
                text.append(str(delta["content"]))
            for tc in delta.get("tool_calls") or ():
                slot = calls.setdefault(int(tc.get("index", len(calls))), {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": role, "content": "".join(text)}
    if calls:
        message["tool_calls"] = [{"id": s["id"], "type": "function",
                                  "function": {"name": s["name"], "arguments": s["arguments"]}}
                                 for _, s in sorted(calls.items())]
    out["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return out


def _assemble_responses(chunks: list[Mapping[str, Any]]) -> dict[str, Any]:
    for c in reversed(chunks):  # the closing event carries the whole response
        if c.get("type") in ("response.completed", "response.incomplete", "response.failed") \
                and isinstance(c.get("response"), Mapping):
            return dict(c["response"])
    items: dict[int, dict[str, Any]] = {}
    text: dict[int, list[str]] = {}
    out: dict[str, Any] = {}
    for c in chunks:
        kind = c.get("type")
        if isinstance(c.get("response"), Mapping) and c["response"].get("model"):
            out["model"] = c["response"]["model"]
        if kind == "response.output_item.done" and isinstance(c.get("item"), Mapping):
            items[int(c.get("output_index", len(items)))] = dict(c["item"])
        elif kind == "response.output_text.delta":
            text.setdefault(int(c.get("output_index", 0)), []).append(str(c.get("delta", "")))
    for i, parts in text.items():
        items.setdefault(i, {"type": "message", "role": "assistant",
                             "content": [{"type": "output_text", "text": "".join(parts)}]})
    out["output"] = [items[i] for i in sorted(items)]
    return out


def _assemble_anthropic(chunks: list[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": []}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    for c in chunks:
        kind = c.get("type")
        if kind == "message_start" and isinstance(c.get("message"), Mapping):
            m = c["message"]
            out["model"] = m.get("model")
            usage.update(m.get("usage") or {})
        elif kind == "content_block_start":
            blocks[int(c.get("index", len(blocks)))] = dict(c.get("content_block") or {})
        elif kind == "content_block_delta":
            i, delta = int(c.get("index", 0)), c.get("delta") or {}
            block = blocks.setdefault(i, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                partial.setdefault(i, []).append(str(delta.get("partial_json", "")))
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "message_delta":
            out["stop_reason"] = (c.get("delta") or {}).get("stop_reason")
            usage.update(c.get("usage") or {})
    for i, parts in partial.items():
        blocks[i]["input"] = _maybe_json("".join(parts))
    out["content"] = [blocks[i] for i in sorted(blocks)]
    if usage:
        out["usage"] = usage
    return out


# --- small helpers ----------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or a list of parts (text parts joined, others named)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                if "text" in part:
                    parts.append(str(part["text"]))
                elif part.get("type") == "tool_result":
                    parts.append(_content_text(part.get("content")))
                else:
                    parts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return _compact(content)


def _tool_names(tools: Any) -> tuple[str, ...]:
    names = []
    for t in tools or ():
        if isinstance(t, Mapping):
            fn = t.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else t.get("name")
            names.append(str(name or t.get("type", "?")))
    return tuple(names)


def _latency(headers: Mapping[str, str]) -> float | None:
    for name in LATENCY_HEADERS:
        try:
            return float(headers[name])
        except (KeyError, ValueError):
            continue
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        parsed = _loads(value)
        return parsed if parsed is not None or value.strip() == "null" else value
    return value


def _text(body: Any) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes | bytearray):
        return bytes(body).decode(errors="replace")
    return str(body)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


def _replace(c: Conversation, **changes: Any) -> Conversation:
    return replace(c, **changes)
