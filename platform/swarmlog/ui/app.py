"""The console's pages: a Starlette application over the mirror (read-only) and the log's fold (states).

Pages, each a plain server-rendered HTML page (Jinja2 templates; no script needed, nothing
loaded from elsewhere: the Content-Security-Policy allows this origin only):

* ``/`` — every run of every topic the mirror holds, with its status; filter by status, search.
* ``/runs/{topic}/{run}`` — the run's timeline: a page of rows from an offset on (keyset paging
  on ``seq``), lanes per agent, causes both ways, the replay report's first divergence marked on
  the rows that diverged; jumps to an offset, to the first divergence, to the next event of an
  agent or a type.
* ``/runs/{topic}/{run}/events/{seq}`` — one event: a model call as a conversation (its raw
  payload one click away), causes both ways, a divergence's recorded and replayed values side by
  side, the state of its agent before and after, the command to fork the log there.
* ``/runs/{topic}/{run}/calls`` — the run's model calls (the ``llm_calls`` view: model, tokens, latency).
* ``/runs/{topic}/{run}/state`` — an agent's state at an offset, or the diff between two.
* ``/runs/{topic}/{run}/reports`` and ``/reports/{id}`` — the replay reports published for the run.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..debug.conversation import conversation
from ..debug.diff import Change
from ..debug.logview import CausalGraph, LoggedEvent
from ..debug.timeline.model import Row, diverging_record, from_graph
from ..debug.timeline.text import GLYPHS, note
from ..errors import SwarmlogError
from ..runtime import Divergence
from ._mirror import STATUSES, MirrorReader, RunRow
from ._states import States

__all__ = ["MAX_PAGE_SIZE", "PAGE_SIZE", "create_app"]

logger = logging.getLogger(__name__)

PAGE_SIZE = 200
MAX_PAGE_SIZE = 2000

_CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'"


def create_app(*, mirror: MirrorReader, states: States | None = None) -> Starlette:
    """The console as an ASGI application (``swarmlog ui`` serves it with uvicorn)."""
    folder = resources.files(__package__)
    env = Environment(loader=FileSystemLoader(str(folder.joinpath("templates"))),
                      autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    env.filters["compact"] = lambda v: json.dumps(v, ensure_ascii=False, default=str)
    env.filters["path"] = lambda path: Change(tuple(path), "changed").path_text()
    env.globals["STATUSES"] = STATUSES
    env.globals["GLYPHS"] = GLYPHS
    pages = _Pages(mirror=mirror, states=states, env=env)
    routes = [
        Route("/", pages.runs),
        Route("/runs/{topic}/{run}", pages.timeline),
        Route("/runs/{topic}/{run}/events/{seq:int}", pages.event),
        Route("/runs/{topic}/{run}/calls", pages.calls),
        Route("/runs/{topic}/{run}/state", pages.state),
        Route("/runs/{topic}/{run}/reports", pages.reports),
        Route("/reports/{id:int}", pages.report),
        Route("/healthz", lambda request: Response("ok\n", media_type="text/plain")),
        Mount("/static", app=StaticFiles(directory=str(folder.joinpath("static"))), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={SwarmlogError: pages.error},
                     middleware=[Middleware(_SecurityHeaders)])


class _SecurityHeaders:
    """Every response: this origin's resources only, no sniffing, no referrer (pages name topics and runs)."""

    _HEADERS = [(b"content-security-policy", _CSP.encode()), (b"x-content-type-options", b"nosniff"),
                (b"referrer-policy", b"no-referrer")]

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self._HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class _Pages:
    def __init__(self, *, mirror: MirrorReader, states: States | None, env: Environment) -> None:
        self.mirror = mirror
        self.states = states
        self.env = env

    def render(self, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**values), status_code=status_code)

    def error(self, request: Request, exc: Exception) -> HTMLResponse:
        logger.warning("%s: %s", request.url.path, exc)
        return self.render("error.html", status_code=503 if "unavailable" in type(exc).__name__.lower() else 400,
                           title="error", message=str(exc))

    def _run(self, request: Request) -> RunRow:
        topic, run_id = request.path_params["topic"], request.path_params["run"]
        run = self.mirror.run(topic, run_id)
        if run is None:
            raise HTTPException(404, f"the mirror holds no run {run_id!r} in topic {topic!r}")
        return run

    # -- pages ------------------------------------------------------------------------------------------

    def runs(self, request: Request) -> HTMLResponse:
        runs = self.mirror.runs()
        status = request.query_params.get("status") or ""
        q = (request.query_params.get("q") or "").strip().lower()
        counts = {s: sum(r.status == s for r in runs) for s in STATUSES}
        shown = [r for r in runs if (not status or r.status == status)
                 and (not q or any(q in (v or "").lower() for v in (r.topic, r.run_id, r.swarm, r.code_version)))]
        return self.render("runs.html", title="runs", runs=shown, total=len(runs), counts=counts, status=status,
                           q=request.query_params.get("q") or "")

    def timeline(self, request: Request) -> Response:
        run = self._run(request)
        qp = request.query_params
        size = min(max(_int(qp.get("n"), PAGE_SIZE), 1), MAX_PAGE_SIZE)
        base = f"/runs/{quote(run.topic, safe='')}/{quote(run.run_id, safe='')}"
        at = _int(qp.get("at"), run.first_seq)
        # Jumps: to the next event of an agent or a type after `at`, or to the page holding an offset.
        if qp.get("next_agent") or qp.get("next_type"):
            found = self.mirror.next_of(run.topic, run.run_id, after=_int(qp.get("after"), at),
                                        agent=qp.get("next_agent") or None, event_type=qp.get("next_type") or None)
            if found is None:
                return self._timeline(request, run, at=at, size=size, base=base,
                                      notice=f"no {qp.get('next_type') or 'event'} "
                                             f"{('of ' + qp['next_agent']) if qp.get('next_agent') else ''} after "
                                             f"offset {_int(qp.get('after'), at)}")
            return RedirectResponse(f"{base}?{urlencode({'at': _page_start(found, size), 'n': size})}#o-{found}", 303)
        if qp.get("goto"):
            want = _int(qp.get("goto"), at)
            return RedirectResponse(f"{base}?{urlencode({'at': _page_start(want, size), 'n': size})}#o-{want}", 303)
        if qp.get("last"):
            last = self.mirror.last_page(run.topic, run.run_id, size=size)
            return RedirectResponse(f"{base}?{urlencode({'at': last if last is not None else at, 'n': size})}", 303)
        return self._timeline(request, run, at=at, size=size, base=base)

    def _timeline(self, request: Request, run: RunRow, *, at: int, size: int, base: str,
                  notice: str | None = None) -> HTMLResponse:
        events = self.mirror.page(run.topic, run.run_id, at=at, size=size + 1)
        more = len(events) > size
        events = events[:size]
        divergence, report = self._divergence(run)
        timeline = _timeline_of(run, events, divergence)
        prev = self.mirror.page_before(run.topic, run.run_id, before=events[0].offset, size=size) if events else None
        agents, types = self.mirror.agents_and_types(run.topic, run.run_id, run)
        last = events[-1].offset if events else at
        return self.render("timeline.html", title=f"{run.run_id} timeline", run=run, base=base, tl=timeline,
                           rows=timeline.rows, lanes=timeline.lanes, cells=[_cells(r, len(timeline.lanes))
                                                                           for r in timeline.rows],
                           notes=[note(r) for r in timeline.rows], size=size, at=at, more=more, prev=prev,
                           next_at=last + 1, divergence=divergence, report=report,
                           record=diverging_record(divergence), agents=agents, types=types, notice=notice,
                           first_div_page=_page_start(divergence.offset, size) if divergence else None)

    def event(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        seq = request.path_params["seq"]
        ev = self.mirror.event(run.topic, seq)
        if ev is None or ev.run_id != run.run_id:
            raise HTTPException(404, f"no event of run {run.run_id!r} at offset {seq}")
        logged = LoggedEvent(seq, ev)
        causes = self.mirror.events_at(run.topic, list(ev.causes))
        caused = self.mirror.caused(run.topic, run.run_id, seq)
        divergence, report = self._divergence(run)
        diverges = divergence is not None and seq in (divergence.offset, diverging_record(divergence))
        base = f"/runs/{quote(run.topic, safe='')}/{quote(run.run_id, safe='')}"
        return self.render("event.html", title=f"offset {seq}", run=run, base=base, e=logged, ev=ev,
                           convo=conversation(ev.event_type, ev.payload), line=logged.line(width=160),
                           causes=[(c, LoggedEvent(c, causes[c]).line(width=120) if c in causes else None)
                                   for c in ev.causes],
                           caused=[LoggedEvent(c.offset, c).line(width=120) for c in caused], caused_events=caused,
                           divergence=divergence if diverges else None, report=report,
                           headers=_headers(ev.payload), page_at=_page_start(seq, PAGE_SIZE),
                           fork_topic=f"{run.topic}.fork-{seq}")

    def calls(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        base = f"/runs/{quote(run.topic, safe='')}/{quote(run.run_id, safe='')}"
        calls = self.mirror.model_calls(run.topic, run.run_id)
        totals = {k: sum(c[k] or 0 for c in calls) for k in ("input_tokens", "output_tokens", "total_tokens")}
        return self.render("calls.html", title=f"{run.run_id} model calls", run=run, base=base, calls=calls,
                           totals=totals)

    def state(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        base = f"/runs/{quote(run.topic, safe='')}/{quote(run.run_id, safe='')}"
        qp = request.query_params
        agent = qp.get("agent") or (run.agents[0] if run.agents else "")
        at, start, end = qp.get("at"), qp.get("from"), qp.get("to")
        values: dict[str, Any] = {"run": run, "base": base, "agent": agent, "at": at or "", "start": start or "",
                                  "end": end or "", "state": None, "diff": None, "problem": None}
        try:
            if self.states is None:
                if at or start:
                    values["problem"] = ("states need the swarm's code: start `swarmlog ui --swarm module:swarm` "
                                         "(the same code `swarmlog state` takes)")
            elif start and end:
                values["diff"] = self.states.diff(topic=run.topic, swarm=run.swarm, agent=agent, start=int(start),
                                                  end=int(end))
            elif at:
                values["state"] = self.states.state(topic=run.topic, swarm=run.swarm, agent=agent, at=int(at))
        except (SwarmlogError, ValueError) as exc:
            values["problem"] = str(exc)
        return self.render("state.html", title=f"{run.run_id} state", **values)

    def reports(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        base = f"/runs/{quote(run.topic, safe='')}/{quote(run.run_id, safe='')}"
        return self.render("reports.html", title=f"{run.run_id} replay reports", run=run, base=base,
                           reports=self.mirror.reports(run.topic, run.run_id))

    def report(self, request: Request) -> HTMLResponse:
        doc = self.mirror.report(request.path_params["id"])
        if doc is None:
            raise HTTPException(404, "no such replay report")
        run = self.mirror.run(doc["topic"], doc["run_id"]) if doc.get("run_id") else None
        return self.render("report.html", title=f"replay report {doc['id']}", r=doc, run=run,
                           first=doc.get("first_divergence"))

    def _divergence(self, run: RunRow) -> tuple[Divergence | None, Any]:
        """The first divergence of the newest replay report that found one (None: no report diverged)."""
        for report in self.mirror.reports(run.topic, run.run_id):
            if report.diverged and report.first_divergence:
                d = report.first_divergence
                return Divergence(offset=int(d.get("offset", -1)), agent=str(d.get("agent", "")),
                                  detail=str(d.get("detail", "")), recorded=d.get("recorded"),
                                  replayed=d.get("replayed"), kind=str(d.get("kind", "output"))), report
        return None, None


def _timeline_of(run: RunRow, events: list[Any], divergence: Divergence | None) -> Any:
    """The timeline model (the same as ``swarmlog timeline``'s) of one page of mirrored events."""
    logged = {e.offset: LoggedEvent(e.offset, e) for e in events}
    causes = {e.offset: list(e.causes) for e in events}
    caused: dict[int, list[int]] = {}
    for e in events:
        for c in e.causes:
            caused.setdefault(c, []).append(e.offset)
    graph = CausalGraph(events=logged, causes=causes, caused=caused)
    end = events[-1].offset + 1 if events else run.first_seq
    return from_graph(graph, topic=run.topic, start=events[0].offset if events else run.first_seq, end=end,
                      order=run.agents, divergence=divergence, code_version=None)


def _cells(row: Row, lanes: int) -> list[tuple[str, str]]:
    """One ``(css class, text)`` per lane: the row's mark, or a message's arrow from sender to recipients."""
    cells = [("lane", "")] * lanes
    if row.lane is None:
        return cells
    src = row.lane
    if row.kind in ("message", "broadcast") and row.targets:
        lo, hi = min([src, *row.targets]), max([src, *row.targets])
        for i in range(lo, hi + 1):
            cells[i] = ("shaft", "")
        # The line runs from the sender's lane centre to the farthest recipient's: half cells at both ends.
        for t in row.targets:
            far = t in (lo, hi)
            cells[t] = ("head " + (("end-right" if t > src else "end-left") if far else "through"),
                        "▶" if t > src else "◀")
        side = "both" if lo < src < hi else "right" if hi > src else "left"
        cells[src] = (f"sender end-{side}" if side != "both" else "sender through", "●")
        return cells
    cells[src] = ("mark", "●" if row.kind in ("message", "broadcast") else GLYPHS.get(row.kind, "○"))
    return cells


def _headers(payload: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(h.get("name")), str(h.get("value"))) for h in payload.get("request_headers") or ()
            if isinstance(h, dict)]


def _page_start(seq: int, size: int) -> int:
    """Pages start at the offset asked for, a few rows early so that what led to it shows above it."""
    return max(0, seq - min(10, size // 4))


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default  # type: ignore[arg-type]
    except ValueError:
        return default
