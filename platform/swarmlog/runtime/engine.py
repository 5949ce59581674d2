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

**Checking without lookahead.** A step's recorded outputs come *after* its
input in the log. So a replayed step's outputs wait in ``pending`` until the
recorded outputs arrive (``<agent>@<step>#<i>`` says which is which); they must
match one for one. Because an agent's transactions commit in order, a recorded
output of a later step proves every earlier step's outputs have all arrived, so
whatever is still pending for an earlier step was never written: a divergence.
Effects and LLM calls cannot wait (the handler needs their result at once); they
come from the agent's recorded history (:mod:`.history`: read by a first pass at a live
agent's start, or ahead of the fold as far as the step needs in a replay or the debugger).

**Timers.** A timer counts from its ``timer.set`` *as read from the log*, so the
counting is the same in every replay. A logical timer fires as an output of the
step during which the N-th event after it is read. A wall-clock timeout's due
time is the set event's recorded broker timestamp plus the timeout; the live
worker appends its firing (:func:`~swarmlog.log.protocol.wall_timer_id`) when due. Either way
the handler runs when the ``timer.fired`` event is read back from the log, at
its fixed place in the total order.

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

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any

from ..agent import Agent
from ..context import Context, EffectRunner, Output, OutputSink
from ..errors import (
    EffectDiverged,
    FailedStepChanged,
    NondeterminismError,
    PatchUnknown,
    SchemaNotFound,
    StateDiverged,
    SwarmlogError,
)
from ..events import Event
from ..guard import guarded
from ..log.hashing import state_hash
from ..log.protocol import (
    HANDLER_FAILED,
    MESSAGE,
    PATCH_INDEX,
    PATCH_MARKER,
    RECORDED_EFFECTS,
    RUN_STARTED,
    SELF_RECORDS,
    STATE_DIGEST,
    STEP_RETRIED,
    TIMER_CANCELLED,
    TIMER_FIRED,
    TIMER_SET,
    Route,
    parse_step,
)
from ..schema.codec import Decoder
from . import interpreter
from ._statediff import LiveStates, diff_states
from .anomalies import Presence, Watch, is_newer_schema
from .digests import DigestRecord, DigestRecorder, state_digest
from .history import RecordedHistory

logger = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "UNDECODED",
    "AgentCore",
    "Divergence",
    "FailedStep",
    "Timer",
]


_TIMER_TYPES = frozenset({TIMER_SET, TIMER_CANCELLED, TIMER_FIRED})
"""An agent's own events that change its timers: read back, they are always decoded."""


class _Undecoded:
    """The type of :data:`UNDECODED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDECODED"


UNDECODED = _Undecoded()
"""``AgentCore.process``'s "not decoded yet" (``None`` means "does not decode")."""


@dataclass(slots=True)
class Timer:
    name: str
    set_offset: int
    due_count: int | None  # logical: fires when events_seen reaches this
    due_wall_ms: int | None  # wall clock: fires when the clock passes this
    firing: bool = False  # a timer.fired was written, not yet read back


@dataclass(slots=True, frozen=True)
class FailedStep:
    """A step whose handler raised (recorded as ``handler.failed``), not retried since."""

    offset: int
    agent: str
    input: Event
    """What the handler was given: a ``step.retried`` hands it to the handler again."""
    error_type: str
    message: str

    def describe(self) -> str:
        kind = self.input.payload.get("kind") if isinstance(self.input.payload, dict) else None
        what = f"{self.input.event_type}{f' {kind!r}' if kind else ''} at offset {self.input.offset}"
        return (f"agent {self.agent!r}: step at offset {self.offset} ({what}) failed with "
                f"{self.error_type}: {self.message}")


KINDS = ("output", "effect", "state")
"""What a divergence is about, in the order divergences at one offset are reported: what the step
wrote, what it asked of the world, and last the state it left (a changed output usually changes it too)."""


@dataclass(slots=True)
class Divergence:
    offset: int
    agent: str
    detail: str
    recorded: Any = None
    replayed: Any = None
    kind: str = "output"
    """``output``, ``effect`` or ``state`` (:data:`KINDS`)."""

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "agent": self.agent, "kind": self.kind, "detail": self.detail,
                "recorded": self.recorded, "replayed": self.replayed}

    def sort_key(self) -> tuple[int, int]:
        return self.offset, KINDS.index(self.kind)


