"""Nothing from the log reaches a terminal raw, and long lists are summaries (issue 28, items 7 and 8).

Names are checked where swarmlog writes them, but a log holds whatever any producer put there: every
human-readable rendering escapes what is not printable (swarmlog.terminal), ``--json`` keeps it
exact; the same through the CLI as processes on Kafka: tests/integration/test_edges_output.py."""

from __future__ import annotations

import json
import logging

from swarmlog.debug.logview import CausalGraph, LoggedEvent
from swarmlog.debug.timeline import from_graph, render_text
from swarmlog.events import Event
from swarmlog.log.protocol import MESSAGE
from swarmlog.terminal import PrintableFormatter, bounded, offset_ranges, printable

HOSTILE = ["esc\x1b[2J\x1b]0;pwned\x07", "forged\n      7  swarmlog         run.started", "rtl\u202eevil", "c1\x9b31m",
           "del\x7f", "nul\x00"]
RAW = set("\x1b\x07\n\u202e\x9b\x7f\x00")


def _raw_in(text: str) -> set[str]:
    return RAW & set(text)


def test_printable_escapes_what_the_terminal_would_act_on_and_leaves_the_rest():
    assert printable("reviewer") == "reviewer" and printable("réviseur 审查员 😀") == "réviseur 审查员 😀"
    assert printable("a\x1b[31mb\nc\u202ed\U000e0001") == "a\\x1b[31mb\\x0ac\\u202ed\\U000e0001"
    assert all(not _raw_in(printable(h)) for h in HOSTILE)


def _event(offset: int, agent: str, to: str | None, kind: str) -> LoggedEvent:
    return LoggedEvent(offset, Event(offset, MESSAGE, 3, f"e{offset}", "r", agent, to, [], {"kind": kind,
                                                                                          "body": kind}, 0),
                       [("sl.agent", agent.encode())])


def test_a_log_line_is_one_line_whatever_the_names_hold_and_json_keeps_them_exact():
    for i, name in enumerate(HOSTILE):
        e = _event(i, name, name, name)
        line = e.line()
        assert "\n" not in line and not _raw_in(line), line
        doc = json.loads(json.dumps(e.to_json()))
        assert (doc["agent"], doc["to"], doc["payload"]["kind"]) == (name, name, name)  # --json: exact
    assert "forged\\x0a" in _event(1, HOSTILE[1], "b", "k").line()


def test_the_terminal_timeline_escapes_names_kinds_and_summaries_but_keeps_its_own_colours():
    events = {i: _event(i, name, HOSTILE[(i + 1) % len(HOSTILE)], name) for i, name in enumerate(HOSTILE)}
    graph = CausalGraph(events=events, causes={i: [] for i in events}, caused={})
    t = from_graph(graph, topic="t\x1b[0m", start=0, end=len(HOSTILE))
    plain = render_text(t)
    assert _raw_in(plain) == {"\n"}  # its own line ends: counted next
    assert len(plain.splitlines()) == 2 + len(HOSTILE)  # the title, the header, one line per event
    coloured = render_text(t, color=True)
    assert _raw_in(coloured) <= {"\x1b", "\n"}  # the timeline's own colour sequences and lines, nothing else
    assert "\x1b]0;" not in coloured and "\x1b[2J" not in coloured


def test_the_cli_log_formatter_escapes_the_message_and_keeps_a_traceback_multiline():
    fmt = PrintableFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("swarmlog", logging.WARNING, __file__, 1, "agent %s: %s", ("a\nb", "\x1b[2J"), None)
    assert fmt.format(record) == "WARNING agent a\\x0ab: \\x1b[2J"
    try:
        raise ValueError("boom")
    except ValueError as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    assert fmt.format(record).count("\n") >= 2


def test_offsets_read_as_ranges_of_consecutive_ones():
    assert offset_ranges([9, 5, 6, 7, 8, 12, 40, 41]) == "5..9, 12, 40..41"
    assert offset_ranges(range(0, 40, 2), limit=3) == "0, 2, 4 (and 17 more ranges)"


def test_past_the_cap_findings_are_a_summary_by_kind_and_in_full_when_asked():
    findings = [(i, "SchemaNotFound", f"offset {i}: unknown\x1b fingerprint") for i in range(10, 10_010)]
    findings += [(20_000, "TrailingBytesInValue", "offset 20000: trailing")]
    short = bounded(findings)
    assert short == ["10,000 × SchemaNotFound, at offsets 10..10009; the first: offset 10: unknown\\x1b fingerprint",
                     "1 × TrailingBytesInValue, at offsets 20000; the first: offset 20000: trailing"]
    assert len(bounded(findings, full=True)) == 10_001
    assert bounded(findings[:20]) == [printable(text) for _, _, text in findings[:20]]
