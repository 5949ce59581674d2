"""Replaying a whole swarm's code against its log.

Internal; the public entry point is :func:`swarmlog.replay_swarm`.

Every agent's handlers re-run, in offset order, on the inputs the log recorded;
effects and LLM calls are served from the log; every output is compared with the
one the log recorded for that step, and every step's resulting state with the
digest the live agent recorded for it (``digests``). Nothing is written. With the
code that made the log, the result is the live state hashes and no divergence. With
changed code, it says where the changed program first diverges, and the state it
would have reached on the same inputs: a "what if" on a production failure.

With ``group``, the fold reads as a member of that consumer group (the replay Job's own,
never an agent's): the group is reset to the log start through the admin API first, or,
with ``reset=False``, must already be there (``kafka-consumer-groups --reset-offsets
--to-earliest --execute``); at the end the group commits where the replay stopped, so
Kafka's own tools show how far it got. The agents keep running: their groups are not
touched. Progress is logged every ``_PROGRESS_EVERY_S`` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..agent import Agent, Swarm
from ..errors import UsageError
from ..log.base import BATCH, LogBackend, read_from_log_start
from ..log.hashing import StreamHasher
from ..log.hotloop import fewer_collections
from ..log.protocol import RUN_CONTINUED, agent_group
from ..observe import tracing
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from . import _processes
from ._dispatch import Dispatcher
from ._statediff import LiveStates
from .anomalies import Anomaly, LogProbe, Presence
from .checkpoint import capture, restore
from .engine import AgentCore
from .history import LogHistory, steps_past
from .outcomes import Divergence
from .resume import Checkpoint, Checkpoints
from .versions import code_version

logger = logging.getLogger(__name__)

_PROGRESS_EVERY_S = 10.0

READ_BATCH = BATCH
"""Messages the fold's reader reads at a time (the replay's batch)."""


@dataclass(slots=True)
class SwarmReplayResult:
    """What re-running a swarm's code against its log gave."""

    end_offset: int
    """The next offset after the replayed range (exclusive)."""
    events: int
    agents: dict[str, str]
    """Agent -> sha256 of its ``state`` after the replay."""
    stream_hash: str
    divergences: list[Divergence] = field(default_factory=list)
    """Every place the code now does something other than what the log recorded, in offset order."""
    steps: dict[str, int] = field(default_factory=dict)
    unverified_from: dict[str, int] = field(default_factory=dict)
    """Agent -> first offset whose outputs could not be checked: the live agent never got that far."""
    states: dict[str, Any] = field(default_factory=dict, repr=False)
    states_checked: dict[str, int] = field(default_factory=dict)
    """Agent -> steps whose state was compared with the digest the live run recorded for them."""
    states_recorded: dict[str, int] = field(default_factory=dict)
    """Agent -> per-step state digests the log holds (0: an old log, or digests were off)."""
    swarm: str = ""
    """The name of the swarm whose code was replayed."""
    anomalies: list[Anomaly] = field(default_factory=list)
    """Messages the agents named instead of handling (:mod:`.anomalies`), in offset order: a repeated
    event id, an input no schema reads, one of a newer schema (the agent parks there: unverified from it).
    Each agent keeps the first of each kind and its latest :data:`~.anomalies.KEPT_ANOMALIES`."""
    anomalies_omitted: int = 0
    """Anomalies the agents named and counted but did not keep one by one (not in :attr:`anomalies`)."""
    continued: bool = False
    """The log starts with a continued run's link (``swarmlog continue``): its agents started from their seeds."""
    link: Any = None
    """A continued topic's link, followed (:class:`swarmlog.continuation.LinkCheck`): whether the old
    topic's part replays to the seeds this topic starts from; None: the topic continues none, or it was not
    followed."""
    resumed_from: dict[str, int] = field(default_factory=dict)
    """Agent -> the position of the verified checkpoint its fold started from (``from_checkpoints``); the
    agents not named folded from the log start. Steps before a checkpoint were not re-run: empty for a
    full re-verification, and a stream hash of only what was read (from the earliest checkpoint on)."""
    folds: dict[str, Any] = field(default_factory=dict, repr=False)
    """Agent -> its whole fold at the end (:func:`.checkpoint.capture`), when asked for (``folds=True``:
    what ``swarmlog continue`` seeds a new topic with)."""

    @property
    def first_divergence(self) -> Divergence | None:
        return min(self.divergences, key=Divergence.sort_key) if self.divergences else None

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "end_offset": self.end_offset,
            "events": self.events,
            "agents": dict(sorted(self.agents.items())),
            "stream_hash": self.stream_hash,
            "steps": dict(sorted(self.steps.items())),
            "diverged": first is not None,
            "first_divergence": first.to_json() if first else None,
            "divergences": len(self.divergences),
            "unverified_from": dict(sorted(self.unverified_from.items())),
            "states_checked": dict(sorted(self.states_checked.items())),
            "states_recorded": dict(sorted(self.states_recorded.items())),
            "anomalies": [a.to_json() for a in self.anomalies],
            "anomalies_omitted": self.anomalies_omitted,
            **({"resumed_from": dict(sorted(self.resumed_from.items()))} if self.resumed_from else {}),
            **({"continues": self.link.to_json()} if self.link is not None else {}),
        }


