"""Traces of the case study on the real broker: one trace per run whose spans follow the log's causes
(checked against the log read back), a replay's spans marked; and the CLI exporting over OTLP/HTTP
to a receiver, as a process configured only by the standard OTEL_* variables."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swarmlog.events import Event
from swarmlog.examples import case_study
from swarmlog.examples.case_study import buggy, live_run, replay_deadlock
from swarmlog.kafka import KafkaBackend
from swarmlog.observe import tracing
from swarmlog.observe.tracing import run_span_id, trace_id
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from ..tracing_checks import check_live_trace, check_replay_trace, expected_steps
from .conftest import REPO, subprocess_env


def read_events(settings: Settings) -> list[Event]:
    """The log as any reader sees it (read_committed), decoded."""
    decoder = Decoder(SchemaRegistry.load(settings.schema_dir))
    events = []
    with KafkaBackend(settings).reader(settings.topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                writer, rec = decoder.decode(m.value(), m.offset())
                events.append(Event.from_message(m, writer, rec))
    return events


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


def _late(task: str) -> dict[str, Any]:
    import time

    time.sleep(3.0)  # past the reviewer's timeout beyond doubt, even on a loaded machine
    return {"summary": task.upper(), "took_ms": 3000}


def test_a_case_study_run_exports_one_trace_whose_spans_follow_the_causal_links_of_the_log(
        base_settings, spans, monkeypatch):
    monkeypatch.setattr(case_study, "do_work", _late)  # the deadlock: the timeout fires first
    run = live_run(base_settings, buggy, seed=1)
    assert run.deadlocked
    topic = run.settings.topic
    events = read_events(run.settings)
    steps = check_live_trace(spans.get_finished_spans(), events, topic=topic, swarm=buggy)

    # The deadlock's story, read up the tree from the auditor's note: the supervisor's escalation,
    # the reviewer's wall-clock timeout, the expectation that set it, the coordinator's start, the run.
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    [note] = [s for s in steps.values() if s.name == "auditor note"]
    chain, span = [], note
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        chain.append(span.name)
    run_id = next(e.run_id for e in events)
    assert chain == ["supervisor escalate", "reviewer deadline", "reviewer expect", "coordinator start",
                     f"run {run_id}"]
    assert steps[next(k for k in steps if k[0] == "reviewer" and steps[k].name == "reviewer deadline")] \
        .attributes["swarmlog.timer.clock"] == "wallclock"
    # The late task_complete hangs off the worker's task, which holds the recorded effect.
    [ignored] = [s for s in steps.values() if s.name == "reviewer task_complete"]
    assert by_id[ignored.parent.span_id].name == "worker task"
    assert ignored.attributes["swarmlog.outputs"] == ()  # the bug, visible in the trace: it wrote nothing
    assert any(s.name == "effect work" and s.parent.span_id == ignored.parent.span_id for s in by_id.values())

    # A replay of the same log: a trace of its own, every span marked, each step linked to its live one.
    spans.clear()
    replayed = replay_deadlock(run)
    assert replayed.divergences == []
    check_replay_trace(spans.get_finished_spans(), steps, topic=topic, run_id=run_id)


# --- the CLI, configured by the environment only, exporting over OTLP/HTTP ------------------------


class _Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver (what Jaeger, Tempo and the Collector listen with on :4318)."""

    daemon_threads = True

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []  # (service.name, protobuf Span)
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for rs in request.resource_spans:
                service = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
                for ss in rs.scope_spans:
                    self.server.spans.extend((service, s) for s in ss.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _attrs(span: Any) -> dict[str, Any]:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value if v.HasField("int_value") \
            else v.bool_value if v.HasField("bool_value") else None
    return out


def test_the_cli_exports_a_run_and_its_replay_over_otlp_as_the_otel_variables_say(settings):
    receiver = _Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        env = subprocess_env(settings)
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
                    "OTEL_BSP_SCHEDULE_DELAY": "200"})
        env.pop("OTEL_TRACES_EXPORTER", None)
        cmd = [sys.executable, "-m", "swarmlog.cli"]
        subprocess.run([*cmd, "run", "swarmlog.examples.case_study:buggy", "--run-id", "otlp-1", "--seed", "1",
                        "--until-quiet", "1"], env=env, cwd=REPO, check=True, capture_output=True, timeout=120)
        with receiver.lock:
            live = list(receiver.spans)
            receiver.spans.clear()
        replay = subprocess.run([*cmd, "replay", "--swarm", "swarmlog.examples.case_study:buggy", "--json"], env=env,
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        assert replay.returncode == 0, replay.stderr
        with receiver.lock:
            replayed = list(receiver.spans)
    finally:
        receiver.shutdown()
        receiver.server_close()

    trace = trace_id(settings.topic, "otlp-1")
    assert {int.from_bytes(s.trace_id, "big") for _, s in live} == {trace}
    ids = {int.from_bytes(s.span_id, "big") for _, s in live}
    assert run_span_id(trace) in ids
    assert all(int.from_bytes(s.parent_span_id, "big") in ids for _, s in live if s.parent_span_id)  # one tree
    events = read_events(settings)
    steps = {(_attrs(s)["swarmlog.agent"], _attrs(s)["swarmlog.offset"]) for _, s in live
             if s.kind == s.SPAN_KIND_CONSUMER}
    assert steps == expected_steps(buggy, events)
    assert {service for service, s in live if s.kind == s.SPAN_KIND_CONSUMER} <= set(buggy.agent_names)

    assert replayed and all(_attrs(s).get("swarmlog.replay") is True for _, s in replayed)
    [replay_trace] = {int.from_bytes(s.trace_id, "big") for _, s in replayed}
    assert replay_trace != trace
    assert {(_attrs(s)["swarmlog.agent"], _attrs(s)["swarmlog.offset"]) for _, s in replayed
            if s.kind == s.SPAN_KIND_CONSUMER} == steps
    links = {int.from_bytes(link.span_id, "big") for _, s in replayed for link in s.links}
    assert links <= ids and len(links) > len(steps)  # every step and call links to its live span, and the root
