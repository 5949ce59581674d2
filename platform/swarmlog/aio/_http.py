"""Recorded HTTP for async steps: ``ctx.async_http()``, an ``httpx.AsyncClient`` whose every exchange is recorded.

The same recorder as ``ctx.http()`` (:class:`swarmlog.llm.http.RecordedHTTP`: redaction, retries
inside the one recorded call, streams read and recorded whole, a divergence naming the method, the
URL and the first differing part), behind httpx's *async* transport interface, so that
``openai.AsyncOpenAI(http_client=ctx.async_http())`` and
``anthropic.AsyncAnthropic(http_client=ctx.async_http())`` work unchanged.

What is different is only when: each request is one concurrent recorded call of the step
(:mod:`._calls`). Live, its network I/O runs on a worker thread through the library's own
(sync) connection pool, so the requests of ``asyncio.gather`` overlap on the wire; its
``http.exchange`` is written when its response is delivered to the coroutine. The response the
coroutine gets is rebuilt from the record, live and on replay alike; a stream is served as the
same stream (an ``AsyncByteStream`` of one chunk per server-sent event).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from ..llm.http import EVENT_TYPE, RecordedHTTP

__all__ = ["async_transport_type"]

_types: dict[str, tuple[type, type]] = {}


async def exchange(recorder: RecordedHTTP, request: Any) -> Any:
    """One request as a concurrent recorded call; the library's ``Response`` once delivered."""
    body = await request.aread()  # the body whole: it is recorded, and a worker thread sends it
    sent = recorder.sent(request, body)
    ctx: Any = recorder.ctx  # the Context (swarmlog.llm.http knows it only as a recorder)
    secret_headers: list[tuple[str, str]] = []
    loop = ctx._step_loop()
    if loop.calls.mode == "live":
        recorder.network()  # made here, once, not by two workers at the same time
    payload = await loop.calls.issue(
        event_type=EVENT_TYPE, what=f"{sent.method} {sent.url}",
        work=lambda: _live(recorder, request, sent, secret_headers),
        check=lambda recorded: recorder._check(recorded, sent))
    return recorder._serve(payload, request, secret_headers, stream=_make_types(recorder.library)[1])


def _live(recorder: RecordedHTTP, request: Any, sent: Any, secret_headers: list[tuple[str, str]]) -> dict[str, Any]:
    run = getattr(recorder.ctx, "run_effect", None)
    if run is not None:  # the simulator: it answers what it models, and refuses a raw exchange
        return run(EVENT_TYPE, lambda: recorder._live(request, sent, secret_headers), ())
    return recorder._live(request, sent, secret_headers)


class _Chunks:
    __slots__ = ("_it",)

    def __init__(self, chunks: list[bytes]) -> None:
        self._it = iter(chunks)

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        for chunk in self._it:
            return chunk
        raise StopAsyncIteration


def _make_types(lib: ModuleType) -> tuple[type, type]:
    found = _types.get(lib.__name__)
    if found is not None:
        return found

    class AsyncRecordedStream(lib.AsyncByteStream):  # type: ignore[name-defined]
        __slots__ = ("chunks",)

        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def __aiter__(self) -> AsyncIterator[bytes]:
            # An iterator, not an async generator: a consumer that stops early leaves no generator
            # for the loop to finalize (see StepLoop._settle_finalizers).
            return _Chunks(self.chunks)

    class AsyncRecordedTransport(lib.AsyncBaseTransport):  # type: ignore[name-defined]
        """An httpx async transport whose every request is a recorded call of the step (``swarmlog.aio``)."""

        def __init__(self, recorder: RecordedHTTP) -> None:
            self.recorder = recorder

        async def handle_async_request(self, request: Any) -> Any:
            return await exchange(self.recorder, request)

        async def aclose(self) -> None:
            pass  # the network transport is the context's, kept across steps for its pool

    AsyncRecordedTransport.__module__ = AsyncRecordedStream.__module__ = __name__
    AsyncRecordedTransport.__qualname__ = f"AsyncRecordedTransport[{lib.__name__}]"
    _types[lib.__name__] = (AsyncRecordedTransport, AsyncRecordedStream)
    return AsyncRecordedTransport, AsyncRecordedStream


def async_transport_type(lib: ModuleType) -> type:
    """The recorded async transport class for ``httpx`` or ``httpx2``."""
    return _make_types(lib)[0]
