"""A live agent's outputs into its open transaction: the sink a live step writes through.

Every live step of an :class:`~swarmlog.runtime.engine.AgentCore` writes through a
:class:`LiveSink`: its outputs, recorded effects and LLM calls are encoded (each event type
by its newest version's encoder) and sent on the agent's
:class:`~swarmlog.log.base.AgentChannel` inside the transaction the sink opens at the first
write; the driver (the live worker, ``_worker``; the simulator's :class:`~swarmlog.runtime.driven.DrivenAgent`)
commits it with the agent's position. A replayed step writes through the engine's verifying
sink instead, and nothing reaches the log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..context import Output
from ..events import Event
from ..guard import allowed
from ..log.base import AgentChannel
from ..log.protocol import (
    H_STEP,
    MESSAGE,
    STATE_DIGEST,
    TIMER_FIRED,
    parse_step,
    state_digest_id,
    stop_digest_id,
    wall_timer_id,
)
from ..schema.codec import Encoder
from ..schema.registry import SchemaRegistry
from .digests import DigestRecord

if TYPE_CHECKING:
    from .engine import AgentCore
    from .timers import Timer

logger = logging.getLogger(__name__)

__all__ = ["LiveSink"]


class LiveSink:
    """Live steps: outputs go into the agent's open transaction."""

    __slots__ = ("channel", "registry", "agent", "agent_b", "core", "in_txn", "_encoders", "recipients")

    def __init__(self, *, channel: AgentChannel, registry: SchemaRegistry, agent: str,
                 encoders: dict[str, Encoder] | None = None) -> None:
        self.channel = channel
        self.registry = registry
        self.agent = agent
        self.agent_b = agent.encode()
        self.core: AgentCore | None = None
        self.in_txn = False
        self._encoders: dict[str, Encoder] = {} if encoders is None else encoders
        """Event type -> its newest version's encoder; a caller that makes many sinks in one
        thread (the simulator) shares one cache between them."""
        self.recipients: frozenset[str] | None = None
        """The swarm's agents (None: not checked): a message sent to anyone else is warned about, unless it
        answers the writer of the step's input (a client reads the log itself)."""

    def write(self, out: Output, *, locate: bool) -> int | None:
        if not self.in_txn:
            self.channel.begin()
            self.in_txn = True
        enc = self._encoders.get(out.event_type)
        if enc is None:
            enc = self._encoders[out.event_type] = Encoder(self.registry.latest(out.event_type))
        if out.to is not None and self.recipients is not None and out.event_type == MESSAGE \
                and out.to not in self.recipients:
            self._unknown_recipient(out)
        run_id = self.core.ctx.run_id if self.core is not None else ""
        value = enc.encode_event(out.event_id, run_id, self.agent, out.to, out.causes, out.payload)
        headers = enc.headers(self.agent_b, None if out.to is None else out.to.encode())
        step = parse_step(out.event_id)
        if step is not None:
            headers = [*headers, (H_STEP, str(step[0]).encode())]  # a new list: the encoder's is shared
        if locate:
            # Swarmlog's own I/O, inside the handler's guard: waiting for the offset serves the
            # client's callbacks on this thread (librdkafka's error and log events, which read the
            # clock to say when; they come when a broker is down), and those are not the handler's.
            with allowed():
                return self.channel.send_located(value, self.agent_b, headers)
        self.channel.send(value, self.agent_b, headers)
        return None

    def _unknown_recipient(self, out: Output) -> None:
        event = self.core.ctx._event if self.core is not None else None
        if event is not None and event.agent_id == out.to:
            return  # an answer to whoever wrote the input: a client, which reads the log itself
        with allowed():  # inside the handler: the warning is swarmlog's, not the handler's I/O
            logger.warning("agent %s: sends %r to %r, which is no agent of the swarm (%s): no agent acts on it (a "
                           "misspelt name? `swarmlog check unhandled` lists them all)", self.agent,
                           out.payload.get("kind"), out.to, ", ".join(sorted(self.recipients or ())))

    def write_digests(self, record: DigestRecord) -> None:
        """The ``state.digest`` record, into the open transaction after the batch's outputs."""
        enc = self._encoders.get(STATE_DIGEST)
        if enc is None:
            enc = self._encoders[STATE_DIGEST] = Encoder(self.registry.latest(STATE_DIGEST))
        if record.steps:
            event_id = state_digest_id(self.agent, record.steps[-1])
        else:
            event_id = stop_digest_id(self.agent, record.position)
        run_id = self.core.ctx.run_id if self.core is not None else ""
        value = enc.encode_event(event_id, run_id, self.agent, self.agent, (), record.payload())
        headers = enc.headers(self.agent_b, self.agent_b)
        if record.steps:
            # The next life's first pass counts these steps as history: checked, never recorded twice.
            headers = [*headers, (H_STEP, str(record.steps[-1]).encode())]  # the encoder's list is shared
        self.channel.send(value, self.agent_b, headers)

    def recorded(self, event_id: str) -> Event | None:
        return None

    def fire(self, timer: Timer) -> None:
        """Write a due wall-clock timeout's firing (read back, it runs the handler at its place in
        the log). Its id names the ``timer.set``, so whichever life fires it, it is written once."""
        timer.firing = True
        self.write(Output(wall_timer_id(self.agent, timer.set_offset), TIMER_FIRED,
                          {"name": timer.name, "set_offset": timer.set_offset, "clock": "wallclock"},
                          self.agent, [timer.set_offset]), locate=False)