class _Unreached(Exception):
    """A replayed step needs a record the live agent never made: it never got this far."""

    def __init__(self, step: int) -> None:
        self.step = step


class _VerifySink:
    """Replayed steps: outputs wait for their recorded counterparts; effects come from the history."""

    __slots__ = ("core",)

    def __init__(self, core: AgentCore) -> None:
        self.core = core

    def write(self, out: Output, *, locate: bool) -> int | None:
        core = self.core
        rec = core.history.effect(out.event_id) if locate else None
        if locate:
            if rec is None:
                raise EffectDiverged(offset=core.ctx.now(), agent=core.name,
                                     detail=f"the step now makes a {out.event_type} the log does not have",
                                     replayed=out.payload)
            core.check(out, rec)
            return rec.offset
        core.pending.setdefault(core.ctx._step, {})[out.event_id] = out  # ctx.now(), one call less
        return None

    def recorded(self, event_id: str) -> Event | None:
        history = self.core.history
        rec = history.effect(event_id)
        if rec is None:
            parsed = parse_step(event_id)
            if parsed is not None and parsed[1] == PATCH_INDEX:
                return None  # no marker: the step was recorded on the unpatched path (ctx.patched is False)
            step = self.core.ctx.now()
            if history.past_cut(step) or step >= history.reach():
                raise _Unreached(step)  # the record lies past the cut, or the live agent never got here
            raise EffectDiverged(offset=self.core.ctx.now(), agent=self.core.name,
                                 detail="the step now calls an effect or LLM the log has no record of")
        return rec


