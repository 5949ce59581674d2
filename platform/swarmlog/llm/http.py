"""Recorded HTTP: an httpx client whose every exchange is an event in the log.

``ctx.http()`` hands a handler an ``httpx2.Client`` (``ctx.http(httpx)``: an
``httpx.Client``) built on a :class:`RecordedTransport`, so any code or SDK
that takes an httpx client talks to the world through the log, unchanged::

    client = openai.OpenAI(api_key=ctx.credential("OPENAI_API_KEY"),  # or anthropic.Anthropic(...)
                           http_client=ctx.http())
    reply = client.chat.completions.create(model=..., messages=[...])

**Live**, each request goes to the network once (inside
:func:`swarmlog.guard.allowed`), transient failures retried here, and the
exchange is appended as an ``http.exchange`` event in the step's transaction;
the handler then gets the response *rebuilt from that record*, so what it sees
live is byte for byte what a replay will serve. **On replay** the recorded
response is served and the network is never touched. A request whose method,
URL or body differs from the recorded one is a :class:`HTTPRequestDiverged`
naming the method, the URL and the first differing part of the body.

What is compared, and why (:mod:`swarmlog.llm.compare`): the method, the URL and
the body (JSON compared as JSON, a multipart body with its random boundary
masked). Headers are recorded, not compared: SDKs put per-attempt values in them
(retry counts, read timeouts, idempotency keys drawn from OS entropy) and the
deployment's credentials. Nor is the scheme, host and port of a request the
official openai or anthropic SDK made: where the model runs is the deployment's
(``OPENAI_BASE_URL``), as its key is; a tool's host stays compared.

**Credentials** never reach the log: the values of credential headers
(``Authorization``, ``x-api-key``, ``api-key``, cookies, anything whose name
says auth/key/token/secret/password/session, and any names you add) and query
parameters (``key``, ``api_key``, ``access_token``, ...) become ``<redacted>``,
and those values — and every key ``ctx.credential()`` handed out — are scrubbed
from everything else recorded (URL, bodies, response headers, error text): a
server that echoes the key it rejected does not put it in the log, the mirror,
a replay token or an error.

**Streams.** A streamed response (server-sent events) is read whole live,
recorded whole, and served as a stream of one chunk per event, live and on
replay alike: SDK stream parsers see the same events either way. The handler
gets the first token only once the last has arrived (a step is one transaction
anyway).

**Retries** happen here, live only (``retries=``, for connection errors,
timeouts and HTTP 408/409/429/5xx, honouring ``Retry-After``); the served
response carries ``x-should-retry: false`` so an SDK does not retry what was
already retried. An exchange that still failed is recorded too (its status,
or its transport error, which replay raises again as the same httpx exception).

What cannot be made deterministic here: ``response.elapsed`` (httpx measures it
with the clock) is not recorded; a handler must not put it in its state.
"""

from __future__ import annotations

import logging
import platform
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from ..errors import ConfigurationError
from ..guard import allowed
from ..log.protocol import HTTP_EXCHANGE
from ..redaction import REDACTED, Redaction, Scrubber, redact_headers, redact_url
from .compare import field_bytes, request_difference
from .errors import HTTPRequestDiverged
from .retry import Attempt, RetryPolicy, retry_after

__all__ = ["EVENT_TYPE", "RecordedHTTP", "httpx_library", "transport_type"]

logger = logging.getLogger(__name__)

EVENT_TYPE = HTTP_EXCHANGE
# Hop-by-hop framing of the received body: the body is recorded decoded and whole, so these
# no longer describe it (and a client would try to gunzip it again).
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _body_field(data: bytes) -> str | bytes | None:
    """Text if the body is UTF-8 without NUL (Postgres' jsonb refuses \\u0000), else bytes."""
    if not data:
        return None
    if b"\x00" not in data:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return data


_host_known = False


def _learn_host() -> None:
    """SDKs describe the host in their headers (``platform.platform()``, which runs ``uname -p``
    the first time, and ``/etc/os-release``); the stdlib caches both. Learn them here, under
    :func:`allowed`, so that the SDK's first request in a handler finds them cached instead of
    starting a process or opening a file (which the guard would rightly refuse)."""
    global _host_known
    if not _host_known:
        with allowed():
            platform.platform()
            try:
                platform.freedesktop_os_release()
            except OSError:
                pass
        _host_known = True


# --- the recorder -----------------------------------------------------------------------------


class _Recorder(Protocol):
    """What a :class:`RecordedHTTP` needs from ``ctx``: one recorded call per exchange."""

    agent: str

    def now(self) -> int: ...

    def _record_io(self, event_type: str, *, live: Callable[[], dict[str, Any]],
                   check: Callable[[dict[str, Any]], None]) -> dict[str, Any]: ...


