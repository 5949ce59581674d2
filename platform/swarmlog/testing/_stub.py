"""Tools for testing swarms: the same ones swarmlog tests itself with.

* :class:`ScriptedLLM` (re-exported from :mod:`swarmlog.llm`): a deterministic in-process
  model that counts its calls, for asserting that a replay never called the model.
* :class:`StubServer`: a tiny HTTP server on the loopback interface speaking OpenAI's chat
  completions and Anthropic's messages API, each plain or streamed (server-sent events), tool
  calls included, for exercising a real HTTP client (:class:`swarmlog.llm.OpenAIChat`, the
  ``openai`` and ``anthropic`` SDKs through ``ctx.http()``) without a real model::

      from swarmlog.llm import OpenAIChat
      from swarmlog.testing import StubServer

      with StubServer(lambda request: "hello") as server:
          server.fail_next(2)                      # two 503s, then answers
          chat = OpenAIChat(base_url=server.base_url, api_key="sk-test", backoff=0.01)
          chat.complete({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
          assert server.request_count == 3
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..llm.clients import Reply, ScriptedLLM

__all__ = ["Route", "ScriptedLLM", "StubRequest", "StubServer", "anthropic_message", "tool_call_reply"]

# Loopback only, by construction: a test server must never be reachable from the network.
_HOST = "127.0.0.1"


@dataclass(slots=True)
class StubRequest:
    """One HTTP request the stub received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body, or the raw text if it was not JSON."""
    received_at: float = 0.0
    """``time.monotonic()`` when the request had been read."""
    answered_at: float | None = None
    """``time.monotonic()`` when its response had been sent (None: not yet, or the client hung up).
    Two requests overlapped in time when each was received before the other was answered."""


Route = Callable[[StubRequest], Any]
"""A route's answer to a request: a JSON value (sent with status 200) or ``(status, JSON value)``.
It runs on the request's own server thread, so it may take its time (``time.sleep``)."""


@dataclass(slots=True)
class _Fault:
    remaining: int
    status: int
    body: dict[str, Any]
    retry_after: float | None