MIN_EVENTS_TO_SPLIT = 20_000
"""A log shorter than this is replayed in one process unless ``workers`` asks for more: a forked
process's start (its own Kafka connection, its first fetch) would cost more than its share of the work."""


@dataclass(slots=True)
class _AgentOutcome:
    """What replaying one agent gave: the pieces of :class:`SwarmReplayResult` that are per agent."""

    hash: str
    steps: int
    state: Any
    states_checked: int
    states_recorded: int
    unverified: int | None
    divergences: list[Divergence]
    anomalies: list[Anomaly] = field(default_factory=list)
    anomalies_omitted: int = 0
    fold: dict[str, Any] | None = None


@dataclass(slots=True)
class _PartOutcome:
    """What one process's fold gave: its agents' outcomes, and where its reading ended."""

    end: int
    events: int
    stream_hash: str | None
    agents: dict[str, _AgentOutcome]
    continued: bool = False


def replay_swarm_log(*, backend: LogBackend, swarm: Swarm, topic: str, registry: SchemaRegistry,
                     to: int | None = None, strict: bool = False, group: str | None = None, reset: bool = True,
                     progress: Callable[[int, int], None] | None = None,
                     live_states: LiveStates | None = None, workers: int | None = None,
                     from_checkpoints: bool = False, folds: bool = False) -> SwarmReplayResult:
    """``workers``: processes to fold the agents in, at most one per agent (None: one per CPU this
    process may use, and one for a log shorter than :data:`MIN_EVENTS_TO_SPLIT`; see ``_processes``).
    A strict replay, one with ``live_states`` and one under tracing run in one process.

    ``from_checkpoints``: each agent's fold starts from its latest checkpoint of this code version
    that the log's state digest vouches for (:mod:`.resume`; refused ones are logged, and that
    agent folds from the log start), and the log is read from the earliest of them: the steps
    before are not re-run. Not with a cut, a group or ``live_states`` (those replay from the start).

    ``folds``: also capture every agent's whole fold at the end (``result.folds``)."""
    decoder = Decoder(registry)
    logger.info("replaying swarm %s against topic %s%s%s", swarm.name, topic,
                f" up to offset {to}" if to is not None else "", f" as consumer group {group}" if group else "")
    agents = swarm.agents()
    names = [a.name for a in agents]
    low, high = backend.watermarks(topic)
    # Exact at a cut: the state is the prefix's alone (nothing at or past the cut is scanned); what
    # lies past it only tells a step whose outputs the cut left out (unverified) from one that wrote none.
    cut = to if to is not None and to < high else None
    past = (steps_past(backend=backend, topic=topic, decoder=decoder, agents=names, start=cut)
            if cut is not None else {})
    committed: dict[str, int] = {}
    for name in names:
        # How far each live agent got: its committed position, or past its last recorded step (known
        # as the history scans).
        at = backend.committed(agent_group(topic, name), topic)
        committed[name] = at if at is not None else -1
    starts = (_verified_checkpoints(backend=backend, topic=topic, registry=registry, decoder=decoder, swarm=swarm,
                                    names=names, before=high)
              if from_checkpoints and cut is None and group is None and live_states is None else {})
    if starts and len(starts) == len(names):
        low = min(cp.at for cp in starts.values())  # every fold starts at a checkpoint: read from the earliest
    total = (min(high, to) if to is not None else high) - low
    traced = tracing.current()
    n = processes_for(workers, agents=len(agents), events=total,
                       alone=strict or live_states is not None or traced is not None)
    # The first process also hashes the stream: it takes the smaller shares.
    groups = sorted((agents[i::n] for i in range(n)), key=len)
    slots = _processes.Slots(n, initial=low)

    def fold(part: _processes.Part) -> _PartOutcome:
        first = part.index == 0
        report = None
        if first and progress is not None:
            def report(position: int, _: int) -> None:
                progress(min(slots[i] if i else position for i in range(n)) - low, total)
        return _fold(backend=backend.after_fork() if part.in_child else backend, topic=topic, decoder=decoder,
                     agents=groups[part.index], low=low, to=to, cut=cut, past=past, committed=committed,
                     strict=strict, group=group if first else None, reset=reset, hash_stream=first,
                     progress=report, total=total, part=part, live_states=live_states, traced=traced,
                     swarm=swarm, starts=starts, folds=folds)

    if n > 1:
        logger.info("replay of %s: %d processes fold its %d agents (%s)", swarm.name, n, len(agents),
                    "; ".join(",".join(a.name for a in g) for g in groups))
    parts = _processes.run_parts([fold] * n, slots=slots, names=[",".join(a.name for a in g) for g in groups])
    if progress is not None and n > 1:
        progress(total, total)  # every process has read to the end
    first = parts[0]
    outcomes = {name: o for part in parts for name, o in part.agents.items()}
    ordered = [outcomes[name] for name in names]
    divergences = sorted((d for o in ordered for d in o.divergences), key=Divergence.sort_key)
    logger.info("replay of %s done: %d events up to offset %d, %d divergence(s)", swarm.name, first.events, first.end,
                len(divergences))
    return SwarmReplayResult(
        end_offset=first.end, events=first.events, agents={name: outcomes[name].hash for name in names},
        continued=first.continued,
        stream_hash=first.stream_hash or "", divergences=divergences,
        steps={name: outcomes[name].steps for name in names},
        states={name: outcomes[name].state for name in names},
        states_checked={name: outcomes[name].states_checked for name in names},
        states_recorded={name: outcomes[name].states_recorded for name in names}, swarm=swarm.name,
        resumed_from={name: cp.at for name, cp in starts.items()},
        folds={name: captured for name in names if (captured := outcomes[name].fold) is not None},
        unverified_from={name: unverified for name in names
                         if (unverified := outcomes[name].unverified) is not None},
        anomalies=sorted((a for name in names for a in outcomes[name].anomalies), key=lambda a: (a.offset, a.agent)),
        anomalies_omitted=sum(outcomes[name].anomalies_omitted for name in names))


