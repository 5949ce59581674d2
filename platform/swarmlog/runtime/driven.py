"""One agent driven a step at a time, in one thread: the seam a simulator drives a swarm through.

Public inside the package (the simulator, :mod:`swarmlog.testing`). The live worker
(``_worker``) reads batches and runs each step as soon as it has read its input; what
happens *between* agents is up to the machine. A :class:`DrivenAgent` runs the same agent on
the same machinery — an :class:`AgentCore` on an :class:`~swarmlog.log.base.AgentChannel`,
its outputs encoded and written by the worker's own live sink, one transaction per step
committed with the agent's position and, last in it, the digest of the state the step left
(:mod:`.digests`, as the worker records it), its recorded history read by the same first pass
(:mod:`.history`) — and leaves the *when* to its caller:

* :meth:`advance` reads the agent's next messages until one makes a live step due
  (:attr:`due`, not yet run) or the committed end of the log. Messages that make no
  step are folded at once: nobody else can observe when an agent read past them. Nor
  steps of history (a restarted agent rebuilding from offset zero): they write nothing.
* :meth:`step` runs the due step and commits its outputs and its state's digest with the
  agent's position;
  :meth:`step_and_die` runs it and stops as a process killed before its commit: the
  transaction stays open until the agent's next life fences it off and aborts it.
* :meth:`fire` writes the firings of the wall-clock timeouts due at a given time, as the
  worker does between batches — and, like the worker, only once the agent has caught
  up with the log it found at start, so history is never pre-empted.
* :meth:`stop` ends the life cleanly, committing how far it read, as the worker does.

**Why this is the interleaving.** A driven agent reads nothing more for an agent until its
due step has run, so the agent sees the log exactly as a live agent would whose step
took that long (a slow effect, a slow model, a slow machine). Which agent's due step
runs next, and when a timeout fires relative to them, is the whole of what can differ
between two runs of the same swarm on the same inputs; a caller that chooses them
explores the runs the swarm can have.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..agent import Agent
from ..context import EffectRunner
from ..events import Event
from ..log.base import BATCH, LogBackend
from ..log.protocol import Route, route
from ..schema.codec import Decoder, Encoder
from .engine import AgentCore
from .history import RecordedHistory, first_pass
from .sink import LiveSink
from .timers import Timer

logger = logging.getLogger(__name__)

__all__ = [
    "DrivenAgent",
]

_FOREVER_MS = 1 << 62
"""A time past every timeout: what is armed is what would be due then."""


class DrivenAgent:
    """One live agent of ``topic`` on ``backend``, stepped by its caller (see the module)."""

    def __init__(self, *, backend: LogBackend, topic: str, agent: Agent, decoder: Decoder, llm_client: Any = None,
                 run_effect: EffectRunner | None = None, encoders: dict[str, Encoder] | None = None,
                 history: RecordedHistory | None = None, digest_every: int = 0) -> None:
        """``history``: the agent's recorded history when the caller already knows it (a
        :class:`~swarmlog.runtime.history.NoHistory` for a log with no outputs of this agent yet);
        else a first pass reads it here, as the worker does. ``digest_every``: its live steps'
        state digests recorded as the worker records them (``SWARMLOG_STATE_DIGEST_EVERY``; 0: none),
        so that a later life checks the states as well as the outputs of its history."""
        name = agent.name
        self.name = name
        self.channel = backend.agent_channel(topic, name)
        self.channel.fence()
        start_end = 0
        if history is None:
            histories, start_end = first_pass(backend=backend, topic=topic, decoder=decoder, agents=[name])
            history = histories[name]
        self.start_end = start_end
        """The log end this life found at start: it fires nothing before it has read that far."""
        self.sink = LiveSink(channel=self.channel, registry=decoder.registry, agent=name, encoders=encoders)
        self.core = AgentCore(agent=agent, decoder=decoder, history=history, live_sink=self.sink, llm_client=llm_client,
                              strict=True, run_effect=run_effect, digest_every=digest_every, topic=topic)
        self.sink.core = self.core
        self.channel.start(lambda: self.core.position)
        self.due: tuple[int, Event | None] | None = None
        """The step the agent has read its input for and not yet run: (input offset, input)."""
        self.held: tuple[Any, Route] | None = None
        """A message :meth:`advance` was told to stop before (not folded yet)."""
        self._buffer: deque[Any] = deque()
        self._eof = -1
        self._committed = -1

    # -- reading --------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Messages read from the channel and not folded yet."""
        return len(self._buffer)

    def advance(self, hold: Callable[[Route], bool] | None = None) -> None:
        """Read until a step is due or the committed end of the log; with ``hold``, stop before
        a message for which ``hold(route)`` is true, leaving it in :attr:`held`."""
        core = self.core
        buf = self._buffer
        while self.due is None and self.held is None:
            if not buf:
                msgs, eof = self.channel.poll(BATCH, 0)
                if eof is not None:
                    self._eof = eof
                if not msgs:
                    return
                buf.extend(msgs)
            msg = buf.popleft()
            r = route(msg.headers())
            if hold is not None and hold(r):
                self.held = (msg, r)
                return
            due = core.take(msg, r)
            if due is not None and not core.live(due[0]):
                core.step(*due)  # history: checked against the log, writes nothing
                due = None
            self.due = due

    def read_held(self) -> None:
        """Fold the held message (it may make a step due)."""
        if self.held is None:
            return
        (msg, r), self.held = self.held, None
        self.due = self.core.take(msg, r)

    # -- writing --------------------------------------------------------------------------

    def step(self) -> tuple[int, bool]:
        """Run the due step and commit its outputs: (its input offset, whether a handler ran)."""
        off, ran = self._run_due()
        self._commit()
        return off, ran

    def step_and_die(self) -> tuple[int, bool]:
        """Run the due step, then stop as a process killed before its commit would: nothing is
        committed or aborted (the next life's fence aborts it), and this stepper is done."""
        off, ran = self._run_due()
        self.channel.close()  # its consumer leaves the group, as a dead member is evicted
        return off, ran

    @property
    def caught_up(self) -> bool:
        """This life has read as far as the log reached when it started."""
        return max(self.core.position, self._eof) >= self.start_end

    def armed(self) -> list[Timer]:
        """The wall-clock timeouts this agent has read back and could fire (once caught up), not
        yet fired or seen cancelled."""
        if not self.caught_up:
            return []
        return self.core.due_wall_timers(_FOREVER_MS)

    def fire(self, now_ms: int) -> list[Timer]:
        """Write the firing of every timeout due at ``now_ms`` (in the agent's order, as the worker
        does between batches) and commit; return them. Nothing before the agent caught up."""
        timers = self.core.due_wall_timers(now_ms) if self.caught_up else []
        try:
            for timer in timers:
                self.sink.fire(timer)
        except BaseException:
            self._abort()
            raise
        self._commit()
        return timers

    def stop(self) -> None:
        """Stop cleanly, as the worker does: record how far this life read (an offsets-only
        transaction, or the final state's digest record when one is due), so that the group says
        how far the live agent got, then close."""
        read_to = max(self.core.position, self._eof)
        final = self.caught_up and read_to > 0 and self.core.digest_due(final=True)
        if final or (read_to > 0 and read_to != self._committed):
            self.channel.begin()
            self.sink.in_txn = True
            self._commit(read_to, final=final)
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _run_due(self) -> tuple[int, bool]:
        if self.due is None:
            raise RuntimeError(f"agent {self.name}: no step is due")
        (off, event), self.due = self.due, None
        core = self.core
        before = core.steps
        try:
            core.step(off, event)
        except BaseException:
            self._abort()
            raise
        return off, core.steps != before

    def _commit(self, position: int | None = None, *, final: bool = False) -> None:
        """Commit the open transaction with the agent's position, the digests of its live steps
        last in it (as the worker does: a step that wrote nothing still records its state)."""
        sink = self.sink
        at = self.core.position if position is None else position
        record = self.core.digest_record(position=at, final=final)
        if record is not None:
            if not sink.in_txn:
                self.channel.begin()
                sink.in_txn = True
            sink.write_digests(record)  # last in the transaction: after every output it accounts for
        if sink.in_txn:
            try:
                self.channel.commit(at)
                self._committed = at
            finally:
                sink.in_txn = False

    def _abort(self) -> None:
        if self.sink.in_txn:
            self.sink.in_txn = False
            self.channel.abort()
