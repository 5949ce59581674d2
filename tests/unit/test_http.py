"""Recorded HTTP without the broker: redaction, comparison, stream framing, the transport's live
retries and recorded failures, and what the guard lets through.

The transport tests record into a list (the pure logic of one exchange); everything the log does
with the records is tested on the real broker in test_http_swarm.py.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import httpx2
import pytest

from swarmlog.guard import ForbiddenCall, guarded
from swarmlog.llm.compare import _first_difference, comparable_body, tool_result_named
from swarmlog.llm.http import (
    HTTPRequestDiverged,
    RecordedHTTP,
    _body_field,
    _sse_chunks,
    transport_type,
)
from swarmlog.redaction import REDACTED, Redaction, Scrubber, redact_headers, redact_url
from swarmlog.testing import StubServer

KEY = "sk-unit-SECRET-0123456789"


class ListRecorder:
    """A stand-in for ctx: records payloads in a list; with ``replay`` set, serves them back."""

    agent = "a"

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.replay: list[dict[str, Any]] | None = None

    def now(self) -> int:
        return 7

    def _record_io(self, event_type, *, live, check):
        if self.replay is None:
            payload = live()
            self.records.append(payload)
            return payload
        payload = self.replay.pop(0)
        check(payload)
        return payload


def client(recorder: ListRecorder, lib=httpx2, **options: Any) -> tuple[Any, RecordedHTTP]:
    core = RecordedHTTP(ctx=recorder, library=lib, backoff=0.01, max_backoff=0.02, **options)
    return lib.Client(transport=transport_type(lib)(core)), core


# --- redaction -------------------------------------------------------------------------------


def test_credential_headers_are_redacted_and_their_values_scrubbed_everywhere():
    scrub = Scrubber()
    headers = redact_headers([("Authorization", f"Bearer {KEY}"), ("x-api-key", "k" * 20), ("api-key", "a" * 20),
                               ("Cookie", "session=abcdefghijkl"), ("X-Portkey-Api-Key", "p" * 20),
                               ("X-My-Gateway", "g" * 20), ("Content-Type", "application/json")],
                              Redaction(headers=frozenset({"x-my-gateway"})), scrub)
    assert [h["value"] for h in headers] == [REDACTED] * 6 + ["application/json"]
    echoed = f"Incorrect API key provided: {KEY}; you sent Bearer {KEY}"
    assert KEY not in scrub.text(echoed) and scrub.text(echoed).count(REDACTED) == 2
    assert KEY.encode() not in scrub.data(echoed.encode())


def test_credentials_in_the_url_are_redacted():
    scrub = Scrubber()
    url = redact_url(f"https://user:hunter2hunter2@api.example.com/v1/x?key={KEY}&model=m&access_token=tok-123456789",
                      Redaction(), scrub)
    assert KEY not in url and "hunter2hunter2" not in url and "tok-123456789" not in url
    assert "model=m" in url and url.startswith(f"https://{REDACTED}@api.example.com/v1/x?")
    assert KEY in scrub.secrets and "hunter2hunter2" in scrub.secrets


def test_bodies_jsonb_cannot_hold_are_recorded_as_bytes():
    assert _body_field(b"") is None
    assert _body_field(b'{"a": "\xc3\xbc"}') == '{"a": "\u00fc"}'
    assert _body_field(b"a\x00b") == b"a\x00b"  # jsonb refuses \u0000
    assert _body_field(b"\xff\xfe") == b"\xff\xfe"


# --- comparing a replayed request ------------------------------------------------------------


def test_the_first_difference_is_a_json_path_into_the_body():
    was = {"model": "m", "messages": [{"role": "user", "content": "capital of France?"}], "temperature": 0.7}
    assert _first_difference(was, dict(reversed(list(was.items()))), "body") is None  # key order is not content
    now = {**was, "messages": [{"role": "user", "content": "capital of Spain?"}]}
    assert _first_difference(was, now, "body") == ("body.messages[0].content", "capital of France?",
                                                    "capital of Spain?")
    assert _first_difference(was, {**was, "temperature": 0}, "body") == ("body.temperature", 0.7, 0)
    assert _first_difference(was, {**was, "tools": []}, "body") == ("body.tools", "<absent>", [])
    assert _first_difference([1, 2], [1, 2, 3], "body") == ("body.length", 2, 3)
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    path, a, b = _first_difference(long_a, long_b, "body")
    assert path == "body[300:]" and a.endswith("a") and b.endswith("b") and len(a) <= 200


def test_a_multipart_body_compares_without_its_random_boundary():
    def body(boundary: str) -> tuple[bytes, list[dict[str, str]]]:
        data = f"--{boundary}\r\nContent-Disposition: form-data; name=f\r\n\r\nhi\r\n--{boundary}--\r\n".encode()
        return data, [{"name": "content-type", "value": f"multipart/form-data; boundary={boundary}"}]

    (a, ha), (b, hb) = body("0f1e2d3c4b5a"), body("99887766aabb")
    assert a != b and comparable_body(a, ha) == comparable_body(b, hb)


def test_a_recorded_event_stream_is_served_one_event_per_chunk():
    data = b"data: {\"a\": 1}\n\nevent: x\ndata: 2\n\ndata: [DONE]\n\n"
    assert _sse_chunks(data) == [b"data: {\"a\": 1}\n\n", b"event: x\ndata: 2\n\n", b"data: [DONE]\n\n"]
    assert b"".join(_sse_chunks(b"data: 1\r\n\r\ndata: 2")) == b"data: 1\r\n\r\ndata: 2"


# --- the transport ---------------------------------------------------------------------------


def test_transient_failures_are_retried_live_inside_one_recorded_exchange():
    import openai
    with StubServer(lambda request: "fine") as server:
        server.fail_next(2, status=503)
        recorder = ListRecorder()
        http, core = client(recorder, retries=2)
        sdk = openai.OpenAI(api_key=KEY, base_url=server.base_url, http_client=http)
        reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "fine"
        assert server.request_count == 3 and core.live_requests == 3
    [record] = recorder.records
    assert (record["status"], record["attempts"]) == (200, 3)


def test_a_failure_left_after_retries_is_recorded_and_the_sdk_does_not_retry_it_again():
    import openai
    with StubServer(lambda request: "fine") as server:
        server.fail_next(10, status=503, message="overloaded")
        recorder = ListRecorder()
        http, _ = client(recorder, retries=1)
        sdk = openai.OpenAI(api_key=KEY, base_url=server.base_url, http_client=http)  # max_retries=2 by default
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert server.request_count == 2  # the transport's two attempts; the SDK's retries never happened
    [record] = recorder.records
    assert (record["status"], record["attempts"]) == (503, 2)
    # ...and replays as the same error.
    recorder.replay = list(recorder.records)
    http, core = client(recorder, retries=1)
    sdk = openai.OpenAI(api_key=KEY, base_url=server.base_url, http_client=http)
    with pytest.raises(openai.InternalServerError, match="overloaded"):
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert core.live_requests == 0


@pytest.mark.parametrize("lib", [httpx, httpx2])
def test_a_connection_failure_is_recorded_and_replayed_as_the_same_exception(lib):
    with StubServer() as server:
        url = f"{server.base_url}/chat/completions"
    recorder = ListRecorder()
    http, _ = client(recorder, lib=lib, retries=0)
    with pytest.raises(lib.ConnectError):
        http.post(url, json={"messages": []})
    [record] = recorder.records
    assert record["status"] is None and record["error"].startswith("ConnectError: ")
    recorder.replay = list(recorder.records)
    http, core = client(recorder, lib=lib, retries=0)
    with pytest.raises(lib.ConnectError):
        http.post(url, json={"messages": []})
    assert core.live_requests == 0


def test_a_different_request_on_replay_names_method_url_and_part():
    with StubServer() as server:
        recorder = ListRecorder()
        http, _ = client(recorder)
        http.post(f"{server.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "a"}]},
                  headers={"Authorization": f"Bearer {KEY}"})
    recorder.replay = list(recorder.records)
    http, _ = client(recorder)
    with pytest.raises(HTTPRequestDiverged) as caught:
        http.post(f"{server.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "b"}]},
                  headers={"Authorization": f"Bearer {KEY}"})
    err = caught.value
    assert (err.method, err.url, err.part) == ("POST", f"{server.base_url}/chat/completions",
                                               "body.messages[0].content")
    assert (err.recorded_value, err.replayed_value, err.offset, err.agent) == ("a", "b", 7, "a")
    assert KEY not in str(err)
    recorder.replay = list(recorder.records)
    with pytest.raises(HTTPRequestDiverged, match="at url"):
        http.post(f"{server.base_url}/completions", json={"messages": [{"role": "user", "content": "a"}]})


# --- the guard -----------------------------------------------------------------------------------


def test_the_sdk_runs_in_a_handler_on_ctx_http_but_a_raw_socket_is_still_forbidden():
    import openai
    with StubServer() as server:
        http, _ = client(ListRecorder())
        with guarded(agent="a", offset=1):
            sdk = openai.OpenAI(api_key=KEY, base_url=server.base_url, http_client=http)
            reply = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "echo: hi"
        with pytest.raises(ForbiddenCall, match="talks to the network.*ctx.http"):
            with guarded(agent="a", offset=2):
                socket.create_connection(("127.0.0.1", server.port), timeout=1)


def test_an_sdk_client_not_built_on_ctx_http_fails_at_its_first_connect():
    import openai
    with StubServer() as server:
        with pytest.raises(ForbiddenCall, match="socket"):
            with guarded(agent="a", offset=1):
                openai.OpenAI(api_key=KEY, base_url=server.base_url, max_retries=0).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(ForbiddenCall, match="socket"):
            with guarded(agent="a", offset=1):
                httpx2.get(server.base_url)
        assert server.request_count == 0


def test_a_handler_reading_the_clock_is_still_caught_beside_a_trusted_sdk():
    import time
    import uuid

    import openai

    with pytest.raises(ForbiddenCall, match="time.time"):
        with guarded(agent="a", offset=1):
            openai.OpenAI(api_key=KEY, base_url="http://127.0.0.1:1/v1")
            time.time()
    with pytest.raises(ForbiddenCall, match="uuid.uuid4"):
        with guarded(agent="a", offset=1):
            uuid.uuid4()


def test_a_compressed_body_is_recorded_decoded_and_a_session_cookie_stays_out_of_the_log():
    import gzip

    def network(request):
        return httpx2.Response(200, content=gzip.compress(b'{"ok": true}'),
                               headers={"content-encoding": "gzip", "content-type": "application/json",
                                        "set-cookie": "session=s3cr3t-cookie-value; Path=/"})

    recorder = ListRecorder()
    http, core = client(recorder)
    core._network = httpx2.MockTransport(network)  # the network's side of one exchange
    live = http.get("https://api.example.com/v1/models")
    assert live.json() == {"ok": True}
    assert http.cookies.get("session") == "s3cr3t-cookie-value"  # live, the jar keeps working
    [record] = recorder.records
    assert record["response_body"] == '{"ok": true}'
    names = [h["name"] for h in record["response_headers"]]
    assert "content-encoding" not in names and "content-length" not in names
    assert {"name": "set-cookie", "value": REDACTED} in record["response_headers"]
    assert "s3cr3t" not in repr(record)
    recorder.replay = list(recorder.records)
    http, core = client(recorder)
    replayed = http.get("https://api.example.com/v1/models")
    assert replayed.json() == {"ok": True} and core.live_requests == 0


def test_swarm_llm_takes_either_sdk_and_refuses_what_it_cannot_record():
    import anthropic
    import openai

    from swarmlog import Swarm
    from swarmlog.errors import ConfigurationError
    from swarmlog.llm.sdk import SDKChat

    with StubServer(lambda request: "hi there") as server:
        claude = Swarm(name="s", agents=list, llm=anthropic.Anthropic(api_key=KEY, base_url=server.anthropic_base_url))
        assert isinstance(claude.llm, SDKChat) and claude.llm.api == "messages"
        reply = claude.llm.complete({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})
        assert reply["type"] == "message" and reply["content"] == [{"type": "text", "text": "hi there"}]
        gpt = Swarm(name="s", agents=list, llm=openai.OpenAI(api_key=KEY, base_url=server.base_url)).llm
        with pytest.raises(ConfigurationError, match="ctx.http"):
            gpt.complete({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        assert server.request_count == 1
    with pytest.raises(ConfigurationError, match="complete"):
        Swarm(name="s", agents=list, llm=object())


def test_a_body_that_cannot_be_decoded_is_recorded_as_a_failure_and_replayed_as_one():
    recorder = ListRecorder()
    http, core = client(recorder)
    core._network = httpx2.MockTransport(lambda request: httpx2.Response(
        200, content=b"not gzip at all", headers={"content-encoding": "gzip"}))
    with pytest.raises(httpx2.DecodingError):
        http.get("https://api.example.com/v1/models")
    [record] = recorder.records
    assert record["status"] is None and record["error"].startswith("DecodingError: ")
    recorder.replay = list(recorder.records)
    http, core = client(recorder)
    with pytest.raises(httpx2.DecodingError):
        http.get("https://api.example.com/v1/models")
    assert core.live_requests == 0


@pytest.mark.parametrize(("body", "part", "named"), [
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "word_count"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "4"}]},
     "body.messages[2].content", "the result of tool 'word_count' (call c1)"),
    ({"input": [{"type": "function_call", "call_id": "c2", "name": "fetch_page", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c2", "output": "page"}]},
     "body.input[1].output", "the result of tool 'fetch_page' (call c2)"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t3", "name": "get_weather"}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3", "content": "sunny"}]}]},
     "body.messages[1].content[0].content", "the result of tool 'get_weather' (call t3)"),
    ({"messages": [{"role": "user", "content": "q"}]}, "body.messages[0].content", None),
])
def test_a_differing_tool_result_in_a_model_request_is_named_by_its_tool(body, part, named):

    assert tool_result_named(body, part) == named


# --- where a request goes: an LLM SDK's host is the deployment's, a tool's is the program's --------------


def test_an_llm_sdks_request_replays_at_another_host_but_not_at_another_path():
    import anthropic
    import openai

    ask = [{"role": "user", "content": "hi"}]
    with StubServer() as server:
        recorder = ListRecorder()
        http, _ = client(recorder)
        openai.OpenAI(api_key=KEY, base_url=server.base_url, http_client=http).chat.completions.create(
            model="m", messages=ask)
        anthropic.Anthropic(api_key=KEY, base_url=server.anthropic_base_url, http_client=http).messages.create(
            model="m", max_tokens=8, messages=ask)
    assert [r["url"] for r in recorder.records] == [f"{server.base_url}/chat/completions",
                                                    f"{server.anthropic_base_url}/v1/messages"]
    # Replayed where each SDK goes by default (no OPENAI_BASE_URL, no ANTHROPIC_BASE_URL): served.
    recorder.replay = list(recorder.records)
    http, core = client(recorder)
    gpt = openai.OpenAI(api_key="placeholder-key", http_client=http).chat.completions.create(model="m", messages=ask)
    claude = anthropic.Anthropic(api_key="placeholder-key", http_client=http).messages.create(
        model="m", max_tokens=8, messages=ask)
    assert (gpt.choices[0].message.content, claude.content[0].text) == ("echo: hi", "echo: hi")
    assert core.live_requests == 0
    # Another path is another API, whatever the host: a divergence, saying what may differ and what not.
    recorder.replay = list(recorder.records)
    with pytest.raises(HTTPRequestDiverged) as caught:
        openai.OpenAI(api_key="placeholder-key", base_url="https://gateway.example/openai/v1", http_client=http,
                      max_retries=0).chat.completions.create(model="m", messages=ask)
    err = caught.value
    assert (err.part, err.recorded_value, err.replayed_value) == (
        "url", f"{server.base_url}/chat/completions", "https://gateway.example/openai/v1/chat/completions")
    assert "host may differ on replay, not its path" in str(err) and "OPENAI_BASE_URL" in str(err)


def test_a_tools_request_at_another_host_is_a_divergence_even_beside_an_sdk():
    with StubServer(routes={"/pages/kafka": lambda request: "a log"}) as server:
        recorder = ListRecorder()
        http, _ = client(recorder, lib=httpx)
        assert http.get(f"http://127.0.0.1:{server.port}/pages/kafka").json() == "a log"
    recorder.replay = list(recorder.records)
    http, _ = client(recorder, lib=httpx)
    with pytest.raises(HTTPRequestDiverged, match="at url") as caught:
        http.get("http://localhost:9/pages/kafka")
    assert caught.value.about is None
    # A tool that dresses as an SDK on one side only is still compared whole.
    recorder.replay = list(recorder.records)
    with pytest.raises(HTTPRequestDiverged, match="at url"):
        http.get("http://localhost:9/pages/kafka", headers={"User-Agent": "OpenAI/Python 3.63.0"})
