"""The timeline's model and its two renderings, with no service: a hand-made log, and a real run on the
in-memory log. The page itself is loaded in Chromium by tests/integration/test_timeline_page.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from swarmlog.debug import LogView, Session
from swarmlog.debug.logview import CausalGraph, LoggedEvent
from swarmlog.debug.timeline import build_timeline, from_graph, render_html, render_text
from swarmlog.debug.timeline.html import page_doc
from swarmlog.debug.timeline.model import (
    BROADCAST_ROW,
    EFFECT_ROW,
    LLM_ROW,
    MESSAGE_ROW,
    RUN_ROW,
    TIMEOUT_ROW,
    TIMER_FIRED_ROW,
    TIMER_SET_ROW,
    UNDECODABLE_ROW,
)
from swarmlog.events import Event
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import EFFECT_RECORDED, LLM_CALL, MESSAGE, RUN_STARTED, STATE_DIGEST, TIMER_FIRED, TIMER_SET
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.outcomes import Divergence
from swarmlog.settings import Settings

from .. import swarms

AGENTS = ["coordinator", "worker", "reviewer", "supervisor", "auditor"]


def ev(offset: int, event_type: str, agent: str, to: str | None, payload: dict[str, Any],
       causes: tuple[int, ...] = ()) -> LoggedEvent:
    return LoggedEvent(offset, Event(offset, event_type, 1, f"{agent}@{offset}", "r1", agent, to, list(causes),
                                     payload, 0))


def case_graph(extra: list[LoggedEvent] = ()) -> CausalGraph:  # type: ignore[assignment]
    """The case study's deadlock, written out by hand (with its gaps: offsets are not contiguous)."""
    events = [
        ev(0, RUN_STARTED, "swarmlog", None, {"swarm": "case-study", "seed": 5, "code_version": "b",
                                              "agents": AGENTS}),
        ev(1, MESSAGE, "coordinator", "reviewer", {"kind": "expect", "body": "worker"}, (0,)),
        ev(2, MESSAGE, "coordinator", "worker", {"kind": "task", "body": "summarise"}, (0,)),
        ev(4, TIMER_SET, "reviewer", "reviewer", {"name": "deadline", "after_ms": 300}, (1,)),
        ev(6, TIMER_FIRED, "reviewer", "reviewer", {"name": "deadline", "set_offset": 4, "clock": "wallclock"},
           (4,)),
        ev(8, MESSAGE, "reviewer", "supervisor", {"kind": "escalate", "body": "late"}, (6,)),
        ev(10, MESSAGE, "supervisor", "auditor", {"kind": "note", "body": "{}"}, (8,)),
        ev(12, EFFECT_RECORDED, "worker", "worker", {"name": "work", "args_json": "[]", "result_json": "{}"}, (2,)),
        ev(13, MESSAGE, "worker", "reviewer", {"kind": "task_complete", "body": "{}"}, (2, 12)),
        *extra,
    ]
    graph = CausalGraph(events={e.offset: e for e in events}, causes={}, caused={})
    for e in events:
        graph.causes[e.offset] = e.causes
        for c in e.causes:
            graph.caused.setdefault(c, []).append(e.offset)
    return graph


def test_lanes_are_the_swarms_agents_in_its_order_then_anyone_else_in_order_of_appearance():
    extra = [ev(20, MESSAGE, "tester", "reviewer", {"kind": "poke", "body": "x"}),
             ev(21, MESSAGE, "auditor", "outsider", {"kind": "fyi", "body": "x"})]
    t = from_graph(case_graph(extra), topic="t", start=0, end=22)
    assert t.lanes == [*AGENTS, "tester", "outsider"]
    # Without a run.started in the range: the order in which they first write or are written to.
    later = from_graph(CausalGraph(events={e.offset: e for e in case_graph().events.values() if e.offset >= 8},
                                   causes={}, caused={}), topic="t", start=8, end=14)
    assert later.lanes == ["reviewer", "supervisor", "auditor", "worker"]


