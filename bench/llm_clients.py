"""LLM clients: swarmlog's own ``OpenAIChat`` beside the official ``openai`` SDK, per call, against the
loopback stub server (``swarmlog.testing.StubServer``), all in one process with repetitions interleaved.

What each is timed doing, ``CALLS`` chat completions in a row (one connection per call: the stub
speaks HTTP/1.0, the same for every client):

* ``llm.openai_chat``: ``OpenAIChat.complete(request)`` — what ``ctx.llm`` calls live.
* ``llm.sdk_chat``: ``Swarm(llm=openai.OpenAI(...))``'s adapter, ``SDKChat.complete(request)``
  (``chat.completions.create(**request)`` and ``to_dict``) — the same place in ``ctx.llm``.
* ``llm.openai_sdk_ctx_http``: ``openai.OpenAI(http_client=<recorded httpx2 client>)`` inside
  ``guarded()``, as in a handler: the SDK, the recorded transport's redaction and record
  building, and the determinism guard's profile hook (appending to Kafka is not included: it is
  the same ``_output`` for every recorded call).
* ``llm.raw_httpx2``: ``httpx2.Client.post`` and ``.json()``: the floor, no client logic.

Plus each client's import time in a fresh interpreter (median of 5), a cost every agent process
pays once. The model's latency (seconds, for a real one) dwarfs all of these; the numbers say
what the client itself adds.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, interleave, log, reps, row, timed

CALLS = env_int("BENCH_LLM_CALLS", 300)
REQUEST: dict[str, Any] = {"model": "stub-1", "temperature": 0.2,
                           "messages": [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "capital of France?"}]}


class _ListRecorder:
    """ctx's recording seam, into a list (the Kafka append is outside what is compared here)."""

    agent = "bench"

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def now(self) -> int:
        return 0

    def _record_io(self, event_type: str, *, live: Any, check: Any) -> dict[str, Any]:
        payload = live()
        self.records.append(payload)
        return payload


def import_seconds(module: str, samples: int = 5) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
           for _ in range(samples)]
    return round(statistics.median(out), 4)


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    import httpx2
    import openai

    from swarmlog.guard import guarded
    from swarmlog.llm import OpenAIChat
    from swarmlog.llm.http import RecordedHTTP, transport_type
    from swarmlog.llm.sdk import SDKChat
    from swarmlog.testing import StubServer

    own, sdk, sdk_http, raw = (Run("llm.openai_chat", CALLS), Run("llm.sdk_chat", CALLS),
                               Run("llm.openai_sdk_ctx_http", CALLS), Run("llm.raw_httpx2", CALLS))
    with StubServer(lambda request: "Paris") as server:
        chat = OpenAIChat(base_url=server.base_url, api_key="sk-bench", max_retries=0)
        adapter = SDKChat(openai.OpenAI(api_key="sk-bench", base_url=server.base_url, max_retries=0))
        recorded = httpx2.Client(transport=transport_type(httpx2)(
            RecordedHTTP(ctx=_ListRecorder(), library=httpx2, retries=0)))
        in_handler = openai.OpenAI(api_key="sk-bench", base_url=server.base_url, http_client=recorded, max_retries=0)
        plain = httpx2.Client(headers={"Authorization": "Bearer sk-bench"})
        url = f"{server.base_url}/chat/completions"

        def own_calls() -> None:
            for _ in range(CALLS):
                chat.complete(REQUEST)

        def sdk_calls() -> None:
            for _ in range(CALLS):
                adapter.complete(REQUEST)

        def sdk_http_calls() -> None:
            for _ in range(CALLS):
                with guarded(agent="bench", offset=0):
                    in_handler.chat.completions.create(**REQUEST)

        def raw_calls() -> None:
            for _ in range(CALLS):
                plain.post(url, json=REQUEST).json()

        for fn in (own_calls, sdk_calls, sdk_http_calls, raw_calls):  # warm up connections and caches
            fn()

        def measure(r: int, which: Run, fn: Any) -> None:
            seconds, _ = timed(fn)
            which.add(seconds)
            log(f"{which.name} rep {r}: {CALLS / seconds:,.0f} calls/s")

        interleave(reps(5), lambda r: measure(r, own, own_calls), lambda r: measure(r, sdk, sdk_calls),
                   lambda r: measure(r, sdk_http, sdk_http_calls), lambda r: measure(r, raw, raw_calls))
    imports = {"import_s_httpx": import_seconds("httpx"), "import_s_swarmlog_llm": import_seconds("swarmlog.llm"),
               "import_s_openai": import_seconds("openai"), "import_s_anthropic": import_seconds("anthropic")}
    per_call_us = {r.name: round(r.seconds / CALLS * 1e6, 1) for r in (own, sdk, sdk_http, raw)}
    return [row(sdk, own, per_call_us=per_call_us, **imports), row(sdk_http, own), row(raw, own)]