class AgentCore:
    """The deterministic part of an agent: everything but Kafka."""

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
        self.verify_sink = _VerifySink(self)
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
        self.events_seen += 1
        if self.stopped:
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
            if decoded is UNDECODED and etype not in _TIMER_TYPES and not self.pending \
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
                    except NondeterminismError:
                        raise
                    except Exception as exc:  # recorded: replay expects the same failure here
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
        except _Unreached as exc:
            self.unverified = exc.step
            self.stopped = True  # nothing after this can be served from the log
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

    # -- own events: timers, and checking replayed outputs ----------------------------------

    def _own(self, event: Event) -> None:
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
        parsed = parse_step(event.event_id)
        if parsed is None:
            return  # a wall-clock firing: a recorded fact, nothing to check
        step = parsed[0]
        if step > self.last_recorded_step:
            self.last_recorded_step = step
        if step < self.checked_from:
            return  # written live by the fold a checkpoint restored (its state digest vouched for it)
        if self._held is not None and step > self._held[0]:
            self._unwritten_before(step)  # and the held state divergence, in its place among them
        if not self.pending:
            if step <= self.history.last_step and not self.live(step) and event.event_type not in RECORDED_EFFECTS:
                self._diverge(self._no_longer_written(step, event))
            return
        self._unwritten_before(step)
        outs = self.pending.get(step)
        out = outs.pop(event.event_id, None) if outs is not None else None
        if outs is not None and not outs:
            del self.pending[step]
        if out is None:
            if event.event_type not in RECORDED_EFFECTS:
                self._diverge(self._no_longer_written(step, event))
            return
        self.check(out, event)

    def _no_longer_written(self, step: int, event: Event) -> NondeterminismError:
        """The divergence for a recorded output of ``step`` the step no longer writes: one that names what
        to do when the output is a patch marker (older code) or a recorded failure (a fix not versioned)."""
        if event.event_type == PATCH_MARKER:
            return PatchUnknown(offset=step, agent=self.name, patch_id=event.payload["patch_id"])
        if event.event_type == HANDLER_FAILED:
            return FailedStepChanged(offset=step, agent=self.name, error_type=event.payload["error_type"],
                                     message=event.payload["message"], replayed=None)
        return NondeterminismError(offset=step, agent=self.name, recorded=_brief(event),
                                   detail="the log has an output this step no longer writes")

    def _unwritten_before(self, step: int) -> None:
        """Everything still pending for a step before ``step`` was never written: a record of ``step``
        or later has been read, and an agent's records come in step order. A held state divergence
        is reported in its place among them (after the outputs of its own step)."""
        # Steps run in offset order, so ``pending`` holds them in increasing order: the earliest is the first key.
        pending = self.pending
        while pending:
            earlier = next(iter(pending))
            if earlier >= step:
                break
            if self._held is not None and earlier > self._held[0]:
                self._release_held()
            for unwritten in pending.pop(earlier).values():
                self._diverge(NondeterminismError(offset=earlier, agent=self.name, replayed=_brief_out(unwritten),
                                                  detail="the step now writes an event the log does not have"))
        if self._held is not None and self._held[0] < step:
            self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._diverge(held[1])

    def check(self, out: Output, rec: Event) -> None:
        if (out.event_type, out.to, out.payload, out.causes) != (rec.event_type, rec.to, rec.payload, rec.causes):
            step = parse_step(out.event_id)
            if rec.event_type == HANDLER_FAILED and step is not None:
                self._diverge(FailedStepChanged(offset=step[0], agent=self.name, error_type=rec.payload["error_type"],
                                                message=rec.payload["message"], replayed=_brief_out(out)))
                return
            self._diverge(NondeterminismError(offset=step[0] if step else rec.offset, agent=self.name,
                                              detail=f"output {out.event_id} differs from the log",
                                              recorded=_brief(rec), replayed=_brief_out(out)))

    def finish(self) -> None:
        """End of a replay: outputs still pending were never written.

        A step past both how far the live agent is known to have got (its group's committed
        offset, its last recorded step: the history's ``reach``) and its last recorded output
        may simply never have run live (an unfinished run, a stopped agent), and a step whose
        outputs lie past a replay's cut cannot be compared with them: neither's outputs are
        divergences, and ``unverified`` says from where on nothing could be checked.
        """
        parked = self.watch.parked
        if parked is not None:  # it could not read its input there: nothing from there on was checked
            self.unverified = parked.offset if self.unverified is None else min(self.unverified, parked.offset)
        history = self.history
        bound = max(self.last_recorded_step + 1, history.reach())
        for step, outs in sorted(self.pending.items()):
            if self._held is not None and step > self._held[0]:
                self._release_held()
            if step >= bound or history.past_cut(step):
                self.unverified = step if self.unverified is None else min(self.unverified, step)
                continue
            for out in outs.values():
                self._diverge(NondeterminismError(offset=step, agent=self.name, replayed=_brief_out(out),
                                                  detail="the step now writes an event the log does not have"))
        self.pending.clear()
        self._release_held()

    # -- timers ---------------------------------------------------------------------------

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

    def _diverge(self, exc: NondeterminismError) -> None:
        if exc is self._raised:  # recorded where it was detected, and on its way out (strict)
            raise exc
        held = self._held
        if held is not None and exc is not held[1] and (exc.offset is None or exc.offset > held[0]):
            self._release_held()  # a later step's divergence: the held state one is the first (strict: raised)
        kind = "state" if isinstance(exc, StateDiverged) else "effect" if isinstance(exc, EffectDiverged) else "output"
        d = Divergence(offset=exc.offset if exc.offset is not None else -1, agent=self.name, detail=exc.detail,
                       recorded=exc.recorded, replayed=exc.replayed, kind=kind)
        self.divergences.append(d)
        if self.on_divergence is not None:
            self.on_divergence(d)
        if self.strict:
            self._raised = exc
            raise exc
        if isinstance(exc, EffectDiverged):
            self.stopped = True  # the handler cannot go on without the result: stop this agent here


def _brief(event: Event) -> dict[str, Any]:
    # A copy: in a swarm replay the same decoded event goes on to the handler of the agent it
    # is addressed to, which may change it (``_dispatch``); the report keeps what the log says.
    # ``offset``: where the differing record sits, so a timeline marks that row, not only the step's input.
    return copy.deepcopy({"event_type": event.event_type, "to": event.to, "payload": event.payload,
                          "causes": event.causes, "offset": event.offset})


def _brief_out(out: Output) -> dict[str, Any]:
    return {"event_type": out.event_type, "to": out.to, "payload": out.payload, "causes": out.causes}