def test_each_event_is_a_row_in_offset_order_messages_point_at_their_recipient_and_the_timeout_is_marked():
    t = from_graph(case_graph(), topic="t", start=0, end=14)
    assert [r.offset for r in t.rows] == [0, 1, 2, 4, 6, 8, 10, 12, 13]
    kinds = {r.offset: r.kind for r in t.rows}
    assert kinds == {0: RUN_ROW, 1: MESSAGE_ROW, 2: MESSAGE_ROW, 4: TIMER_SET_ROW, 6: TIMEOUT_ROW, 8: MESSAGE_ROW,
                     10: MESSAGE_ROW, 12: EFFECT_ROW, 13: MESSAGE_ROW}
    late = t.row(13)
    assert (late.lane, late.targets, late.label) == (AGENTS.index("worker"), (AGENTS.index("reviewer"),),
                                                     "task_complete")
    assert late.causes == (2, 12) and t.row(2).caused == (12, 13)
    assert t.row(0).lane is None  # the run's own record is a banner, not a lane
    timeout = t.row(6)
    assert timeout.is_timeout and timeout.lane == AGENTS.index("reviewer") and timeout.caused == (8,)
    assert [r.offset for r in t.rows if r.is_timeout] == [6] and t.row(6).offset < t.row(13).offset


def test_a_logical_timer_a_broadcast_an_llm_call_and_an_undecodable_message_each_have_their_own_kind():
    extra = [ev(14, TIMER_FIRED, "worker", "worker", {"name": "tick", "set_offset": 3, "clock": "events"}),
             ev(15, MESSAGE, "auditor", None, {"kind": "done", "body": "x"}),
             ev(16, LLM_CALL, "reviewer", "reviewer", {"model": "gpt-x", "request_json": "{}",
                                                        "response_json": "{}"}),
             LoggedEvent(17, None, [], "no schema with fingerprint 00ff")]
    t = from_graph(case_graph(extra), topic="t", start=0, end=18)
    assert t.row(14).kind == TIMER_FIRED_ROW and not t.row(14).is_timeout
    bc = t.row(15)
    assert bc.kind == BROADCAST_ROW and bc.targets == (0, 1, 2, 3)  # every lane but the sender's
    assert (t.row(16).kind, t.row(16).label) == (LLM_ROW, "gpt-x")
    assert t.row(17).kind == UNDECODABLE_ROW and "fingerprint" in t.row(17).summary


def test_only_the_rows_of_the_agents_asked_for_and_the_banner_stay():
    t = from_graph(case_graph(), topic="t", start=0, end=14, only=["supervisor"])
    assert [r.offset for r in t.rows] == [0, 8, 10]


def test_the_first_divergence_is_marked_on_its_row_and_said_when_it_is_outside_the_range():
    d = Divergence(offset=13, agent="reviewer", detail="the step now writes an event the log does not have")
    t = from_graph(case_graph(), topic="t", start=0, end=14, divergence=d, code_version="fixed")
    assert [r.offset for r in t.rows if r.divergence] == [13]
    assert "reviewer" in (t.row(13).divergence or "") and t.divergence_in_range
    text = render_text(t)
    marked = [line for line in text.splitlines() if re.match(r"\s*13!!", line)]
    assert len(marked) == 1 and "DIVERGES: reviewer diverges handling this" in text
    assert "DIVERGED first at offset 13 (agent reviewer, code fixed, marked !! above)" in text
    outside = from_graph(CausalGraph(events={o: e for o, e in case_graph().events.items() if o < 8}, causes={},
                                     caused={}), topic="t", start=0, end=8, divergence=d, code_version="fixed")
    assert not outside.divergence_in_range and "outside offsets 0..7" in render_text(outside)
    clean = from_graph(case_graph(), topic="t", start=0, end=14, code_version="buggy")
    assert "no divergence: code buggy does exactly what the log recorded" in render_text(clean)


