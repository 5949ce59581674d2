"""The event as agents and reducers see it once it is in the log."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from typing import Any, NamedTuple

from .log.protocol import MESSAGE

__all__ = ["Event"]

_scan = json.scanner.make_scanner(json.decoder.JSONDecoder())  # type: ignore[arg-type]
"""What ``json.loads`` runs on a str, without its wrappers (``JSONDecoder.raw_decode`` at 0)."""


class Event(NamedTuple):
    """One event read from the log.

    ``offset`` is the event's place in the swarm's total order: its sequence
    number and its logical time. ``version`` is the writer's schema version;
    ``payload`` has already been read into the newest version this process knows.
    ``timestamp_ms`` is the broker's append time *as recorded in the log*
    (informational; nothing in swarmlog decides by it).
    """

    offset: int
    event_type: str
    version: int
    event_id: str
    run_id: str
    agent_id: str
    to: str | None
    causes: list[int]
    payload: dict[str, Any]
    timestamp_ms: int | None = None

    @classmethod
    def from_message(cls, msg: Any, writer: Any, record: dict[str, Any]) -> Event:
        """The event of a log message, given its writer schema and its decoded record."""
        ts_type, ts = msg.timestamp()
        return cls(msg.offset(), writer.event_type, writer.version, record["event_id"], record["run_id"],
                   record["agent_id"], record["to"], record["causes"], record["payload"], ts if ts_type else None)

    @property
    def kind(self) -> str | None:
        """An ``agent.message``'s kind (``None`` for other event types)."""
        return self.payload.get("kind") if self.event_type == MESSAGE else None

    @property
    def body(self) -> str | None:
        """An ``agent.message``'s body as sent (a string)."""
        return self.payload.get("body") if self.event_type == MESSAGE else None

    def json(self) -> Any:
        """An ``agent.message``'s body parsed as JSON (what ``ctx.send`` made of a non-string body)."""
        body = self.payload["body"]
        # json.loads is three Python frames around the C scanner; handlers call this on every
        # step, under the guard's profile hook. A body that is exactly one JSON value (what
        # ctx.send writes) is read by the scanner alone; anything else takes json.loads, which
        # gives the same value or raises its own error.
        if body.__class__ is str:
            try:
                value, end = _scan(body, 0)
            except (StopIteration, ValueError):
                return json.loads(body)
            if end == len(body):
                return value
        return json.loads(body)

    def addressed_to(self, agent: str) -> bool:
        """True for a message to ``agent`` or a broadcast from another agent."""
        return self.to == agent or (self.to is None and self.agent_id != agent)
