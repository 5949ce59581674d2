"""An agent's timers, as its fold counts them from the log.

A timer counts from its ``timer.set`` *as read from the log*, so the counting is the same in every
replay. A logical timer fires as an output of the step during which the N-th event after it is read.
A wall-clock timeout's due time is the set event's recorded broker timestamp plus the timeout; the
live worker appends its firing (:func:`~swarmlog.log.protocol.wall_timer_id`) when due. Either way
the handler runs when the ``timer.fired`` event is read back from the log, at its fixed place in the
total order.

:class:`TimerFold` is the part of :class:`~.engine.AgentCore` that keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..events import Event
from ..log.protocol import TIMER_CANCELLED, TIMER_FIRED, TIMER_SET

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["TIMER_TYPES", "Timer", "TimerFold"]


TIMER_TYPES = frozenset({TIMER_SET, TIMER_CANCELLED, TIMER_FIRED})
"""An agent's own events that change its timers: read back, they are always decoded."""


@dataclass(slots=True)
class Timer:
    name: str
    set_offset: int
    due_count: int | None  # logical: fires when events_seen reaches this
    due_wall_ms: int | None  # wall clock: fires when the clock passes this
    firing: bool = False  # a timer.fired was written, not yet read back


class TimerFold:
    """An agent's timers by name, set, cancelled and fired by its own events read back from the log."""

    timers: dict[str, Timer]
    events_seen: int
    """Events of the swarm read so far (digest records are bookkeeping: not counted)."""
    ctx: Context

    def _timer_event(self, event: Event) -> None:
        """One of the agent's own ``timer.*`` events read back."""
        t = event.event_type
        p = event.payload
        if t == TIMER_SET:
            after_events, after_ms = p["after_events"], p["after_ms"]
            self.timers[p["name"]] = Timer(
                name=p["name"], set_offset=event.offset,
                due_count=self.events_seen + after_events if after_events is not None else None,
                due_wall_ms=(event.timestamp_ms or 0) + after_ms if after_ms is not None else None)
        elif t == TIMER_CANCELLED:
            self.timers.pop(p["name"], None)
        elif t == TIMER_FIRED:
            timer = self.timers.get(p["name"])
            if timer is not None and timer.set_offset == p["set_offset"]:
                del self.timers[p["name"]]

    def _logical_due(self) -> bool:
        if not self.timers:
            return False
        n = self.events_seen
        for t in self.timers.values():
            if t.due_count is not None and not t.firing and t.due_count <= n:
                return True
        return False

    def _fire_logical(self, off: int) -> None:
        n = self.events_seen
        for t in sorted(self.timers.values(), key=lambda t: t.set_offset):
            if t.due_count is not None and not t.firing and t.due_count <= n:
                t.firing = True
                self.ctx.output_timer_fired(name=t.name, set_offset=t.set_offset, clock="events",
                                            causes=[t.set_offset, off])

    def due_wall_timers(self, now_ms: int) -> list[Timer]:
        return [t for t in self.timers.values()
                if t.due_wall_ms is not None and not t.firing and t.due_wall_ms <= now_ms]

    def next_wall_due_ms(self) -> int | None:
        # Also asked by the run's quiet watcher, another thread, while this agent's thread sets and fires
        # timers: iterating the dict there could meet it changing size. tuple() copies the values in one C
        # call, which no other thread interleaves under the GIL.
        dues = [t.due_wall_ms for t in tuple(self.timers.values()) if t.due_wall_ms is not None and not t.firing]
        return min(dues) if dues else None
