"""OpenTelemetry traces of a swarm: one trace per run, one span per step, ids derived from the log.

Turned on per process, like logging: :func:`configure` (a span exporter or processor of the
OpenTelemetry SDK: the in-memory one in tests) or :func:`configure_from_env` (the CLI: the
standard ``OTEL_*`` variables). Until then :func:`current` is None, nothing of OpenTelemetry is
imported, and a step pays one ``is not None`` (``bench/step_cost.py``).

**What a trace holds.** A run's ``run.started`` is the root span (written by whoever started the
run, :func:`run_started`). Every step — one handler run on one input — is a span named
``<agent> <handler>`` with the agent, the input's offset, type, kind and event id, and what the
step wrote (``swarmlog.outputs``). The step's ``ctx.effect``, ``ctx.llm`` and ``ctx.http()``
calls are its child spans, timed live, with the recorded event's id (never a body: prompts and
responses stay in the log). A handler that raised, or a step that diverged on replay, is a span
with an error status.

**Parent, not links, inside a run.** Every input a step handles was written by exactly one
earlier step (a message by the step that sent it, a timer's firing by the step that set the
timer), or is the run's start: so the step that wrote its input is the step's parent, and the
spans of a run form one tree that follows the log's causal links (``causes[0]`` of each
event, and for a timer the ``timer.set`` it names). A span has one parent, and here one is
enough: the other causes of an event are the recorded effects of the same writing step, which
are that step's children already. Jaeger's and Tempo's waterfall then reads as the swarm's
message flow. Links are for what crosses traces: a replay's step links to the live step it
re-ran.

**Ids from the log, not from headers.** The trace id is a hash of (topic, run id); a step's span
id a hash of (trace, agent, input offset); a call's of (trace, its event id). Everything a span
needs to name its parent is in the event it handles (the writer and the step in its id), so an
agent on another pod, a restarted agent, or a replay next week names the same spans without any
trace context travelling in Kafka headers. Headers would have added bytes to every event, a
random value to a deterministic log (which a restarted agent would have to reproduce byte for
byte), and nothing for events written before tracing was turned on. The topic is in the hash
because a fork keeps its source's run id and offsets.

**Exported once the step is in the log.** A live agent's spans wait for its transaction: they go
to the exporter when the batch commits, and are dropped when it aborts (the next life runs those
steps again, under the same ids). Steps an agent re-runs while rebuilding are history: their
spans were exported by the life that ran them. A restarted agent does export again the spans of
steps that wrote nothing after its last output (it cannot tell those from new ones); they carry
the same ids.

**Replays are traces of their own.** ``replay --swarm`` (and the debugger's fold) emit every step
it re-runs in a new trace (hash of the run's trace and a replay id), each span marked
``swarmlog.replay = true`` and linked to the live span of the same step, under a root span
``replay <run id>``: the live trace stays what happened.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import TracingExporterMissing
from ..events import Event
from ..log.protocol import (
    EFFECT_RECORDED,
    HANDLER_FAILED,
    HTTP_EXCHANGE,
    LLM_CALL,
    MESSAGE,
    RUN_STARTED,
    TIMER_FIRED,
    TIMER_SET,
    parse_step,
)

logger = logging.getLogger(__name__)

__all__ = ["SpanRecord", "StepTracer", "Tracing", "call_span_id", "configure", "configure_from_env", "current",
           "input_writer", "replay_trace_id", "run_span_id", "shutdown", "step_span_id", "trace_id"]

# --- ids: derived from the log ------------------------------------------------------------------


def _hash(domain: bytes, text: str, size: int) -> int:
    # blake2b without its personalisation parameter (which costs more than the hash itself here):
    # the domain is a prefix of the hashed bytes instead.
    h = hashlib.blake2b(domain + text.encode(), digest_size=size).digest()
    return int.from_bytes(h, "big") or 1  # all-zero ids are invalid in OpenTelemetry


def trace_id(topic: str, run_id: str) -> int:
    """The trace of a run: the same in every process that reads the run's log."""
    return _hash(b"swarmlog.trace\x1f", f"{topic}\x1f{run_id}", 16)


