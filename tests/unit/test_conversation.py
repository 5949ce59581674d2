"""A recorded model call reads as a conversation (swarmlog.debug.conversation), whichever API and form."""

from __future__ import annotations

import json

from swarmlog.debug.conversation import conversation
from swarmlog.debug.logview import LoggedEvent
from swarmlog.events import Event
from swarmlog.llm import completion
from swarmlog.log.hashing import canonical


def _exchange(url: str, request: dict, body: str, *, stream: bool = False, status: int = 200,
              headers: list[dict] | None = None) -> dict:
    ctype = "text/event-stream" if stream else "application/json"
    return {"method": "POST", "url": url,
            "request_headers": [{"name": "authorization", "value": "<redacted>"},
                                {"name": "content-type", "value": "application/json"}],
            "request_body": json.dumps(request), "status": status,
            "response_headers": [{"name": "content-type", "value": ctype}, *(headers or [])],
            "response_body": body, "error": None, "attempts": 1}


def _sse(*chunks: dict, done: bool = True, named: bool = False) -> str:
    out = []
    for c in chunks:
        out.append((f"event: {c['type']}\n" if named else "") + f"data: {json.dumps(c)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out)


CHAT_REQUEST = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are a researcher."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}],
}


def test_llm_call_of_openai_chat_shows_model_turns_reply_and_tokens() -> None:
    response = completion(CHAT_REQUEST, "It is 18C and cloudy in Paris.", model="gpt-4o-mini")
    c = conversation("llm.call", {"model": "gpt-4o-mini", "request_json": canonical(CHAT_REQUEST),
                                  "response_json": canonical(response)})
    assert c is not None and c.api == "openai.chat" and c.model == "gpt-4o-mini"
    assert [m.role for m in c.messages] == ["system", "user", "assistant", "tool"]
    assert c.messages[2].tool_calls[0].name == "weather"
    assert c.messages[2].tool_calls[0].arguments == {"city": "Paris"}  # parsed, not an escaped string
    assert c.messages[3].tool_call_id == "call_1" and c.messages[3].text == "18C, cloudy"
    assert c.reply_text == "It is 18C and cloudy in Paris."
    assert c.usage is not None and c.usage.output_tokens == 7
    assert c.tools == ("weather",)
    text = "\n".join(c.lines())
    assert "[tool (result of call_1)]" in text and "→ calls weather({\"city\":\"Paris\"})" in text
    assert "\\\"" not in text  # nothing escaped twice


def test_streamed_chat_completion_is_assembled_into_its_reply_and_tool_calls() -> None:
    body = _sse(
        {"id": "c1", "model": "gpt-4o-mini-2024",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Let me "}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "check."}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_9", "type": "function",
             "function": {"name": "search", "arguments": "{\"q\":"}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "\"kafka\"}"}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}},
    )
    c = conversation("http.exchange", _exchange("http://127.0.0.1:9/v1/chat/completions",
                                                {**CHAT_REQUEST, "stream": True}, body, stream=True,
                                                headers=[{"name": "openai-processing-ms", "value": "412"}]))
    assert c is not None and c.streamed and c.model == "gpt-4o-mini" and c.extra == {"served_by": "gpt-4o-mini-2024"}
    assert c.reply[0].text == "Let me check."
    assert c.reply[0].tool_calls[0].name == "search" and c.reply[0].tool_calls[0].arguments == {"q": "kafka"}
    assert c.stop_reason == "tool_calls"
    assert c.usage is not None and (c.usage.input_tokens, c.usage.output_tokens) == (31, 9)
    assert c.latency_ms == 412.0
    assert c.raw_response == body  # the bytes as recorded stay on it
    assert "streamed" in c.summary() and "31+9 tok" in c.summary()


