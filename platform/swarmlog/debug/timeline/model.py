"""A range of the log as a sequence diagram: agents as lanes, every event a row, in offset order.

What both renderings (the terminal's, the HTML page's) draw, decided once here:

* **Lanes.** The swarm's agents in its own order (from the session's swarm, else the
  range's ``run.started``), then anyone else who writes or is written to in the range
  (an operator's ``swarmlog append --agent tester``), in the order they first appear.
  The runtime's own records (``run.started``, ``run.forked``) are not a lane: they are
  banners across the diagram.
* **Rows.** One per event of the range, in offset order — the log's total order *is* the
  diagram's vertical axis, so nothing is drawn "at the same time". A row sits in the lane
  of the agent that wrote it; a message is an arrow to its recipient's lane (a broadcast
  to every other lane); a timer set, a timer firing, a recorded effect, an LLM call, an
  HTTP exchange or a handler failure is a mark in the writer's lane. A wall-clock timer
  firing is a **timeout**: the one event whose place in the order no code decided.
* **Causes, both ways.** Each row carries the offsets it names as causes and the offsets
  in the range that name it (from :meth:`LogView.graph`), for the page's causal arrows.
* **The divergence.** With a session (the swarm's code), the first place that code
  departs from the log (:meth:`Session.first_divergence`) is marked on its row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...log.protocol import (
    EFFECT_RECORDED,
    HANDLER_FAILED,
    HTTP_EXCHANGE,
    LLM_CALL,
    MESSAGE,
    RUN_FORKED,
    RUN_STARTED,
    STATE_DIGEST,
    TIMER_CANCELLED,
    TIMER_FIRED,
    TIMER_SET,
)
from ..logview import CausalGraph, LoggedEvent

if TYPE_CHECKING:
    from ...runtime.outcomes import Divergence
    from ..logview import LogView
    from ..session import Session

__all__ = ["BROADCAST_ROW", "EFFECT_ROW", "FAILURE_ROW", "HTTP_ROW", "LARGE", "LLM_ROW", "MESSAGE_ROW", "OTHER_ROW",
           "ROW_KINDS", "RUN_ROW", "Row", "TIMEOUT_ROW", "TIMER_CANCELLED_ROW", "TIMER_FIRED_ROW", "TIMER_SET_ROW",
           "Timeline", "UNDECODABLE_ROW", "WALL_CLOCK", "build_timeline", "diverging_record", "from_graph"]

logger = logging.getLogger(__name__)

# Row kinds: what a row is drawn as. The page's CSS classes and the terminal's glyphs key on these.
MESSAGE_ROW = "message"
BROADCAST_ROW = "broadcast"
TIMER_SET_ROW = "timer-set"
TIMER_FIRED_ROW = "timer-fired"
TIMEOUT_ROW = "timeout"
"""A wall-clock timer firing: its place in the order was decided by the clock, then recorded."""
TIMER_CANCELLED_ROW = "timer-cancelled"
EFFECT_ROW = "effect"
LLM_ROW = "llm"
HTTP_ROW = "http"
FAILURE_ROW = "failure"
RUN_ROW = "run"
"""``run.started`` / ``run.forked``: a banner across every lane."""
OTHER_ROW = "event"
UNDECODABLE_ROW = "undecodable"

ROW_KINDS = (MESSAGE_ROW, BROADCAST_ROW, TIMER_SET_ROW, TIMER_FIRED_ROW, TIMEOUT_ROW, TIMER_CANCELLED_ROW,
             EFFECT_ROW, LLM_ROW, HTTP_ROW, FAILURE_ROW, RUN_ROW, OTHER_ROW, UNDECODABLE_ROW)

_MARKS = {TIMER_SET: TIMER_SET_ROW, TIMER_CANCELLED: TIMER_CANCELLED_ROW, EFFECT_RECORDED: EFFECT_ROW,
          LLM_CALL: LLM_ROW, HTTP_EXCHANGE: HTTP_ROW, HANDLER_FAILED: FAILURE_ROW}

LARGE = 200_000
"""More events than this in one timeline: said, since all of them are held at once (and written to one page)."""

WALL_CLOCK = "wallclock"
"""``timer.fired``'s ``clock`` for a timeout set in seconds (``ctx.timeout``)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One event of the range, as the diagram draws it."""

    offset: int
    kind: str
    """One of :data:`ROW_KINDS`."""
    lane: int | None
    """The writer's lane (None for a banner: a run record, an undecodable message)."""
    targets: tuple[int, ...]
    """Where a message's arrow points: the recipient's lane, or every other lane for a broadcast."""
    label: str
    """A few words: a message's kind, a timer's or an effect's name, a model, ``METHOD host/path``."""
    summary: str
    """The event's one-line summary (what ``swarmlog log`` prints after the routing)."""
    causes: tuple[int, ...]
    caused: tuple[int, ...]
    """Offsets in the range that name this event among their causes."""
    divergence: str | None = None
    """Set on the rows where the session's code first departs from the log: the step's input, and the
    recorded call or output that differs (an HTTP exchange, an LLM call), when the divergence names it."""
    model_call: bool = False
    """An ``llm.call``, or an ``http.exchange`` with a known LLM API: ``summary`` is its conversation's."""

    @property
    def is_timeout(self) -> bool:
        return self.kind == TIMEOUT_ROW


