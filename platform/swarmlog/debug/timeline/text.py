"""The timeline in a terminal: agents as columns, one line per event, messages as arrows.

::

     offset   coordinator    worker      reviewer    supervisor     auditor
          1        ●─────────expect──────────▶            │            │        expect "worker"  ⇠ 0
          4        │            │            ◷            │            │        set deadline after 300 ms  ⇠ 1
          6        │            │            ◉            │            │        TIMEOUT deadline (set at 4, …)  ⇠ 4
         13!!      │            ●─task_compl─▶            │            │        task_complete "{…}"  ⇠ 2 12
                 ^ DIVERGES: reviewer diverges handling this: the step now writes an event the log does not have

Marks in the writer's column: ``◷`` a timer set, ``◉`` a timer firing (``TIMEOUT`` when the
wall clock fired it), ``⊘`` a timer cancelled, ``◆`` a recorded effect, ``✦`` an LLM call,
``⇄`` an HTTP exchange, ``✖`` a handler failure. A message is ``●`` at its sender and ``▶``
(or ``◀``) at its recipient, its kind written on the shaft; a broadcast points at every
other column. Each line ends with the event's summary and, after ``⇠``, the offsets that
caused it. The row where the code first diverges is marked ``!!`` and followed by what differs.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

from .model import (
    BROADCAST_ROW,
    EFFECT_ROW,
    FAILURE_ROW,
    HTTP_ROW,
    LLM_ROW,
    MESSAGE_ROW,
    OTHER_ROW,
    RUN_ROW,
    TIMEOUT_ROW,
    TIMER_CANCELLED_ROW,
    TIMER_FIRED_ROW,
    TIMER_SET_ROW,
    UNDECODABLE_ROW,
    Row,
    Timeline,
)

__all__ = ["GLYPHS", "GUTTER", "lines", "note", "render", "use_color", "write"]

logger = logging.getLogger(__name__)

GLYPHS = {TIMER_SET_ROW: "◷", TIMER_FIRED_ROW: "◉", TIMEOUT_ROW: "◉", TIMER_CANCELLED_ROW: "⊘", EFFECT_ROW: "◆",
          LLM_ROW: "✦", HTTP_ROW: "⇄", FAILURE_ROW: "✖", OTHER_ROW: "○"}
"""One terminal cell each (no emoji: a wide glyph would push every column after it)."""

_RESET = "\x1b[0m"
_STYLES = {TIMER_SET_ROW: "\x1b[33m", TIMER_FIRED_ROW: "\x1b[33m", TIMEOUT_ROW: "\x1b[1;33m",
           TIMER_CANCELLED_ROW: "\x1b[33m", EFFECT_ROW: "\x1b[36m", LLM_ROW: "\x1b[35m", HTTP_ROW: "\x1b[35m",
           FAILURE_ROW: "\x1b[31m", RUN_ROW: "\x1b[1m", UNDECODABLE_ROW: "\x1b[31m"}
_DIVERGED = "\x1b[1;37;41m"
_DIM = "\x1b[2m"

GUTTER = 9
"""Width of the offset column, with the divergence mark."""


def use_color(stream: TextIO, choice: str = "auto") -> bool:
    """``always``/``never``, or ``auto``: a terminal, and no ``NO_COLOR`` in the environment."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    return stream.isatty() and not os.environ.get("NO_COLOR")


def render(timeline: Timeline, *, color: bool = False, note_width: int = 60) -> str:
    """The whole timeline as text, one line per event, with a header and a footer."""
    return "\n".join(lines(timeline, color=color, note_width=note_width)) + "\n"