def replay_trace_id(live_trace: int, replay_id: str) -> int:
    """The trace of one replay of the run whose trace is ``live_trace``."""
    return _hash(b"swarmlog.replay\x1f", f"{live_trace:032x}\x1f{replay_id}", 16)


def run_span_id(trace: int) -> int:
    """The root span of a trace: the run's start (or, in a replay's trace, the replay)."""
    return _hash(b"swarmlog.run\x1f", f"{trace:032x}", 8)


def step_span_id(trace: int, agent: str, offset: int) -> int:
    """The span of ``agent``'s step on the input at ``offset``."""
    return _hash(b"swarmlog.step\x1f", f"{trace:032x}\x1f{agent}\x1f{offset}", 8)


def call_span_id(trace: int, event_id: str) -> int:
    """The span of a recorded call (effect, LLM, HTTP): its event id is unique in the run."""
    return _hash(b"swarmlog.call\x1f", f"{trace:032x}\x1f{event_id}", 8)


def input_writer(event: Event, timer_sets: Mapping[str, int]) -> tuple[str, int] | None:
    """(agent, step offset) of the step that wrote ``event``; None for the run's start and for
    events appended from outside any step (``swarmlog append``).

    A timer's firing belongs to the step that set the timer (its ``causes[0]`` is that
    ``timer.set``): ``timer_sets`` maps the handling agent's timer names to the step that last
    set each. Without it (a fold begun from a snapshot), a logical firing falls back to the
    step during which it fired, and a wall-clock one to the run.
    """
    if event.event_type == RUN_STARTED:
        return None
    if event.event_type == TIMER_FIRED:
        set_step = timer_sets.get(event.payload.get("name", ""))
        if set_step is not None:
            return event.agent_id, set_step
    parsed = parse_step(event.event_id)
    return (event.agent_id, parsed[0]) if parsed is not None else None


# --- what a span is, before the SDK sees it ---------------------------------------------------


@dataclass(slots=True)
class SpanRecord:
    """One span as plain data; :mod:`._otel` turns it into the SDK's ``ReadableSpan``."""

    trace: int
    span: int
    parent: int | None
    name: str
    start_ns: int
    end_ns: int
    service: str
    attributes: dict[str, Any]
    links: list[tuple[int, int]] = field(default_factory=list)
    """(trace, span) of spans of other traces this one re-runs."""
    error: str | None = None
    kind: str = "internal"


@dataclass(slots=True)
class _Replay:
    replay_id: str
    started_ns: int
    by: str  # what replays: "replay" (replay_swarm, `replay --swarm`) or "debugger" (a debugging session's fold)
    runs: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, run id) -> replay trace


class _RecordingSink:
    """Wraps a step's output sink: what the step wrote, and when each recorded call began and ended.

    A recorded call asks the sink for its record first (``recorded``) and writes it last
    (``write(locate=True)``), live and on replay alike: the span runs in between. Inside the
    handler: the clock reads here pass the guard because this module is swarmlog's own
    bookkeeping (:data:`swarmlog.guard.TRUSTED_LIBRARIES`), and nothing read flows into the step.
    """

    __slots__ = ("inner", "outputs", "calls", "_started")

    def __init__(self) -> None:
        self.inner: Any = None
        self.outputs: list[Any] = []
        self.calls: list[tuple[Any, int, int]] = []
        self._started: dict[str, int] = {}

    def reset(self, inner: Any) -> None:
        self.inner = inner
        self.outputs.clear()  # what a step's span keeps of them is copied when it ends
        self.calls.clear()
        self._started.clear()

    def write(self, out: Any, *, locate: bool) -> int | None:
        offset = self.inner.write(out, locate=locate)
        self.outputs.append(out)
        if locate:
            now = time.time_ns()
            self.calls.append((out, self._started.pop(out.event_id, now), now))
        return offset

    def recorded(self, event_id: str) -> Event | None:
        self._started[event_id] = time.time_ns()
        return self.inner.recorded(event_id)

    def call_started(self, event_id: str, started_ns: int) -> None:
        """An async step's concurrent call, about to be written as ``event_id``, began at
        ``started_ns`` (when the coroutine issued it, before other calls were delivered): its span
        runs from then, so concurrent calls show as overlapping siblings (``swarmlog.aio``)."""
        self._started[event_id] = started_ns