@dataclass(slots=True)
class Timeline:
    """The rows of ``[start, end)`` over ``lanes``, and the divergence found by the session's code, if any."""

    topic: str
    start: int
    end: int
    """Every event before this offset is in (the log's end when no bound was given)."""
    lanes: list[str]
    rows: list[Row]
    events: dict[int, LoggedEvent] = field(default_factory=dict)
    """The decoded events, by offset: what the page shows on click."""
    divergence: Divergence | None = None
    code_version: str | None = None
    """The code the divergence was looked for with (None: no session, none looked for)."""

    @property
    def divergence_in_range(self) -> bool:
        d = self.divergence
        return d is not None and any(r.offset == d.offset for r in self.rows)

    def row(self, offset: int) -> Row:
        for r in self.rows:
            if r.offset == offset:
                return r
        raise KeyError(offset)


def build_timeline(*, view: LogView, start: int = 0, end: int | None = None, session: Session | None = None,
                   agents: Iterable[str] = ()) -> Timeline:
    """The timeline of ``[start, end)`` of ``view``'s topic.

    ``session``: the swarm's code, which orders the lanes and finds the first divergence
    (a whole replay of the log: the divergence may lie outside the range, and is then
    reported beside it). ``agents``: show only the rows that involve one of them.
    """
    graph = view.graph(start=start, end=end)
    if len(graph.events) > LARGE:
        logger.warning("the timeline holds all %d events of offsets %d..%s in memory (and a page, in one file): "
                       "--from/--to show a part", len(graph.events), start, end if end is not None else "the end")
    divergence = session.first_divergence() if session is not None else None
    order = list(session.agents) if session is not None else []
    log_end = end if end is not None else view.backend.watermarks(view.topic)[1]
    return from_graph(graph, topic=view.topic, start=start, end=log_end, order=order, divergence=divergence,
                      code_version=session.code_version if session is not None else None, only=agents)


def from_graph(graph: CausalGraph, *, topic: str, start: int, end: int, order: Iterable[str] = (),
               divergence: Divergence | None = None, code_version: str | None = None,
               only: Iterable[str] = ()) -> Timeline:
    """A timeline from a :class:`CausalGraph` (pure: no log is read)."""
    # A state.digest record is the log's checksum of the step before it, not an interaction:
    # drawn, it would double the rows. `swarmlog log` lists it; a state divergence is marked
    # on the step's own row (its offset is the step's).
    events = [graph.events[o] for o in sorted(graph.events)
              if graph.events[o].event is None or graph.events[o].event_type != STATE_DIGEST]
    only_set = frozenset(only)
    if only_set:
        events = [e for e in events if _involves(e, only_set)]
    lanes = _lanes(events, order)
    index = {name: i for i, name in enumerate(lanes)}
    record = diverging_record(divergence)
    rows = []
    for e in events:
        row = _row(e, index, graph)
        if divergence is not None and divergence.offset == e.offset:
            row = _with_divergence(row, divergence, input_row=True)
        elif divergence is not None and record == e.offset:
            row = _with_divergence(row, divergence, input_row=False)
        rows.append(row)
    return Timeline(topic=topic, start=start, end=end, lanes=lanes, rows=rows,
                    events={e.offset: e for e in events}, divergence=divergence, code_version=code_version)


