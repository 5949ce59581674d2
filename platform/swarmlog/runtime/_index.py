"""The first pass over a log, before a live agent folds it (a swarm replay reads ahead instead: ``_lookahead``).

A replayed step needs its recorded effects and LLM calls *while its handler runs*,
but the log holds them after the step's input. So one pass ahead of the fold learns,
for each agent: the last step it recorded outputs for (the ``sl.step`` header, checked
against the event id in the envelope; no payload decoded), its recorded effects, and its recorded state digests
(decoded only they; :mod:`.digests`). The live worker uses the last step to know
where history ends and live work begins (so does the simulator's stepper, ``driven``), and compares
each step's state with its recorded digest. :func:`steps_past` serves a swarm replay cut at
an offset.

A replay cut at offset N (``--to N``) indexes only the log before N: the state it
computes is a function of that prefix alone, so the same cut replays to the same state
however long the log has grown since. What lies past the cut is only *looked at*, by
:func:`steps_past`: which steps have outputs there, so that a step whose outputs the cut
left out is reported unverified rather than as a divergence. A step whose digest the cut
left out is not checked.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass, field

from ..errors import SwarmlogError
from ..events import Event
from ..log.base import LogBackend
from ..protocol import RECORDED_EFFECTS, STATE_DIGEST, parse_step
from ..schema.codec import Decoder
from .digests import DigestRecord, RecordedDigests

NO_LIVE_STEPS = sys.maxsize
"""``OwnIndex.last_step`` of a replay (the swarm replayer's, the debugger's): every recorded output is
history, nothing here runs live."""


@dataclass(slots=True)
class OwnIndex:
    """What the first pass learns about one agent's own events."""

    last_step: int = -1
    """Highest step with recorded outputs (wall-clock firings, which name no step, excluded)."""
    effects: dict[str, Event] = field(default_factory=dict)
    """Event id -> the recorded ``effect.recorded`` / ``llm.call`` with that id."""
    digests: RecordedDigests = field(default_factory=RecordedDigests)
    """The agent's recorded state digests, by step."""


def index_log(*, backend: LogBackend, topic: str, decoder: Decoder, agents: Collection[str],
              end: int | None = None) -> tuple[dict[str, OwnIndex], int]:
    """One :class:`OwnIndex` per agent of ``agents``, and the offset the pass read up to."""
    indexes = {name: OwnIndex() for name in agents}
    with backend.reader(topic) as reader:
        reader.assign(0)
        route = decoder.route
        for batch in reader.batches(end=end):
            for m in batch:
                # The envelope's route, headers checked against it (RoutingHeaderMismatch): a lying
                # sl.agent or sl.step would move where an agent's history ends.
                etype, agent, _, step = route(m)
                idx = indexes.get(agent)
                if idx is None:
                    continue
                if step is not None and step > idx.last_step:
                    idx.last_step = step
                is_digest = etype == STATE_DIGEST
                if not is_digest and etype not in RECORDED_EFFECTS:
                    continue
                try:
                    writer, rec = decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue  # not an event: replay reports it where it folds it
                if is_digest:
                    idx.digests.add(DigestRecord.from_payload(rec["payload"]))
                elif parse_step(rec["event_id"]) is not None:
                    idx.effects[rec["event_id"]] = Event.from_message(m, writer, rec)
        return indexes, reader.position.end_offset


def steps_past(*, backend: LogBackend, topic: str, decoder: Decoder, agents: Collection[str],
               start: int) -> dict[str, set[int]]:
    """Per agent, the steps that have outputs at or after offset ``start`` (routes only, no payload decoded).

    An agent's outputs are in the log in step order (one producer, transactions committed in
    order), so a step found here has no output before ``start`` that comes after one found here.
    """
    past: dict[str, set[int]] = {name: set() for name in agents}
    with backend.reader(topic) as reader:
        reader.assign(start)
        route = decoder.route
        for batch in reader.batches():
            for m in batch:
                # The envelope's route, headers checked against it (RoutingHeaderMismatch): a lying
                # sl.agent or sl.step would call a diverged step merely unverified.
                _, agent, _, step = route(m)
                steps = past.get(agent)
                if steps is not None and step is not None:
                    steps.add(step)
    return past