class StepTracer:
    """One agent's step spans; the runtime calls :meth:`begin` and :meth:`end` around each step.

    Live (a worker's core), spans of live steps wait in ``pending`` for :meth:`flush` (the
    transaction committed) or :meth:`discard` (it aborted). On replay every step's span is
    exported as it ends.
    """

    def __init__(self, *, tracing: Tracing, topic: str, agent: str, replay: _Replay | None) -> None:
        self.tracing = tracing
        self.topic = topic
        self.agent = agent
        self.replay = replay
        self.pending: list[SpanRecord] = []
        self.timer_sets: dict[str, int] = {}
        self._sink = _RecordingSink()
        self._run = ""
        self._live_trace = 0
        self._trace = 0
        self._root = 0
        self._span = 0
        self._started = 0
        self._steps = 0
        self._divergences = 0
        self._traced = False
        self._context: Any = None

    def begin(self, core: Any, offset: int, event: Event | None, sink: Any) -> Any:
        """A step starts: returns the sink the step writes through."""
        self._traced = False
        if event is None:
            return sink  # no input, no handler: a logical timer came due between steps
        self._traced = core.ctx.run_id != "" and (self.replay is not None or core.live(offset))
        self._sink.reset(sink)
        self._steps = core.steps
        self._divergences = len(core.divergences)
        if self._traced:
            trace = self._trace_of(core.ctx.run_id)
            self._span = step_span_id(trace, self.agent, offset)
            # Spans the handler's own instrumentation makes (an instrumented HTTP client, an SDK)
            # become children of this step, through the OpenTelemetry context.
            self._context = self.tracing.enter(trace, self._span)
        self._started = time.time_ns()
        return self._sink

    def end(self, core: Any, offset: int, event: Event | None) -> None:
        """The step ended (its outputs written or checked, or it raised)."""
        if event is None:
            return
        if self._context is not None:
            self.tracing.leave(self._context)
            self._context = None
        rec = self._sink
        for out in rec.outputs:
            if out.event_type == TIMER_SET:
                self.timer_sets[out.payload["name"]] = offset
        if not self._traced or core.steps == self._steps:
            return  # history being rebuilt, or no handler ran
        ended = time.time_ns()
        trace, span = self._trace, self._span
        writer = input_writer(event, self.timer_sets)
        parent = step_span_id(trace, *writer) if writer is not None else self._root
        handler = core.agent.handler_for(event)
        name = getattr(handler, "__name__", event.event_type)
        attributes: dict[str, Any] = {
            "swarmlog.agent": self.agent, "swarmlog.offset": offset, "swarmlog.event.type": event.event_type,
            "swarmlog.event.id": event.event_id, "swarmlog.event.from": event.agent_id,
            "swarmlog.run_id": core.ctx.run_id, "swarmlog.topic": self.topic, "swarmlog.handler": name,
            "swarmlog.outputs": tuple(_describe(o, self.agent) for o in rec.outputs),
            "swarmlog.output_ids": tuple(o.event_id for o in rec.outputs),
        }
        kind = event.payload.get("kind") if event.event_type == MESSAGE else (
            event.payload.get("name") if event.event_type == TIMER_FIRED else None)
        if kind is not None:
            attributes["swarmlog.event.kind"] = kind
        if event.event_type == TIMER_FIRED:
            attributes["swarmlog.timer.clock"] = event.payload.get("clock", "")
        error = None
        for out in rec.outputs:
            if out.event_type == HANDLER_FAILED:
                error = f"{out.payload['error_type']}: {out.payload['message']}"
        if len(core.divergences) > self._divergences:
            d = core.divergences[self._divergences]
            error = f"diverged: {d.detail}"
            attributes["swarmlog.divergence"] = d.detail
        links: list[tuple[int, int]] = []
        if self.replay is not None:
            attributes["swarmlog.replay"] = True
            attributes["swarmlog.replay.id"] = self.replay.replay_id
            attributes["swarmlog.replay.by"] = self.replay.by
            links.append((self._live_trace, step_span_id(self._live_trace, self.agent, offset)))
        records = [SpanRecord(trace=trace, span=span, parent=parent, name=f"{self.agent} {name}",
                              start_ns=self._started, end_ns=ended, service=self.agent, attributes=attributes,
                              links=links, error=error, kind="consumer")]
        for out, started, finished in rec.calls:
            records.append(self._call_span(trace, span, out, started, finished))
        if self.replay is not None:
            self.tracing.export(records)
        else:
            self.pending.extend(records)

    def flush(self) -> None:
        """The live transaction committed: its steps are in the log, their spans go out."""
        if self.pending:
            records, self.pending = self.pending, []
            self.tracing.export(records)

    def discard(self) -> None:
        """The live transaction aborted: none of its steps happened."""
        self.pending = []

    def _trace_of(self, run_id: str) -> int:
        if run_id != self._run:
            self._run = run_id
            self._live_trace = trace_id(self.topic, run_id)
            self._trace = self._live_trace if self.replay is None else self.tracing.replay_trace(
                self.replay, self.topic, run_id, self._live_trace)
            self._root = run_span_id(self._trace)
        return self._trace

    def _call_span(self, trace: int, parent: int, out: Any, started: int, finished: int) -> SpanRecord:
        p = out.payload
        attributes: dict[str, Any] = {"swarmlog.agent": self.agent, "swarmlog.event.id": out.event_id,
                                      "swarmlog.event.type": out.event_type}
        kind, error = "internal", None
        if out.event_type == EFFECT_RECORDED:
            name = f"effect {p['name']}"
            attributes["swarmlog.effect.name"] = p["name"]
            error = p["error"]
        elif out.event_type == LLM_CALL:
            name = f"llm {p['model']}".rstrip()
            attributes["gen_ai.request.model"] = p["model"]
            kind = "client"
        elif out.event_type == HTTP_EXCHANGE:
            name = p["method"]
            attributes.update({"http.request.method": p["method"], "url.full": p["url"],
                               "swarmlog.http.attempts": p["attempts"]})
            if p["status"] is not None:
                attributes["http.response.status_code"] = p["status"]
                if p["status"] >= 500:
                    error = f"HTTP {p['status']}"
            error = p["error"] or error
            kind = "client"
        else:
            name = out.event_type
        links: list[tuple[int, int]] = []
        if self.replay is not None:
            attributes["swarmlog.replay"] = True
            links.append((self._live_trace, call_span_id(self._live_trace, out.event_id)))
        return SpanRecord(trace=trace, span=call_span_id(trace, out.event_id), parent=parent, name=name,
                          start_ns=started, end_ns=finished, service=self.agent, attributes=attributes,
                          links=links, error=error, kind=kind)


