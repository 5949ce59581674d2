"""Invariants any swarm can be held to, beside the ones a test writes itself.

An invariant is a function of a :class:`~swarmlog.testing.SimRun` that returns False or a
message when the run violates it (or raises ``AssertionError``); anything else passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..log.protocol import HANDLER_FAILED, MESSAGE

if TYPE_CHECKING:
    from ._run import SimRun


def no_message_ignored(run: SimRun) -> str | None:
    """Every message sent to an agent reached one of its handlers: none was sent to an agent the
    swarm does not have, or of a kind its recipient has no handler for. Checked on runs that came
    to rest (a run stopped at ``max_steps`` may have messages still on their way)."""
    if not run.at_rest:
        return None
    handled = {agent: run.handled(agent) for agent in run.states}
    ignored = []
    for e in run.events():
        if e.event_type != MESSAGE or e.to is None:
            continue
        if e.to not in handled:
            ignored.append(f"{e.kind!r} from {e.agent_id} @{e.offset} is addressed to {e.to!r}, no agent of the swarm")
        elif e.offset not in handled[e.to]:
            ignored.append(f"{e.kind!r} from {e.agent_id} @{e.offset} reached no handler of {e.to}")
    return "; ".join(ignored) or None


def no_handler_failed(run: SimRun) -> str | None:
    """No handler raised (a raised handler is recorded as ``handler.failed``)."""
    failed = [f"{e.agent_id} @{e.causes[0] if e.causes else e.offset}: {e.payload['error_type']}: "
              f"{e.payload['message']}" for e in run.events() if e.event_type == HANDLER_FAILED]
    return "; ".join(failed) or None