def _verified_checkpoints(*, backend: LogBackend, topic: str, registry: SchemaRegistry, decoder: Decoder,
                          swarm: Swarm, names: list[str], before: int) -> dict[str, Checkpoint]:
    """Each agent's latest checkpoint this code can restore and the log vouches for (:meth:`Checkpoints.resume`)."""
    version = code_version(swarm)
    found: dict[str, Checkpoint] = {}
    for name in names:
        checkpoints = Checkpoints(backend=backend, topic=topic, registry=registry, code_version=version, agent=name,
                                  every=0)
        checkpoint = checkpoints.latest(before=before)
        if checkpoint is None:
            continue
        history = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=[name], start=checkpoint.at)
        try:
            core = AgentCore(agent=swarm.agent(name), decoder=decoder, history=history.agent(name), live_sink=None)
            refused = checkpoints.resume(core, history.agent(name), checkpoint)
        finally:
            history.close()
        if refused is not None:
            logger.warning("replay of %s: agent %s's checkpoint at offset %d is refused: %s; it folds from the log "
                           "start", swarm.name, name, checkpoint.at, refused)
            continue
        found[name] = checkpoint
    if found:
        logger.info("replay of %s: from checkpoints (%s)", swarm.name,
                    ", ".join(f"{n} at {cp.at}" for n, cp in sorted(found.items())))
    return found


def processes_for(workers: int | None, *, agents: int, events: int, alone: bool) -> int:
    """How many processes a swarm replay folds its agents in (see :func:`replay_swarm_log`)."""
    if workers is not None and workers < 1:
        raise UsageError(f"workers must be 1 or more, not {workers}")
    if alone or agents < 2 or not _processes.can_fork():
        return 1
    if workers is None:  # as many as help: none for a short log
        return 1 if events < MIN_EVENTS_TO_SPLIT else min(agents, _processes.available_cpus())
    return min(agents, workers)