def _describe(out: Any, agent: str) -> str:
    """An output of ``agent``'s step as a span attribute shows it: ``agent.message:task_complete -> reviewer``."""
    p = out.payload
    sub = p.get("kind") if out.event_type == MESSAGE else p.get("name")
    what = f"{out.event_type}:{sub}" if isinstance(sub, str) else out.event_type
    if out.to is None:
        return f"{what} -> *" if out.event_type == MESSAGE else what
    return what if out.to == agent else f"{what} -> {out.to}"


# --- the process's tracing --------------------------------------------------------------------


class Tracing:
    """Where one process's spans go (an SDK span processor), and the replays it is tracing."""

    def __init__(self, *, processors: Sequence[Any]) -> None:
        from . import _otel  # the SDK: imported only once tracing is configured

        self._emitter = _otel.Emitter(processors=processors)
        self._lock = threading.Lock()

    def step_tracer(self, *, topic: str, agent: str, replay: _Replay | None = None) -> StepTracer:
        return StepTracer(tracing=self, topic=topic, agent=agent, replay=replay)

    def export(self, records: Sequence[SpanRecord]) -> None:
        self._emitter.emit(records)

    def enter(self, trace: int, span: int) -> Any:
        """Make ``span`` the current OpenTelemetry span of this thread; returns what :meth:`leave` takes."""
        return self._emitter.enter(trace, span)

    def leave(self, token: Any) -> None:
        self._emitter.leave(token)

    # -- the run's root ------------------------------------------------------------------------

    def run_started(self, *, topic: str, run_id: str, offset: int, swarm: str, seed: int, code_version: str,
                    started_ns: int) -> None:
        """The run's root span: written by the process that wrote ``run.started``, once."""
        trace = trace_id(topic, run_id)
        self.export([SpanRecord(trace=trace, span=run_span_id(trace), parent=None, name=f"run {run_id}",
                                start_ns=started_ns, end_ns=time.time_ns(), service="swarmlog",
                                attributes={"swarmlog.run_id": run_id, "swarmlog.topic": topic,
                                            "swarmlog.swarm": swarm, "swarmlog.seed": seed,
                                            "swarmlog.code_version": code_version, "swarmlog.offset": offset},
                                kind="internal")])

    # -- replays -------------------------------------------------------------------------------

    def start_replay(self, *, by: str = "replay") -> _Replay:
        """A replay begins (``by``: ``replay`` or ``debugger``): its steps go into traces of its own,
        one per run it meets."""
        return _Replay(replay_id=uuid.uuid4().hex[:16], started_ns=time.time_ns(), by=by)

    def replay_trace(self, replay: _Replay, topic: str, run_id: str, live_trace: int) -> int:
        with self._lock:
            trace = replay.runs.get((topic, run_id))
            if trace is None:
                trace = replay.runs[(topic, run_id)] = replay_trace_id(live_trace, replay.replay_id)
            return trace

    def end_replay(self, replay: _Replay, *, swarm: Any, divergences: Sequence[Any] = ()) -> None:
        """The replay's root span, one per run it re-ran, linked to that run's root; in error when
        the code diverged (``divergences`` in offset order), naming the first divergence."""
        ended = time.time_ns()
        first = divergences[0] if divergences else None
        records = []
        for (topic, run_id), trace in replay.runs.items():
            live = trace_id(topic, run_id)
            records.append(SpanRecord(
                trace=trace, span=run_span_id(trace), parent=None, name=f"replay {run_id}",
                start_ns=replay.started_ns, end_ns=ended, service="swarmlog",
                attributes={"swarmlog.replay": True, "swarmlog.replay.id": replay.replay_id,
                            "swarmlog.replay.by": replay.by,
                            "swarmlog.run_id": run_id, "swarmlog.topic": topic, "swarmlog.swarm": swarm.name,
                            "swarmlog.code_version": swarm.code_version or "",
                            "swarmlog.divergences": len(divergences)},
                links=[(live, run_span_id(live))],
                error=None if first is None else f"diverged: {first.agent} at offset {first.offset}: {first.detail}"))
            # Most divergences are found after their step's span went out (an output the log does not
            # have shows once the agent's next recorded output arrives): each becomes a child span of
            # the step it is about, in error.
            for i, d in enumerate(divergences[:_DIVERGENCE_SPANS]):
                records.append(SpanRecord(
                    trace=trace, span=_hash(b"swarmlog.divergence\x1f", f"{trace:032x}\x1f{i}", 8),
                    parent=step_span_id(trace, d.agent, d.offset), name=f"{d.agent} diverged", start_ns=ended,
                    end_ns=ended, service=d.agent, error=d.detail,
                    attributes={"swarmlog.replay": True, "swarmlog.agent": d.agent, "swarmlog.offset": d.offset,
                                "swarmlog.divergence": d.detail}))
        if records:
            self.export(records)

    def force_flush(self) -> None:
        self._emitter.force_flush()

    def shutdown(self) -> None:
        self._emitter.shutdown()


