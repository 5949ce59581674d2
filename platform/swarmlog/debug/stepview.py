"""``swarmlog step``: step through a run in the terminal, forward and back, one event at a time.

A Textual app over a :class:`~swarmlog.debug.stepper.Stepper` (the swarm's code over its
log): on the left the log's events in order, the current one marked; on the right what
the current event made agents do — each agent's handler, its state before and after, the
change, what it wrote — and, on ``s``, every agent's state. Keys (also in the footer):

=========================  ==========================================================
``→`` ``n``                fold the next event
``←`` ``p``                back one event
``c`` / ``r``              continue to the next / previous breakpoint
``d``                      jump to the first divergence of this code from the log
``a`` / ``t``              breakpoint on the current step's agent / event type (toggle)
``b``                      a breakpoint typed in: ``agent NAME``, ``type T``, ``if EXPR``
``x``                      clear every breakpoint
``g``                      go to an offset; ``enter`` on an event in the list does too
``s``                      every agent's state, or back to the step
``escape``                 stop a running continue; close the prompt
``q``                      quit
=========================  ==========================================================

The fold reads Kafka and runs the swarm's handlers, so every move runs in a worker thread,
one at a time (a key pressed meanwhile is refused, and said); the screen is only touched
from the app's own thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Header, Input, Static

from ..errors import UsageError
from .breakpoints import AGENT, TYPE, Breakpoint, parse
from .diff import diff
from .logview import LoggedEvent
from .session import Session
from .stepper import Hit, Stepper

__all__ = ["EventList", "PAGE", "StepApp"]

logger = logging.getLogger(__name__)

PAGE = 400
"""Offsets of the log the event list holds at a time."""


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)


class EventList(DataTable[str], inherit_bindings=False):
    """The log's events: up and down move its own cursor, enter goes there; left and right are the
    app's (back and forward), never a sideways scroll of the list."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "go there", show=False),
        Binding("up", "cursor_up", show=False),
        Binding("down", "cursor_down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("home", "scroll_top", show=False),
        Binding("end", "scroll_bottom", show=False),
    ]


