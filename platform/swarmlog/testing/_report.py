"""A simulated run as a readable sequence of steps: what failed, then who did what, in order."""

from __future__ import annotations

import json
from typing import Any

from ..events import Event
from ..log.protocol import (
    EFFECT_RECORDED,
    HANDLER_FAILED,
    HTTP_EXCHANGE,
    LLM_CALL,
    MESSAGE,
    RUN_STARTED,
    TIMER_CANCELLED,
    TIMER_FIRED,
    TIMER_SET,
)

_CELL = 44

# A run is a swarmlog.testing.SimRun (which calls describe), a step its Step; both typed
# loosely here so that this module depends on neither.
SimRun = Any
Step = Any


def describe(run: SimRun) -> str:
    lines = []
    name = run.swarm.name
    for v in run.violations:
        lines.append(f"{name}: {v.check.upper()}: {v.message}")
    if not run.violations:
        lines.append(f"{name}: every check passed")
    off_default = run.schedule.deviations
    lines.append(f"schedule {run.schedule.trimmed()!r}: {len(run.steps)} steps, {off_default} "
                 f"choice{'s' if off_default != 1 else ''} away from the default order (marked *)"
                 + ("" if run.at_rest else f"; stopped at max_steps={run.max_steps}"))
    lines.append("")
    agent_w = max([len("agent")] + [len(s.agent) for s in run.steps])
    lines.append(f"  {'step':>4}  {'agent':<{agent_w}}  {'did':<{_CELL}}  {'wrote':<{_CELL}}  state")
    for s in run.steps:
        mark = "*" if s.choice or s.completions else " "
        did = _fit(_did(run, s))
        wrote = _fit(", ".join(_brief(e) for e in run.written(s)) or "-")
        if s.kind == "crash":
            wrote = "(aborted by its next life)"
        lines.append(f"{mark} {s.number:>4}  {s.agent:<{agent_w}}  {did:<{_CELL}}  {wrote:<{_CELL}}  "
                     f"{_diff(s.state_before, s.state_after)}")
        if s.passed_over:
            lines.append(f"  {'':>4}  {'':<{agent_w}}  (chosen over: {s.passed_over})")
        for completion in s.completions:
            lines.append(f"  {'':>4}  {'':<{agent_w}}  (delivered: {completion})")
    if run.error is not None:
        lines.append(f"  the run stopped: {type(run.error).__name__}: {run.error}")
    lines.append("")
    lines.append("states at the end:")
    for agent, state in run.states.items():
        lines.append(f"  {agent:<{agent_w}}  {_fit(json.dumps(state, sort_keys=True, default=str), 120)}")
    lines.append(f"the same run again: Simulator(...).run({run.schedule.trimmed()!r})")
    return "\n".join(lines)


def _did(run: SimRun, s: Step) -> str:
    if s.kind == "fire":
        return f"its timeout {', '.join(map(repr, s.timers))} fires"
    if s.kind == "read":
        return f"reads its timer.cancelled @{s.input}"
    if s.kind == "crash":
        return f"DIES before committing its step @{s.input}"
    if s.kind == "timers":
        return f"fires its logical timers @{s.input}"
    e = run.event(s.input) if s.input is not None else None
    if e is None:
        return f"handles @{s.input}"
    if e.event_type == MESSAGE:
        what = f"{e.kind} from {e.agent_id}"
    elif e.event_type == TIMER_FIRED:
        what = f"timer {e.payload.get('name')!r}"
    elif e.event_type == RUN_STARTED:
        what = RUN_STARTED
    else:
        what = e.event_type
    return f"{'handles' if s.handled else 'has no handler for'} {what} @{s.input}"


def _brief(e: Event) -> str:
    p = e.payload
    t = e.event_type
    if t == MESSAGE:
        return f"{p.get('kind')} → {e.to or 'all'}"
    if t == TIMER_SET:
        after = f"{p['after_ms']} ms" if p.get("after_ms") is not None else f"{p.get('after_events')} events"
        return f"timer.set {p.get('name')} ({after})"
    if t in (TIMER_CANCELLED, TIMER_FIRED):
        return f"{t} {p.get('name')}"
    call = f" #{p['call']}" if p.get("call") is not None else ""  # an async step's call, in delivery order
    if t == EFFECT_RECORDED:
        return f"effect {p.get('name')}{call}{' FAILED' if p.get('error') else ''}"
    if t in (LLM_CALL, HTTP_EXCHANGE):
        return f"{t}{call}"
    if t == HANDLER_FAILED:
        return f"{t} ({p.get('error_type')})"
    return t


def _diff(before: str, after: str) -> str:
    if before == after:
        return ""
    a: Any = json.loads(before)
    b: Any = json.loads(after)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return f"{_fit(before, 30)} → {_fit(after, 30)}"
    parts = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            parts.append(f"{k}: {_fit(json.dumps(a.get(k)), 30)} → {_fit(json.dumps(b.get(k)), 30)}")
    return "; ".join(parts)


def _fit(text: str, width: int = _CELL) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