def test_the_terminal_diagram_keeps_every_agent_in_its_column_on_every_line():
    text = render_text(from_graph(case_graph(), topic="t", start=0, end=14))
    lines = text.splitlines()
    header = lines[1]
    columns = [header.index(name) + len(name) // 2 for name in AGENTS]
    body = [line for line in lines[2:] if re.match(r"\s*\d+", line) and "═══" not in line]
    assert len(body) == 8
    for line in body:  # each column holds a lifeline, a mark, or an arrow's shaft or head
        assert all(line[c] in "│●▶◀─◷◉⊘◆✦⇄✖○" or line[c].isalnum() or line[c] == "_" for c in columns), line
    timeout = next(line for line in body if line.lstrip().startswith("6 "))
    assert timeout[columns[2]] == "◉" and "TIMEOUT deadline" in timeout
    late = next(line for line in body if line.lstrip().startswith("13"))
    assert late[columns[1]] == "●" and late[columns[2]] == "▶"
    assert "⇠ 2 12" in late  # its causes
    assert lines[0] == "timeline of t, offsets 0..13: 9 events, 5 agents, 1 timeout"


def test_colour_is_only_written_when_asked_for():
    t = from_graph(case_graph(), topic="t", start=0, end=14)
    assert "\x1b[" not in render_text(t)
    assert "\x1b[1;33m" in render_text(t, color=True)  # the timeout


def test_the_page_embeds_its_data_so_that_no_payload_can_break_out_of_it():
    nasty = "</script><script>alert(1)</script> & <b>"
    extra = [ev(14, MESSAGE, "worker", "reviewer", {"kind": "x", "body": nasty})]
    t = from_graph(case_graph(extra), topic="__DATA__ /*__JS__*/", start=0, end=15)
    page = render_html(t)
    assert nasty not in page and "<script>alert(1)" not in page
    assert page.count("<script") == 2  # the data, the page's own script: nothing else
    data = re.search(r'<script id="timeline-data" type="application/json">(.*?)</script>', page, re.S)
    assert data is not None
    doc = json.loads(data.group(1))
    assert doc["events"]["14"]["payload"]["body"] == nasty  # the text is all there, as data
    assert doc["topic"] == "__DATA__ /*__JS__*/"  # markers in the data stay data
    assert "<title>swarmlog timeline: __DATA__ /*__JS__*/ [0, 15)</title>" in page


def test_the_page_loads_nothing_from_the_network():
    page = render_html(from_graph(case_graph(), topic="t", start=0, end=14))
    assert "default-src 'none'" in page  # the browser itself refuses any fetch
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page)


def test_what_the_page_draws_holds_every_row_and_event():
    d = Divergence(offset=13, agent="reviewer", detail="x")
    doc = page_doc(from_graph(case_graph(), topic="t", start=0, end=14, divergence=d, code_version="fixed"))
    assert doc["lanes"] == AGENTS and len(doc["rows"]) == 9 and set(doc["events"]) == {str(o) for o in
                                                                                      (0, 1, 2, 4, 6, 8, 10, 12, 13)}
    assert doc["divergence"]["offset"] == 13
    row = next(r for r in doc["rows"] if r["o"] == 6)
    assert (row["k"], row["ty"], row["c"], row["cd"]) == (TIMEOUT_ROW, TIMER_FIRED, [4], [8])


@pytest.fixture(scope="module")
def relay_run() -> tuple[InMemoryLog, Settings]:
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarms.relay, run_id="tl", seed=3, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    return backend, settings


def test_a_real_runs_timeline_has_a_row_for_every_event_of_the_log_and_its_divergence(relay_run, registry):
    backend, settings = relay_run
    view = LogView(settings=settings, backend=backend, registry=registry)
    every = [e for e in view.events() if e.event_type != STATE_DIGEST]
    assert len(every) < len(list(view.events()))  # the run recorded state digests: none is a row
    t = build_timeline(view=view)
    assert [r.offset for r in t.rows] == [e.offset for e in every]
    assert t.lanes == ["r0", "r1", "r2", "r3", "r4"] and t.end == backend.watermarks("relay")[1]
    assert {r.kind for r in t.rows} >= {RUN_ROW, MESSAGE_ROW, BROADCAST_ROW, EFFECT_ROW, TIMER_SET_ROW,
                                        TIMER_FIRED_ROW}
    part = build_timeline(view=view, start=40, end=90)
    assert [r.offset for r in part.rows] == [e.offset for e in every if 40 <= e.offset < 90]
    changed = Session(settings=settings, swarm=swarms.relay_changed, backend=backend, registry=registry)
    first = changed.first_divergence()
    assert first is not None
    marked = build_timeline(view=view, session=changed)
    # Both rows that diverge: the step's input, and the recorded output the step no longer writes as it was.
    assert [r.offset for r in marked.rows if r.divergence] == [first.offset, first.recorded["offset"]]
    assert "differs from this record" in marked.row(first.recorded["offset"]).divergence
    assert marked.code_version == "relay-2"
