"""Replaying a whole swarm's code against its log.

Internal; the public entry point is :func:`swarmlog.replay.replay_swarm`.

Every agent's handlers re-run, in offset order, on the inputs the log recorded;
effects and LLM calls are served from the log; every output is compared with the
one the log recorded for that step. Nothing is written. With the code that made
the log, the result is the live state hashes and no divergence. With changed
code, it says where the changed program first diverges, and the state it would
have reached on the same inputs: a "what if" on a production failure.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from ._core import AgentCore, Divergence, OwnIndex, parse_step, route
from ._worker import group_id
from .agent import Swarm
from .codec import H_AGENT, H_STEP, H_TYPE, Decoder
from .errors import SwarmlogError
from .events import Event
from .reader import LogReader
from .schemas import SchemaRegistry
from .settings import Settings
from .replay import committed_offset
from .state import StreamHasher
from .topic import admin_client

_RECORDED_EFFECTS = (b"effect.recorded", b"llm.call")


@dataclass(slots=True)
class SwarmReplayResult:
    end_offset: int
    events: int
    agents: dict[str, str]
    stream_hash: str
    divergences: list[Divergence] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    unverified_from: dict[str, int] = field(default_factory=dict)
    """Agent -> first offset whose outputs could not be checked: the live agent never got that far."""
    states: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def first_divergence(self) -> Divergence | None:
        return min(self.divergences, key=lambda d: d.offset) if self.divergences else None

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
        }


def _index_effects(settings: Settings, topic: str, decoder: Decoder, names: set[str],
                   end: int | None) -> tuple[dict[str, OwnIndex], dict[str, int]]:
    """Pass 1: every agent's recorded effects and LLM calls (decoded only they), and the last
    step each agent recorded an output for (from the ``sl.step`` header, no decoding)."""
    indexes = {n: OwnIndex(last_step=sys.maxsize) for n in names}
    last_step = dict.fromkeys(names, -1)
    with LogReader(settings=settings, topic=topic) as reader:
        reader.assign(0)
        for batch in reader.batches(end=end):
            for m in batch:
                headers = m.headers()
                if not headers:
                    continue
                agent = step = None
                is_effect = False
                for k, v in headers:
                    if k == H_STEP:
                        step = int(v)
                    elif k == H_AGENT:
                        agent = v.decode()
                    elif k == H_TYPE and v in _RECORDED_EFFECTS:
                        is_effect = True
                if step is not None and agent in last_step and step > last_step[agent]:
                    last_step[agent] = step
                if not is_effect:
                    continue
                try:
                    writer, rec = decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue
                idx = indexes.get(rec["agent_id"])
                if idx is not None and parse_step(rec["event_id"]) is not None:
                    ts = m.timestamp()
                    idx.effects[rec["event_id"]] = Event.from_record(
                        m.offset(), writer.event_type, writer.version, rec, ts[1] if ts[0] else None)
    return indexes, last_step


def replay_swarm_log(*, settings: Settings, swarm: Swarm, topic: str, registry: SchemaRegistry,
                     to: int | None = None, strict: bool = False,
                     progress: Callable[[int, int], None] | None = None) -> SwarmReplayResult:
    decoder = Decoder(registry)
    agents = swarm.agents()
    indexes, last_steps = _index_effects(settings, topic, decoder, {a.name for a in agents}, to)
    cores = [AgentCore(agent=a, decoder=decoder, index=indexes[a.name], live_sink=None, strict=strict)
             for a in agents]
    admin = admin_client(settings)
    for core in cores:
        # How far each live agent got: its committed position, or past its last recorded step.
        committed = committed_offset(admin, group=group_id(topic, core.name), topic=topic)
        core.reach = max(committed if committed is not None else -1, last_steps[core.name] + 1)
    hasher = StreamHasher()
    events = 0
    with LogReader(settings=settings, topic=topic) as reader:
        low, high = reader.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
        total = (min(high, to) if to is not None else high) - low
        reader.assign(low)
        for batch in reader.batches(end=to):
            for m in batch:
                hasher.update(m.offset(), m.value())
                events += 1
                etype, writer, recipient = route(m.headers())
                for core in cores:
                    core.process(m, etype, writer, recipient)
            if progress is not None:
                progress(reader.position.end_offset - low, total)
        end = reader.position.end_offset
    for core in cores:
        core.finish()
    divergences = sorted((d for c in cores for d in c.divergences), key=lambda d: d.offset)
    return SwarmReplayResult(
        end_offset=end, events=events, agents={c.name: c.state_hash() for c in cores},
        stream_hash=hasher.hexdigest(), divergences=divergences, steps={c.name: c.steps for c in cores},
        states={c.name: c.agent.state for c in cores},
        unverified_from={c.name: c.unverified for c in cores if c.unverified is not None})