def _involves(e: LoggedEvent, agents: frozenset[str]) -> bool:
    ev = e.event
    if ev is None or ev.event_type in (RUN_STARTED, RUN_FORKED):
        return True  # banners stay: they say what run this is
    return ev.agent_id in agents or any(ev.addressed_to(a) for a in agents)


def _lanes(events: list[LoggedEvent], order: Iterable[str]) -> list[str]:
    lanes: list[str] = list(dict.fromkeys(order))
    seen = set(lanes)

    def add(name: str | None) -> None:
        if name and name not in seen:
            seen.add(name)
            lanes.append(name)

    if not lanes:
        for e in events:  # the swarm's own order, as its run.started recorded it
            if e.event is not None and e.event_type == RUN_STARTED:
                for name in e.payload.get("agents") or []:
                    add(name)
                break
    for e in events:
        if e.event is None or e.event_type in (RUN_STARTED, RUN_FORKED):
            continue
        add(e.agent)
        add(e.to)
    return lanes


def _row(e: LoggedEvent, index: dict[str, int], graph: CausalGraph) -> Row:
    causes = tuple(graph.causes.get(e.offset, ()))
    caused = tuple(graph.caused.get(e.offset, ()))
    if e.event is None:
        return Row(e.offset, UNDECODABLE_ROW, None, (), "undecodable", e.error or "", causes, caused)
    t, p = e.event_type, e.payload
    summary = e.summary(width=200)
    lane = index.get(e.agent)
    if t in (RUN_STARTED, RUN_FORKED):
        label = "run started" if t == RUN_STARTED else "run forked"
        return Row(e.offset, RUN_ROW, None, (), label, summary, causes, caused)
    if t == MESSAGE:
        kind = str(p.get("kind"))
        if e.to is None:
            targets = tuple(i for name, i in index.items() if i != lane)
            return Row(e.offset, BROADCAST_ROW, lane, targets, kind, summary, causes, caused)
        target = index.get(e.to)
        return Row(e.offset, MESSAGE_ROW, lane, (target,) if target is not None else (), kind, summary, causes,
                   caused)
    if t == TIMER_FIRED:
        kind = TIMEOUT_ROW if p.get("clock") == WALL_CLOCK else TIMER_FIRED_ROW
        return Row(e.offset, kind, lane, (), str(p.get("name")), summary, causes, caused)
    row_kind = _MARKS.get(t, OTHER_ROW)
    model_call = row_kind in (LLM_ROW, HTTP_ROW) and e.conversation is not None
    return Row(e.offset, row_kind, lane, (), _label(row_kind, t, p), summary, causes, caused, model_call=model_call)


def _label(kind: str, event_type: str, p: dict[str, Any]) -> str:
    if kind in (TIMER_SET_ROW, TIMER_CANCELLED_ROW, EFFECT_ROW):
        return str(p.get("name"))
    if kind == LLM_ROW:
        return str(p.get("model"))
    if kind == HTTP_ROW:
        url = str(p.get("url", ""))
        host_path = url.split("://", 1)[-1].split("?", 1)[0]
        return f"{p.get('method')} {host_path}"
    if kind == FAILURE_ROW:
        return str(p.get("error_type"))
    return event_type


def diverging_record(d: Divergence | None) -> int | None:
    """The offset of the recorded event that differs (the call, the output), when the divergence names
    one apart from the step's input; None otherwise."""
    if d is None or not isinstance(d.recorded, dict):
        return None
    at = d.recorded.get("offset")
    return at if isinstance(at, int) and not isinstance(at, bool) and at != d.offset else None


def _with_divergence(row: Row, d: Divergence, *, input_row: bool) -> Row:
    if input_row:
        text = f"{d.agent} diverges handling this: {d.detail}"
    else:
        text = f"the call {d.agent}'s step at offset {d.offset} now makes differs from this record: {d.detail}"
    return replace(row, divergence=text)
