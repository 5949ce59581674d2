"""A live agent: an :class:`AgentCore` on an exactly-once channel of the log.

Internal. Lifecycle of one agent process (or thread), the same on any backend
(:class:`swarmlog.log.base.AgentChannel`; on Kafka a transactional producer and a
group consumer, :mod:`swarmlog.kafka.channel`):

1. **Fence.** Opening the agent's channel aborts whatever a previous life left open
   and fences it off: a zombie of this agent can no longer commit anything.
2. **History.** A first pass over the log (:func:`.history.first_pass`): the highest step
   that has recorded outputs, the recorded effects and state digests — read past the log's
   end as of the fence, waiting for a transaction still open there (another agent's, killed
   mid-transaction) to end, so that no step this agent already took is taken for a new one.
3. **Rebuild, then live.** The agent reads from offset zero (whatever its group's
   committed offset says: restart *is* rebuild), or from its latest checkpoint once the
   log's state digest has vouched for it (:mod:`.resume`; ``SWARMLOG_CHECKPOINT_EVERY``).
   Steps up to its last recorded one are replayed and checked against the log; later
   steps run live. Nothing an earlier life wrote is written again.
4. **One batch, one transaction.** Live outputs, recorded effects and LLM calls, and
   the agent's position of a consumed batch commit together. A crash anywhere aborts
   the transaction: the next life re-runs those steps, and since their outputs never
   became visible (``read_committed`` everywhere), nothing is lost and nothing is
   duplicated.
5. **Timeouts** fire only once the agent has caught up with the log it found at
   start, so history is never pre-empted by a firing that already happened.
6. **State in the record.** The digests of a batch's live steps are written last in
   its transaction (:mod:`.digests`); the rebuild of step 3 checks every recorded one.
   A clean stop, once caught up, records the final state's digest.
7. **Reading everything, acting on little.** Every agent reads every message of the topic;
   live, each is routed by its envelope alone (``Decoder.envelope_route``: no header is read,
   so none can steer the agent), and an own output of a live step read back is not decoded.
   The first pass of step 2 routes by the headers and checks every one against the envelope,
   so a log with a lying header is refused at the next start (``RoutingHeaderMismatch``).

SIGTERM (via ``stop``) finishes the current batch's transaction and returns.

What it logs (``swarmlog.runtime._worker``): the rebuild's start and target, its progress
every ``_PROGRESS_EVERY_S`` seconds, "caught up at offset N, live", live progress when there
was any, every aborted transaction and why, and where it stopped. What it measures is read at
scrape time (:meth:`AgentWorker.metric_families`); the per-step cost is one histogram bucket.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..agent import Agent, Swarm
from ..errors import (
    AgentFenced,
    CodeVersionRefused,
    HistoryHoles,
    NondeterminismError,
    RunContinuedElsewhere,
    SwarmlogError,
    TransactionAborted,
)
from ..kafka.backend import backend_for
from ..log.base import AgentChannel, LogBackend, require_complete_history
from ..log.hotloop import fewer_collections
from ..observe import Family, LatencyHistogram, tracing
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from .anomalies import NEWER_SCHEMA, REPEATED, UNREADABLE, LogProbe
from .engine import AgentCore
from .history import first_pass
from .resume import Checkpoints
from .sink import LiveSink
from .versions import code_version

logger = logging.getLogger(__name__)

_OFFSET_COMMIT_EVERY_S = 2.0
"""A caught-up agent with nothing to write still commits its position this often, so its
group's lag stays honest."""
_DRAIN_S = 3.0
"""How long a clean stop reads on to reach the log's end (see AgentWorker._stop_cleanly)."""
_PROGRESS_EVERY_S = 30.0
"""How often a rebuilding agent logs how far it got, and a live one that it is making progress."""
_MAX_ABORTED_LIVES = 5
"""Lives in a row that end in an aborted transaction without committing anything before the
agent gives up (and its process exits, for its supervisor to restart)."""