_DIVERGENCE_SPANS = 100
"""A replay reports every divergence; its trace shows the first hundred."""

_current: Tracing | None = None


def current() -> Tracing | None:
    """The process's tracing, or None: not configured (then nothing is traced, nothing imported)."""
    return _current


def configure(*, exporter: Any = None, processor: Any = None) -> Tracing:
    """Trace this process's steps into an SDK span ``exporter`` (batched) or span ``processor``.

    ``configure(processor=SimpleSpanProcessor(InMemorySpanExporter()))`` in a test;
    ``configure(exporter=OTLPSpanExporter())`` in a program. Spans are built from the log with
    ids derived from it, so swarmlog takes processors, not a ``TracerProvider`` (whose id
    generator and sampler would pick other ids). Replaces an earlier configuration.
    """
    global _current
    processors = []
    if processor is not None:
        processors.append(processor)
    if exporter is not None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        processors.append(BatchSpanProcessor(exporter))
    if not processors:
        raise ValueError("configure() needs an exporter or a processor")
    previous, _current = _current, Tracing(processors=processors)
    if previous is not None:
        previous.shutdown()
    return _current


_OTLP_PROTOCOLS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
_EXPORTER_PACKAGES = {"otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
                      "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
                      "console": "opentelemetry-sdk", "zipkin": "opentelemetry-exporter-zipkin"}