@dataclass(slots=True)
class _Sent:
    """A request as recorded (redacted) and the parts it is compared by."""

    method: str
    url: str
    headers: list[dict[str, str]]
    body: str | bytes | None
    scrub: Scrubber


_BUILT_IN = Redaction()
"""The built-in credential patterns alone."""


class RecordedHTTP:
    """The library-independent core of recorded HTTP, shared by every transport of one ``ctx``.

    Keyword-only: ``ctx`` (the agent's context), ``library`` (``httpx`` or ``httpx2``, whose
    network transport runs live requests), ``retries``, ``backoff``/``max_backoff`` (seconds,
    full jitter: :class:`~swarmlog.llm.retry.RetryPolicy`), ``redaction``.
    """

    def __init__(self, *, ctx: _Recorder, library: ModuleType, retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 8.0, redaction: Redaction = _BUILT_IN) -> None:
        if retries < 0:
            raise ConfigurationError(f"ctx.http(retries={retries!r}) must be >= 0")
        self.ctx = ctx
        self.library = library
        self.retry = RetryPolicy(retries=retries, backoff=backoff, max_backoff=max_backoff)
        self.redaction = redaction
        self._network: Any = None  # the library's HTTPTransport, made on the first live request
        self._jitter: random.Random | None = None  # made on the first retry, live (inside allowed())
        _learn_host()
        self.live_requests = 0
        """Requests sent to the network by this recorder (retries included): 0 on replay."""

    # -- one exchange ---------------------------------------------------------------------------

    def exchange(self, request: Any) -> Any:
        """Record (live) or serve (replay) one request; return the library's ``Response``."""
        sent = self.sent(request, request.read())
        secret_headers: list[tuple[str, str]] = []
        payload = self.ctx._record_io(EVENT_TYPE, live=lambda: self._live(request, sent, secret_headers),
                                      check=lambda recorded: self._check(recorded, sent))
        return self._serve(payload, request, secret_headers)

    def sent(self, request: Any, body: bytes) -> _Sent:
        """The request as it is recorded and compared: credentials redacted and scrubbed."""
        scrub = Scrubber()
        for secret in getattr(self.ctx, "_secrets", ()):  # what ctx.credential handed out (swarmlog.llm.credentials)
            scrub.keep(secret)
        headers = redact_headers(request.headers.multi_items(), self.redaction, scrub)
        url = redact_url(str(request.url), self.redaction, scrub)
        return _Sent(method=request.method, url=scrub.text(url), headers=headers,
                     body=_body_field(scrub.data(body)), scrub=scrub)

    def _check(self, recorded: dict[str, Any], sent: _Sent) -> None:
        difference = request_difference(recorded, method=sent.method, url=sent.url, headers=sent.headers,
                                        body=sent.body)
        if difference is not None:
            part, was, now, about = difference
            raise HTTPRequestDiverged(offset=self.ctx.now(), agent=self.ctx.agent, method=sent.method, url=sent.url,
                                      part=part, recorded_value=was, replayed_value=now, about=about)

    def _live(self, request: Any, sent: _Sent, secret_headers: list[tuple[str, str]]) -> dict[str, Any]:
        """Send the request (retrying what is worth it); the exchange as recorded. The real values
        of the response's credential headers go to ``secret_headers``, never into the record."""
        lib = self.library
        retry = self.retry

        def attempt(_: int) -> Attempt[tuple[int | None, list[dict[str, str]], bytes, str | None]]:
            """One request's outcome: (status, response headers, body, error); only the last is recorded."""
            self.live_requests += 1
            try:
                received = network.handle_request(request)
                try:
                    # The body decoded (gzip, br) and whole: a stream is recorded whole.
                    response = lib.Response(received.status_code, headers=received.headers,
                                            stream=received.stream, request=request)
                    data = response.read()
                finally:
                    received.close()
            except lib.RequestError as exc:  # no response: unreachable, timed out, undecodable body
                error = f"{type(exc).__name__}: {exc}"
                return Attempt((None, [], b"", error), failure=error, retryable=retry.retryable_error(exc, lib))
            status = response.status_code
            headers = [{"name": k.lower(), "value": v} for k, v in response.headers.multi_items()
                       if k.lower() not in _FRAMING]
            # Any status is an outcome to record; the ones worth retrying are a failure until the last.
            retryable = retry.retryable_status(status)
            return Attempt((status, headers, data, None), failure=f"HTTP {status}" if retryable else None,
                           retryable=retryable, wait=retry_after(response.headers))

        with allowed():  # the one place a handler's HTTP reaches the network
            network = self.network()
            last, attempts = retry.run(attempt, jitter=self._rng, log=logger, what=f"{sent.method} {sent.url}")
        status, response_headers, data, error = last.value
        scrub = sent.scrub
        secret_headers.extend((h["name"], h["value"]) for h in response_headers
                              if self.redaction.secret_header(h["name"]))
        return {
            "method": sent.method, "url": sent.url, "request_headers": sent.headers, "request_body": sent.body,
            "status": status,
            "response_headers": [h if not self.redaction.secret_header(h["name"]) else
                                 {"name": h["name"], "value": REDACTED}
                                 for h in ({"name": h["name"], "value": scrub.text(h["value"])}
                                           for h in response_headers)],
            "response_body": _body_field(scrub.data(data)),
            "error": scrub.text(error) if error is not None else None,
            "attempts": attempts,
        }

    def _rng(self) -> random.Random:
        if self._jitter is None:  # made on the first retry, live (inside allowed())
            self._jitter = random.Random()
        return self._jitter

    def network(self) -> Any:
        """The library's network transport (its connection pool), made once: async steps send
        concurrent requests through it from several threads, which its pool allows."""
        if self._network is None:
            with allowed():
                self._network = self.library.HTTPTransport()
        return self._network

    def _serve(self, payload: dict[str, Any], request: Any, secret_headers: list[tuple[str, str]], *,
               stream: type | None = None) -> Any:
        """The library's Response rebuilt from the record: the same live and on replay, but for
        the values of credential headers (a session cookie), which live are the real ones so that
        the client's cookie jar keeps working; on replay they read ``<redacted>``."""
        lib = self.library
        error = payload["error"]
        if payload["status"] is None:
            name, _, message = (error or "TransportError: no response recorded").partition(": ")
            cls = getattr(lib, name, None)
            if not (isinstance(cls, type) and issubclass(cls, lib.RequestError)):
                cls = lib.TransportError
            raise cls(message, request=request)
        data = field_bytes(payload["response_body"])
        headers = [(h["name"], h["value"]) for h in payload["response_headers"]
                   if not (secret_headers and h["value"] == REDACTED)]
        headers += secret_headers
        # Retried here already (live); an SDK must not retry the recorded outcome again.
        headers.append(("x-should-retry", "false"))
        sse = any(n == "content-type" and v.startswith("text/event-stream") for n, v in headers)
        if not sse:
            headers.append(("content-length", str(len(data))))
        return lib.Response(payload["status"], headers=headers, request=request,
                            stream=(stream or _stream_type(lib))(_sse_chunks(data) if sse else [data]))


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def _sse_chunks(data: bytes) -> list[bytes]:
    """A server-sent-event body split after each event, as a server sends it."""
    chunks, start = [], 0
    for m in _EVENT_END.finditer(data):
        chunks.append(data[start:m.end()])
        start = m.end()
    if start < len(data):
        chunks.append(data[start:])
    return chunks


