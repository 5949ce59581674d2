"""OpenTelemetry traces of a swarm on the in-memory log: ids derived from the log, one trace whose
parents follow its causes, replays marked and linked, aborted steps never exported, and nothing
of OpenTelemetry loaded or paid for when tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from swarmlog import InMemoryLog, Swarm, on_message
from swarmlog.debug import Session
from swarmlog.errors import NondeterminismError, TracingExporterMissing
from swarmlog.events import Event
from swarmlog.observe import tracing
from swarmlog.observe.tracing import call_span_id, run_span_id, step_span_id, trace_id
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog.testing import StubServer

from ..swarms import SERVER, Planner, Researcher, traced
from ..tracing_checks import check_live_trace, check_replay_trace


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(lambda request: "fine") as server:
        SERVER["url"] = server.base_url
        yield server


def _run(backend: InMemoryLog, topic: str, swarm: Swarm = traced, run_id: str = "r-1") -> Settings:
    settings = Settings(topic=topic, bootstrap_servers="127.0.0.1:1")
    start_run(settings=settings, swarm=swarm, run_id=run_id, seed=3, backend=backend)
    run_agents(settings=settings, swarm=swarm, until_quiet=0.5, backend=backend)
    return settings


def _events(backend: InMemoryLog, topic: str) -> list[Event]:
    decoder = Decoder(SchemaRegistry.load(Settings().schema_dir))
    out = []
    for m in backend.messages(topic):
        writer, rec = decoder.decode(m.value(), m.offset())
        out.append(Event.from_message(m, writer, rec))
    return out


# --- ids -----------------------------------------------------------------------------------------


def test_span_ids_derive_from_the_log_alone_the_same_in_every_process():
    # Another process, another string-hash seed: the same ids (a pod, a replay next week).
    code = ("from swarmlog.observe.tracing import *; t = trace_id('topic-a', 'run-1'); "
            "print(t, step_span_id(t, 'reviewer', 17), call_span_id(t, 'reviewer@17#0'), run_span_id(t))")
    outs = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True,
                           text=True, check=True).stdout for seed in ("1", "2")}
    t = trace_id("topic-a", "run-1")
    assert outs == {f"{t} {step_span_id(t, 'reviewer', 17)} {call_span_id(t, 'reviewer@17#0')} {run_span_id(t)}\n"}
    assert 0 < t < 2**128 and all(0 < i < 2**64 for i in (step_span_id(t, "a", 1), run_span_id(t)))
    # A fork keeps the run id and the offsets: the topic keeps their traces apart.
    assert trace_id("topic-a", "run-1") != trace_id("topic-a.fix", "run-1")
    assert step_span_id(t, "a", 1) != step_span_id(t, "a", 2) != step_span_id(t, "b", 1)


def test_a_run_on_the_in_memory_log_is_one_trace_whose_parents_are_the_writers_of_each_input(
        backend, log_topic, spans, stub):
    _run(backend, log_topic)
    events = _events(backend, log_topic)
    steps = check_live_trace(spans.get_finished_spans(), events, topic=log_topic, swarm=traced)
    # What the check covered: messages, a broadcast, both kinds of timer, every kind of recorded call.
    kinds = {s.attributes.get("swarmlog.event.kind") for s in steps.values()}
    assert {"question", "hello", "answer", "tick", "late", "bye"} <= kinds
    calls = {s.name: s for s in spans.get_finished_spans() if s.kind in (SpanKind.CLIENT, SpanKind.INTERNAL)
             and s.parent is not None}
    assert {"effect note", "llm m", "POST"} <= set(calls)
    http = calls["POST"]
    assert http.attributes["http.response.status_code"] == 200
    assert "sekret" not in http.attributes["url.full"]  # the recorded (redacted) URL, never the secret
    failed = next(s for s in steps.values() if s.attributes["swarmlog.handler"] == "bye")
    assert failed.status.status_code == StatusCode.ERROR and "no more questions" in failed.status.description
    start = steps[("planner", 0)]
    assert start.attributes["swarmlog.outputs"] == ("agent.message:question -> researcher", "agent.message:hello -> *",
                                                   "timer.set:tick")
    assert start.resource.attributes["service.name"] == "planner"  # each agent a service of its own


def test_a_replay_traces_into_a_trace_of_its_own_marked_and_linked_to_the_live_steps(
        backend, log_topic, spans, stub):
    settings = _run(backend, log_topic)
    live = check_live_trace(spans.get_finished_spans(), _events(backend, log_topic), topic=log_topic, swarm=traced)
    spans.clear()
    stub.stop()  # a replay never calls anything: the calls' spans come from the log
    result = replay_swarm(settings=settings, swarm=traced, backend=backend)
    assert result.divergences == []
    replayed = spans.get_finished_spans()
    check_replay_trace(replayed, live, topic=log_topic, run_id="r-1")
    live_trace = trace_id(log_topic, "r-1")
    call = next(s for s in replayed if s.name == "llm m")
    assert [link.context.trace_id for link in call.links] == [live_trace]


def test_the_debuggers_fold_is_a_replay_too_marked_as_the_debuggers(backend, log_topic, spans, stub):
    settings = _run(backend, log_topic)
    live = check_live_trace(spans.get_finished_spans(), _events(backend, log_topic), topic=log_topic, swarm=traced)
    spans.clear()
    stub.stop()
    session = Session(settings=settings, swarm=traced, backend=backend, snapshots=False)
    assert session.first_divergence() is None
    replayed = spans.get_finished_spans()
    check_replay_trace(replayed, live, topic=log_topic, run_id="r-1")
    assert {s.attributes["swarmlog.replay.by"] for s in replayed if s.kind == SpanKind.CONSUMER} == {"debugger"}
    # Code that departs from the log: the replay's root says where, in error.
    spans.clear()
    changed = Swarm(name="traced", agents=lambda: [_Impatient("planner"), Researcher("researcher")], llm=traced.llm,
                    code_version="2")
    first = Session(settings=settings, swarm=changed, backend=backend, snapshots=False).first_divergence()
    assert first is not None
    [root] = [s for s in spans.get_finished_spans() if s.parent is None]
    assert root.status.status_code == StatusCode.ERROR and f"at offset {first.offset}" in root.status.description
    # ...and the step it departs at has the divergence as a child, in error.
    [step] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER
              and s.attributes["swarmlog.offset"] == first.offset and s.attributes["swarmlog.agent"] == first.agent]
    diverged = [s for s in spans.get_finished_spans() if s.name == f"{first.agent} diverged"
                and s.parent.span_id == step.context.span_id]
    assert diverged and all(s.status.status_code == StatusCode.ERROR for s in diverged)
    assert first.detail in {s.status.description for s in diverged}


class _Impatient(Planner):
    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"] += 1
        ctx.send("researcher", "bye")  # the log has no such output here: a divergence


_THEIRS = InMemorySpanExporter()
_THEIR_TRACER = TracerProvider()
_THEIR_TRACER.add_span_processor(SimpleSpanProcessor(_THEIRS))


class _Instrumented(Researcher):
    @on_message("hello")
    def hello(self, ctx, event):
        # The handler's own instrumentation (another TracerProvider, as an instrumented library has).
        with _THEIR_TRACER.get_tracer("theirs").start_as_current_span("their work"):
            self.state["heard"] += 1


def test_inside_a_handler_the_step_is_the_current_span_for_the_handlers_own_instrumentation(
        backend, log_topic, spans, stub):
    swarm = Swarm(name="traced", agents=lambda: [Planner("planner"), _Instrumented("researcher")], llm=traced.llm,
                  code_version="1")
    _THEIRS.clear()
    _run(backend, log_topic, swarm=swarm)
    [step] = [s for s in spans.get_finished_spans() if s.name == "researcher hello"]
    [theirs] = _THEIRS.get_finished_spans()
    assert theirs.context.trace_id == step.context.trace_id
    assert theirs.parent is not None and theirs.parent.span_id == step.context.span_id


class _Clocked(Researcher):
    @on_message("question")
    def question(self, ctx, event):
        ctx.send("planner", "answer", "first")
        import time

        time.time()  # forbidden: the live step fails, its transaction aborts


def test_spans_of_an_aborted_transaction_are_never_exported(backend, log_topic, spans):
    swarm = Swarm(name="traced", agents=lambda: [Planner("planner"), _Clocked("researcher")], code_version="1")
    with pytest.raises(NondeterminismError):
        _run(backend, log_topic, swarm=swarm)
    exported = {(s.attributes.get("swarmlog.agent"), s.attributes.get("swarmlog.offset"))
                for s in spans.get_finished_spans()}
    handled = [e for e in _events(backend, log_topic) if e.event_type == "agent.message"
               and e.payload["kind"] == "question"]
    assert handled and ("researcher", handled[0].offset) not in exported  # that step never happened
    assert ("planner", 0) in exported  # the planner's committed step did


# --- configuration ---------------------------------------------------------------------------------


def test_the_standard_otel_variables_turn_tracing_on_and_off():
    try:
        assert tracing.configure_from_env({}) is None
        assert tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
        assert tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}) is None
        assert tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "console"}) is tracing.current() is not None
        # An endpoint alone means OTLP, over HTTP unless the protocol says otherwise.
        otlp = tracing.configure_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
        assert otlp is not None
        [processor] = otlp._emitter.processors
        assert type(processor._batch_processor._exporter).__module__.startswith(
            "opentelemetry.exporter.otlp.proto.http")
        with pytest.raises(TracingExporterMissing) as missing:
            tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        assert (missing.value.exporter, missing.value.package) == ("otlp_proto_grpc",
                                                                   "opentelemetry-exporter-otlp-proto-grpc")
    finally:
        tracing.shutdown()


_UNTRACED = """
import json, sys
from swarmlog import InMemoryLog
from swarmlog.runtime import run_agents, start_run
from swarmlog.replaying import replay_swarm
from swarmlog.settings import Settings
from tests.swarms import traced, SERVER
from swarmlog.testing import StubServer
with StubServer(lambda request: "fine") as server:
    SERVER["url"] = server.base_url
    log = InMemoryLog(); log.create_topic("t")
    s = Settings(topic="t", bootstrap_servers="127.0.0.1:1")
    start_run(settings=s, swarm=traced, run_id="r", seed=1, backend=log)
    run_agents(settings=s, swarm=traced, until_quiet=0.3, backend=log)
    replay_swarm(settings=s, swarm=traced, backend=log)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""


def test_without_configuration_a_run_and_a_replay_import_nothing_of_opentelemetry():
    out = subprocess.run([sys.executable, "-c", _UNTRACED], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."})
    assert json.loads(out.stdout.splitlines()[-1]) == []
