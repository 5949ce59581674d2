"""Messages no agent handles: a misspelt kind, a recipient that is no agent.

An ``agent.message`` whose recipient has no handler for its kind, or whose recipient is no agent
of the swarm, is read by every agent and acted on by none: the run goes on as if it had never been
sent, and nothing says so. It is not an error of the log (a message is a fact, whatever reads it),
so swarmlog does not refuse it; it says so: live, a warning as it happens (the recipient warns of a
kind it has no handler for, the sender of a recipient that is no agent), and ``swarmlog check
unhandled`` lists every such message of a log (:func:`unhandled_messages`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..agent import Agent
from ..events import Event
from ..log.base import LogBackend
from ..log.protocol import MESSAGE
from ..schema.registry import SchemaRegistry
from .scan import LogScan

logger = logging.getLogger(__name__)

__all__ = ["SwarmHandlers", "Unhandled", "unhandled_messages"]


class SwarmHandlers:
    """What a swarm's agents handle, asked of their handler tables (one fresh agent each)."""

    def __init__(self, agents: Sequence[Agent]) -> None:
        self._agents = {a.name: a for a in agents}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._agents)

    def why_unhandled(self, event: Event, *, writers: Collection[str] = ()) -> str | None:
        """Why no agent acts on ``event`` (None: one does, or it is no message). ``writers``: names that
        wrote to the log without being agents (a client, an operator): a recipient among them reads
        the log itself."""
        if event.event_type != MESSAGE:
            return None
        kind = event.payload.get("kind")
        if event.to is None:
            if any(a.handler_for(event) is not None for name, a in self._agents.items() if name != event.agent_id):
                return None
            return f"a broadcast of kind {kind!r} that no agent has a handler for"
        agent = self._agents.get(event.to)
        if agent is None:
            if event.to in writers:
                return None
            return f"sent to {event.to!r}, which is no agent of the swarm ({', '.join(sorted(self._agents))})"
        if agent.handler_for(event) is None:
            return f"agent {event.to!r} has no handler for kind {kind!r}"
        return None


@dataclass(frozen=True, slots=True)
class Unhandled:
    """One message no agent acts on."""

    offset: int
    writer: str
    to: str | None
    kind: str | None
    reason: str

    def describe(self) -> str:
        return f"offset {self.offset}: {self.kind!r} from {self.writer!r}: {self.reason}"


def unhandled_messages(*, backend: LogBackend, topic: str, registry: SchemaRegistry,
                       agents: Sequence[Agent], scan: LogScan | None = None) -> list[Unhandled]:
    """Every message of ``topic``'s log that no agent of ``agents`` acts on, in log order.

    Read as the engine reads (:class:`.scan.LogScan`: what is not an event is named and skipped, a copy
    is not a second message). Only what it reports is kept: whether a recipient that is no agent reads the
    log itself (a client) is known once every writer is, at the end."""
    handlers = SwarmHandlers(agents)
    names = handlers.names
    writers: set[str] = set()
    found: list[Unhandled] = []
    for event in scan if scan is not None else LogScan(backend=backend, topic=topic, registry=registry):
        if event.agent_id not in names:
            writers.add(event.agent_id)
        if event.event_type != MESSAGE:
            continue
        reason = handlers.why_unhandled(event)
        if reason is not None:
            found.append(Unhandled(offset=event.offset, writer=event.agent_id, to=event.to, kind=event.kind,
                                   reason=reason))
    # A recipient that is no agent but wrote to the log (a client, an operator) reads the log itself:
    # known once every writer is, at the end.
    return [u for u in found if u.to is None or u.to in names or u.to not in writers]