def test_openai_responses_plain_and_streamed_read_alike() -> None:
    request = {"model": "gpt-4.1", "instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Find Kafka docs"}]},
        {"type": "function_call", "call_id": "fc_1", "name": "search", "arguments": "{\"q\":\"kafka\"}"},
        {"type": "function_call_output", "call_id": "fc_1", "output": "kafka.apache.org"},
    ]}
    response = {"id": "resp_1", "model": "gpt-4.1", "status": "completed", "output": [
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "See kafka.apache.org."}]}],
        "usage": {"input_tokens": 50, "output_tokens": 6, "total_tokens": 56}}
    plain = conversation("http.exchange", _exchange("https://api.openai.com/v1/responses", request,
                                                    json.dumps(response)))
    streamed_body = _sse(
        {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "See "},
        {"type": "response.completed", "response": response}, done=False, named=True)
    streamed = conversation("http.exchange", _exchange("https://api.openai.com/v1/responses",
                                                       {**request, "stream": True}, streamed_body, stream=True))
    for c in (plain, streamed):
        assert c is not None and c.api == "openai.responses"
        assert [m.role for m in c.messages] == ["system", "user", "assistant", "tool"]
        assert c.messages[2].tool_calls[0].arguments == {"q": "kafka"}
        assert c.reply_text == "See kafka.apache.org."
        assert c.usage is not None and c.usage.total == 56
    assert streamed is not None and streamed.streamed


def test_streamed_anthropic_message_assembles_text_and_tool_input() -> None:
    request = {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": "You write.", "stream": True,
               "messages": [{"role": "user", "content": "Write it"},
                            {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "notes",
                                                               "input": {}}]},
                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                                          "content": "three notes"}]}]}
    body = _sse(
        {"type": "message_start", "message": {"model": "claude-sonnet-4-5", "role": "assistant",
                                              "usage": {"input_tokens": 120, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Drafting"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "tu_2",
                                                                      "name": "save", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"t\":"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 22}},
        {"type": "message_stop"}, done=False, named=True)
    c = conversation("http.exchange", _exchange("https://api.anthropic.com/v1/messages", request, body, stream=True))
    assert c is not None and c.api == "anthropic.messages" and c.streamed
    assert [m.role for m in c.messages] == ["system", "user", "assistant", "tool"]
    assert c.messages[3].tool_call_id == "tu_1" and c.messages[3].text == "three notes"
    assert c.reply[0].text == "Drafting" and c.reply[0].tool_calls[0].arguments == {"t": 1}
    assert c.stop_reason == "tool_use" and c.usage is not None and (c.usage.input_tokens, c.usage.output_tokens) == (
        120, 22)


def test_an_error_reply_says_the_status_and_the_apis_message() -> None:
    c = conversation("http.exchange", _exchange("http://h/v1/chat/completions", CHAT_REQUEST,
                                                json.dumps({"error": {"message": "model not found"}}), status=404))
    assert c is not None and c.error == "HTTP 404: model not found" and "ERROR" in c.summary()


def test_other_exchanges_and_unreadable_bodies_are_not_conversations() -> None:
    assert conversation("http.exchange", {**_exchange("http://h/api/weather", {"messages": []}, "{}")}) is None
    assert conversation("http.exchange", {**_exchange("http://h/v1/chat/completions", {}, "{}"),
                                          "request_body": "not json"}) is None
    assert conversation("agent.message", {"kind": "x", "body": {}}) is None
    assert conversation("llm.call", {"model": "m", "request_json": "[1, 2", "response_json": "{}"}) is None


def test_log_line_and_json_carry_the_conversation_not_escaped_json() -> None:
    payload = _exchange("http://127.0.0.1:9/v1/chat/completions", CHAT_REQUEST,
                        json.dumps(completion(CHAT_REQUEST, "Cloudy.", model="gpt-4o-mini")))
    e = LoggedEvent(7, Event(7, "http.exchange", 1, "researcher/3/0", "r", "researcher", None, [3], payload))
    assert "gpt-4o-mini" in e.line(width=120) and "'Cloudy.'" in e.line(width=120)
    doc = e.to_json()
    assert doc["conversation"]["reply"][0]["text"] == "Cloudy."
    assert doc["payload"]["response_body"] == payload["response_body"]  # raw kept
