"""Routing each message of a swarm's log to the agents it concerns, decoded once.

Internal. A swarm replay folds every message into every agent's :class:`AgentCore`,
but a message concerns few of them: its writer (which checks it against what its
replayed step wrote), the agents it is addressed to (a ``to``, or every handler of a
broadcast), every agent at ``run.started``, and an agent with a logical timer that may
come due. The routing headers say all of that without decoding anything, so the
dispatcher calls only those cores, decodes the message at most once for them, and
leaves every other core untouched. What an untouched core would have done with the
message is only counting it (``events_seen``, ``position``); :meth:`Dispatcher.sync`
brings those counters up to date, and the dispatcher sets them before it calls a core,
so a core always sees exactly the counts it would have seen folding every message.

**One decoded event per handler.** A handler may change the event it is given (its
payload is a plain dict). In a live swarm every agent decodes its own copy, so one
agent's handler can never change what another one sees, and neither may it here: the
writer's check runs first (it only reads the recorded event; a divergence report copies
what it keeps), then the event goes to the first core that may run a handler on it, and
every further one decodes a copy of its own. Agents' folds are otherwise independent
(each reads only the log), so calling the writer first changes no result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..log.protocol import (
    CONTINUED_RECORDS,
    RUN_CONTINUED,
    RUN_SEEDED,
    RUN_STARTED,
    SELF_RECORDS,
    STATE_DIGEST,
    STEP_RETRIED,
    TIMER_FIRED,
    Route,
)
from .anomalies import Presence
from .engine import UNDECODED, AgentCore

logger = logging.getLogger(__name__)


class Dispatcher:
    """Feed messages, in offset order, to the cores of ``cores`` they concern.

    Cores may start at different points of the log (restored from checkpoints taken at different
    offsets, :mod:`.resume`): the fold starts where the earliest is, and a core joins when the
    fold reaches its own position — having counted, by then, exactly the messages it would have."""

    __slots__ = ("cores", "_all", "_waiting", "_by_name", "_broadcast", "_timed", "seen", "position", "_mark")

    def __init__(self, *, cores: Sequence[AgentCore], presence: Presence | None = None) -> None:
        self._all = list(cores)
        # Every message is marked here once, for every core (each asks it about a cause it reads:
        # .anomalies): the cores see only the messages that concern them, so none can mark them.
        shared = presence if presence is not None else Presence(start=None)
        for core in self._all:
            core.share_presence(shared)
        self._mark = shared.mark
        self.position = min((c.position for c in self._all), default=0)
        self.cores = [c for c in self._all if c.position == self.position]
        self._waiting = sorted((c for c in self._all if c.position > self.position), key=lambda c: c.position)
        """Cores whose fold starts later, in the order they join."""
        self._by_name = {c.name: c for c in self.cores}
        # event type -> the cores a broadcast of it goes to (every core that handles it).
        self._broadcast: dict[str, list[AgentCore]] = {}
        for core in self.cores:
            for etype in core.handled_types:
                self._broadcast.setdefault(etype, []).append(core)
        # Cores with a timer set look at every message: a logical one may come due at any of them.
        self._timed: list[AgentCore] = [c for c in self.cores if c.timers]
        self.seen = min((c.events_seen for c in self.cores), default=0)
        if any(c.events_seen != self.seen for c in self.cores):
            raise ValueError("Dispatcher: every core must start at the same point of the log")

    def _join(self, offset: int) -> None:
        """The cores whose fold starts at or before ``offset`` join it."""
        while self._waiting and self._waiting[0].position <= offset:
            core = self._waiting.pop(0)
            if core.events_seen != self.seen:
                raise ValueError(f"Dispatcher: core {core.name} starts at offset {core.position} having seen "
                                 f"{core.events_seen} events; the fold has seen {self.seen} there")
            self.cores.append(core)
            self._by_name[core.name] = core
            for etype in core.handled_types:
                self._broadcast.setdefault(etype, []).append(core)
            if core.timers:
                self._timed.append(core)

    def apply(self, msg: Any, route: Route) -> None:
        """Fold one message into every core it concerns (``route``: its :func:`~swarmlog.log.protocol.route`)."""
        off = msg.offset()
        if self._waiting and off >= self._waiting[0].position:
            self._join(off)
        etype, writer, to, _ = route
        self._mark(off)
        if etype == STATE_DIGEST:
            # Bookkeeping that no core folds or counts (the first pass reads the digests); only its
            # last step is looked up among the offsets read (a hole there: .anomalies).
            self.position = off + 1
            digested = self._by_name.get(writer)
            if digested is not None:
                digested.digest_read(msg, route[3])
            return
        if etype in CONTINUED_RECORDS:
            # A continued run's link and seeds (.continued): bookkeeping no handler takes and no timer
            # counts. A seed restores its agent's fold, whose event count (the old topic's, the same for
            # every agent) the fold goes on from: logical timers come due where they would have.
            self.position = off + 1
            for c in self.cores:
                if etype == RUN_CONTINUED or c.name == to:
                    c.process(msg, route)
                if etype == RUN_SEEDED and c.name == to:
                    self.seen = c.events_seen
                    if c.timers and c not in self._timed:
                        self._timed.append(c)
            return
        seen = self.seen
        self.seen = seen + 1
        self.position = off + 1
        event: Any = UNDECODED
        called: AgentCore | None = None
        own = self._by_name.get(writer)
        if own is not None:
            own.events_seen = seen
            event = own.process(msg, route, event)
            called = own
            if etype == TIMER_FIRED:  # its handler may have run on it: the next core decodes its own
                event = UNDECODED
        if etype == RUN_STARTED:
            targets: Sequence[AgentCore] = self.cores
        elif to is not None:
            core = self._by_name.get(to)
            # A step.retried runs a failed step's input again: every agent takes the one addressed to it.
            targets = (core,) if core is not None and (etype in core.handled_types or etype == STEP_RETRIED) else ()
        elif etype not in SELF_RECORDS:
            targets = self._broadcast.get(etype, ())
        else:
            targets = ()
        for core in targets:
            if core is called:
                continue
            core.events_seen = seen
            core.process(msg, route, event)
            event = UNDECODED  # handed to a handler: no other core gets this one
        timed = self._timed
        if timed:
            for core in timed:
                if core is called or core in targets:
                    continue
                core.events_seen = seen
                core.process(msg, route, UNDECODED)
        # Only a core's own events set or clear its timers.
        if own is not None and bool(own.timers) != (own in timed):
            self._timed = [c for c in self.cores if c.timers]

    def sync(self) -> None:
        """Bring every core's counters to where folding every message would have left them."""
        self._join(self.position)
        for core in self._all:
            core.events_seen = self.seen
            core.position = self.position