def lines(timeline: Timeline, *, color: bool = False, note_width: int = 60) -> list[str]:
    lanes = timeline.lanes
    width = min(max([14, *(len(n) + 2 for n in lanes)]), 22)
    centers = [i * width + width // 2 for i in range(len(lanes))]
    span = len(lanes) * width
    out = [_title(timeline)]
    header = [" "] * span
    for i, name in enumerate(lanes):
        text = name[: width - 1]
        left = max(i * width, centers[i] - len(text) // 2)
        header[left: left + len(text)] = text
    out.append(f"{'offset':>{GUTTER - 2}}  " + "".join(header).rstrip())
    for row in timeline.rows:
        out.extend(_row_lines(row, timeline, lanes, centers, span, width, color, note_width))
    out.extend(_footer(timeline))
    return out


def write(timeline: Timeline, stream: TextIO | None = None, *, color: str = "auto") -> None:
    stream = stream or sys.stdout
    stream.write(render(timeline, color=use_color(stream, color)))


def _title(t: Timeline) -> str:
    n = len(t.rows)
    what = f"{n} event{'s' if n != 1 else ''}"
    timeouts = sum(r.is_timeout for r in t.rows)
    extra = f", {timeouts} timeout{'s' if timeouts != 1 else ''}" if timeouts else ""
    return f"timeline of {t.topic}, offsets {t.start}..{t.end - 1}: {what}, {len(t.lanes)} agents{extra}"


def _row_lines(row: Row, t: Timeline, lanes: list[str], centers: list[int], span: int, width: int, color: bool,
               note_width: int) -> list[str]:
    mark = "!!" if row.divergence else "  "
    gutter = f"{row.offset:>{GUTTER - 2}}{mark}"
    if row.lane is None:  # a banner: the run's own record, or a message that does not decode
        text = f"═══ {row.label}: {row.summary} ═══" if row.kind == RUN_ROW else f"??? {row.summary}"
        line = gutter + text
        return [_paint(line, _STYLES.get(row.kind), color)]
    cells = [" "] * span
    for c in centers:
        cells[c] = "│"
    src = centers[row.lane]
    if row.kind in (MESSAGE_ROW, BROADCAST_ROW) and row.targets:
        _arrow(cells, src, [centers[t_] for t_ in row.targets], row.label)
    elif row.kind in (MESSAGE_ROW, BROADCAST_ROW):
        cells[src] = "●"  # to no one this range shows
    else:
        cells[src] = GLYPHS.get(row.kind, "○")
    text = note(row)
    diagram = "".join(cells)
    style = _DIVERGED if row.divergence else _STYLES.get(row.kind)
    causes = f"  ⇠ {' '.join(map(str, row.causes))}" if row.causes else ""
    line = gutter + diagram + "  " + _clip(text, note_width)
    out = [_paint(line, style, color) + (_paint(causes, _DIM, color) if causes else "")]
    if row.divergence:
        out.append(_paint(f"{'':>{GUTTER}}^ DIVERGES: {row.divergence}", _DIVERGED, color))
    return out


def _arrow(cells: list[str], src: int, dsts: list[int], label: str) -> None:
    lo, hi = min([src, *dsts]), max([src, *dsts])
    for x in range(lo, hi + 1):
        cells[x] = "─"
    for d in dsts:
        cells[d] = "▶" if d > src else "◀"
    cells[src] = "●"
    # The kind on the shaft, on the longer side, if it fits between sender and recipient.
    left, right = (src + 1, hi) if hi - src >= src - lo else (lo + 1, src)
    room = right - left - 2
    if room >= 3:
        text = label[:room]
        at = left + (right - left - len(text)) // 2
        cells[at: at + len(text)] = text


def note(row: Row) -> str:
    """What a row says after the diagram (the console's timeline says the same)."""
    if row.kind == TIMEOUT_ROW:
        return f"TIMEOUT {row.summary}"
    if row.kind == TIMER_FIRED_ROW:
        return f"fired {row.summary}"
    if row.kind == TIMER_SET_ROW:
        return f"set {row.summary}"
    if row.kind == TIMER_CANCELLED_ROW:
        return f"cancelled {row.summary}"
    if row.kind == EFFECT_ROW:
        return f"effect {row.summary}"
    if row.kind == LLM_ROW:
        return f"llm {row.summary}"
    if row.kind == HTTP_ROW:
        return f"http {row.summary}" if row.model_call else f"http {row.label}"
    if row.kind == FAILURE_ROW:
        return f"FAILED {row.summary}"
    if row.kind == BROADCAST_ROW:
        return f"(to all) {row.summary}"
    return row.summary


def _footer(t: Timeline) -> list[str]:
    d = t.divergence
    if t.code_version is None:
        return []
    if d is None:
        return [f"no divergence: code {t.code_version} does exactly what the log recorded"]
    where = "marked !! above" if t.divergence_in_range else f"outside offsets {t.start}..{t.end - 1}"
    return [f"DIVERGED first at offset {d.offset} (agent {d.agent}, code {t.code_version}, {where}): {d.detail}"]


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _paint(text: str, style: str | None, color: bool) -> str:
    return f"{style}{text}{_RESET}" if color and style else text