def configure_from_env(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Tracing as the standard ``OTEL_*`` variables ask, or None when they ask for none.

    On when ``OTEL_TRACES_EXPORTER`` names exporters (``otlp``, ``console``, any installed
    ``opentelemetry_traces_exporter`` entry point; ``none``: off), or when it is unset and
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (OTLP).
    ``otlp`` follows ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (``http/protobuf`` by default);
    each exporter reads its own endpoint, headers and timeout, ``OTEL_BSP_*`` tunes the batching,
    ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` the resource. ``OTEL_SDK_DISABLED=true``:
    off. An exporter whose package is missing is a :class:`~swarmlog.errors.TracingExporterMissing`.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = env.get("OTEL_TRACES_EXPORTER")
    if names is None:
        if not (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
            return None
        names = "otlp"
    wanted = [n.strip().lower() for n in names.split(",") if n.strip() and n.strip().lower() != "none"]
    if not wanted:
        return None
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TracingExporterMissing(exporter=wanted[0], package="opentelemetry-sdk") from None
    from importlib.metadata import entry_points

    available = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    processors = []
    for name in wanted:
        if name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") \
                or "http/protobuf"
            name = _OTLP_PROTOCOLS.get(protocol.strip().lower(), "otlp_proto_http")
        ep = available.get(name)
        if ep is None:
            raise TracingExporterMissing(exporter=name, package=_EXPORTER_PACKAGES.get(name, f"the one providing "
                                                                                        f"exporter {name!r}"))
        processors.append(BatchSpanProcessor(ep.load()()))
        logger.info("tracing: steps are exported as OpenTelemetry spans through %s", name)
    global _current
    previous, _current = _current, Tracing(processors=processors)
    if previous is not None:
        previous.shutdown()
    return _current


def shutdown() -> None:
    """Export what is still batched and stop tracing (the CLI calls it before it exits)."""
    global _current
    tracing, _current = _current, None
    if tracing is not None:
        tracing.shutdown()
