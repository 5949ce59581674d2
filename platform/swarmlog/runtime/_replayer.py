"""Replaying a whole swarm's code against its log.

Internal; the public entry point is :func:`swarmlog.replay.replay_swarm`.

Every agent's handlers re-run, in offset order, on the inputs the log recorded;
effects and LLM calls are served from the log; every output is compared with the
one the log recorded for that step, and every step's resulting state with the
digest the live agent recorded for it (``_digests``). Nothing is written. With the
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

from ..agent import Swarm
from ..hashing import StreamHasher
from ..log.base import LogBackend, read_from_log_start
from ..observe import tracing
from ..protocol import agent_group
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from . import _lookahead
from ._core import AgentCore, Divergence
from ._dispatch import Dispatcher
from ._index import steps_past
from ._lookahead import Lookahead
from ._statediff import LiveStates

logger = logging.getLogger(__name__)

_PROGRESS_EVERY_S = 10.0


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
        }


def replay_swarm_log(*, backend: LogBackend, swarm: Swarm, topic: str, registry: SchemaRegistry,
                     to: int | None = None, strict: bool = False, group: str | None = None, reset: bool = True,
                     progress: Callable[[int, int], None] | None = None,
                     live_states: LiveStates | None = None) -> SwarmReplayResult:
    decoder = Decoder(registry)
    logger.info("replaying swarm %s against topic %s%s%s", swarm.name, topic,
                f" up to offset {to}" if to is not None else "", f" as consumer group {group}" if group else "")
    agents = swarm.agents()
    names = [a.name for a in agents]
    low, high = backend.watermarks(topic)
    # Exact at a cut: the state is the prefix's alone (indexes end at the cut); what lies past it
    # only tells a step whose outputs the cut left out (unverified) from one that wrote none.
    cut = to if to is not None and to < high else None
    past = (steps_past(backend=backend, topic=topic, decoder=decoder, agents=names, start=cut)
            if cut is not None else {})
    ahead = Lookahead(backend=backend, topic=topic, decoder=decoder, agents=names, start=low, end=cut)
    cores = [AgentCore(agent=a, decoder=decoder, index=ahead.indexes[a.name], live_sink=None, strict=strict,
                       live_states=live_states) for a in agents]
    by_name = {core.name: core for core in cores}
    committed: dict[str, int] = {}
    for core in cores:
        # How far each live agent got: its committed position, or past its last recorded step (known
        # as the lookahead scans).
        at = backend.committed(agent_group(topic, core.name), topic)
        committed[core.name] = at if at is not None else -1
        core.past_cut = past.get(core.name, set())

    def learn_reach(name: str) -> None:
        core = by_name[name]
        last_step = max(ahead.max_step[name], max(core.past_cut, default=-1))
        core.reach = max(committed[name], last_step + 1)

    for name in names:
        learn_reach(name)
    ahead.on_miss = learn_reach
    traced = tracing.current()
    replay = traced.start_replay() if traced is not None else None
    if traced is not None:
        for core in cores:
            core.tracer = traced.step_tracer(topic=topic, agent=core.name, replay=replay)
    hasher = StreamHasher()
    events = 0
    total = (min(high, to) if to is not None else high) - low
    last_report = time.monotonic()
    try:
        with backend.reader(topic, group=group) as reader:
            read_from_log_start(backend, reader, topic=topic, group=group, low=low, reset=reset)
            dispatch = Dispatcher(cores=cores)
            apply = dispatch.apply
            # Every message is routed once, by its envelope, its headers checked against it as the
            # lookahead scans its batch (a lying one is refused there): no header can steer the fold.
            for batch, routes in ahead.batches(reader.batches(end=to, batch_size=_lookahead.READ_BATCH)):
                hasher.update_batch(batch)
                for m, r in zip(batch, routes, strict=True):
                    apply(m, r)
                events += len(batch)
                if progress is not None:
                    progress(reader.position.end_offset - low, total)
                if time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                    last_report = time.monotonic()
                    logger.info("replay of %s: at offset %d of %d (%d events)", swarm.name,
                                reader.position.end_offset, low + total, events)
            end = reader.position.end_offset
            dispatch.sync()
            if group is not None:
                reader.commit(end)
    finally:
        ahead.close()
    for core in cores:
        learn_reach(core.name)  # everything up to the end (or the cut) has been scanned
        core.finish()
    divergences = sorted((d for c in cores for d in c.divergences), key=Divergence.sort_key)
    if traced is not None and replay is not None:
        traced.end_replay(replay, swarm=swarm, divergences=divergences)
    logger.info("replay of %s done: %d events up to offset %d, %d divergence(s)", swarm.name, events, end,
                len(divergences))
    return SwarmReplayResult(
        end_offset=end, events=events, agents={c.name: c.state_hash() for c in cores},
        stream_hash=hasher.hexdigest(), divergences=divergences, steps={c.name: c.steps for c in cores},
        states={c.name: c.agent.state for c in cores},
        states_checked={c.name: c.states_checked for c in cores},
        states_recorded={c.name: len(c.index.digests) for c in cores}, swarm=swarm.name,
        unverified_from={c.name: c.unverified for c in cores if c.unverified is not None})
