"""What a swarm's trace must be, checked against the log it traces (read back, decoded).

Shared by the unit test (in-memory log) and the integration test (the real broker). The
expected parent of each step is derived here from the log's own causal fields, not through
``swarmlog.observe.tracing.input_writer``: the tracer and this check must agree independently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from swarmlog import Swarm
from swarmlog.events import Event
from swarmlog.log.protocol import HANDLER_FAILED, RECORDED_EFFECTS, RUN_STARTED, TIMER_FIRED, parse_step
from swarmlog.observe.tracing import call_span_id, run_span_id, step_span_id, trace_id


def _cause_step(event: Event, by_offset: dict[int, Event]) -> tuple[str, int] | None:
    """The step that wrote ``event``, by the log's causes: None for the run's start."""
    if event.event_type == RUN_STARTED:
        return None
    if event.event_type == TIMER_FIRED:
        timer_set = by_offset[event.causes[0]]  # a firing's first cause is its timer.set
        return timer_set.agent_id, timer_set.causes[0]  # ...and that one's is the step that set it
    assert parse_step(event.event_id) is not None, f"{event.event_id} was written by no step"
    return event.agent_id, event.causes[0]  # an output's first cause is its step's input


def expected_steps(swarm: Swarm, events: Sequence[Event]) -> set[tuple[str, int]]:
    """(agent, offset) of every handler run the log implies: each input an agent has a handler for."""
    steps = set()
    for agent in swarm.agents():
        for e in events:
            own_firing = e.event_type == TIMER_FIRED and e.agent_id == agent.name and e.to == agent.name
            foreign = e.agent_id != agent.name and e.event_type != TIMER_FIRED
            addressed = e.event_type == RUN_STARTED or own_firing or (foreign and e.addressed_to(agent.name))
            if addressed and agent.handler_for(e) is not None:
                steps.add((agent.name, e.offset))
    return steps


def check_live_trace(spans: Sequence[ReadableSpan], events: Sequence[Event], *, topic: str,
                     swarm: Swarm) -> dict[tuple[str, int], ReadableSpan]:
    """One trace for the run; a span per step whose parent is the step that wrote its input; every
    output of the log accounted for by its step's span; calls as children. Returns the step spans."""
    run = next(e for e in events if e.event_type == RUN_STARTED)
    trace = trace_id(topic, run.run_id)
    assert spans, "no span was exported"
    assert {s.context.trace_id for s in spans} == {trace}, "the run is not one trace"
    by_id = {s.context.span_id: s for s in spans}
    assert len(by_id) == len(spans), "a span was exported twice"
    root = by_id[run_span_id(trace)]
    assert root.parent is None and root.attributes["swarmlog.run_id"] == run.run_id
    by_offset = {e.offset: e for e in events}
    steps = {(s.attributes["swarmlog.agent"], s.attributes["swarmlog.offset"]): s
             for s in spans if s.kind == SpanKind.CONSUMER}
    assert set(steps) == expected_steps(swarm, events), "every step is a span, and only steps are"
    for (agent, offset), span in steps.items():
        event = by_offset[offset]
        assert span.context.span_id == step_span_id(trace, agent, offset)
        assert (span.attributes["swarmlog.event.id"], span.attributes["swarmlog.event.type"]) == \
            (event.event_id, event.event_type)
        cause = _cause_step(event, by_offset)
        want = run_span_id(trace) if cause is None else step_span_id(trace, *cause)
        assert span.parent is not None and span.parent.span_id == want, \
            f"{agent}@{offset}: its parent is not the step that wrote {event.event_id}"
        assert want in by_id, f"{agent}@{offset}: its parent span was never exported"
    for e in events:
        parsed = parse_step(e.event_id)
        if parsed is None or (e.event_type == TIMER_FIRED and e.payload["clock"] == "events"):
            continue  # a wall-clock firing is the worker's; a logical one may fire between steps
        span = steps[(e.agent_id, parsed[0])]
        assert e.event_id in span.attributes["swarmlog.output_ids"], f"{e.event_id} missing from its step's span"
        if e.event_type in RECORDED_EFFECTS:
            call = by_id[call_span_id(trace, e.event_id)]
            assert call.parent is not None and call.parent.span_id == span.context.span_id
            assert call.start_time >= span.start_time and call.end_time <= span.end_time
        if e.event_type == HANDLER_FAILED:
            assert span.status.status_code == StatusCode.ERROR
    return steps


def check_replay_trace(replayed: Sequence[ReadableSpan], live: dict[tuple[str, int], ReadableSpan], *,
                       topic: str, run_id: str) -> dict[tuple[str, int], ReadableSpan]:
    """A replay's spans: marked, a trace of their own, each step linked to the live step it re-ran,
    the same tree. Returns the replay's step spans."""
    live_trace = trace_id(topic, run_id)
    assert replayed and all(s.attributes.get("swarmlog.replay") is True for s in replayed)
    [trace] = {s.context.trace_id for s in replayed}
    assert trace != live_trace
    root = next(s for s in replayed if s.parent is None)
    assert [link.context.span_id for link in root.links] == [run_span_id(live_trace)]
    steps = {(s.attributes["swarmlog.agent"], s.attributes["swarmlog.offset"]): s
             for s in replayed if s.kind == SpanKind.CONSUMER}
    assert set(steps) == set(live)
    live_to_replay: dict[int, Any] = {run_span_id(live_trace): root.context.span_id}
    live_to_replay.update({live[k].context.span_id: s.context.span_id for k, s in steps.items()})
    for key, span in steps.items():
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (live_trace, live[key].context.span_id)
        assert span.parent is not None and live[key].parent is not None
        assert span.parent.span_id == live_to_replay[live[key].parent.span_id], f"{key}: not the live tree"
    return steps