def _echo(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages", ()) if isinstance(m, dict) and m.get("role") == "user"]
    return f"echo: {users[-1].get('content', '')}" if users else "echo:"


class StubServer:
    """OpenAI's ``POST /v1/chat/completions`` and Anthropic's ``POST /v1/messages`` on
    ``127.0.0.1`` (a free port).

    ``reply`` answers each valid request: a :class:`ScriptedLLM`, or a function
    ``request -> str | dict`` (wrapped in one); by default it echoes the last user message.
    A str is the reply text; a dict is an OpenAI chat completion (say, with ``tool_calls``;
    :func:`tool_call_reply` makes one), which the messages API turns into its own shape
    (``tool_use`` blocks), or an Anthropic message (``"type": "message"``) returned as is there.
    With ``"stream": true`` the same answer is sent as server-sent events, chunked the way each
    API streams (text deltas word by word, tool-call arguments in pieces; OpenAI's usage chunk
    when ``stream_options.include_usage``), ending with ``data: [DONE]`` / ``message_stop``.

    The server answers like the real APIs do: 401 if ``api_key`` is set and the request's key
    (``Authorization: Bearer``, or Anthropic's ``x-api-key``) differs, echoing the wrong key as
    OpenAI does; 404 for other paths; 400 for a body that is not a JSON object with a
    ``messages`` list; 500 if ``reply`` raises. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`; after :meth:`stop` the port refuses connections.

    Responses close the connection (HTTP/1.0), so stopping never waits on an idle client.
    """

    def __init__(self, reply: ScriptedLLM | Callable[[dict[str, Any]], Reply] | None = None, *,
                 api_key: str | None = None, routes: Mapping[str, Route] | None = None) -> None:
        if reply is None:
            reply = _echo
        self.llm = reply if isinstance(reply, ScriptedLLM) else ScriptedLLM(reply, model="stub")
        self.api_key = api_key
        self.routes = dict(routes or {})
        """Path (without the query) -> :data:`Route`, for GET and POST: a tool's endpoint beside the
        model's (``routes={"/tools/weather": lambda r: {"sky": "clear"}}``); the API key is not checked."""
        self.requests: list[StubRequest] = []
        self._faults: list[_Fault] = []
        self._stall: tuple[int, float] = (0, 0.0)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> StubServer:
        """Bind a free loopback port and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"stub": self})
        httpd = _QuietServer((_HOST, 0), handler)
        self._port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"swarmlog-stub-llm:{self._port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (connections to it are then refused)."""
        httpd, thread, self._httpd, self._thread = self._httpd, self._thread, None, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and observations -------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("StubServer has not been started; use `with StubServer() as server:`")
        return self._port

    @property
    def base_url(self) -> str:
        """What to pass as ``OpenAIChat(base_url=...)``; it keeps its port after :meth:`stop`."""
        return f"http://{_HOST}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """What to pass as ``anthropic.Anthropic(base_url=...)`` (the SDK adds ``/v1/messages``)."""
        return f"http://{_HOST}:{self.port}"

    @property
    def request_count(self) -> int:
        """Every HTTP request received, answered or failed."""
        with self._lock:
            return len(self.requests)

    # -- fault injection ------------------------------------------------------------------

    def fail_next(self, n: int, *, status: int = 503, message: str = "injected failure",
                  retry_after: float | None = None) -> None:
        """Answer the next ``n`` requests with ``status`` (an OpenAI-style error body), optionally
        with a ``Retry-After`` header; queued after failures already pending."""
        if n < 1:
            raise ValueError("n must be at least 1")
        body = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                          "code": status}}
        with self._lock:
            self._faults.append(_Fault(n, status, body, retry_after))

    def stall_next(self, n: int, *, seconds: float) -> None:
        """Wait ``seconds`` before answering each of the next ``n`` requests (to test timeouts)."""
        with self._lock:
            self._stall = (n, seconds)

    # -- used by the handler thread -------------------------------------------------------

    def _record(self, request: StubRequest) -> tuple[float, _Fault | None]:
        request.received_at = time.monotonic()
        with self._lock:
            self.requests.append(request)
            stall = 0.0
            n, seconds = self._stall
            if n > 0:
                self._stall, stall = (n - 1, seconds), seconds
            fault = None
            if self._faults:
                fault = self._faults[0]
                fault.remaining -= 1
                if fault.remaining == 0:
                    del self._faults[0]
            return stall, fault


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that timed out and hung up is expected in tests; nothing else happens here.
        pass


def _error(message: str, kind: str, code: object) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    stub: StubServer
    server_version = "swarmlog-stub"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self._handle("POST")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        stub = self.stub
        request = StubRequest(method, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self._request = request
        stall, fault = stub._record(request)
        if stall:
            time.sleep(stall)
        if fault is not None:
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            self._send(fault.status, fault.body, headers)
            return
        path = self.path.split("?")[0].rstrip("/")
        route = stub.routes.get(path) or stub.routes.get(path + "/")
        if route is not None:
            try:
                answer: Any = route(request)
            except Exception as exc:  # the route failed: report it like a server bug
                self._send(500, _error(f"{type(exc).__name__}: {exc}", "server_error", None))
                return
            status, answer = answer if isinstance(answer, tuple) else (200, answer)
            self._send(status, answer)
            return
        if method != "POST":
            self._send(404, _error(f"no route for {method} {self.path}", "invalid_request_error", None))
            return
        anthropic = path.endswith("/messages")
        if stub.api_key is not None:
            given = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if anthropic and not given:
                given = self.headers.get("x-api-key", "")
            if given != stub.api_key:
                # OpenAI echoes (part of) the key it rejected; clients must not repeat it.
                self._send(401, _error(f"Incorrect API key provided: {given or 'none'}", "invalid_request_error",
                                       "invalid_api_key"))
                return
        if not (anthropic or path.endswith("/chat/completions")):
            self._send(404, _error(f"no route for POST {self.path}", "invalid_request_error", None))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send(400, _error("'messages' is a required property (a list of messages)",
                                   "invalid_request_error", None))
            return
        try:
            answer = stub.llm.complete(body)
        except Exception as exc:  # the script failed: report it like a server bug
            self._send(500, _error(f"{type(exc).__name__}: {exc}", "server_error", None))
            return
        if anthropic:
            message = answer if answer.get("type") == "message" else anthropic_message(answer)
            if body.get("stream"):
                self._stream(_anthropic_events(message))
            else:
                self._send(200, message)
        elif body.get("stream"):
            usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
            self._stream(_openai_events(answer, usage=bool(usage)))
        else:
            self._send(200, answer)

    def _stream(self, events: list[tuple[str | None, str]]) -> None:
        """Server-sent events, one write and flush per event, then the connection closes."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for name, data in events:
                head = f"event: {name}\n" if name is not None else ""
                self.wfile.write(f"{head}data: {data}\n\n".encode())
                self.wfile.flush()
            self._answered()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self._answered()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _answered(self) -> None:
        request = getattr(self, "_request", None)
        if request is not None:
            request.answered_at = time.monotonic()


# --- the APIs' shapes ----------------------------------------------------------------------------


def tool_call_reply(*calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    """An OpenAI chat completion asking for tool calls ``(name, arguments)``, for a stub's
    script; ids are derived from the calls, so the same script gives the same ids every run."""
    tool_calls = []
    for i, (name, arguments) in enumerate(calls):
        args = json.dumps(arguments, sort_keys=True)
        digest = hashlib.sha256(f"{i}\x1f{name}\x1f{args}".encode()).hexdigest()[:24]
        tool_calls.append({"id": f"call_{digest}", "type": "function", "function": {"name": name, "arguments": args}})
    return {"id": f"chatcmpl-{hashlib.sha256(json.dumps(tool_calls).encode()).hexdigest()[:24]}",
            "object": "chat.completion", "created": 0, "model": "stub",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": tool_calls},
                         "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def anthropic_message(completion: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic ``message`` saying what an OpenAI chat completion says (text, tool calls)."""
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        content.append({"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),
                        "name": call["function"]["name"], "input": json.loads(call["function"]["arguments"] or "{}")})
    usage = completion.get("usage") or {}
    return {"id": "msg_" + str(completion.get("id", "")).removeprefix("chatcmpl-"), "type": "message",
            "role": "assistant", "model": completion.get("model", "stub"), "content": content,
            "stop_reason": _STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                      "output_tokens": usage.get("completion_tokens", 0)}}


def _pieces(text: str) -> list[str]:
    """Text as a model streams it: word by word, the spaces kept."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]] if text else []


def _openai_events(completion: dict[str, Any], *, usage: bool) -> list[tuple[str | None, str]]:
    base = {"id": completion.get("id", ""), "object": "chat.completion.chunk", "created": completion.get("created", 0),
            "model": completion.get("model", "stub")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, str]:
        return None, json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    choice = completion["choices"][0]
    message = choice.get("message") or {}
    events: list[tuple[str | None, str]] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call["function"]
        events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                             "function": {"name": fn["name"], "arguments": ""}}]}))
        args = fn["arguments"]
        for piece in (args[:len(args) // 2], args[len(args) // 2:]):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    if usage:
        events.append((None, json.dumps({**base, "choices": [], "usage": completion.get("usage")})))
    events.append((None, "[DONE]"))
    return events


def _anthropic_events(message: dict[str, Any]) -> list[tuple[str | None, str]]:
    def event(name: str, data: dict[str, Any]) -> tuple[str, str]:
        return name, json.dumps({"type": name, **data})

    usage = message.get("usage") or {}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}}
    events: list[tuple[str | None, str]] = [event("message_start", {"message": start})]
    for i, block in enumerate(message.get("content") or ()):
        if block["type"] == "text":
            events.append(event("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}}))
            events += [event("content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": piece}})
                       for piece in _pieces(block["text"])]
        else:
            events.append(event("content_block_start", {"index": i, "content_block": {**block, "input": {}}}))
            args = json.dumps(block.get("input") or {})
            for piece in (args[:len(args) // 2], args[len(args) // 2:]):
                events.append(event("content_block_delta",
                                    {"index": i, "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(event("content_block_stop", {"index": i}))
    events.append(event("message_delta", {"delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
                                          "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    events.append(event("message_stop", {}))
    return events
