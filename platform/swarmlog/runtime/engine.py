"""One agent's fold over the log: routing, steps, timers, and checking against the record.

The engine of the runtime, public inside the package: every tool that runs an agent's
code over a log drives an :class:`AgentCore` message by message, in offset order — the
live worker (``_worker``), the swarm replayer (``_replayer``), the debugger
(:mod:`swarmlog.debug`) and the simulator (through :mod:`.driven`). It knows nothing of
Kafka (``tests/unit`` drive it over a recorded log), and what it needs of the recorded
history it asks one seam (:mod:`.history`).

**Live or replayed.** Every step is either *live* (its outputs go into the
agent's Kafka transaction) or *replayed* (its outputs are checked against what
the log recorded, and effects are served from it). A step at offset X is
replayed when the log already holds outputs of this agent for a step at or
after X: an earlier life of the agent got that far, so everything up to there
is history to reproduce, not to write again.

**Checking without lookahead.** A replayed step's outputs wait for their records, which come
after its input in the log (:mod:`.verify`); its effects and LLM calls are served from the
agent's recorded history (:mod:`.history`: read by a first pass at a live agent's start, or ahead
of the fold as far as the step needs in a replay or the debugger).

**Timers** count from their ``timer.set`` as read from the log and fire as events read back at
their place in the total order (:mod:`.timers`).

**State.** After each step the agent's state is digested: a live step's digest goes
into the record (:mod:`.digests`), a replayed step's is compared with the recorded
one right away, so a state that departs without any output departing is a
:class:`~swarmlog.errors.StateDiverged` at the step where it first departs. At one
offset an output divergence is reported before a state one (:data:`KINDS`), by every
fold: a strict one, which raises the first it finds, holds a state divergence until the
step's outputs have all been checked — its transaction's digest record, the last record
of the transaction, proves they have all been read, as a record of a later step does.
Digest records are bookkeeping, not events of the swarm: logical timers do not count them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from inspect import isawaitable
from typing import Any

from ..agent import Agent
from ..context import Context, EffectRunner, Output, OutputSink
from ..errors import CheckpointUnreadable, NondeterminismError, SchemaNotFound, StateDiverged, SwarmlogError
from ..events import Event
from ..guard import guarded
from ..log.hashing import state_hash
from ..log.protocol import (
    CONTINUED_RECORDS,
    HANDLER_FAILED,
    MESSAGE,
    RUN_SEEDED,
    RUN_STARTED,
    SELF_RECORDS,
    STATE_DIGEST,
    STEP_RETRIED,
    TIMER_FIRED,
    Route,
)
from ..schema.codec import Decoder
from . import continued, interpreter
from ._statediff import LiveStates, diff_states
from .anomalies import Presence, Watch, is_newer_schema
from .digests import DigestRecord, DigestRecorder, state_digest
from .history import RecordedHistory
from .outcomes import Divergence, FailedStep
from .timers import TIMER_TYPES, Timer, TimerFold
from .verify import RecordCheck, Unreached, VerifySink

logger = logging.getLogger(__name__)

__all__ = ["UNDECODED", "AgentCore"]


class _Undecoded:
    """The type of :data:`UNDECODED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDECODED"


UNDECODED = _Undecoded()
"""``AgentCore.process``'s "not decoded yet" (``None`` means "does not decode")."""


class AgentCore(TimerFold, RecordCheck):
    """The deterministic part of an agent: everything but Kafka. Its timers are kept by
    :class:`~.timers.TimerFold`, its replayed outputs checked by :class:`~.verify.RecordCheck`."""

    def __init__(self, *, agent: Agent, decoder: Decoder, history: RecordedHistory, live_sink: OutputSink | None,
                 llm_client: Any = None, strict: bool = True,
                 on_divergence: Callable[[Divergence], None] | None = None,
                 run_effect: EffectRunner | None = None, digest_every: int = 0,
                 live_states: LiveStates | None = None, presence: Presence | None = None,
                 topic: str = "") -> None:
        self.agent = agent
        self.name = agent.name
        self.watch = Watch(agent=agent.name,
                           presence=presence if presence is not None else Presence(topic=topic, start=None))
        """What this agent names instead of handling (:mod:`.anomalies`): repeated ids, inputs it
        cannot read (parked at a newer schema's), holes."""
        self._marks = presence is None
        """Whether this core marks the offsets it reads itself (a fold of many agents shares one
        :class:`~.anomalies.Presence`, marked once by its dispatcher). ``topic`` names the log in what it says."""
        self._decode_error: SwarmlogError | None = None
        self.decoder = decoder
        self.history = history
        """What the agent recorded (:mod:`.history`): effects, digests, where its history ends."""
        self.ctx = Context(agent=agent.name, registry=decoder.registry, llm_client=llm_client,
                           run_effect=run_effect)
        self.live_sink = live_sink
        self.verify_sink = VerifySink(self)
        self.strict = strict
        self.on_divergence = on_divergence
        self.divergences: list[Divergence] = []
        self.pending: dict[int, dict[str, Output]] = {}
        self.timers: dict[str, Timer] = {}
        self.events_seen = 0
        self.position = 0  # next offset to read
        self.steps = 0
        self.last_recorded_step = -1
        self.unverified: int | None = None  # first step past what the live agent ever reached
        self.run_pin: tuple[int | None, str | None] | None = None
        """The string-hash seed and algorithm ``run.started`` recorded (None: not read yet)."""
        self.stopped = False  # a non-strict replay that could not go on (an effect it cannot serve)
        self.stopped_at: int | None = None
        """The step it stopped at: its own records of earlier steps are still read and checked."""
        self.step_latency: Any = None
        """A :class:`~swarmlog.observe.LatencyHistogram` the live worker gives; None in replay."""
        self.tracer: Any = None
        """A :class:`~swarmlog.observe.tracing.StepTracer` when tracing is configured: it sees each
        step begin and end (and what it writes), nothing else."""
        self._handled = agent.handled_types()
        self._raised: NondeterminismError | None = None  # recorded and raised already (strict)
        self._held: tuple[int, StateDiverged] | None = None
        """A strict fold's state divergence (and its step), raised once the step's outputs have all been checked."""
        self.recorder = DigestRecorder(agent=agent.name, every=digest_every, last=history.last_digest) \
            if live_sink is not None and digest_every > 0 else None
        """Live steps' digests until the worker writes them (None: this agent records none)."""
        self.live_states = live_states
        self.states_checked = 0
        """Replayed steps whose state was compared with its recorded digest."""
        self.state_mismatches = 0
        self.state_diverged_at: int | None = None
        self.failures: dict[int, FailedStep] = {}
        """Steps whose handler raised and that no ``step.retried`` has run again yet, by offset: live and
        replayed alike (a replay fails where the live run failed), so a restarted agent knows them too."""
        self.checked_from = 0
        """Steps before it were run by a live fold restored from its checkpoint (:mod:`.resume`): their
        outputs, read after the checkpoint's position, are what that fold wrote, not records to check."""

    def digest_read(self, msg: Any, last: int | None = None) -> int | None:
        """One of this agent's state digest records read: the last step it digests is an offset that held
        its input. If none is there any more, the log lost it (:class:`~swarmlog.errors.HistoryHoles`): what
        is left of a compacted log is each key's newest message — often an agent's last digest record,
        which names no cause — so a fold from it would otherwise rebuild nothing and carry on.
        ``last``: the step its route gives (a route checked against the envelope has it), else read here.
        Returns that last step (None: the record names none)."""
        if last is None:
            last = self.decoder.step(msg)
        if last is not None:
            self.watch.check_step(last, msg.offset())
        return last

    def share_presence(self, presence: Presence) -> None:
        """Ask ``presence``, marked by whoever feeds this core (a dispatcher of many cores, which gives
        each only the messages that concern it), about the offsets read, instead of marking them here."""
        self.watch.presence = presence
        self._marks = False

    # -- the fold -----------------------------------------------------------------------

    @property
    def handled_types(self) -> frozenset[str]:
        """The event types this agent has handlers for."""
        return self._handled

    def process(self, msg: Any, route: Route, decoded: Event | None | _Undecoded = UNDECODED,
                ) -> Event | None | _Undecoded:
        """Fold one message, given its routing headers (:func:`swarmlog.log.protocol.route`).

        ``decoded``: the message's event if the caller decoded it already (``None``: it does not
        decode; :data:`UNDECODED`, the default: decode it here if it is needed). Returns the event
        as decoded here or given (:data:`UNDECODED` if it was not needed), so that a caller folding
        many agents decodes a message once (``_dispatch``).
        """
        due, event = self._take(msg, route, decoded)
        if due is not None:
            self.step(*due)
        return event

    def take(self, msg: Any, route: Route) -> tuple[int, Event | None] | None:
        """Fold one message up to its step: the step it makes due, as ``(offset, input)``, or None.

        :meth:`process` runs the step at once; a single-threaded driver that chooses when
        each agent's step happens (the simulator, :mod:`swarmlog.runtime.driven`) calls
        :meth:`step` later, and reads nothing more for this agent until it has. ``input`` is
        None for a step that only fires logical timers.
        """
        return self._take(msg, route, UNDECODED)[0]

    def _take(self, msg: Any, route: Route, decoded: Event | None | _Undecoded,
              ) -> tuple[tuple[int, Event | None] | None, Event | None | _Undecoded]:
        """:meth:`take`, and the event as decoded here or given (for :meth:`process`)."""
        etype, writer, to, _ = route
        off = msg.offset()
        self.position = off + 1
        if self._marks:
            self.watch.presence.mark(off)
        if etype == STATE_DIGEST:
            # Bookkeeping, read by the history (.history); not an event timers count. But an agent's
            # digest record is the last record of its transaction: every output of the steps up to
            # the record's last step has been read by now. And that last step is an offset that held
            # its input: if none is there any more, the log lost it (.anomalies).
            if writer == self.name:
                last = self.digest_read(msg, route[3])
                if last is not None and (self.pending or self._held is not None):
                    self._unwritten_before(last + 1)
            return None, decoded
        if etype in CONTINUED_RECORDS:
            # A continued run's link and its seeds (.continued): they set the run and restore the fold; not events.
            if etype != RUN_SEEDED or route[2] == self.name:
                record = self._decode(msg) if decoded is UNDECODED else decoded
                if not isinstance(record, Event):
                    raise self._decode_error or CheckpointUnreadable(agent=self.name, reason="its seed does not decode")
                continued.take(self, record, route)
            return None, decoded
        self.events_seen += 1
        if self.stopped:
            if writer == self.name and self.pending:
                self._check_before_stop(msg, route, decoded)
            return None, decoded
        me = self.name
        parked = self.watch.parked
        if parked is not None and (writer != me or not self._before(parked.offset, msg, route)):
            # Parked at an input it cannot read yet (.anomalies): nothing from there on is handled or
            # checked. Its own records of earlier steps still are: a step's transaction may commit after
            # the input it parks at was appended.
            return None, decoded
        event: Event | None
        if writer == me:
            if decoded is UNDECODED and etype not in TIMER_TYPES and not self.pending \
                    and self.live_sink is not None:
                step = self.decoder.step(msg)
                if step is not None and step > self.history.last_step:
                    # A live step's own output read back: there is nothing to check it against
                    # and nothing it changes but how far this agent has recorded, which its id
                    # says. Not decoded: this is a fifth of what a ring agent reads.
                    if step > self.last_recorded_step:
                        self.last_recorded_step = step
                    if self.timers and parked is None and self._logical_due():
                        return (off, None), decoded
                    return None, decoded
            event = self._decode(msg) if decoded is UNDECODED else decoded  # type: ignore[assignment]
            if event is None and parked is None:
                self._own_unreadable(msg, route, decoded)
            # A copy of one of its own records (a repeated id) is named, never checked as an output
            # this step no longer writes; a cause the log lost stops the agent (.anomalies).
            if event is not None and self.watch.take(event):
                self._own(event)
                if event.event_type == TIMER_FIRED and event.to == me and parked is None:
                    return (off, event), event
            decoded = event
        elif etype == RUN_STARTED or (etype in self._handled
                                      and (to == me or (to is None and etype not in SELF_RECORDS))) \
                or (etype == STEP_RETRIED and to == me):
            event = self._decode(msg) if decoded is UNDECODED else decoded  # type: ignore[assignment]
            if event is None:
                # Addressed to it and not readable: named, never dropped in silence; one of a newer
                # schema parks the agent here until it is upgraded (.anomalies).
                if decoded is not UNDECODED:
                    self._decode(msg)  # the caller's decode failed: this one says why
                if self._decode_error is not None:
                    self.watch.unreadable(off, self._decode_error)
            elif not self.watch.take(event):
                event = None  # a copy: not handled a second time
            else:
                if event.event_type == RUN_STARTED:
                    # Before any handler runs: a pinned run's handlers only run in an interpreter
                    # that hashes strings as the one that recorded it (set order; swarmlog.runtime.interpreter).
                    self.run_pin = (event.payload.get("hash_seed"), event.payload.get("hash_algorithm"))
                    interpreter.require(run_id=event.run_id, seed=self.run_pin[0], algorithm=self.run_pin[1])
                    self.ctx.set_run(run_id=event.run_id, seed=event.payload["seed"])
                if event.event_type in self._handled and (event.to in (None, me)):
                    return (off, event), event
                if event.event_type == STEP_RETRIED and event.to == me:
                    return (off, event), event  # runs the failed step's input again (step())
            decoded = event
        elif to == me and etype == MESSAGE and self.live_sink is not None and off > self.history.last_step:
            # A message for this agent, which handles no message at all: said once, as it happens.
            event = self._decode(msg) if decoded is UNDECODED else decoded  # type: ignore[assignment]
            if event is not None:
                self._unhandled(event)
            decoded = event
        if self.timers and self.watch.parked is None and self._logical_due():
            return (off, None), decoded
        return None, decoded

    def _check_before_stop(self, msg: Any, route: Route, decoded: Event | None | _Undecoded) -> None:
        """A stopped fold runs no more steps, but one of its records of a step before the stop is still
        checked against what that step wrote: an agent's transaction may commit its earlier steps' outputs
        after the input it stopped at, and a change there is the first divergence, not "never written"."""
        step = route[3]
        if step is None:
            step = self.decoder.step(msg)
        if step is None or self.stopped_at is None or step >= self.stopped_at:
            return
        event = self._decode(msg) if decoded is UNDECODED else decoded
        if isinstance(event, Event) and self.watch.take(event):
            self._check_own(event)

    def _own_unreadable(self, msg: Any, route: Route, decoded: Event | None | _Undecoded) -> None:
        """One of its own records does not decode. Of a newer schema — a newer version of this agent wrote
        it, this reader is older (a replay on the old schemas of a run whose agents were upgraded) — what
        that step did cannot be checked: the fold parks at the step (.anomalies), and what the step wrote
        waits unverified, not "never written"."""
        if decoded is not UNDECODED:
            self._decode(msg)  # the caller's decode failed: this one says why
        error = self._decode_error
        if error is None or not is_newer_schema(error):
            return
        step = route[3]
        if step is None:
            step = self.decoder.step(msg)
        step = msg.offset() if step is None else step
        self.watch.unreadable(step, error, record=msg.offset())
        for s in [s for s in self.pending if s >= step]:
            del self.pending[s]
        if self._held is not None and self._held[0] >= step:
            self._held = None
        self.unverified = step if self.unverified is None else min(self.unverified, step)

    def _before(self, offset: int, msg: Any, route: Route) -> bool:
        """Whether one of this agent's records is of a step before ``offset`` (a wall-clock firing, which
        names no step, by its own offset)."""
        step = route[3]
        if step is None:
            step = self.decoder.step(msg)
        return (step if step is not None else msg.offset()) < offset

    def live(self, offset: int) -> bool:
        return self.live_sink is not None and offset > self.history.last_step

    def step(self, off: int, event: Event | None) -> None:
        """Run the step at ``off`` (its handler, then the logical timers it makes fire)."""
        live_sink = self.live_sink
        live = live_sink is not None and off > self.history.last_step
        if event is not None and event.event_type == STEP_RETRIED:
            event = self._retried_input(off, event, live=live)
        sink = live_sink if live_sink is not None and live else self.verify_sink
        tracer = self.tracer
        if tracer is not None:
            sink = tracer.begin(self, off, event, sink)
        ctx = self.ctx
        ctx.begin(step=off, event=event, sink=sink, live=live)
        try:
            if event is not None:
                handler = self.agent.handler_for(event)
                if handler is not None:
                    self.steps += 1
                    started = time.perf_counter()
                    try:
                        with guarded(agent=self.name, offset=off):
                            result = handler(ctx, event)
                            if result is not None and isawaitable(result):
                                ctx.run(result)  # an async def handler: its coroutine, on the step's loop
                        if ctx.signal is not None:
                            raise ctx.signal  # the handler caught what stops its replay, and went on
                    except (NondeterminismError, Unreached):
                        raise
                    except Exception as exc:  # recorded: replay expects the same failure here
                        if ctx.signal is not None:
                            raise ctx.signal from exc  # it caught what stops its replay, then failed otherwise
                        failed = FailedStep(offset=off, agent=self.name, input=event, error_type=type(exc).__name__,
                                            message=str(exc))
                        self.failures[off] = failed
                        if self.live(off):
                            logger.error("%s; recorded as %s (run %s): what the step was to do is not done. "
                                         "Deploy the fix behind a versioned step (ctx.patched) and run `swarmlog "
                                         "retry` to run the step again (docs/evolution.md)", failed.describe(),
                                         HANDLER_FAILED, ctx.run_id, exc_info=exc)
                        ctx.emit(HANDLER_FAILED, {"error_type": failed.error_type, "message": failed.message},
                                 to=self.name)
                    if self.step_latency is not None:
                        self.step_latency.observe(time.perf_counter() - started)
                    if self.timers:
                        self._fire_logical(off)
                    self._stepped(off)
                    return
                if live and event.event_type == MESSAGE and event.to == self.name:
                    self._unhandled(event)
            if self.timers:
                self._fire_logical(off)
        except NondeterminismError as exc:
            self._diverge(exc)
        except Unreached as exc:
            self.unverified = exc.step
            self.stopped = True  # nothing after this can be served from the log
            self.stopped_at = off
        finally:
            ctx.end()
            if tracer is not None:
                tracer.end(self, off, event)

    def _unhandled(self, event: Event) -> None:
        """A live message for this agent that no handler of it takes (:mod:`.unhandled`)."""
        logger.warning("agent %s: the message at offset %d from %s (kind %r) is for it and it has no handler for "
                       "that kind: nothing acts on it (a misspelt kind? `swarmlog check unhandled` lists them all)",
                       self.name, event.offset, event.agent_id, event.kind)

    def _retried_input(self, off: int, retry: Event, *, live: bool) -> Event | None:
        """The input of the failed step a ``step.retried`` names (None: that step did not fail here, or was
        retried already: nothing to run). The failure stays recorded where it happened; the step runs
        again here, at the retry's offset, with the code running now: a fix behind ``ctx.patched`` takes
        its new path, since this step is live (and replays with the marker it recorded)."""
        failed = self.failures.pop(int(retry.payload["failed_step"]), None)
        if failed is None:
            (logger.warning if live else logger.debug)(
                "agent %s: step.retried at offset %d names step %s, which did not fail (or was retried already): "
                "nothing to run again", self.name, off, retry.payload["failed_step"])
            return None
        if live:
            logger.info("agent %s: running the step that failed at offset %d again at offset %d (%s)", self.name,
                        failed.offset, off, failed.input.event_type)
        return failed.input

    # -- state: recorded live, checked on replay ---------------------------------------------

    def _stepped(self, off: int) -> None:
        """After a handler ran at ``off``: record the state's digest (live) or check it (replayed)."""
        if self.live(off):
            if self.recorder is not None:
                self.recorder.stepped(off, self.agent.state, self.steps)
            return
        expected = self.history.digest_at(off)
        if expected is None:
            return  # not digested live (an old log, K > 1, a step the live agent never reached)
        actual = state_digest(self.agent.state, agent=self.name, offset=off)
        self.states_checked += 1
        if actual == expected:
            return
        self.state_mismatches += 1
        if self.state_diverged_at is not None:
            return  # reported where it first departed; a departed state differs at most steps after
        self.state_diverged_at = off
        diff = None
        if self.live_states is not None:
            live = self.live_states.state_at(self.name, off)
            if live is not None:
                diff = diff_states(live, self.agent.state)
        exc = StateDiverged(offset=off, agent=self.name, recorded_digest=expected.hex(),
                            replayed_digest=actual.hex(), diff=diff)
        if self.strict:
            # Held until the step's outputs have all been checked (its transaction's digest record, a
            # record of a later step, or the end): at one offset an output divergence is reported
            # before a state one, and a strict fold, which raises the first it finds, must find it first.
            self._held = (off, exc)
            return
        self._diverge(exc)

    def digest_due(self, *, final: bool) -> bool:
        """A ``state.digest`` record is due: live steps ran since the last one; at a stop
        (``final``), also unless the log's latest record of this agent already holds this state.
        A stop after a step writes nothing more, as the step's own transaction recorded the state
        after it (a token reads each agent's latest record); so does a restart that stepped
        nowhere, though it read further: with no step in between, the state as of the earlier
        position is the state now. Writing nothing at a stop is also what lets every stopped
        agent end with lag 0: a record one agent wrote as it stopped would be unread by the rest."""
        rec = self.recorder
        if rec is None:
            return False
        if rec.pending:
            return True
        if not final:
            return False
        last = rec.last
        return not (last is not None
                    and last.state == state_digest(self.agent.state, agent=self.name, offset=self.position))

    def digest_record(self, *, position: int, final: bool) -> DigestRecord | None:
        """The record the worker writes now, into the open transaction, if one is due."""
        if self.recorder is None or not self.digest_due(final=final):
            return None
        return self.recorder.take(self.agent.state, position=position, final=final)

    # -- own events ------------------------------------------------------------------------

    def _own(self, event: Event) -> None:
        """One of its own records read back: its timers follow it, and it is checked against the step."""
        if event.event_type in TIMER_TYPES:
            self._timer_event(event)
        self._check_own(event)

    # -- results --------------------------------------------------------------------------

    def state_hash(self) -> str:
        return state_hash(self.agent.state)

    def _decode(self, msg: Any) -> Event | None:
        try:
            writer, rec = self.decoder.decode(msg.value(), msg.offset())
        except SchemaNotFound as exc:
            self._decode_error = self.decoder.unknown_writer(exc, msg.headers())  # what its headers say it is
            return None
        except SwarmlogError as exc:
            self._decode_error = exc  # not an event: the sink dead-letters it; the readers name it
            return None
        return Event.from_message(msg, writer, rec)