def _fold(*, backend: LogBackend, topic: str, decoder: Decoder, agents: list[Agent], low: int, to: int | None,
          cut: int | None, past: dict[str, set[int]], committed: dict[str, int], strict: bool, group: str | None,
          reset: bool, hash_stream: bool, progress: Callable[[int, int], None] | None, total: int,
          part: _processes.Part, live_states: LiveStates | None, traced: Any, swarm: Swarm,
          starts: dict[str, Checkpoint], folds: bool = False) -> _PartOutcome:
    """Fold ``agents`` over the log (all of them, or one process's share): every message read once."""
    names = [a.name for a in agents]
    # Each process checks the routing headers of its share of the messages against their envelopes
    # and routes the rest by their headers: every header is checked once, and one that lies fails
    # the replay (a process's error is the replay's), so none can steer a fold.
    # The agents' recorded history, read ahead of the fold through the fold's own reader; how far each
    # live agent got (its group's committed position, or past its last recorded step) is known as it scans.
    history = LogHistory(backend=backend, topic=topic, decoder=decoder, agents=names, start=low, end=cut,
                         check=(part.index, part.count), past=past, committed=committed)
    cores = [AgentCore(agent=a, decoder=decoder, history=history.agent(a.name), live_sink=None, strict=strict,
                       live_states=live_states) for a in agents]
    for core in cores:
        if core.name in starts:
            restore(core, starts[core.name].fold)  # verified by the caller; the fold joins at its position
    # The offsets read, marked once by the dispatcher for every agent from where the fold starts: what tells
    # a hole (.anomalies); a cause before that (a fold from checkpoints) is asked of the log.
    presence = Presence(topic=topic, start=min((c.position for c in cores), default=low))
    if starts:
        presence.before = LogProbe(backend=backend, topic=topic)
    replay = traced.start_replay() if traced is not None else None
    if traced is not None:
        for core in cores:
            core.tracer = traced.step_tracer(topic=topic, agent=core.name, replay=replay)
    hasher = StreamHasher() if hash_stream else None
    events = 0
    continued = False
    last_report = time.monotonic()
    try:
        # Every message decoded, states and the recorded history alive: see swarmlog.log.hotloop.
        with backend.reader(topic, group=group) as reader, fewer_collections():
            read_from_log_start(backend, reader, topic=topic, group=group, low=low, reset=reset)
            dispatch = Dispatcher(cores=cores, presence=presence)
            apply = dispatch.apply
            position = reader.position
            # Every message is routed once, by its envelope, its headers checked against it as the
            # history scans its batch (a lying one is refused there): no header can steer the fold.
            for batch, routes in history.batches(reader.batches(end=to, batch_size=READ_BATCH)):
                if hasher is not None:
                    hasher.update_batch(batch)
                if not events and batch and batch[0].offset() == 0:
                    continued = routes[0][0] == RUN_CONTINUED  # the log starts with a link (.continued)
                for m, r in zip(batch, routes, strict=True):
                    apply(m, r)
                events += len(batch)
                part.report(position.end_offset)
                if progress is not None:
                    progress(position.end_offset, total)
                if not part.in_child and time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                    last_report = time.monotonic()
                    logger.info("replay of %s: at offset %d of %d (%d events)", swarm.name, position.end_offset,
                                low + total, events)
            end = position.end_offset
            dispatch.sync()
            if group is not None:
                reader.commit(end)
    finally:
        history.close()
    for core in cores:
        core.finish()  # everything up to the end (or the cut) has been scanned: how far each agent got is known
    if traced is not None and replay is not None:
        traced.end_replay(replay, swarm=swarm,
                          divergences=sorted((d for c in cores for d in c.divergences), key=Divergence.sort_key))
    return _PartOutcome(end=end, events=events, stream_hash=hasher.hexdigest() if hasher is not None else None,
                        continued=continued,
                        agents={c.name: _AgentOutcome(hash=c.state_hash(), steps=c.steps, state=c.agent.state,
                                                      states_checked=c.states_checked,
                                                      states_recorded=c.history.digests_recorded,
                                                      unverified=c.unverified,
                                                      divergences=c.divergences, anomalies=c.watch.anomalies,
                                                      anomalies_omitted=c.watch.omitted,
                                                      fold=capture(c) if folds else None)
                                for c in cores})
