"""The OpenAI Agents SDK's model calls as recorded calls of the step: a ``ModelProvider`` for ``RunConfig``.

:class:`RecordedProvider` is given to the SDK per run (``RunConfig(model_provider=...)``, never a process
global: agents of one ``swarmlog run`` are threads) and hands out a :class:`RecordedModel` for each model
name an SDK agent uses. Each ``get_response`` and each ``stream_response`` is one ``llm.call``
(:func:`swarmlog.integrations._recorded.model_call`):

* the request recorded is what the SDK asks of its model, in the SDK's own (Responses API) shapes: the
  model, the agent's instructions, the input items, the tools and handoffs offered, the output schema, the
  model settings, and whether it streams;
* the response recorded is what the model answered: the output items (messages, tool calls, handoff
  calls), the usage, the response id; a streamed call also keeps every stream event, and is served as the
  same stream, event by event, live and on replay.

Live, the SDK's real model (from the live provider: ``OpenAIProvider()`` unless given another) is asked on
the live loop; on replay nothing of it is built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar, cast

from agents import Handoff, Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.tool import FunctionTool
from pydantic import TypeAdapter

from .._recorded import jsonable, model_call

__all__ = ["RecordedModel", "RecordedProvider"]

# The SDK's unions (annotated, discriminated by "type"): cast, as mypy reads a union as a special form, not a type.
_OUTPUT: TypeAdapter[Any] = TypeAdapter(cast(Any, TResponseOutputItem))
_EVENT: TypeAdapter[Any] = TypeAdapter(cast(Any, TResponseStreamEvent))
_USAGE: TypeAdapter[Usage] = TypeAdapter(Usage)


class RecordedProvider(ModelProvider):
    """A ``ModelProvider`` whose every model call is recorded in the swarm's log (see the module).

    ``ctx`` is the step's; ``live`` the provider the live calls go to — built once, where the program builds
    its clients (``OpenAIProvider(base_url=..., use_responses=False)`` for a chat-completions endpoint; by
    default ``OpenAIProvider()``, which reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` of the live
    process). It is only used live: replay builds none of it.
    """

    _default_live: ClassVar[ModelProvider | None] = None

    def __init__(self, ctx: Any, *, live: ModelProvider | None = None) -> None:
        self.ctx = ctx
        self.live = live

    def live_provider(self) -> ModelProvider:
        if self.live is not None:
            return self.live
        found = RecordedProvider._default_live
        if found is None:
            from agents import OpenAIProvider

            # One for the process, like the SDK's own default client: its connections are kept on the live loop.
            found = RecordedProvider._default_live = OpenAIProvider()
        return found

    def get_model(self, model_name: str | None) -> Model:
        if model_name is None:
            from agents.models import get_default_model

            model_name = get_default_model()  # OPENAI_DEFAULT_MODEL: recorded in the request, so compared
        return RecordedModel(model_name, provider=self)


class RecordedModel(Model):
    """One model name of a :class:`RecordedProvider`: its calls recorded, live and replayed (see the module)."""

    def __init__(self, name: str, *, provider: RecordedProvider) -> None:
        self.name = name
        self.provider = provider

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],  # noqa: A002
                           model_settings: ModelSettings, tools: list[Tool],
                           output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
                           tracing: ModelTracing, *, previous_response_id: str | None = None,
                           conversation_id: str | None = None, prompt: Any = None) -> ModelResponse:
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        extra = {"previous_response_id": previous_response_id, "conversation_id": conversation_id, "prompt": prompt}

        async def live() -> dict[str, Any]:
            model = self.provider.live_provider().get_model(self.name)
            return _response_json(await model.get_response(*args, **extra))

        data = await model_call(self.provider.ctx, model=self.name, request=_request(self.name, *args, **extra),
                                live=live)
        return _model_response(data)

    def stream_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],  # noqa: A002
                        model_settings: ModelSettings, tools: list[Tool], output_schema: AgentOutputSchemaBase | None,
                        handoffs: list[Handoff], tracing: ModelTracing, *, previous_response_id: str | None = None,
                        conversation_id: str | None = None, prompt: Any = None) -> AsyncIterator[TResponseStreamEvent]:
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        extra = {"previous_response_id": previous_response_id, "conversation_id": conversation_id, "prompt": prompt}

        async def live() -> dict[str, Any]:
            model = self.provider.live_provider().get_model(self.name)
            events = [event async for event in model.stream_response(*args, **extra)]
            return _stream_json(events)

        return _Stream(self, _request(self.name, *args, stream=True, **extra), live)


class _Stream:
    """A recorded stream served as the same stream: the call is made (or its record read) at the first event.
    An iterator, not an async generator: a consumer that stops early leaves nothing for the step's loop to
    finalize."""

    def __init__(self, model: RecordedModel, request: dict[str, Any], live: Any) -> None:
        self.model, self.request, self.live = model, request, live
        self.events: Any = None

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> TResponseStreamEvent:
        if self.events is None:
            data = await model_call(self.model.provider.ctx, model=self.model.name, request=self.request,
                                    live=self.live)
            self.events = iter(data["events"])
        for event in self.events:
            return _EVENT.validate_python(event)
        raise StopAsyncIteration


def _request(name: str, system_instructions: str | None, input: Any, model_settings: ModelSettings,  # noqa: A002
             tools: list[Tool], output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
             tracing: ModelTracing, *, stream: bool = False, previous_response_id: str | None = None,
             conversation_id: str | None = None, prompt: Any = None) -> dict[str, Any]:
    """What the SDK asks of its model, as readable JSON (the Responses API's shapes: ``swarmlog show`` reads it
    as a conversation). Tracing is left out: it changes what the SDK traces, not what the model is asked."""
    request: dict[str, Any] = {"model": name, "instructions": system_instructions, "input": jsonable(input),
                               "tools": [_tool(t) for t in tools], "stream": stream}
    if handoffs:
        request["handoffs"] = [{"name": h.tool_name, "description": h.tool_description, "agent": h.agent_name,
                                "parameters": h.input_json_schema} for h in handoffs]
    if output_schema is not None and not output_schema.is_plain_text():
        request["output_schema"] = {"name": output_schema.name(), "schema": output_schema.json_schema()}
    settings = {k: v for k, v in model_settings.to_json_dict().items() if v is not None}
    if settings:
        request["model_settings"] = settings
    for key, value in (("previous_response_id", previous_response_id), ("conversation_id", conversation_id),
                       ("prompt", prompt)):
        if value is not None:
            request[key] = jsonable(value)
    return request


def _tool(tool: Tool) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        return {"type": "function", "name": tool.name, "description": tool.description,
                "parameters": tool.params_json_schema, "strict": tool.strict_json_schema}
    return {"type": type(tool).__name__, "name": getattr(tool, "name", type(tool).__name__)}


def _response_json(response: ModelResponse) -> dict[str, Any]:
    return {"output": [item.model_dump(mode="json") for item in response.output],
            "usage": _USAGE.dump_python(response.usage, mode="json"), "response_id": response.response_id,
            "request_id": response.request_id}


def _stream_json(events: list[Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"events": [e.model_dump(mode="json") for e in events]}
    for event in reversed(events):  # the closing event carries the response whole: output and usage, readable
        response = getattr(event, "response", None)
        if getattr(event, "type", "") in ("response.completed", "response.incomplete") and response is not None:
            data["output"] = [item.model_dump(mode="json") for item in response.output]
            if response.usage is not None:
                data["usage"] = response.usage.model_dump(mode="json")
            data["response_id"] = response.id
            break
    return data


def _model_response(data: dict[str, Any]) -> ModelResponse:
    return ModelResponse(output=[_OUTPUT.validate_python(item) for item in data["output"]],
                         usage=_USAGE.validate_python(data["usage"]), response_id=data.get("response_id"),
                         request_id=data.get("request_id"))