# --- the transports, one per httpx library ----------------------------------------------------

_types: dict[str, tuple[type, type]] = {}


def _make_types(lib: ModuleType) -> tuple[type, type]:
    found = _types.get(lib.__name__)
    if found is not None:
        return found

    class RecordedStream(lib.SyncByteStream):  # type: ignore[name-defined]
        __slots__ = ("chunks",)

        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def __iter__(self) -> Iterator[bytes]:
            yield from self.chunks

    class RecordedTransport(lib.BaseTransport):  # type: ignore[name-defined]
        """An httpx transport whose every request is recorded in the log (see ``swarmlog.llm.http``)."""

        def __init__(self, recorder: RecordedHTTP) -> None:
            self.recorder = recorder

        def handle_request(self, request: Any) -> Any:
            return self.recorder.exchange(request)

        def close(self) -> None:
            pass  # the network transport is the context's, kept across steps for its pool

    RecordedTransport.__module__ = RecordedStream.__module__ = __name__
    RecordedTransport.__qualname__ = f"RecordedTransport[{lib.__name__}]"
    _types[lib.__name__] = (RecordedTransport, RecordedStream)
    return RecordedTransport, RecordedStream


def transport_type(lib: ModuleType) -> type:
    """The recorded transport class for ``httpx`` or ``httpx2``."""
    return _make_types(lib)[0]


def _stream_type(lib: ModuleType) -> type:
    return _make_types(lib)[1]


def httpx_library(which: ModuleType | str | None) -> ModuleType:
    """``httpx2`` (the default: both official LLM SDKs are built on it) or ``httpx``."""
    name = which if isinstance(which, str) else (which.__name__ if which is not None else "httpx2")
    if name not in ("httpx", "httpx2"):
        raise ConfigurationError(f"ctx.http({name!r}): recorded HTTP speaks httpx or httpx2; pass one of them")
    try:
        return __import__(name)
    except ImportError:
        raise ConfigurationError(f"ctx.http() needs the {name} package: pip install {name} "
                                 f"(or swarmlog[sdks])") from None
