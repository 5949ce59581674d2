"""The timeline as one self-contained HTML page: ``swarmlog timeline --html FILE``.

One file, nothing fetched: the page's CSS, its script and the timeline's data are all
inline, and its Content-Security-Policy (``default-src 'none'``) refuses any network load,
so it opens the same from a laptop, a CI artifact or an air-gapped incident room.

The data is JSON in a ``<script type="application/json">`` element, with ``<``, ``>`` and
``&`` escaped, so no payload can close the element; the script puts every text from the log
on the page through ``textContent``, never as markup. The page draws one page of rows at a
time as SVG (250 by default, up to 5,000, at six zoom levels down to a 5-pixel overview row),
so a log of thousands of events stays quick to move through; the overview strip at its left
shows the whole range, the page on screen, every timeout and the divergence.
"""

from __future__ import annotations

import json
import logging
import re
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from .model import Timeline

__all__ = ["page_doc", "render_html", "write_html"]

logger = logging.getLogger(__name__)

_MARKERS = re.compile(r"__TITLE__|/\*__CSS__\*/|/\*__JS__\*/|__DATA__")


def page_doc(timeline: Timeline) -> dict[str, Any]:
    """What the page's script draws: lanes, rows (short keys: there may be many), events whole."""
    rows = [{"o": r.offset, "k": r.kind, "l": r.lane, "t": list(r.targets), "lb": r.label, "s": r.summary,
             "ty": timeline.events[r.offset].event_type if r.offset in timeline.events else "",
             "c": list(r.causes), "cd": list(r.caused), "d": r.divergence} for r in timeline.rows]
    d = timeline.divergence
    return {"topic": timeline.topic, "start": timeline.start, "end": timeline.end, "lanes": timeline.lanes,
            "code_version": timeline.code_version, "divergence": d.to_json() if d is not None else None,
            "rows": rows, "events": {str(o): e.to_json() for o, e in timeline.events.items()}}


def render_html(timeline: Timeline) -> str:
    """The whole page, as text."""
    assets = resources.files(__package__)
    template = assets.joinpath("page.html").read_text(encoding="utf-8")
    css = assets.joinpath("page.css").read_text(encoding="utf-8")
    js = assets.joinpath("page.js").read_text(encoding="utf-8")
    data = json.dumps(page_doc(timeline), default=str, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = escape(f"swarmlog timeline: {timeline.topic} [{timeline.start}, {timeline.end})")
    values = {"__TITLE__": title, "/*__CSS__*/": css, "/*__JS__*/": js, "__DATA__": data}
    # One pass over the template alone: what goes in is never scanned again, so a topic or a
    # payload that happens to spell a marker stays text.
    return _MARKERS.sub(lambda m: values[m.group(0)], template)


def write_html(timeline: Timeline, path: str | Path) -> Path:
    """Write the page to ``path``; returns it."""
    out = Path(path)
    out.write_text(render_html(timeline), encoding="utf-8")
    logger.info("wrote the timeline of %s (%d events) to %s", timeline.topic, len(timeline.rows), out)
    return out