class StepApp(App[None]):
    """The interactive view: ``StepApp(session=..., at=..., breakpoints=[...]).run()``."""

    TITLE = "swarmlog step"
    CSS = """
    #main { height: 1fr; }
    #events { width: 52%; }
    #right { width: 48%; border-left: solid $primary-darken-2; padding: 0 1; }
    #status { height: auto; max-height: 4; background: $boost; padding: 0 1; }
    #prompt { display: none; }
    #prompt.open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,n", "step_forward", "next"),
        Binding("left,p", "step_back", "back"),
        Binding("c", "continue", "continue"),
        Binding("r", "reverse", "reverse"),
        Binding("d", "divergence", "divergence"),
        Binding("a", "break_agent", "break agent"),
        Binding("t", "break_type", "break type"),
        Binding("b", "prompt('break')", "break…"),
        Binding("x", "clear_breaks", "clear breaks", show=False),
        Binding("g", "prompt('goto')", "go to"),
        Binding("s", "toggle_states", "states"),
        Binding("escape", "stop", "stop", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, *, session: Session, at: int = 0, breakpoints: list[Breakpoint] | None = None,
                 divergence: bool = False) -> None:
        super().__init__()
        self.session = session
        self.start_at = at
        self.start_at_divergence = divergence
        self.breakpoints: list[Breakpoint] = list(breakpoints or [])
        self.stepper: Stepper | None = None
        self.busy = False
        self.refused = False
        self.stop_flag = threading.Event()
        self.message = "folding the log up to the start…"
        self.show_states = False
        self.prompt_mode: str | None = None
        self.page: tuple[int, int] | None = None
        self.page_events: list[LoggedEvent] = []
        self.divergence_offset: int | None = None

    # -- layout ---------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield EventList(id="events", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="right"):
                yield Static(id="step")
        yield Static(id="status")
        yield Input(id="prompt", disabled=True)  # not in the way of the keys until it is opened
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"{self.session.topic} · code {self.session.code_version}"
        table = self.query_one("#events", DataTable)
        table.add_columns(" ", "offset", "agent", "type", "to", "what")
        table.focus()
        self._render()
        self._run(self._open)

    def _open(self) -> str:
        self.stepper = Stepper(session=self.session, at=self.start_at)
        if self.start_at_divergence:
            d = self.stepper.to_divergence()
            self.divergence_offset = d.offset if d is not None else None
            if d is None:
                return f"code {self.session.code_version} does not diverge from the log"
            return f"at the first divergence: offset {d.offset}, {d.agent}: {d.detail}"
        return f"just before offset {self.stepper.position}: → folds the next event"

    # -- running a move -------------------------------------------------------------------------

    def _run(self, move: Callable[[], str]) -> None:
        """Run ``move`` (which returns what to say) in a worker thread, then redraw."""
        if self.busy:
            self.bell()
            self.refused = True
            self.message = "busy: the last move is still running (escape stops a continue)"
            self._render_status()
            return
        self.busy = True
        self.refused = False
        self.stop_flag.clear()
        self._render_status()

        def work() -> None:
            try:
                said = move()
                page = self._load_page()
            except UsageError as exc:
                said, page = f"{exc}", None
            except Exception as exc:  # the view stays up: the swarm's code or the log said no, and why
                logger.debug("a move failed", exc_info=True)
                said, page = f"{type(exc).__name__}: {exc}", None
            self.call_from_thread(self._done, said, page)

        self.run_worker(work, thread=True, group="nav", exit_on_error=False)

    def _done(self, said: str, page: tuple[tuple[int, int], list[LoggedEvent]] | None) -> None:
        self.busy = False
        # A key refused while the move ran would otherwise vanish under what the move says.
        self.message = f"{said} · a key pressed meanwhile was ignored: press it again" if self.refused else said
        if page is not None:
            self.page, self.page_events = page[0], page[1]
            self._fill_table()
        self._render()

    def _load_page(self) -> tuple[tuple[int, int], list[LoggedEvent]] | None:
        """The events around the current one, read again only when it moved off the page."""
        st = self.stepper
        if st is None:
            return None
        here = st.current.offset if st.current is not None else st.position
        if self.page is not None and self.page[0] <= here < self.page[1] - 20 and \
                (here >= self.page[0] + 20 or self.page[0] == 0):
            return None
        lo = max(0, here - PAGE // 4)
        hi = lo + PAGE
        return (lo, hi), list(self.session.log.events(start=lo, end=hi))

    # -- drawing ----------------------------------------------------------------------------------------

    def _fill_table(self) -> None:
        table = self.query_one("#events", DataTable)
        table.clear()
        for e in self.page_events:
            to = e.to if e.to is not None else ("*" if e.event is not None else "")
            what = e.kind or e.summary(40)
            table.add_row(" ", str(e.offset), e.agent, e.event_type, to, what, key=str(e.offset))

    def _render(self) -> None:
        self._render_table_mark()
        self.query_one("#step", Static).update(self._step_text())
        self._render_status()

    def _render_table_mark(self) -> None:
        table = self.query_one("#events", DataTable)
        st = self.stepper
        if st is None or not table.row_count:
            return
        here = st.current.offset if st.current is not None else None
        for i, e in enumerate(self.page_events):
            mark = "▶" if e.offset == here else ("!!" if e.offset == self.divergence_offset else " ")
            table.update_cell_at(Coordinate(i, 0), mark)
            if e.offset == here:
                table.move_cursor(row=i)
        if here is None:  # nothing folded yet: point at the next event
            nxt = next((i for i, e in enumerate(self.page_events) if e.offset >= st.position), None)
            if nxt is not None:
                table.move_cursor(row=nxt)

    def _render_status(self) -> None:
        st = self.stepper
        where = "loading" if st is None else f"position {st.position}"
        bps = ", ".join(str(b) for b in self.breakpoints) or "none (a, t, b to add)"
        busy = " · working…" if self.busy else ""
        self.query_one("#status", Static).update(Text(f"{where}{busy} · breakpoints: {bps}\n{self.message}"))

    def _step_text(self) -> Text:
        st = self.stepper
        out = Text()
        if st is None:
            out.append("folding the log…", style="dim")
            return out
        if self.show_states:
            out.append(f"every agent's state just before offset {st.position}\n\n", style="bold")
            for agent, state in st.states().items():
                out.append(f"{agent}\n", style="bold cyan")
                out.append(f"  {_json(state)}\n")
            return out
        e = st.current
        if e is None:
            out.append(f"just before offset {st.position}: nothing folded yet.\n", style="bold")
            out.append("→ folds the next event; c runs to the next breakpoint; d jumps to the first divergence.\n")
            return out
        self._event_text(out, e)
        steps = st.steps
        if not steps:
            out.append("\nno agent's handler ran on this event\n", style="dim")
        for s in steps:
            ran = f"runs {s.handler} (its handler run #{s.number})" if s.handler else "reads it (no handler)"
            out.append(f"\n{s.agent} ", style="bold cyan")
            out.append(f"{ran}\n")
            out.append("  before: ", style="dim")
            out.append(f"{_json(s.before)}\n")
            out.append("  after:  ", style="dim")
            out.append(f"{_json(s.after)}\n")
            changes = diff(s.before, s.after)
            if changes:
                out.append("  changed:\n", style="dim")
            for c in changes:
                if c.kind == "changed":
                    out.append(f"    ~ {c.path_text()}: {_json(c.before)} -> {_json(c.after)}\n", style="yellow")
                elif c.kind == "added":
                    out.append(f"    + {c.path_text()}: {_json(c.after)}\n", style="green")
                else:
                    out.append(f"    - {c.path_text()}: {_json(c.before)}\n", style="red")
            if not s.outputs:
                out.append("  wrote nothing\n", style="dim")
            for o in s.outputs:
                kind = o["payload"].get("kind") if isinstance(o.get("payload"), dict) else None
                what = f"{o['event_type']} {kind}" if kind else o["event_type"]
                to = o["to"] if o["to"] is not None else "*"
                out.append(f"  wrote {what} → {to}: ", style="green")
                out.append(f"{_json(o['payload'])}\n")
            for d in s.divergences:
                out.append(f"  !! diverges: {d.detail}\n", style="bold red")
        # Searched already (d, or --divergence): first_divergence() only answers from what it kept.
        first = st.first_divergence() if self.divergence_offset is not None else None
        if first is not None and first.offset == e.offset:
            out.append(f"\n!! the code first diverges here ({first.agent}): {first.detail}\n",
                       style="bold white on red")
            if first.replayed is not None:
                out.append(f"   now writes: {_json(first.replayed)}\n", style="red")
            if first.recorded is not None:
                out.append(f"   recorded:   {_json(first.recorded)}\n", style="red")
        return out

    def _event_text(self, out: Text, e: LoggedEvent) -> None:
        out.append(f"offset {e.offset}  ", style="bold")
        if e.event is None:
            out.append(f"does not decode: {e.error}\n", style="red")
            return
        to = e.to if e.to is not None else "every other agent"
        out.append(f"{e.agent} → {to}  ", style="bold")
        out.append(f"{e.event_type}{' ' + e.kind if e.kind else ''}\n", style="bold magenta")
        out.append(f"  {e.summary(160)}\n")
        if e.causes:
            out.append(f"  caused by {', '.join(map(str, e.causes))}\n", style="dim")

    # -- actions --------------------------------------------------------------------------------------

    def _need(self) -> Stepper:
        if self.stepper is None:
            raise UsageError("still folding the log up to the start")
        return self.stepper

    def action_step_forward(self) -> None:
        def move() -> str:
            st = self._need()
            return "" if st.forward() else "the end of the log"
        self._run(move)

    def action_step_back(self) -> None:
        def move() -> str:
            st = self._need()
            return "" if st.back() else "the start of the log"
        self._run(move)

    def action_continue(self) -> None:
        self._continue(forward=True)

    def action_reverse(self) -> None:
        self._continue(forward=False)

    def _continue(self, *, forward: bool) -> None:
        if not self.breakpoints:
            self.message = "no breakpoints: a (this agent), t (this event type) or b (any) adds one"
            self._render_status()
            return
        bps = list(self.breakpoints)

        def move() -> str:
            st = self._need()
            hit = st.next_break(bps, stop=self.stop_flag) if forward else st.prev_break(bps, stop=self.stop_flag)
            if hit is None:
                if self.stop_flag.is_set():
                    return "stopped"
                return "no breakpoint until the end of the log" if forward else "no breakpoint back to offset 0"
            return _hit_text(hit)
        self._run(move)

    def action_divergence(self) -> None:
        def move() -> str:
            st = self._need()
            d = st.to_divergence()
            if d is None:
                return f"no divergence: code {self.session.code_version} does exactly what the log recorded"
            self.divergence_offset = d.offset
            return f"first divergence: offset {d.offset}, {d.agent}: {d.detail}"
        self._run(move)

    def action_break_agent(self) -> None:
        st = self.stepper
        steps = st.steps if st is not None else []
        if not steps:
            self.message = "no step here: a breakpoint on an agent needs an event some agent handled"
        else:
            self._toggle(Breakpoint.agent(steps[0].agent))
        self._render_status()

    def action_break_type(self) -> None:
        st = self.stepper
        e = st.current if st is not None else None
        if e is None or e.event is None:
            self.message = "no event here"
        else:
            self._toggle(Breakpoint.event_type(f"{e.event_type}:{e.kind}" if e.kind else e.event_type))
        self._render_status()

    def _toggle(self, bp: Breakpoint) -> None:
        same = [b for b in self.breakpoints if (b.kind, b.value) == (bp.kind, bp.value)]
        if same:
            self.breakpoints = [b for b in self.breakpoints if b not in same]
            self.message = f"breakpoint removed: {bp}"
        else:
            self.breakpoints.append(bp)
            self.message = f"breakpoint added: {bp}"

    def action_clear_breaks(self) -> None:
        self.breakpoints = []
        self.message = "every breakpoint cleared"
        self._render_status()

    def action_toggle_states(self) -> None:
        self.show_states = not self.show_states
        self._render()

    def action_stop(self) -> None:
        if self.prompt_mode is not None:
            self._close_prompt()
            return
        if self.busy:
            self.stop_flag.set()

    def action_prompt(self, mode: str) -> None:
        self.prompt_mode = mode
        box = self.query_one("#prompt", Input)
        box.value = ""
        box.placeholder = ("agent NAME | type TYPE[:KIND] | if EXPRESSION   (names: step event agent handler "
                           "offset type kind before after outputs)") if mode == "break" else "offset to go to"
        box.disabled = False
        box.add_class("open")
        box.focus()

    def _close_prompt(self) -> None:
        self.prompt_mode = None
        box = self.query_one("#prompt", Input)
        box.remove_class("open")
        box.disabled = True
        self.query_one("#events", DataTable).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        mode, text = self.prompt_mode, event.value.strip()
        self._close_prompt()
        if not text:
            return
        if mode == "break":
            try:
                self._toggle(parse(text))
            except UsageError as exc:
                self.message = str(exc)
            self._render_status()
        elif mode == "goto":
            if not text.isdigit():
                self.message = f"an offset is a number, not {text!r}"
                self._render_status()
                return
            self._goto(int(text))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self._goto(int(event.row_key.value))

    def _goto(self, offset: int) -> None:
        def move() -> str:
            st = self._need()
            if not st.show(offset):
                return f"nothing at or after offset {offset}: the end of the log"
            return ""
        self._run(move)


def _hit_text(hit: Hit) -> str:
    b = hit.breakpoint
    s = hit.step
    why = f" (the condition raised {b.last_error})" if b.last_error else ""
    what = {AGENT: "agent", TYPE: "type"}.get(b.kind, "condition")
    return f"breakpoint ({what} {b.value}){why}: offset {s.offset}, {s.agent} runs {s.handler}"