@dataclass(slots=True)
class WorkerResult:
    agent: str
    state_hash: str
    position: int
    steps: int
    state: dict[str, Any]
    states_checked: int = 0
    """Steps of the rebuild whose state was compared with the recorded digest (all equal, or it raised)."""
    refused: str | None = None
    """Why the agent could not go on with the run (its code diverges from the log, or is not the run's
    version); None: it ran."""
    failures: tuple[str, ...] = ()
    """The agent's steps that failed and were not retried, described (``swarmlog retry`` runs them again)."""
    resumed_from: int = 0
    """The offset its last life's rebuild started from: a verified checkpoint's, or 0."""


class AgentWorker:
    """Runs one agent of a swarm live against the swarm's topic (on ``backend``; default Kafka)."""

    def __init__(self, *, settings: Settings, swarm: Swarm, agent: str | Agent, registry: SchemaRegistry | None = None,
                 topic: str | None = None, batch_size: int = 500, backend: LogBackend | None = None,
                 version_refusal: CodeVersionRefused | None = None, from_zero: bool = False) -> None:
        """``from_zero``: rebuild from offset zero, every step re-verified, whatever checkpoints there are."""
        self.settings = settings
        self.topic = topic or settings.topic
        self.swarm = swarm
        self.agent = agent if isinstance(agent, Agent) else swarm.agent(agent)
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.backend = backend_for(settings, backend)
        self.decoder = Decoder(self.registry)
        self.batch_size = batch_size
        self.stop_event = threading.Event()
        self.caught_up = threading.Event()
        """Set once the agent has rebuilt up to the end of the log it found at start."""
        self.core: AgentCore | None = None
        self._sink: LiveSink | None = None
        self.eof_at = -1
        """The log end (exclusive) the agent last read up to; transaction markers make it differ
        from the last event's offset + 1."""
        self.start_end = -1
        """The log end it found at start: rebuilt once it has read that far."""
        self.step_latency = LatencyHistogram()
        self.commit_latency = LatencyHistogram()
        self.transactions = 0
        self.transactions_aborted = 0
        self.rebuild_steps = 0
        self.heartbeat = time.monotonic()
        """Set on every turn of the loop: a stale one means it is stuck (a handler that never returns)."""
        self._committed_to = -1  # the position this life last committed
        self._last_commit = self._last_report = 0.0
        self._reported_steps = 0
        self._at_end = False  # the last poll reached the log's end, and nothing was written since
        self._channel: AgentChannel | None = None  # this life's, while it runs
        self.version_refusal = version_refusal
        """The run is pinned to another code version than this agent's (``Swarm(pin_runs=True)``; found by
        :func:`~swarmlog.runtime.run_agents`): the agent refuses it before its rebuild."""
        self.refused: str | None = None
        """Why this agent does not go on with the run (see :meth:`_park`); None while it can."""
        self.refusal: NondeterminismError | CodeVersionRefused | RunContinuedElsewhere | HistoryHoles | None = None
        """The error it refused the run with (:func:`~swarmlog.runtime.run_agents` raises it once stopped)."""
        self.from_zero = from_zero
        self.resumed_from = 0
        """Where this life's rebuild started: a verified checkpoint's position, or 0."""
        every = settings.checkpoint_every
        self.checkpoints = Checkpoints(backend=self.backend, topic=self.topic, registry=self.registry,
                                       code_version=code_version(swarm) if every > 0 else "", agent=self.agent.name,
                                       every=every)
        self._last_msg: Any = None  # the last message this life folded (a checkpoint names it)

    @property
    def channel(self) -> AgentChannel | None:
        """This life's channel to the log, once it has one."""
        return self._channel

    def stop(self) -> None:
        self.stop_event.set()
        channel = self._channel
        if channel is not None:
            channel.wake()  # a poll waiting at the end returns now (the in-memory log's would wait its timeout)

    @property
    def in_transaction(self) -> bool:
        """A transaction is open: outputs may be written but not yet visible (a coordinator
        still loading holds them back) or a commit is in flight."""
        sink = self._sink
        return sink is not None and sink.in_txn

    def run(self) -> WorkerResult:
        """Run the agent until stopped; return its final state.

        A life whose transaction the log aborted (:class:`TransactionAborted`) ends, and
        a new one begins exactly as a restarted process would: on a channel of its own,
        fenced, rebuilt from offset zero, with nothing the aborted batch did visible. On
        several brokers that happens when one dies: the agent's group coordinator moves,
        and until the consumer has rejoined, the group no longer knows the member whose
        position the transaction was to commit. A fenced life (:class:`AgentFenced`: a
        newer instance of the agent runs elsewhere) is not restarted: it would fence
        that one in turn.
        """
        name = self.agent.name
        aborted = 0
        while True:
            committed = self.transactions
            channel = self._channel = self.backend.agent_channel(self.topic, name)
            if self.stop_event.is_set():
                channel.wake()  # stopped before this life began: its polls wait for nothing
            refused: NondeterminismError | CodeVersionRefused | RunContinuedElsewhere | HistoryHoles | None = None
            try:
                return self._run(channel)
            except AgentFenced:
                raise
            except (NondeterminismError, CodeVersionRefused, RunContinuedElsewhere, HistoryHoles) as exc:
                # Parked below, once this life's channel is closed. A run continued on another topic
                # (.continued) parks its agents left on this one the same way: up, not ready, no crash loop;
                # so does a log that lost events the agent needs (a restart would find the same holes).
                refused = exc
            except TransactionAborted as exc:
                # Lives in a row that committed nothing: a cause that a new life does not cure.
                aborted = aborted + 1 if self.transactions == committed else 1
                if self.stop_event.is_set() or aborted > _MAX_ABORTED_LIVES:
                    raise
                logger.warning("agent %s: %s; starting a new life, rebuilt from offset 0", name, exc.detail)
                last = exc
            finally:
                channel.close()
            if refused is not None:
                return self._park(refused)
            self.agent = self.swarm.agent(name)  # its initial state
            self.caught_up.clear()
            self.eof_at = -1
            if self.stop_event.wait(min(aborted, 5)):
                raise last  # stopped before the new life rebuilt anything: there is no state to report

    def _park(self, exc: NondeterminismError | CodeVersionRefused | RunContinuedElsewhere | HistoryHoles,
              ) -> WorkerResult:
        """This code cannot go on with the run: say so once, in the log and through readiness, and wait
        to be stopped. Not an exit: a restarted process would refuse the same way, a crash loop that
        says nothing more. Nothing was written (a divergence is found while rebuilding, before any live
        step; a version is checked before the rebuild); the run waits for code that can go on with it."""
        name = self.agent.name
        core = self.core
        run_id = core.ctx.run_id if core is not None and core.ctx.run_id else "?"
        self.refused = f"agent {name} cannot go on with run {run_id!r} (topic {self.topic!r}): {exc}"
        self.refusal = exc
        self._channel = None
        if isinstance(exc, HistoryHoles):
            logger.error("%s. It stays up, not ready (/readyz), and does not restart: a restart would find the same "
                         "holes (docs/edges.md)", self.refused)
        else:
            logger.error("%s. It stays up, not ready (/readyz), and does not restart: deploy code that can go on "
                         "with this run (docs/evolution.md)", self.refused)
        self.stop_event.wait()
        return WorkerResult(agent=name, state_hash=core.state_hash() if core is not None else "",
                            position=core.position if core is not None else 0,
                            steps=core.steps if core is not None else 0, state=self.agent.state,
                            refused=self.refused)

    def _run(self, channel: AgentChannel) -> WorkerResult:
        name = self.agent.name
        # Restart is rebuild from offset 0: a log that lost its first offsets would rebuild
        # another state than the run's, silently. Refuse before anything is written.
        require_complete_history(self.backend, self.topic)
        if self.version_refusal is not None:
            raise self.version_refusal  # before anything is fenced or read: parked (run)
        channel.fence()
        self.checkpoints.prepare()
        sink = self._sink = LiveSink(channel=channel, registry=self.registry, agent=name)
        sink.recipients = frozenset(self.swarm.agent_names)
        core, start_end = self._rebuilding(sink)
        history = core.history
        self.start_end = start_end
        logger.info("agent %s: rebuild started from offset %d up to the log end %d (its last recorded step: %d)",
                    name, self.resumed_from, start_end, history.last_step)
        core.step_latency = self.step_latency
        traced = tracing.current()
        if traced is not None:
            core.tracer = traced.step_tracer(topic=self.topic, agent=name)
        sink.core = core
        channel.start(lambda: core.position)
        self._last_commit = self._last_report = time.monotonic()
        self._reported_steps = 0
        self._committed_to = -1
        try:
            with fewer_collections():  # a state, its history and batches alive, garbage acyclic: see log.hotloop
                while not self.stop_event.is_set():
                    self._turn(channel, sink, core, start_end)
            self._stop_cleanly(channel, sink, core, start_end)
        except BaseException as exc:
            if sink.in_txn:
                sink.in_txn = False
                self.transactions_aborted += 1
                logger.error("agent %s: transaction aborted at offset %d because of %s: %s; none of its outputs "
                             "became visible, and the next start re-runs those steps", name, core.position,
                             type(exc).__name__, exc)
                channel.abort()
            if core.tracer is not None:
                core.tracer.discard()  # those steps did not happen: the next life traces them
            raise
        logger.info("agent %s: stopped at offset %d after %d steps", name, core.position, core.steps)
        return WorkerResult(agent=name, state_hash=core.state_hash(), position=core.position, steps=core.steps,
                            state=self.agent.state, states_checked=core.states_checked,
                            failures=tuple(f.describe() for f in core.failures.values()),
                            resumed_from=self.resumed_from)

    def _rebuilding(self, sink: LiveSink) -> tuple[AgentCore, int]:
        """This life's fold, restored from the latest verified checkpoint (or fresh, from offset zero),
        and the log end its first pass found."""
        name = self.agent.name
        # Checkpoints off (the default): no look at the snapshot topic, the start is what it always was.
        use = not self.from_zero and self.checkpoints.every > 0
        checkpoint = None
        if use:
            try:
                checkpoint = self.checkpoints.latest(before=self.backend.watermarks(self.topic)[1])
            except SwarmlogError as exc:  # the snapshot topic is a cache: not reading it costs time, not the run
                logger.warning("agent %s: its checkpoints cannot be read (%s); rebuilding from offset 0", name, exc)
        if checkpoint is not None:
            core, start_end = self._fold(sink, start=checkpoint.at)
            refused = self.checkpoints.resume(core, core.history, checkpoint)  # type: ignore[arg-type]
            if refused is None:
                self.resumed_from = checkpoint.at
                # It knows which offsets hold messages only from the checkpoint on: a cause before is asked
                # of the log, so a hole is found as from offset zero (.anomalies).
                core.watch.presence.before = LogProbe(backend=self.backend, topic=self.topic)
                logger.info("agent %s: resumed from its checkpoint at offset %d (its state digest at step %d "
                            "matches the log's)", name, checkpoint.at, checkpoint.step)
                return core, start_end
            logger.warning("agent %s: its checkpoint at offset %d is refused: %s; rebuilding from offset 0 instead",
                           name, checkpoint.at, refused)
            self.agent = self.swarm.agent(name)  # the refused checkpoint's state went into the last one
        self.resumed_from = 0
        core, start_end = self._fold(sink, start=0)
        self.checkpoints.started(core)
        return core, start_end

    def _fold(self, sink: LiveSink, *, start: int) -> tuple[AgentCore, int]:
        name = self.agent.name
        # The log's end as of now, past this agent's fence: every offset below it was written by a
        # transaction that has ended or will, and the history is read past it (see first_pass).
        until = self.backend.watermarks(self.topic)[1]
        histories, start_end = first_pass(backend=self.backend, topic=self.topic, decoder=self.decoder,
                                          agents=[name], start=start, until=until, stopped=self.stop_event.is_set)
        core = self.core = AgentCore(agent=self.agent, decoder=self.decoder, history=histories[name],
                                     live_sink=sink, llm_client=self.swarm.llm, strict=True,
                                     digest_every=self.settings.state_digest_every, topic=self.topic)
        return core, start_end

    def _turn(self, channel: AgentChannel, sink: LiveSink, core: AgentCore, start_end: int) -> None:
        """One poll: fold what arrived, fire due timeouts, commit."""
        name = self.agent.name
        self.heartbeat = now = time.monotonic()
        if now - self._last_report >= _PROGRESS_EVERY_S:
            self._last_report = now
            if not self.caught_up.is_set():
                logger.info("agent %s: rebuilding, at offset %d of %d (%d steps replayed)", name,
                            core.position, start_end, core.steps)
            elif core.steps != self._reported_steps:
                logger.info("agent %s: live at offset %d, %d steps (%d in the last %.0f s)", name,
                            core.position, core.steps, core.steps - self._reported_steps, _PROGRESS_EVERY_S)
            self._reported_steps = core.steps
        wait = 0.1
        due = core.next_wall_due_ms()
        if due is not None and max(core.position, self.eof_at) >= start_end:
            wait = max(0.0, min(wait, (due - time.time() * 1000) / 1000))
        msgs, eof = channel.poll(self.batch_size, wait)
        if msgs:
            self._at_end = False
        if eof is not None:  # after the batch's messages: the end is known, up to its last marker
            self.eof_at = eof
            self._at_end = True
        # By the envelope alone: a live agent routes by no header, so none can steer it, and it
        # pays for each of the many messages that are not its business the least it can. (Its
        # first pass, .history, routes by the headers, and checks every one against the envelope.)
        route = self.decoder.envelope_route
        for m in msgs:
            core.process(m, route(m))
        if msgs:
            self._last_msg = msgs[-1]
        # Caught up once it has read as far as the log reached at its start — a parked agent too: it reads
        # on (and says it is parked), it only commits no position past its input (_read_to).
        reached = max(core.position, self.eof_at)
        read_to = self._read_to(core)
        if reached >= start_end:
            if not self.caught_up.is_set():
                self.rebuild_steps = self._reported_steps = core.steps
                self.caught_up.set()
                logger.info("agent %s: caught up at offset %d, live (%d steps replayed)", name, reached, core.steps)
            for timer in core.due_wall_timers(int(time.time() * 1000)) if core.watch.parked is None else ():
                sink.fire(timer)
        if sink.in_txn:
            self._at_end = False  # these outputs will end in a marker not read yet
        now = time.monotonic()
        # Compared with what was committed, not with the fold's position: reading on past a
        # transaction marker moves the first and not the second, and lag 0 needs the first.
        if not sink.in_txn and read_to != self._committed_to \
                and now - self._last_commit > _OFFSET_COMMIT_EVERY_S and read_to >= start_end:
            channel.begin()  # offsets only: keeps the group's lag honest
            sink.in_txn = True
        if sink.in_txn or (core.recorder is not None and core.recorder.pending):
            # Past any transaction markers we read over, so a caught-up agent shows no lag.
            self._commit(channel, sink, read_to)
            self._committed_to = read_to
            self._last_commit = now

    def _stop_cleanly(self, channel: AgentChannel, sink: LiveSink, core: AgentCore, start_end: int) -> None:
        """Commit how far this life read, past the marker of its own last transaction.

        A transaction that committed outputs ends in a marker after them, so the log's end is
        one past the outputs themselves, and is only known once the outputs were read back and
        the end of the log reached. Committing less leaves a stopped, caught-up agent with a
        lag of 1 in Kafka's own tools (and understates how far replay may trust it got). So
        read on (folding what comes, committing any step it causes) until a poll reaches the
        end with nothing left to commit, for at most _DRAIN_S.

        "The end" is at least the high watermark seen now: an end-of-partition event already
        queued from before the last step says an older end. The high watermark covers this
        life's outputs (the marker may follow them a moment later), and read_committed serves
        them only once their marker is in, so an end reported at or past it is past the marker.

        A transaction that a dead life left open (another agent's, in this process: its thread died
        between sending and committing) holds every reader's end until that agent's next life fences
        it, which no wait here brings about: where the log knows (the in-memory log), the drain ends
        when it reached that end, instead of reading on to the deadline for nothing.
        """
        read_to = self._read_to(core)
        if self.caught_up.is_set() and read_to > 0 and core.digest_due(final=True):
            # The final state first, so a token can always be made afterwards: its record and
            # its transaction's marker are then read over below like any output, and the stop
            # still ends with lag 0.
            self._commit(channel, sink, read_to, final=True)
            self._committed_to = read_to
        target = self.backend.watermarks(self.topic)[1]
        deadline = time.monotonic() + _DRAIN_S
        while not (self._at_end and self._drained(target)) and time.monotonic() < deadline:
            self._turn(channel, sink, core, start_end)
        read_to = self._read_to(core)
        if read_to > 0 and read_to != self._committed_to:
            self._commit(channel, sink, read_to)  # offsets only: no marker in the topic
            self._committed_to = read_to

    def _drained(self, target: int) -> bool:
        """At the end, this reached ``target`` or the end a dead life's open transaction holds (_stop_cleanly)."""
        return self.eof_at >= target or self.eof_at == self.backend.abandoned_end(self.topic)

    def _commit(self, channel: AgentChannel, sink: LiveSink, position: int, *, final: bool = False) -> None:
        started = time.perf_counter()
        core = self.core
        checkpoint = core is not None and self._last_msg is not None and self.checkpoints.due(core)
        wrote = False
        record = core.digest_record(position=position, final=final) if core is not None else None
        if not sink.in_txn:
            channel.begin()
            sink.in_txn = True
        if record is not None:
            sink.write_digests(record)  # last in the transaction: after every output it accounts for
            if checkpoint:
                # Beside the log, in the same transaction as the digest record that vouches for it
                # and the position it is at: all of them become visible, or none (.resume).
                wrote = self.checkpoints.write(channel, core, record, self._last_msg)  # type: ignore[arg-type]
        try:
            channel.commit(position)
        except TransactionAborted as exc:
            self.transactions_aborted += 1
            logger.error("agent %s: transaction aborted at offset %d: %s", self.agent.name, position, exc.detail)
            raise
        except Exception as exc:
            self.transactions_aborted += 1
            logger.error("agent %s: committing at offset %d failed: %s", self.agent.name, position, exc)
            raise
        finally:
            sink.in_txn = False
        self.commit_latency.observe(time.perf_counter() - started)
        self.transactions += 1
        self.checkpoints.written += wrote
        tracer = sink.core.tracer if sink.core is not None else None
        if tracer is not None:
            tracer.flush()  # the batch's steps are in the log now: only now do their spans exist

    # -- what an operator sees -------------------------------------------------------------

    def _read_to(self, core: AgentCore) -> int:
        """How far this agent has read, as its commits say: past any transaction markers it read over, but
        never past an input it parked at (.anomalies), so that how far the live agent got (its group's
        offset, what ``replay --swarm`` trusts) stays true, and its next life reads it again."""
        parked = core.watch.parked
        return parked.offset if parked is not None else max(core.position, self.eof_at)

    def readiness(self) -> str | None:
        """None once the agent is live; else what it is doing (or why it does not go on with the run: its code
        refused it, or it is parked at an input it cannot read yet)."""
        if self.refused is not None:
            return self.refused
        core = self.core
        if core is not None and core.watch.parked is not None:
            return f"agent {self.agent.name}: parked at offset {core.watch.parked.offset}: {core.watch.parked.detail}"
        if self.caught_up.is_set():
            return None
        core = self.core
        if core is None:
            return f"agent {self.agent.name}: starting"
        return f"agent {self.agent.name}: rebuilding, at offset {core.position} of {self.start_end}"

    @staticmethod
    def _anomaly_counts(core: AgentCore | None) -> dict[str, int]:
        counts = dict.fromkeys((REPEATED, UNREADABLE, NEWER_SCHEMA), 0)
        if core is not None:
            counts.update(core.watch.counts)  # counted as named: a scrape walks no list
        return counts

    def liveness(self, stall_timeout: float) -> str | None:
        """None while the loop turns; else how long it has been stuck (a handler that never returns?)."""
        if self.refused is not None:
            return None  # parked on purpose (_park): a failing /livez would restart it into the same refusal
        stalled = time.monotonic() - self.heartbeat
        if stalled > stall_timeout:
            return (f"agent {self.agent.name}: its loop has not turned for {stalled:.0f} s "
                    f"(a handler that never returns?)")
        return None

    def metric_families(self) -> list[Family]:
        """This agent's metrics, read now (``swarmlog_agent_*``, label ``agent``)."""
        core = self.core
        me = (self.agent.name,)
        steps = core.steps if core is not None else 0
        position = core.position if core is not None else 0
        rebuilt = 1.0 if self.caught_up.is_set() else (
            min(1.0, position / self.start_end) if self.start_end > 0 else 0.0)
        return [
            Family("swarmlog_agent_steps", "counter", "Steps handled since the process started (rebuild and live).",
                   ("agent",), [(me, steps)]),
            Family("swarmlog_agent_rebuild_steps", "gauge", "Steps replayed by the rebuild before turning live.",
                   ("agent",), [(me, self.rebuild_steps if self.caught_up.is_set() else steps)]),
            Family("swarmlog_agent_step_seconds", "histogram", "Time one step takes: the handler and its outputs.",
                   ("agent",), [(me, self.step_latency)]),
            Family("swarmlog_agent_commit_seconds", "histogram",
                   "Time one transaction's commit takes (outputs and position together).", ("agent",),
                   [(me, self.commit_latency)]),
            Family("swarmlog_agent_transactions", "counter", "Transactions committed.", ("agent",),
                   [(me, self.transactions)]),
            Family("swarmlog_agent_transactions_aborted", "counter", "Transactions aborted (outputs never visible).",
                   ("agent",), [(me, self.transactions_aborted)]),
            Family("swarmlog_agent_position", "gauge", "The next offset the agent reads.", ("agent",),
                   [(me, position)]),
            Family("swarmlog_agent_rebuild_target_offset", "gauge", "The log end found at start.", ("agent",),
                   [(me, self.start_end)]),
            Family("swarmlog_agent_rebuild_progress", "gauge", "Share of the rebuild done (1: caught up, live).",
                   ("agent",), [(me, rebuilt)]),
            Family("swarmlog_agent_parked", "gauge", "1 while the agent is parked at an input it cannot read yet "
                   "(a newer schema's): /readyz says which", ("agent",),
                   [(me, 1.0 if core is not None and core.watch.parked is not None else 0.0)]),
            Family("swarmlog_agent_anomalies", "counter", "Messages the agent named instead of handling: a repeated "
                   "event id, an input no schema reads, a newer schema's", ("agent", "kind"),
                   [((self.agent.name, kind), n) for kind, n in sorted(self._anomaly_counts(core).items())]),
            Family("swarmlog_agent_live", "gauge", "1 once the agent has caught up and runs live.", ("agent",),
                   [(me, 1.0 if self.caught_up.is_set() else 0.0)]),
            Family("swarmlog_agent_failed_steps", "gauge",
                   "Steps whose handler raised and that no step.retried has run again (swarmlog retry).", ("agent",),
                   [(me, len(core.failures) if core is not None else 0)]),
            Family("swarmlog_agent_refused", "gauge",
                   "1 when the agent's code cannot go on with the run (see /readyz and its log).", ("agent",),
                   [(me, 1.0 if self.refused is not None else 0.0)]),
            Family("swarmlog_agent_resumed_from_offset", "gauge",
                   "Where the agent's rebuild started: its verified checkpoint's position (0: from offset zero).",
                   ("agent",), [(me, self.resumed_from)]),
            Family("swarmlog_agent_checkpoints", "counter", "Checkpoints written (each in a committed transaction).",
                   ("agent",), [(me, self.checkpoints.written)]),
        ]
