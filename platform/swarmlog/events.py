"""The event as agents and reducers see it once it is in the log."""

from __future__ import annotations

from typing import Any, NamedTuple


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
    def from_record(cls, offset: int, event_type: str, version: int, record: dict[str, Any],
                    timestamp_ms: int | None = None) -> Event:
        return cls(offset, event_type, version, record["event_id"], record["run_id"], record["agent_id"],
                   record["to"], record["causes"], record["payload"], timestamp_ms)

    def addressed_to(self, agent: str) -> bool:
        """True for a message to ``agent`` or a broadcast from another agent."""
        return self.to == agent or (self.to is None and self.agent_id != agent)
