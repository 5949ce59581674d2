"""The OpenTelemetry SDK side of :mod:`swarmlog.observe.tracing`: span records become ``ReadableSpan``.

Imported only once tracing is configured. The spans are built here whole, with the ids the log
gives them and the times the runtime measured, and handed to the span processors' ``on_end``
— what the SDK's own ``Span.end()`` does — so no ``TracerProvider`` picks ids or samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry.context import attach, detach
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

_KINDS = {"internal": SpanKind.INTERNAL, "consumer": SpanKind.CONSUMER, "client": SpanKind.CLIENT,
          "producer": SpanKind.PRODUCER}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)


def _scope() -> InstrumentationScope:
    try:
        v = version("swarmlog")
    except PackageNotFoundError:
        v = ""
    return InstrumentationScope("swarmlog", v)


class Emitter:
    """Turns :class:`~swarmlog.observe.tracing.SpanRecord` s into spans and gives them to the processors."""

    def __init__(self, *, processors: Sequence[Any]) -> None:
        self.processors = list(processors)
        self.scope = _scope()
        # Resource.create() reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME. Unless they
        # name the service, each agent is a service of its own: Jaeger colours a run by agent.
        self._base = Resource.create()
        self._named = not str(self._base.attributes.get("service.name", "")).startswith("unknown_service")
        self._resources: dict[str, Resource] = {}

    def _resource(self, service: str) -> Resource:
        r = self._resources.get(service)
        if r is None:
            r = self._base if self._named else self._base.merge(Resource({"service.name": service}))
            self._resources[service] = r
        return r

    def emit(self, records: Sequence[Any]) -> None:
        for rec in records:
            span = ReadableSpan(
                name=rec.name,
                context=SpanContext(rec.trace, rec.span, is_remote=False, trace_flags=_SAMPLED),
                parent=SpanContext(rec.trace, rec.parent, is_remote=False, trace_flags=_SAMPLED)
                if rec.parent is not None else None,
                resource=self._resource(rec.service),
                attributes=rec.attributes,
                links=[Link(SpanContext(t, s, is_remote=True, trace_flags=_SAMPLED)) for t, s in rec.links],
                kind=_KINDS[rec.kind],
                status=Status(StatusCode.ERROR, rec.error) if rec.error is not None else _OK,
                start_time=rec.start_ns,
                end_time=rec.end_ns,
                instrumentation_scope=self.scope,
            )
            for p in self.processors:
                p.on_end(span)

    def enter(self, trace: int, span: int) -> Any:
        ctx = SpanContext(trace, span, is_remote=False, trace_flags=_SAMPLED)
        return attach(set_span_in_context(NonRecordingSpan(ctx)))

    def leave(self, token: Any) -> None:
        detach(token)

    def force_flush(self) -> None:
        for p in self.processors:
            p.force_flush()

    def shutdown(self) -> None:
        for p in self.processors:
            p.shutdown()
