"""pydantic-ai's model requests as recorded calls of the step: a ``WrapperModel`` around the agent's model.

:class:`RecordedModel` wraps whatever model serves a request (the capability of :mod:`._capability` puts it
around each, per run). Each ``request`` and each ``request_stream`` is one ``llm.call``
(:func:`swarmlog.integrations._recorded.model_call`): the request recorded is what pydantic-ai asks of its
model — the model's name, the messages (pydantic-ai's own JSON of them, less the times and run ids the
framework stamps on each run), the settings, the tools and output modes offered — and the response is the
``ModelResponse`` (its parts, usage, finish reason), as pydantic-ai dumps it. A streamed request also keeps
the stream's events and is served as the same stream (pydantic-ai's ``CompletedStreamedResponse`` with
``replay_events``: the buffered-stream replay its own durable-execution integrations use).

Live, the wrapped model is asked on the live loop — it is never entered or used on the step's loop; on
replay it is not used at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, ModelResponseStreamEvent
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from .._recorded import jsonable, model_call

__all__ = ["RecordedModel"]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_EVENTS: TypeAdapter[list[ModelResponseStreamEvent]] = TypeAdapter(list[ModelResponseStreamEvent])

VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})
"""Fields pydantic-ai stamps on the messages of a run from the clock and fresh ids (uuid7): they differ on
every run of the same program, so the request compared on replay leaves them out (the response keeps its
own: recorded, and served as it was)."""


def messages_json(messages: list[ModelMessage]) -> list[Any]:
    """pydantic-ai's JSON of ``messages``, less :data:`VOLATILE`: what is recorded, compared, and handed on."""
    return _strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


class RecordedModel(WrapperModel):
    """A pydantic-ai model whose every request is recorded in the swarm's log (see the module)."""

    def __init__(self, wrapped: Model, *, ctx: Any) -> None:
        super().__init__(wrapped)
        self.ctx = ctx

    async def __aenter__(self) -> RecordedModel:
        return self  # the wrapped model's resources are the live loop's business, never the step's

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def _request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                 params: ModelRequestParameters, *, stream: bool) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model_name, "messages": messages_json(messages),
                                   "tools": [_tool(t) for t in params.function_tools],
                                   "output_mode": params.output_mode, "stream": stream}
        if params.output_tools:
            request["output_tools"] = [_tool(t) for t in params.output_tools]
        if model_settings:
            request["settings"] = jsonable(dict(model_settings))
        return request

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        wrapped = self.wrapped

        async def live() -> dict[str, Any]:
            response = await wrapped.request(messages, model_settings, model_request_parameters)
            return {"response": _RESPONSE.dump_python(response, mode="json")}

        data = await model_call(self.ctx, model=self.model_name, live=live,
                                request=self._request(messages, model_settings, model_request_parameters,
                                                      stream=False))
        return _RESPONSE.validate_python(data["response"])

    @asynccontextmanager
    async def request_stream(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                             model_request_parameters: ModelRequestParameters,
                             run_context: Any = None) -> AsyncIterator[StreamedResponse]:
        wrapped = self.wrapped

        async def live() -> dict[str, Any]:
            async with wrapped.request_stream(messages, model_settings, model_request_parameters,
                                              run_context) as stream:
                events = [event async for event in stream]
                response = stream.get()
            return {"response": _RESPONSE.dump_python(response, mode="json"),
                    "events": _EVENTS.dump_python(events, mode="json")}

        data = await model_call(self.ctx, model=self.model_name, live=live,
                                request=self._request(messages, model_settings, model_request_parameters,
                                                      stream=True))
        yield CompletedStreamedResponse(_RESPONSE.validate_python(data["response"]),
                                        model_request_parameters=model_request_parameters,
                                        replay_events=_EVENTS.validate_python(data["events"]))


def _tool(tool: Any) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters_json_schema,
            "strict": tool.strict}
