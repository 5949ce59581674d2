"""Stepping through a whole run, one event at a time, both ways: what ``swarmlog step`` drives.

A :class:`Stepper` holds a :class:`~swarmlog.debug.Cursor` and calls the event *just
folded* the current one: after :meth:`forward`, every agent's state is the state after
that event, and :attr:`steps` says which agents handled it, with their state before and
after and what they wrote. It adds what a view needs on top of the cursor:

* **Back past where it started.** A cursor goes back only to its own origin (it keeps the
  messages it read, not the log before them); at its origin the stepper opens a cursor
  ``window`` offsets earlier (from the latest usable snapshot: the session's fold) and
  replays up to where it was, so going back always works, to offset zero.
* **Jumps** (:meth:`show`): to an offset, by a fresh cursor when it is behind the cursor's
  origin or far ahead (a fold from a snapshot beats stepping through everything between).
* **Breakpoints both ways** (:meth:`next_break`, :meth:`prev_break`: a reverse continue),
  with a flag that stops a long search from another thread.
* **The first divergence** of the session's code, found once (a whole replay) and kept.

Nothing here folds by itself: every state comes from the session's cursor, the fold
``swarmlog replay --swarm`` uses.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..log.protocol import STATE_DIGEST
from ..runtime.outcomes import Divergence
from ._rebuild import AgentStep
from .breakpoints import Breakpoint, first_match
from .logview import LoggedEvent
from .session import Cursor, Session

logger = logging.getLogger(__name__)

WINDOW = 500
"""Offsets a cursor opened to go back, or to jump, starts before its target: going back that far
costs no new fold."""


@dataclass(frozen=True, slots=True)
class Hit:
    """A breakpoint reached: the step it matched."""

    step: AgentStep
    breakpoint: Breakpoint


_UNSEARCHED = object()


def _is_digest(e: LoggedEvent | None) -> bool:
    return e is not None and e.event is not None and e.event_type == STATE_DIGEST


class Stepper:
    """The session's code over its log, one event at a time, forward and back (close it when done)."""

    def __init__(self, *, session: Session, at: int = 0, window: int = WINDOW, checkpoint_every: int = 200) -> None:
        self.session = session
        self.window = max(1, window)
        self._every = checkpoint_every
        self.cursor: Cursor = session.cursor(at=at, checkpoint_every=checkpoint_every)
        self._divergence: Any = _UNSEARCHED

    # -- where it is ---------------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Every message before this offset is folded."""
        return self.cursor.position

    @property
    def current(self) -> LoggedEvent | None:
        """The event just folded (None: nothing folded yet by this cursor)."""
        return self.cursor.last_event

    @property
    def steps(self) -> list[AgentStep]:
        """What the current event made agents do (none: no agent handled it)."""
        return self.cursor.last_steps

    def states(self) -> dict[str, dict[str, Any]]:
        """Every agent's state now (after the current event)."""
        return self.cursor.states()

    # -- one event at a time ----------------------------------------------------------------------

    # A state.digest record is what the log says of the step before it (the state it left), not
    # something that happens: forward folds it on the way to the next event, and back un-folds
    # it on the way to that step, so one key press is one event of the run. It is still folded
    # (the cursor checks the digest), and ``show``/``goto`` may still name its offset. The
    # digests that end a run are no event either: forward stops before them.

    def forward(self) -> bool:
        """Fold the next event (and any state digests before it); False at the end of the log."""
        before = self.cursor.position
        if self.cursor.forward() is None:
            return False
        while _is_digest(self.cursor.last_event):
            if self.cursor.forward() is None:  # only digests were left (a run's final ones): stay put
                self.cursor.goto(before)
                return False
        return True

    def back(self) -> bool:
        """Un-fold the current event (the one before it, digests aside, becomes current); False at
        offset zero."""
        if self.cursor.last_event is None:  # nothing folded by this cursor: current is the last before its origin
            if self.cursor.origin == 0:
                return False
            self._reanchor_before(self.cursor.origin)
            while _is_digest(self.cursor.last_event) and self._back_one():
                pass
            if self.cursor.last_event is None:
                return False
        if not self._back_one():
            return False
        while _is_digest(self.cursor.last_event) and self._back_one():
            pass
        return True

    def _back_one(self) -> bool:
        """Un-fold the current event, digest or not."""
        cur = self.cursor.last_event
        if cur is None:  # this cursor folded nothing yet: the event to un-fold is the last before its origin
            if self.cursor.origin == 0:
                return False
            self._reanchor_before(self.cursor.origin)
            cur = self.cursor.last_event
            if cur is None:
                return False
        self.cursor.back()
        if self.cursor.last_event is None and self.cursor.origin > 0:
            self._reanchor_before(cur.offset)  # back at the origin: which event came before is not known here
        return True

    def _reanchor_before(self, offset: int) -> None:
        """A cursor with everything before ``offset`` folded and the last event before it current."""
        span = self.window
        while True:
            anchor = max(0, offset - span)
            self._reopen(anchor)
            self.cursor.goto(offset)
            if self.cursor.last_event is not None or anchor == 0:
                return
            span *= 2  # nothing in that window but gaps: look further back

    def _reopen(self, at: int) -> None:
        old = self.cursor
        self.cursor = self.session.cursor(at=at, checkpoint_every=self._every)
        old.close()

    # -- jumps ----------------------------------------------------------------------------------------

    def goto(self, offset: int) -> None:
        """Every event before ``offset`` folded, none at or after it."""
        offset = max(0, offset)
        here = self.position
        if offset < self.cursor.origin or offset > here + self.window:
            self._reopen(max(0, offset - self.window) if offset < here else offset)
        self.cursor.goto(offset)

    def show(self, offset: int) -> bool:
        """Make the event at ``offset`` (or the first after it) the current one; False past the end."""
        self.goto(offset)
        return self.forward()

    # -- breakpoints -------------------------------------------------------------------------------

    def next_break(self, breakpoints: Iterable[Breakpoint], *, stop: threading.Event | None = None) -> Hit | None:
        """Fold forward to the next step a breakpoint matches (it becomes current); None at the end
        of the log, or where ``stop`` was set."""
        bps = list(breakpoints)
        while True:
            steps = self.cursor.forward()
            if steps is None:
                return None
            for s in steps:
                b = first_match(bps, s)
                if b is not None:
                    return Hit(s, b)
            if stop is not None and stop.is_set():
                return None

    def prev_break(self, breakpoints: Iterable[Breakpoint], *, stop: threading.Event | None = None) -> Hit | None:
        """Move back to the previous event with a step a breakpoint matches (it becomes current).

        None when there is none: the stepper is then at offset zero, as a reverse continue that
        found nothing runs back to the start (or where ``stop`` was set). The steps of what a
        cursor folded are kept, so the search reads them and moves once."""
        bps = list(breakpoints)
        cur = self.cursor.last_event
        before = cur.offset if cur is not None else self.cursor.position
        while True:
            for off, steps in reversed(self.cursor.folded):
                if off >= before:
                    continue
                for s in steps:
                    b = first_match(bps, s)
                    if b is not None:
                        self.cursor.goto(off + 1)
                        return Hit(s, b)
            origin = self.cursor.origin
            if stop is not None and stop.is_set():
                return None
            if origin == 0:
                self.cursor.goto(0)
                return None
            self._reanchor_before(origin)  # the events before this cursor's origin, a window at a time

    # -- the divergence ---------------------------------------------------------------------------

    def first_divergence(self) -> Divergence | None:
        """Where the session's code first departs from the log (a whole replay, the first time only)."""
        if self._divergence is _UNSEARCHED:
            self._divergence = self.session.first_divergence()
        d: Divergence | None = self._divergence
        return d

    def to_divergence(self) -> Divergence | None:
        """Make the event of the first divergence current; None (staying put) when the code does not diverge."""
        d = self.first_divergence()
        if d is not None:
            self.show(d.offset)
        return d

    def close(self) -> None:
        self.cursor.close()

    def __enter__(self) -> Stepper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
