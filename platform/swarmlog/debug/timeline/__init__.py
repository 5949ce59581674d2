"""The timeline of a run: a range of the log as a sequence diagram (``swarmlog timeline``).

* :func:`build_timeline` — a :class:`Timeline` from a :class:`~swarmlog.debug.LogView`
  (and, given a :class:`~swarmlog.debug.Session`, the first divergence of its code);
  :func:`from_graph` the same from a :class:`~swarmlog.debug.CausalGraph` already read.
* :func:`render_text` — the diagram for a terminal; :func:`write_html` /
  :func:`render_html` — one self-contained HTML page with causal arrows, an event's
  payload on click, paging and zoom.

``model`` decides what is drawn (lanes, rows, marks, the divergence); ``text`` and
``html`` only draw it.
"""

from .html import render_html, write_html
from .model import ROW_KINDS, Row, Timeline, build_timeline, from_graph
from .text import render as render_text

__all__ = ["ROW_KINDS", "Row", "Timeline", "build_timeline", "from_graph", "render_html", "render_text",
           "write_html"]
