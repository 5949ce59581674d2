"""Branching a run: ``swarmlog fork --at N --to-topic T2``.

The fork is a new single-partition topic holding the source's prefix ``[0, N)`` exactly
— every event at its own offset, byte for byte, with its headers and timestamp
(:meth:`swarmlog.log.base.LogBackend.create_copy`), nothing readable between them up to N —
followed, at N or just after, by one ``run.forked`` event saying where it came from
(source topic, N, the number of events, and the stream hash of the prefix, which
equals the source's over ``[0, N)``). The source is only read.

``swarmlog run`` on the fork then does what it does after any restart: every agent
rebuilds from offset zero, its steps with recorded outputs replay as history, and
everything after runs live — with whatever code it is given now. Steps whose input is
in the prefix but whose outputs are not run again, live: the fork takes up the run at
N, not at the last thing the source's agents wrote before N.

**Where a fork may cut.** Not inside one step's recorded outputs: the fork's agent
would find part of a step's record (so the step is history) and not the rest (so it
could not be replayed). :func:`fork` refuses such an N with
:class:`~swarmlog.errors.ForkPointInsideStep`, which names the two nearest offsets that
work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ForkPointInsideStep
from ..kafka.backend import backend_for
from ..log.append import EventLog
from ..log.base import LogBackend
from ..log.hashing import StreamHasher
from ..log.protocol import RUN_FORKED, RUN_STARTED
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings

__all__ = ["FORK_AGENT", "Forked", "check_cut", "fork"]

logger = logging.getLogger(__name__)

FORK_AGENT = "swarmlog"
"""Who ``run.forked`` is written by (as ``run.started`` is)."""


@dataclass(frozen=True, slots=True)
class Forked:
    source: str
    topic: str
    at: int
    events: int
    prefix_stream_hash: str
    forked_offset: int
    """The offset of the fork's ``run.forked`` event: the fork's own history starts after it."""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "topic": self.topic, "at": self.at, "events": self.events,
                "prefix_stream_hash": self.prefix_stream_hash, "forked_offset": self.forked_offset}


def check_cut(backend: LogBackend, topic: str, at: int, decoder: Decoder) -> None:
    """Refuse an ``at`` that falls inside one step's recorded outputs (routes only, no payload decoded;
    a routing header that lies is :class:`~swarmlog.errors.RoutingHeaderMismatch`).

    An agent's records come in step order (its transactions commit in order), so a step is cut
    in two exactly when the agent's last record before ``at`` and its first record from ``at`` on
    belong to the same step.
    """
    last_before: dict[str, tuple[int, int]] = {}  # agent -> (its last step before `at`, that step's first record)
    straddling: dict[str, list[int]] = {}  # agent -> [step, first record, last record seen]
    settled: set[str] = set()
    route = decoder.route
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                _, who, _, step = route(m)
                if step is None:
                    continue
                off = m.offset()
                if off < at:
                    if who not in last_before or last_before[who][0] != step:
                        last_before[who] = (step, off)
                    continue
                if who in settled or who not in last_before:
                    continue
                step0, first = last_before[who]
                if step == step0:
                    straddling[who] = [step0, first, off]
                    continue
                if who in straddling:
                    _, _, last = straddling[who]
                    raise ForkPointInsideStep(at=at, agent=who, step=step0, first=first, last=last)
                settled.add(who)
                if len(settled) == len(last_before):
                    return
    for who, (step0, first, last) in straddling.items():
        raise ForkPointInsideStep(at=at, agent=who, step=step0, first=first, last=last)


def fork(*, settings: Settings, at: int, to_topic: str, topic: str | None = None,
         registry: SchemaRegistry | None = None, backend: LogBackend | None = None) -> Forked:
    """Copy the log's prefix before ``at`` into the new topic ``to_topic`` and record where it came from."""
    source = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)
    at = min(at, backend.watermarks(source)[1])  # past the end: the whole log
    decoder = Decoder(registry)
    check_cut(backend, source, at, decoder)
    hasher = StreamHasher()
    run_id = [""]

    def prefix() -> Iterator[Any]:
        with backend.reader(source) as reader:
            reader.assign(0)
            for batch in reader.batches(end=at):
                for m in batch:
                    hasher.update(m.offset(), m.value())
                    if not run_id[0] and decoder.route(m).event_type == RUN_STARTED:
                        run_id[0] = decoder.decode(m.value(), m.offset())[1]["run_id"]
                    yield m

    end = backend.create_copy(to_topic, prefix(), end=at)
    logger.info("forked %s before offset %d into %s: %d events (next offset %d)", source, at, to_topic,
                hasher.count, end)
    with EventLog(settings=settings, registry=registry, topic=to_topic, run_id=run_id[0], backend=backend) as log:
        forked_at = log.append(RUN_FORKED, {"source_topic": source, "at": at, "events": hasher.count,
                                            "prefix_stream_hash": hasher.hexdigest()}, agent=FORK_AGENT)
    return Forked(source=source, topic=to_topic, at=at, events=hasher.count, prefix_stream_hash=hasher.hexdigest(),
                  forked_offset=forked_at)
